#include "worker/bootstrap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/transport/iface.h"
#include "collectives/transport/link.h"
#include "collectives/transport/tcp.h"
#include "collectives/transport/tcp_gate.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/channel.h"
#include "worker/elastic.h"
#include "worker/mpi_exchange.h"
#include "worker/placement.h"

void hk_mesh_close(hk_mesh *m, int size) {
  hk_tcp_close(&m->listen_fd);
  hk_tcp_close(&m->launcher_fd);
  hk_tcp_close(&m->ctrl_fd);
  hk_tcp_close(&m->watch_fd);
  if (m->links) {
    for (int r = 0; r < size; r++)
      hk_link_close(&m->links[r]);
    free(m->links);
    m->links = NULL;
  }
  free(m->peer_fds); /* the links owned those */
  m->peer_fds = NULL;
  if (m->ctrl) {
    for (int r = 0; r < size; r++)
      hk_ctrl_close(&m->ctrl[r]);
    free(m->ctrl);
    m->ctrl = NULL;
  }
  if (m->ctrl_fds) {
    for (int r = 0; r < size; r++)
      hk_tcp_close(&m->ctrl_fds[r]);
    free(m->ctrl_fds);
    m->ctrl_fds = NULL;
  }
}

static hk_status parse_hostport(const char *s, char *host, size_t cap,
                                uint16_t *port) {
  const char *colon = strrchr(s, ':');
  char *end;
  long p = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || colon == s || (size_t)(colon - s) >= cap || *end ||
      colon[1] == '\0' || p < 1 || p > 65535)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_RENDEZVOUS='%s' is not host:port (set by hkrun)", s);
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = '\0';
  *port = (uint16_t)p;
  return HK_OK;
}

/* ---- accepting side: run on its own thread while we connect ---- */

/* Where the data connections of the mesh go while it is built. */
typedef struct data_plan {
  int k;              /* HK_SOCKETS_PER_PEER: connections per pair */
  const int *host_of; /* host index of every rank when links to other
                         hosts are MPI; NULL: every link is TCP */
  int *fds;           /* fds[r * k + s]: stream s to rank r, or -1 */
} data_plan;

/* Is the link to rank r made of TCP connections? */
static int tcp_to(const hk_ctx *ctx, const data_plan *d, int r) {
  return !d->host_of || d->host_of[r] == d->host_of[ctx->rank];
}

typedef struct acceptor {
  hk_ctx *ctx;
  data_plan *data;
  double deadline;
  hk_status status;
  char error[HK_ERROR_MSG_CAP];
} acceptor;

/* Accepts one connection and files it where its HELLO says it belongs:
 * a data connection (one of k streams) from a lower rank, or (on rank 0)
 * a control one. */
static hk_status accept_one(hk_ctx *ctx, hk_tcp_gate *g, data_plan *d,
                            double deadline) {
  int fd;
  hk_status st = hk_tcp_gate_accept(g, deadline, &ctx->io, &fd);
  if (st != HK_OK)
    return st;
  hk_msg m;
  hk_buf scratch = {0};
  hk_io io = {ctx->io.abort_fd, deadline - hk_now()};
  st = hk_channel_recv(fd, &m, &scratch, &io, "a connecting peer");
  hk_buf_free(&scratch);
  if (st != HK_OK) {
    close(fd);
    return st;
  }
  int r = m.u.hello.rank, s = m.u.hello.stream;
  int ok = m.type == HK_MSG_HELLO && r >= 0 && r < ctx->size;
  if (ok && m.u.hello.channel == HK_CHANNEL_DATA && m.u.hello.streams != d->k) {
    close(fd);
    st = hk_fail(HK_ERR_CONFIG,
                 "rank %d opens %u data connections to each peer but %d "
                 "here (HK_SOCKETS_PER_PEER, or HK_AUTOTUNE_SOCKETS with "
                 "HK_AUTOTUNE, the larger): every rank must use the same "
                 "values",
                 r, m.u.hello.streams, d->k);
    hk_msg_free(&m);
    return st;
  }
  if (ok && m.u.hello.channel == HK_CHANNEL_DATA &&
      m.u.hello.stripes != ctx->cfg.sockets_per_peer) {
    close(fd);
    st = hk_fail(HK_ERR_CONFIG,
                 "rank %d carries each link's stream over %u connection(s) "
                 "but HK_SOCKETS_PER_PEER=%zu here: every rank must use the "
                 "same value",
                 r, m.u.hello.stripes, ctx->cfg.sockets_per_peer);
    hk_msg_free(&m);
    return st;
  }
  if (ok && m.u.hello.channel == HK_CHANNEL_DATA) {
    ok = r < ctx->rank && tcp_to(ctx, d, r) && d->fds[r * d->k + s] < 0;
    if (ok)
      d->fds[r * d->k + s] = fd;
  } else if (ok) {
    ok = ctx->rank == 0 && r > 0 && ctx->mesh.ctrl_fds[r] < 0;
    if (ok)
      ctx->mesh.ctrl_fds[r] = fd;
  }
  if (!ok) {
    close(fd);
    st = hk_fail(HK_ERR_PROTOCOL,
                 "unexpected connection during start-up: message type %u, "
                 "rank %d, channel %u, stream %d",
                 m.type, r, m.u.hello.channel, s);
  }
  hk_msg_free(&m);
  return st;
}

