/*
 * allreduce.h - the one table of allreduce implementations, and the one
 * place where the implementation of an allreduce is chosen.
 *
 * The model is Horovod's operation manager (horovod/common/ops/
 * operation_manager.cc): an ordered list of implementations, the first
 * that applies runs. Each entry names itself, says which memory it takes
 * (host or device buffers), whether it applies to this job and size
 * (world, hosts, bytes, settings), what it costs by the topology's
 * alpha-beta formulas (topology/cost.h), and how it runs. In table order:
 *
 *   host    shm           the shared-memory engine (collectives/shm_ring.h):
 *                         a one-host job whose flat ring runs through shared
 *                         memory; no cost (the first that applies runs)
 *           ring          the flat ring (collectives/ring.h); the fallback
 *           hierarchical  in-host rings and one ring per local position
 *                         across hosts (collectives/hierarchical.h)
 *           rd            recursive doubling (collectives/rd.h)
 *   device  local         one rank: no schedule, only the pack and unpack
 *           comm          one host: the device communicator (NCCL)
 *           hierarchical  several hosts where the host choice is
 *                         hierarchical: communicator reduce-scatter, the
 *                         shard across hosts from pinned memory, allgather
 *           staged        pinned copies around hk's flat ring; the fallback
 *                         (collectives/dev_allreduce.h has the schedules)
 *
 * The choice (hk_allreduce_choose): walk the entries of the memory kind in
 * order; the first that applies and has no cost runs at once; otherwise
 * the applying entries with a cost are compared and the cheapest runs
 * (ties: the earlier). A forced entry (HK_ALLREDUCE_ALGO, or
 * HK_HIERARCHICAL_ALLREDUCE=1) runs where it applies, else the fallback;
 * the shm engine, being the ring's schedule through shared memory, also
 * runs where the ring is forced. The choice depends only on the bytes and
 * on what every rank shares (the job's shape and agreed settings), so
 * every rank makes the same one. A tensor that may be fused is costed as
 * a batch (hk_allreduce_for_tensor), whether or not a round fuses it, so
 * it keeps its implementation, and so its bits, whether or not it is fused:
 * the fusion plan only groups tensors of one entry (coordinator/fusion.h
 * keeps a pointer to it).
 * hk_allreduce_setup works the choice out once per job as byte spans, so
 * choosing costs a few comparisons per tensor (hk_allreduce_for).
 *
 * Units: bytes are the tensor's own (count x element size); times in µs;
 * segment offsets in ELEMENTS.
 * Thread-safety: hk_allreduce_setup at hk_init; hk_allreduce_for,
 * hk_allreduce_choose and the entries' fields on any thread (reads only);
 * run / run_pieces on the thread that owns the rings (the background
 * thread), as the schedules they call.
 */
#ifndef HK_COLLECTIVES_ALLREDUCE_H
#define HK_COLLECTIVES_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/dev_allreduce.h"
#include "collectives/ring.h"
#include "collectives/shm_group.h"
#include "collectives/transport/link.h"
#include "device/device.h"
#include "hk/hk.h"
#include "topology/cost.h"

struct hk_allreduce_impl;

#define HK_ALLREDUCE_MAX_SPANS 16 /* changes of choice kept per memory kind */
#define HK_ALLREDUCE_MAX_IMPLS 8  /* entries in the table */

/** One span of the worked-out choice: impl runs from `from` bytes on. */
typedef struct hk_allreduce_span {
  size_t from;
  const struct hk_allreduce_impl *impl;
} hk_allreduce_span;

/**
 * What the implementations run over and what their choice depends on: one
 * per job and one per process set (over the set's members, ranks counted
 * in the set), filled by the worker at hk_init (a set's when it is added) (the
 * rings, the mesh's links, the device schedules once a device is open, the
 * settings every rank agreed on, the cost model's view of the job), then
 * hk_allreduce_setup. The rings, links, io and dev are the worker's (borrowed,
 * not owned); rd_scratch is owned (freed by hk_allreduce_release).
 */
