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

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/channel.h"
#include "worker/execute.h"
#include "worker/queue.h"
#include "worker/sets.h"
#include "worker/tune.h"

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

static int by_key(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts R->bits[0..nb) with their sets: one set by the bitmap (lo..hi:
 * their range), several by (set, bit) keys. */
static hk_status sort_bits(hk_round *R, uint32_t nb, uint32_t lo, uint32_t hi,
                           int one_set) {
  if (one_set) { /* mark, then read the bitmap back in order, clearing it */
    const int32_t set = R->bit_sets[0];
    hk_status st = HK_OK;
    for (uint32_t i = 0; i < nb && st == HK_OK; i++)
      st = mark_bit(R, R->bits[i]);
    if (st != HK_OK)
      return st;
    uint32_t k = 0;
    for (size_t w = lo / 64; w <= hi / 64 && w < R->seen_words; w++) {
      uint64_t v = R->seen[w];
      R->seen[w] = 0;
      while (v) {
        R->bit_sets[k] = set;
        R->bits[k++] = (uint32_t)(w * 64 + (unsigned)__builtin_ctzll(v));
        v &= v - 1;
      }
    }
    return HK_OK;
  }
  for (uint32_t i = 0; i < nb; i++)
    R->bit_keys[i] = (uint64_t)(uint32_t)R->bit_sets[i] << 32 | R->bits[i];
  qsort(R->bit_keys, nb, sizeof *R->bit_keys, by_key);
  for (uint32_t i = 0; i < nb; i++) {
    R->bit_sets[i] = (int32_t)(R->bit_keys[i] >> 32);
    R->bits[i] = (uint32_t)R->bit_keys[i];
  }
  return HK_OK;
}

/* See round.h. */
hk_status hk_round_split(hk_ctx *ctx, hk_round *R, hk_handle list, int sorted,
                         uint32_t *nreqs, uint32_t *nbits) {
  uint32_t count = 0, n = 0, nb = 0, lo = UINT32_MAX, hi = 0;
  int one_set = 1;
  for (hk_handle h = list; h; h = h->next)
    count++;
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
    if (q)
      R->bits = q;
    int32_t *qs = q ? realloc(R->bit_sets, (size_t)c * sizeof *qs) : NULL;
    if (qs)
      R->bit_sets = qs;
    uint64_t *qk = qs ? realloc(R->bit_keys, (size_t)c * sizeof *qk) : NULL;
    if (!qk)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate %u cache bits", count);
    R->bit_keys = qk;
    R->cap_bits = c;
  }
  for (hk_handle h = list, next; h; h = next) {
    next = h->next;
    const hk_set *s = hk_sets_live(ctx, h->req.set);
    if (!s) { /* removed since it was submitted (sets.h) */
      char why[HK_MAX_NAME_LEN + 160];
      snprintf(why, sizeof why,
               "tensor '%s': process set %d was removed "
               "(hk_process_set_remove) before rank %d sent the operation",
               h->req.name, (int)h->req.set, ctx->rank);
      hk_queue_complete(ctx, h, HK_ERR_SHUTDOWN, why);
      continue;
    }
    uint32_t bit = hk_cache_lookup(s->cache, &h->req);
    if (bit == HK_WIRE_NO_BIT) {
      hk_wire_request_copy(&R->reqs[n++], &h->req);
      continue;
    }
    one_set &= nb == 0 || R->bit_sets[0] == h->req.set;
    lo = bit < lo ? bit : lo;
    hi = bit > hi ? bit : hi;
    R->bit_sets[nb] = h->req.set;
    R->bits[nb++] = bit;
  }
  *nreqs = n;
  *nbits = nb;
  return sorted && nb ? sort_bits(R, nb, lo, hi, one_set) : HK_OK;
}

/* Rank 0: records a retired bit of set s, to be told to its members. */
static hk_status note_invalidation(hk_set *s, uint32_t bit) {
  if (s->ninval == s->cap_inval) {
    uint32_t cap = s->cap_inval ? 2 * s->cap_inval : 16;
    uint32_t *p = realloc(s->inval, cap * sizeof *p);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot grow the invalidation list");
    s->inval = p;
    s->cap_inval = cap;
  }
  uint32_t i = s->ninval++;
  for (; i > 0 && s->inval[i - 1] > bit; i--) /* keep ascending */
    s->inval[i] = s->inval[i - 1];
  s->inval[i] = bit;
  hk_cache_retire(s->cache, bit);
  return HK_OK;
}

