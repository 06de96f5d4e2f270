/*
 * test_monitor - who is slow, and why (issue 15) over hkrun at np 4:
 * an injected slow rank is named with its lateness within 20% of the
 * injected delay; no rank is named when none is slow; a stand-in NVML
 * (stub_nvml.c) with one thermal-throttling GPU makes the report name
 * thermal slowdown with its figures, and without NVML the report has no
 * GPU line and no error; HK_METRICS_FILE parses as Prometheus text (a
 * checker below), has the documented names and is never seen
 * half-written; hkrun --monitor on a pipe prints whole lines, one per
 * rank per refresh.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include "harness.h"

#define W_STRAGGLER WORKER_DIR "/w_straggler"
#define NO_NVML "HK_NVML_LIBRARY=libhk-no-such-nvml.so.1"

/* Runs w_straggler under hkrun -np 4 with env; returns its result. */
static void run_job(char *const env[], const char *slow, const char *ms,
                    const char *steps, const char *seconds, hkt_result *r) {
  char *argv[] = {HKRUN_PATH,      "-np",        "4",        "--",
                  W_STRAGGLER,     (char *)slow, (char *)ms, (char *)steps,
                  (char *)seconds, NULL};
  int rc = hkt_run(argv, env, 120, r);
  if (rc != 0 || r->exit_code != 0)
    fprintf(stderr, "job failed (rc %d, exit %d):\n%s\n%s\n", rc, r->exit_code,
            r->out, r->err);
  assert_int_equal(rc, 0);
  assert_int_equal(r->exit_code, 0);
}

/* The report line naming rank r ("hk monitor: rank r on"), or NULL. */
static const char *named(const char *text, int r) {
  char key[64];
  snprintf(key, sizeof key, "hk monitor: rank %d on ", r);
  return strstr(text, key);
}

static void test_straggler_named(void **state) {
  (void)state;
  const double delay_ms = 150; /* large next to a loaded host's wake-up
                                  delays (a few ms) */
  char *env[] = {"HK_MONITOR=1", NO_NVML, NULL};
  hkt_result r;
  run_job(env, "2", "150", "15", NULL, &r);
  const char *line = named(r.err, 2);
  if (!line)
    fprintf(stderr, "%s", r.err);
  assert_non_null(line);
  double late = 0;
  const char *p = strstr(line, "% of 15 rounds, ");
  assert_non_null(p);
  assert_int_equal(sscanf(p, "%% of 15 rounds, %lf ms late per round", &late),
                   1);
  /* within 20% of the delay the slow rank had: its sleep, plus on a
   * loaded host the wait for a CPU when it woke (it says how long) */
  double slept = 0;
  const char *s = strstr(r.out, "slept ");
  assert_non_null(s);
  assert_int_equal(sscanf(s, "slept %lf ms per step", &slept), 1);
  if (!(late > 0.8 * slept && late < 1.2 * slept))
    fprintf(stderr, "late %.1f ms, slept %.1f ms:\n%s", late, slept, r.err);
  assert_true(slept >= delay_ms);
  assert_true(late > 0.8 * slept && late < 1.2 * slept);
  for (int k = 0; k < 4; k++)
    if (k != 2)
      assert_null(named(r.err, k));
  /* no NVML: no GPU in the report, no error said */
  assert_null(strstr(r.err, "GPU"));
  assert_null(strstr(r.err, "NVML"));
  assert_null(strstr(r.err, "error"));
  hkt_result_free(&r);
}

static void test_no_straggler(void **state) {
  (void)state;
  char *env[] = {"HK_MONITOR=1", NO_NVML, NULL};
  hkt_result r;
  run_job(env, "-1", "0", "200", NULL, &r);
  assert_non_null(strstr(r.err, "hk monitor: 200 rounds"));
  /* No rank is slow: none is named, unless the host starved it (a loaded
   * machine: then the report must say so, it never names a rank for
   * nothing). On an idle host this is "no straggler". */
  int named_any = 0;
  for (int k = 0; k < 4; k++) {
    const char *l = named(r.err, k);
    if (!l)
      continue;
    named_any = 1;
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(l, "\n"), l);
    fprintf(stderr, "named with no delay injected: %s\n", line);
    /* its own starvation, or its host's causes, on the host's line */
    if (!strstr(line, "CPU starvation")) {
      assert_non_null(strstr(line, "shows host-wide causes (its line below)"));
      assert_non_null(strstr(r.err, "hk monitor: host "));
    }
  }
  if (!named_any)
    assert_non_null(strstr(r.err, "hk monitor: no straggler"));
  hkt_result_free(&r);
}