typedef struct hk_allreduce_env {
  int rank, size;   /* this rank, world size (a process set's: this
                       rank's rank in it, its size) */
  int hosts;        /* hosts of the job (of the set's members) */
  int local_size;   /* ranks on this rank's host (the set's there) */
  int one_host_shm; /* one host, and the flat ring runs through shared
                       memory (collectives/shm_ring.h) */
  hk_ring *ring;    /* the flat ring over every rank */
  hk_ring *local_ring, *cross_ring; /* hierarchical's rings: NULL unless
                                       every host has the same number
                                       (> 1) of ranks and hosts > 1 */
  hk_link *const *peers;            /* peers[r]: the link to rank r (rd) */
  const hk_io *io;
  hk_dev_sched *dev; /* the device schedules, or NULL */
  int model_only;    /* a prediction's env (hkplan, planner/sim.h): no
                        rings, links or device; hierarchical applies where
                        hosts > 1 and local_size > 1 (where hk makes its
                        rings when every host has the same number of
                        ranks); never run */
  /* settings every rank agreed on (worker/agree.c checks them) */
  const struct hk_allreduce_impl *forced; /* NULL: auto */
  int no_hierarchical; /* HK_HIERARCHICAL_ALLREDUCE=0: auto never takes it */
  /* the cost model's view of the job (topology/cost.h) */
  hk_host_model model;     /* a host of this job */
  int model_hosts;         /* how many such hosts */
  double net_gbit;         /* each host's network rate (HK_NET_GBIT) */
  hk_step_figures figures; /* hk's own step latencies, model.fig */
  /* worked out by hk_allreduce_setup */
  hk_allreduce_span spans[2][HK_ALLREDUCE_MAX_SPANS]; /* [hk_mem_kind] */
  int nspans[2];
  /* working memory: recursive doubling's buffer, grown on demand */
  uint8_t *rd_scratch;
  size_t rd_scratch_bytes;
} hk_allreduce_env;

/** One allreduce (or fused batch) as an implementation runs it. */
typedef struct hk_allreduce_call {
  const void *src;   /* host: the inputs (may equal dst) */
  void *dst;         /* host: the result; device: the batch, reduced in place */
  const size_t *seg; /* host: the ring's size + 1 segment offsets, elements
                        (seg[size] = the count) */
  size_t nseg, seglen; /* device: nseg segments of seglen elements */
  hk_dtype dtype;
  hk_op op;                  /* device: HK_AVERAGE reduces as HK_SUM */
  const hk_ring_finish *fin; /* host: the finish (average, postscale), or
                                NULL; device: done by the unpack */
} hk_allreduce_call;

/** What a device entry needs made before it runs (the worker makes it). */
enum {
  HK_ALLREDUCE_NEEDS_COMM = 1,  /* the in-host device communicator */
  HK_ALLREDUCE_NEEDS_SLOTS = 2, /* the pinned staging slots */
};

/** One implementation: an entry of the table. */
typedef struct hk_allreduce_impl {
  const char *name;     /* unique within its memory kind: HK_ALLREDUCE_ALGO's
                           word for it (host), the settings check's */
  const char *schedule; /* what the timeline's "algorithm" and the info log
                           call it: the schedule that runs ("ring" for the
                           shm engine, which runs the ring's schedule) */
  hk_mem_kind mem;      /* the buffers it takes */
  int fallback;         /* applies everywhere: runs when nothing else does */
  /** Whether it can run an allreduce of `bytes` bytes in this job. */
  int (*applies)(const hk_allreduce_env *env, size_t bytes);
  /** Its predicted time (topology/cost.h), or NULL: no model, the first
   *  that applies of these runs. Errors: the formulas' HK_ERR_INVALID_ARG. */
  hk_status (*cost)(const hk_allreduce_env *env, size_t bytes, hk_cost *out);
  /** Runs it. Every rank of the job calls it with the same call (buffers
   *  aside). Errors: the schedule's (HK_ERR_PEER_LOST, HK_ERR_TIMEOUT
   *  naming the peer, HK_ERR_NOMEM, HK_ERR_DEVICE). */
  hk_status (*run)(hk_allreduce_env *env, const hk_allreduce_call *c);
  /** Host, or NULL: a fused batch reduced where its tensors lie (no fusion
   *  buffer), from the pieces of collectives/shm_group.h that the fusion
   *  layout places at seg (same bits as through a fusion buffer). */
  hk_status (*run_pieces)(hk_allreduce_env *env, const hk_shm_piece *pieces,
                          size_t npieces, const size_t *seg, hk_dtype dtype,
                          hk_op op, const hk_ring_finish *fin);
  /** Device: the segments a batch is laid out in (padded to seglen). */
  size_t (*segments)(const hk_allreduce_env *env);
  unsigned needs; /* device: HK_ALLREDUCE_NEEDS_* */
} hk_allreduce_impl;