/* Job rank `rank`'s rank in set s, or -1 when not a member. */
static int member_of(const hk_set *s, int rank) {
  int lo = 0, hi = s->size - 1; /* ranks ascend */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (s->ranks[mid] < rank)
      lo = mid + 1;
    else
      hi = mid;
  }
  return s->ranks[lo] == rank ? lo : -1;
}

/* Rank 0: the live set a request of job rank `rank` is of, and the rank's
 * rank in it (*member), or NULL with *st HK_OK for a set removed since
 * (the rank failed the request itself when the removal ran there).
 * HK_ERR_PROTOCOL: a set never added, or one the rank is not in (ranks
 * refuse both at submit: a broken peer). */
static hk_set *set_of(hk_ctx *ctx, int rank, int32_t id, int *member,
                      hk_status *st) {
  *st = HK_OK;
  if (id < 0 || id >= ctx->nsets) {
    *st = hk_fail(HK_ERR_PROTOCOL,
                  "rank %d sent a request of process set %d, which was "
                  "never added",
                  rank, (int)id);
    return NULL;
  }
  hk_set *s = hk_sets_live(ctx, id);
  if (!s)
    return NULL;
  *member = member_of(s, rank);
  if (*member < 0) {
    *st = hk_fail(HK_ERR_PROTOCOL,
                  "rank %d sent a request of process set %d, which it is "
                  "not a member of",
                  rank, (int)id);
    return NULL;
  }
  return s;
}

/*
 * Rank 0: feeds one rank's requests to the negotiators of their sets.
 * Bits are looked up in rank 0's copy of the set's cache (a retired bit
 * still names what the rank meant, and is negotiated by name); a request
 * by name for a tensor the cache holds means that rank changed its shape,
 * dtype or op: the entry is retired on every member. Requests of a set
 * removed since are dropped (set_of).
 */
static hk_status feed(hk_ctx *ctx, int rank, const hk_wire_request *reqs,
                      uint32_t n, const uint32_t *bits, const int32_t *bit_sets,
                      uint32_t nbits) {
  double now = hk_now();
  hk_status st = HK_OK;
  for (uint32_t i = 0; i < n && st == HK_OK; i++) {
    int member = 0;
    hk_set *s = set_of(ctx, rank, reqs[i].set, &member, &st);
    if (!s)
      continue;
    uint32_t bit = hk_cache_bit_of(s->cache, reqs[i].name);
    if (bit != HK_WIRE_NO_BIT)
      st = note_invalidation(s, bit);
    if (st == HK_OK)
      st = hk_negotiator_add(s->neg, member, &reqs[i], 1, HK_WIRE_NO_BIT, now);
  }
  for (uint32_t i = 0; i < nbits && st == HK_OK; i++) {
    int member = 0;
    hk_set *s = set_of(ctx, rank, bit_sets ? bit_sets[i] : 0, &member, &st);
    if (!s)
      continue;
    const hk_wire_request *q = hk_cache_get(s->cache, bits[i]);
    if (!q)
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank %d sent unknown cache bit %u of process set %d",
                     rank, bits[i], (int)s->id);
    uint32_t via =
        hk_cache_is_live(s->cache, bits[i]) ? bits[i] : HK_WIRE_NO_BIT;
    st = hk_negotiator_add(s->neg, member, q, 1, via, now);
  }
  return st;
}

/* Rank 0: what every live set's negotiator says about its stalled
 * tensors (hk_negotiator_stalled's, over all of them: "; " between). */