/* HK_MONITOR_REPORT_S alone turns the monitor on and reports during the
 * run, not only at exit; each report names the slow rank. */
static void test_periodic_report(void **state) {
  (void)state;
  char *env[] = {"HK_MONITOR_REPORT_S=0.3", NO_NVML, NULL};
  hkt_result r;
  run_job(env, "3", "50", "0", "1.5", &r);
  int reports = hkt_count_lines(r.err, " rounds in "); /* headers */
  int named3 = hkt_count_lines(r.err, "hk monitor: rank 3 on ");
  if (reports < 3)
    fprintf(stderr, "%s", r.err);
  assert_true(reports >= 3);          /* >= 2 during the run, 1 at exit */
  assert_true(named3 >= reports - 1); /* the first may have no round */
  hkt_result_free(&r);
}

static void test_thermal_cause(void **state) {
  (void)state;
  char *env[] = {"HK_MONITOR=1", "HK_NVML_LIBRARY=" STUB_NVML,
                 "STUB_NVML_HOT_GPU=1", "HK_TELEMETRY_INTERVAL_S=0.1", NULL};
  hkt_result r;
  run_job(env, "1", "40", "0", "1.5", &r);
  const char *line = named(r.err, 1);
  if (!line)
    fprintf(stderr, "%s", r.err);
  assert_non_null(line);
  const char *end = strchr(line, '\n');
  assert_non_null(end);
  char text[2048];
  snprintf(text, sizeof text, "%.*s", (int)(end - line), line);
  assert_non_null(strstr(text, "rank 1 on "));
  assert_non_null(strstr(text, ", GPU 1: last in "));
  assert_non_null(strstr(text, "thermal slowdown 100% of the time at 87 "
                               "\u00b0C, SM clock 1410 of 1980 MHz"));
  assert_null(strstr(text, "power cap"));
  assert_null(strstr(r.err, "hk monitor: rank 0 on"));
  hkt_result_free(&r);
}

/* ---- a checker of the Prometheus text format (version 0.0.4) ---- */

static int name_ok(const char *s, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
    return 0;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
      return 0;
  return 1;
}

/* Parses {k="v",...}; returns the byte after '}', or NULL. */
static const char *labels_ok(const char *p) {
  if (*p != '{')
    return p;
  p++;
  while (*p != '}') {
    const char *k = p;
    while (isalnum((unsigned char)*p) || *p == '_')
      p++;
    if (!name_ok(k, (size_t)(p - k)) || *p++ != '=' || *p++ != '"')
      return NULL;
    while (*p && *p != '"') {
      if (*p == '\\' && (p[1] == '\\' || p[1] == '"' || p[1] == 'n'))
        p++;
      else if (*p == '\\' || *p == '\n')
        return NULL;
      p++;
    }
    if (*p++ != '"')
      return NULL;
    if (*p == ',')
      p++;
    else if (*p != '}')
      return NULL;
  }
  return p + 1;
}

/* 0 if text is well-formed exposition text: every line blank, a comment,
 * or `name{labels} value`, each sample's name TYPE'd before it; the names
 * TYPE'd go to types (newline-separated) if not NULL. Else -1, with the
 * bad line printed. */