static void *accept_main(void *arg) {
  acceptor *a = arg;
  hk_ctx *ctx = a->ctx;
  /* k data connections from every lower rank the link to which is TCP;
   * control ones on rank 0 */
  int count = ctx->rank == 0 ? ctx->size - 1 : 0;
  for (int r = 0; r < ctx->rank; r++)
    count += tcp_to(ctx, a->data, r) ? a->data->k : 0;
  /* every handshake at once: connections that never prove the secret
   * (anyone on the host can connect) hold up nobody (tcp_gate.h) */
  hk_tcp_gate *g = NULL;
  a->status = hk_tcp_gate_open(ctx->mesh.listen_fd, &ctx->secret, &g);
  for (int i = 0; i < count && a->status == HK_OK; i++)
    a->status = accept_one(ctx, g, a->data, a->deadline);
  hk_tcp_gate_close(g);
  if (a->status != HK_OK)
    snprintf(a->error, sizeof a->error, "%s", hk_last_error());
  return NULL;
}

/* ---- connecting side ---- */

static hk_status connect_peer(hk_ctx *ctx, const hk_wire_peer *peer, int rank,
                              hk_channel channel, int stream, int streams,
                              double deadline, int *fd) {
  char who[32];
  snprintf(who, sizeof who, "rank %d", rank);
  hk_status st = hk_tcp_connect(peer->host, peer->port, &ctx->secret, deadline,
                                &ctx->io, who, fd);
  if (st != HK_OK)
    return st;
  hk_msg hello = {.type = HK_MSG_HELLO};
  hello.u.hello.rank = ctx->rank;
  hello.u.hello.channel = (uint8_t)channel;
  hello.u.hello.stream = (uint8_t)stream;
  hello.u.hello.streams = (uint8_t)streams;
  hello.u.hello.stripes =
      (uint8_t)(channel == HK_CHANNEL_DATA ? ctx->cfg.sockets_per_peer : 1);
  hk_buf scratch = {0};
  st = hk_channel_send(*fd, &hello, &scratch, &ctx->io, who);
  hk_buf_free(&scratch);
  return st;
}

/* How long a rank whose start timeout passed still listens for hkrun's
 * word on who is missing, s. */
#define RENDEZVOUS_GRACE_S 2.0

