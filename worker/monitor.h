/*
 * monitor.h - who is slow, and why (issue 15, items 1-5): rank 0's
 * lateness accounting (coordinator/lateness.h) joined with every rank's
 * telemetry (worker/telemetry.h), the report (worker/report.h), the
 * Prometheus file (worker/metrics.h) and the live table hkrun --monitor
 * shows.
 *
 * On when any of HK_MONITOR=1, HK_METRICS_FILE, HK_MONITOR_REPORT_S > 0 or
 * HK_MONITOR_LIVE=1 (hkrun --monitor) is set (hk_config_monitoring); off,
 * ctx->monitor is NULL and the hot path pays one branch per tensor
 * (negotiator) and one per round, per request and per wake-up of rank
 * 0's background thread.
 *
 * Threads: every rank runs one monitor thread, which samples telemetry
 * every HK_TELEMETRY_INTERVAL_S; other ranks' samples ride on their next
 * REQUESTS (hk_monitor_take_sample, background thread) and rank 0 files
 * them (hk_monitor_add_sample, background thread). Rank 0's monitor
 * thread also prints the report every HK_MONITOR_REPORT_S, rewrites
 * HK_METRICS_FILE every HK_METRICS_INTERVAL_S and, with HK_MONITOR_LIVE,
 * encodes the table (HK_MSG_MONITOR) every sampling interval and wakes
 * the background thread, which sends it to hkrun on the launcher
 * connection (hk_monitor_background: only the background thread touches
 * the network). A mutex inside the monitor guards what both threads
 * touch; the functions below take it themselves.
 */
#ifndef HK_WORKER_MONITOR_H
#define HK_WORKER_MONITOR_H

#include <stdint.h>

#include "coordinator/lateness.h"
#include "coordinator/wire.h"
#include "worker/context.h"

#define HK_MONITOR_HOST_CAP 64 /* bytes of a host name kept, with NUL */
#define HK_THROTTLE_KINDS 9    /* entries of hk_throttle_names */

/** Means of GPU figures over some samples: sums and their count. */
typedef struct hk_tel_sums {
  uint64_t n;
  double temp_c, sm_mhz, sm_max_mhz, power_w, limit_w, util_pct;
} hk_tel_sums;

/** The telemetry causes the report can name (worker/report.h). */
typedef enum hk_gpu_cause {
  HK_CAUSE_THERMAL = 0, /* sw or hw thermal slowdown bit */
  HK_CAUSE_POWER = 1,   /* sw power cap bit */
  HK_CAUSE_HW = 2,      /* hw slowdown or hw power brake bit */
  HK_CAUSE_COUNT = 3
} hk_gpu_cause;

/** What rank 0 knows of one rank's telemetry, since the start. */
typedef struct hk_rank_telemetry {
  uint64_t samples;                           /* samples received */
  uint64_t gpu_samples;                       /* of them with GPU figures */
  uint64_t reason_samples[HK_THROTTLE_KINDS]; /* with hk_throttle_names[i] */
  hk_tel_sums cause[HK_CAUSE_COUNT]; /* GPU samples showing each cause */
  hk_tel_sums busy;    /* GPU samples at >= HK_REPORT_BUSY_PCT utilisation */
  double load_per_cpu; /* sum over samples of load1 / ncpu */
  hk_wire_sample first, last; /* the first and the newest sample */
} hk_rank_telemetry;

/** One rank, as rank 0 sees it. */
typedef struct hk_monitor_rank {
  char host[HK_MONITOR_HOST_CAP];
  int local_rank;
  hk_lateness_rank total;  /* every round */
  hk_lateness_rank window; /* the last closed window (or, before one
                              closed, every round so far) */
  hk_rank_telemetry tel;
} hk_monitor_rank;

/** A copy of rank 0's monitor state (hk_monitor_view_take). */
typedef struct hk_monitor_view {
  int size;
  uint64_t rounds;        /* every round so far */
  uint64_t window_rounds; /* rounds behind hk_monitor_rank.window */
  double period_s;        /* mean time between rounds, s (0: < 2 rounds) */
  double window_period_s; /* the same over the window */
  double elapsed_s;       /* since the monitor started, s */
  hk_monitor_rank *ranks; /* size entries; owned (hk_monitor_view_free) */
} hk_monitor_view;

typedef struct hk_monitor hk_monitor;

/**
 * Sets ctx->monitor up when monitoring is asked for (else leaves it NULL
 * and returns HK_OK): telemetry for this rank's GPU, rank 0's lateness
 * accounting hooked into its negotiator, and the monitor thread. Call
 * after the mesh and the negotiator exist, before the background thread
 * starts. Errors: HK_ERR_NOMEM, HK_ERR_SYSTEM (no thread).
 */
hk_status hk_monitor_start(hk_ctx *ctx);

/**
 * Stops the thread and frees ctx->monitor (NULL is fine). With `final`
 * (hk_shutdown, rank 0) prints the report and writes HK_METRICS_FILE a
 * last time first. Call once the background thread has stopped.
 */
void hk_monitor_stop(hk_ctx *ctx, int final);

/** Rank 0's background thread: a RESPONSES with work was decided. */
void hk_monitor_round_end(hk_monitor *m);

/** Rank > 0's background thread, building a REQUESTS: copies the newest
 *  sample into *out and returns 1 if it was not sent yet, else 0. */
int hk_monitor_take_sample(hk_monitor *m, hk_wire_sample *out);

/** Rank 0's background thread, after every wake-up: sends hkrun the
 *  live table the monitor thread queued, if any, and only when it fits
 *  whole in the launcher connection's empty send buffer (else that
 *  refresh is dropped: a frame cut by a timeout would break the
 *  connection's framing, and hkrun would take rank 0 for gone). */
void hk_monitor_background(hk_monitor *m);

/** Rank 0: files rank `rank`'s sample (rank in range, the caller's). */
void hk_monitor_add_sample(hk_monitor *m, int rank, const hk_wire_sample *s);

/** Rank 0: copies the state into *v. Errors: HK_ERR_NOMEM. */
hk_status hk_monitor_view_take(hk_monitor *m, hk_monitor_view *v);

/** Frees what a view holds. */
void hk_monitor_view_free(hk_monitor_view *v);

#endif
