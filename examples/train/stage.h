/*
 * stage.h - the input pipeline's hooks on a device row (compute.h's
 * stage_*): each prepared batch goes into its ring slot's pinned buffer
 * and onto the device on the row's copy stream (stage_batch, the
 * pipeline's stage hook, on the thread that prepared it); when the step
 * is done with a batch (stage_batch_done, the pipeline's done hook, on
 * the step's thread, inside prefetch_release) the row records that the
 * compute stream has queued its last read of the slot.
 *
 * Why the second hook: the step only queues its work; a GPU may still be
 * reading the slot's device buffer when prefetch_release lets the
 * pipeline refill it. The row's stage_put waits (the host before it
 * writes the pinned buffer, the copy stream before it copies) for the
 * event stage_consumed recorded, so a step never reads one batch's
 * images with another's labels.
 *
 * Thread-safety: stage_batch on the pipeline's thread, stage_batch_done
 * on the step's; the pipeline's lock orders a slot's done before its next
 * stage (prefetch.h). The link's fields are set before the pipeline
 * starts and never written while it runs.
 */
#ifndef HK_TRAIN_STAGE_H
#define HK_TRAIN_STAGE_H

#include "batch.h"
#include "compute.h"
#include "lowp.h"

/** What the hooks need (their ctx): the device row, the pipeline's ring
 *  (a batch's slot is its index there) and the compute type. */
typedef struct stage_link {
  compute *cp;
  const batch *slots; /* prefetch.slots */
  const lowp_kind *lowp;
} stage_link;

/** batch_stage_fn: rounds b to *lowp (lowp.h), then cp's stage_put of
 *  b->x into b's slot. 0, or -1 with cp->stage_err saying why. */
int stage_batch(void *link, batch *b);

/** batch_done_fn: cp's stage_consumed of b's slot (a failure lands in
 *  cp->err, seen by the step's next check of the row). */
void stage_batch_done(void *link, const batch *b);

#endif
