/*
 * introspect.h - the introspection observer: internal measurements of
 * the worker runtime for bench/hkbench and the tests (NOT part of the
 * public API in include/hk/hk.h, and no stable interface), read through
 * worker/internal.h's hk_internal_* getters: how long the ring
 * collectives themselves took, apart from the enqueue, negotiation and
 * completion around them, and how many negotiation messages and fused
 * batches this rank saw. Always attached (observe/attach.h).
 *
 * The background thread records the start and end of every collective
 * that moves data (allreduce, broadcast, ...; barriers and joins move
 * none) at batch_done, BEFORE the batch's handles complete, so a trainer
 * thread whose hk_wait has returned reads that collective's record (or a
 * later one's). Times are seconds on CLOCK_MONOTONIC (hk_now()), the
 * clock a bench's clock_gettime reads. A fused batch is one record, under
 * its last data-moving tensor's name; busy_s counts its interval once.
 *
 * Thread-safety: the record has a lock of its own: the background thread
 * writes it per batch and per message, any thread reads it
 * (hk_introspect_read).
 */
#ifndef HK_OBSERVE_INTROSPECT_H
#define HK_OBSERVE_INTROSPECT_H

#include <stdint.h>

#include "observe/observe.h"

/** Timing of the collectives this worker ran. */
typedef struct hk_collective_timing {
  uint64_t seq;                   /* collectives recorded so far; 0: none */
  double start_s, end_s;          /* the last one, hk_now() seconds */
  double busy_s;                  /* seconds inside any of them */
  char name[HK_MAX_NAME_LEN + 1]; /* the last one's tensor */
} hk_collective_timing;

/** Counts of the negotiation protocol on this rank (observe.h's
 *  hk_obs_msg_kind). A job of one rank counts no requests, rounds or
 *  answers: it sends nothing. */
typedef struct hk_negotiation_counts {
  uint64_t requests;      /* REQUESTS sent (rank > 0) or read (rank 0) */
  uint64_t rounds;        /* RESPONSES with something to run (or a shutdown or
                             an abort): sent to every rank (rank 0, once per
                             broadcast) or received (rank > 0) */
  uint64_t answers;       /* empty RESPONSES that only answered a REQUESTS */
  uint64_t fused_batches; /* batches of > 1 host allreduces reduced as one
                             (fusion buffer, or in place on shared memory) */
  uint64_t fused_tensors; /* tensors in those batches */
} hk_negotiation_counts;

/** Attaches the introspection observer (all zero). Errors: HK_ERR_NOMEM,
 *  or hk_observe_attach's. */
hk_status hk_introspect_attach(hk_observers *o, const hk_obs_setup *s);

/**
 * Any thread, between attach and detach: copies the record into *timing
 * and *counts (either may be NULL). Errors: HK_ERR_NOT_INITIALIZED when o
 * holds no introspection observer (outside hk_init..hk_shutdown).
 */
hk_status hk_introspect_read(const hk_observers *o,
                             hk_collective_timing *timing,
                             hk_negotiation_counts *counts);

#endif
