/*
 * sets_api.c - include/hk/hk.h's process set functions: adding and
 * removing a set (collectives of the world, negotiated and run by
 * worker/sets.c on every rank) and asking about one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "worker/queue.h"
#include "worker/runtime.h"
#include "worker/sets.h"

/* Submits this rank's part of an add or a remove (hk.process_set.<n>:
 * the n-th pairs with the n-th of every rank, whichever it is, so a rank
 * that adds while another removes gets a mismatch naming both), waits for
 * it and returns its status; *id (if not NULL) gets an add's new id. */
static hk_status run_world_call(hk_ctx *ctx, hk_coll coll, int64_t set,
                                int *members, int n, int problem, int32_t *id) {
  hk_wire_request req;
  hk_wire_request_clear(&req);
  req.coll = (uint8_t)coll;
  req.row_elems = 1;
  req.prescale = req.postscale = 1.0;
  req.count = (uint64_t)set; /* a remove's set, as given */
  pthread_mutex_lock(&ctx->mu);
  uint64_t seq = ctx->set_seq++;
  pthread_mutex_unlock(&ctx->mu);
  snprintf(req.name, sizeof req.name, "hk.process_set.%llu",
           (unsigned long long)seq);
  struct hk_handle_s out = {
      .members = members, .nmembers = n, .members_problem = problem};
  hk_handle h;
  hk_queue_next_waits(1); /* waited for below: not a burst to hold */
  hk_status st = hk_queue_submit(ctx, &req, NULL, NULL, &out, &h);
  hk_queue_next_waits(0);
  if (st != HK_OK)
    return st;
  pthread_mutex_lock(&ctx->mu); /* the id, before hk_wait frees h */
  while (!h->done)
    pthread_cond_wait(&ctx->done_cv, &ctx->mu);
  int32_t got = h->out_int;
  pthread_mutex_unlock(&ctx->mu);
  st = hk_wait(h);
  if (st == HK_OK && id)
    *id = got;
  return st;
}

hk_status hk_process_set_add(const int *ranks, int n, hk_process_set *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_runtime_no_job("hk_process_set_add");
  /* what is wrong here is said by every rank (sets.h): this rank still
   * takes part, so that none waits for it */
  int problem = !out                     ? HK_SETS_NULL_OUT
                : !ranks                 ? HK_SETS_NULL_RANKS
                : n < 1 || n > ctx->size ? HK_SETS_BAD_COUNT
                                         : HK_SETS_FINE;
  int *copy = NULL;
  if (problem == HK_SETS_FINE) {
    copy = malloc((size_t)n * sizeof *copy);
    if (!copy)
      return hk_fail(HK_ERR_NOMEM, "hk_process_set_add: cannot copy %d ranks",
                     n);
    memcpy(copy, ranks, (size_t)n * sizeof *copy);
  }
  int32_t id = -1;
  hk_status st = run_world_call(ctx, HK_COLL_SET_ADD, 0, copy, n, problem, &id);
  if (st == HK_OK)
    *out = id;
  return st;
}

hk_status hk_process_set_remove(hk_process_set set) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_runtime_no_job("hk_process_set_remove");
  /* the set is checked when it runs, the same on every rank (sets.h) */
  return run_world_call(ctx, HK_COLL_SET_REMOVE, set, NULL, 0, HK_SETS_FINE,
                        NULL);
}

/* The live set `set` under ctx->mu, or NULL. */
static const hk_set *live_locked(const hk_ctx *ctx, hk_process_set set) {
  if (set < 0 || set >= ctx->nsets || ctx->sets[set]->removed)
    return NULL;
  return ctx->sets[set];
}

/* This rank's rank in set `set` (rank) or its size, or -1 (no job, an
 * unknown or removed set). */
static int ask(hk_process_set set, int rank) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return -1;
  pthread_mutex_lock(&ctx->mu);
  const hk_set *s = live_locked(ctx, set);
  int v = !s ? -1 : rank ? s->rank : s->size;
  pthread_mutex_unlock(&ctx->mu);
  return v;
}

int hk_process_set_rank(hk_process_set set) { return ask(set, 1); }

int hk_process_set_size(hk_process_set set) { return ask(set, 0); }

hk_status hk_process_set_ranks(hk_process_set set, int *ranks, int cap) {
  const char *fn = "hk_process_set_ranks";
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_runtime_no_job(fn);
  hk_status st = HK_OK;
  pthread_mutex_lock(&ctx->mu);
  const hk_set *s = live_locked(ctx, set);
  if (!s)
    st = hk_fail(HK_ERR_INVALID_ARG, "%s: process set %d %s", fn, (int)set,
                 set >= 0 && set < ctx->nsets ? "was removed"
                                              : "does not exist");
  else if (!ranks || cap < s->size)
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: process set %d has %d ranks; %s holds %d", fn, (int)set,
                 s->size, ranks ? "the array" : "a NULL array", cap);
  else
    memcpy(ranks, s->ranks, (size_t)s->size * sizeof *ranks);
  pthread_mutex_unlock(&ctx->mu);
  return st;
}
