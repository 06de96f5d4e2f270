#include "worker/background.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "common/log.h"
#include "common/status.h"
#include "worker/execute.h"
#include "worker/queue.h"
#include "worker/timeline.h"

/* What the loop has decided so far. */
typedef struct cycle_state {
  int shutdown_sent;      /* rank > 0: our shutdown request went out */
  int shutdown_rank;      /* >= 0: everyone stops after this cycle */
  double next_cycle;      /* hk_now() before which we do not send again */
  hk_status abort_status; /* rank 0: the job must stop (stall) */
  char abort_reason[HK_WIRE_MAX_REASON_LEN + 1];
} cycle_state;

/*
 * Rank 0: the job failed here (a rank's control connection broke, say).
 * The other ranks would only see rank 0 disappear and blame it, so tell
 * them why first, as a RESPONSES that aborts the job. Best effort: a rank
 * may be gone too; a short timeout, as the others read their control
 * connection every cycle.
 */
static void relay_failure(hk_ctx *ctx, hk_status st, const char *reason) {
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = -1;
  m.u.responses.abort_status = (uint16_t)st;
  m.u.responses.abort_reason = (char *)reason; /* borrowed, not freed */
  hk_io io = {-1, 1.0};
  for (int r = 1; r < ctx->size; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    if (ctx->mesh.ctrl_fds[r] >= 0 &&
        hk_tcp_send_msg(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &io, who) !=
            HK_OK)
      hk_log(HK_LOG_DEBUG, "could not tell %s why the job failed: %s", who,
             hk_last_error());
  }
}

/*
 * The job is over for this rank: find the best reason. A peer's dropped
 * connection is usually the echo of a rank that died, and hkrun tells every
 * rank which one and how; wait briefly for that ABORT to name the cause.
 * With relay (rank 0, a failure it found itself), the other ranks are told
 * that reason.
 */
static void fail_job(hk_ctx *ctx, hk_status st, const char *what, int relay) {
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
  if (relay && ctx->rank == 0 && ctx->size > 1)
    relay_failure(ctx, st, reason);
  hk_queue_fail_all(ctx, st, reason);
}

/* Splits the trainer's queued handles into requests by name and the
 * response-cache bits of those the cache knows. */
static hk_status take_requests(hk_ctx *ctx, hk_wire_request **reqs,
                               uint32_t *nreqs, uint32_t **bits,
                               uint32_t *nbits) {
  *reqs = NULL;
  *bits = NULL;
  *nreqs = *nbits = 0;
  hk_handle list = hk_queue_take(ctx);
  uint32_t count = 0;
  for (hk_handle h = list; h; h = h->next)
    count++;
  if (!count)
    return HK_OK;
  *reqs = malloc(count * sizeof **reqs);
  *bits = malloc(count * sizeof **bits);
  if (!*reqs || !*bits) {
    free(*reqs);
    free(*bits);
    *reqs = NULL;
    *bits = NULL;
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %u requests", count);
  }
  for (hk_handle h = list; h; h = h->next) {
    uint32_t bit = hk_cache_lookup(ctx->cache, &h->req);
    if (bit != HK_WIRE_NO_BIT)
      (*bits)[(*nbits)++] = bit;
    else
      (*reqs)[(*nreqs)++] = h->req;
  }
  /* the wire wants bits ascending */
  for (uint32_t i = 1; i < *nbits; i++)
    for (uint32_t j = i; j > 0 && (*bits)[j - 1] > (*bits)[j]; j--) {
      uint32_t t = (*bits)[j];
      (*bits)[j] = (*bits)[j - 1];
      (*bits)[j - 1] = t;
    }
  return HK_OK;
}

static int shutdown_requested(hk_ctx *ctx) {
  pthread_mutex_lock(&ctx->mu);
  int s = ctx->shutdown_requested;
  pthread_mutex_unlock(&ctx->mu);
  return s;
}

