/*
 * batches.h - the simulator's fusion against a recorded run's: for each
 * negotiation round of an hk timeline (the tensors whose NEGOTIATE span
 * ended at the same instant: one response), the round's allreduces in the
 * order rank 0 answered them (NEGOTIATE's `response`; in a timeline
 * without it, when the last rank's request came, the WAIT_FOR_DATA span's
 * end, ties in submission order, which is the gradient set's reverse file
 * order, the backward pass's) are planned by
 * hk_sim_plan_round, and the batches it makes are compared, tensor by
 * tensor and in order, with the ALLREDUCE spans the run recorded (one
 * batch: the spans of equal start and length, in file order).
 * Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_BATCHES_H
#define HK_PLANNER_BATCHES_H

#include <stdio.h>

#include "planner/gradset.h"
#include "planner/sim.h"
#include "planner/tlread.h"

typedef struct hk_batch_cmp {
  unsigned rounds;   /* rounds with an allreduce of the gradient set */
  unsigned recorded; /* batches the run recorded */
  unsigned same;     /* simulated batches equal to the recorded one at
                        the same place */
} hk_batch_cmp;

/**
 * Compares, printing each round that differs to out ("round R: recorded
 * [...] simulated [...]", names). Spans of tensors not in m are skipped.
 * Errors: HK_ERR_CONFIG (no ALLREDUCE of m's tensors in the timeline),
 * HK_ERR_NOMEM, the simulation's.
 */
hk_status hk_batches_compare(const hk_tl *tl, const hk_gradset *m,
                             const hk_sim_job *j, FILE *out, hk_batch_cmp *cmp);

#endif
