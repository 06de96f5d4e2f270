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

/** Which counter of hk_negotiation_counts hk_introspect_count adds to. */
typedef enum hk_count_kind {
  HK_COUNT_REQUESTS,
  HK_COUNT_ROUNDS,
  HK_COUNT_ANSWERS,
  HK_COUNT_FUSED_BATCHES,
  HK_COUNT_FUSED_TENSORS,
} hk_count_kind;

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

/** Background thread: adds n to one of ctx->counts. Locks ctx->mu. */
void hk_introspect_count(hk_ctx *ctx, hk_count_kind kind, uint64_t n);

/**
 * Any thread: copies this rank's negotiation counters (context.h's
 * hk_negotiation_counts; all zero at hk_init), so a test can tell how many
 * rounds a job ran (none for a job of one rank) and how many batches it
 * fused. Errors: HK_ERR_NOT_INITIALIZED outside hk_init..hk_shutdown.
 */
hk_status hk_internal_negotiation_counts(hk_negotiation_counts *out);

#endif