/**
 * The entry of memory kind `mem` named `name` (case-insensitive), or NULL.
 */
const hk_allreduce_impl *hk_allreduce_find(hk_mem_kind mem, const char *name);

/**
 * The implementation for an allreduce of `bytes` bytes of memory kind
 * `mem`, by the rule above, worked out from the entries themselves (a
 * model run per costed entry): what hk_allreduce_setup tabulates. Never
 * NULL (the fallback always applies).
 */
const hk_allreduce_impl *hk_allreduce_choose(const hk_allreduce_env *env,
                                             hk_mem_kind mem, size_t bytes);

/**
 * Works the choice out as byte spans for both memory kinds. The choice of a
 * costed entry changes where the model's lines cross, so it is probed at 0 and
 * every power of two up to 2^44 bytes and each change placed exactly by
 * bisection. Call after the env's fields are set; again after `dev` is set.
 * Errors: none today (HK_OK); the status is for the caller's chain.
 */
hk_status hk_allreduce_setup(hk_allreduce_env *env);

/** hk_allreduce_choose's answer, read from the spans (a few comparisons).
 *  Before hk_allreduce_setup: hk_allreduce_choose itself. */
const hk_allreduce_impl *hk_allreduce_for(const hk_allreduce_env *env,
                                          hk_mem_kind mem, size_t bytes);

/**
 * The implementation one tensor of `bytes` bytes runs with, alone or in a
 * fused batch: a tensor that may be fused (`fusable`: hk_fusion_fusable
 * with `direct`, hk_fusion_direct_bytes, the size from which allreduces
 * run alone) is costed as a batch of `direct` bytes, the least a batch
 * holding the largest of them makes; any other at its own size. So a
 * step's many small gradients, fused, run the bandwidth-optimal schedule
 * their batch needs, not the latency-optimal one each would take alone
 * (recursive doubling across hosts sends the whole batch over the network
 * once per rank of a host). The answer depends on the tensor and the
 * job's settings alone, not on the fusion threshold nor on which tensors
 * a round fuses with it, so fusion (on, off, or any threshold) never
 * changes a bit of its result: every tensor of a batch has one
 * implementation, and the fusion layout keeps each element's reduction
 * order (coordinator/fusion.h). The price: a lone small allreduce across
 * hosts runs that schedule too. The worker's execute step and hkplan's
 * simulation both ask this. Pure; thread-safety: as hk_allreduce_for.
 */
const hk_allreduce_impl *hk_allreduce_for_tensor(const hk_allreduce_env *env,
                                                 hk_mem_kind mem, size_t bytes,
                                                 int fusable, size_t direct);

/**
 * Writes "<from> B: <name>; ..." for memory kind mem into buf (cap bytes,
 * cut to fit): the worked-out choice, for the settings check and the log.
 */
void hk_allreduce_describe(const hk_allreduce_env *env, hk_mem_kind mem,
                           char *buf, size_t cap);

/** Frees what the env owns (rd_scratch). Safe more than once. */
void hk_allreduce_release(hk_allreduce_env *env);

#endif