/* Waits for PEERS from hkrun; an ABORT instead means the job is over. */
static hk_status rendezvous(hk_ctx *ctx, const char *host, uint16_t port,
                            const char *my_addr, uint16_t my_port,
                            double deadline, hk_msg *peers) {
  hk_io io = {-1, deadline - hk_now()};
  hk_status st = hk_tcp_connect(host, port, &ctx->secret, deadline, &io,
                                "hkrun", &ctx->mesh.launcher_fd);
  if (st != HK_OK)
    return st;
  hk_msg reg = {.type = HK_MSG_REGISTER};
  reg.u.reg.rank = ctx->rank;
  reg.u.reg.size = ctx->size;
  reg.u.reg.pid = (int32_t)getpid();
  reg.u.reg.port = my_port;
  snprintf(reg.u.reg.host, sizeof reg.u.reg.host, "%s", my_addr);
  hk_buf scratch = {0};
  st = hk_channel_send(ctx->mesh.launcher_fd, &reg, &scratch, &io, "hkrun");
  if (st == HK_OK)
    st = hk_channel_recv(ctx->mesh.launcher_fd, peers, &scratch, &io, "hkrun");
  if (st == HK_ERR_TIMEOUT) {
    /* hkrun's clock started before ours: it is about to say who is
     * missing (an ABORT naming the ranks); give it a moment to */
    io.timeout_s = RENDEZVOUS_GRACE_S;
    if (hk_channel_recv(ctx->mesh.launcher_fd, peers, &scratch, &io, "hkrun") ==
        HK_OK)
      st = HK_OK;
  }
  hk_buf_free(&scratch);
  if (st == HK_ERR_TIMEOUT)
    return hk_fail(HK_ERR_TIMEOUT,
                   "not every rank joined within HK_START_TIMEOUT_S=%g s "
                   "(rank %d of %d waited for hkrun's peer list, and hkrun "
                   "named no missing rank)",
                   ctx->cfg.start_timeout_s, ctx->rank, ctx->size);
  if (st != HK_OK)
    return st;
  if (peers->type == HK_MSG_ABORT) {
    st = hk_fail(HK_ERR_PEER_LOST, "the job was aborted during start-up: %s",
                 peers->u.abort.reason);
    hk_msg_free(peers);
    return st;
  }
  /* an elastic job's first generation may have formed without a worker
   * that was lost meanwhile: fewer peers (hk_bootstrap places us) */
  const int fewer = ctx->cfg.elastic && peers->type == HK_MSG_PEERS &&
                    peers->u.peers.n >= 1 && (int)peers->u.peers.n < ctx->size;
  if (!fewer &&
      (peers->type != HK_MSG_PEERS || (int)peers->u.peers.n != ctx->size)) {
    st = hk_fail(HK_ERR_PROTOCOL,
                 "hkrun answered with message type %u and %u peers, expected "
                 "a peer list of %d",
                 peers->type, peers->u.peers.n, ctx->size);
    hk_msg_free(peers);
    return st;
  }
  return HK_OK;
}

int hk_bootstrap_sockets_open(const hk_config *cfg) {
  const int k = (int)cfg->sockets_per_peer, most = cfg->autotune_sockets;
  return cfg->autotune && most > k ? most : k;
}

/* Makes the data links from the connections in d (which they take over)
 * and MPI links to the ranks on other hosts. */
static hk_status make_links(hk_ctx *ctx, data_plan *d) {
  hk_mesh *m = &ctx->mesh;
  int ntcp = 0, nmpi = 0;
  for (int r = 0; r < ctx->size; r++) {
    hk_status st = HK_OK;
    if (r == ctx->rank)
      continue;
    if (tcp_to(ctx, d, r)) {
      st = hk_link_init_tcp(&m->links[r], r, &d->fds[r * d->k], d->k,
                            HK_LINK_BLOCK_BYTES);
      if (st == HK_OK)
        for (int s = 0; s < d->k; s++)
          d->fds[r * d->k + s] = -1; /* the link's now */
      if (st == HK_OK) /* --autotune: more open than carry the stream */
        st = hk_link_set_streams(&m->links[r], (int)ctx->cfg.sockets_per_peer);
      m->peer_fds[r] = hk_link_socket(&m->links[r], 0);
      ntcp += st == HK_OK;
    } else {
      st = hk_link_init_mpi(&m->links[r], r, hk_mpi_comm_handle(),
                            HK_LINK_MPI_CHUNK_BYTES);
      nmpi += st == HK_OK;
    }
    if (st != HK_OK)
      return st;
  }
  char opened[64] = "";
  if (d->k != (int)ctx->cfg.sockets_per_peer)
    snprintf(opened, sizeof opened, ", %d open for --autotune to try", d->k);
  hk_log(HK_LOG_INFO,
         "data links: %d over TCP (%d sockets each%s), %d over MPI (those to "
         "ranks of this host then move to shared memory where it can be set "
         "up: see the next line)",
         ntcp, (int)ctx->cfg.sockets_per_peer, opened, nmpi);
  return HK_OK;
}

/* Connects this rank to every other (data: k connections each, to the
 * ranks the link to which is TCP) and to rank 0 (control), given every
 * rank's listening address; then makes the links. host_of: see
 * data_plan. */
