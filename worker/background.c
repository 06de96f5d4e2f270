/*
 * background.c - the background thread's loop and the negotiation
 * protocol (see background.h).
 *
 * The protocol. Every rank r > 0 has one control connection to rank 0.
 * A round is one exchange on it: rank r sends one REQUESTS (every tensor
 * its trainer threads queued since its last one, by response-cache bit or
 * by name, possibly with the shutdown flag), rank 0 answers it with one
 * RESPONSES whose `answer` byte is 1. Rank 0 also sends RESPONSES with
 * answer = 0, to every rank at once, when tensors become ready: those are
 * what every rank runs, in the same order everywhere.
 *
 * Rank r > 0 (two states):
 *   IDLE --queue not empty, or hk_shutdown called--> send REQUESTS --> SENT
 *   SENT --RESPONSES answer=1--> IDLE (and at once SENT again if the queue
 *        filled meanwhile: that REQUESTS leaves before the responses run,
 *        so the next negotiation overlaps this round's collectives)
 *   any  --RESPONSES answer=0--> run it; stay
 *   IDLE --RESPONSES answer=1--> protocol error
 * Submits during SENT wait in the queue: tensors batch together only while
 * a round is in flight (fusion under load), never for a timer. During
 * SENT the trainer's submits do not even wake the thread (hk_queue_take's
 * wake mute), the answer makes it look.
 *
 * Rank 0 (per rank r: waiting[r] = r's REQUESTS was read and not answered):
 *   on wake-up: feed its own queue to the negotiator (no message), read
 *     each readable control connection (at most one REQUESTS can be there)
 *     and feed it, waiting[r] = 1; then
 *   a tensor ready on every rank, a shutdown, or the job must stop
 *     --> one RESPONSES to every rank, answer = waiting[r]; waiting[] = 0;
 *         then run it (this is the round that moves data)
 *   else --> answer each waiting rank alone with an empty RESPONSES
 *         (answer = 1, nothing to run: it changes no rank's state, so all
 *         ranks still see the same sequence of non-empty RESPONSES). With
 *         HK_CYCLE_TIME_MS > 0 an answer is held until the request has
 *         waited that long (so batches can grow), never longer; 0 (the
 *         default): at once.
 * Rank 0 thus never waits for a rank that has nothing to say: a rank only
 * speaks when it has something, and every REQUESTS is answered at once
 * (or within HK_CYCLE_TIME_MS) whether or not its tensors are ready, so a
 * rank blocked on a tensor that another rank holds queued behind an
 * unanswered request cannot happen. A job of one rank sends nothing and
 * counts no round: its thread feeds its own negotiator and runs.
 *
 * Idle, every rank blocks in poll(2) on the wake fd, the control
 * connections and the launcher fd; the only timeouts are rank 0's stall
 * inspector (while tensors are pending) and a held answer. A dead peer is
 * noticed by TCP keepalive within HK_TIMEOUT_S (collectives/transport/tcp.h).
 * Counters of all this: worker/introspect.h.
 */
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
#include "worker/introspect.h"
#include "worker/queue.h"
#include "worker/timeline.h"

/* Send buffer of a control connection: a RESPONSES of ~20k cached
 * tensors at the default net.core.wmem_max (212992, doubled). */
#define HK_CTRL_SEND_BUFFER (1u << 20)

/* What the loop has decided so far, and its scratch (owned here). */
typedef struct loop {
  int sent;               /* rank > 0: a REQUESTS is outstanding */
  int shutdown_sent;      /* rank > 0: our shutdown request went out */
  int shutdown_rank;      /* >= 0: everyone stops after this round */
  hk_status abort_status; /* rank 0: the job must stop (stall) */
  char abort_reason[HK_WIRE_MAX_REASON_LEN + 1];
  uint8_t *waiting;      /* rank 0: waiting[r], see the file comment */
  double *waiting_since; /* rank 0: when waiting[r] became 1 (hk_now()) */
  hk_buf answer;         /* rank 0: the encoded empty answer */
  hk_wire_request *reqs; /* this round's requests by name */
  uint32_t cap_reqs;
  uint32_t *bits; /* this round's cache bits */
  uint32_t cap_bits;
  uint64_t *seen; /* rank > 0: bitmap that sorts the bits */
  size_t seen_words;
} loop;

