/*
 * test_monitor_report - the pure parts of issue 15's monitor: lateness
 * accounting (coordinator/lateness.h) against hand-computed rounds, the
 * straggler rule and the causes the report may claim (observe/report.h)
 * at and around each threshold, and the metrics text (observe/metrics.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/lateness.h"
#include "observe/metrics.h"
#include "observe/report.h"
#include "observe/telemetry.h"

static void test_lateness_rounds(void **state) {
  (void)state;
  hk_lateness *L;
  assert_int_equal(hk_lateness_create(3, 2, &L), HK_OK);
  /* round 1: two tensors; rank 2 is 30 ms late on one, 10 on the other;
   * rank 1 is 5 ms late once. late_r(R) is the max: 0, 5, 30 ms. */
  hk_lateness_arrival(L, 0, 0);
  hk_lateness_arrival(L, 1, 0.005);
  hk_lateness_arrival(L, 2, 0.030);
  hk_lateness_arrival(L, 0, 0);
  hk_lateness_arrival(L, 1, 0);
  hk_lateness_arrival(L, 2, 0.010);
  assert_int_equal(hk_lateness_end_round(L, 1.0), 0);
  assert_int_equal(hk_lateness_end_round(L, 1.1), 0); /* no arrival */
  assert_int_equal(hk_lateness_window(L)->rounds, 0);
  /* round 2: rank 0 is last by 20 ms */
  hk_lateness_arrival(L, 0, 0.020);
  hk_lateness_arrival(L, 1, 0);
  hk_lateness_arrival(L, 2, 0);
  assert_int_equal(hk_lateness_end_round(L, 1.5), 1); /* window closed */
  const hk_lateness_sums *w = hk_lateness_window(L);
  assert_int_equal(w->rounds, 2);
  assert_true(w->first_s == 1.0 && w->last_s == 1.5);
  assert_true(w->ranks[2].late_s == 0.030);
  assert_true(w->ranks[0].late_s == 0.020);
  assert_int_equal(w->ranks[2].last, 1);
  assert_int_equal(w->ranks[0].last, 1);
  assert_int_equal(w->ranks[1].last, 0);
  /* wait = spread - own lateness: rank 1 waited 25 then 20 ms */
  assert_true(w->ranks[1].wait_s > 0.045 - 1e-12 &&
              w->ranks[1].wait_s < 0.045 + 1e-12);
  assert_true(w->ranks[2].worst_s == 0.030);
  /* round 3 opens a new window; the total keeps everything */
  hk_lateness_arrival(L, 1, 0);
  hk_lateness_arrival(L, 2, 0); /* spread 0: nobody is last */
  assert_int_equal(hk_lateness_end_round(L, 2.0), 0);
  const hk_lateness_sums *t = hk_lateness_total(L);
  assert_int_equal(t->rounds, 3);
  assert_int_equal(t->ranks[0].last + t->ranks[1].last + t->ranks[2].last, 2);
  assert_int_equal(hk_lateness_window(L)->rounds, 2); /* still the closed */
  hk_lateness_destroy(L);
  assert_int_equal(hk_lateness_create(0, 1, &L), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "size 0"));
}

/* A view of n ranks, `rounds` rounds one every period_s. */
static hk_monitor_view view(int n, uint64_t rounds, double period_s) {
  hk_monitor_view v = {.size = n,
                       .rounds = rounds,
                       .window_rounds = rounds,
                       .period_s = period_s,
                       .window_period_s = period_s,
                       .elapsed_s = period_s * (double)rounds};
  v.ranks = calloc((size_t)n, sizeof *v.ranks);
  for (int r = 0; r < n; r++) {
    snprintf(v.ranks[r].host, sizeof v.ranks[r].host, "node%d", r / 2);
    v.ranks[r].local_rank = r % 2;
  }
  return v;
}

static void late(hk_monitor_view *v, int r, double per_round_s, uint64_t last) {
  v->ranks[r].total.late_s = per_round_s * (double)v->rounds;
  v->ranks[r].total.last = last;
  v->ranks[r].window = v->ranks[r].total;
}

