/*
 * allreduce.c - the table of allreduce implementations and the choice
 * among them (see allreduce.h).
 */
#include "collectives/allreduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "collectives/hierarchical.h"
#include "collectives/rd.h"
#include "collectives/shm_ring.h"
#include "common/status.h"

/* The entries, in table order (the order is the rule: see allreduce.h). */
enum { SHM, RING, HIER, RD, DEV_LOCAL, DEV_COMM, DEV_HIER, DEV_STAGED, NIMPLS };
static const hk_allreduce_impl table[NIMPLS];

_Static_assert(NIMPLS <= HK_ALLREDUCE_MAX_IMPLS, "HK_ALLREDUCE_MAX_IMPLS");

static int always(const hk_allreduce_env *env, size_t bytes) {
  (void)env;
  (void)bytes;
  return 1;
}

static int several_ranks(const hk_allreduce_env *env, size_t bytes) {
  (void)bytes;
  return env->size > 1;
}

/* ---- host entries ---- */

/* The shm engine runs the ring's schedule through shared memory: where the
 * flat ring is the engine, it runs wherever the ring would (auto, the ring
 * forced, or a forced entry that does not apply here). */
static int shm_applies(const hk_allreduce_env *env, size_t bytes) {
  const hk_allreduce_impl *f = env->forced;
  return env->one_host_shm && env->size > 1 &&
         (!f || f == &table[RING] || !f->applies(env, bytes));
}

/* Whether hierarchical's rings exist (a model's env: would exist). */
static int have_hier_rings(const hk_allreduce_env *env) {
  if (env->model_only)
    return env->hosts > 1 && env->local_size > 1;
  return env->local_ring && env->cross_ring;
}

static int hier_applies(const hk_allreduce_env *env, size_t bytes) {
  (void)bytes;
  return have_hier_rings(env) && !env->no_hierarchical;
}

static hk_status ring_cost(const hk_allreduce_env *env, size_t bytes,
                           hk_cost *out) {
  return hk_cost_ring(&env->model, bytes, env->model_hosts, env->net_gbit, out);
}

static hk_status hier_cost(const hk_allreduce_env *env, size_t bytes,
                           hk_cost *out) {
  return hk_cost_hierarchical(&env->model, bytes, env->model_hosts,
                              env->net_gbit, out);
}

static hk_status rd_cost(const hk_allreduce_env *env, size_t bytes,
                         hk_cost *out) {
  return hk_cost_rd(&env->model, bytes, env->model_hosts, env->net_gbit, out);
}

static hk_status run_ring(hk_allreduce_env *env, const hk_allreduce_call *c) {
  return hk_ring_allreduce_segmented(env->ring, c->src, c->dst, c->seg,
                                     c->dtype, c->op, c->fin);
}

static hk_status run_hier(hk_allreduce_env *env, const hk_allreduce_call *c) {
  return hk_hier_allreduce(env->local_ring, env->cross_ring, c->src, c->dst,
                           c->seg, c->dtype, c->op, c->fin);
}

static hk_status run_rd(hk_allreduce_env *env, const hk_allreduce_call *c) {
  return hk_rd_allreduce(env->rank, env->size, env->peers, env->io, c->src,
                         c->dst, c->seg[env->size], c->dtype, c->op, c->fin,
                         &env->rd_scratch, &env->rd_scratch_bytes);
}

static hk_status run_shm_pieces(hk_allreduce_env *env,
                                const hk_shm_piece *pieces, size_t npieces,
                                const size_t *seg, hk_dtype dtype, hk_op op,
                                const hk_ring_finish *fin) {
  return hk_ring_shm_allreduce_pieces(env->ring, pieces, npieces, seg, dtype,
                                      op, fin);
}

/* ---- device entries ---- */

static int local_applies(const hk_allreduce_env *env, size_t bytes) {
  (void)bytes;
  return env->size == 1;
}

/* HK_ALLREDUCE_ALGO=ring keeps a device job on hk's own schedules (their
 * reduction order is documented; NCCL's depends on its channels). */
static int comm_applies(const hk_allreduce_env *env, size_t bytes) {
  (void)bytes;
  return env->size > 1 && env->local_size == env->size &&
         env->forced != &table[RING];
}

/* Where the host path would run hierarchical, the device path does too. */
static int dev_hier_applies(const hk_allreduce_env *env, size_t bytes) {
  return env->local_size > 1 && env->local_size < env->size &&
         have_hier_rings(env) &&
         hk_allreduce_for(env, HK_MEM_HOST, bytes) == &table[HIER];
}

