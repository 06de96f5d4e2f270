/*
 * intra.c - shared memory among one host's ranks (see intra.h).
 */
#include "worker/intra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/shm_ring.h"
#include "collectives/transport/link.h"
#include "collectives/transport/shm_seg.h"
#include "collectives/transport/tcp.h"
#include "common/log.h"
#include "common/status.h"
#include "worker/round.h"

struct hk_intra {
  hk_shm_seg seg;
  int me, n;          /* local index, ranks on this host */
  int *ranks;         /* ranks[i]: job rank of local index i */
  hk_shm_group group; /* the ring attached, if any */
  int have_group;
};

/* The set-up's messages, over the TCP link between a rank and the
 * host's leader (8 bytes, after the link's secret handshake). */
enum {
  MSG_HELLO = 1, /* peer -> leader: value = its HK_INTRA_TRANSPORT */
  MSG_MISMATCH,  /* leader -> peer: rank disagrees (value = its setting,
                    pad[0] = the leader's) */
  MSG_TCP,       /* leader -> peer: the host stays on TCP */
  MSG_OPEN,      /* leader -> peer: the segment exists: open it (pid, fd:
                    the leader's descriptor of it, hk_shm_seg_open) */
  MSG_ACK,       /* peer -> leader: value 1 = mapped, 0 = failed */
  MSG_GO,        /* leader -> peer: everyone mapped */
  MSG_FAIL,      /* leader -> peer: shm was required and failed */
};

typedef struct msg {
  uint8_t code, value, pad[2];
  int32_t rank;
  int32_t pid, fd; /* MSG_OPEN's */
} msg;

static const char *const names[] = {"auto", "shm", "tcp"};

static const char *setting_name(int v) {
  return v >= 0 && v <= 2 ? names[v] : "?";
}

static int fd_to(const hk_ctx *ctx, int rank) {
  return hk_link_socket(&ctx->mesh.links[rank], 0);
}

/* A message to `rank`; fd: MSG_OPEN's descriptor of the segment (else
 * -1), sent with this process's pid. */
static hk_status send_msg(hk_ctx *ctx, int rank, int code, int value,
                          int32_t about, int fd) {
  msg m = {
      (uint8_t)code, (uint8_t)value,    {(uint8_t)ctx->cfg.intra_transport, 0},
      about,         (int32_t)getpid(), fd};
  char who[32];
  snprintf(who, sizeof who, "rank %d", rank);
  return hk_tcp_send_all(fd_to(ctx, rank), &m, sizeof m, &ctx->io, who);
}

static hk_status recv_msg(hk_ctx *ctx, int rank, msg *m) {
  char who[32];
  snprintf(who, sizeof who, "rank %d", rank);
  hk_status st = hk_tcp_recv_all(fd_to(ctx, rank), m, sizeof *m, &ctx->io, who);
  if (st == HK_OK && (m->code < MSG_HELLO || m->code > MSG_FAIL))
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank %d sent message %u while setting up shared memory",
                   rank, m->code);
  return st;
}

static void free_intra(struct hk_intra *in) {
  if (!in)
    return;
  if (in->have_group)
    hk_shm_group_destroy(&in->group);
  hk_shm_seg_close(&in->seg);
  free(in->ranks);
  free(in);
}

/* The TCP link to each rank of the host becomes an shm link over the
 * segment, keeping its first socket (liveness, doorbells). */
static hk_status convert_links(hk_ctx *ctx, struct hk_intra *in) {
  for (int i = 0; i < in->n; i++) {
    if (i == in->me)
      continue;
    const int r = in->ranks[i];
    hk_link *l = &ctx->mesh.links[r];
    int fd = hk_link_take_socket(l); /* closes the others */
    hk_status st = hk_link_init_shm(l, r, &in->seg, in->me, i, fd);
    if (st != HK_OK) {
      hk_tcp_close(&fd);
      return st;
    }
    ctx->mesh.peer_fds[r] = fd;
  }
  hk_log(HK_LOG_INFO,
         "shared memory with the %d other rank(s) of this host (%zu bytes "
         "mapped, never named in /dev/shm)",
         in->n - 1, in->seg.bytes);
  return HK_OK;
}

/* Rank 0's host: the control endpoints between rank 0 and the others
 * move onto the segment's control rings, keeping their sockets (liveness,
 * doorbells). Both sides do it here, after GO (every rank mapped the
 * segment) and before the background thread starts: nothing is in flight
 * on a control socket since bootstrap, so no byte is stranded on it. */
static hk_status convert_control(hk_ctx *ctx, struct hk_intra *in) {
  if (in->ranks[0] != 0)
    return HK_OK; /* rank 0 is on another host: TCP */
  for (int i = 1; i < in->n; i++) {
    if (in->me != 0 && i != in->me)
      continue;
    const int peer = in->me == 0 ? in->ranks[i] : 0;
    hk_ctrl *c = &ctx->mesh.ctrl[peer];
    hk_status st = hk_ctrl_init_shm(c, &in->seg, i, in->me == 0, c->fd);
    if (st != HK_OK)
      return st;
  }
  hk_log(HK_LOG_INFO,
         "control messages %s through shared memory (%zu-byte rings)",
         in->me == 0 ? "with the other ranks of this host" : "with rank 0",
         in->seg.hdr->layout.ctrl_bytes);
  return HK_OK;
}

