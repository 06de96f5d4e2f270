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

/** The control frames this rank moved, by the kind of endpoint that
 *  carried them (collectives/transport/ctrl.h): rank 0 sums over its
 *  endpoints to the other ranks, another rank counts its one to rank 0. */
typedef struct hk_control_counts {
  uint64_t shm_sent, shm_received; /* through shared-memory rings */
  uint64_t tcp_sent, tcp_received; /* over the control socket */
} hk_control_counts;

/**
 * Any thread: copies this rank's control-frame counters (all zero at
 * hk_init and for a job of one rank), so a test can tell which path the
 * negotiation took. Errors: HK_ERR_NOT_INITIALIZED outside
 * hk_init..hk_shutdown.
 */
hk_status hk_internal_control_counts(hk_control_counts *out);

#endif
