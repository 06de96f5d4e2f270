/*
 * median.h - the median of a set of values, for the planner's readings of
 * measured runs (check.c: a timeline's steps; netbench.c: a sweep's
 * latencies). Thread-safety: none needed (the caller's array).
 */
#ifndef HK_PLANNER_MEDIAN_H
#define HK_PLANNER_MEDIAN_H

#include <stddef.h>

/** The median of v[0..n), n > 0: the middle value, or the mean of the two
 *  middle ones when n is even. Sorts v in place. */
double hk_median(double *v, size_t n);

#endif