static int check_prometheus(const char *text, char *types, size_t cap) {
  char seen[16384] = "\n";
  if (!*text || text[strlen(text) - 1] != '\n') {
    fprintf(stderr, "metrics: empty or no final newline\n");
    return -1;
  }
  for (const char *l = text; *l;) {
    const char *e = strchr(l, '\n');
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)(e - l), l);
    l = e + 1;
    if (!line[0])
      continue;
    if (line[0] == '#') {
      char name[256], type[32];
      if (strncmp(line, "# TYPE ", 7) == 0) {
        if (sscanf(line, "# TYPE %255s %31s", name, type) != 2 ||
            !name_ok(name, strlen(name)) ||
            (strcmp(type, "counter") && strcmp(type, "gauge") &&
             strcmp(type, "histogram") && strcmp(type, "summary") &&
             strcmp(type, "untyped"))) {
          fprintf(stderr, "metrics: bad TYPE line: %s\n", line);
          return -1;
        }
        snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s\n", name);
      } else if (strncmp(line, "# HELP ", 7) == 0 &&
                 (sscanf(line, "# HELP %255s", name) != 1 ||
                  !name_ok(name, strlen(name)))) {
        fprintf(stderr, "metrics: bad HELP line: %s\n", line);
        return -1;
      }
      continue;
    }
    const char *p = line;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
      p++;
    char key[260];
    snprintf(key, sizeof key, "\n%.*s\n", (int)(p - line), line);
    if (!name_ok(line, (size_t)(p - line)) || !strstr(seen, key)) {
      fprintf(stderr, "metrics: bad or un-TYPE'd sample name: %s\n", line);
      return -1;
    }
    p = labels_ok(p);
    char *end = NULL;
    if (!p || *p++ != ' ' || (strtod(p, &end), end == p) || *end) {
      fprintf(stderr, "metrics: bad sample line: %s\n", line);
      return -1;
    }
  }
  if (types)
    snprintf(types, cap, "%s", seen);
  return 0;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  size_t n;
  while ((n = fread(s + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (len + 1 == cap)
      s = realloc(s, cap *= 2);
  }
  fclose(f);
  s[len] = '\0';
  return s;
}

static void test_checker_rejects(void **state) {
  (void)state;
  assert_int_equal(check_prometheus("# TYPE a gauge\na 1\n", NULL, 0), 0);
  assert_int_equal(check_prometheus("a 1\n", NULL, 0), -1); /* no TYPE */
  assert_int_equal(check_prometheus("# TYPE a gauge\na{x=\"1\" 1\n", NULL, 0),
                   -1);
  assert_int_equal(check_prometheus("# TYPE a gauge\na{x=\"1\"} \n", NULL, 0),
                   -1);
  assert_int_equal(check_prometheus("# TYPE a gauge\na 1", NULL, 0), -1);
  assert_int_equal(check_prometheus("# TYPE 1a gauge\n", NULL, 0), -1);
}

static void test_metrics_file(void **state) {
  (void)state;
  char dir[512], path[600], envp[640];
  assert_int_equal(hkt_mkdtemp("hk-metrics-", dir, sizeof dir), 0);
  snprintf(path, sizeof path, "%s/job.prom", dir);
  snprintf(envp, sizeof envp, "HK_METRICS_FILE=%s", path);
  char *env[] = {envp,
                 "HK_METRICS_INTERVAL_S=0.02",
                 "HK_TELEMETRY_INTERVAL_S=0.1",
                 "HK_NVML_LIBRARY=" STUB_NVML,
                 "STUB_NVML_HOT_GPU=3",
                 NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", "--",  W_STRAGGLER,
                  "3",        "50",  "0", "2.5", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  /* a reader polling while the job runs never sees a partial file */
  int reads = 0;
  double until = hkt_now() + 60;
  while (hkt_now() < until) {
    char *t = read_all(path);
    if (t) {
      reads++;
      if (check_prometheus(t, NULL, 0) != 0 ||
          strncmp(t, "# HELP hk_rounds_total ", 23) != 0 ||
          !strstr(t, "\n# TYPE hk_host_cpus gauge\n")) {
        fprintf(stderr, "read %d is not a whole file:\n%s\n", reads, t);
        fail();
      }
      free(t);
    }
    /* next read in 2 ms, or at once when the job ends */
    struct pollfd pf = {.fd = p.pidfd, .events = POLLIN};
    if (poll(&pf, 1, 2) > 0)
      break;
  }
  hkt_result r;
  assert_int_equal(hkt_finish(&p, 60, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_true(reads >= 3);
  char *t = read_all(path);
  assert_non_null(t);
  char types[16384];
  assert_int_equal(check_prometheus(t, types, sizeof types), 0);
  static const char *const names[] = {
      "hk_rounds_total",
      "hk_rank_lateness_seconds",
      "hk_rank_lateness_seconds_total",
      "hk_rank_wait_seconds",
      "hk_rank_wait_seconds_total",
      "hk_rank_last_total",
      "hk_rank_last_ratio",
      "hk_rank_straggler",
      "hk_telemetry_samples_total",
      "hk_process_cpu_seconds_total",
      "hk_process_run_delay_seconds_total",
      "hk_host_load1",
      "hk_host_cpus",
      "hk_gpu_utilization_ratio",
      "hk_gpu_memory_used_bytes",
      "hk_gpu_temperature_celsius",
      "hk_gpu_sm_clock_hertz",
      "hk_gpu_sm_clock_max_hertz",
      "hk_gpu_power_watts",
      "hk_gpu_power_limit_watts",
      "hk_gpu_throttle_reason",
      "hk_gpu_throttle_samples_total",
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char key[128];
    snprintf(key, sizeof key, "\n%s\n", names[i]);
    if (!strstr(types, key))
      fprintf(stderr, "missing %s in:\n%s\n", names[i], t);
    assert_non_null(strstr(types, key));
  }
  /* the scripted figures, with the documented labels */
  assert_non_null(strstr(t, "hk_gpu_temperature_celsius{rank=\"3\",host=\""));
  assert_non_null(strstr(t, ",local_rank=\"3\",gpu=\"3\"} 87\n"));
  assert_non_null(strstr(t, ",local_rank=\"3\",gpu=\"3\",reason="
                            "\"sw_thermal_slowdown\"} 1\n"));
  assert_non_null(strstr(t, ",local_rank=\"0\",gpu=\"0\",reason="
                            "\"sw_thermal_slowdown\"} 0\n"));
  assert_non_null(strstr(t, ",gpu=\"3\"} 1410000000\n"));
  assert_non_null(strstr(t, "hk_rank_straggler{rank=\"3\""));
  const char *s3 = strstr(t, "hk_rank_straggler{rank=\"3\"");
  assert_non_null(strstr(s3, "} 1\n"));
  free(t);
  /* nothing left behind but the file itself */
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      files++;
      assert_string_equal(e->d_name, "job.prom");
    }
  closedir(d);
  assert_int_equal(files, 1);
  unlink(path);
  rmdir(dir);
  hkt_result_free(&r);
}

/* hkrun --monitor with stdout a pipe: whole "monitor: " lines, one per
 * rank per refresh, ranks in order, several refreshes during the run. */
static void test_live_pipe(void **state) {
  (void)state;
  char *env[] = {"HK_TELEMETRY_INTERVAL_S=0.1", NO_NVML, NULL};
  char *argv[] = {HKRUN_PATH, "--monitor", "-np", "4",   "--", W_STRAGGLER,
                  "2",        "100",       "0",   "1.5", NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 120, &r);
  if (rc != 0 || r.exit_code != 0)
    fprintf(stderr, "job failed (rc %d, exit %d):\n%s\n%s\n", rc, r.exit_code,
            r.out, r.err);
  assert_int_equal(rc, 0);
  assert_int_equal(r.exit_code, 0);
  int lines = 0, refreshes = 0;
  for (const char *l = r.out; (l = strstr(l, "monitor: ")) != NULL;) {
    const char *e = strchr(l, '\n');
    assert_non_null(e); /* every table line is whole */
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(e - l), l);
    int rank = -1, last = -1;
    double late, wait;
    char host[128];
    const char *tail = strstr(line, " late ");
    assert_non_null(tail);
    assert_int_equal(sscanf(line, "monitor: rank %d host %127s", &rank, host),
                     2);
    assert_int_equal(rank, lines % 4); /* one per rank, in order */
    assert_non_null(strstr(line, " gpu - util - temp - sm - throttle - "));
    assert_int_equal(
        sscanf(tail, " late %lfms wait %lfms last %d%%", &late, &wait, &last),
        3);
    if (++lines % 4 == 0)
      refreshes++;
    l = e + 1;
  }
  assert_int_equal(lines % 4, 0);
  assert_true(refreshes >= 3);
  assert_null(strstr(r.out, "\033[")); /* no cursor moves on a pipe */
  /* the slow rank (100 ms a step) shows up as late */
  double most = 0;
  for (const char *l = r.out; (l = strstr(l, "monitor: rank 2 ")); l++) {
    double late2 = 0;
    assert_int_equal(sscanf(strstr(l, " late "), " late %lfms", &late2), 1);
    most = late2 > most ? late2 : most;
  }
  assert_true(most > 50);
  hkt_result_free(&r);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checker_rejects),
      cmocka_unit_test(test_straggler_named),
      cmocka_unit_test(test_no_straggler),
      cmocka_unit_test(test_periodic_report),
      cmocka_unit_test(test_thermal_cause),
      cmocka_unit_test(test_metrics_file),
      cmocka_unit_test(test_live_pipe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
