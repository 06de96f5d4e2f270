/*
 * plan.c - one candidate's prediction (plan.h).
 */
#include "planner/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* The exchange's end and busy time for hosts servers of s. */
static hk_status exchange(const hk_plan_input *in, const hk_plan_server *s,
                          int hosts, double net_gbit, double bwd_s,
                          hk_sim_result *r) {
  hk_sim_tensor *t = malloc(in->n * sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "plan: %u tensors", in->n);
  for (unsigned i = 0; i < in->n; i++)
    t[i] = (hk_sim_tensor){in->bytes[i], in->ready_frac[i] * bwd_s};
  hk_sim_job j = in->job;
  j.host = s->host;
  j.device = s->gpu != NULL;
  /* the fusion buffer's copies: the GPU's memory, or a host's (~10 GB/s,
   * common/config.c's HK_FUSION_DIRECT_BYTES note) */
  j.pack_gbps = s->gpu ? s->gpu->mem_gbps : 10.0;
  j.hosts = hosts;
  j.net_gbit = net_gbit;
  if (j.round_us < 0) /* request and answer at hk's step latencies
                         (worker/algo.c: 30 us across servers, 16.3 in one) */
    j.round_us = hosts > 1 ? 60.0 : 32.6;
  hk_status st = hk_sim_step(&j, t, in->n, r);
  free(t);
  return st;
}

hk_status hk_plan_eval(const hk_plan_input *in, const hk_plan_server *s,
                       int hosts, double net_gbit, double link_eff,
                       hk_plan_row *row) {
  memset(row, 0, sizeof *row);
  row->server = s;
  row->hosts = hosts;
  row->net_gbit = net_gbit;
  const int scaled = in->measured_on && s->gpu && in->measured_on != s->gpu;
  double c = in->step_s;
  if (scaled)
    c *= hk_gpu_tflops(in->measured_on, in->amp) /
         hk_gpu_tflops(s->gpu, in->amp);
  if (!isfinite(c) || c <= 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "plan: the compute time per step on %s is %g s (--step-s "
                   "%g scaled from %s): not a finite time > 0",
                   s->name, c, in->step_s,
                   scaled ? in->measured_on->name : "itself");
  const double bwd = c * in->bwd_frac;
  row->compute_s = c;
  hk_sim_result r, r1;
  hk_status st = exchange(in, s, hosts, net_gbit * link_eff, bwd, &r);
  if (st != HK_OK)
    return st;
  st = exchange(in, s, 1, net_gbit * link_eff, bwd, &r1);
  if (st != HK_OK) {
    hk_sim_result_free(&r);
    return st;
  }
  row->exposed_s = r.end_s > bwd ? r.end_s - bwd : 0.0;
  row->busy_s = r.busy_s;
  row->step_s = c + row->exposed_s;
  double first = 1.0;
  for (unsigned i = 0; i < in->n; i++)
    first = in->ready_frac[i] < first ? in->ready_frac[i] : first;
  row->span_s = (r.end_s > bwd ? r.end_s : bwd) - first * bwd;
  row->step1_s = c + (r1.end_s > bwd ? r1.end_s - bwd : 0.0);
  row->efficiency = row->step1_s / row->step_s;
  row->gpu_efficiency = c / row->step_s;
  row->batches = r.nbatches;
  row->rounds = r.rounds;
  row->band_s = 0.10 * r.busy_s + (scaled ? 0.12 : 0.05) * c;
  const double gpus = (double)s->host.gpus * hosts;
  row->samples_s = in->batch * gpus / row->step_s;
  row->cost_per_m =
      s->price >= 0 ? s->price * hosts / 3600.0 / row->samples_s * 1e6 : -1.0;
  size_t grad_bytes = 0;
  for (unsigned i = 0; i < in->n; i++)
    grad_bytes += in->bytes[i];
  size_t fusion =
      in->job.threshold < grad_bytes ? in->job.threshold : grad_bytes;
  double per_param = 8.0 + in->opt_bytes + (in->amp ? 2.0 : 0.0);
  row->mem_gib = ((double)in->params * per_param + (double)fusion) /
                     (1024.0 * 1024 * 1024) +
                 in->act_mib * in->batch / 1024.0;
  row->fits = !s->gpu || row->mem_gib <= s->gpu->mem_gib;
  hk_sim_result_free(&r);
  hk_sim_result_free(&r1);
  return HK_OK;
}
