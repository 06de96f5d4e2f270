/*
 * test_hkbench - bench/hkbench runs and checks its own results (functional
 * only: benchmarks assert nothing about speed). Through hkrun: a float32
 * sweep, every dtype x op with the ring-only column, a CSV, a model
 * replay; without hkrun: the model list and a malformed model file.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* Runs argv; fails the test unless it exits 0. r must be freed. */
static void run_ok_env(char *const argv[], char *const env[], double timeout,
                       hkt_result *r) {
  int rc = hkt_run(argv, env, timeout, r);
  if (rc != 0 || !r->exited || r->exit_code != 0)
    fail_msg("%s %s: rc=%d exit=%d signal=%d timed_out=%d\nstdout:\n%.4000s"
             "\nstderr:\n%.4000s",
             argv[0], argv[1], rc, r->exit_code, r->signal, r->timed_out,
             r->out, r->err);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void run_ok(char *const argv[], double timeout, hkt_result *r) {
  run_ok_env(argv, NULL, timeout, r);
}

/*
 * Reads hkbench's table (hkrun's "[r] " prefixes stripped): the column
 * named `col` in the "#  size(B) ..." header, summed over the data rows.
 * Returns the number of rows; fails the test if the header is missing.
 */
static int sum_column(const char *out, const char *col, long long *sum) {
  int idx = -1, rows = 0;
  *sum = 0;
  char *copy = strdup(out), *save = NULL;
  assert_non_null(copy);
  for (char *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '[' && strchr(line, ']'))
      line = strchr(line, ']') + 1;
    while (*line == ' ')
      line++;
    int header = line[0] == '#' && strstr(line, "size(B)");
    if (line[0] == '#' && !header)
      continue;
    if (header)
      line++;
    char *tsave = NULL;
    int i = 0;
    for (char *tok = strtok_r(line, " ", &tsave); tok;
         tok = strtok_r(NULL, " ", &tsave), i++) {
      if (header && !strcmp(tok, col))
        idx = i;
      else if (!header && i == idx)
        *sum += atoll(tok);
    }
    rows += !header && idx >= 0;
  }
  free(copy);
  if (idx < 0)
    fail_msg("no '%s' column in:\n%.4000s", col, out);
  return rows;
}

/* The last word of the first output line whose first word (after hkrun's
 * "[r] ") is `first`, or "" (static storage). */
static const char *last_token(const char *out, const char *first) {
  static char word[64];
  word[0] = '\0';
  for (const char *line = out; *line;) {
    const char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)len, line);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    if (tok && tok[0] == '[')
      tok = strtok_r(NULL, " ", &save);
    if (tok && !strcmp(tok, first)) {
      for (char *t = tok; t; t = strtok_r(NULL, " ", &save))
        snprintf(word, sizeof word, "%s", t);
      return word;
    }
    line = eol ? eol + 1 : line + len;
  }
  return word;
}

/* The float32 sum sweep, as the peers run it: every size right. */
static void test_sweep(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "2",  HKBENCH_PATH, "-b", "8", "-e", "64K",
                  "-f",       "8",   "-n", "3",          "-w", "1", NULL};
  hkt_result r;
  run_ok(argv, 120, &r);
  long long wrong;
  assert_int_equal(sum_column(r.out, "#wrong", &wrong), 5); /* 8 B..32 KiB */
  assert_int_equal(wrong, 0);
  assert_int_equal(hkt_count_lines(r.out, "peer=hk nranks=2"), 1);
  hkt_result_free(&r);
}

/* --device gpu on the emulated device: every size right, and the
 * kernel table's rows with their ratios. */
static void test_device_sweep_and_kernels(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "2",        HKBENCH_PATH, "--device",
                  "gpu",      "-b",  "8",        "-e",         "256K",
                  "-f",       "8",   "-n",       "2",          "-w",
                  "1",        "-d",  "bfloat16", NULL};
  hkt_result r;
  run_ok_env(argv, env, 120, &r);
  long long wrong;
  assert_int_equal(sum_column(r.out, "#wrong", &wrong), 6); /* 8 B..256 KiB */
  assert_int_equal(wrong, 0);
  assert_int_equal(hkt_count_lines(r.out, "device=gpu"), 1);
  hkt_result_free(&r);
  char *kargv[] = {HKBENCH_PATH, "--device", "gpu", "--kernels", "-b",
                   "1M",         "-e",       "4M",  "-n",        "1",
                   "-w",         "0",        NULL};
  run_ok_env(kargv, env, 120, &r);
  assert_int_equal(hkt_count_lines(r.out, "pack/copy"), 1);
  long long copy_gbs;
  assert_int_equal(sum_column(r.out, "copy(GB/s)", &copy_gbs), 2); /* 1, 4 M */
  hkt_result_free(&r);
  char *bad[] = {HKBENCH_PATH, "--kernels", NULL};
  assert_int_equal(hkt_run(bad, env, 30, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "--kernels needs --device gpu"));
  hkt_result_free(&r);
}

