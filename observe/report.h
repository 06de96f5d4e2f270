/*
 * report.h - the attribution report and the live table (issue 15, items
 * 3 and 4): which ranks hold the job back, and what their telemetry
 * shows. Pure formatting of a monitor view (observe/monitor.h): no I/O.
 *
 * A rank is named (a straggler) when its mean lateness per round exceeds
 * the median of the other ranks' by at least HK_REPORT_MIN_LATE_S and at
 * least HK_REPORT_REL_LATE of the mean round period: below 5 ms the
 * lateness is within the scheduling noise of a loaded host (a 2-core
 * machine running 4 ranks shows a few ms), a rank that costs under a
 * tenth of a round cannot be what makes a job run far below its speed,
 * and noise every rank suffers alike (the median) is nobody's fault. At
 * most HK_REPORT_MAX_NAMED, slowest first.
 *
 * For a named rank a cause is claimed only when its own figures show it:
 *   thermal slowdown / power cap / hardware slowdown: the NVML reason bit
 *     set in at least HK_REPORT_MIN_SHARE of its GPU samples (a rarer
 *     event cannot account for a steady lateness), with the mean
 *     temperature, SM clock and power over those samples;
 *   low SM clock (only without the above): mean SM clock below
 *     HK_REPORT_LOW_CLOCK of its maximum over the samples at >=
 *     HK_REPORT_BUSY_PCT utilisation (an idle GPU clocks down by design);
 *   high host load: mean 1-minute load average per online CPU >=
 *     HK_REPORT_HIGH_LOAD (more runnable threads than CPUs);
 *   CPU starvation: its threads' run delay (runnable, not running) grew
 *     by >= HK_REPORT_STARVED_S per second of wall time.
 * Otherwise: "no cause visible in telemetry".
 */
#ifndef HK_OBSERVE_REPORT_H
#define HK_OBSERVE_REPORT_H

#include "common/buf.h"
#include "observe/monitor_view.h"

#define HK_REPORT_MIN_LATE_S 0.005
#define HK_REPORT_REL_LATE 0.10
#define HK_REPORT_MAX_NAMED 3
#define HK_REPORT_MIN_SHARE 0.10
#define HK_REPORT_LOW_CLOCK 0.80
#define HK_REPORT_BUSY_PCT 50
#define HK_REPORT_HIGH_LOAD 1.0
#define HK_REPORT_STARVED_S 0.10

/** Rank r's mean lateness per round over every round, s (0: no round). */
double hk_report_lateness(const hk_monitor_view *v, int r);

/** Rank r's lateness over the median of the other ranks', s. */
double hk_report_excess(const hk_monitor_view *v, int r);

/** 1 if rank r is a straggler by the rule above. */
int hk_report_is_straggler(const hk_monitor_view *v, int r);

/**
 * Appends rank r's causes ("thermal slowdown 41% of the time at 87 °C, SM
 * clock 1410 of 1980 MHz; high host load 3.1 per CPU (8 CPUs)") or "no
 * cause visible in telemetry" to out[cap] (NUL-terminated, cut if
 * short). Returns how many causes it named.
 */
int hk_report_causes(const hk_monitor_view *v, int r, char *out, size_t cap);

/**
 * Appends the report to *out: a header line, then one line per named
 * rank ("hk monitor: rank 2 on node1, GPU 2: last in 98% of 120 rounds,
 * 50.3 ms late per round; <causes>"), or one line saying no rank is late
 * and the threshold used. Lines end in '\n'. Errors: HK_ERR_NOMEM.
 */
hk_status hk_report_format(const hk_monitor_view *v, hk_buf *out);

/**
 * Appends the live table: one line per rank, "rank 3 host node1 gpu 3
 * util 97% temp 87C sm 1410/1980MHz throttle sw_thermal_slowdown late
 * 38.0ms wait 0.2ms last 71%" (from the last window and the newest
 * sample; "gpu -" without GPU telemetry). Errors: HK_ERR_NOMEM.
 */
hk_status hk_report_table(const hk_monitor_view *v, hk_buf *out);

#endif
