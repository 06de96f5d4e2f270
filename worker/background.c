#include "worker/background.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/ring.h"
#include "collectives/transport/tcp.h"
#include "common/log.h"
#include "common/status.h"
#include "worker/introspect.h"
#include "worker/queue.h"

/* What one pass of the loop decided. */
typedef struct cycle_state {
  int shutdown_sent; /* rank > 0: our shutdown request went out */
  int shutdown_rank; /* >= 0: everyone stops after this cycle */
  double next_cycle; /* hk_now() before which we do not send again */
} cycle_state;

/*
 * The job is over for this rank: find the best reason. A peer's dropped
 * connection is usually the echo of a rank that died, and hkrun tells every
 * rank which one and how; wait briefly for that ABORT to name the cause.
 */
static void fail_job(hk_ctx *ctx, hk_status st, const char *what) {
  char reason[HK_WIRE_MAX_REASON_LEN + 1];
  snprintf(reason, sizeof reason, "%s", what);
  if (st == HK_ERR_PEER_LOST && ctx->mesh.launcher_fd >= 0) {
    hk_io io = {-1, 2.0};
    struct pollfd p = {.fd = ctx->mesh.launcher_fd, .events = POLLIN};
    if (poll(&p, 1, 2000) > 0) {
      hk_msg m;
      if (hk_tcp_recv_msg(ctx->mesh.launcher_fd, &m, &ctx->scratch, &io,
                          "hkrun") == HK_OK) {
        if (m.type == HK_MSG_ABORT)
          snprintf(reason, sizeof reason, "%s", m.u.abort.reason);
        hk_msg_free(&m);
      }
    }
  }
  hk_log(st == HK_ERR_SHUTDOWN ? HK_LOG_INFO : HK_LOG_ERROR, "%s", reason);
  hk_queue_fail_all(ctx, st, reason);
}

/* Runs one collective that every rank agreed on. */
static hk_status execute(hk_ctx *ctx, hk_handle h) {
  const hk_wire_request *q = &h->req;
  switch (q->coll) {
  case HK_COLL_ALLREDUCE:
    return hk_ring_allreduce(&ctx->ring, h->sendbuf, h->recvbuf, q->count,
                             (hk_dtype)q->dtype, (hk_op)q->op, NULL);
  case HK_COLL_BROADCAST:
    return hk_ring_broadcast(&ctx->ring, h->recvbuf, q->count,
                             (hk_dtype)q->dtype, q->root);
  default: /* a barrier: agreement itself was the synchronisation */
    return HK_OK;
  }
}

/* Runs rank 0's ordered responses. Returns non-OK if the job failed. */
static hk_status run_responses(hk_ctx *ctx, const hk_wire_response *rs,
                               uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    hk_handle h = hk_queue_find(ctx, rs[i].name);
    if (!h)
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank 0 scheduled tensor '%s', which rank %d never "
                     "submitted",
                     rs[i].name, ctx->rank);
    if (rs[i].status != HK_OK) {
      hk_queue_complete(ctx, h, (hk_status)rs[i].status, rs[i].reason);
      continue;
    }
    double start = hk_now();
    hk_status st = execute(ctx, h);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      return hk_fail(st, "tensor '%s': %s", rs[i].name, msg);
    }
    if (h->req.coll != HK_COLL_BARRIER) /* before waiters can wake */
      hk_introspect_record(ctx, h->req.name, start, hk_now());
    hk_queue_complete(ctx, h, HK_OK, NULL);
  }
  return HK_OK;
}

/* Moves the trainer's queued handles into a request list. */
static hk_status take_requests(hk_ctx *ctx, hk_wire_request **out,
                               uint32_t *n) {
  *out = NULL;
  *n = 0;
  hk_handle list = hk_queue_take(ctx);
  uint32_t count = 0;
  for (hk_handle h = list; h; h = h->next)
    count++;
  if (!count)
    return HK_OK;
  hk_wire_request *reqs = malloc(count * sizeof *reqs);
  if (!reqs)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %u requests", count);
  uint32_t i = 0;
  for (hk_handle h = list; h; h = h->next)
    reqs[i++] = h->req;
  *out = reqs;
  *n = count;
  return HK_OK;
}