/*
 * Rank 0: the job failed here (a rank's control connection broke, say).
 * The other ranks would only see rank 0 disappear and blame it, so tell
 * them why first, as a RESPONSES that aborts the job. Best effort: a rank
 * may be gone too; a short timeout.
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

static int shutdown_requested(hk_ctx *ctx) {
  pthread_mutex_lock(&ctx->mu);
  int s = ctx->shutdown_requested;
  pthread_mutex_unlock(&ctx->mu);
  return s;
}

/* Grows *p (elements of `size` bytes, capacity *cap) to hold n. */
static hk_status reserve(void **p, uint32_t *cap, uint32_t n, size_t size) {
  if (n <= *cap)
    return HK_OK;
  uint32_t c = *cap ? *cap : 64;
  while (c < n)
    c *= 2;
  void *q = realloc(*p, (size_t)c * size);
  if (!q)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %u requests", n);
  *p = q;
  *cap = c;
  return HK_OK;
}

/* Marks bit in the sorting bitmap, growing it. */
static hk_status mark_bit(loop *L, uint32_t bit) {
  size_t w = bit / 64;
  if (w >= L->seen_words) {
    size_t words = L->seen_words ? L->seen_words : 16;
    while (words <= w)
      words *= 2;
    uint64_t *s = realloc(L->seen, words * sizeof *s);
    if (!s)
      return hk_fail(HK_ERR_NOMEM, "cannot grow the cache-bit bitmap");
    memset(s + L->seen_words, 0, (words - L->seen_words) * sizeof *s);
    L->seen = s;
    L->seen_words = words;
  }
  L->seen[w] |= 1ull << (bit % 64);
  return HK_OK;
}

/*
 * Splits a list of taken handles into requests by name (L->reqs) and the
 * response-cache bits of those the cache knows (L->bits; ascending, as
 * the wire wants, when `sorted`: a bitmap pass, linear in the bits and
 * their range).
 */
static hk_status split_requests(hk_ctx *ctx, loop *L, hk_handle list,
                                int sorted, uint32_t *nreqs, uint32_t *nbits) {
  uint32_t count = 0, n = 0, nb = 0, lo = UINT32_MAX, hi = 0;
  for (hk_handle h = list; h; h = h->next)
    count++;
  hk_status st =
      reserve((void **)&L->reqs, &L->cap_reqs, count, sizeof *L->reqs);
  if (st == HK_OK)
    st = reserve((void **)&L->bits, &L->cap_bits, count, sizeof *L->bits);
  for (hk_handle h = list; h && st == HK_OK; h = h->next) {
    uint32_t bit = hk_cache_lookup(ctx->cache, &h->req);
    if (bit == HK_WIRE_NO_BIT) {
      L->reqs[n++] = h->req;
    } else if (!sorted) {
      L->bits[nb++] = bit;
    } else {
      st = mark_bit(L, bit);
      lo = bit < lo ? bit : lo;
      hi = bit > hi ? bit : hi;
      nb++;
    }
  }
  if (sorted && nb) { /* read the bitmap back in order, clearing it */
    nb = 0;
    for (size_t w = lo / 64; w <= hi / 64 && w < L->seen_words; w++) {
      uint64_t v = L->seen[w];
      L->seen[w] = 0;
      while (v) {
        L->bits[nb++] = (uint32_t)(w * 64 + (unsigned)__builtin_ctzll(v));
        v &= v - 1;
      }
    }
  }
  *nreqs = n;
  *nbits = nb;
  return st;
}

/* Applies a RESPONSES message on this rank: retire, then run. */
static hk_status apply_responses(hk_ctx *ctx, loop *L, const hk_msg *m,
                                 double t_ready) {
  for (uint32_t i = 0; i < m->u.responses.ninval; i++)
    hk_cache_retire(ctx->cache, m->u.responses.inval[i]);
  hk_status st = hk_execute_responses(ctx, m->u.responses.resps,
                                      m->u.responses.n, t_ready);
  L->shutdown_rank = m->u.responses.shutdown_rank;
  if (st == HK_OK && m->u.responses.abort_status) {
    L->abort_status = (hk_status)m->u.responses.abort_status;
    snprintf(L->abort_reason, sizeof L->abort_reason, "%s",
             m->u.responses.abort_reason ? m->u.responses.abort_reason
                                         : "rank 0 stopped the job");
  }
  return st;
}

