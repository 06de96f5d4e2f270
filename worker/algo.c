/*
 * algo.c - the allreduce algorithm choice (see algo.h).
 */
#include "worker/algo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "topology/topo.h"

/* hk's TCP collectives, measured on the reference machine
 * (bench/peers/results/limits.txt): a step between two ranks of one
 * host costs a loopback half round trip, 16.3 us; loopback TCP moves
 * 3.6 GB/s one way. A step across hosts: the half round trip measured on
 * the namespace bed (bench/netbed_bench.sh), 30 us, close to what kernel
 * TCP over 10 GbE gives. hk's collectives start when negotiation ends,
 * which costs every algorithm the same: no per-call term. */
#define HK_TCP_INTRA_STEP_US 16.3
#define HK_TCP_NET_STEP_US 30.0
#define HK_TCP_INTRA_GBPS 3.6
#define HK_RD_FUSED_BYTES ((size_t)4 << 20)

static void build_spans(hk_ctx *ctx);

/* A job on one host over shared memory (worker/intra.h): the ring is the
 * shm engine (collectives/shm_group.h: one synchronisation up to 1 MiB /
 * n^2, three per round above), which is no 2(N-1)-step ring, so the
 * model's ring term does not describe it. Measured on the reference
 * machine with the cores kept for the benchmark (chrt -r 1, hkbench
 * --raw, 500 iterations, 256 B - 64 KiB): the engine is as fast as
 * recursive doubling over the shm links or faster at every size (np 2:
 * 3.0 against 3.9 us at 256 B; np 4: 15.6 against 17.6 us), so auto
 * always takes it there (and tensors of every size then share a fusion
 * buffer). Under heavy load rd had looked faster up to 4 KiB. */

static hk_status host_model(hk_ctx *ctx) {
  const char *file = getenv("HK_TOPO_FILE");
  ctx->figures =
      (hk_step_figures){0.0, HK_TCP_INTRA_STEP_US, HK_TCP_NET_STEP_US};
  /* hosts of unequal size: modelled as one host of every rank */
  int uniform = hk_layout_uniform(ctx->layout, ctx->size);
  ctx->model_hosts = uniform ? ctx->cross_size : 1;
  ctx->model = (hk_host_model){uniform ? ctx->local_size : ctx->size,
                               HK_TCP_INTRA_GBPS, 0, &ctx->figures};
  if (!file || !*file || ctx->model.gpus == 1)
    return HK_OK;
  hk_topo *t = NULL;
  hk_status st = hk_topo_load_env(&t);
  if (st == HK_OK)
    st = hk_host_model_from_topo(t, ctx->model.gpus, &ctx->model);
  hk_topo_free(t);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(HK_ERR_CONFIG, "HK_TOPO_FILE: %s", msg);
  }
  return HK_OK;
}

hk_status hk_algo_setup(hk_ctx *ctx) {
  hk_algo forced;
  hk_status st = hk_cost_algo_from_env(&forced);
  if (st != HK_OK)
    return st;
  if (forced == HK_ALGO_TREE)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_ALLREDUCE_ALGO=tree: hk's collectives have no tree "
                   "(hktopo predicts NCCL's); use ring, hierarchical, rd or "
                   "auto");
  int hier = ctx->cfg.hierarchical; /* -1 unset, 0, 1 */
  if (hier == 1 && forced != HK_ALGO_AUTO && forced != HK_ALGO_HIERARCHICAL)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_HIERARCHICAL_ALLREDUCE=1 contradicts "
                   "HK_ALLREDUCE_ALGO=%s",
                   hk_algo_name(forced));
  if (hier == 0 && forced == HK_ALGO_HIERARCHICAL)
    return hk_fail(HK_ERR_CONFIG, "HK_HIERARCHICAL_ALLREDUCE=0 contradicts "
                                  "HK_ALLREDUCE_ALGO=hierarchical");
  if (hier == 1)
    forced = HK_ALGO_HIERARCHICAL;
  if (forced == HK_ALGO_HIERARCHICAL && !ctx->have_hier && ctx->rank == 0 &&
      ctx->cross_size > 1 && ctx->local_size > 1)
    hk_log(HK_LOG_WARNING, "hierarchical allreduce needs the same number of "
                           "ranks on every host: running the flat ring");
  ctx->algo_forced = forced;
  ctx->algo_mask = 1u << HK_ALGO_RING | 1u << HK_ALGO_RD;
  if (ctx->have_hier && hier != 0)
    ctx->algo_mask |= 1u << HK_ALGO_HIERARCHICAL;
  st = host_model(ctx);
  if (st == HK_OK)
    build_spans(ctx);
  /* a fused group of rd tensors stays within rd's sizes; with a power of
   * two of at least 4 ranks, rd halves large buffers (collectives/rd.h),
   * which measured faster than the ring up to 4 MiB (np 4 on the 2-core
   * VM: 5.3 ms against 7.1 ms at 4 MiB, 13.4 against 11.7 at 8 MiB), so
   * a fused batch runs rd up to there (worker/execute.c, group_algo);
   * not on one host over shared memory, where the shm engine is faster
   * from 4 KiB (small1000 at np 4: 2 fused rd collectives of 2 MB took
   * 9.6 ms, one engine allreduce of the 4 MB 3.1 ms) */
  ctx->rd_limit = 0;
  if (st == HK_OK && forced == HK_ALGO_AUTO) {
    for (size_t b = 256; b <= ((size_t)1 << 30); b *= 2)
      if (hk_algo_for(ctx, b) == HK_ALGO_RD)
        ctx->rd_limit = b;
    const int shm_host = ctx->cross_size == 1 && ctx->intra;
    if (ctx->rd_limit && !shm_host && ctx->size >= 4 &&
        !(ctx->size & (ctx->size - 1)) && ctx->rd_limit < HK_RD_FUSED_BYTES)
      ctx->rd_limit = HK_RD_FUSED_BYTES;
  }
  if (st == HK_OK && ctx->rank == 0 && ctx->size > 1) {
    size_t sizes[] = {1024, 65536, 1 << 20, 64 << 20};
    char line[256] = "";
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      snprintf(line + strlen(line), sizeof line - strlen(line), " %zu B: %s;",
               sizes[i], hk_algo_name(hk_algo_for(ctx, sizes[i])));
    hk_log(HK_LOG_INFO, "allreduce algorithm (%s):%s rd fused up to %zu B",
           hk_algo_name(ctx->algo_forced), line, ctx->rd_limit);
  }
  return st;
}