static void mark_mapped(struct hk_intra *in) {
  hk_shm_ctl *c = hk_shm_seg_ctl(&in->seg, in->me);
  atomic_store(&c->pid, (int32_t)getpid());
  atomic_store(&c->mapped, 1u);
}

/* The leader: gather the settings, create, gather the acks, go.
 * *use gets 1 when the host runs on shared memory. */
static hk_status lead(hk_ctx *ctx, struct hk_intra *in, int *use) {
  const int mine = ctx->cfg.intra_transport;
  hk_status st = HK_OK;
  int bad = -1, bad_value = 0;
  *use = 0;
  for (int i = 1; i < in->n && st == HK_OK; i++) {
    msg m;
    st = recv_msg(ctx, in->ranks[i], &m);
    if (st == HK_OK && (m.code != MSG_HELLO || m.value > 2))
      st = hk_fail(HK_ERR_PROTOCOL, "rank %d: unexpected set-up message %u",
                   in->ranks[i], m.code);
    if (st == HK_OK && m.value != mine && bad < 0) {
      bad = in->ranks[i];
      bad_value = m.value;
    }
  }
  if (st != HK_OK)
    return st;
  if (bad >= 0) {
    for (int i = 1; i < in->n; i++)
      send_msg(ctx, in->ranks[i], MSG_MISMATCH, bad_value, bad, -1);
    return hk_fail(HK_ERR_CONFIG,
                   "HK_INTRA_TRANSPORT is %s on rank %d but %s on rank %d: "
                   "every rank must use the same value",
                   setting_name(mine), ctx->rank, setting_name(bad_value), bad);
  }
  if (mine == HK_INTRA_TCP) {
    for (int i = 1; i < in->n && st == HK_OK; i++)
      st = send_msg(ctx, in->ranks[i], MSG_TCP, 0, ctx->rank, -1);
    return st;
  }
  /* rank 0's host: the control rings too (convert_control) */
  hk_shm_layout lay = {in->n, ctx->cfg.shm_slot_bytes, HK_SHM_LINK_BYTES,
                       ctx->rank == 0 ? HK_CTRL_SEND_BUFFER : 0};
  hk_status cst = (size_t)in->n * HK_SHM_LINE > lay.slot_bytes
                      ? hk_fail(HK_ERR_CONFIG,
                                "HK_SHM_SLOT_BYTES=%zu is less than 64 bytes "
                                "for each of the %d ranks of this host",
                                lay.slot_bytes, in->n)
                      : hk_shm_seg_create(&lay, &in->seg);
  char why[HK_ERROR_MSG_CAP];
  snprintf(why, sizeof why, "%s", hk_last_error());
  int created = cst == HK_OK;
  /* shm required: a failure here fails the whole host */
  int first = created ? MSG_OPEN : mine == HK_INTRA_SHM ? MSG_FAIL : MSG_TCP;
  for (int i = 1; i < in->n && st == HK_OK; i++)
    st = send_msg(ctx, in->ranks[i], first, 0, ctx->rank,
                  created ? in->seg.fd : -1);
  int all = created;
  for (int i = 1; i < in->n && st == HK_OK && created; i++) {
    msg m;
    st = recv_msg(ctx, in->ranks[i], &m);
    if (st == HK_OK && m.code != MSG_ACK)
      st = hk_fail(HK_ERR_PROTOCOL, "rank %d: unexpected set-up message %u",
                   in->ranks[i], m.code);
    if (st == HK_OK && !m.value && all) {
      all = 0;
      snprintf(why, sizeof why, "rank %d could not map it (its log says why)",
               in->ranks[i]);
    }
  }
  if (st != HK_OK)
    return st;
  if (created)
    hk_shm_seg_seal(&in->seg); /* opened by all who will: no one else */
  int code = all ? MSG_GO : mine == HK_INTRA_SHM ? MSG_FAIL : MSG_TCP;
  for (int i = 1; i < in->n && st == HK_OK && created; i++)
    st = send_msg(ctx, in->ranks[i], code, 0, ctx->rank, -1);
  if (st != HK_OK)
    return st;
  if (all) {
    mark_mapped(in);
    *use = 1;
    return HK_OK;
  }
  if (mine == HK_INTRA_SHM)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_INTRA_TRANSPORT=shm: cannot set up shared memory on "
                   "this host: %s",
                   why);
  hk_log(HK_LOG_INFO, "no shared memory on this host (%s): using TCP", why);
  return HK_OK;
}

