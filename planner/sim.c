/*
 * sim.c - the step simulation (sim.h).
 */
#include "planner/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/dev_allreduce.h"
#include "common/status.h"
#include "coordinator/fusion.h"
#include "coordinator/wire.h"

hk_status hk_sim_env(const hk_sim_job *j, hk_allreduce_env *env) {
  memset(env, 0, sizeof *env);
  if (!j || j->hosts < 1 || j->host.gpus < 1 || j->inflight < 1 ||
      (j->hosts > 1 && !(j->net_gbit > 0)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "simulation: %d servers of %d GPUs at %.3g Gbit/s, %d "
                   "batches in flight",
                   j ? j->hosts : 0, j ? j->host.gpus : 0, j ? j->net_gbit : 0,
                   j ? j->inflight : 0);
  env->model_only = 1;
  env->size = j->hosts * j->host.gpus;
  env->hosts = j->hosts;
  env->local_size = j->host.gpus;
  /* host tensors on one host run the shm engine, as hk_algo_setup sets */
  env->one_host_shm = j->hosts == 1;
  env->no_hierarchical = j->no_hierarchical;
  env->model = j->host;
  if (j->host.fig) {
    env->figures = *j->host.fig;
    env->model.fig = &env->figures;
  }
  env->model_hosts = j->hosts;
  env->net_gbit = j->hosts > 1 ? j->net_gbit : 1.0;
  return hk_allreduce_setup(env);
}

/* The formulas of the entries that have no cost of their own, by name and
 * memory kind: the schedule each runs (collectives/allreduce.h). */
typedef hk_status (*costless_fn)(const hk_allreduce_env *env,
                                 const hk_sim_job *j, size_t bytes, double *us);

static hk_status nothing_us(const hk_allreduce_env *env, const hk_sim_job *j,
                            size_t bytes, double *us) {
  (void)env, (void)j, (void)bytes;
  *us = 0.0;
  return HK_OK;
}

static hk_status ring_us(const hk_allreduce_env *env, const hk_sim_job *j,
                         size_t bytes, double *us) {
  (void)j;
  hk_cost c;
  hk_status st =
      hk_cost_ring(&env->model, bytes, env->model_hosts, env->net_gbit, &c);
  *us = c.time_us;
  return st;
}

static hk_status nccl_us(const hk_allreduce_env *env, const hk_sim_job *j,
                         size_t bytes, double *us) {
  (void)j;
  hk_cost c;
  hk_status st = hk_cost_nccl(&env->model, bytes, 1, env->net_gbit, &c);
  *us = c.time_us;
  return st;
}

/* The staged schedule (collectives/dev_allreduce.h): the batch crosses in
 * chunks of one pinned slot (HK_DEV_SLOT_BYTES), the device-to-host copy
 * of chunk k+1, the ring on chunk k and the host-to-device copy of chunk
 * k-1 overlapping: chunks x the slowest stage (a ring call on a chunk, or
 * a chunk's copy at pcie_gbps; GB/s = 1e3 B/us), plus the first chunk's
 * copy in and the last one's copy out. */
static hk_status staged_us(const hk_allreduce_env *env, const hk_sim_job *j,
                           size_t bytes, double *us) {
  size_t chunks =
      bytes ? (bytes + HK_DEV_SLOT_BYTES - 1) / HK_DEV_SLOT_BYTES : 1;
  size_t chunk = bytes / chunks;
  double ring;
  hk_status st = ring_us(env, j, chunk, &ring);
  double copy = j->pcie_gbps > 0 ? (double)chunk / (j->pcie_gbps * 1e3) : 0.0;
  *us = (double)chunks * (ring > copy ? ring : copy) + 2.0 * copy;
  return st;
}

static const struct {
  hk_mem_kind mem;
  const char *name;
  costless_fn fn;
} costless[] = {
    {HK_MEM_HOST, "shm", ring_us},
    {HK_MEM_DEVICE, "local", nothing_us},
    {HK_MEM_DEVICE, "comm", nccl_us},
    {HK_MEM_DEVICE, "staged", staged_us},
};

hk_status hk_sim_batch_us(const hk_allreduce_env *env, const hk_sim_job *j,
                          const hk_allreduce_impl *impl, size_t bytes,
                          double *us) {
  *us = 0.0;
  if (j->collective != HK_SIM_HK && impl->mem == HK_MEM_DEVICE &&
      env->model_hosts > 1) {
    hk_cost c;
    hk_status st = j->collective == HK_SIM_NCCL
                       ? hk_cost_nccl(&env->model, bytes, env->model_hosts,
                                      env->net_gbit, &c)
                       : hk_cost_ring(&env->model, bytes, env->model_hosts,
                                      env->net_gbit, &c);
    *us = c.time_us;
    return st;
  }
  if (impl->cost) {
    hk_cost c;
    hk_status st = impl->cost(env, bytes, &c);
    *us = c.time_us;
    return st;
  }
  for (size_t i = 0; i < sizeof costless / sizeof costless[0]; i++)
    if (costless[i].mem == impl->mem && !strcmp(costless[i].name, impl->name))
      return costless[i].fn(env, j, bytes, us);
  /* a device entry that runs a host entry's schedule (hierarchical) */
  const hk_allreduce_impl *h = hk_allreduce_find(HK_MEM_HOST, impl->name);
  if (h && h->cost) {
    hk_cost c;
    hk_status st = h->cost(env, bytes, &c);
    *us = c.time_us;
    return st;
  }
  return hk_fail(HK_ERR_INVALID_ARG,
                 "simulation: no formula for the allreduce implementation '%s'",
                 impl->name);
}

/* What hk's worker decides for one tensor of `bytes` bytes of the job:
 * whether it may be fused (*fusable) and the implementation it runs. */
static const hk_allreduce_impl *tensor_impl(const hk_allreduce_env *env,
                                            const hk_sim_job *j, size_t bytes,
                                            int *fusable) {
  const size_t direct = hk_fusion_direct_bytes(j->direct, env->size);
  *fusable = hk_fusion_fusable(HK_COLL_ALLREDUCE, 1, j->device, bytes, direct);
  return hk_allreduce_for_tensor(env, j->device ? HK_MEM_DEVICE : HK_MEM_HOST,
                                 bytes, *fusable, direct);
}

uint32_t hk_sim_plan_round(const hk_allreduce_env *env, const hk_sim_job *j,
                           const size_t *bytes, uint32_t n, uint32_t *order,
                           uint32_t *starts, hk_status *st) {
  *st = HK_OK;
  if (n == 0)
    return 0;
  hk_fusion_item *items = calloc(n, sizeof *items);
  uint8_t *taken = malloc(n);
  if (!items || !taken) {
    free(items);
    free(taken);
    *st = hk_fail(HK_ERR_NOMEM, "simulation: %u responses", n);
    return 0;
  }
  for (uint32_t i = 0; i < n; i++) {
    int fusable;
    const hk_allreduce_impl *impl = tensor_impl(env, j, bytes[i], &fusable);
    items[i] = (hk_fusion_item){.fusable = fusable,
                                .coll = HK_COLL_ALLREDUCE,
                                .set = 0,
                                .dtype = j->dtype,
                                .op = HK_AVERAGE,
                                .mem = j->device ? HK_WIRE_MEM_DEVICE
                                                 : HK_WIRE_MEM_HOST,
                                .divisor = env->size,
                                .impl = impl,
                                .bytes = bytes[i]};
  }
  uint32_t g = hk_fusion_plan(items, n, j->threshold, taken, order, starts);
  free(items);
  free(taken);
  return g;
}

void hk_sim_result_free(hk_sim_result *r) {
  if (!r)
    return;
  free(r->order);
  free(r->batches);
  memset(r, 0, sizeof *r);
}

/* Tensor indices by (ready time, submission order). */
typedef struct ready_key {
  double t;
  uint32_t i;
} ready_key;

static int by_ready(const void *a, const void *b) {
  const ready_key *x = a, *y = b;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

hk_status hk_sim_step(const hk_sim_job *j, const hk_sim_tensor *t, uint32_t n,
                      hk_sim_result *out) {
  memset(out, 0, sizeof *out);
  if (n == 0)
    return hk_fail(HK_ERR_INVALID_ARG, "simulation: the gradient set has no "
                                       "tensors");
  hk_allreduce_env env;
  hk_status st = hk_sim_env(j, &env);
  if (st != HK_OK)
    return st;
  ready_key *keys = malloc(n * sizeof *keys);
  size_t *bytes = malloc(n * sizeof *bytes);
  uint32_t *pos = malloc(n * sizeof *pos), *starts = malloc((n + 1) * 4);
  double *ends = calloc((size_t)j->inflight, sizeof *ends);
  out->order = malloc(n * sizeof *out->order);
  out->batches = malloc(n * sizeof *out->batches);
  if (!keys || !bytes || !pos || !starts || !ends || !out->order ||
      !out->batches) {
    st = hk_fail(HK_ERR_NOMEM, "simulation: %u tensors", n);
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    if (!isfinite(t[i].ready_s)) { /* NaN never compares: no order */
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "simulation: tensor %u's ready time is %g s (not finite)", i,
                   t[i].ready_s);
      goto done;
    }
    keys[i] = (ready_key){t[i].ready_s, i};
  }
  qsort(keys, n, sizeof *keys, by_ready);
  const double pack_bps = j->pack_gbps > 0 ? j->pack_gbps * 1e9 : INFINITY;
  double thread = 0.0, stream = 0.0, end = 0.0;
  uint32_t next = 0, placed = 0;
  while (next < n && st == HK_OK) {
    double at = thread > keys[next].t ? thread : keys[next].t;
    double take = at + j->cycle_s;
    uint32_t m = 0;
    while (next + m < n && keys[next + m].t <= take)
      m++;
    if (j->cycle_s > 0 && keys[next + m - 1].t > at)
      at = keys[next + m - 1].t; /* held until its last tensor came */
    for (uint32_t k = 0; k < m; k++)
      bytes[k] = t[keys[next + k].i].bytes;
    uint32_t g = hk_sim_plan_round(&env, j, bytes, m, pos, starts, &st);
    double clock = at + j->round_us * 1e-6;
    for (uint32_t b = 0; b < g && st == HK_OK; b++) {
      hk_sim_batch *B = &out->batches[out->nbatches];
      B->first = placed;
      B->n = starts[b + 1] - starts[b];
      B->bytes = 0;
      for (uint32_t k = starts[b]; k < starts[b + 1]; k++) {
        out->order[placed++] = keys[next + pos[k]].i;
        B->bytes += bytes[pos[k]];
      }
      int fusable;
      const hk_allreduce_impl *impl =
          tensor_impl(&env, j, bytes[pos[starts[b]]], &fusable);
      double us;
      const double wire = j->wire_ratio > 0 ? j->wire_ratio : 1.0;
      st = hk_sim_batch_us(&env, j, impl, (size_t)((double)B->bytes * wire),
                           &us);
      double s = us * 1e-6 + (B->n > 1 ? 2.0 * (double)B->bytes / pack_bps : 0);
      B->impl = impl->name;
      B->round = out->rounds;
      if (j->device) { /* on the stream; the thread waits for room */
        double *oldest = &ends[out->nbatches % (uint32_t)j->inflight];
        if (*oldest > clock)
          clock = *oldest;
        B->start_s = clock > stream ? clock : stream;
        stream = B->end_s = B->start_s + s;
        *oldest = B->end_s;
      } else {
        B->start_s = clock;
        clock = B->end_s = clock + s;
      }
      out->busy_s += s;
      end = B->end_s > end ? B->end_s : end;
      out->nbatches++;
    }
    thread = clock;
    next += m;
    out->rounds++;
  }
  out->end_s = end;
done:
  free(keys);
  free(bytes);
  free(pos);
  free(starts);
  free(ends);
  hk_allreduce_release(&env);
  if (st != HK_OK)
    hk_sim_result_free(out);
  return st;
}