/* n GPU samples of rank r with these figures. */
static void gpu(hk_monitor_view *v, int r, uint64_t n, uint64_t throttled,
                unsigned temp, unsigned sm, unsigned util) {
  hk_rank_telemetry *t = &v->ranks[r].tel;
  t->samples = t->gpu_samples = n;
  t->last = (hk_wire_sample){.gpu_ok = 1,
                             .gpu_index = (uint16_t)r,
                             .util_pct = (uint8_t)util,
                             .temp_c = (uint16_t)temp,
                             .sm_mhz = sm,
                             .sm_max_mhz = 1980,
                             .ncpu = 8,
                             .t_s = 10};
  t->first = t->last;
  t->first.t_s = 0;
  hk_tel_sums s = {throttled,
                   (double)throttled * temp,
                   (double)throttled * sm,
                   (double)throttled * 1980,
                   (double)throttled * 300,
                   (double)throttled * 700,
                   (double)throttled * util};
  t->cause[HK_CAUSE_THERMAL] = s;
  memset(&t->busy, 0, sizeof t->busy);
  if (util >= HK_REPORT_BUSY_PCT) {
    hk_tel_sums b = {n, (double)n * temp, (double)n * sm, (double)n * 1980, 0,
                     0, (double)n * util};
    t->busy = b;
  }
}

/* Lines of text holding s. */
static int hkt_lines_with(const char *text, const char *s) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, s)); p += strlen(s))
    n++;
  return n;
}

static char *report(const hk_monitor_view *v) {
  hk_buf b = {0};
  assert_int_equal(hk_report_format(v, &b), HK_OK);
  assert_int_equal(hk_buf_append(&b, "", 1), HK_OK);
  return (char *)b.data;
}

static void test_straggler_rule(void **state) {
  (void)state;
  /* 100 ms rounds: the bar is 10 ms (10%); 9 ms is not named */
  hk_monitor_view v = view(4, 100, 0.100);
  late(&v, 1, 0.009, 90);
  assert_false(hk_report_is_straggler(&v, 1));
  char *t = report(&v);
  assert_non_null(strstr(t, "no straggler: the latest rank (rank 1) was 9.00 "
                            "ms late per round"));
  assert_non_null(strstr(t, "at least 10.0 ms per round later than the "
                            "median of the others"));
  free(t);
  late(&v, 1, 0.011, 90);
  late(&v, 3, 0.020, 10);
  t = report(&v);
  /* slowest first, both named, with host and shares */
  const char *r3 = strstr(t, "hk monitor: rank 3 on node1: last in 10% of 100 "
                             "rounds, 20.0 ms late per round; no cause "
                             "of its own visible in telemetry\n");
  const char *r1 = strstr(t, "hk monitor: rank 1 on node0: last in 90%");
  assert_non_null(r3);
  assert_non_null(r1);
  assert_true(r3 < r1);
  assert_null(strstr(t, "rank 0 on"));
  free(t);
  /* every rank equally late (noise all share): nobody is named */
  for (int k = 0; k < 4; k++)
    late(&v, k, 0.030, 25);
  for (int k = 0; k < 4; k++)
    assert_false(hk_report_is_straggler(&v, k));
  late(&v, 0, 0.045, 25); /* 15 ms over the others' median: named */
  assert_true(hk_report_is_straggler(&v, 0));
  assert_true(hk_report_excess(&v, 0) > 0.015 - 1e-9);
  /* 1 ms rounds: the 5 ms floor holds; 4 ms late is not named */
  hk_monitor_view fast = view(2, 1000, 0.001);
  late(&fast, 1, 0.004, 1000);
  assert_false(hk_report_is_straggler(&fast, 1));
  late(&fast, 1, 0.005, 1000);
  assert_true(hk_report_is_straggler(&fast, 1));
  hk_monitor_view_free(&fast);
  hk_monitor_view_free(&v);
  hk_monitor_view none = view(2, 0, 0);
  t = report(&none);
  assert_non_null(strstr(t, "no straggler: no round ran"));
  free(t);
  hk_monitor_view_free(&none);
}

