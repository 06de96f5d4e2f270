/*
 * introspect.c - the timing record of the ring collectives (see
 * worker/introspect.h): written by the background thread, read by anyone.
 */
#include "worker/introspect.h"

#include <stdio.h>

#include "common/status.h"

void hk_introspect_record(hk_ctx *ctx, const char *name, double start_s,
                          double end_s) {
  pthread_mutex_lock(&ctx->introspect_mu);
  hk_collective_timing *t = &ctx->timing;
  /* busy_s counts time, not records: the tensors of one fused batch all
   * record the batch's interval, which must count once. Collectives run
   * one after another, so only an overlap with the last one is possible. */
  double from = t->seq && start_s < t->end_s ? t->end_s : start_s;
  if (end_s > from)
    t->busy_s += end_s - from;
  t->seq++;
  t->start_s = start_s;
  t->end_s = end_s;
  snprintf(t->name, sizeof t->name, "%s", name);
  pthread_mutex_unlock(&ctx->introspect_mu);
}

hk_status hk_internal_last_collective(hk_collective_timing *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_fail(HK_ERR_NOT_INITIALIZED,
                   "hk_internal_last_collective outside hk_init..hk_shutdown");
  pthread_mutex_lock(&ctx->introspect_mu);
  *out = ctx->timing;
  pthread_mutex_unlock(&ctx->introspect_mu);
  return HK_OK;
}

void hk_introspect_count(hk_ctx *ctx, hk_count_kind kind, uint64_t n) {
  pthread_mutex_lock(&ctx->introspect_mu);
  hk_negotiation_counts *c = &ctx->counts;
  uint64_t *v[] = {&c->requests, &c->rounds, &c->answers, &c->fused_batches,
                   &c->fused_tensors};
  *v[kind] += n;
  pthread_mutex_unlock(&ctx->introspect_mu);
}

hk_status hk_internal_negotiation_counts(hk_negotiation_counts *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_fail(HK_ERR_NOT_INITIALIZED, "hk_internal_negotiation_counts "
                                           "outside hk_init..hk_shutdown");
  pthread_mutex_lock(&ctx->introspect_mu);
  *out = ctx->counts;
  pthread_mutex_unlock(&ctx->introspect_mu);
  return HK_OK;
}
