/*
 * plan.h - one candidate's prediction (docs/plan.md, "The model"):
 *   compute   c = step_s x rate(measured GPU) / rate(candidate's GPU) at
 *             the precision in use (step_s itself when the GPU is the same
 *             or none was named); the backward pass is its last bwd_frac;
 *   exchange  hk_sim_step (sim.h) with tensor i ready at ready_frac[i] of
 *             the backward pass;
 *   step      c + exposed, exposed = max(0, end of the last batch - end of
 *             the backward pass);
 *   efficiency step on one server / step on n servers (the same per-GPU
 *             batch: throughput per GPU against one server's);
 *   samples/s batch x GPUs x servers / step; cost per million samples =
 *             price x servers / 3600 / samples/s x 1e6;
 *   memory    per GPU: params x (4 weights + 4 gradients + optimiser
 *             state (sgd 0, momentum 4, adam 8) + 2 with mixed precision
 *             (autocast's FP16 weight copies)) + the fusion buffer
 *             (min(threshold, gradient bytes)) + act_mib x batch;
 *   band      +-(10 % of the exchange's busy time + 5 % of c, or 12 % of c
 *             when c was scaled from another GPU).
 * Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_PLAN_H
#define HK_PLANNER_PLAN_H

#include <stddef.h>

#include "planner/gpus.h"
#include "planner/sim.h"

/** What every candidate shares. */
typedef struct hk_plan_input {
  const size_t *bytes;      /* n gradients as sent, submission order */
  const double *ready_frac; /* n, in [0, 1]: when each is ready, as a
                               fraction of the backward pass */
  unsigned n;
  size_t params;                  /* parameters (elements) */
  double step_s;                  /* compute per step on one GPU, s */
  const hk_gpu_spec *measured_on; /* the GPU step_s was measured on, or
                                     NULL: each candidate's own */
  int amp;                        /* mixed precision */
  double bwd_frac;                /* backward share of step_s, (0, 1] */
  int batch;                      /* samples per GPU per step */
  int opt_bytes;                  /* optimiser state bytes per parameter */
  double act_mib;                 /* activation MiB per sample */
  hk_sim_job job;                 /* fusion, cycle, rounds, dtype, ...; host,
                                     hosts, net_gbit set per candidate */
} hk_plan_input;

/** One server type. */
typedef struct hk_plan_server {
  char name[128];         /* topology base name */
  const hk_gpu_spec *gpu; /* NULL: a CPU host (host tensors, no
                             memory bound, no rate scaling) */
  hk_host_model host;     /* all its GPUs; host.fig NULL or &fig */
  hk_step_figures fig;    /* --latency-us's figures */
  double price;           /* per hour, or < 0: none given */
} hk_plan_server;

typedef struct hk_plan_row {
  const hk_plan_server *server;
  int hosts;
  double net_gbit; /* the link rate as given */
  double compute_s, step_s, band_s, exposed_s, busy_s;
  double step1_s;        /* the same on one server */
  double span_s;         /* first gradient ready -> exchange done (or backward
                            done, if later) */
  double efficiency;     /* step1_s / step_s */
  double gpu_efficiency; /* compute_s / step_s: against one GPU (rank)
                           alone, which exchanges nothing */
  double samples_s;
  double cost_per_m; /* < 0: no price */
  double mem_gib;
  int fits;
  size_t batches, rounds;
} hk_plan_row;

/**
 * Predicts server s x hosts at net_gbit (x link_eff) into *row.
 * Errors: the simulation's (HK_ERR_INVALID_ARG, HK_ERR_NOMEM);
 * HK_ERR_INVALID_ARG when the compute time, scaled to s's GPU, is not a
 * finite time > 0 ("plan: the compute time per step on NAME is ..").
 */
hk_status hk_plan_eval(const hk_plan_input *in, const hk_plan_server *s,
                       int hosts, double net_gbit, double link_eff,
                       hk_plan_row *row);

#endif
