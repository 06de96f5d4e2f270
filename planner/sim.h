/*
 * sim.h - one training step's gradient exchange, simulated with hk's own
 * policy: negotiation rounds, the fusion plan (coordinator/fusion.h: the
 * function the worker packs its batches with), the allreduce
 * implementation hk would choose for each batch (collectives/allreduce.h:
 * the table and its choice, on an env that has the job's shape and no
 * rings) and that implementation's time by the alpha-beta formulas hk
 * chooses with (topology/cost.h).
 *
 * The step (docs/plan.md, "The model"): the backward pass makes tensor i
 * ready at ready_s[i] (seconds from the backward pass's start), in
 * submission order. The background thread runs rounds: a round starts
 * when the thread is free and a tensor is ready; it takes every tensor
 * ready by then, plus those ready within the cycle time (HK_CYCLE_TIME_MS)
 * when one is set, ordered as rank 0 answers them (the time each became
 * ready on every rank, ties in submission order, which is also the
 * response cache's bit order in a steady state); it costs round_us (the
 * request to rank 0 and the answer). Its responses are planned into
 * batches by hk_fusion_plan with hk_fusion_fusable's rule, and each batch
 * runs for its formula's time, plus the copy into and out of the fusion
 * buffer (2 x bytes at pack_gbps) when it holds more than one tensor.
 * Host batches run one after another on the thread; device batches run
 * one after another on hk's stream while the thread goes on negotiating
 * (at most `inflight` batches queued: HK_DEVICE_INFLIGHT).
 * Times in seconds unless the name says _us; bytes are bytes.
 * Thread-safety: reentrant (no shared state).
 */
#ifndef HK_PLANNER_SIM_H
#define HK_PLANNER_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/allreduce.h"
#include "hk/hk.h"
#include "topology/cost.h"

/** Who runs a GPU job's batches across servers. */
typedef enum hk_sim_collective {
  HK_SIM_HK = 0,        /* hk's own table (the default) */
  HK_SIM_NCCL = 1,      /* NCCL's own choice over every GPU (hk_cost_nccl:
                           ring, hierarchical or tree), as a framework that
                           calls NCCL across servers runs */
  HK_SIM_NCCL_RING = 2, /* NCCL's flat ring over every GPU (hk_cost_ring
                           with the host's figures: NCCL before its trees) */
} hk_sim_collective;

/** The job the step runs in. */
typedef struct hk_sim_job {
  hk_host_model host;  /* one server (topology/cost.h); host.fig is
                          copied into the env's figures when set */
  int hosts;           /* servers, >= 1 */
  double net_gbit;     /* each server's network rate as the cross-server
                          phase gets it (link rate x efficiency), Gbit/s */
  int device;          /* 1: GPU tensors (the device entries); 0: host */
  int no_hierarchical; /* HK_HIERARCHICAL_ALLREDUCE=0 */
  int collective;      /* GPU batches across servers: hk_sim_collective */
  size_t threshold;    /* HK_FUSION_THRESHOLD, bytes */
  size_t direct;       /* HK_FUSION_DIRECT_BYTES (0: hk's default) */
  double cycle_s;      /* HK_CYCLE_TIME_MS / 1000 */
  int inflight;        /* HK_DEVICE_INFLIGHT, >= 1 */
  double round_us;     /* one negotiation round */
  double pack_gbps;    /* fusion buffer copies, GB/s */
  double pcie_gbps;    /* device<->host staging copies (the staged
                          schedule), GB/s */
  uint8_t dtype;       /* hk_dtype of every gradient */
  double wire_ratio;   /* bytes sent per gradient byte: 1, or 0.5 when
                          HK_COMPRESSION packs float32 device gradients
                          into 16 bits (the choice of implementation and
                          the fusion plan count the gradients' own bytes,
                          as the worker does; the collective's time the
                          bytes sent); 0 counts as 1 */
} hk_sim_job;

/** One tensor of the step. */
typedef struct hk_sim_tensor {
  size_t bytes;   /* the gradient's own (count x element size) */
  double ready_s; /* from the backward pass's start */
} hk_sim_tensor;

/** One batch the step ran. */
typedef struct hk_sim_batch {
  uint32_t first, n;     /* its tensors: order[first .. first + n) */
  size_t bytes;          /* their sum */
  const char *impl;      /* the implementation's name (static) */
  double start_s, end_s; /* when it ran */
  uint32_t round;        /* the round that answered it, from 0 */
} hk_sim_batch;

typedef struct hk_sim_result {
  double end_s;    /* the last batch's end, from the backward start */
  double busy_s;   /* sum of the batches' times */
  uint32_t rounds; /* rounds that ran something */
  uint32_t nbatches;
  uint32_t *order;       /* n tensor indices, in the order they ran; owned */
  hk_sim_batch *batches; /* nbatches; owned */
} hk_sim_result;

/**
 * Fills *env for job j (a model's env: env->model_only; choose with
 * hk_allreduce_for after it). Errors: HK_ERR_INVALID_ARG (hosts < 1,
 * gpus < 1, net_gbit <= 0 with hosts > 1, inflight < 1).
 */
hk_status hk_sim_env(const hk_sim_job *j, hk_allreduce_env *env);

/**
 * The predicted time (µs) of one allreduce batch of `bytes` on env by
 * implementation impl: the entry's own cost when it has one; else the
 * formula of the schedule it runs: one rank 0; the device communicator
 * NCCL's choice on one host (hk_cost_nccl); the shm engine hk's ring
 * formula; staged its pipeline of pinned slots: chunks of
 * HK_DEV_SLOT_BYTES, each stage the slower of the flat ring on a chunk and
 * a chunk's copy at pcie_gbps, plus one copy in and one out.
 * With j->collective other than HK_SIM_HK, a GPU batch across servers is
 * costed by that formula over every GPU instead, whatever impl.
 * Errors: the formulas' HK_ERR_INVALID_ARG.
 */
hk_status hk_sim_batch_us(const hk_allreduce_env *env, const hk_sim_job *j,
                          const hk_allreduce_impl *impl, size_t bytes,
                          double *us);

/**
 * Plans one round's responses t[idx[0..n)] (in response order) as hk's
 * worker does (hk_fusion_fusable, hk_allreduce_for_tensor and
 * hk_fusion_plan), all allreduces of j->dtype, averaged: order[] (n)
 * gets positions into idx in run order and starts[] (n + 1) the groups'
 * boundaries. Returns the number of groups, or 0 with n == 0.
 * Errors: HK_ERR_NOMEM (returns 0, *st set).
 */
uint32_t hk_sim_plan_round(const hk_allreduce_env *env, const hk_sim_job *j,
                           const size_t *bytes, uint32_t n, uint32_t *order,
                           uint32_t *starts, hk_status *st);

/**
 * Simulates one step of t[0..n) (submission order). *out is owned by the
 * caller: free with hk_sim_result_free. Errors: HK_ERR_INVALID_ARG (as
 * hk_sim_env; n == 0: "no tensors"; a ready time that is not finite:
 * "tensor I's ready time is .. s (not finite)"), HK_ERR_NOMEM.
 */
hk_status hk_sim_step(const hk_sim_job *j, const hk_sim_tensor *t, uint32_t n,
                      hk_sim_result *out);

/** Frees what hk_sim_step allocated. NULL fields are fine. */
void hk_sim_result_free(hk_sim_result *r);

#endif
