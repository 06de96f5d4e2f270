/*
 * introspect.c - the timing record of the ring collectives (see
 * worker/introspect.h): written by the background thread, read by anyone.
 */
#include "worker/introspect.h"

#include <stdio.h>

#include "common/status.h"

void hk_introspect_record(hk_ctx *ctx, const char *name, double start_s,
                          double end_s) {
  pthread_mutex_lock(&ctx->mu);
  hk_collective_timing *t = &ctx->timing;
  t->seq++;
  t->start_s = start_s;
  t->end_s = end_s;
  t->busy_s += end_s - start_s;
  snprintf(t->name, sizeof t->name, "%s", name);
  pthread_mutex_unlock(&ctx->mu);
}

hk_status hk_internal_last_collective(hk_collective_timing *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_fail(HK_ERR_NOT_INITIALIZED,
                   "hk_internal_last_collective outside hk_init..hk_shutdown");
  pthread_mutex_lock(&ctx->mu);
  *out = ctx->timing;
  pthread_mutex_unlock(&ctx->mu);
  return HK_OK;
}
