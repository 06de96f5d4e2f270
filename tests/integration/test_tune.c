/*
 * test_tune - hkrun --autotune end to end (worker/tune.h), on w_tune: a
 * job whose best setting is known. HK_TEST_TUNE_GROUP_COST_S adds 1 s of
 * step time per fused group that rank 0 runs (no time passes: the score
 * is deterministic however loaded the machine), so a step of 32 tensors
 * of 64 KiB costs 32 s with no fusion, 2 s at 1 MiB and 1 s from 2 MiB
 * up: the search must choose 2 MiB (4 MiB and up make the same one batch
 * of a step's 2 MiB, so they are not tried) and leave the cycle time at
 * 0.
 *  - convergence: the CSV's trials, the final line, the timeline's marks;
 *  - every rank switches at the same round (their debug lines) and the
 *    results are the same bits on every rank; on two "hosts" the
 *    hierarchical allreduce is searched too, and device tensors are
 *    staged with each trial's chunk and compression (the emu's copies);
 *  - a noisy score (HK_TEST_TUNE_JITTER) does not flip-flop;
 *  - bad flag values and a bad saved file are refused, naming them;
 *  - --autotune-save, then --autotune-load starts from the saved setting;
 *  - an elastic job's next generation starts from the job's own setting.
 */
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

#ifndef W_SETS
#error "W_SETS must name the w_sets worker"
#endif
#ifndef W_TUNE
#error "W_TUNE must name the w_tune worker"
#endif

#define SLOW_S 120.0

static void dump(const hkt_result *r) {
  fprintf(stderr,
          "--- exit %d signal %d timed_out %d\n--- stdout:\n%.4000s\n"
          "--- stderr (last 6000 bytes):\n%s\n",
          r->exit_code, r->signal, r->timed_out, r->out,
          r->err_len > 6000 ? r->err + r->err_len - 6000 : r->err);
}

static void run_expect(char *const *argv, char *const *env, int code,
                       hkt_result *r) {
  hkt_run(argv, env, SLOW_S, r);
  if (!r->exited || r->exit_code != code) {
    dump(r);
    fail_msg("hkrun exited %d, expected %d", r->exit_code, code);
  }
}

/* The whole file (malloc'd; the caller frees it), or NULL. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap + 1);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *b = realloc(buf, 2 * cap + 1);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf)
    buf[n] = '\0';
  return buf;
}

static char *const cost_env[] = {"HK_TEST_TUNE_GROUP_COST_S=1", NULL};

/* The ranks printed the same hash of every result. */
static void same_hash(const hkt_result *r, int np) {
  const char *h0 = strstr(r->out, "[0] hash ");
  assert_non_null(h0);
  char want[40];
  snprintf(want, sizeof want, "%.21s", h0 + 4);
  for (int k = 1; k < np; k++) {
    char line[48];
    snprintf(line, sizeof line, "[%d] %s", k, want);
    if (!strstr(r->out, line)) {
      dump(r);
      fail_msg("rank %d's results differ from rank 0's (%s)", k, want);
    }
  }
}