static size_t one_segment(const hk_allreduce_env *env) {
  (void)env;
  return 1;
}

static size_t rank_segments(const hk_allreduce_env *env) {
  return (size_t)env->size;
}

static size_t hier_segments(const hk_allreduce_env *env) {
  return (size_t)env->local_size *
         (size_t)(env->cross_ring ? env->cross_ring->size : 1);
}

static hk_status run_local(hk_allreduce_env *env, const hk_allreduce_call *c) {
  (void)env;
  (void)c;
  return HK_OK; /* one rank: the pack and unpack are the whole of it */
}

/* The device schedules reduce HK_AVERAGE as a sum (the unpack divides). */
static hk_op dev_op(hk_op op) { return op == HK_AVERAGE ? HK_SUM : op; }

static hk_status run_dev_comm(hk_allreduce_env *env,
                              const hk_allreduce_call *c) {
  if (!c->nseg || !c->seglen)
    return HK_OK;
  return hk_dev_run_comm(env->dev, env->ring, c->dst, c->nseg, c->seglen,
                         c->dtype, dev_op(c->op));
}

static hk_status run_dev_hier(hk_allreduce_env *env,
                              const hk_allreduce_call *c) {
  if (!c->nseg || !c->seglen)
    return HK_OK;
  return hk_dev_run_hier(env->dev, env->cross_ring, c->dst, c->nseg, c->seglen,
                         c->dtype, dev_op(c->op));
}

static hk_status run_dev_staged(hk_allreduce_env *env,
                                const hk_allreduce_call *c) {
  if (!c->nseg || !c->seglen)
    return HK_OK;
  return hk_dev_run_staged(env->dev, env->ring, c->dst, c->nseg, c->seglen,
                           c->dtype, dev_op(c->op));
}

/* ---- the table ---- */

static const hk_allreduce_impl table[NIMPLS] = {
    [SHM] = {.name = "shm",
             .schedule = "ring",
             .mem = HK_MEM_HOST,
             .applies = shm_applies,
             .run = run_ring,
             .run_pieces = run_shm_pieces},
    [RING] = {.name = "ring",
              .schedule = "ring",
              .mem = HK_MEM_HOST,
              .fallback = 1,
              .applies = always,
              .cost = ring_cost,
              .run = run_ring},
    [HIER] = {.name = "hierarchical",
              .schedule = "hierarchical",
              .mem = HK_MEM_HOST,
              .applies = hier_applies,
              .cost = hier_cost,
              .run = run_hier},
    [RD] = {.name = "rd",
            .schedule = "rd",
            .mem = HK_MEM_HOST,
            .applies = several_ranks,
            .cost = rd_cost,
            .run = run_rd},
    [DEV_LOCAL] = {.name = "local",
                   .schedule = "local",
                   .mem = HK_MEM_DEVICE,
                   .applies = local_applies,
                   .run = run_local,
                   .segments = one_segment},
    [DEV_COMM] = {.name = "comm",
                  .schedule = "comm",
                  .mem = HK_MEM_DEVICE,
                  .applies = comm_applies,
                  .run = run_dev_comm,
                  .segments = one_segment,
                  .needs = HK_ALLREDUCE_NEEDS_COMM},
    [DEV_HIER] = {.name = "hierarchical",
                  .schedule = "hierarchical",
                  .mem = HK_MEM_DEVICE,
                  .applies = dev_hier_applies,
                  .run = run_dev_hier,
                  .segments = hier_segments,
                  .needs = HK_ALLREDUCE_NEEDS_COMM | HK_ALLREDUCE_NEEDS_SLOTS},
    [DEV_STAGED] = {.name = "staged",
                    .schedule = "staged",
                    .mem = HK_MEM_DEVICE,
                    .fallback = 1,
                    .applies = always,
                    .run = run_dev_staged,
                    .segments = rank_segments,
                    .needs = HK_ALLREDUCE_NEEDS_SLOTS},
};

/* ---- the choice ---- */

const hk_allreduce_impl *hk_allreduce_find(hk_mem_kind mem, const char *name) {
  for (int i = 0; i < NIMPLS; i++)
    if (table[i].mem == mem && name && strcasecmp(table[i].name, name) == 0)
      return &table[i];
  return NULL;
}

