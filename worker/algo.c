/*
 * algo.c - the job's allreduce environment and its choice (see algo.h).
 */
#include "worker/algo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/allreduce.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/fusion.h"
#include "topology/figures.h"
#include "topology/topo.h"

/* hk's TCP collectives' figures (HK_TCP_*): topology/figures.h. */

/* A job on one host over shared memory (worker/intra.h): the flat ring is
 * the shm engine (collectives/shm_group.h: one synchronisation up to 1 MiB
 * / n^2, three per round above), which is no 2(N-1)-step ring, so the
 * model's ring term does not describe it; the table's shm entry, which
 * has no cost, runs there. Measured on the reference machine (hkbench
 * --raw, 500 iterations, 256 B - 64 KiB): the engine is as fast as
 * recursive doubling over the shm links or faster at every size (np 2:
 * 3.0 against 3.9 us at 256 B; np 4: 15.6 against 17.6 us). */

/* The model's hosts for ranks spread over `hosts` hosts, `per_host` on
 * each when uniform (hosts of unequal size: modelled as one host of every
 * rank, `size`). */
static hk_status host_model(hk_ctx *ctx, hk_allreduce_env *e, int uniform,
                            int hosts, int per_host, int size) {
  const char *file = ctx->cfg.topo_file;
  e->figures = (hk_step_figures){0.0, HK_TCP_INTRA_STEP_US, HK_TCP_NET_STEP_US};
  e->model_hosts = uniform ? hosts : 1;
  e->model = (hk_host_model){uniform ? per_host : size, HK_TCP_INTRA_GBPS, 0,
                             &e->figures};
  if (!*file || e->model.gpus == 1)
    return HK_OK;
  hk_topo *t = NULL;
  hk_status st = hk_topo_load_setting(file, &t);
  if (st == HK_OK)
    st = hk_host_model_from_topo(t, e->model.gpus, &e->model);
  hk_topo_free(t);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(HK_ERR_CONFIG, "HK_TOPO_FILE: %s", msg);
  }
  return HK_OK;
}

/* The forced entry: HK_ALLREDUCE_ALGO, or HK_HIERARCHICAL_ALLREDUCE=1. */
static hk_status forced_entry(hk_ctx *ctx, const hk_allreduce_impl **out) {
  const char *name = ctx->cfg.allreduce_algo; /* "" = auto */
  const int hier = ctx->cfg.hierarchical;     /* -1 unset, 0, 1 */
  if (hier == 1 && *name && strcmp(name, "hierarchical") != 0)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_HIERARCHICAL_ALLREDUCE=1 contradicts "
                   "HK_ALLREDUCE_ALGO=%s",
                   name);
  if (hier == 0 && strcmp(name, "hierarchical") == 0)
    return hk_fail(HK_ERR_CONFIG, "HK_HIERARCHICAL_ALLREDUCE=0 contradicts "
                                  "HK_ALLREDUCE_ALGO=hierarchical");
  if (hier == 1)
    name = "hierarchical";
  *out = *name ? hk_allreduce_find(HK_MEM_HOST, name) : NULL;
  return HK_OK;
}