/* Rank > 0 in IDLE: sends what is queued (and a shutdown) as REQUESTS. */
static hk_status worker_send(hk_ctx *ctx, loop *L) {
  if (L->sent)
    return HK_OK;
  int shut = !L->shutdown_sent && shutdown_requested(ctx);
  hk_handle list = hk_queue_take_quiet(ctx); /* mutes wakes if it took any */
  if (!list && !shut)
    return HK_OK;
  uint32_t n, nbits;
  hk_status st = split_requests(ctx, L, list, 1, &n, &nbits);
  if (st != HK_OK)
    return st;
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.shutdown = (uint8_t)shut;
  m.u.requests.n = n;
  m.u.requests.reqs = L->reqs;
  m.u.requests.nbits = nbits;
  m.u.requests.bits = L->bits;
  st =
      hk_tcp_send_msg(ctx->mesh.ctrl_fd, &m, &ctx->scratch, &ctx->io, "rank 0");
  if (st != HK_OK)
    return st;
  L->sent = 1;
  L->shutdown_sent |= shut;
  hk_introspect_count(ctx, HK_COUNT_REQUESTS, 1);
  return HK_OK;
}

/* Rank > 0: the control connection is readable: one RESPONSES. */
static hk_status worker_receive(hk_ctx *ctx, loop *L) {
  hk_msg m;
  hk_status st =
      hk_tcp_recv_msg(ctx->mesh.ctrl_fd, &m, &ctx->scratch, &ctx->io, "rank 0");
  if (st != HK_OK)
    return st;
  if (m.type != HK_MSG_RESPONSES) {
    hk_msg_free(&m);
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 sent message type %u, expected responses", m.type);
  }
  const int empty = m.u.responses.n == 0 && m.u.responses.ninval == 0 &&
                    m.u.responses.shutdown_rank < 0 &&
                    !m.u.responses.abort_status;
  if (m.u.responses.answer) {
    if (!L->sent) {
      hk_msg_free(&m);
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank 0 answered a request rank %d "
                     "did not send",
                     ctx->rank);
    }
    L->sent = 0;
    if (!m.u.responses.abort_status && m.u.responses.shutdown_rank < 0)
      st = worker_send(ctx, L); /* before running: overlap */
  }
  hk_introspect_count(ctx, empty ? HK_COUNT_ANSWERS : HK_COUNT_ROUNDS, 1);
  if (st == HK_OK)
    st = apply_responses(ctx, L, &m, hk_now());
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
static void inspect_stalls(hk_ctx *ctx, loop *L) {
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
    if (oldest >= stop && !L->abort_status) {
      hk_negotiator_stalled(ctx->negotiator, now, stop, what, sizeof what,
                            &oldest);
      L->abort_status = HK_ERR_STALLED;
      snprintf(L->abort_reason, sizeof L->abort_reason,
               "stalled for more than HK_STALL_SHUTDOWN_TIME_S=%g s: %.900s",
               stop, what);
    } else if (now + stop - oldest < next) {
      next = now + stop - oldest;
    }
  }
  ctx->next_stall_check = next;
}

/* Rank 0: reads rank r's REQUESTS and feeds it. */
static hk_status coordinator_receive(hk_ctx *ctx, loop *L, int r) {
  char who[32];
  snprintf(who, sizeof who, "rank %d", r);
  hk_msg m;
  hk_status st =
      hk_tcp_recv_msg(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &ctx->io, who);
  if (st != HK_OK)
    return st;
  if (m.type != HK_MSG_REQUESTS || L->waiting[r]) {
    unsigned type = m.type;
    hk_msg_free(&m);
    return type != HK_MSG_REQUESTS
               ? hk_fail(HK_ERR_PROTOCOL,
                         "rank %d sent message type %u, expected requests", r,
                         type)
               : hk_fail(HK_ERR_PROTOCOL,
                         "rank %d sent a second request before its first "
                         "was answered",
                         r);
  }
  st = feed(ctx, r, m.u.requests.reqs, m.u.requests.n, m.u.requests.bits,
            m.u.requests.nbits);
  if (m.u.requests.shutdown && L->shutdown_rank < 0)
    L->shutdown_rank = r;
  hk_msg_free(&m);
  L->waiting[r] = 1;
  L->waiting_since[r] = hk_now();
  hk_introspect_count(ctx, HK_COUNT_REQUESTS, 1);
  return st;
}

