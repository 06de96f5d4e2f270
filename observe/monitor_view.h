/*
 * monitor_view.h - a copy of rank 0's monitor state (observe/monitor.h):
 * what every rank's lateness and telemetry add up to, as the report, the
 * live table (observe/report.h) and the metrics file (observe/metrics.h)
 * format it. Plain data; no threads.
 */
#ifndef HK_OBSERVE_MONITOR_VIEW_H
#define HK_OBSERVE_MONITOR_VIEW_H

#include <stdint.h>

#include "coordinator/lateness.h"
#include "coordinator/wire.h"

#define HK_MONITOR_HOST_CAP 64 /* bytes of a host name kept, with NUL */
#define HK_THROTTLE_KINDS 9    /* entries of hk_throttle_names */

/** Means of GPU figures over some samples: sums and their count. */
typedef struct hk_tel_sums {
  uint64_t n;
  double temp_c, sm_mhz, sm_max_mhz, power_w, limit_w, util_pct;
} hk_tel_sums;

/** The telemetry causes the report can name (observe/report.h). */
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

/** A copy of rank 0's monitor state (the monitor takes it). */
typedef struct hk_monitor_view {
  int size;
  uint64_t rounds;        /* every round so far */
  uint64_t window_rounds; /* rounds behind hk_monitor_rank.window */
  double period_s;        /* mean time between rounds, s (0: < 2 rounds) */
  double window_period_s; /* the same over the window */
  double elapsed_s;       /* since the monitor started, s */
  hk_monitor_rank *ranks; /* size entries; owned (hk_monitor_view_free) */
} hk_monitor_view;

/** Frees what a view holds. */
void hk_monitor_view_free(hk_monitor_view *v);

#endif