static void test_causes(void **state) {
  (void)state;
  hk_monitor_view v = view(2, 100, 0.1);
  late(&v, 1, 0.038, 71);
  char c[512] = "";
  /* thermal in 9 of 100 samples: under 10%, not claimed; clocks at max */
  gpu(&v, 1, 100, 9, 87, 1980, 95);
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 0);
  assert_string_equal(c, "no cause of its own visible in telemetry");
  /* in 41 of 100: claimed with the figures */
  gpu(&v, 1, 100, 41, 87, 1410, 95);
  c[0] = '\0';
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 1);
  assert_string_equal(c, "thermal slowdown 41% of the time at 87 \u00b0C, SM "
                         "clock 1410 of 1980 MHz, power 300 of 700 W");
  /* a low clock with no reason, busy: named; idle (util 10%): not */
  gpu(&v, 1, 100, 0, 70, 1500, 95);
  c[0] = '\0';
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 1);
  assert_non_null(strstr(c, "low SM clock 1500 of 1980 MHz at 95%"));
  gpu(&v, 1, 100, 0, 70, 300, 10);
  c[0] = '\0';
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 0);
  /* host load 1.2 per CPU, and 0.3 s/s of run delay, on a host where no
   * other rank has figures: the host's (a rank alone with figures on its
   * host cannot be told from it), not the rank's */
  hk_rank_telemetry *t = &v.ranks[1].tel;
  t->load_per_cpu = 1.2 * (double)t->samples;
  t->last.run_delay_s = 3.0; /* over 10 s */
  t->last.cpu_s = 5.0;
  c[0] = '\0';
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 0);
  assert_string_equal(c, "no cause of its own visible in telemetry");
  c[0] = '\0';
  assert_int_equal(hk_report_host_causes(&v, 1, c, sizeof c), 2);
  assert_string_equal(c, "high load 1.2 per CPU (8 CPUs); CPU starvation: its "
                         "ranks' threads waited 0.30 s per s for a CPU (the "
                         "median of 1 rank)");
  /* just under both bars */
  t->load_per_cpu = 0.99 * (double)t->samples;
  t->last.run_delay_s = 0.99;
  c[0] = '\0';
  assert_int_equal(hk_report_causes(&v, 1, c, sizeof c), 0);
  assert_int_equal(hk_report_host_causes(&v, 1, c, sizeof c), 0);
  hk_monitor_view_free(&v);
}

/* Host figures of rank r: load per CPU and run delay (s over 10 s). */
static void host_tel(hk_monitor_view *v, int r, double load, double delay_s) {
  hk_rank_telemetry *t = &v->ranks[r].tel;
  memset(t, 0, sizeof *t);
  t->samples = 10;
  t->load_per_cpu = load * 10;
  t->first = (hk_wire_sample){.ncpu = 2, .t_s = 0};
  t->last = (hk_wire_sample){
      .ncpu = 2, .t_s = 10, .run_delay_s = delay_s, .cpu_s = 4};
}

/* Four ranks on one loaded host, one of them late: the load and the
 * starvation every rank shows are the host's, on a line of its own; the
 * late rank's line claims nothing for itself and points there. A rank
 * that starves alone on its host is its own cause. */
static void test_host_causes(void **state) {
  (void)state;
  hk_monitor_view v = view(4, 100, 0.1);
  for (int r = 0; r < 4; r++) {
    snprintf(v.ranks[r].host, sizeof v.ranks[r].host, "node0");
    host_tel(&v, r, 1.2, 3.0 + 0.2 * r);
  }
  late(&v, 2, 0.030, 80);
  char *t = report(&v);
  const char *r2 = strstr(t, "hk monitor: rank 2 on node0: last in 80% of 100 "
                             "rounds, 30.0 ms late per round; no cause of its "
                             "own visible in telemetry; its host node0 shows "
                             "host-wide causes (its line below)\n");
  const char *host = strstr(t, "hk monitor: host node0 (ranks 0-3): high load "
                               "1.2 per CPU (2 CPUs); CPU starvation: its "
                               "ranks' threads waited 0.33 s per s for a CPU "
                               "(the median of 4 ranks)\n");
  if (!r2 || !host)
    fail_msg("%s", t);
  assert_true(r2 < host);
  assert_null(strstr(t, "host load"));
  free(t);
  /* only rank 2 starves, the host is not loaded: rank 2's own cause, no
   * host line */
  for (int r = 0; r < 4; r++)
    host_tel(&v, r, 0.5, r == 2 ? 3.0 : 0.1);
  t = report(&v);
  if (!strstr(t, "30.0 ms late per round; CPU starvation: its threads "
                 "waited 0.30 s per s for a CPU (they ran 0.40 s per s)\n"))
    fail_msg("%s", t);
  assert_null(strstr(t, "hk monitor: host "));
  free(t);
  /* two hosts: only the loaded one has a line, naming its ranks */
  for (int r = 0; r < 4; r++) {
    snprintf(v.ranks[r].host, sizeof v.ranks[r].host, "node%d", r % 2);
    host_tel(&v, r, r % 2 ? 3.0 : 0.2, 0);
  }
  t = report(&v);
  if (!strstr(t, "hk monitor: host node1 (ranks 1, 3): high load 3.0 per CPU "
                 "(2 CPUs)\n"))
    fail_msg("%s", t);
  assert_null(strstr(t, "host node0"));
  free(t);
  hk_monitor_view_free(&v);
}

