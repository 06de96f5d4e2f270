/*
 * model.h - replaying a model's gradient set (planner/gradset.h) the way a
 * data-parallel trainer's backward pass hands it over:
 *
 * - one step: every tensor to hk_allreduce_async (float32, average unless
 *   -d/-o say otherwise), in REVERSE file order (last layer first), then
 *   hk_wait on every handle. Untimed before it: inputs re-filled (data.h),
 *   hk_barrier. Step time = max over ranks; reported = median over steps;
 * - in the same run, interleaved step by step so both see the same
 *   machine: ONE hk_allreduce of a single buffer of the same total size
 *   ("one fused buffer"), timed the same way;
 * - ratio = step / fused: what fusing the tensors into one buffer could
 *   gain at most (negotiation, per-tensor latency, small messages);
 * - ring(ms): the seconds the background thread spent inside ring
 *   collectives during the step (worker/internal.h), max over ranks.
 * Tensors live in one page-aligned, pre-faulted mapping, each 64-byte
 * aligned; the fused buffer is a second one.
 */
#ifndef HKB_MODEL_H
#define HKB_MODEL_H

#include "options.h"
#include "planner/gradset.h"

/** Runs the replay between hk_init and hk_shutdown: -n steps (default
 *  10) after -w warm-up steps (default 2). Prints on rank 0. Exits on an
 *  hk error. */
void hkb_model_run(const hkb_opts *o, const hk_gradset *m);

#endif
