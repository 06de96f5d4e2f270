/*
 * internal.h - internal hooks into the worker runtime for bench/hkbench
 * and hk's own tests (NOT part of the public API in include/hk/hk.h, and
 * no stable interface): the runtime context (worker/runtime.h), and the
 * introspection observer's record (observe/introspect.h says what it
 * measures).
 */
#ifndef HK_WORKER_INTERNAL_H
#define HK_WORKER_INTERNAL_H

#include "observe/introspect.h"
#include "worker/runtime.h"

/**
 * Any thread: copies the record of the collectives this rank ran (all
 * zero before the first). Errors: HK_ERR_NOT_INITIALIZED outside
 * hk_init..hk_shutdown.
 */
hk_status hk_internal_last_collective(hk_collective_timing *out);

/**
 * Any thread: copies this rank's negotiation counters (all zero at
 * hk_init), so a test can tell how many rounds a job ran (none for a job
 * of one rank) and how many batches it fused. Errors:
 * HK_ERR_NOT_INITIALIZED outside hk_init..hk_shutdown.
 */
hk_status hk_internal_negotiation_counts(hk_negotiation_counts *out);

#endif