static hk_status build_mesh(hk_ctx *ctx, const hk_wire_peer *peers,
                            double deadline, const int *host_of) {
  hk_mesh *m = &ctx->mesh;
  const int k = hk_bootstrap_sockets_open(&ctx->cfg), n = ctx->size;
  data_plan d = {k, host_of, malloc((size_t)n * (size_t)k * sizeof(int))};
  m->links = calloc((size_t)n, sizeof *m->links);
  m->peer_fds = malloc((size_t)n * sizeof(int));
  if (ctx->rank == 0)
    m->ctrl_fds = malloc((size_t)n * sizeof(int));
  if (!d.fds || !m->links || !m->peer_fds || (ctx->rank == 0 && !m->ctrl_fds)) {
    free(d.fds);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the connection table");
  }
  for (int r = 0; r < n; r++) {
    m->peer_fds[r] = -1;
    if (m->ctrl_fds)
      m->ctrl_fds[r] = -1;
  }
  for (int i = 0; i < n * k; i++)
    d.fds[i] = -1;
  acceptor a = {.ctx = ctx, .data = &d, .deadline = deadline};
  pthread_t t;
  if (pthread_create(&t, NULL, accept_main, &a) != 0) {
    free(d.fds);
    return hk_fail(HK_ERR_SYSTEM, "cannot start the accept thread");
  }
  hk_status st = HK_OK;
  /* k data connections to every higher rank (the lower ones call us) */
  for (int r = ctx->rank + 1; r < n && st == HK_OK; r++)
    for (int s = 0; s < k && st == HK_OK && tcp_to(ctx, &d, r); s++)
      st = connect_peer(ctx, &peers[r], r, HK_CHANNEL_DATA, s, k, deadline,
                        &d.fds[r * k + s]);
  if (st == HK_OK && ctx->rank != 0)
    st = connect_peer(ctx, &peers[0], 0, HK_CHANNEL_CONTROL, 0, 1, deadline,
                      &m->ctrl_fd);
  char error[HK_ERROR_MSG_CAP];
  snprintf(error, sizeof error, "%s", hk_last_error());
  if (st != HK_OK)
    hk_tcp_shutdown(m->listen_fd); /* wakes the accept thread */
  pthread_join(t, NULL);
  if (st == HK_OK && a.status != HK_OK) {
    st = a.status;
    snprintf(error, sizeof error, "%s", a.error);
  }
  if (st == HK_OK) {
    st = make_links(ctx, &d);
    snprintf(error, sizeof error, "%s", hk_last_error());
  }
  for (int i = 0; i < n * k; i++) /* what no link took */
    hk_tcp_close(&d.fds[i]);
  free(d.fds);
  if (st != HK_OK)
    return hk_fail(st, "rank %d could not connect to its peers: %s", ctx->rank,
                   error);
  /* a peer cut off the network fails the job within HK_TIMEOUT_S, even
   * while every rank waits in negotiation and no transfer is running
   * (every TCP socket; an MPI link's waits time out by themselves) */
  for (int r = 0; r < ctx->size && st == HK_OK; r++) {
    const hk_link *l = &m->links[r];
    for (int s = 0; hk_link_socket(l, s) >= 0 && st == HK_OK; s++)
      st = hk_tcp_set_liveness(hk_link_socket(l, s), ctx->cfg.timeout_s);
    if (st == HK_OK && m->ctrl_fds && r > 0)
      st = hk_tcp_set_liveness(m->ctrl_fds[r], ctx->cfg.timeout_s);
  }
  if (st == HK_OK && ctx->rank != 0)
    st = hk_tcp_set_liveness(m->ctrl_fd, ctx->cfg.timeout_s);
  /* the control endpoints: tcp over those sockets (worker/intra.c moves
   * rank 0's host onto shared memory) */
  if (st == HK_OK && !(m->ctrl = calloc((size_t)n, sizeof *m->ctrl)))
    st = hk_fail(HK_ERR_NOMEM, "cannot allocate the control endpoints");
  for (int r = 0; r < n && st == HK_OK; r++)
    if (ctx->rank == 0 ? r > 0 : r == 0)
      hk_ctrl_init_tcp(&m->ctrl[r],
                       ctx->rank == 0 ? m->ctrl_fds[r] : m->ctrl_fd);
  return st;
}