/* Applies a RESPONSES message on this rank: retire, then run. */
static hk_status apply_responses(hk_ctx *ctx, cycle_state *cs, const hk_msg *m,
                                 double t_ready) {
  for (uint32_t i = 0; i < m->u.responses.ninval; i++)
    hk_cache_retire(ctx->cache, m->u.responses.inval[i]);
  hk_status st = hk_execute_responses(ctx, m->u.responses.resps,
                                      m->u.responses.n, t_ready);
  cs->shutdown_rank = m->u.responses.shutdown_rank;
  if (st == HK_OK && m->u.responses.abort_status) {
    cs->abort_status = (hk_status)m->u.responses.abort_status;
    snprintf(cs->abort_reason, sizeof cs->abort_reason, "%s",
             m->u.responses.abort_reason ? m->u.responses.abort_reason
                                         : "rank 0 stopped the job");
  }
  return st;
}

/* Rank > 0: send what is new; run whatever rank 0 answered. */
static hk_status worker_cycle(hk_ctx *ctx, cycle_state *cs, int send_now,
                              int ctrl_readable) {
  hk_status st = HK_OK;
  if (send_now) {
    hk_wire_request *reqs;
    uint32_t *bits, n, nbits;
    st = take_requests(ctx, &reqs, &n, &bits, &nbits);
    int shut = !cs->shutdown_sent && shutdown_requested(ctx);
    if (st == HK_OK && (n > 0 || nbits > 0 || shut)) {
      hk_msg m = {.type = HK_MSG_REQUESTS};
      m.u.requests.shutdown = (uint8_t)shut;
      m.u.requests.n = n;
      m.u.requests.reqs = reqs;
      m.u.requests.nbits = nbits;
      m.u.requests.bits = bits;
      st = hk_tcp_send_msg(ctx->mesh.ctrl_fd, &m, &ctx->scratch, &ctx->io,
                           "rank 0");
      cs->shutdown_sent |= shut;
    }
    free(reqs);
    free(bits);
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
  st = apply_responses(ctx, cs, &m, hk_now());
  hk_msg_free(&m);
  return st;
}

/* Rank 0: records a retired bit, to be told to everyone. */
static hk_status note_invalidation(hk_ctx *ctx, uint32_t bit) {
  if (ctx->ninval == ctx->cap_inval) {
    uint32_t cap = ctx->cap_inval ? 2 * ctx->cap_inval : 16;
    uint32_t *p = realloc(ctx->inval, cap * sizeof *p);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot grow the invalidation list");
    ctx->inval = p;
    ctx->cap_inval = cap;
  }
  uint32_t i = ctx->ninval++;
  for (; i > 0 && ctx->inval[i - 1] > bit; i--) /* keep ascending */
    ctx->inval[i] = ctx->inval[i - 1];
  ctx->inval[i] = bit;
  hk_cache_retire(ctx->cache, bit);
  return HK_OK;
}

/*
 * Rank 0: feeds one rank's requests to the negotiator. Bits are looked up
 * in rank 0's cache (a retired bit still names what the rank meant, and is
 * negotiated by name); a request by name for a tensor the cache holds means
 * that rank changed its shape, dtype or op: the entry is retired everywhere.
 */
static hk_status feed(hk_ctx *ctx, int rank, const hk_wire_request *reqs,
                      uint32_t n, const uint32_t *bits, uint32_t nbits) {
  double now = hk_now();
  hk_status st = HK_OK;
  for (uint32_t i = 0; i < n && st == HK_OK; i++) {
    uint32_t bit = hk_cache_bit_of(ctx->cache, reqs[i].name);
    if (bit != HK_WIRE_NO_BIT)
      st = note_invalidation(ctx, bit);
    if (st == HK_OK)
      st = hk_negotiator_add(ctx->negotiator, rank, &reqs[i], 1, HK_WIRE_NO_BIT,
                             now);
  }
  for (uint32_t i = 0; i < nbits && st == HK_OK; i++) {
    const hk_wire_request *q = hk_cache_get(ctx->cache, bits[i]);
    if (!q)
      return hk_fail(HK_ERR_PROTOCOL, "rank %d sent unknown cache bit %u", rank,
                     bits[i]);
    uint32_t via =
        hk_cache_is_live(ctx->cache, bits[i]) ? bits[i] : HK_WIRE_NO_BIT;
    st = hk_negotiator_add(ctx->negotiator, rank, q, 1, via, now);
  }
  return st;
}

/*
 * Rank 0: the stall inspector (Horovod's StallInspector, reimplemented):
 * a tensor some ranks submitted and others did not is named, with the
 * missing ranks, every HK_STALL_CHECK_TIME_S; once the oldest such tensor
 * has waited HK_STALL_SHUTDOWN_TIME_S (> 0) the job stops on every rank.
 * ctx->next_stall_check is when anything can next change.
 */
static void inspect_stalls(hk_ctx *ctx, cycle_state *cs) {
  const double check = ctx->cfg.stall_check_s, stop = ctx->cfg.stall_shutdown_s;
  double now = hk_now();
  if ((check <= 0 && stop <= 0) || now < ctx->next_stall_check)
    return;
  char what[HK_WIRE_MAX_REASON_LEN + 1];
  double oldest;
  double min_age = check > 0 ? check : stop;
  uint32_t n = hk_negotiator_stalled(ctx->negotiator, now, min_age, what,
                                     sizeof what, &oldest);
  double next = now + (check > 0 ? check : stop);
  if (n > 0 && check > 0 && now >= ctx->next_stall_warning) {
    /* name every tensor still waiting, not only those past the limit */
    n = hk_negotiator_stalled(ctx->negotiator, now, 0, what, sizeof what,
                              &oldest);
    hk_log(HK_LOG_WARNING,
           "stall: %u tensor(s) submitted by some ranks but not others: %s", n,
           what);
    ctx->next_stall_warning = now + check;
  }
  if (check > 0 && ctx->next_stall_warning > now &&
      ctx->next_stall_warning < next)
    next = ctx->next_stall_warning;
  if (n == 0 && oldest > 0 && now + min_age - oldest < next)
    next = now + min_age - oldest; /* when the oldest one turns stalled */
  if (stop > 0 && oldest > 0) {
    if (oldest >= stop && !cs->abort_status) {
      hk_negotiator_stalled(ctx->negotiator, now, stop, what, sizeof what,
                            &oldest);
      cs->abort_status = HK_ERR_STALLED;
      snprintf(cs->abort_reason, sizeof cs->abort_reason,
               "stalled for more than HK_STALL_SHUTDOWN_TIME_S=%g s: %.900s",
               stop, what);
    } else if (now + stop - oldest < next) {
      next = now + stop - oldest;
    }
  }
  ctx->next_stall_check = next;
}

/* Rank 0: gather requests (its own and those that arrived), answer. */
static hk_status coordinator_cycle(hk_ctx *ctx, cycle_state *cs, int send_now,
                                   const struct pollfd *pfds, int first_ctrl) {
  hk_status st = HK_OK;
  if (send_now) {
    hk_wire_request *reqs;
    uint32_t *bits, n, nbits;
    st = take_requests(ctx, &reqs, &n, &bits, &nbits);
    if (st == HK_OK)
      st = feed(ctx, 0, reqs, n, bits, nbits);
    free(reqs);
    free(bits);
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
    st = feed(ctx, r, m.u.requests.reqs, m.u.requests.n, m.u.requests.bits,
              m.u.requests.nbits);
    if (m.u.requests.shutdown && cs->shutdown_rank < 0)
      cs->shutdown_rank = r;
    hk_msg_free(&m);
    if (st != HK_OK)
      return st;
  }
  inspect_stalls(ctx, cs);
  hk_wire_response *rs;
  uint32_t n;
  double t_ready = hk_now();
  st = hk_negotiator_take_ready(ctx->negotiator, &rs, &n);
  if (st != HK_OK || (n == 0 && cs->shutdown_rank < 0 && !cs->abort_status))
    return st;
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = cs->shutdown_rank;
  m.u.responses.abort_status = (uint16_t)cs->abort_status;
  m.u.responses.abort_reason = cs->abort_status ? cs->abort_reason : NULL;
  m.u.responses.ninval = ctx->ninval;
  m.u.responses.inval = ctx->inval;
  m.u.responses.n = n;
  m.u.responses.resps = rs;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    st = hk_tcp_send_msg(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &ctx->io,
                         who);
  }
  ctx->ninval = 0; /* rank 0 retired them when it decided */
  if (ctx->timeline && n && ctx->cfg.timeline_mark_cycles)
    hk_timeline_mark(ctx->timeline, "CYCLE_START", t_ready);
  if (st == HK_OK)
    st = hk_execute_responses(ctx, rs, n, t_ready);
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

/* How long the loop may sleep: until the next cycle if work waits, until
 * the next stall check on rank 0 if tensors are pending, else forever. */
static int poll_timeout_ms(hk_ctx *ctx, const cycle_state *cs,
                           int pending_wake) {
  double until = -1;
  if (pending_wake)
    until = cs->next_cycle;
  if (ctx->rank == 0 &&
      (ctx->cfg.stall_check_s > 0 || ctx->cfg.stall_shutdown_s > 0) &&
      hk_negotiator_pending(ctx->negotiator) > 0 &&
      (until < 0 || ctx->next_stall_check < until))
    until = ctx->next_stall_check;
  if (until < 0)
    return -1;
  double left = until - hk_now();
  return left > 0 ? (int)(left * 1000) + 1 : 0;
}

void *hk_background_main(void *arg) {
  hk_ctx *ctx = arg;
  cycle_state cs = {0, -1, 0, HK_OK, ""};
  const double cycle_s = ctx->cfg.cycle_time_ms / 1000.0;
  ctx->next_stall_check = ctx->next_stall_warning = hk_now();
  /* poll set: wake fd, launcher fd, then control fd(s) */
  struct pollfd *pfds = calloc((size_t)ctx->size + 2, sizeof *pfds);
  if (!pfds) {
    fail_job(ctx, HK_ERR_NOMEM, "cannot allocate the poll set", 1);
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
    int rc = poll(pfds, (nfds_t)npfd, poll_timeout_ms(ctx, &cs, pending_wake));
    if (rc < 0)
      continue; /* EINTR */
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
    if (ctx->rank == 0)
      st = coordinator_cycle(ctx, &cs, send_now, pfds, first_ctrl);
    else
      st = worker_cycle(ctx, &cs, send_now, pfds[first_ctrl].revents != 0);
    if (st != HK_OK) {
      char what[HK_ERROR_MSG_CAP];
      snprintf(what, sizeof what, "%s", hk_last_error());
      fail_job(ctx, st, what, 1);
      break;
    }
    /* hkrun speaks only to abort (or by closing, when it died); what rank 0
     * said in the same wake-up was handled first, so its reason wins */
    if (launcher_i >= 0 && pfds[launcher_i].revents && !cs.abort_status &&
        cs.shutdown_rank < 0) {
      fail_job(ctx, HK_ERR_PEER_LOST, "lost connection to hkrun (did it die?)",
               0);
      break;
    }
    if (cs.abort_status) {
      fail_job(ctx, cs.abort_status, cs.abort_reason, 0);
      break;
    }
    if (cs.shutdown_rank >= 0) {
      char why[64];
      snprintf(why, sizeof why, "rank %d called hk_shutdown", cs.shutdown_rank);
      fail_job(ctx, HK_ERR_SHUTDOWN, why, 0);
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