/* The live table and the report agree on the latest rank: the table's
 * late column is the report's figure (every round), its " latest" mark is
 * on the rank the report names, even where the last window alone would
 * rank another one first. */
static void test_table_agrees(void **state) {
  (void)state;
  hk_monitor_view v = view(3, 100, 0.1);
  late(&v, 1, 0.004, 60); /* the latest over every round */
  late(&v, 2, 0.001, 40);
  v.window_rounds = 10; /* the last 10: rank 2 was later */
  v.ranks[1].window.late_s = 0.001 * 10;
  v.ranks[2].window.late_s = 0.003 * 10;
  assert_int_equal(hk_report_latest(&v), 1);
  char *t = report(&v);
  assert_non_null(strstr(t, "no straggler: the latest rank (rank 1) was 4.00 "
                            "ms late per round"));
  free(t);
  hk_buf b = {0};
  assert_int_equal(hk_report_table(&v, &b), HK_OK);
  assert_int_equal(hk_buf_append(&b, "", 1), HK_OK);
  const char *tab = (const char *)b.data;
  if (!strstr(tab, "rank 1 host node0 gpu - util - temp - sm - throttle - "
                   "late 4.0ms wait 0.0ms last 60% (last 10 rounds: late "
                   "1.0ms) latest\n") ||
      !strstr(tab, "rank 2 host node1 gpu - util - temp - sm - throttle - "
                   "late 1.0ms wait 0.0ms last 40% (last 10 rounds: late "
                   "3.0ms)\n"))
    fail_msg("%s", tab);
  assert_int_equal(hkt_lines_with(tab, " latest\n"), 1);
  hk_buf_free(&b);
  hk_monitor_view_free(&v);
  hk_monitor_view none = view(2, 0, 0);
  assert_int_equal(hk_report_latest(&none), -1);
  hk_monitor_view_free(&none);
}

static void test_metrics_text(void **state) {
  (void)state;
  hk_monitor_view v = view(2, 10, 0.1);
  snprintf(v.ranks[1].host, sizeof v.ranks[1].host, "a\"b\\c");
  late(&v, 1, 0.05, 10);
  gpu(&v, 1, 4, 4, 87, 1410, 95);
  v.ranks[1].tel.last.throttle = HK_THROTTLE_SW_THERMAL;
  v.ranks[1].tel.reason_samples[5] = 4; /* sw_thermal_slowdown */
  hk_buf b = {0};
  assert_int_equal(hk_metrics_format(&v, &b), HK_OK);
  assert_int_equal(hk_buf_append(&b, "", 1), HK_OK);
  const char *t = (const char *)b.data;
  assert_non_null(strstr(t, "# TYPE hk_rounds_total counter\n"
                            "hk_rounds_total 10\n"));
  assert_non_null(strstr(t, "hk_rank_lateness_seconds{rank=\"1\",host=\"a\\\"b"
                            "\\\\c\",local_rank=\"1\",gpu=\"1\"} 0.05"));
  assert_non_null(strstr(t, "hk_rank_last_total{rank=\"1\",host=\"a\\\"b\\\\c\""
                            ",local_rank=\"1\",gpu=\"1\"} 10\n"));
  assert_non_null(strstr(t, "hk_gpu_temperature_celsius{rank=\"1\""));
  assert_null(strstr(t, "hk_gpu_temperature_celsius{rank=\"0\""));
  assert_non_null(strstr(t, "gpu=\"1\",reason=\"sw_thermal_slowdown\"} 1\n"));
  assert_non_null(strstr(t, "hk_gpu_throttle_samples_total{rank=\"1\",host=\""
                            "a\\\"b\\\\c\",local_rank=\"1\",gpu=\"1\",reason="
                            "\"sw_thermal_slowdown\"} 4\n"));
  hk_buf_free(&b);
  /* without GPU telemetry on any rank: no GPU metric at all */
  memset(&v.ranks[1].tel, 0, sizeof v.ranks[1].tel);
  assert_int_equal(hk_metrics_format(&v, &b), HK_OK);
  assert_int_equal(hk_buf_append(&b, "", 1), HK_OK);
  assert_null(strstr((const char *)b.data, "hk_gpu_"));
  assert_non_null(strstr((const char *)b.data, "gpu=\"\"}"));
  hk_buf_free(&b);
  hk_monitor_view_free(&v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lateness_rounds),
      cmocka_unit_test(test_straggler_rule),
      cmocka_unit_test(test_causes),
      cmocka_unit_test(test_host_causes),
      cmocka_unit_test(test_table_agrees),
      cmocka_unit_test(test_metrics_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
