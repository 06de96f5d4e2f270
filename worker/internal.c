/*
 * internal.c - the introspection getters (internal.h), next to the
 * runtime context they read.
 */
#include "worker/internal.h"

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