static int shutdown_requested(hk_ctx *ctx) {
  pthread_mutex_lock(&ctx->mu);
  int s = ctx->shutdown_requested;
  pthread_mutex_unlock(&ctx->mu);
  return s;
}

/* Rank > 0: send what is new; run whatever rank 0 answered. */
static hk_status worker_cycle(hk_ctx *ctx, cycle_state *cs, int send_now,
                              int ctrl_readable) {
  hk_status st = HK_OK;
  if (send_now) {
    hk_wire_request *reqs;
    uint32_t n;
    st = take_requests(ctx, &reqs, &n);
    int shut = !cs->shutdown_sent && shutdown_requested(ctx);
    if (st == HK_OK && (n > 0 || shut)) {
      hk_msg m = {.type = HK_MSG_REQUESTS};
      m.u.requests.shutdown = (uint8_t)shut;
      m.u.requests.n = n;
      m.u.requests.reqs = reqs;
      st = hk_tcp_send_msg(ctx->mesh.ctrl_fd, &m, &ctx->scratch, &ctx->io,
                           "rank 0");
      cs->shutdown_sent |= shut;
    }
    free(reqs);
    if (st != HK_OK)
      return st;
  }
  if (!ctrl_readable)
    return HK_OK;
  hk_msg m;
  st =
      hk_tcp_recv_msg(ctx->mesh.ctrl_fd, &m, &ctx->scratch, &ctx->io, "rank 0");
  if (st != HK_OK)
    return st;
  if (m.type != HK_MSG_RESPONSES) {
    hk_msg_free(&m);
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 sent message type %u, expected "
                   "responses",
                   m.type);
  }
  st = run_responses(ctx, m.u.responses.resps, m.u.responses.n);
  cs->shutdown_rank = m.u.responses.shutdown_rank;
  hk_msg_free(&m);
  return st;
}

/* Rank 0: gather requests (its own and those that arrived), answer. */
static hk_status coordinator_cycle(hk_ctx *ctx, cycle_state *cs, int send_now,
                                   const struct pollfd *pfds, int first_ctrl) {
  hk_status st = HK_OK;
  if (send_now) {
    hk_wire_request *reqs;
    uint32_t n;
    st = take_requests(ctx, &reqs, &n);
    if (st == HK_OK)
      st = hk_negotiator_add(ctx->negotiator, 0, reqs, n);
    free(reqs);
    if (st != HK_OK)
      return st;
    if (cs->shutdown_rank < 0 && shutdown_requested(ctx))
      cs->shutdown_rank = 0;
  }
  for (int r = 1; r < ctx->size; r++) {
    if (!pfds[first_ctrl + r - 1].revents)
      continue;
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    hk_msg m;
    st = hk_tcp_recv_msg(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &ctx->io,
                         who);
    if (st != HK_OK)
      return st;
    if (m.type != HK_MSG_REQUESTS) {
      hk_msg_free(&m);
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank %d sent message type %u, expected "
                     "requests",
                     r, m.type);
    }
    st = hk_negotiator_add(ctx->negotiator, r, m.u.requests.reqs,
                           m.u.requests.n);
    if (m.u.requests.shutdown && cs->shutdown_rank < 0)
      cs->shutdown_rank = r;
    hk_msg_free(&m);
    if (st != HK_OK)
      return st;
  }
  hk_wire_response *rs;
  uint32_t n;
  st = hk_negotiator_take_ready(ctx->negotiator, &rs, &n);
  if (st != HK_OK || (n == 0 && cs->shutdown_rank < 0))
    return st;
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = cs->shutdown_rank;
  m.u.responses.n = n;
  m.u.responses.resps = rs;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    st = hk_tcp_send_msg(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &ctx->io,
                         who);
  }
  if (st == HK_OK)
    st = run_responses(ctx, rs, n);
  hk_negotiator_free_responses(rs, n);
  return st;
}

/*
 * Closes the control channel politely: our side stops writing, then we read
 * until the peer closes too (at most 2 s), so a last message in flight
 * towards us never turns into a reset that destroys the shutdown response
 * still unread on the other side.
 */
