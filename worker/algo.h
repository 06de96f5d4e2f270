/*
 * algo.h - the worker's side of the allreduce choice: it fills the job's
 * hk_allreduce_env (collectives/allreduce.h, the one table of allreduce
 * implementations and the one place the choice is made) from the
 * context: the rings, the mesh's links, the settings every rank agreed
 * on, and the cost model's view of the job's hosts:
 *   HK_ALLREDUCE_ALGO = auto (default) | ring | hierarchical | rd forces
 *     that entry where it applies (common/config.c refuses "tree", a
 *     prediction of NCCL's only);
 *   HK_HIERARCHICAL_ALLREDUCE = 1 forces hierarchical (Horovod's
 *     HOROVOD_HIERARCHICAL_ALLREDUCE), 0 keeps auto from choosing it.
 * Hierarchical needs several hosts with the same number of ranks each;
 * elsewhere the ring runs (the same bits, see hierarchical.h).
 *
 * The model's host: HK_TOPO_FILE's layout (its GPU rings, NCCL's NVLink /
 * PCIe figures), as a GPU job would see it; else hk's TCP figures (algo.c).
 * Hosts are linked at HK_NET_GBIT Gbit/s each.
 * Thread-safety: hk_algo_setup in hk_init, before the background thread;
 * hk_algo_retune on the background thread.
 */
#ifndef HK_WORKER_ALGO_H
#define HK_WORKER_ALGO_H

#include "worker/context.h"

/**
 * Fills ctx->ar and works its choice out (hk_allreduce_setup), after the
 * layout, the shared-memory setup and the rings (ctx->have_hier known);
 * rank 0 logs the choice at info level. Errors: HK_ERR_CONFIG naming the
 * variables that contradict each other (HK_HIERARCHICAL_ALLREDUCE against
 * HK_ALLREDUCE_ALGO), or HK_TOPO_FILE's error; hierarchical forced where
 * hosts differ in size is only a warning (the ring runs).
 */
hk_status hk_algo_setup(hk_ctx *ctx);

/**
 * The autotuner changed ctx->cfg.hierarchical (worker/tune.h): the job's
 * environment takes the new setting (forced entry, no_hierarchical) and
 * its choice is worked out again (hk_allreduce_setup). Every rank calls it
 * at the same round, on the background thread. Process sets keep theirs
 * (hierarchical never applies to them). Errors: as hk_algo_setup's
 * HK_ERR_CONFIG (a contradiction with HK_ALLREDUCE_ALGO, which the
 * autotuner never searches against).
 */
hk_status hk_algo_retune(hk_ctx *ctx);

/**
 * Fills s->own_ar, process set s's environment (this rank a member; its
 * ring s->own_ring set up), and works its choice out: ranks counted in
 * the set, the members' hosts for the cost model, the job's settings;
 * hierarchical never applies (a set has no local and cross rings: the
 * ring runs where it is forced), nor the single-copy engine (the set's
 * ring runs over links); the device entries see the set's members on
 * this host (worker/devplane.h gives it a communicator). Called on the
 * background thread when the set is added (hk_init's, for
 * HK_PROCESS_SETS). Errors: HK_ERR_NOMEM, HK_TOPO_FILE's HK_ERR_CONFIG.
 */
hk_status hk_algo_setup_set(hk_ctx *ctx, hk_set *s);

#endif