/* Every dtype x op at np=3, with raw(us): the serial check is exact. */
static void test_all_types_ops_raw(void **s) {
  (void)s;
  char csv[96];
  assert_int_equal(hkt_mkstemp("test_hkbench_", csv, sizeof csv), 0);
  char *argv[] = {HKRUN_PATH, "-np",   "3",  HKBENCH_PATH, "-b", "8",
                  "-e",       "4K",    "-f", "8",          "-n", "1",
                  "-w",       "0",     "-d", "all",        "-o", "all",
                  "--raw",    "--csv", csv,  NULL};
  hkt_result r;
  run_ok(argv, 120, &r);
  long long wrong, raw_us;
  /* 9 types (every dtype but bool) x 5 ops x sizes 8, 64, 512, 4096 B */
  assert_int_equal(sum_column(r.out, "#wrong", &wrong), 180);
  assert_int_equal(wrong, 0);
  assert_int_equal(sum_column(r.out, "raw(us)", &raw_us), 180);
  assert_int_equal(hkt_count_lines(r.out, " bfloat16   prod "), 4);
  assert_int_equal(hkt_count_lines(r.out, "    int16   prod "), 4);
  assert_int_equal(hkt_count_lines(r.out, " bool "), 0);
  FILE *f = fopen(csv, "r");
  assert_non_null(f);
  char line[512];
  int lines = 0;
  assert_non_null(fgets(line, sizeof line, f));
  assert_non_null(strstr(line, "size_bytes,count,type,redop,time_us"));
  while (fgets(line, sizeof line, f))
    lines++;
  fclose(f);
  unlink(csv);
  assert_int_equal(lines, 180);
  hkt_result_free(&r);
}

/* A model replay prints its ratio line with the model's totals. */
static void test_model(void **s) {
  (void)s;
  char *argv[] = {
      HKRUN_PATH, "-np", "2",  HKBENCH_PATH, "--model", "mobilenet_v2",
      "-n",       "2",   "-w", "1",          NULL};
  hkt_result r;
  run_ok(argv, 120, &r);
  if (hkt_count_lines(r.out, "mobilenet_v2: 158 tensors, 3504872 params, "
                             "14019488 bytes, step ") != 1 ||
      hkt_count_lines(r.out, ", ratio ") != 1)
    fail_msg("no ratio line in:\n%s", r.out);
  /* the step and fused rows: their last column, #wrong, is 0 */
  assert_string_equal(last_token(r.out, "step"), "0");
  assert_string_equal(last_token(r.out, "fused"), "0");
  hkt_result_free(&r);
}

/* --compute-ms 400: a synthetic backward pass of 400 ms a step, so no
 * step (the max over ranks) is shorter, whatever the exchange, and the
 * median step is at least 400 ms; the results are still right. */
static void test_model_compute(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH,     "-np", "2", HKBENCH_PATH, "--model",
                  "mobilenet_v2", "-n",  "2", "-w",         "0",
                  "--compute-ms", "400", NULL};
  hkt_result r;
  run_ok(argv, 120, &r);
  const char *row = strstr(r.out, " step ");
  double med = 0, min = 0;
  if (!row || sscanf(row, " step %lf %lf", &med, &min) != 2)
    fail_msg("no step row in:\n%s", r.out);
  if (!(min >= 400.0 && med >= 400.0))
    fail_msg("steps of %.2f (median) and %.2f ms (min) with a 400 ms "
             "backward pass:\n%s",
             med, min, r.out);
  assert_string_equal(last_token(r.out, "step"), "0");
  hkt_result_free(&r);
}

/* --steps-only: the replay's steps and nothing between them (the job's
 * timeline has its tensors and no "hkbench.fused"); no fused row, and
 * the summary says so; without --model it is refused. */