/* What each rank tells the others over MPI when mpirun/srun started the
 * job (no hkrun rendezvous): where it listens, its host, and rank 0's
 * secret when the launcher set none. */
typedef struct mpi_record {
  hk_wire_peer peer;
  char host[HK_WIRE_MAX_HOST_LEN + 1];
  uint8_t secret[HK_SECRET_LEN];
  uint8_t sockets_per_peer; /* HK_SOCKETS_PER_PEER */
  uint8_t cross_transport;  /* HK_CROSS_TRANSPORT (hk_cross_transport) */
} mpi_record;

/* The data tunables every rank must share, compared with rank 0's. */
static hk_status check_agreement(const hk_ctx *ctx, const mpi_record *all) {
  static const char *cross[] = {"tcp", "mpi"};
  for (int r = 1; r < ctx->size; r++) {
    if (all[r].sockets_per_peer != all[0].sockets_per_peer)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_SOCKETS_PER_PEER is %u on rank 0 but %u on rank %d: "
                     "every rank must use the same value",
                     all[0].sockets_per_peer, all[r].sockets_per_peer, r);
    if (all[r].cross_transport != all[0].cross_transport)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_CROSS_TRANSPORT is %s on rank 0 but %s on rank %d: "
                     "every rank must use the same value",
                     cross[all[0].cross_transport & 1],
                     cross[all[r].cross_transport & 1], r);
  }
  return HK_OK;
}

/* With HK_CROSS_TRANSPORT=mpi and ranks on several hosts: MPI must let
 * hk's background thread call it, and number the ranks as hk does. */
static hk_status check_mpi_links(const hk_ctx *ctx) {
  hk_status st = hk_mpi_check_threads("HK_CROSS_TRANSPORT=mpi");
  int mrank = -1, msize = -1;
  if (st == HK_OK)
    st = hk_mpi_world(&mrank, &msize);
  if (st == HK_OK && (mrank != ctx->rank || msize != ctx->size))
    st = hk_fail(HK_ERR_CONFIG,
                 "HK_CROSS_TRANSPORT=mpi: MPI calls this process rank %d of "
                 "%d, the launcher rank %d of %d",
                 mrank, msize, ctx->rank, ctx->size);
  return st;
}

/*
 * The address this rank listens on: HK_SOCKET_IFNAME's (a name or a
 * subnet), else, when hkrun started the job (one_machine) the address by
 * which this host reaches the rendezvous (loopback for hkrun's own on
 * this host; an --rdzv-endpoint on another host gives this host's address
 * toward it), else loopback when every rank is on this host, else the
 * first interface that is up and not loopback.
 */
static hk_status choose_address(hk_ctx *ctx, int one_machine, char *addr,
                                size_t cap) {
  const char *ifname = ctx->cfg.socket_ifname;
  if (*ifname) {
    hk_status st = hk_iface_address(ifname, addr, cap);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      return hk_fail(HK_ERR_CONFIG, "HK_SOCKET_IFNAME: %s", msg);
    }
    return HK_OK;
  }
  char rdv_host[HK_WIRE_MAX_HOST_LEN + 1];
  uint16_t rdv_port;
  if (one_machine && *ctx->cfg.rendezvous &&
      parse_hostport(ctx->cfg.rendezvous, rdv_host, sizeof rdv_host,
                     &rdv_port) == HK_OK &&
      strncmp(rdv_host, "127.", 4) != 0)
    return hk_iface_route_address(rdv_host, addr, cap);
  if (one_machine || ctx->local_size == ctx->size) {
    snprintf(addr, cap, "127.0.0.1");
    return HK_OK;
  }
  char name[64];
  hk_status st = hk_iface_default_address(name, addr, cap);
  if (st == HK_OK)
    hk_log(HK_LOG_INFO, "listening on %s (%s); set HK_SOCKET_IFNAME to choose",
           name, addr);
  return st;
}