static uint32_t stalled(hk_ctx *ctx, double now, double min_age, char *out,
                        size_t cap, double *oldest) {
  uint32_t n = 0;
  *oldest = 0;
  out[0] = '\0';
  for (int32_t id = 0; id < ctx->nsets; id++) {
    const hk_set *s = hk_sets_live(ctx, id);
    if (!s || !hk_negotiator_pending(s->neg))
      continue;
    size_t at = strlen(out);
    if (n && at + 3 < cap) {
      memcpy(out + at, "; ", 3);
      at += 2;
    }
    double old = 0;
    uint32_t k = at + 1 < cap ? hk_negotiator_stalled(s->neg, now, min_age,
                                                      out + at, cap - at, &old)
                              : 0;
    if (!k && at >= 2 && n)
      out[at - 2] = '\0'; /* nothing after the separator */
    n += k;
    *oldest = old > *oldest ? old : *oldest;
  }
  return n;
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
  uint32_t n = stalled(ctx, now, min_age, what, sizeof what, &oldest);
  double next = now + (check > 0 ? check : stop);
  if (n > 0 && check > 0 && now >= ctx->next_stall_warning) {
    /* name every tensor still waiting, not only those past the limit */
    n = stalled(ctx, now, 0, what, sizeof what, &oldest);
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
      stalled(ctx, now, stop, what, sizeof what, &oldest);
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
      hk_channel_recv_on(&ctx->mesh.ctrl[r], &m, &ctx->scratch, &ctx->io, who);
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
            m.u.requests.bit_sets, m.u.requests.nbits);
  hk_obs_message got = {.kind = HK_OBS_MSG_REQUESTS,
                        .rank = r,
                        .sample = m.u.requests.has_sample ? &m.u.requests.sample
                                                          : NULL};
  hk_observe_message(&ctx->obs, &got);
  if (m.u.requests.shutdown && R->shutdown_rank < 0)
    R->shutdown_rank = r;
  hk_msg_free(&m);
  R->waiting[r] = 1;
  R->waiting_since[r] = R->heard[r] = hk_now();
  return st;
}

/* Rank 0: sends the encoded RESPONSES in ctx->scratch to the members of
 * set s but itself, with answer = waiting[r]; the requests of those
 * waiting are answered. */
