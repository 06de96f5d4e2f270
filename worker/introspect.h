/*
 * introspect.h - internal measurement hooks of the worker runtime, for
 * bench/hkbench (NOT part of the public API in include/hk/hk.h, and no
 * stable interface): how long the ring collectives themselves took, apart
 * from the enqueue, negotiation and completion around them.
 *
 * The background thread (the only one that touches the network) records
 * the start and end of every ring collective it runs (allreduce,
 * broadcast; barriers run none) into ctx->timing, under ctx->mu, BEFORE it
 * completes the handle, so a trainer thread whose hk_wait has returned
 * reads that collective's record (or a later one's). Times are seconds on
 * CLOCK_MONOTONIC (hk_now()), the clock a bench's clock_gettime reads.
 * A fused batch records its one ring interval for each of its tensors;
 * busy_s counts that interval once.
 */
#ifndef HK_WORKER_INTROSPECT_H
#define HK_WORKER_INTROSPECT_H

#include "worker/context.h"

/** The runtime context between hk_init and hk_shutdown, else NULL.
 *  Defined in worker/runtime.c, which owns the one pointer to it. */
hk_ctx *hk_runtime_context(void);

/**
 * Background thread: the collective of tensor `name` ran on the ring from
 * start_s to end_s (hk_now() seconds). Locks ctx->mu.
 */
void hk_introspect_record(hk_ctx *ctx, const char *name, double start_s,
                          double end_s);

/**
 * Any thread: copies the current record (all zero before the first
 * collective). Errors: HK_ERR_NOT_INITIALIZED outside hk_init..hk_shutdown.
 */
hk_status hk_internal_last_collective(hk_collective_timing *out);

#endif