static void linger(hk_ctx *ctx) {
  int *fds = ctx->rank == 0 ? ctx->mesh.ctrl_fds : &ctx->mesh.ctrl_fd;
  int first = ctx->rank == 0 ? 1 : 0, end = ctx->rank == 0 ? ctx->size : 1;
  if (ctx->size == 1)
    return;
  for (int i = first; i < end; i++)
    if (fds[i] >= 0)
      shutdown(fds[i], SHUT_WR);
  double deadline = hk_now() + 2.0;
  for (int i = first; i < end; i++) {
    char sink[4096];
    while (fds[i] >= 0 && hk_now() < deadline) {
      struct pollfd p = {.fd = fds[i], .events = POLLIN};
      if (poll(&p, 1, (int)((deadline - hk_now()) * 1000) + 1) <= 0)
        break;
      if (read(fds[i], sink, sizeof sink) <= 0)
        break;
    }
  }
}

void *hk_background_main(void *arg) {
  hk_ctx *ctx = arg;
  cycle_state cs = {0, -1, 0};
  const double cycle_s = ctx->cfg.cycle_time_ms / 1000.0;
  /* poll set: wake fd, launcher fd, then control fd(s) */
  struct pollfd *pfds = calloc((size_t)ctx->size + 2, sizeof *pfds);
  if (!pfds) {
    fail_job(ctx, HK_ERR_NOMEM, "cannot allocate the poll set");
    goto out;
  }
  int npfd = 0, wake_i, launcher_i = -1, first_ctrl;
  pfds[npfd++] = (struct pollfd){.fd = ctx->wake_fd, .events = POLLIN};
  wake_i = 0;
  if (ctx->mesh.launcher_fd >= 0) {
    launcher_i = npfd;
    pfds[npfd++] =
        (struct pollfd){.fd = ctx->mesh.launcher_fd, .events = POLLIN};
  }
  first_ctrl = npfd;
  if (ctx->size > 1) {
    if (ctx->rank == 0)
      for (int r = 1; r < ctx->size; r++)
        pfds[npfd++] =
            (struct pollfd){.fd = ctx->mesh.ctrl_fds[r], .events = POLLIN};
    else
      pfds[npfd++] = (struct pollfd){.fd = ctx->mesh.ctrl_fd, .events = POLLIN};
  }
  int pending_wake = 0;
  for (;;) {
    int timeout_ms = -1;
    if (pending_wake) {
      double left = cs.next_cycle - hk_now();
      timeout_ms = left > 0 ? (int)(left * 1000) + 1 : 0;
    }
    int rc = poll(pfds, (nfds_t)npfd, timeout_ms);
    if (rc < 0)
      continue; /* EINTR */
    if (launcher_i >= 0 && pfds[launcher_i].revents) {
      fail_job(ctx, HK_ERR_PEER_LOST, "lost connection to hkrun (did it die?)");
      break;
    }
    if (pfds[wake_i].revents) {
      uint64_t v;
      ssize_t rd = read(ctx->wake_fd, &v, sizeof v);
      (void)rd;
      pending_wake = 1;
    }
    int send_now = pending_wake && hk_now() >= cs.next_cycle;
    if (send_now) {
      pending_wake = 0;
      cs.next_cycle = hk_now() + cycle_s;
    }
    hk_status st;
    if (ctx->rank == 0) {
      st = coordinator_cycle(ctx, &cs, send_now, pfds, first_ctrl);
    } else {
      st = worker_cycle(ctx, &cs, send_now, pfds[first_ctrl].revents != 0);
    }
    if (st != HK_OK) {
      char what[HK_ERROR_MSG_CAP];
      snprintf(what, sizeof what, "%s", hk_last_error());
      fail_job(ctx, st, what);
      break;
    }
    if (cs.shutdown_rank >= 0) {
      char why[64];
      snprintf(why, sizeof why, "rank %d called hk_shutdown", cs.shutdown_rank);
      fail_job(ctx, HK_ERR_SHUTDOWN, why);
      break;
    }
  }
  if (cs.shutdown_rank >= 0)
    linger(ctx);
  free(pfds);
out:
  pthread_mutex_lock(&ctx->mu);
  ctx->stopped = 1;
  pthread_mutex_unlock(&ctx->mu);
  return NULL;
}
