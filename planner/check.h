/*
 * check.h - a finished run's measured step time, from its hk timeline,
 * for hkplan --check: each tensor of the gradient set negotiates once a
 * step, so the k-th NEGOTIATE span of every tensor belongs to step k;
 * step k starts at the earliest of them (the first rank's first request
 * of the step), and the step time is the median of the differences
 * between consecutive starts (steps whose every tensor was recorded; the
 * first difference, which holds the warm-up, is left out when there are
 * more than two). The exchange's span of step k runs from its start to the
 * end of its last ALLREDUCE span (for a replay without compute, such as
 * hkbench --model, the span is the step's own work: its interval also
 * holds the replay's untimed refill and barrier).
 * Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_CHECK_H
#define HK_PLANNER_CHECK_H

#include "planner/gradset.h"
#include "planner/tlread.h"

/**
 * *step_s gets the median step time (s), *steps the number of step
 * differences it is the median of, *span_s the median span (s) over the
 * same steps. Errors: HK_ERR_CONFIG (fewer than two
 * whole steps of m's tensors in the timeline, naming how many; a tensor
 * with fewer ALLREDUCE spans than whole steps, naming it; a step or its
 * exchange that is not > 0, as when the spans are out of time order,
 * naming the step), HK_ERR_NOMEM.
 */
hk_status hk_check_step(const hk_tl *tl, const hk_gradset *m, double *step_s,
                        double *span_s, unsigned *steps);

#endif
