/*
 * round.c - rank 0's side of the negotiation (round.h; the protocol is in
 * worker/background.c's header): feeding requests to the negotiator, the
 * stall inspector, the one RESPONSES every rank gets, and the empty
 * answers.
 */
#include "worker/round.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/channel.h"
#include "worker/execute.h"
#include "worker/queue.h"

int hk_round_shutdown_requested(hk_ctx *ctx) {
  pthread_mutex_lock(&ctx->mu);
  int s = ctx->shutdown_requested;
  pthread_mutex_unlock(&ctx->mu);
  return s;
}

/* The capacity (elements) that holds n, from cap by doubling. */
static uint32_t grown(uint32_t cap, uint32_t n) {
  uint32_t c = cap ? cap : 64;
  while (c < n)
    c *= 2;
  return c;
}

/* Marks bit in the sorting bitmap, growing it. */
static hk_status mark_bit(hk_round *R, uint32_t bit) {
  size_t w = bit / 64;
  if (w >= R->seen_words) {
    size_t words = R->seen_words ? R->seen_words : 16;
    while (words <= w)
      words *= 2;
    uint64_t *s = realloc(R->seen, words * sizeof *s);
    if (!s)
      return hk_fail(HK_ERR_NOMEM, "cannot grow the cache-bit bitmap");
    memset(s + R->seen_words, 0, (words - R->seen_words) * sizeof *s);
    R->seen = s;
    R->seen_words = words;
  }
  R->seen[w] |= 1ull << (bit % 64);
  return HK_OK;
}

/* See round.h. */
hk_status hk_round_split(hk_ctx *ctx, hk_round *R, hk_handle list, int sorted,
                         uint32_t *nreqs, uint32_t *nbits) {
  uint32_t count = 0, n = 0, nb = 0, lo = UINT32_MAX, hi = 0;
  for (hk_handle h = list; h; h = h->next)
    count++;
  hk_status st = HK_OK;
  if (count > R->cap_reqs) {
    uint32_t c = grown(R->cap_reqs, count);
    hk_wire_request *q = realloc(R->reqs, (size_t)c * sizeof *q);
    if (!q)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate %u requests", count);
    R->reqs = q;
    R->cap_reqs = c;
  }
  if (count > R->cap_bits) {
    uint32_t c = grown(R->cap_bits, count);
    uint32_t *q = realloc(R->bits, (size_t)c * sizeof *q);
    if (!q)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate %u cache bits", count);
    R->bits = q;
    R->cap_bits = c;
  }
  for (hk_handle h = list; h && st == HK_OK; h = h->next) {
    uint32_t bit = hk_cache_lookup(ctx->cache, &h->req);
    if (bit == HK_WIRE_NO_BIT) {
      hk_wire_request_copy(&R->reqs[n++], &h->req);
    } else if (!sorted) {
      R->bits[nb++] = bit;
    } else {
      st = mark_bit(R, bit);
      lo = bit < lo ? bit : lo;
      hi = bit > hi ? bit : hi;
      nb++;
    }
  }
  if (sorted && nb) { /* read the bitmap back in order, clearing it */
    nb = 0;
    for (size_t w = lo / 64; w <= hi / 64 && w < R->seen_words; w++) {
      uint64_t v = R->seen[w];
      R->seen[w] = 0;
      while (v) {
        R->bits[nb++] = (uint32_t)(w * 64 + (unsigned)__builtin_ctzll(v));
        v &= v - 1;
      }
    }
  }
  *nreqs = n;
  *nbits = nb;
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
static void inspect_stalls(hk_ctx *ctx, hk_round *R) {
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
    hk_observe_stall(&ctx->obs, what);
    ctx->next_stall_warning = now + check;
  }
  if (check > 0 && ctx->next_stall_warning > now &&
      ctx->next_stall_warning < next)
    next = ctx->next_stall_warning;
  if (n == 0 && oldest > 0 && now + min_age - oldest < next)
    next = now + min_age - oldest; /* when the oldest one turns stalled */
  if (stop > 0 && oldest > 0) {
    if (oldest >= stop && !R->abort_status) {
      hk_negotiator_stalled(ctx->negotiator, now, stop, what, sizeof what,
                            &oldest);
      R->abort_status = HK_ERR_STALLED;
      snprintf(R->abort_reason, sizeof R->abort_reason,
               "stalled for more than HK_STALL_SHUTDOWN_TIME_S=%g s: %.900s",
               stop, what);
    } else if (now + stop - oldest < next) {
      next = now + stop - oldest;
    }
  }
  ctx->next_stall_check = next;
}

/* Rank 0: reads rank r's REQUESTS and feeds it. */
static hk_status coordinator_receive(hk_ctx *ctx, hk_round *R, int r) {
  char who[32];
  snprintf(who, sizeof who, "rank %d", r);
  hk_msg m;
  hk_status st =
      hk_channel_recv(ctx->mesh.ctrl_fds[r], &m, &ctx->scratch, &ctx->io, who);
  if (st != HK_OK)
    return st;
  if (m.type != HK_MSG_REQUESTS || R->waiting[r]) {
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
  hk_obs_message got = {.kind = HK_OBS_MSG_REQUESTS,
                        .rank = r,
                        .sample = m.u.requests.has_sample ? &m.u.requests.sample
                                                          : NULL};
  hk_observe_message(&ctx->obs, &got);
  if (m.u.requests.shutdown && R->shutdown_rank < 0)
    R->shutdown_rank = r;
  hk_msg_free(&m);
  R->waiting[r] = 1;
  R->waiting_since[r] = hk_now();
  return st;
}

/* Rank 0: sends the encoded RESPONSES in ctx->scratch to every rank, with
 * answer = waiting[r]; every request is answered. */
static hk_status broadcast(hk_ctx *ctx, hk_round *R) {
  hk_status st = HK_OK;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    ctx->scratch.data[HK_WIRE_ANSWER_OFFSET] = R->waiting[r];
    R->waiting[r] = 0;
    st = hk_tcp_send_all(ctx->mesh.ctrl_fds[r], ctx->scratch.data,
                         ctx->scratch.len, &ctx->io, who);
  }
  return st;
}

