/*
 * stats.h - timing and reporting helpers shared by the sweep and the model
 * replay: the clock, medians, the max over ranks of per-iteration times,
 * the ring-only time of the last collective (worker/internal.h), and
 * failing on an hk error.
 */
#ifndef HKB_STATS_H
#define HKB_STATS_H

#include <stddef.h>

#include "hk/hk.h"
#include "worker/internal.h"

/** Seconds on CLOCK_MONOTONIC (the clock hk's background thread uses). */
double hkb_now(void);

/** Sleeps until hkb_now() reaches t (seconds; at once if it has): a
 *  synthetic compute phase (hkbench --compute-ms). */
void hkb_sleep_until(double t);

/** Median of v[0..n) (mean of the middle two when n is even); sorts v.
 *  0 for n == 0. */
double hkb_median(double *v, int n);

/** Smallest and largest of v[0..n). */
double hkb_min(const double *v, int n);
double hkb_max(const double *v, int n);

/**
 * Replaces v[i], on every rank, by its max over ranks (one allreduce of
 * float64 max through the public API; untimed bookkeeping). `what` names
 * the tensor, "hkbench.<what>". Exits on failure.
 */
void hkb_max_over_ranks(double *v, int n, const char *what);

/** Sum over ranks of a count, through the public API. Exits on failure. */
long long hkb_sum_over_ranks(long long v, const char *what);

/**
 * Ring-only time (worker/internal.h), as the background thread measured
 * it around the collective itself: hkb_ring_last gives the duration in
 * seconds of the last ring collective, which must be tensor `name` (exits
 * with a message otherwise: something else ran in between); hkb_ring_busy
 * the seconds spent in ring collectives since hk_init. Exit on failure.
 */
double hkb_ring_last(const char *name);
double hkb_ring_busy(void);

/** Prints "hkbench: <what>: <status>: <hk_last_error()>" and exits 1. */
void hkb_die(hk_status st, const char *what) __attribute__((noreturn));

/** Exits via hkb_die unless st is HK_OK. */
void hkb_ok(hk_status st, const char *what);

/** When the last ring collective started on this rank (hkb_now()'s clock,
 *  seconds). */
double hkb_ring_last_start(void);

/** This rank's negotiation counters (worker/internal.h). Exits on
 *  failure. */
hk_negotiation_counts hkb_counts(void);

#endif
