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
 *   CPU starvation: its threads' run delay (runnable, not running) grew
 *     by >= HK_REPORT_STARVED_S per second of wall time, while most of its
 *     host's ranks' did not (by at least that much less).
 * Otherwise: "no cause of its own visible in telemetry".
 * What a host shows is the host's, never one rank's (a loaded machine
 * slows every rank on it, and which of them comes last is chance): its
 * line names the host and its ranks, with
 *   high load: the mean 1-minute load average per online CPU of its
 *     ranks' samples >= HK_REPORT_HIGH_LOAD (more runnable threads than
 *     CPUs);
 *   CPU starvation: the median of its ranks' run delay growth >=
 *     HK_REPORT_STARVED_S per second (at least half of them starve; a rank
 *     alone on its host: its own).
 * A named rank on such a host says so, pointing at the host's line.
 *
 * The live table shows the report's figures (every round so far: the
 * latest rank is the same in both, hk_report_latest) and, beside them,
 * the last window's lateness.
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
 * Appends rank r's own causes ("thermal slowdown 41% of the time at 87 °C,
 * SM clock 1410 of 1980 MHz, power 300 of 700 W; CPU starvation: ...") or
 * "no cause of its own visible in telemetry" to out[cap] (NUL-terminated,
 * cut if short). Returns how many causes it named.
 */
int hk_report_causes(const hk_monitor_view *v, int r, char *out, size_t cap);

/**
 * Appends the host-wide causes of rank r's host ("high load 1.2 per CPU (2
 * CPUs); CPU starvation: its ranks' threads waited 0.30 s per s for a CPU
 * (the median of 4 ranks)"), or nothing, to out[cap] (as above). Ranks
 * are on one host when their host names are equal. Returns how many.
 */
int hk_report_host_causes(const hk_monitor_view *v, int r, char *out,
                          size_t cap);

/** The latest rank: the largest mean lateness per round over every
 *  round (ties: the lower rank); -1 when no round ran. The report's
 *  "latest rank" and the table's "latest" mark are this one. */
int hk_report_latest(const hk_monitor_view *v);

/**
 * Appends the report to *out: a header line, then one line per named
 * rank ("hk monitor: rank 2 on node1, GPU 2: last in 98% of 120 rounds,
 * 50.3 ms late per round; <causes>"), or one line saying no rank is late
 * and naming the latest, then one line per host with host-wide causes
 * ("hk monitor: host node1 (ranks 0-3): <host causes>"). Lines end in
 * '\n'. Errors: HK_ERR_NOMEM.
 */
hk_status hk_report_format(const hk_monitor_view *v, hk_buf *out);

/**
 * Appends the live table: one line per rank, "rank 3 host node1 gpu 3
 * util 97% temp 87C sm 1410/1980MHz throttle sw_thermal_slowdown late
 * 38.0ms wait 0.2ms last 71% (last 100 rounds: late 40.1ms) latest":
 * late, wait and last over every round, as the report counts them, then
 * the last window's lateness, and " latest" on the report's latest rank;
 * GPU figures from the newest sample ("gpu -" without GPU telemetry).
 * Errors: HK_ERR_NOMEM.
 */
hk_status hk_report_table(const hk_monitor_view *v, hk_buf *out);

#endif