/* A rank other than the leader: hello, then do what the leader says. */
static hk_status follow(hk_ctx *ctx, struct hk_intra *in, int *use) {
  const int leader = in->ranks[0];
  *use = 0;
  hk_status st =
      send_msg(ctx, leader, MSG_HELLO, ctx->cfg.intra_transport, ctx->rank, -1);
  msg m;
  if (st == HK_OK)
    st = recv_msg(ctx, leader, &m);
  if (st != HK_OK)
    return st;
  if (m.code == MSG_MISMATCH) /* the leader's message, on every rank */
    return hk_fail(HK_ERR_CONFIG,
                   "HK_INTRA_TRANSPORT is %s on rank %d but %s on rank %d: "
                   "every rank must use the same value",
                   setting_name(m.pad[0]), leader, setting_name(m.value),
                   m.rank);
  if (m.code == MSG_TCP)
    return HK_OK;
  if (m.code == MSG_FAIL)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_INTRA_TRANSPORT=shm: rank %d could not set up shared "
                   "memory for this host (its log says why)",
                   leader);
  if (m.code != MSG_OPEN)
    return hk_fail(HK_ERR_PROTOCOL, "rank %d: unexpected set-up message %u",
                   leader, m.code);
  hk_status ost = hk_shm_seg_open(m.pid, m.fd, &in->seg);
  if (ost == HK_OK &&
      (in->seg.hdr->layout.n != in->n ||
       in->seg.hdr->layout.slot_bytes != ctx->cfg.shm_slot_bytes)) {
    ost = hk_fail(HK_ERR_CONFIG,
                  "the shared-memory segment has %d ranks and %zu-byte "
                  "slots, this rank expects %d and HK_SHM_SLOT_BYTES=%zu",
                  in->seg.hdr->layout.n, in->seg.hdr->layout.slot_bytes, in->n,
                  ctx->cfg.shm_slot_bytes);
    hk_shm_seg_close(&in->seg);
  }
  if (ost != HK_OK)
    hk_log(HK_LOG_WARNING, "cannot map the host's shared memory: %s",
           hk_last_error());
  st = send_msg(ctx, leader, MSG_ACK, ost == HK_OK, ctx->rank, -1);
  if (st == HK_OK)
    st = recv_msg(ctx, leader, &m);
  if (st != HK_OK)
    return st;
  if (m.code == MSG_GO && ost == HK_OK) {
    mark_mapped(in);
    *use = 1;
    return HK_OK;
  }
  hk_shm_seg_close(&in->seg);
  if (m.code == MSG_FAIL || ctx->cfg.intra_transport == HK_INTRA_SHM)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_INTRA_TRANSPORT=shm: rank %d could not set up shared "
                   "memory for this host (its log says why)",
                   leader);
  return HK_OK;
}

hk_status hk_intra_setup(hk_ctx *ctx) {
  ctx->intra = NULL;
  if (ctx->size == 1 || !ctx->mesh.links)
    return HK_OK;
  const int host = ctx->layout[ctx->rank].cross_rank;
  struct hk_intra *in = calloc(1, sizeof *in);
  int *ranks = calloc((size_t)ctx->size, sizeof *ranks);
  if (!in || !ranks) {
    free(in);
    free(ranks);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the host's rank table");
  }
  in->ranks = ranks;
  for (int r = 0; r < ctx->size; r++)
    if (ctx->layout[r].cross_rank == host) {
      if (r == ctx->rank)
        in->me = in->n;
      in->ranks[in->n++] = r;
    }
  for (int i = 0; i < in->n; i++) /* the handshake runs over their sockets */
    if (i != in->me && hk_link_socket(&ctx->mesh.links[in->ranks[i]], 0) < 0) {
      free_intra(in);
      return HK_OK;
    }
  if (in->n == 1) {
    free_intra(in);
    return HK_OK;
  }
  int use = 0;
  hk_status st = in->me == 0 ? lead(ctx, in, &use) : follow(ctx, in, &use);
  if (st == HK_OK && use)
    st = convert_links(ctx, in);
  if (st == HK_OK && use)
    st = convert_control(ctx, in);
  if (st != HK_OK || !use) {
    free_intra(in);
    return st;
  }
  ctx->intra = in;
  return HK_OK;
}

hk_status hk_intra_attach_ring(hk_ctx *ctx, hk_ring *ring, const int *members) {
  struct hk_intra *in = ctx->intra;
  const int m = ring->size;
  if (!in || in->have_group || m < 2)
    return HK_OK;
  const int host = ctx->layout[ctx->rank].cross_rank;
  for (int p = 0; p < m; p++)
    if (ctx->layout[members[p]].cross_rank != host)
      return HK_OK; /* crosses hosts: stays on its (mixed) links */
  int *local = malloc(3 * (size_t)m * sizeof *local);
  if (!local)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the shm group's tables");
  int *fds = local + m;
  for (int p = 0; p < m; p++) {
    local[p] = ctx->layout[members[p]].local_rank;
    fds[p] = members[p] == ctx->rank ? -1 : fd_to(ctx, members[p]);
  }
  hk_status st = hk_shm_group_init(&in->group, &in->seg, m, ring->rank, local,
                                   members, fds, &ctx->io);
  free(local);
  if (st != HK_OK)
    return st;
  in->have_group = 1;
  hk_ring_use_shm(ring, &in->group);
  return HK_OK;
}

void hk_intra_destroy(hk_ctx *ctx) {
  free_intra(ctx->intra);
  ctx->intra = NULL;
}