static hk_status bootstrap_mpi(hk_ctx *ctx, double deadline) {
  char addr[64];
  uint16_t port = 0;
  hk_status st = choose_address(ctx, 0, addr, sizeof addr);
  if (st == HK_OK)
    st = hk_tcp_listen(addr, &ctx->mesh.listen_fd, &port);
  if (st != HK_OK)
    return st;
  mpi_record mine;
  memset(&mine, 0, sizeof mine);
  snprintf(mine.peer.host, sizeof mine.peer.host, "%s", addr);
  mine.peer.port = port;
  if (gethostname(mine.host, sizeof mine.host - 1) != 0)
    snprintf(mine.host, sizeof mine.host, "%s", addr);
  if (ctx->secret_from_rank0 && ctx->rank == 0 &&
      (st = hk_secret_generate(&ctx->secret)) != HK_OK)
    return st;
  memcpy(mine.secret, ctx->secret.bytes, HK_SECRET_LEN);
  mine.sockets_per_peer = (uint8_t)ctx->cfg.sockets_per_peer;
  mine.cross_transport = (uint8_t)ctx->cfg.cross_transport;
  mpi_record *all = calloc((size_t)ctx->size, sizeof *all);
  hk_wire_peer *peers = calloc((size_t)ctx->size, sizeof *peers);
  const char **hosts = calloc((size_t)ctx->size, sizeof *hosts);
  hk_rank_layout *layout = calloc((size_t)ctx->size, sizeof *layout);
  int *host_of = calloc((size_t)ctx->size, sizeof *host_of);
  if (!all || !peers || !hosts || !layout || !host_of)
    st = hk_fail(HK_ERR_NOMEM, "cannot allocate the peer table");
  if (st == HK_OK)
    st = hk_mpi_allgather(&mine, sizeof mine, all, ctx->size);
  if (st == HK_OK)
    st = check_agreement(ctx, all);
  for (int r = 0; r < ctx->size && st == HK_OK; r++) {
    peers[r] = all[r].peer;
    all[r].host[HK_WIRE_MAX_HOST_LEN] = '\0';
    hosts[r] = all[r].host;
  }
  if (st == HK_OK)
    st = hk_layout_from_hosts(hosts, ctx->size, layout);
  if (st == HK_OK &&
      (ctx->hosts = malloc((size_t)ctx->size * HK_HOST_NAME_CAP)) != NULL)
    for (int r = 0; r < ctx->size; r++) /* for the monitor's report */
      memcpy(ctx->hosts + (size_t)r * HK_HOST_NAME_CAP, all[r].host,
             HK_HOST_NAME_CAP);
  if (st == HK_OK) {
    if (ctx->secret_from_rank0)
      memcpy(ctx->secret.bytes, all[0].secret, HK_SECRET_LEN);
    ctx->local_rank = layout[ctx->rank].local_rank;
    ctx->local_size = layout[ctx->rank].local_size;
    ctx->cross_rank = layout[ctx->rank].cross_rank;
    ctx->cross_size = layout[ctx->rank].cross_size;
    for (int r = 0; r < ctx->size; r++)
      host_of[r] = layout[r].cross_rank;
    ctx->layout = layout;
    layout = NULL;
  }
  /* MPI links to the ranks on other hosts, if asked for and there are */
  int mpi_links = ctx->cfg.cross_transport == HK_CROSS_MPI &&
                  ctx->cross_size > 1 && ctx->size > 1;
  if (st == HK_OK && mpi_links)
    st = check_mpi_links(ctx);
  if (st == HK_OK && ctx->cfg.cross_transport == HK_CROSS_MPI && !mpi_links &&
      ctx->rank == 0)
    hk_log(HK_LOG_INFO, "HK_CROSS_TRANSPORT=mpi is unused: every rank is on "
                        "this host, the links are TCP");
  if (st == HK_OK && ctx->size > 1)
    st = build_mesh(ctx, peers, deadline, mpi_links ? host_of : NULL);
  free(all);
  free(peers);
  free(hosts);
  free(layout);
  free(host_of);
  return st;
}

/* hkrun's (or no launcher's) layout: hosts are blocks of local_size
 * consecutive ranks. hkrun runs every rank on one host, but a worker may be
 * given HK_LOCAL_RANK/HK_LOCAL_SIZE describing smaller blocks (tests run
 * hierarchical allreduce on one machine this way). */
