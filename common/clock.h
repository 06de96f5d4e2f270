/*
 * clock.h - the one clock every layer reads: seconds on CLOCK_MONOTONIC,
 * as a double (microsecond resolution is kept up to ~100 years of uptime).
 * Timeouts, the timeline, the flight recorder and the monitor all take
 * their times from here, so their figures compare directly.
 * Thread-safety: safe from any thread; never fails.
 */
#ifndef HK_COMMON_CLOCK_H
#define HK_COMMON_CLOCK_H

/** Seconds on CLOCK_MONOTONIC (an arbitrary origin, fixed per boot). */
double hk_now(void);

#endif