/* What the cost model chooses for `bytes` (auto), or the forced one, with
 * what this job cannot run mapped to the ring. */
static hk_algo model_choice(const hk_ctx *ctx, size_t bytes) {
  hk_algo a = ctx->algo_forced;
  if (a == HK_ALGO_AUTO && ctx->cross_size == 1 && ctx->intra)
    return HK_ALGO_RING;
  if (a == HK_ALGO_AUTO) {
    hk_cost c;
    if (hk_cost_choose_among(&ctx->model, bytes, ctx->model_hosts,
                             ctx->cfg.net_gbit, ctx->algo_mask, &c) != HK_OK)
      return HK_ALGO_RING;
    a = c.algo;
  }
  if (a == HK_ALGO_HIERARCHICAL && !ctx->have_hier)
    a = HK_ALGO_RING;
  if (ctx->size == 1)
    a = HK_ALGO_RING;
  return a;
}

/* Adds a span: `a` from `from` bytes on. */
static void add_span(hk_ctx *ctx, size_t from, hk_algo a) {
  int n = ctx->algo_nspans;
  if (n > 0 && ctx->algo_span[n - 1] == a)
    return;
  if (n == (int)(sizeof ctx->algo_from / sizeof ctx->algo_from[0])) {
    n--; /* more switches than a model of lines makes: keep the last */
    ctx->algo_nspans = n;
  }
  ctx->algo_from[n] = from;
  ctx->algo_span[n] = (uint8_t)a;
  ctx->algo_nspans = n + 1;
}

/*
 * Works out, once, the byte counts at which the model's choice changes,
 * so that choosing costs a few comparisons per tensor instead of a run of
 * the model. The model's times are lines in the size (alpha + beta x
 * bytes), so its choice changes at a few sizes only: it is probed at 0
 * and every power of two up to 2^44 bytes, and each change between two
 * probes is placed exactly by bisection (a second change inside one
 * octave is found by bisecting again from the first). The table is the
 * choice: every rank builds the same one from the same settings.
 */
static void build_spans(hk_ctx *ctx) {
  ctx->algo_nspans = 0;
  size_t lo = 0;
  hk_algo a_lo = model_choice(ctx, 0);
  add_span(ctx, 0, a_lo);
  for (size_t hi = 1; hi <= ((size_t)1 << 44);) {
    hk_algo a_hi = model_choice(ctx, hi);
    if (a_hi == a_lo) {
      lo = hi;
      hi *= 2;
      continue;
    }
    size_t l = lo, h = hi; /* model(l) = a_lo, model(h) != a_lo */
    while (h - l > 1) {
      size_t mid = l + (h - l) / 2;
      if (model_choice(ctx, mid) == a_lo)
        l = mid;
      else
        h = mid;
    }
    a_lo = model_choice(ctx, h);
    add_span(ctx, h, a_lo);
    lo = h; /* and probe hi again from here */
  }
}

hk_algo hk_algo_for(const hk_ctx *ctx, size_t bytes) {
  if (ctx->algo_nspans == 0) /* before hk_algo_setup */
    return model_choice(ctx, bytes);
  int i = ctx->algo_nspans - 1;
  while (i > 0 && bytes < ctx->algo_from[i])
    i--;
  return (hk_algo)ctx->algo_span[i];
}