static hk_status block_layout(hk_ctx *ctx) {
  const int n = ctx->size, l = ctx->local_size;
  if (l < 1 || n % l != 0 || ctx->local_rank != ctx->rank % l)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_LOCAL_RANK=%d HK_LOCAL_SIZE=%d do not describe rank "
                   "%d of %d on hosts of HK_LOCAL_SIZE consecutive ranks",
                   ctx->local_rank, l, ctx->rank, n);
  ctx->layout = calloc((size_t)n, sizeof *ctx->layout);
  if (!ctx->layout)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the host layout");
  for (int r = 0; r < n; r++)
    ctx->layout[r] = (hk_rank_layout){r % l, l, r / l, n / l};
  ctx->cross_rank = ctx->rank / l;
  ctx->cross_size = n / l;
  return HK_OK;
}

/* Elastic: this worker's place in the generation peers lists (its own
 * address's index), and the layout made anew from the peers' addresses
 * (ranks listening on one address share a host: one host for hkrun's
 * own job, where all are loopback; one per agent's host with
 * --rdzv-endpoint). */
static hk_status relayout(hk_ctx *ctx, const hk_msg *peers, const char *addr,
                          uint16_t port) {
  hk_status st = hk_elastic_place(ctx, peers, addr, port);
  if (st != HK_OK)
    return st;
  const int n = (int)peers->u.peers.n;
  const char **hosts = calloc((size_t)n, sizeof *hosts);
  hk_rank_layout *layout = calloc((size_t)n, sizeof *layout);
  if (!hosts || !layout)
    st = hk_fail(HK_ERR_NOMEM, "cannot allocate the host layout");
  for (int r = 0; r < n && st == HK_OK; r++)
    hosts[r] = peers->u.peers.peers[r].host;
  if (st == HK_OK)
    st = hk_layout_from_hosts(hosts, n, layout);
  free(hosts);
  if (st != HK_OK) {
    free(layout);
    return st;
  }
  ctx->local_rank = layout[ctx->rank].local_rank;
  ctx->local_size = layout[ctx->rank].local_size;
  ctx->cross_rank = layout[ctx->rank].cross_rank;
  ctx->cross_size = layout[ctx->rank].cross_size;
  free(ctx->layout);
  ctx->layout = layout;
  return HK_OK;
}

/* Elastic: st is how connecting the job ended; a worker lost meanwhile
 * (hkrun's RESET) makes the survivors form the next generation, as often
 * as that happens. Returns the final status. */
static hk_status elastic_again(hk_ctx *ctx, hk_status st) {
  st = hk_elastic_explain(ctx, st);
  while (st == HK_ERR_RANKS_CHANGED) {
    hk_log(HK_LOG_INFO, "forming again: %s", hk_last_error());
    hk_mesh *m = &ctx->mesh;
    const int launcher_fd = m->launcher_fd; /* kept */
    m->launcher_fd = -1;
    hk_mesh_close(m, ctx->size);
    m->launcher_fd = launcher_fd;
    free(ctx->layout);
    ctx->layout = NULL;
    st = hk_bootstrap_again(ctx);
  }
  return st;
}