/* Rank 0: sends the encoded RESPONSES in ctx->scratch to every rank, with
 * answer = waiting[r]; every request is answered. */
static hk_status broadcast(hk_ctx *ctx, loop *L) {
  hk_status st = HK_OK;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    ctx->scratch.data[HK_WIRE_ANSWER_OFFSET] = L->waiting[r];
    L->waiting[r] = 0;
    st = hk_tcp_send_all(ctx->mesh.ctrl_fds[r], ctx->scratch.data,
                         ctx->scratch.len, &ctx->io, who);
  }
  return st;
}

/* Rank 0: answers the requests that have waited long enough (all of them
 * with HK_CYCLE_TIME_MS = 0) with the empty RESPONSES. */
static hk_status answer_waiting(hk_ctx *ctx, loop *L) {
  const double hold = ctx->cfg.cycle_time_ms / 1000.0;
  double now = hold > 0 ? hk_now() : 0;
  hk_status st = HK_OK;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    if (!L->waiting[r] || (hold > 0 && now - L->waiting_since[r] < hold))
      continue;
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    L->waiting[r] = 0;
    st = hk_tcp_send_all(ctx->mesh.ctrl_fds[r], L->answer.data, L->answer.len,
                         &ctx->io, who);
    hk_introspect_count(ctx, HK_COUNT_ANSWERS, 1);
  }
  return st;
}