/* Rank 0: answers the requests that have waited long enough (all of them
 * with HK_CYCLE_TIME_MS = 0) with the empty RESPONSES. */
static hk_status answer_waiting(hk_ctx *ctx, hk_round *R) {
  const double hold = ctx->cfg.cycle_time_ms / 1000.0;
  double now = hold > 0 ? hk_now() : 0;
  hk_status st = HK_OK;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    if (!R->waiting[r] || (hold > 0 && now - R->waiting_since[r] < hold))
      continue;
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    R->waiting[r] = 0;
    st = hk_tcp_send_all(ctx->mesh.ctrl_fds[r], R->answer.data, R->answer.len,
                         &ctx->io, who);
    hk_obs_message sent = {.kind = HK_OBS_MSG_ANSWER, .rank = r};
    hk_observe_message(&ctx->obs, &sent);
  }
  return st;
}

hk_status hk_round_coordinate(hk_ctx *ctx, hk_round *R,
                              const struct pollfd *pfds, int first_ctrl) {
  uint32_t n, nbits;
  hk_handle own = hk_queue_take(ctx);
  hk_status st = own ? hk_round_split(ctx, R, own, 0, &n, &nbits) : HK_OK;
  if (own && st == HK_OK)
    st = feed(ctx, 0, R->reqs, n, R->bits, nbits);
  if (st == HK_OK && R->shutdown_rank < 0 && hk_round_shutdown_requested(ctx))
    R->shutdown_rank = 0;
  for (int r = 1; r < ctx->size && st == HK_OK; r++)
    if (pfds[first_ctrl + r - 1].revents)
      st = coordinator_receive(ctx, R, r);
  if (st != HK_OK)
    return st;
  inspect_stalls(ctx, R);
  hk_wire_response *rs;
  double t_ready = hk_now();
  st = hk_negotiator_take_ready(ctx->negotiator, &rs, &n);
  if (st != HK_OK)
    return st;
  if (n == 0 && R->shutdown_rank < 0 && !R->abort_status)
    return answer_waiting(ctx, R);
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = R->shutdown_rank;
  m.u.responses.abort_status = (uint16_t)R->abort_status;
  m.u.responses.abort_reason = R->abort_status ? R->abort_reason : NULL;
  m.u.responses.ninval = ctx->ninval;
  m.u.responses.inval = ctx->inval;
  m.u.responses.n = n;
  m.u.responses.resps = rs;
  if (ctx->size > 1) { /* encoded once, sent to every rank */
    hk_buf_clear(&ctx->scratch);
    st = hk_wire_encode(&m, &ctx->scratch);
    if (st == HK_OK)
      st = broadcast(ctx, R);
    hk_obs_message sent = {.kind = HK_OBS_MSG_ROUND, .rank = -1};
    hk_observe_message(&ctx->obs, &sent);
  }
  ctx->ninval = 0; /* rank 0 retired them when it decided */
  if (st == HK_OK)
    st = hk_execute_responses(ctx, rs, n, t_ready);
  hk_negotiator_free_responses(rs, n);
  return st;
}

/* See round.h. */
int hk_round_timeout_ms(hk_ctx *ctx, const hk_round *R) {
  if (ctx->rank != 0)
    return -1;
  double until = -1;
  if ((ctx->cfg.stall_check_s > 0 || ctx->cfg.stall_shutdown_s > 0) &&
      hk_negotiator_pending(ctx->negotiator) > 0)
    until = ctx->next_stall_check;
  const double hold = ctx->cfg.cycle_time_ms / 1000.0;
  for (int r = 1; r < ctx->size; r++)
    if (R->waiting[r] && (until < 0 || R->waiting_since[r] + hold < until))
      until = R->waiting_since[r] + hold;
  if (until < 0)
    return -1;
  double left = until - hk_now();
  return left > 0 ? (int)(left * 1000) + 1 : 0;
}

hk_status hk_round_init(hk_ctx *ctx, hk_round *R) {
  memset(R, 0, sizeof *R);
  R->shutdown_rank = -1;
  if (ctx->rank != 0)
    return HK_OK;
  R->waiting = calloc((size_t)ctx->size, 1);
  R->waiting_since = calloc((size_t)ctx->size, sizeof *R->waiting_since);
  if (!R->waiting || !R->waiting_since)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the negotiation state");
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.answer = 1;
  m.u.responses.shutdown_rank = -1;
  return hk_wire_encode(&m, &R->answer);
}

void hk_round_free(hk_round *R) {
  free(R->waiting);
  free(R->waiting_since);
  hk_buf_free(&R->answer);
  free(R->reqs);
  free(R->bits);
  free(R->seen);
}