const hk_allreduce_impl *hk_allreduce_choose(const hk_allreduce_env *env,
                                             hk_mem_kind mem, size_t bytes) {
  const hk_allreduce_impl *forced =
      env->forced && env->forced->mem == mem ? env->forced : NULL;
  const hk_allreduce_impl *best = NULL, *fallback = NULL;
  double best_us = 0;
  for (int i = 0; i < NIMPLS; i++) {
    const hk_allreduce_impl *e = &table[i];
    if (e->mem != mem)
      continue;
    if (e->fallback && !fallback)
      fallback = e;
    if (!e->applies(env, bytes))
      continue;
    if (!e->cost) /* no model: the first that applies runs */
      return e;
    if (forced) {
      if (e == forced)
        return e;
      continue;
    }
    hk_cost c;
    if (e->cost(env, bytes, &c) != HK_OK)
      continue; /* a model it cannot evaluate: not a candidate */
    if (!best || c.time_us < best_us * (1.0 - 1e-12)) {
      best = e;
      best_us = c.time_us;
    }
  }
  return best ? best : fallback;
}

const hk_allreduce_impl *hk_allreduce_for(const hk_allreduce_env *env,
                                          hk_mem_kind mem, size_t bytes) {
  const int n = env->nspans[mem];
  if (n == 0) /* before hk_allreduce_setup */
    return hk_allreduce_choose(env, mem, bytes);
  const hk_allreduce_span *s = env->spans[mem];
  int i = n - 1;
  while (i > 0 && bytes < s[i].from)
    i--;
  return s[i].impl;
}

/* Adds a span: impl from `from` bytes on. */
static void add_span(hk_allreduce_env *env, hk_mem_kind mem, size_t from,
                     const hk_allreduce_impl *impl) {
  hk_allreduce_span *s = env->spans[mem];
  int n = env->nspans[mem];
  if (n > 0 && s[n - 1].impl == impl)
    return;
  if (n == HK_ALLREDUCE_MAX_SPANS)
    n--; /* more changes than a model of lines makes: keep the last */
  s[n] = (hk_allreduce_span){from, impl};
  env->nspans[mem] = n + 1;
}

/* The spans of one memory kind (see hk_allreduce_setup's header). */
static void build_spans(hk_allreduce_env *env, hk_mem_kind mem) {
  env->nspans[mem] = 0;
  hk_allreduce_span tmp[HK_ALLREDUCE_MAX_SPANS];
  int ntmp = 0;
  /* choose() while building: spans are read only once complete */
  size_t lo = 0;
  const hk_allreduce_impl *a_lo = hk_allreduce_choose(env, mem, 0);
  tmp[ntmp++] = (hk_allreduce_span){0, a_lo};
  for (size_t hi = 1; hi <= ((size_t)1 << 44);) {
    const hk_allreduce_impl *a_hi = hk_allreduce_choose(env, mem, hi);
    if (a_hi == a_lo) {
      lo = hi;
      hi *= 2;
      continue;
    }
    size_t l = lo, h = hi; /* choose(l) = a_lo, choose(h) != a_lo */
    while (h - l > 1) {
      size_t mid = l + (h - l) / 2;
      if (hk_allreduce_choose(env, mem, mid) == a_lo)
        l = mid;
      else
        h = mid;
    }
    a_lo = hk_allreduce_choose(env, mem, h);
    if (ntmp == HK_ALLREDUCE_MAX_SPANS)
      ntmp--;
    tmp[ntmp++] = (hk_allreduce_span){h, a_lo};
    lo = h; /* and probe hi again from here */
  }
  for (int i = 0; i < ntmp; i++)
    add_span(env, mem, tmp[i].from, tmp[i].impl);
}

hk_status hk_allreduce_setup(hk_allreduce_env *env) {
  env->nspans[HK_MEM_HOST] = env->nspans[HK_MEM_DEVICE] = 0;
  build_spans(env, HK_MEM_HOST); /* the device choice reads the host's */
  build_spans(env, HK_MEM_DEVICE);
  return HK_OK;
}

const hk_allreduce_impl *hk_allreduce_for_tensor(const hk_allreduce_env *env,
                                                 hk_mem_kind mem, size_t bytes,
                                                 int fusable, size_t direct) {
  return hk_allreduce_for(env, mem, fusable && direct > bytes ? direct : bytes);
}

void hk_allreduce_describe(const hk_allreduce_env *env, hk_mem_kind mem,
                           char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < env->nspans[mem] && at < cap; i++) {
    int w = snprintf(buf + at, cap - at, "%s%zu B: %s", i ? "; " : "",
                     env->spans[mem][i].from, env->spans[mem][i].impl->name);
    if (w < 0)
      break;
    at += (size_t)w;
  }
}

void hk_allreduce_release(hk_allreduce_env *env) {
  free(env->rd_scratch);
  env->rd_scratch = NULL;
  env->rd_scratch_bytes = 0;
}
