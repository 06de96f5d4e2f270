/*
 * algo.h - which allreduce algorithm runs a tensor: the flat ring, the
 * hierarchical allreduce (collectives/hierarchical.h) or recursive
 * doubling (collectives/rd.h), chosen per tensor by its size with the
 * alpha-beta model of topology/cost.h, or forced:
 *   HK_ALLREDUCE_ALGO = auto (default) | ring | hierarchical | rd
 *     ("tree" is a prediction of NCCL's algorithm only: an error here);
 *   HK_HIERARCHICAL_ALLREDUCE = 1 forces hierarchical (Horovod's
 *     HOROVOD_HIERARCHICAL_ALLREDUCE), 0 keeps auto from choosing it.
 * Hierarchical needs several hosts with the same number of ranks each;
 * elsewhere it is the flat ring (the same bits, see hierarchical.h).
 *
 * The model's host: HK_TOPO_FILE's layout (its GPU rings, NCCL's NVLink /
 * PCIe figures), as a GPU job would see it; else hk's TCP figures below.
 * Hosts are linked at HK_NET_GBIT Gbit/s each. A job on one host over
 * shared memory (HK_INTRA_TRANSPORT) is no ring of steps: auto takes
 * recursive doubling up to a measured size and the shm engine above
 * (worker/algo.c).
 *
 * The choice depends only on the tensor's own byte count and on settings
 * every rank shares, so every rank makes the same one, and a tensor keeps
 * its algorithm, and so its bits, whether or not it is fused: the fusion
 * plan only groups tensors of one algorithm (coordinator/fusion.h).
 * Thread-safety: hk_algo_setup in hk_init; hk_algo_for on any thread
 * (reads only).
 */
#ifndef HK_WORKER_ALGO_H
#define HK_WORKER_ALGO_H

#include <stddef.h>

#include "worker/context.h"

/**
 * Reads the settings above into ctx (after the layout and the rings are
 * set up: ctx->have_hier must be known). Errors: HK_ERR_CONFIG naming the
 * variable and its value (an unknown algorithm, tree, hierarchical forced
 * where hosts differ in size is only a warning: the ring runs).
 */
hk_status hk_algo_setup(hk_ctx *ctx);

/** The algorithm for an allreduce of `bytes` bytes (never AUTO or TREE):
 *  a lookup in the byte thresholds hk_algo_setup worked out from the
 *  model (a few comparisons; no model run per tensor). */
hk_algo hk_algo_for(const hk_ctx *ctx, size_t bytes);

#endif
