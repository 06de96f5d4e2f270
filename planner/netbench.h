/*
 * netbench.h - a network measured between candidate servers, for hkplan:
 * an hkbench sweep's CSV (`hkrun -np N -H a:1,b:1 hkbench --csv FILE`,
 * one rank a server) fitted to the ring allreduce's alpha-beta cost, the
 * form topology/cost.c uses for every ring:
 *
 *     t(s) = 2 (n - 1) a  +  2 (n - 1) / n  x  s / B
 *
 * (n ranks, s bytes; a: one step's latency; B: the bandwidth a link
 * carries). B comes from the largest third of the sizes (at least 2; a
 * least-squares line through their times), a from the smallest third (at
 * least 1; the median of what their times leave after s / B), each where
 * it dominates: a shaped link (a token bucket) passes small messages at
 * the wire's speed and only large ones at its rate, and a fit over every
 * size at once took the burst for the rate (19 Gbit/s for a 1 Gbit/s
 * link on the netns bed).
 * The time is the collective alone (`raw_us`, what the cost model
 * prices: negotiation is hkplan's --round-us) where hkbench wrote it,
 * else the public call's (`time_us`).
 *
 * Thread-safety: none needed (plain values).
 */
#ifndef HK_PLANNER_NETBENCH_H
#define HK_PLANNER_NETBENCH_H

#include "hk/hk.h"

/** What a sweep says of the network. */
typedef struct hk_netbench {
  double gbit;    /* B, Gbit/s (10^9 bits) */
  double step_us; /* a, µs: one step of a ring across the servers */
  int nranks;     /* the sweep's ranks */
  int rows;       /* the sizes fitted (rows of one size merged) */
  int raw;        /* 1: raw_us (the collective alone); 0: time_us */
} hk_netbench;

/**
 * Reads hkbench's CSV at `path` (its header line names the columns:
 * size_bytes, time_us, nranks, and raw_us where present; every row one
 * size of one sweep; at most 4096) and fits *out. Rows of one size are
 * averaged. Rows with a wrong result (`wrong` > 0) are refused, not
 * fitted; blank lines (also "\r\n") and lines starting with '#' are
 * skipped. Errors (HK_ERR_INVALID_ARG, naming the file, the line and what
 * is wrong): it cannot be read; a line longer than 4094 characters; a
 * column is missing; a value that is not a finite number; nranks not a
 * whole count; rows of different rank counts; fewer than 2 ranks; fewer
 * than 2 distinct sizes; largest sizes whose times do not grow (no
 * bandwidth can be fitted). HK_ERR_NOMEM.
 */
hk_status hk_netbench_load(const char *path, hk_netbench *out);

#endif
