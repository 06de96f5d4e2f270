/*
 * tune.h - `hkrun --autotune` in the engine: rank 0 measures the
 * trainer's steps and feeds them to the search (coordinator/autotune.h);
 * its decisions ride on a world RESPONSES (hk_wire_tune) and every rank
 * applies them before running that round. Background thread only.
 *
 * A step, as rank 0 sees it: the interval between two world rounds that
 * carry the same tensor. Until one repeats, rank 0 collects the names of
 * the world rounds' tensors; the first name seen twice becomes the step's
 * anchor (a one-off broadcast at start-up never repeats, so it is never
 * chosen), and from then on every world round that carries the anchor
 * ends one step and starts the next. A step's time is the time between
 * those two rounds' negotiations, on rank 0's clock.
 *
 * A new setting starts at a step boundary: the round that ends a step
 * carries it, and every rank (rank 0 too) applies it before it runs that
 * round, so every rank switches at the same round, and each round runs
 * with one setting everywhere. The fusion threshold and cycle time only
 * change how tensors are batched; hk's fusion keeps every result bit for
 * bit (coordinator/fusion.h), and so do the sockets per peer (the same
 * bytes, striped differently) and the staging chunk (collectives/
 * dev_allreduce.h). The hierarchical setting changes the schedule, which
 * every rank runs alike: results stay identical across ranks (across
 * settings, real-valued sums may differ in the last bits, as between the
 * ring and hierarchical anyway). Compression, searched only when the user
 * allows it, changes device gradients' sums by the 16-bit rounding, the
 * same on every rank.
 *
 * Output (rank 0): HK_AUTOTUNE_LOG's CSV, rewritten as each trial ends
 * (an elastic job's next generation keeps the rows the file holds and
 * goes on under a "# generation G: ..." line);
 * an info line per trial; when the search ends a warning-level line (shown
 * at the default log level) with the choice and the gain measured against
 * the starting setting; HK_AUTOTUNE_SAVE's HK_*=value lines; a timeline
 * marker per setting (observe/observe.h's tuned hook). Every rank logs at
 * debug level "autotune: rank R applies setting N (...) at world round W".
 */
#ifndef HK_WORKER_TUNE_H
#define HK_WORKER_TUNE_H

#include <stdint.h>

#include "coordinator/wire.h"
#include "worker/context.h"

/**
 * Rank 0 with HK_AUTOTUNE=1: starts the search from the job's settings
 * (ctx->cfg; the hierarchical allreduce is searched only where the job
 * has hierarchical rings and HK_ALLREDUCE_ALGO forces nothing) and the
 * cost model's suggestion (the smallest ladder
 * threshold at which the predicted latency of one host allreduce is at
 * most 10 % of its time). Elsewhere: nothing. Errors: HK_ERR_NOMEM;
 * HK_ERR_INVALID_ARG from the search's parameters.
 */
hk_status hk_tune_start(hk_ctx *ctx);

/**
 * Rank 0, for each world round that runs n > 0 responses rs, before it
 * is encoded: counts the round, detects a step boundary, feeds the step
 * to the search, and when the search decides a new setting, fills
 * m->u.responses.has_tune / tune (the caller sends m, then applies it
 * with hk_tune_apply before running rs). Failures to write the CSV are
 * logged, not returned (the job goes on).
 */
void hk_tune_round(hk_ctx *ctx, const hk_wire_response *rs, uint32_t n,
                   double t, hk_msg *m);

/**
 * Rank 0, for each round of process set `set` (not the world) that runs
 * tensors: notes the set. Only the world's rounds are tuned (a setting
 * must reach every rank at the same round, and only the world's rounds
 * do); a job whose steps ran on other sets is told so at the end
 * (hk_tune_finish) instead of "no training step found". No errors.
 */
void hk_tune_other_round(hk_ctx *ctx, int set);

/**
 * Every rank, for a world RESPONSES that runs tensors (counted as a world
 * round) and carries a change t (or NULL: only counts): applies the
 * setting to ctx->cfg (the fusion buffer is remapped at its next use if
 * it is too small; a change of the hierarchical setting works the job's
 * allreduce choice out again, worker/algo.h), logs it at debug level,
 * and tells the observers. Errors: hk_algo_retune's (the job fails).
 */
hk_status hk_tune_apply(hk_ctx *ctx, const hk_wire_tune *t);

/** Rank 0: `groups` fused groups ran (HK_TEST_TUNE_GROUP_COST_S each is
 *  added to the step time measured; tests only). */
static inline void hk_tune_groups(hk_ctx *ctx, uint32_t groups) {
  if (ctx->cfg.test_tune_cost_s > 0 && ctx->rank == 0)
    ctx->tune_virtual_s += ctx->cfg.test_tune_cost_s * groups;
}

/**
 * An elastic job's next generation (hk_elastic_reset): with HK_AUTOTUNE,
 * the settings the autotuner changes go back to the job's own (the
 * variables of hk_tune_vars, coordinator/autotune.h, as hk_init read
 * them), the same on every survivor whatever rounds each ran
 * before the loss (a trial's setting may have reached some and not
 * others); the new rank 0 searches again for the new world. A value that
 * no longer loads keeps the current one (hk_init checked them all).
 * Thread-safety: the one thread left between generations.
 */
void hk_tune_reset_settings(hk_config *cfg);

/** Rank 0: the job ends: a search still running reports its best so far
 *  and saves it, or says why nothing was tuned (no step found, the job's
 *  rounds ran on other process sets, or too few steps for one trial), at
 *  warning level; frees. Elsewhere: nothing. */
void hk_tune_finish(hk_ctx *ctx);

#endif
