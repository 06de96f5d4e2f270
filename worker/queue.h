/*
 * queue.h - the tensor queue: how trainer threads hand operations to the
 * background thread, and how the background thread completes them.
 * All functions lock ctx->mu (hk_queue_find only for a handle the
 * background thread has not taken); the trainer-side ones may be called
 * from any thread concurrently; completing is the background thread's.
 */
#ifndef HK_WORKER_QUEUE_H
#define HK_WORKER_QUEUE_H

#include "worker/context.h"

/**
 * Validates and enqueues one operation (request fields already filled in
 * `req`), then wakes the background thread. `outputs`, if not NULL, gives
 * the output fields (out_buf, out_counts, out_rows) and a malloc'd splits
 * array and members list (a process set add's), which the handle takes
 * over (also on failure). On HK_OK *out is
 * the handle. Errors: HK_ERR_DUPLICATE_NAME (name in flight on this rank),
 * HK_ERR_NOMEM, or the job's failure status once it failed/shut down.
 */
hk_status hk_queue_submit(hk_ctx *ctx, const hk_wire_request *req,
                          const void *sendbuf, void *recvbuf,
                          const struct hk_handle_s *outputs, hk_handle *out);

/**
 * Enqueues the members of a grouped allreduce at once: either every member
 * name is free and all are queued, or none is (HK_ERR_DUPLICATE_NAME).
 * members[i] are calloc'd handles with req/buffers filled; on HK_OK the
 * queue owns them and *out is a new parent handle covering them all.
 */
hk_status hk_queue_submit_group(hk_ctx *ctx, hk_handle *members, size_t n,
                                hk_handle *out);

/**
 * Background thread: takes every queued handle (a list linked by next);
 * the next submit into the empty queue wakes the thread (wake_fd).
 *
 * A burst of submits is held, not taken (NULL), while it goes on: until
 * no tensor was submitted for HK_BURST_GAP_US, or a trainer thread waits
 * for or polls a handle after the latest submit (which then writes
 * wake_fd), or the oldest queued tensor has waited HK_BURST_MAX_US; so a
 * step's gradients handed over one async call at a time go in one round
 * instead of a round of the first tensor and the rest behind it.
 * hk_queue_held_until says until when. hk_shutdown ends a hold.
 */
hk_handle hk_queue_take(hk_ctx *ctx);

/**
 * The calling thread's next hk_queue_submit (or hk_queue_submit_group)
 * is waited for at once (a blocking call: the *_async call, then
 * hk_wait): its burst ends with it and the queue is not held for it.
 * Thread-local. The submit clears it; a caller whose call failed before
 * it submitted clears it with hk_queue_next_waits(0).
 */
void hk_queue_next_waits(int on);

/** Background thread: when the last take found the queue held, the
 *  hk_now() time at which it stops holding it (sooner if a trainer thread
 *  waits: wake_fd); 0 when it is not held. */
double hk_queue_held_until(const hk_ctx *ctx);

/** Background thread, the queue held: 1 once a trainer thread has waited
 *  or polled after the latest submit (the next take takes it). Lock-free:
 *  for a polling loop. */
int hk_queue_hold_over(hk_ctx *ctx);

/** Background thread: forgets a hold it will not act on (a rank whose
 *  request is in flight takes the queue only when the answer comes): no
 *  wait then ends at the hold's end. */
void hk_queue_hold_drop(hk_ctx *ctx);

/**
 * Background thread, the queue held: on = 1 before it sleeps (a trainer
 * thread that waits from now on writes wake_fd); returns 1 if it may
 * sleep, 0 if the hold is already over. on = 0 once awake again (waiters
 * stop writing wake_fd; it looks by itself); returns 0.
 */
int hk_queue_hold_sleep(hk_ctx *ctx, int on);