static void test_model_steps_only(void **s) {
  (void)s;
  char path[256], env_tl[300];
  assert_int_equal(hkt_mkstemp("test_hkbench_tl_", path, sizeof path), 0);
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", path);
  char *env[] = {env_tl, NULL};
  char *argv[] = {HKRUN_PATH,     "-np", "2", HKBENCH_PATH, "--model",
                  "mobilenet_v2", "-n",  "2", "-w",         "1",
                  "--steps-only", NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 120, &r);
  /* the timeline is read and removed before any check can fail */
  int tensors = 0, fused = 0;
  FILE *f = fopen(path, "r");
  char line[4096];
  while (f && fgets(line, sizeof line, f)) {
    tensors += strstr(line, "ALLREDUCE") != NULL;
    fused += strstr(line, "hkbench.fused") != NULL;
  }
  if (f)
    fclose(f);
  unlink(path);
  if (rc != 0 || r.exit_code != 0)
    fail_msg("rc=%d exit=%d\nstdout:\n%.4000s\nstderr:\n%.4000s", rc,
             r.exit_code, r.out, r.err);
  if (hkt_count_lines(r.out, "mobilenet_v2: 158 tensors, 3504872 params, "
                             "14019488 bytes, step ") != 1 ||
      hkt_count_lines(r.out, "no fused buffer (--steps-only)") != 1 ||
      last_token(r.out, "fused")[0] != '\0')
    fail_msg("want the step row and summary alone:\n%s", r.out);
  assert_string_equal(last_token(r.out, "step"), "0");
  if (tensors == 0 || fused != 0)
    fail_msg("timeline: %d ALLREDUCE lines, %d of hkbench.fused (want 0)",
             tensors, fused);
  hkt_result_free(&r);
  char *alone[] = {HKBENCH_PATH, "--steps-only", NULL};
  assert_int_equal(hkt_run(alone, NULL, 30, &r), 0);
  assert_int_equal(r.exit_code, 2);
  if (!strstr(r.err, "hkbench: --steps-only needs --model"))
    fail_msg("expected the refusal in:\n%s", r.err);
  hkt_result_free(&r);
}

static void test_model_list(void **s) {
  (void)s;
  char *argv[] = {HKBENCH_PATH, "--model", "list", NULL};
  hkt_result r;
  run_ok(argv, 30, &r);
  assert_int_equal(hkt_count_lines(r.out, "resnet50 "), 1);
  assert_int_equal(hkt_count_lines(r.out, " 25557032 "), 1);
  hkt_result_free(&r);
}

/* A malformed model file: exit status 2, the file and line named. */
static void test_model_malformed(void **s) {
  (void)s;
  char path[96];
  assert_int_equal(hkt_mkstemp("test_hkbench_", path, sizeof path), 0);
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  const char text[] = "# a model\nfc.weight\t10x512\nfc.bias\t10x\n";
  assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)sizeof text - 1);
  close(fd);
  char *argv[] = {HKBENCH_PATH, "--model", path, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 30, &r), 0);
  unlink(path);
  assert_int_equal(r.exit_code, 2);
  char want[160];
  snprintf(want, sizeof want, "%s:3: tensor 'fc.bias': bad shape '10x'", path);
  if (!strstr(r.err, want))
    fail_msg("expected '%s' in:\n%s", want, r.err);
  hkt_result_free(&r);
}

/* hkbench sweeps allreduces: -d takes every dtype hk reduces (int16
 * among them), not bool, which is refused with status 2. */
static void test_bool_refused(void **s) {
  (void)s;
  char *argv[] = {HKBENCH_PATH, "-d", "bool", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 30, &r), 0);
  assert_int_equal(r.exit_code, 2);
  if (!strstr(r.err, "bad value 'bool' for -d"))
    fail_msg("expected the refusal of -d bool in:\n%s", r.err);
  hkt_result_free(&r);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweep),
      cmocka_unit_test(test_all_types_ops_raw),
      cmocka_unit_test(test_device_sweep_and_kernels),
      cmocka_unit_test(test_model),
      cmocka_unit_test(test_model_compute),
      cmocka_unit_test(test_model_steps_only),
      cmocka_unit_test(test_model_list),
      cmocka_unit_test(test_model_malformed),
      cmocka_unit_test(test_bool_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
