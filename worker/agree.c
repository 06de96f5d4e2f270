/*
 * agree.c - every rank checks that the settings which must match do (see
 * agree.h).
 */
#include "worker/agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

#define RECORD_BYTES 4096

/* "NAME=value\n" lines: what this rank decided. */
static void record(const hk_ctx *ctx, char *r) {
  size_t at = 0;
#define ADD(...) at += (size_t)snprintf(r + at, RECORD_BYTES - at, __VA_ARGS__)
  static const char *const hier[] = {"(unset)", "0", "1"};
  ADD("HK_ALLREDUCE_ALGO=%s\n",
      ctx->cfg.allreduce_algo[0] ? ctx->cfg.allreduce_algo : "auto");
  ADD("HK_HIERARCHICAL_ALLREDUCE=%s\n", hier[ctx->cfg.hierarchical + 1]);
  ADD("HK_NET_GBIT=%.17g\n", ctx->cfg.net_gbit);
  ADD("HK_FUSION_THRESHOLD=%zu\n", ctx->cfg.fusion_threshold);
  ADD("HK_FUSION_DIRECT_BYTES=%zu\n", ctx->cfg.fusion_direct);
  ADD("HK_CACHE_CAPACITY=%zu\n", ctx->cfg.cache_capacity);
  ADD("device backend (HK_DEVICE)=%s\n",
      ctx->dev ? ctx->dev->ops->name : "none");
  ADD("HK_COMPRESSION=%d\n", ctx->cfg.compression);
  static const char *const intra[] = {"auto", "shm", "tcp"};
  ADD("HK_INTRA_TRANSPORT=%s\n", intra[ctx->cfg.intra_transport % 3]);
  ADD("HK_SHM_SLOT_BYTES=%zu\n", ctx->cfg.shm_slot_bytes);
  ADD("HK_STAGING_CHUNK_BYTES=%zu\n", ctx->cfg.staging_chunk_bytes);
  /* (what auto resolves to needs no check: one host's ranks decide it
   * together, worker/intra.c, and only a one-host job's algorithm choice
   * depends on it, worker/algo.c) */
  ADD("HK_TOPO_FILE's host model=%d GPUs, %.17g GB/s, nvlink %d\n",
      ctx->ar.model.gpus, ctx->ar.model.intra_gbps, ctx->ar.model.intra_nvlink);
  /* the choice itself, worked out from all of the above (and the job's
   * shape): host and device tensors */
  char choice[256];
  hk_allreduce_describe(&ctx->ar, HK_MEM_HOST, choice, sizeof choice);
  ADD("allreduce choice (host tensors)=%s\n", choice);
  hk_allreduce_describe(&ctx->ar, HK_MEM_DEVICE, choice, sizeof choice);
  ADD("allreduce choice (device tensors)=%s\n", choice);
  ADD("ring order (HK_TOPO_FILE)=");
  for (int p = 0; p < ctx->size && at < RECORD_BYTES - 16; p++)
    ADD("%s%d", p ? " " : "", ctx->ring.order[p]);
  ADD("\n");
#undef ADD
}

/* The first line where a and b differ: its name, and each one's value. */
static void first_difference(const char *a, const char *b, char *name,
                             size_t cap, char *va, char *vb, size_t vcap) {
  while (*a || *b) {
    const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
    size_t la = ea ? (size_t)(ea - a) : strlen(a);
    size_t lb = eb ? (size_t)(eb - b) : strlen(b);
    if (la != lb || memcmp(a, b, la) != 0) {
      const char *eq = memchr(a, '=', la);
      size_t ln = eq ? (size_t)(eq - a) : la;
      snprintf(name, cap, "%.*s", (int)ln, a);
      snprintf(va, vcap, "%.*s", (int)(la - (eq ? ln + 1 : ln)),
               a + (eq ? ln + 1 : ln));
      const char *eqb = memchr(b, '=', lb);
      size_t lnb = eqb ? (size_t)(eqb - b) : lb;
      snprintf(vb, vcap, "%.*s", (int)(lb - (eqb ? lnb + 1 : lnb)),
               b + (eqb ? lnb + 1 : lnb));
      return;
    }
    a += la + (ea != NULL);
    b += lb + (eb != NULL);
  }
  snprintf(name, cap, "settings");
  va[0] = vb[0] = '\0';
}

hk_status hk_agree_settings(hk_ctx *ctx) {
  const int n = ctx->size;
  if (n == 1)
    return HK_OK;
  char *all = calloc((size_t)n + 1, RECORD_BYTES);
  if (!all)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the settings records");
  char *mine = all + (size_t)n * RECORD_BYTES;
  record(ctx, mine);
  hk_status st = hk_ring_allgather_records(&ctx->ring, mine, RECORD_BYTES, all);
  for (int r = 1; r < n && st == HK_OK; r++) {
    char *a = all, *b = all + (size_t)r * RECORD_BYTES;
    a[RECORD_BYTES - 1] = b[RECORD_BYTES - 1] = '\0';
    if (strcmp(a, b) == 0)
      continue;
    char name[64], va[256], vb[256];
    first_difference(a, b, name, sizeof name, va, vb, sizeof va);
    st = hk_fail(HK_ERR_CONFIG,
                 "%s differs between ranks: rank 0 has '%s', rank %d has "
                 "'%s': every rank must use the same value",
                 name, va, r, vb);
  }
  free(all);
  return st;
}
