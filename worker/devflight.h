/*
 * devflight.h - device allreduce batches in flight, on the background
 * thread's side: what completing each needs (its handles, and what the
 * observers are told of it), kept from the round that enqueued the batch
 * (hk_devplane_allreduce) until its end event has completed
 * (hk_devplane_oldest_done). Then the observers see the batch end and its
 * tensors, and its handles complete, as a batch run at once does. Batches
 * complete in the order they were enqueued, which is the order of the
 * rounds and of the fusion plan: hk_execute_responses retires every batch
 * in flight before it runs anything else, so handles complete in the same
 * order as when each device batch was waited for at once.
 * Background thread only.
 */
#ifndef HK_WORKER_DEVFLIGHT_H
#define HK_WORKER_DEVFLIGHT_H

#include "worker/context.h"

/**
 * Keeps device batch hs[0..k) (enqueued by hk_devplane_allreduce just
 * now; the handles stay owned by the queue, phantoms by the batch) with
 * obs[0..k) (the tensors as the observers see them: their resp is copied
 * here, without its reason, params, counts or agreed, which belong to the
 * round's message) and ob (the batch: its algorithm and transport strings
 * are copied; tensors is replaced by the copies). t0 is hk_now() when the
 * batch started to be enqueued.
 * Errors: HK_ERR_NOMEM (nothing kept: the caller fails the job, which
 * completes the handles).
 */
hk_status hk_devflight_add(hk_ctx *ctx, hk_handle *hs, const hk_obs_tensor *obs,
                           uint32_t k, const hk_obs_batch *ob, double t0);

/** Batches kept and not yet completed. */
int hk_devflight_count(const hk_ctx *ctx);

/**
 * Completes, oldest first, every batch whose device work has completed
 * (one look each), and waits for the oldest (under the watchdog:
 * hk_devplane_oldest_done) until at most `most` batches remain kept: 0
 * waits for them all; hk_devflight_count() or more waits for none.
 * *completed (may be NULL) receives how many completed.
 * Errors: those of hk_devplane_oldest_done, as "tensor '<first tensor of
 * the batch>': <why>"; the observers see that batch fail, every batch kept
 * is dropped (their handles are the job failure's to complete; phantoms
 * are freed).
 */
hk_status hk_devflight_retire(hk_ctx *ctx, int most, int *completed);

/** Drops every batch kept without completing its handles (the job failed
 *  or ended: hk_queue_fail_all completes them); frees phantoms and the
 *  records, and aborts the communicators of batches still in flight
 *  (hk_devplane_abandon). Before the device plane closes. */
void hk_devflight_drop(hk_ctx *ctx);

#endif