/**
 * Background thread: takes the queued handles from the oldest on while
 * their costs (cost(arg, h), called under ctx->mu: it must not call into
 * the queue) add up to at most `budget`, and always the oldest one; the
 * rest stay queued, in order, for the next take. When it took something,
 * later submits do not write wake_fd until the next take: the caller (a
 * rank whose request is in flight) looks at the queue by itself when the
 * answer comes. Returns the list (linked by next), NULL when the queue
 * was empty or is held (a burst, as hk_queue_take).
 */
hk_handle hk_queue_take_bounded(hk_ctx *ctx, size_t budget,
                                size_t (*cost)(void *arg, hk_handle h),
                                void *arg);

/** Background thread: the in-flight handle named `name`, or NULL (those
 *  it took from the queue without taking ctx->mu). */
hk_handle hk_queue_find(hk_ctx *ctx, const char *name);

/**
 * Calls fn(arg, h, queued) under ctx->mu: first for every handle still in
 * the submit queue (queued 1, in submit order), then for every handle in
 * flight (queued 0: submitted and not complete; the queued ones again).
 * The background thread only (the one that completes handles, so none
 * goes away meanwhile); fn must not call into the queue.
 */
void hk_queue_each(hk_ctx *ctx, void (*fn)(void *arg, hk_handle h, int queued),
                   void *arg);

/**
 * Completes a handle with status (and reason, copied, when not HK_OK),
 * removes its name from the in-flight table and wakes waiters. A group
 * member is freed, its parent completing with the last member (with the
 * first error). The caller must not touch h afterwards.
 */
void hk_queue_complete(hk_ctx *ctx, hk_handle h, hk_status status,
                       const char *reason);

/** Frees h, a handle made up for a rank that joined (phantom: in no
 *  queue, waited for by nobody): its output (host or device memory,
 *  hk_devplane_free) and itself. Background thread. */
void hk_queue_free_phantom(hk_ctx *ctx, hk_handle h);

/**
 * Completes hs[0..n) with HK_OK as hk_queue_complete would one by one,
 * under one lock and with one wake-up of the waiters (a fused batch).
 * The caller must not touch them afterwards.
 */
void hk_queue_complete_ok(hk_ctx *ctx, hk_handle *hs, size_t n);

/**
 * Marks the job failed (first caller wins) and completes every in-flight
 * handle with that status and reason; later submits fail at once.
 */
void hk_queue_fail_all(hk_ctx *ctx, hk_status status, const char *reason);

/**
 * Fails with status st and the message "tensor '<name>': <reason>", or
 * <reason> alone when it already begins with that very prefix (a reason
 * from below that named the tensor: the name is never said twice).
 * Returns st (hk_fail). Thread-safe (hk_fail's message is per thread).
 */
hk_status hk_fail_tensor(hk_status st, const char *name, const char *reason);

/**
 * Completes every handle of process set `set` still queued or in flight on
 * this rank with status and "tensor '<name>': <reason>" (the set was
 * removed), as hk_queue_complete would; the queued ones leave the queue.
 * Background thread.
 */
void hk_queue_fail_set(hk_ctx *ctx, int32_t set, hk_status status,
                       const char *reason);

/** Blocks until h completes; returns its status, sets this thread's last
 *  error to its reason, and frees h. ctx NULL (after hk_shutdown, when
 *  every handle has completed) only collects the outcome. */
hk_status hk_queue_wait(hk_ctx *ctx, hk_handle h);

/**
 * hk_wait_stream: waits until h's device work is queued (or h completed),
 * then orders `stream` after h's result on the device and returns without
 * waiting for the GPU; the handle is freed when it completes (an error
 * found after that fails the job, and every later call reports it). A
 * handle without device work (host tensor, group) is waited as by
 * hk_queue_wait. Errors as hk_queue_wait, or the backend's.
 */
hk_status hk_queue_wait_stream(hk_ctx *ctx, hk_handle h, void *stream);

/** Sets *done to whether h has completed, without blocking. */
void hk_queue_poll(hk_ctx *ctx, hk_handle h, int *done);

#endif
