/*
 * devplane.h - the worker's side of the GPU data plane (docs/design.md, "The
 * GPU data plane"): the device backend this process opened (HK_DEVICE),
 * hk's streams, the in-host device communicator, the persistent device
 * fusion buffer, and running a round's device tensors through the device
 * entries of collectives/allreduce.h's table.
 *
 * Which GPU: HK_GPU if set, else the local rank (modulo the number of
 * visible devices, so a process that sees one GPU through
 * CUDA_VISIBLE_DEVICES uses it). Everything here except
 * hk_devplane_classify / hk_devplane_capture runs on the background thread
 * (after hk_devplane_open in hk_init).
 *
 * The calling thread's current device: the functions a trainer thread
 * calls (open, close, classify, capture, order_after, release, free) put
 * back the device that was current when they were called (device.h:
 * current, set_current), so a trainer that selected another GPU keeps
 * it.
 */
#ifndef HK_WORKER_DEVPLANE_H
#define HK_WORKER_DEVPLANE_H

#include "collectives/allreduce.h"
#include "worker/context.h"

/**
 * hk_init, after the rings: opens the backend HK_DEVICE names (auto: cuda
 * where libhk_cuda.so finds a GPU, else none; the reason there is none is
 * kept for the error a device tensor would get). Opening touches no GPU
 * context: hk's streams and events are made at the first device tensor
 * (its capture, or the first device batch this rank runs), the pinned
 * staging slots at the first schedule that needs them, the host's
 * communicator id (made by the host's first rank, exchanged over the
 * set's ring; every member takes part even without a device) and the
 * communicator at the first device collective that needs them. So a job
 * of host tensors on a GPU machine (HK_DEVICE=auto) makes no CUDA context
 * and starts no NCCL listener.
 * Errors: HK_ERR_CONFIG (HK_DEVICE=cuda where it cannot load, naming what
 * is missing), the backend's errors, HK_ERR_NOMEM.
 */
hk_status hk_devplane_open(hk_ctx *ctx);

/** Frees all of it (hk_shutdown, failed hk_init). Safe on a partial one. */
void hk_devplane_close(hk_ctx *ctx);

/**
 * Any thread, at submit: sets req->mem from where send and recv point
 * (either may be NULL: that buffer is not looked at). Host memory is
 * assumed when no backend is open.
 */
void hk_devplane_classify(const hk_ctx *ctx, hk_wire_request *req,
                          const void *send, const void *recv);

/**
 * Any thread, at submit of a device tensor: records h->ready on the
 * producer stream (NULL: the default stream), so hk's stream waits for
 * the producer's work, never the trainer's thread.
 * Errors: HK_ERR_DEVICE with the backend's message.
 */
hk_status hk_devplane_capture(hk_ctx *ctx, hk_handle h, void *producer_stream);

/** The calling thread's producer stream (hk_set_stream), or NULL. */
void *hk_devplane_stream(void);

/** Sets it (hk_set_stream). Thread-local: affects the calling thread. */
void hk_devplane_set_stream(void *stream);

/**
 * Makes `stream` (NULL: the default stream) wait GPU-side for event e,
 * without blocking. Any thread. Errors: HK_ERR_DEVICE with the backend's
 * message.
 */
hk_status hk_devplane_order_after(hk_ctx *ctx, void *stream, hk_dev_event e);

/**
 * hk's stream that reads and writes every device tensor's buffers (the
 * world's schedule's; process sets share it), made by this call when no
 * device tensor has made it yet (the GPU's context with it), or NULL when
 * ctx is NULL, has no device backend, or the backend cannot make it
 * (hk_device_stream). Any thread (its current device is kept); never
 * fails.
 */
void *hk_devplane_work_stream(hk_ctx *ctx);

/** Frees what capture made (the handle's event). Any thread. */
void hk_devplane_release(hk_ctx *ctx, hk_handle h);

/** The most device allreduce batches in flight at once (HK_DEVICE_INFLIGHT's
 *  upper bound). */
#define HK_DEV_INFLIGHT_MAX 16

/**
 * Background thread: enqueues the allreduce of device tensors hs[0..k)
 * (one dtype and op; k >= 1) of process set `set` (the world:
 * ctx->sets[0]) as one fused batch with the device entry `a` of the set's
 * table of allreduce implementations (collectives/allreduce.h;
 * hk_allreduce_for chose it, so every member runs the same), over the
 * set's communicator: on hk's stream it waits GPU-side for each producer,
 * packs them into the device fusion buffer in a->segments() padded
 * segments (prescale and HK_COMPRESSION fused in), runs the entry, and
 * unpacks (average divisor, postscale, decompression fused in). It does
 * not wait for the GPU: the batch is then in flight (each tensor's done
 * event recorded, so hk_wait_stream may order a stream after it), and
 * hk_devplane_oldest_done tells when it has completed; the next batch may
 * be enqueued meanwhile. Batches run one after another on hk's one stream,
 * in the order enqueued, so the fusion buffer is reused in order and the
 * results are those of batches run one at a time. A schedule that stages
 * through host memory (the ring) still waits inside, for its own copies.
 * `divisor` is the negotiated HK_AVERAGE divisor. At most
 * hk_devplane_inflight_max() batches are in flight: the caller retires the
 * oldest first. The handles must stay alive until the batch is retired.
 * Errors: HK_ERR_INVALID_ARG (already hk_devplane_inflight_max() in
 * flight), HK_ERR_DEVICE, HK_ERR_TIMEOUT, HK_ERR_PEER_LOST, HK_ERR_NOMEM,
 * the ring's errors; the communicator is aborted on any device failure
 * (the batch is not in flight then).
 */