hk_status hk_algo_setup(hk_ctx *ctx) {
  hk_allreduce_env *e = &ctx->ar;
  hk_allreduce_release(e);
  memset(e, 0, sizeof *e);
  hk_status st = forced_entry(ctx, &e->forced);
  if (st != HK_OK)
    return st;
  if (e->forced && !strcmp(e->forced->name, "hierarchical") &&
      !ctx->have_hier && ctx->rank == 0 && ctx->cross_size > 1 &&
      ctx->local_size > 1)
    hk_log(HK_LOG_WARNING, "hierarchical allreduce needs the same number of "
                           "ranks on every host: running the flat ring");
  e->rank = ctx->rank;
  e->size = ctx->size;
  e->hosts = ctx->cross_size;
  e->local_size = ctx->local_size;
  e->one_host_shm = ctx->cross_size == 1 && ctx->intra;
  e->ring = &ctx->ring;
  e->local_ring = ctx->have_hier ? &ctx->local_ring : NULL;
  e->cross_ring = ctx->have_hier ? &ctx->cross_ring : NULL;
  e->peers = ctx->sets[0]->peers;
  e->io = &ctx->io;
  e->no_hierarchical = ctx->cfg.hierarchical == 0;
  e->net_gbit = ctx->cfg.net_gbit;
  st = host_model(ctx, e, hk_layout_uniform(ctx->layout, ctx->size),
                  ctx->cross_size, ctx->local_size, ctx->size);
  if (st == HK_OK)
    st = hk_allreduce_setup(e);
  if (st == HK_OK && ctx->rank == 0 && ctx->size > 1) {
    size_t sizes[] = {1024, 65536, 1 << 20, 64 << 20};
    char line[256] = "";
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      snprintf(line + strlen(line), sizeof line - strlen(line), " %zu B: %s;",
               sizes[i], hk_allreduce_for(e, HK_MEM_HOST, sizes[i])->schedule);
    const size_t direct =
        hk_fusion_direct_bytes(ctx->cfg.fusion_direct, ctx->size);
    hk_log(HK_LOG_INFO,
           "allreduce algorithm (%s):%s tensors up to %zu B (fused or not): %s",
           e->forced ? e->forced->name : "auto", line, direct,
           hk_allreduce_for_tensor(e, HK_MEM_HOST, 1, 1, direct)->name);
  }
  return st;
}

hk_status hk_algo_retune(hk_ctx *ctx) {
  hk_allreduce_env *e = &ctx->ar;
  hk_status st = forced_entry(ctx, &e->forced);
  if (st != HK_OK)
    return st;
  e->no_hierarchical = ctx->cfg.hierarchical == 0;
  st = hk_allreduce_setup(e);
  if (st == HK_OK && ctx->rank == 0) {
    char line[256];
    hk_allreduce_describe(e, HK_MEM_HOST, line, sizeof line);
    hk_log(HK_LOG_DEBUG,
           "allreduce choice with HK_HIERARCHICAL_ALLREDUCE=%d: %s",
           ctx->cfg.hierarchical, line);
  }
  return st;
}

hk_status hk_algo_setup_set(hk_ctx *ctx, hk_set *s) {
  hk_allreduce_env *e = &s->own_ar;
  hk_allreduce_release(e);
  memset(e, 0, sizeof *e);
  /* the members' hosts: how many, and how many members on each */
  int *on = calloc((size_t)ctx->cross_size, sizeof *on);
  if (!on)
    return hk_fail(HK_ERR_NOMEM, "cannot count process set %d's hosts",
                   (int)s->id);
  for (int j = 0; j < s->size; j++)
    on[ctx->layout[s->ranks[j]].cross_rank]++;
  int hosts = 0, per_host = 0, uniform = 1;
  for (int h = 0; h < ctx->cross_size; h++) {
    if (!on[h])
      continue;
    uniform &= !per_host || on[h] == per_host;
    per_host = on[h];
    hosts++;
  }
  const int here = on[ctx->cross_rank];
  free(on);
  e->forced = ctx->ar.forced; /* the settings every rank agreed on */
  e->rank = s->rank;
  e->size = s->size;
  e->hosts = hosts;
  e->local_size = here;
  e->one_host_shm = 0; /* its ring runs over links (hk_rings_set) */
  e->ring = &s->own_ring;
  e->peers = s->peers;
  e->io = &ctx->io;
  e->no_hierarchical = ctx->cfg.hierarchical == 0;
  e->net_gbit = ctx->cfg.net_gbit;
  hk_status st = host_model(ctx, e, uniform, hosts, per_host, s->size);
  if (st == HK_OK)
    st = hk_allreduce_setup(e);
  return st;
}