static hk_status send_members(hk_ctx *ctx, hk_round *R, const hk_set *s) {
  hk_status st = HK_OK;
  for (int j = 0; j < s->size && st == HK_OK; j++) {
    const int r = s->ranks[j];
    if (r == 0)
      continue;
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    ctx->scratch.data[HK_WIRE_ANSWER_OFFSET] = R->waiting[r];
    R->waiting[r] = 0;
    st = hk_channel_send_frame(&ctx->mesh.ctrl[r], ctx->scratch.data,
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
    st = hk_channel_send_frame(&ctx->mesh.ctrl[r], R->answer.data,
                               R->answer.len, &ctx->io, who);
    hk_obs_message sent = {.kind = HK_OBS_MSG_ANSWER, .rank = r};
    hk_observe_message(&ctx->obs, &sent);
  }
  return st;
}

/* Rank 0: set s's ready tensors (and, the world's, a stop) go to its
 * members, and run here (or rank 0 follows the set's cache). */
static hk_status round_of(hk_ctx *ctx, hk_round *R, hk_set *s) {
  const int world = s->id == 0;
  hk_wire_response *rs;
  uint32_t n;
  double t_ready = hk_now();
  hk_status st = hk_negotiator_take_ready(s->neg, &rs, &n);
  if (st != HK_OK)
    return st;
  if (n == 0 && !(world && (R->shutdown_rank >= 0 || R->abort_status)))
    return HK_OK;
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.set = s->id;
  m.u.responses.shutdown_rank = world ? R->shutdown_rank : -1;
  m.u.responses.abort_status = world ? (uint16_t)R->abort_status : 0;
  m.u.responses.abort_reason =
      world && R->abort_status ? R->abort_reason : NULL;
  m.u.responses.ninval = s->ninval;
  m.u.responses.inval = s->inval;
  m.u.responses.n = n;
  m.u.responses.resps = rs;
  if (world && n > 0) { /* the autotuner's next setting rides on it */
    hk_tune_round(ctx, rs, n, t_ready, &m);
    /* elastic: workers wait to join; every rank learns it in this round,
     * before this round's handles complete (so at the same commit) */
    m.u.responses.joiners =
        ctx->joiners > 0 ||
        __atomic_load_n(&ctx->hosts_updated, __ATOMIC_RELAXED);
    if (m.u.responses.joiners)
      __atomic_store_n(&ctx->hosts_updated, 1, __ATOMIC_RELEASE);
  } else if (n > 0) /* not tuned: only noted, to say so (tune.h) */
    hk_tune_other_round(ctx, s->id);
  if (s->size > 1 || s->ranks[0] != 0) { /* encoded once, sent to each */
    hk_buf_clear(&ctx->scratch);
    st = hk_wire_encode(&m, &ctx->scratch);
    if (st == HK_OK)
      st = send_members(ctx, R, s);
    hk_obs_message sent = {.kind = HK_OBS_MSG_ROUND, .rank = -1};
    hk_observe_message(&ctx->obs, &sent);
  }
  s->ninval = 0;                     /* rank 0 retired them when it decided */
  if (st == HK_OK && world && n > 0) /* as every rank does (tune.h) */
    st =
        hk_tune_apply(ctx, m.u.responses.has_tune ? &m.u.responses.tune : NULL);
  if (st == HK_OK && s->rank >= 0) {
    st = hk_execute_responses(ctx, s, rs, n, t_ready);
    hk_round_ran(ctx, R);
  } else if (st == HK_OK) /* not a member: its cache follows theirs */
    for (uint32_t i = 0; i < n; i++)
      if (rs[i].agreed)
        hk_cache_apply(s->cache, &rs[i], rs[i].agreed);
  hk_negotiator_free_responses(rs, n);
  return st;
}

hk_status hk_round_coordinate(hk_ctx *ctx, hk_round *R,
                              const struct pollfd *pfds, int first_ctrl) {
  uint32_t n, nbits;
  hk_handle own = hk_queue_take(ctx);
  hk_status st = own ? hk_round_split(ctx, R, own, 0, &n, &nbits) : HK_OK;
  if (own && st == HK_OK)
    st = feed(ctx, 0, R->reqs, n, R->bits, R->bit_sets, nbits);
  if (st == HK_OK && R->shutdown_rank < 0 && hk_round_shutdown_requested(ctx))
    R->shutdown_rank = 0;
  for (int r = 1; r < ctx->size && st == HK_OK; r++) {
    const short ev = pfds[first_ctrl + r - 1].revents;
    int readable = 0;
    if (ev) { /* tcp: bytes or EOF; shm: doorbells, EOF, ring bytes */
      char who[32];
      snprintf(who, sizeof who, "rank %d", r);
      st = hk_ctrl_polled(&ctx->mesh.ctrl[r], ev, &readable, who);
    }
    if (st == HK_OK && readable)
      st = coordinator_receive(ctx, R, r);
  }
  if (st != HK_OK)
    return st;
  inspect_stalls(ctx, R);
  /* the other sets first: the world's message may stop the job, and a
   * set removed by it has had its ready tensors sent before */
  for (int32_t id = 1; id < ctx->nsets && st == HK_OK; id++) {
    hk_set *s = hk_sets_live(ctx, id);
    if (s)
      st = round_of(ctx, R, s);
  }
  if (st == HK_OK)
    st = round_of(ctx, R, hk_sets_world(ctx));
  if (st == HK_OK && R->shutdown_rank < 0 && !R->abort_status)
    st = answer_waiting(ctx, R);
  if (st == HK_OK)
    st = hk_round_check_silence(ctx, R);
  return st;
}

/* Rank 0: 1 when a live set rank r is a member of has tensors pending
 * (they may wait for r). */
static int awaits(hk_ctx *ctx, int r) {
  for (int32_t id = 0; id < ctx->nsets; id++) {
    const hk_set *s = hk_sets_live(ctx, id);
    if (s && hk_negotiator_pending(s->neg) && member_of(s, r) >= 0)
      return 1;
  }
  return 0;
}

/* When the silence that hk_round_check_silence fails on is due (hk_now()
 * seconds), or -1 when none runs: rank 0, the earliest of the ranks
 * tensors wait for (*who: which); rank > 0, its request's answer, or with
 * none in flight, the next ping (*who: -1). */
static double silence_due(hk_ctx *ctx, const hk_round *R, int *who) {
  const double t = ctx->cfg.timeout_s;
  double due = -1;
  *who = -1;
  if (ctx->size == 1 || R->shutdown_rank >= 0 || R->abort_status)
    return -1;
  if (ctx->rank != 0) /* (rank 0 may hold an answer HK_CYCLE_TIME_MS) */
    return R->quiet_since +
           (R->sent ? t + ctx->cfg.cycle_time_ms / 1000.0 : t / 4);
  for (int r = 1; r < ctx->size; r++)
    if (!R->waiting[r] && (due < 0 || R->heard[r] + t < due) &&
        awaits(ctx, r)) {
      due = R->heard[r] + t;
      *who = r;
    }
  return due;
}

int hk_round_ping_due(hk_ctx *ctx, const hk_round *R) {
  int who;
  double due = ctx->rank != 0 && !R->sent ? silence_due(ctx, R, &who) : -1;
  return due >= 0 && hk_now() >= due;
}

hk_status hk_round_check_silence(hk_ctx *ctx, hk_round *R) {
  int who;
  double due = silence_due(ctx, R, &who);
  if (due < 0 || hk_now() < due || (ctx->rank != 0 && !R->sent))
    return HK_OK;
  const double t = ctx->cfg.timeout_s;
  if (ctx->rank != 0)
    return hk_fail(HK_ERR_TIMEOUT,
                   "timed out after %.1f s waiting for rank 0 to answer rank "
                   "%d's request: no progress from rank 0 (stopped, or "
                   "stuck)",
                   t, ctx->rank);
  char what[HK_WIRE_MAX_REASON_LEN + 1];
  double oldest;
  stalled(ctx, hk_now(), 0, what, sizeof what, &oldest);
  return hk_fail(HK_ERR_TIMEOUT,
                 "timed out after %.1f s: no progress from rank %d, which "
                 "sent nothing (its background thread answers within %.1f s "
                 "however busy its trainer is: stopped, or stuck) while "
                 "tensors wait: %.700s",
                 t, who, t / 4, what);
}

/* Rank 0 ran a round, rank > 0 ran what rank 0 sent: the silence of the
 * others counts from now (nobody spoke to a rank that was running). */
void hk_round_ran(hk_ctx *ctx, hk_round *R) {
  double now = hk_now();
  if (ctx->rank != 0) {
    R->quiet_since = now;
    return;
  }
  for (int r = 1; r < ctx->size; r++)
    R->heard[r] = now;
}

/* See round.h. */
int hk_round_timeout_ms(hk_ctx *ctx, const hk_round *R) {
  int who;
  double until = silence_due(ctx, R, &who);
  int pending = 0;
  for (int32_t id = 0; id < ctx->nsets && !pending && ctx->rank == 0; id++) {
    const hk_set *s = hk_sets_live(ctx, id);
    pending = s && hk_negotiator_pending(s->neg) > 0;
  }
  if ((ctx->cfg.stall_check_s > 0 || ctx->cfg.stall_shutdown_s > 0) &&
      pending && (until < 0 || ctx->next_stall_check < until))
    until = ctx->next_stall_check;
  const double hold = ctx->cfg.cycle_time_ms / 1000.0;
  for (int r = 1; r < ctx->size && ctx->rank == 0; r++)
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
  R->quiet_since = hk_now();
  if (ctx->rank != 0)
    return HK_OK;
  R->waiting = calloc((size_t)ctx->size, 1);
  R->waiting_since = calloc((size_t)ctx->size, sizeof *R->waiting_since);
  R->heard = calloc((size_t)ctx->size, sizeof *R->heard);
  if (!R->waiting || !R->waiting_since || !R->heard)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the negotiation state");
  hk_round_ran(ctx, R);
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.answer = 1;
  m.u.responses.shutdown_rank = -1;
  return hk_wire_encode(&m, &R->answer);
}

void hk_round_free(hk_round *R) {
  free(R->waiting);
  free(R->waiting_since);
  free(R->heard);
  hk_buf_free(&R->answer);
  free(R->reqs);
  free(R->bits);
  free(R->bit_sets);
  free(R->bit_keys);
  free(R->seen);
}