static void test_converges_to_known_best(void **state) {
  (void)state;
  char dir[256], csv[320], tl[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/trials.csv", dir);
  snprintf(tl, sizeof tl, "%s/timeline.json", dir);
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--autotune-log-file",
                  csv,
                  "--timeline-filename",
                  tl,
                  "--log-level",
                  "info",
                  W_TUNE,
                  "200",
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  same_hash(&r, 2);
  /* a step's 32 tensors hold 2 MiB, so the threshold ladder ends at 2
   * MiB (4 to 128 MiB make the same one batch); baseline (no fusion),
   * 1 MiB, 2 MiB kept, each after a trial that measured the best again
   * (0, then 1 MiB: kept as the best with its fresher score) and one
   * that measured the candidate again (kept); the cycle ladder at 2 MiB
   * (0.5 to 10 ms) no faster: 12 trials of 5 samples of 2 steps after 1
   * warm-up step */
  assert_non_null(strstr(r.err, "[0] hk[0] info: autotune: a step's "
                                "allreduces hold 2097152 bytes: fusion "
                                "thresholds from 2 MiB make the same "
                                "batches, so the search tries none above "
                                "it\n"));
  assert_non_null(strstr(r.err, "[0] hk[0] warning: autotune: chose fusion "
                                "threshold 2 MiB, cycle time 0 ms, "
                                "hierarchical auto after 12 trials (132 "
                                "steps): "));
  char *c = read_text(csv);
  assert_non_null(c);
  static const char header[] =
      "trial,fusion_threshold_bytes,cycle_time_ms,hierarchical,sockets_per_"
      "peer,staging_chunk_bytes,compression,score_ms_per_step,uncertainty,"
      "samples,steps,kept\n0,0,0,auto,1,4194304,none,";
  const char *rows[] = {header,
                        "\n1,1048576,0,auto,1,4194304,none,",
                        "\n2,0,0,auto,1,4194304,none,",
                        "\n3,1048576,0,auto,1,4194304,none,",
                        "\n4,2097152,0,auto,1,4194304,none,",
                        "\n5,1048576,0,auto,1,4194304,none,",
                        "\n6,2097152,0,auto,1,4194304,none,",
                        "\n7,2097152,0.5,auto,1,4194304,none,",
                        "\n11,2097152,10,auto,1,4194304,none,"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (!strstr(c, rows[i]))
      fail_msg("'%s' not in the trials:\n%s", rows[i], c);
  /* kept: 0, 2, 3, 5, 6 */
  assert_int_equal(hkt_count_lines(c, ",5,11,1"), 5);
  assert_int_equal(hkt_count_lines(c, ",5,11,0"), 7);
  assert_int_equal(hkt_count_lines(c, ",4194304,none,"), 12);
  char *t = read_text(tl);
  assert_non_null(t);
  assert_non_null(strstr(t, "\"name\":\"AUTOTUNE setting 4: fusion "
                            "threshold 2 MiB, cycle time 0 ms, "
                            "hierarchical auto\""));
  assert_int_equal(hkt_count_lines(t, "AUTOTUNE setting"), 12);
  free(c);
  free(t);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* A step's allreduces hold 2 MiB, also with a barrier that ends each
 * step (never fused): the threshold ladder ends at 2 MiB, 12 trials as
 * in test_converges_to_known_best. An allgather in each step is fused by
 * the threshold too, so its step keeps the whole ladder (9 rungs: 18
 * trials, as before the step's size was known). */
static void test_step_bytes_with_other_collectives(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--log-level",
                  "info",
                  W_TUNE,
                  "200",
                  "barrier",
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  same_hash(&r, 2);
  if (!strstr(r.err, "autotune: a step's allreduces hold 2097152 bytes") ||
      !strstr(r.err, "hierarchical auto after 12 trials (132 steps)")) {
    dump(&r);
    fail_msg("a barrier in each step: expected the 2 MiB ladder");
  }
  hkt_result_free(&r);
  argv[14] = "gather";
  run_expect(argv, cost_env, 0, &r);
  same_hash(&r, 2);
  if (strstr(r.err, "a step's allreduces hold") ||
      !strstr(r.err, "hierarchical auto after 18 trials (198 steps)")) {
    dump(&r);
    fail_msg("an allgather in each step: expected the whole ladder");
  }
  hkt_result_free(&r);
}

/* Every rank's debug lines "autotune: rank R applies setting N (...) at
 * world round W": the same W for every N on each of the np ranks, W
 * growing with N. Returns how many settings rank 0 applied. */
static int same_rounds(const hkt_result *r, int np) {
  enum { MAXNP = 8, MAXS = 64 };
  long round[MAXNP][MAXS];
  int count[MAXNP] = {0};
  memset(round, 0, sizeof round);
  for (const char *p = r->err; (p = strstr(p, "autotune: rank ")); p++) {
    int rank;
    unsigned seq;
    long w;
    const char *at = strstr(p, " at world round ");
    if (sscanf(p, "autotune: rank %d applies setting %u", &rank, &seq) != 2 ||
        !at || sscanf(at, " at world round %ld", &w) != 1)
      continue;
    assert_true(rank >= 0 && rank < np && seq >= 1 && seq <= MAXS);
    round[rank][seq - 1] = w;
    count[rank]++;
  }
  for (int k = 1; k < np; k++) {
    assert_int_equal(count[k], count[0]);
    for (int s = 0; s < count[0]; s++)
      if (round[k][s] != round[0][s])
        fail_msg("setting %d: rank %d switched at round %ld, rank 0 at %ld",
                 s + 1, k, round[k][s], round[0][s]);
  }
  for (int s = 1; s < count[0]; s++)
    assert_true(round[0][s] > round[0][s - 1]);
  return count[0];
}

/* Every rank logs the world round at which it applied each setting: the
 * same on every rank, for every setting. */
static void test_all_ranks_switch_at_same_round(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "3",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--log-level",
                  "debug",
                  W_TUNE,
                  "200",
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  same_hash(&r, 3);
  int n = same_rounds(&r, 3);
  if (n != 12)
    dump(&r);
  assert_int_equal(n, 12);
  hkt_result_free(&r);
}

/* Two "hosts" of two ranks (HK_LOCAL_SIZE=2 on one machine): the
 * hierarchical allreduce applies, so the search tries it on and off
 * (both are as fast here: neither is kept over auto); the four ranks
 * switch at the same rounds, schedule changes included, and every sum
 * is exact (w_tune checks) and the same on every rank. */
static void test_hierarchical_searched_where_it_applies(void **state) {
  (void)state;
  char dir[256], csv[320], cmd[1024];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/trials.csv", dir);
  hkt_hosts_cmd(cmd, sizeof cmd, 2, W_TUNE, "300");
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "4",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--autotune-log-file",
                  csv,
                  "--log-level",
                  "debug",
                  "sh",
                  "-c",
                  cmd,
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  same_hash(&r, 4);
  assert_non_null(strstr(r.err, "hierarchical auto (searched)"));
  assert_true(same_rounds(&r, 4) >= 3);
  for (int k = 0; k < 4; k++) {
    char want[96];
    snprintf(want, sizeof want, "[%d] hk[%d] debug: autotune: rank %d applies",
             k, k, k);
    assert_true(hkt_count_lines(r.err, want) >= 3);
  }
  assert_true(hkt_count_lines(r.err,
                              "cycle time 0 ms, hierarchical 1, "
                              "sockets per peer 1) at world round") == 4);
  assert_true(hkt_count_lines(r.err,
                              "cycle time 0 ms, hierarchical 0, "
                              "sockets per peer 1) at world round") == 4);
  /* the links across the two hosts opened HK_AUTOTUNE_SOCKETS (4): the
   * sockets per peer are tried too, every rank switching its links at
   * the same round (a stream read with the wrong stripes would garble
   * the sums, or hang) */
  assert_non_null(strstr(r.err, "hierarchical auto (searched), sockets per "
                                "peer 1 (searched up to 4); "));
  assert_true(hkt_count_lines(r.err, "hierarchical auto, sockets per peer "
                                     "2) at world round") == 4);
  assert_true(hkt_count_lines(r.err, "hierarchical auto, sockets per peer "
                                     "4) at world round") == 4);
  assert_true(hkt_count_lines(r.err,
                              "data links: 3 over TCP (1 sockets "
                              "each, 4 open for --autotune to try)") == 4);
  char *c = read_text(csv);
  assert_non_null(c);
  /* the fourth field: auto, then 1 (not kept), then 0 (not kept) */
  int on = 0, off = 0;
  for (const char *row = strchr(c, '\n'); row && row[1];
       row = strchr(row + 1, '\n')) {
    const char *f = row + 1;
    for (int k = 0; k < 3 && f; k++)
      f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL;
    assert_non_null(f);
    const char *end = strchr(row + 1, '\n');
    const int kept = end && end[-1] == '1';
    if (strncmp(f, "1,", 2) == 0) {
      on++;
      assert_false(kept);
    } else if (strncmp(f, "0,", 2) == 0) {
      off++;
      assert_false(kept);
    } else if (strncmp(f, "auto,", 5) != 0) {
      fail_msg("a row's hierarchical field is not auto, 0 or 1:\n%s", c);
    }
  }
  if (on != 1 || off != 1)
    fail_msg("expected one trial with hierarchical 1 and one with 0:\n%s", c);
  /* the fifth field: one trial with 2 sockets and one with 4, neither
   * faster (the score is the fused groups') */
  if (hkt_count_lines(c, ",auto,2,") != 1 ||
      hkt_count_lines(c, ",auto,4,") != 1 ||
      !strstr(c, "\n0,0,0,auto,1,4194304,none,"))
    fail_msg("expected one trial each with 2 and 4 sockets:\n%s", c);
  free(c);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* --autotune-compression with a device backend (the emulated one): the
 * search tries fp16 and bf16 too, every rank applying each at the same
 * round, and says so; neither is faster here (the score is the fused
 * groups'), so the job keeps none. Without a device backend it is not
 * searched, and a warning says why. */
static void test_compression_searched_where_allowed(void **state) {
  (void)state;
  char dir[256], csv[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/trials.csv", dir);
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "2",
                  "--autotune",
                  "--autotune-compression",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--autotune-log-file",
                  csv,
                  "--log-level",
                  "debug",
                  W_TUNE,
                  "300",
                  NULL};
  char *env[] = {"HK_TEST_TUNE_GROUP_COST_S=1", "HK_DEVICE=emu", NULL};
  hkt_result r;
  run_expect(argv, env, 0, &r);
  same_hash(&r, 2);
  assert_non_null(strstr(r.err, ", compression none (searched); "));
  assert_non_null(strstr(r.err, "[0] hk[0] warning: autotune: kept the "
                                "starting setting (fusion threshold 2 MiB, "
                                "cycle time 0 ms, hierarchical auto, "
                                "compression none) after "));
  assert_null(strstr(r.err, "less time per step"));
  assert_int_equal(
      hkt_count_lines(r.err, "hierarchical auto, compression fp16) at world "
                             "round"),
      2);
  assert_int_equal(
      hkt_count_lines(r.err, "hierarchical auto, compression bf16) at world "
                             "round"),
      2);
  char *c = read_text(csv);
  assert_non_null(c);
  if (hkt_count_lines(c, ",4194304,fp16,") != 1 ||
      hkt_count_lines(c, ",4194304,bf16,") != 1)
    fail_msg("expected one trial each with fp16 and bf16:\n%s", c);
  free(c);
  hkt_result_free(&r);
  char *none[] = {"HK_TEST_TUNE_GROUP_COST_S=1", "HK_DEVICE=none", NULL};
  argv[16] = "30";
  run_expect(argv, none, 0, &r);
  assert_non_null(strstr(r.err, "autotune: --autotune-compression: no device "
                                "backend here, and compression applies to "
                                "device tensors only: not searched"));
  assert_null(strstr(r.err, "compression fp16"));
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* Rank k's "staged from step S: C copies, B bytes" lines (w_tune dev), at
 * most max: steps[i] and what[i] ("C copies, B bytes"). Returns the count. */
static int staged_lines(const hkt_result *r, int k, int max, long *steps,
                        char (*what)[40]) {
  char head[32];
  int n = 0;
  snprintf(head, sizeof head, "[%d] staged from step ", k);
  for (const char *p = r->out; (p = strstr(p, head)) && n < max; p++) {
    int len = 0;
    if (sscanf(p + strlen(head), "%ld: %n", &steps[n], &len) != 1 || !len)
      continue;
    const char *v = p + strlen(head) + len, *nl = strchr(v, '\n');
    snprintf(what[n], sizeof what[n], "%.*s",
             (int)(nl ? (size_t)(nl - v) : strlen(v)), v);
    n++;
  }
  return n;
}

/* The steps column of the one trial whose row holds key, or -1. */
static long trial_steps(const char *csv, const char *key) {
  if (hkt_count_lines(csv, key) != 1)
    return -1;
  const char *row = strstr(csv, key);
  while (row > csv && row[-1] != '\n')
    row--;
  const char *f = row;
  for (int col = 0; col < 10 && f; col++) /* to the 11th field: steps */
    if ((f = strchr(f, ',')))
      f++;
  return f ? strtol(f, NULL, 10) : -1;
}

/* Device tensors across two "hosts" (one rank each) on the emulated
 * device: the search tries the staging chunk and compression, and each
 * trial's device batches are staged with it, on every rank from the same
 * step. w_tune counts the copies to host memory each step's fused 2 MiB
 * batch makes (2 segments, each chunk one copy per segment): the 4 MiB
 * and 2 MiB chunks take 1 chunk (2 copies), 1 MiB 2 chunks (4 copies),
 * 512 KiB 4 (8 copies); fp16 and bf16 halve the bytes (the 4 MiB chunk
 * again). Each of these lasts as many steps as the CSV says its trial
 * ran, and the job ends with the start's setting (none was faster). */
static void test_device_batches_use_tuned_staging(void **state) {
  (void)state;
  char dir[256], csv[320], cmd[1024];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/trials.csv", dir);
  hkt_hosts_cmd(cmd, sizeof cmd, 1, W_TUNE, "300 dev");
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "2",
                  "--autotune",
                  "--autotune-compression",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--autotune-log-file",
                  csv,
                  "--log-level",
                  "debug",
                  "sh",
                  "-c",
                  cmd,
                  NULL};
  char *env[] = {"HK_TEST_TUNE_GROUP_COST_S=1", "HK_DEVICE=emu", NULL};
  hkt_result r;
  run_expect(argv, env, 0, &r);
  same_hash(&r, 2);
  assert_non_null(strstr(r.err, ", staging chunk 4 MiB (searched), "
                                "compression none (searched); "));
  enum { MAXL = 32 };
  long steps[2][MAXL];
  char what[2][MAXL][40];
  const int n = staged_lines(&r, 0, MAXL, steps[0], what[0]);
  assert_int_equal(staged_lines(&r, 1, MAXL, steps[1], what[1]), n);
  for (int i = 0; i < n; i++)
    if (steps[1][i] != steps[0][i] || strcmp(what[1][i], what[0][i]))
      fail_msg("rank 1 staged %s from step %ld, rank 0 %s from step %ld",
               what[1][i], steps[1][i], what[0][i], steps[0][i]);
  int at = -1;
  for (int i = 0; i < n; i++)
    if (!strcmp(what[0][i], "8 copies, 2097152 bytes"))
      at = at < 0 ? i : -2;
  if (at < 1 || at + 3 != n ||
      strcmp(what[0][at - 1], "4 copies, 2097152 bytes") ||
      strcmp(what[0][at + 1], "2 copies, 1048576 bytes") ||
      strcmp(what[0][at + 2], "2 copies, 2097152 bytes")) {
    dump(&r);
    fail_msg("expected 1 MiB, 512 KiB chunks, fp16/bf16, then the start");
  }
  char *c = read_text(csv);
  assert_non_null(c);
  const long mib = trial_steps(c, ",1048576,none,"),
             half = trial_steps(c, ",524288,none,"),
             fp16 = trial_steps(c, ",4194304,fp16,"),
             bf16 = trial_steps(c, ",4194304,bf16,");
  if (mib < 1 || half < 1 || fp16 < 1 || bf16 < 1 ||
      steps[0][at] - steps[0][at - 1] != mib ||
      steps[0][at + 1] - steps[0][at] != half ||
      steps[0][at + 2] - steps[0][at + 1] != fp16 + bf16) {
    dump(&r);
    fail_msg("the staged steps do not match the trials' steps:\n%s", c);
  }
  free(c);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* 10 % jitter on every step: a trial whose spread stays over 2 % spends
 * its budget of samples, the cycle times are as fast as 0 ms give or
 * take the noise and are not kept, and the result is still 2 MiB, with
 * one change per trial at most. */
static void test_noisy_score_does_not_flip_flop(void **state) {
  (void)state;
  char dir[256], csv[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/trials.csv", dir);
  char *env[] = {"HK_TEST_TUNE_GROUP_COST_S=1", "HK_TEST_TUNE_JITTER=0.1",
                 "HK_AUTOTUNE_MAX_SAMPLES=6", NULL};
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--autotune-log-file",
                  csv,
                  "--log-level",
                  "debug",
                  W_TUNE,
                  "250",
                  NULL};
  hkt_result r;
  run_expect(argv, env, 0, &r);
  same_hash(&r, 2);
  if (!strstr(r.err, "autotune: chose fusion threshold 2 MiB, cycle time 0 "
                     "ms, hierarchical auto after ")) {
    dump(&r);
    fail_msg("the search did not end on 2 MiB, 0 ms");
  }
  char *c = read_text(csv);
  assert_non_null(c);
  /* a trial ends early only once its uncertainty is under 2 %; with 10 %
   * jitter most spend their budget of 6 samples */
  int trials = hkt_count_lines(c, ",") - 1, spent = 0;
  for (const char *row = strchr(c, '\n'); row && row[1];
       row = strchr(row + 1, '\n')) {
    int no, sockets, samples, steps, kept;
    unsigned long long thr, chunk;
    double cyc, score, spread;
    char hier[8], comp[8];
    if (sscanf(row + 1, "%d,%llu,%lf,%7[^,],%d,%llu,%7[^,],%lf,%lf,%d,%d,%d",
               &no, &thr, &cyc, hier, &sockets, &chunk, comp, &score, &spread,
               &samples, &steps, &kept) != 12)
      fail_msg("a malformed row:\n%s", c);
    if (spread > 0.02)
      assert_int_equal(samples, 6);
    spent += samples == 6;
  }
  assert_true(spent >= 3);
  assert_true(trials <= 30); /* the default budget */
  /* once 2 MiB was kept, no other setting was: a later row with kept 1
   * is 2 MiB measured again (a confirming trial whose best stayed) */
  int two_kept = 0;
  for (const char *row = strchr(c, '\n'); row && row[1];
       row = strchr(row + 1, '\n')) {
    int no, sockets, samples, steps, kept;
    unsigned long long thr, chunk;
    double cyc, score, u;
    char hier[8], comp[8];
    assert_int_equal(
        sscanf(row + 1, "%d,%llu,%lf,%7[^,],%d,%llu,%7[^,],%lf,%lf,%d,%d,%d",
               &no, &thr, &cyc, hier, &sockets, &chunk, comp, &score, &u,
               &samples, &steps, &kept),
        12);
    const int is_two = thr == 2097152 && cyc == 0;
    if (two_kept && kept && !is_two)
      fail_msg("a trial after 2 MiB was kept:\n%s", c);
    two_kept |= is_two && kept;
  }
  assert_true(two_kept);
  int changes = hkt_count_lines(r.err, "hk[0] debug: autotune: rank 0 applies");
  assert_true(changes >= 3 && changes <= trials);
  free(c);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* A job too short for one trial, and one whose tensors never come back
 * (a single step): each says why nothing was tuned, and saves nothing;
 * one that ends mid-search reports and saves its best so far. */
static void test_short_jobs_say_why(void **state) {
  (void)state;
  char dir[256], saved[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(saved, sizeof saved, "%s/tuned.env", dir);
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-save",
                  saved,
                  W_TUNE,
                  "6",
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  /* defaults: 3 warm-up steps and 5 samples of 5; 6 steps give 4 */
  assert_non_null(strstr(r.err, "[0] hk[0] warning: autotune: the job ended "
                                "after 4 measured steps, before the first "
                                "trial did (it takes at least 28: "));
  hkt_result_free(&r);
  argv[9] = "1";
  run_expect(argv, cost_env, 0, &r);
  assert_non_null(strstr(r.err, "[0] hk[0] warning: autotune: no training "
                                "step found"));
  hkt_result_free(&r);
  assert_null(read_text(saved));
  argv[9] = "40"; /* 38 steps: trial 0 (28) and part of trial 1 */
  run_expect(argv, cost_env, 0, &r);
  assert_non_null(strstr(r.err, "[0] hk[0] warning: autotune: the search "
                                "stopped before its end (the job ended or "
                                "re-formed); best so far: the starting "
                                "setting (fusion threshold 0 MiB, cycle "
                                "time 0 ms, hierarchical auto) after 1 "
                                "trials"));
  hkt_result_free(&r);
  char *s = read_text(saved);
  assert_non_null(s);
  assert_non_null(strstr(s, "\nHK_FUSION_THRESHOLD=0\n"));
  free(s);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* A job whose collectives all run on process sets of its own (w_sets:
 * three sets, none the world) is not tuned, and is told why. */
static void test_other_sets_say_so(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH, "-np",         "3",  "--autotune",
                  W_SETS,     "collectives", "40", NULL};
  hkt_result r;
  run_expect(argv, NULL, 0, &r);
  if (!strstr(r.err, "[0] hk[0] warning: autotune: no training step found: "
                     "autotune tunes the global process set's rounds; this "
                     "job's collectives ran on process set 1 and others: "
                     "nothing was tuned\n")) {
    dump(&r);
    fail_msg("no word of the process sets");
  }
  assert_null(strstr(r.err, "no tensor of a round came back"));
  hkt_result_free(&r);
}

/* An elastic job (--min-np) that loses a rank in the middle of a trial
 * of 1 MiB: the survivors re-form with the job's own setting (0 MiB,
 * whatever trial each had switched to) and the new rank 0 searches again
 * from it; the sums stay exact and the same on both survivors. */
static void test_elastic_reform_restarts_from_own_setting(void **state) {
  (void)state;
  char dir[256], csv[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(csv, sizeof csv, "%s/tune.csv", dir);
  char *argv[] = {HKRUN_PATH,
                  "--autotune-log-file",
                  csv,
                  "-np",
                  "3",
                  "--min-np",
                  "2",
                  "--fusion-threshold-mb",
                  "0",
                  "--autotune",
                  "--autotune-warmup-samples",
                  "1",
                  "--autotune-steps-per-sample",
                  "2",
                  "--log-level",
                  "info",
                  W_TUNE,
                  "40",
                  "2",
                  "18",
                  NULL};
  hkt_result r;
  run_expect(argv, cost_env, 0, &r);
  assert_non_null(strstr(r.out, "[2] dying at step 18"));
  assert_non_null(strstr(r.out, "[0] reset: rank 0 of 2"));
  assert_non_null(strstr(r.out, "[1] reset: rank 1 of 2"));
  same_hash(&r, 2);
  /* trial 1 (1 MiB) was running when rank 2 died: it never ended */
  const char *re = strstr(r.err, "re-formed (generation 1)");
  assert_non_null(re);
  const char *t0 = strstr(r.err, "autotune: trial 0: fusion threshold 0 MiB");
  const char *t1 = strstr(r.err, "autotune: trial 1: ");
  assert_true(t0 && t0 < re);
  assert_true(!t1 || t1 > re);
  if (hkt_count_lines(re, "[0] hk[0] info: autotune: starting from fusion "
                          "threshold 0 MiB, cycle time 0 ms") != 1) {
    dump(&r);
    fail_msg("the new generation's search did not start from 0 MiB");
  }
  hkt_result_free(&r);
  /* the CSV keeps the first generation's rows, then the second's */
  char *c = read_text(csv);
  assert_non_null(c);
  const char *g1 = strstr(c, "\n# generation 1: the job re-formed with 2 "
                             "ranks; the search starts again\n");
  const char *r0 = strstr(c, "\n0,0,0,auto,");
  if (!g1 || !r0 || r0 > g1 || !strstr(g1, "\n0,0,0,auto,") ||
      strncmp(c, "trial,", 6) != 0) {
    fprintf(stderr, "--- %s:\n%s\n", csv, c);
    hkt_remove_tree(dir);
    fail_msg("the CSV lost a generation's rows");
  }
  free(c);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

static void test_bad_values_refused(void **state) {
  (void)state;
  hkt_result r;
  char *steps[] = {
      HKRUN_PATH, "-np",  "2", "--autotune", "--autotune-steps-per-sample",
      "0",        W_TUNE, NULL};
  run_expect(steps, NULL, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: --autotune-steps-per-sample: '0' is "
                                "not a whole number from 1 to 10000\n"));
  hkt_result_free(&r);
  char *log[] = {HKRUN_PATH, "-np",  "2", "--autotune-log-file",
                 "x.csv",    W_TUNE, NULL};
  run_expect(log, NULL, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: --autotune-log-file needs "
                                "--autotune\n"));
  hkt_result_free(&r);
  /* a variable out of its range: every rank fails at hk_init, naming it */
  char *spread[] = {HKRUN_PATH,   "-np", "2",
                    "--autotune", "-x",  "HK_AUTOTUNE_SPREAD=5",
                    W_TUNE,       "2",   NULL};
  hkt_run(spread, NULL, SLOW_S, &r);
  assert_true(r.exited && r.exit_code != 0);
  assert_non_null(strstr(r.err, "HK_AUTOTUNE_SPREAD"));
  assert_non_null(strstr(r.err, "HK_AUTOTUNE_SPREAD=5 is out of range "
                                "[0.001, 1]"));
  hkt_result_free(&r);
  /* a saved file with a setting it never saves, and a missing one */
  char path[256];
  assert_int_equal(hkt_mkstemp("hk-tune-load.", path, sizeof path), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("# saved\nHK_FUSION_THRESHOLD=2097152\nHK_RING_CHUNK_BYTES=4096\n", f);
  fclose(f);
  char *load[] = {HKRUN_PATH, "-np",  "2", "--autotune-load",
                  path,       W_TUNE, NULL};
  run_expect(load, NULL, 2, &r);
  char want[512];
  snprintf(want, sizeof want,
           "hkrun: --autotune-load: '%s' line 3: 'HK_RING_CHUNK_BYTES' is "
           "not a setting --autotune saves (HK_FUSION_THRESHOLD, "
           "HK_CYCLE_TIME_MS, HK_HIERARCHICAL_ALLREDUCE, HK_SOCKETS_PER_PEER, "
           "HK_STAGING_CHUNK_BYTES, HK_COMPRESSION)\n",
           path);
  assert_non_null(strstr(r.err, want));
  hkt_result_free(&r);
  f = fopen(path, "w");
  assert_non_null(f);
  fputs("HK_CYCLE_TIME_MS=soon\n", f);
  fclose(f);
  run_expect(load, NULL, 2, &r);
  snprintf(want, sizeof want, "hkrun: --autotune-load: '%s' line 1: ", path);
  assert_non_null(strstr(r.err, want));
  assert_non_null(strstr(r.err, "HK_CYCLE_TIME_MS"));
  assert_non_null(strstr(r.err, "'soon'"));
  hkt_result_free(&r);
  assert_int_equal(unlink(path), 0);
  char *missing[] = {HKRUN_PATH, "-np",  "2", "--autotune-load",
                     path,       W_TUNE, NULL};
  run_expect(missing, NULL, 2, &r);
  snprintf(want, sizeof want,
           "hkrun: --autotune-load: cannot read '%s': No such file or "
           "directory\n",
           path);
  assert_non_null(strstr(r.err, want));
  hkt_result_free(&r);
}

/* --autotune-load FILE holding `len` bytes of `text` fails hkrun (exit
 * 2) with "hkrun: --autotune-load: 'FILE'" followed by `want`. */
static void load_refused(const char *text, size_t len, const char *want) {
  char path[256], line[1024];
  assert_int_equal(hkt_mkstemp("hk-tune-load.", path, sizeof path), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  fclose(f);
  char *argv[] = {HKRUN_PATH, "-np",  "1", "--autotune-load",
                  path,       W_TUNE, NULL};
  hkt_result r;
  hkt_run(argv, NULL, SLOW_S, &r);
  unlink(path);
  snprintf(line, sizeof line, "hkrun: --autotune-load: '%s'%s\n", path, want);
  if (!r.exited || r.exit_code != 2 || !strstr(r.err, line)) {
    dump(&r);
    fail_msg("expected exit 2 and: %s", line);
  }
  hkt_result_free(&r);
}

/* A saved file's lines are read whole (a long comment is one line), and
 * an empty value, a NUL byte or a directory is refused, naming the file
 * and the line. */
static void test_load_refusals(void **state) {
  (void)state;
  char text[700];
  int n = snprintf(text, sizeof text, "#");
  while (n < 600)
    n += snprintf(text + n, sizeof text - (size_t)n, " long comment");
  n += snprintf(text + n, sizeof text - (size_t)n, "\nHK_RING_CHUNK_BYTES=1\n");
  load_refused(text, (size_t)n,
               " line 2: 'HK_RING_CHUNK_BYTES' is not a setting --autotune "
               "saves (HK_FUSION_THRESHOLD, HK_CYCLE_TIME_MS, "
               "HK_HIERARCHICAL_ALLREDUCE, HK_SOCKETS_PER_PEER, "
               "HK_STAGING_CHUNK_BYTES, HK_COMPRESSION)");
  const char empty[] = "HK_CYCLE_TIME_MS=1\nHK_FUSION_THRESHOLD=\n";
  load_refused(empty, sizeof empty - 1,
               " line 2: HK_FUSION_THRESHOLD= has no value");
  const char nul[] = "HK_CYCLE_TIME_MS=1\nHK_FUSION_THRESHOLD=2\0x\n";
  load_refused(nul, sizeof nul - 1, " line 2: a NUL byte (not a text file?)");
  char dir[256], want[512];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  char *argv[] = {HKRUN_PATH, "-np", "1", "--autotune-load", dir, W_TUNE, NULL};
  hkt_result r;
  hkt_run(argv, NULL, SLOW_S, &r);
  assert_int_equal(hkt_remove_tree(dir), 0);
  snprintf(want, sizeof want,
           "hkrun: --autotune-load: cannot read '%s': Is a directory\n", dir);
  if (!r.exited || r.exit_code != 2 || !strstr(r.err, want)) {
    dump(&r);
    fail_msg("expected exit 2 and: %s", want);
  }
  hkt_result_free(&r);
}

/* What the user sets wins over --autotune-load's file: -x (before or
 * after it on the command line) and the environment hkrun starts in. */
static void test_load_loses_to_x_and_env(void **state) {
  (void)state;
  char path[256];
  assert_int_equal(hkt_mkstemp("hk-tune-load.", path, sizeof path), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("HK_FUSION_THRESHOLD=0\nHK_CYCLE_TIME_MS=5\n"
        "HK_HIERARCHICAL_ALLREDUCE=1\n",
        f);
  fclose(f);
  char *own_env[] = {"HK_CYCLE_TIME_MS=3", NULL};
  char *after[] = {HKRUN_PATH,
                   "-np",
                   "1",
                   "--autotune-load",
                   path,
                   "-x",
                   "HK_FUSION_THRESHOLD=999",
                   "env",
                   NULL};
  char *before[] = {
      HKRUN_PATH,        "-np", "1",   "-x", "HK_FUSION_THRESHOLD=999",
      "--autotune-load", path,  "env", NULL};
  char *shown[] = {HKRUN_PATH,        "-np", "1",   "-v",
                   "--autotune-load", path,  "env", NULL};
  char **both[] = {after, before};
  for (int k = 0; k < 2; k++) {
    hkt_result r;
    run_expect(both[k], own_env, 0, &r);
    if (!strstr(r.out, "[0] HK_FUSION_THRESHOLD=999\n") ||
        !strstr(r.out, "[0] HK_CYCLE_TIME_MS=3\n") ||
        !strstr(r.out, "[0] HK_HIERARCHICAL_ALLREDUCE=1\n")) {
      dump(&r);
      unlink(path);
      fail_msg("the file won over -x or the environment (order %d)", k);
    }
    hkt_result_free(&r);
  }
  /* -v shows what the file set, and what won over it */
  hkt_result r;
  run_expect(shown, own_env, 0, &r);
  char want[512];
  snprintf(want, sizeof want,
           "hkrun: --autotune-load: '%s': HK_FUSION_THRESHOLD=0, "
           "HK_CYCLE_TIME_MS=5 (set already: that wins), "
           "HK_HIERARCHICAL_ALLREDUCE=1\n",
           path);
  if (!strstr(r.err, want)) {
    dump(&r);
    unlink(path);
    fail_msg("-v did not show: %s", want);
  }
  hkt_result_free(&r);
  assert_int_equal(unlink(path), 0);
}

/* The autotuner's files are checked by hkrun before any worker starts
 * (rank 0 could only warn, trial after trial): a folder that is missing
 * and a directory are refused with exit 2. */
static void test_tune_files_checked_at_start(void **state) {
  (void)state;
  char dir[256], missing[320], want[768];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(missing, sizeof missing, "%s/no/t.csv", dir);
  char *log[] = {HKRUN_PATH, "-np",  "1", "--autotune", "--autotune-log-file",
                 missing,    W_TUNE, "2", NULL};
  char *save[] = {HKRUN_PATH, "-np",  "1", "--autotune", "--autotune-save",
                  dir,        W_TUNE, "2", NULL};
  hkt_result r;
  hkt_run(log, NULL, SLOW_S, &r);
  snprintf(want, sizeof want, "hkrun: --autotune-log-file: cannot ");
  int ok = r.exited && r.exit_code == 2 && strstr(r.err, want) &&
           strstr(r.err, missing) &&
           strstr(r.err, "No such file or directory\n") &&
           !strstr(r.out, "hash ");
  if (!ok)
    dump(&r);
  hkt_result_free(&r);
  hkt_run(save, NULL, SLOW_S, &r);
  snprintf(want, sizeof want, "hkrun: --autotune-save: '%s' is a directory\n",
           dir);
  ok = ok && r.exited && r.exit_code == 2 && strstr(r.err, want);
  if (!ok)
    dump(&r);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
  assert_true(ok);
}

/* The first run saves its choice; the second starts from it (its
 * autotuner's starting point, and trial 0, are the saved setting). */
static void test_save_then_load(void **state) {
  (void)state;
  char dir[256], saved[320], csv[320];
  assert_int_equal(hkt_mkdtemp("hk-tune.", dir, sizeof dir), 0);
  snprintf(saved, sizeof saved, "%s/tuned.env", dir);
  snprintf(csv, sizeof csv, "%s/second.csv", dir);
  char *first[] = {HKRUN_PATH,
                   "-np",
                   "2",
                   "--fusion-threshold-mb",
                   "0",
                   "--autotune",
                   "--autotune-warmup-samples",
                   "1",
                   "--autotune-steps-per-sample",
                   "2",
                   "--autotune-save",
                   saved,
                   W_TUNE,
                   "80",
                   NULL};
  hkt_result r;
  run_expect(first, cost_env, 0, &r);
  hkt_result_free(&r);
  char *s = read_text(saved);
  assert_non_null(s);
  assert_non_null(strstr(s, "\nHK_FUSION_THRESHOLD=2097152\n"
                            "HK_CYCLE_TIME_MS=0\n"));
  free(s);
  char *second[] = {HKRUN_PATH,
                    "-np",
                    "2",
                    "--autotune-load",
                    saved,
                    "--autotune",
                    "--autotune-warmup-samples",
                    "1",
                    "--autotune-steps-per-sample",
                    "2",
                    "--autotune-log-file",
                    csv,
                    "--log-level",
                    "info",
                    W_TUNE,
                    "40",
                    NULL};
  run_expect(second, cost_env, 0, &r);
  assert_non_null(strstr(r.err, "autotune: starting from fusion threshold 2 "
                                "MiB, cycle time 0 ms, hierarchical auto"));
  char *c = read_text(csv);
  assert_non_null(c);
  assert_non_null(strstr(c, "\n0,2097152,0,auto,1,4194304,none,"));
  free(c);
  hkt_result_free(&r);
  /* a flag on the same command line wins over the file */
  char *flag[] = {HKRUN_PATH,    "-np",
                  "2",           "--autotune-load",
                  saved,         "--fusion-threshold-mb",
                  "4",           "--autotune",
                  "--log-level", "info",
                  W_TUNE,        "2",
                  NULL};
  run_expect(flag, cost_env, 0, &r);
  assert_non_null(strstr(r.err, "autotune: starting from fusion threshold 4 "
                                "MiB, cycle time 0 ms"));
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_converges_to_known_best),
      cmocka_unit_test(test_all_ranks_switch_at_same_round),
      cmocka_unit_test(test_step_bytes_with_other_collectives),
      cmocka_unit_test(test_hierarchical_searched_where_it_applies),
      cmocka_unit_test(test_compression_searched_where_allowed),
      cmocka_unit_test(test_device_batches_use_tuned_staging),
      cmocka_unit_test(test_noisy_score_does_not_flip_flop),
      cmocka_unit_test(test_short_jobs_say_why),
      cmocka_unit_test(test_other_sets_say_so),
      cmocka_unit_test(test_elastic_reform_restarts_from_own_setting),
      cmocka_unit_test(test_bad_values_refused),
      cmocka_unit_test(test_save_then_load),
      cmocka_unit_test(test_load_loses_to_x_and_env),
      cmocka_unit_test(test_load_refusals),
      cmocka_unit_test(test_tune_files_checked_at_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