hk_status hk_bootstrap(hk_ctx *ctx) {
  hk_mesh *m = &ctx->mesh;
  *m = (hk_mesh){
      .listen_fd = -1, .launcher_fd = -1, .ctrl_fd = -1, .watch_fd = -1};
  ctx->cross_rank = 0;
  ctx->cross_size = 1;
  const double deadline = hk_now() + ctx->cfg.start_timeout_s;
  hk_status st;
  if (ctx->placement == HK_PLACEMENT_OMPI ||
      ctx->placement == HK_PLACEMENT_SLURM) {
    st = bootstrap_mpi(ctx, deadline);
    hk_tcp_close(&m->listen_fd);
    return st;
  }
  st = block_layout(ctx);
  if (st != HK_OK)
    return st;
  if (ctx->cfg.cross_transport == HK_CROSS_MPI) {
    if (ctx->cross_size > 1)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_CROSS_TRANSPORT=mpi: this job spans %d hosts (of %d "
                     "ranks each) but was not started by mpirun or srun "
                     "(hkrun -H starts it through mpirun), so MPI cannot "
                     "connect them",
                     ctx->cross_size, ctx->local_size);
    if (ctx->rank == 0 && ctx->size > 1)
      hk_log(HK_LOG_INFO, "HK_CROSS_TRANSPORT=mpi is unused: every rank is "
                          "on this host, the links are TCP");
  }
  /* HK_SOCKET_IFNAME (hkrun --network-interface) is checked on one host
   * as on many: a missing interface fails here, listing those that
   * exist; on one host the ranks listen on its address */
  char addr[64];
  st = choose_address(ctx, 1, addr, sizeof addr);
  if (st != HK_OK)
    return st;
  const char *rdv = ctx->cfg.rendezvous;
  if (!*rdv) {
    if (ctx->size > 1)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_SIZE=%d but HK_RENDEZVOUS is not set: start the job "
                     "with hkrun",
                     ctx->size);
    return HK_OK;
  }
  char host[HK_WIRE_MAX_HOST_LEN + 1];
  uint16_t port = 0, my_port = 0;
  st = parse_hostport(rdv, host, sizeof host, &port);
  if (st != HK_OK)
    return st;
  st = hk_tcp_listen(addr, &m->listen_fd, &my_port);
  if (st != HK_OK)
    return st;
  hk_msg peers;
  st = rendezvous(ctx, host, port, addr, my_port, deadline, &peers);
  if (st != HK_OK)
    return st;
  ctx->io.abort_fd = m->launcher_fd;
  if (ctx->cfg.elastic)
    st = relayout(ctx, &peers, addr, my_port);
  if (st == HK_OK && ctx->size > 1)
    st = build_mesh(ctx, peers.u.peers.peers, deadline, NULL);
  hk_msg_free(&peers);
  hk_tcp_close(&m->listen_fd);
  if (ctx->cfg.elastic)
    st = elastic_again(ctx, st);
  return st;
}

hk_status hk_bootstrap_watch(hk_ctx *ctx) {
  if (!ctx->cfg.elastic || ctx->rank != 0 || ctx->mesh.launcher_fd < 0 ||
      ctx->mesh.watch_fd >= 0)
    return HK_OK;
  char host[HK_WIRE_MAX_HOST_LEN + 1];
  uint16_t port = 0;
  hk_status st = parse_hostport(ctx->cfg.rendezvous, host, sizeof host, &port);
  const double deadline = hk_now() + ctx->cfg.start_timeout_s;
  hk_io io = {-1, ctx->cfg.start_timeout_s};
  if (st == HK_OK)
    st = hk_tcp_connect(host, port, &ctx->secret, deadline, &io, "hkrun",
                        &ctx->mesh.watch_fd);
  hk_msg m = {.type = HK_MSG_JOIN};
  m.u.abort.rank = ctx->slot;
  hk_buf scratch = {0};
  if (st == HK_OK)
    st = hk_channel_send(ctx->mesh.watch_fd, &m, &scratch, &io, "hkrun");
  hk_buf_free(&scratch);
  if (st != HK_OK)
    hk_tcp_close(&ctx->mesh.watch_fd);
  return st;
}

hk_status hk_bootstrap_again(hk_ctx *ctx) {
  hk_mesh *m = &ctx->mesh;
  const int launcher_fd = m->launcher_fd;
  *m = (hk_mesh){.listen_fd = -1,
                 .launcher_fd = launcher_fd,
                 .ctrl_fd = -1,
                 .watch_fd = -1};
  ctx->cross_rank = 0;
  ctx->cross_size = 1;
  char addr[64];
  uint16_t my_port = 0;
  hk_status st = choose_address(ctx, 1, addr, sizeof addr);
  if (st == HK_OK)
    st = hk_tcp_listen(addr, &m->listen_fd, &my_port);
  hk_msg peers;
  if (st == HK_OK)
    st = hk_elastic_register(ctx, addr, my_port,
                             hk_now() + ctx->cfg.start_timeout_s +
                                 ctx->cfg.elastic_timeout_s,
                             &peers);
  if (st != HK_OK) {
    hk_tcp_close(&m->listen_fd);
    return st;
  }
  ctx->io.abort_fd = launcher_fd;
  st = relayout(ctx, &peers, addr, my_port);
  if (st == HK_OK && ctx->size > 1)
    st = build_mesh(ctx, peers.u.peers.peers,
                    hk_now() + ctx->cfg.start_timeout_s, NULL);
  hk_msg_free(&peers);
  hk_tcp_close(&m->listen_fd);
  /* a peer lost meanwhile: hkrun's word (another RESET: call again; or
   * the end of the job) says more than the broken connection */
  return hk_elastic_explain(ctx, st);
}