hk_status hk_devplane_allreduce(hk_ctx *ctx, hk_set *set, hk_handle *hs,
                                uint32_t k, int32_t divisor,
                                const hk_allreduce_impl *a);

/** Background thread: the job failed or stopped with batches in flight:
 *  aborts their communicators (so their queued work ends and hk's stream
 *  can be closed) and forgets them. Nothing in flight: nothing done. */
void hk_devplane_abandon(hk_ctx *ctx);

/** Background thread: device allreduce batches in flight (0 without a
 *  device backend), and the most that may be: HK_DEVICE_INFLIGHT (1
 *  without a backend). */
int hk_devplane_inflight(const hk_ctx *ctx);
int hk_devplane_inflight_max(const hk_ctx *ctx);

/**
 * Background thread: has the oldest batch in flight completed? wait 0:
 * one look (*done 0 or 1); wait 1: waits until it has (*done 1). A
 * completed batch is retired (no longer in flight), and phase_s[0..3)
 * receives the seconds the GPU spent packing, in the schedule
 * (communicator and staging) and unpacking, timed by its events (for the
 * timeline; 0 where the backend cannot tell). Nothing in flight: HK_OK,
 * *done 0. The watchdog is hk_devplane_copy's: the communicator's async
 * errors, hkrun's abort, and HK_TIMEOUT_S counted from when the batch
 * became the oldest in flight.
 * Errors: HK_ERR_DEVICE (the batch failed on the device, or the
 * communicator reported an error, naming it), HK_ERR_TIMEOUT,
 * HK_ERR_PEER_LOST (hkrun stopped the job); then every batch in flight is
 * dropped (none is in flight afterwards) and their communicators are
 * aborted: the job fails, and its failure completes their handles.
 */
hk_status hk_devplane_oldest_done(hk_ctx *ctx, int wait, int *done,
                                  double phase_s[3]);

/** Background thread: 1 when the oldest batch in flight has ended (its
 *  end event completed, or failed), else 0 (none in flight: 0). One
 *  query, no watchdog and nothing retired: for a wait that polls between
 *  file descriptors; hk_devplane_oldest_done then retires it. */
int hk_devplane_oldest_ended(hk_ctx *ctx);

/**
 * A process set's device communicator (worker/sets.h): the set's members
 * on one host share one (NCCL's ncclCommSplit, made from a unique id like
 * the world's), on the world's streams and staging slots.
 * hk_devplane_set_open: s->dev for set s (this rank a member), its
 * environment's device schedules (s->own_ar.dev); nothing without a
 * device backend. The communicator's id (made by the set's first member
 * on each host that holds several, exchanged among the members) and the
 * communicator itself are made at the set's first device collective that
 * needs it. hk_devplane_set_close: frees it (safe on a set without one;
 * the world's goes with hk_devplane_close).
 * Background thread (hk_init's for HK_PROCESS_SETS). Errors: the
 * backend's, HK_ERR_NOMEM.
 */
hk_status hk_devplane_set_open(hk_ctx *ctx, hk_set *s);
void hk_devplane_set_close(hk_ctx *ctx, hk_set *s);

/**
 * Process set s's staged schedules' chunk (bytes over all segments; 0 or
 * more than a slot: HK_DEV_SLOT_BYTES) from its next device batch on
 * (the world's also goes to sets opened later): how `--autotune` tries
 * another HK_STAGING_CHUNK_BYTES. Every rank must call it for the same
 * sets between the same two rounds (the chunks decide the ring calls).
 * No-op for a set without a device communicator. Background thread;
 * never fails.
 */
void hk_devplane_set_staging(hk_set *s, size_t bytes);

/**
 * Background thread: copies `bytes` between host and device memory (dst
 * or src device) on hk's stream, after h's producer event if h is not
 * NULL, and waits for it under the watchdog. For the collectives that
 * stage device buffers through host memory.
 * Errors: as hk_devplane_allreduce.
 */
hk_status hk_devplane_copy(hk_ctx *ctx, hk_handle h, void *dst, const void *src,
                           size_t bytes);

/** Device memory for a collective's output (allgather, alltoall): the
 *  caller frees it with hk_free. Errors: the backend's HK_ERR_NOMEM. */
hk_status hk_devplane_alloc(hk_ctx *ctx, size_t bytes, void **out);

/** Frees memory hk allocated: device memory through the backend, host
 *  memory with free(). Any thread. */
void hk_devplane_free(hk_ctx *ctx, void *p);

#endif
