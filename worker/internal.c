/*
 * internal.c - the introspection getters (internal.h), next to the
 * runtime context they read.
 */
#include "worker/internal.h"

#include <string.h>

#include "common/status.h"

hk_status hk_internal_last_collective(hk_collective_timing *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx || hk_introspect_read(&ctx->obs, out, NULL) != HK_OK)
    return hk_fail(HK_ERR_NOT_INITIALIZED,
                   "hk_internal_last_collective outside hk_init..hk_shutdown");
  return HK_OK;
}

hk_status hk_internal_negotiation_counts(hk_negotiation_counts *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx || hk_introspect_read(&ctx->obs, NULL, out) != HK_OK)
    return hk_fail(HK_ERR_NOT_INITIALIZED, "hk_internal_negotiation_counts "
                                           "outside hk_init..hk_shutdown");
  return HK_OK;
}

hk_status hk_internal_control_counts(hk_control_counts *out) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_fail(HK_ERR_NOT_INITIALIZED, "hk_internal_control_counts "
                                           "outside hk_init..hk_shutdown");
  *out = (hk_control_counts){0};
  for (int r = 0; ctx->mesh.ctrl && r < ctx->size; r++) {
    hk_ctrl *c = &ctx->mesh.ctrl[r];
    if (!c->ops)
      continue;
    const int shm = strcmp(hk_ctrl_kind(c), "shm") == 0;
    uint64_t s = atomic_load_explicit(&c->frames_sent, memory_order_relaxed);
    uint64_t g =
        atomic_load_explicit(&c->frames_received, memory_order_relaxed);
    *(shm ? &out->shm_sent : &out->tcp_sent) += s;
    *(shm ? &out->shm_received : &out->tcp_received) += g;
  }
  return HK_OK;
}
