/*
 * stats.c - timing and reporting helpers (see stats.h).
 */
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/internal.h"

double hkb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void hkb_sleep_until(double t) {
  struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
  if (ts.tv_nsec >= 1000000000L)
    ts.tv_nsec = 999999999L;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
    ; /* a signal: sleep on to the same instant */
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double hkb_median(double *v, int n) {
  if (n <= 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double hkb_min(const double *v, int n) {
  double m = n > 0 ? v[0] : 0;
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

double hkb_max(const double *v, int n) {
  double m = n > 0 ? v[0] : 0;
  for (int i = 1; i < n; i++)
    m = v[i] > m ? v[i] : m;
  return m;
}

void hkb_die(hk_status st, const char *what) {
  fprintf(stderr, "hkbench: %s: %s: %s\n", what, hk_strerror(st),
          hk_last_error());
  exit(1);
}

void hkb_ok(hk_status st, const char *what) {
  if (st != HK_OK)
    hkb_die(st, what);
}

void hkb_max_over_ranks(double *v, int n, const char *what) {
  char name[64];
  snprintf(name, sizeof name, "hkbench.%s", what);
  hkb_ok(hk_allreduce(name, v, v, (size_t)n, HK_FLOAT64, HK_MAX), name);
}

long long hkb_sum_over_ranks(long long v, const char *what) {
  char name[64];
  snprintf(name, sizeof name, "hkbench.%s", what);
  int64_t x = v;
  hkb_ok(hk_allreduce(name, &x, &x, 1, HK_INT64, HK_SUM), name);
  return (long long)x;
}

static hk_collective_timing ring_timing(void) {
  hk_collective_timing t;
  hkb_ok(hk_internal_last_collective(&t), "hk_internal_last_collective");
  return t;
}

double hkb_ring_last(const char *name) {
  hk_collective_timing t = ring_timing();
  if (t.seq == 0 || strcmp(t.name, name) != 0) {
    fprintf(stderr,
            "hkbench: the last ring collective was '%s', expected '%s'\n",
            t.seq ? t.name : "(none)", name);
    exit(1);
  }
  return t.end_s - t.start_s;
}

double hkb_ring_busy(void) { return ring_timing().busy_s; }

double hkb_ring_last_start(void) { return ring_timing().start_s; }

hk_negotiation_counts hkb_counts(void) {
  hk_negotiation_counts c;
  hkb_ok(hk_internal_negotiation_counts(&c), "hk_internal_negotiation_counts");
  return c;
}