/* Rank 0, after every wake-up: its own queue, what arrived, then answer. */
static hk_status coordinator_step(hk_ctx *ctx, loop *L,
                                  const struct pollfd *pfds, int first_ctrl) {
  uint32_t n, nbits;
  hk_handle own = hk_queue_take(ctx);
  hk_status st = own ? split_requests(ctx, L, own, 0, &n, &nbits) : HK_OK;
  if (own && st == HK_OK)
    st = feed(ctx, 0, L->reqs, n, L->bits, nbits);
  if (st == HK_OK && L->shutdown_rank < 0 && shutdown_requested(ctx))
    L->shutdown_rank = 0;
  for (int r = 1; r < ctx->size && st == HK_OK; r++)
    if (pfds[first_ctrl + r - 1].revents)
      st = coordinator_receive(ctx, L, r);
  if (st != HK_OK)
    return st;
  inspect_stalls(ctx, L);
  hk_wire_response *rs;
  double t_ready = hk_now();
  st = hk_negotiator_take_ready(ctx->negotiator, &rs, &n);
  if (st != HK_OK)
    return st;
  if (n == 0 && L->shutdown_rank < 0 && !L->abort_status)
    return answer_waiting(ctx, L);
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = L->shutdown_rank;
  m.u.responses.abort_status = (uint16_t)L->abort_status;
  m.u.responses.abort_reason = L->abort_status ? L->abort_reason : NULL;
  m.u.responses.ninval = ctx->ninval;
  m.u.responses.inval = ctx->inval;
  m.u.responses.n = n;
  m.u.responses.resps = rs;
  if (ctx->size > 1) { /* encoded once, sent to every rank */
    hk_buf_clear(&ctx->scratch);
    st = hk_wire_encode(&m, &ctx->scratch);
    if (st == HK_OK)
      st = broadcast(ctx, L);
    hk_introspect_count(ctx, HK_COUNT_ROUNDS, 1);
  }
  ctx->ninval = 0; /* rank 0 retired them when it decided */
  if (ctx->timeline && n)
    hk_timeline_mark(ctx->timeline, "CYCLE", t_ready);
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

/* How long the loop may sleep (ms, -1: until something happens): rank 0
 * until its next stall check while tensors are pending, or until a held
 * answer is due. */
static int poll_timeout_ms(hk_ctx *ctx, const loop *L) {
  if (ctx->rank != 0)
    return -1;
  double until = -1;
  if ((ctx->cfg.stall_check_s > 0 || ctx->cfg.stall_shutdown_s > 0) &&
      hk_negotiator_pending(ctx->negotiator) > 0)
    until = ctx->next_stall_check;
  const double hold = ctx->cfg.cycle_time_ms / 1000.0;
  for (int r = 1; r < ctx->size; r++)
    if (L->waiting[r] && (until < 0 || L->waiting_since[r] + hold < until))
      until = L->waiting_since[r] + hold;
  if (until < 0)
    return -1;
  double left = until - hk_now();
  return left > 0 ? (int)(left * 1000) + 1 : 0;
}

static hk_status loop_init(hk_ctx *ctx, loop *L) {
  memset(L, 0, sizeof *L);
  L->shutdown_rank = -1;
  if (ctx->rank != 0)
    return HK_OK;
  L->waiting = calloc((size_t)ctx->size, 1);
  L->waiting_since = calloc((size_t)ctx->size, sizeof *L->waiting_since);
  if (!L->waiting || !L->waiting_since)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the negotiation state");
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.answer = 1;
  m.u.responses.shutdown_rank = -1;
  return hk_wire_encode(&m, &L->answer);
}

static void loop_free(loop *L) {
  free(L->waiting);
  free(L->waiting_since);
  hk_buf_free(&L->answer);
  free(L->reqs);
  free(L->bits);
  free(L->seen);
}

void *hk_background_main(void *arg) {
  hk_ctx *ctx = arg;
  loop L;
  ctx->next_stall_check = ctx->next_stall_warning = hk_now();
  /* poll set: wake fd, launcher fd, then control fd(s) */
  struct pollfd *pfds = calloc((size_t)ctx->size + 2, sizeof *pfds);
  hk_status st0 = loop_init(ctx, &L);
  if (!pfds || st0 != HK_OK) {
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
  /* room for a whole round's message (see hk_tcp_set_send_buffer);
   * without it, a best effort */
  for (int i = first_ctrl; i < npfd; i++)
    if (hk_tcp_set_send_buffer(pfds[i].fd, HK_CTRL_SEND_BUFFER) != HK_OK)
      hk_log(HK_LOG_DEBUG, "%s", hk_last_error());
  for (;;) {
    int rc = poll(pfds, (nfds_t)npfd, poll_timeout_ms(ctx, &L));
    if (rc < 0)
      continue; /* EINTR */
    if (pfds[wake_i].revents) {
      uint64_t v;
      ssize_t rd = read(ctx->wake_fd, &v, sizeof v);
      (void)rd;
    }
    hk_status st = HK_OK;
    if (ctx->rank == 0) {
      st = coordinator_step(ctx, &L, pfds, first_ctrl);
    } else {
      if (pfds[first_ctrl].revents)
        st = worker_receive(ctx, &L);
      if (st == HK_OK && L.shutdown_rank < 0 && !L.abort_status)
        st = worker_send(ctx, &L);
    }
    if (st != HK_OK) {
      char what[HK_ERROR_MSG_CAP];
      snprintf(what, sizeof what, "%s", hk_last_error());
      fail_job(ctx, st, what, 1);
      break;
    }
    /* hkrun speaks only to abort (or by closing, when it died); what rank 0
     * said in the same wake-up was handled first, so its reason wins */
    if (launcher_i >= 0 && pfds[launcher_i].revents && !L.abort_status &&
        L.shutdown_rank < 0) {
      fail_job(ctx, HK_ERR_PEER_LOST, "lost connection to hkrun (did it die?)",
               0);
      break;
    }
    if (L.abort_status) {
      fail_job(ctx, L.abort_status, L.abort_reason, 0);
      break;
    }
    if (L.shutdown_rank >= 0) {
      char why[64];
      snprintf(why, sizeof why, "rank %d called hk_shutdown", L.shutdown_rank);
      fail_job(ctx, HK_ERR_SHUTDOWN, why, 0);
      break;
    }
  }
  if (L.shutdown_rank >= 0)
    linger(ctx);
out:
  free(pfds);
  loop_free(&L);
  pthread_mutex_lock(&ctx->mu);
  ctx->stopped = 1;
  pthread_mutex_unlock(&ctx->mu);
  return NULL;
}
