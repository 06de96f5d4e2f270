/*
 * test_negotiation - issue 11's event-driven negotiation, end to end
 * through hkrun (worker program: workers/w_negot.c):
 *  - no tensor waits for a timer: 1000 sequential 8-byte allreduces at
 *    np 2 and 4 with HK_CYCLE_TIME_MS=1000 complete (a tensor that waited
 *    one cycle each would take 1000 s, far past ctest's limit); every one
 *    took at least one round, and no rank needed more than a few requests
 *    per allreduce;
 *  - a job of one rank runs no round at all (its counters stay 0);
 *  - fusion still happens under load: tensors submitted at once are run
 *    in fused batches;
 *  - a burst of submits is held until it ends (worker/queue.h): while
 *    the trainer goes on submitting no round starts, and the burst goes
 *    in one round once it waits; a lone tensor goes after the gap
 *    (HK_BURST_GAP_US), a never-ending burst after HK_BURST_MAX_US, a
 *    polled one and blocking calls at once;
 *  - an idle job uses no CPU: every rank blocked in hk_wait on a tensor
 *    another rank has not submitted uses under 5% of a core over ~1 s;
 *    also with HK_CYCLE_TIME_MS > 0, whose held answers still come.
 * No sleeps synchronise anything and no timing is asserted, except the
 * idleness measurement itself (a bounded ~1 s window inside the worker).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define W_NEGOT WORKER_DIR "/w_negot"

typedef struct counts {
  unsigned long long requests, rounds, answers, fused_batches, fused_tensors;
} counts;

/* Runs w_negot under hkrun on np ranks; every rank must print "negot ok".
 * Returns the output (caller frees with hkt_result_free). */
static void run(int np, char *const env[], const char *mode, hkt_result *r) {
  char n[16], cmd[256];
  snprintf(n, sizeof n, "%d", np);
  snprintf(cmd, sizeof cmd, "exec %s %s", W_NEGOT, mode);
  char *argv[] = {HKRUN_PATH, "-np", n, "sh", "-c", cmd, NULL};
  int rc = hkt_run(argv, env, 280, r);
  if (rc != 0 || r->exit_code != 0 || hkt_count_lines(r->out, "negot ok") != np)
    fail_msg("w_negot %s at np %d: rc=%d exit=%d\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             mode, np, rc, r->exit_code, r->out, r->err);
}

/* The counters rank `rank` printed ("[r] counts ..." under hkrun). */
static counts counts_of(const char *out, int rank) {
  char tag[32];
  snprintf(tag, sizeof tag, "[%d] counts ", rank);
  const char *p = strstr(out, tag);
  if (!p)
    fail_msg("no counters from rank %d in:\n%.3000s", rank, out);
  counts c;
  if (sscanf(p + strlen(tag),
             "requests=%llu rounds=%llu answers=%llu fused_batches=%llu "
             "fused_tensors=%llu",
             &c.requests, &c.rounds, &c.answers, &c.fused_batches,
             &c.fused_tensors) != 5)
    fail_msg("malformed counters from rank %d: %.200s", rank, p);
  return c;
}

static void sequential(int np) {
  char *env[] = {"HK_CYCLE_TIME_MS=1000", NULL};
  hkt_result r;
  run(np, env, "seq 1000", &r);
  for (int rank = 0; rank < np; rank++) {
    counts c = counts_of(r.out, rank);
    /* each allreduce is one round with work at least (plus the shutdown) */
    if (c.rounds < 1000)
      fail_msg("rank %d ran %llu rounds for 1000 allreduces", rank, c.rounds);
    /* rank > 0 sends one request per allreduce (plus its shutdown);
     * rank 0 reads those of every other rank */
    unsigned long long most =
        rank == 0 ? (unsigned long long)(np - 1) * 1001 : 1001;
    if (c.requests < (rank == 0 ? (unsigned long long)(np - 1) * 1000 : 1000) ||
        c.requests > most)
      fail_msg("rank %d: %llu requests for 1000 allreduces at np %d", rank,
               c.requests, np);
  }
  hkt_result_free(&r);
}

static void test_sequential_np2(void **s) {
  (void)s;
  sequential(2);
}

static void test_sequential_np4(void **s) {
  (void)s;
  sequential(4);
}

/* A job of one rank: allreduces complete without any round at all. */
static void test_one_rank_runs_no_round(void **s) {
  (void)s;
  char *env[] = {"HK_CYCLE_TIME_MS=1000", NULL};
  hkt_result r;
  run(1, env, "seq 1000", &r);
  counts c = counts_of(r.out, 0);
  assert_int_equal(c.requests, 0);
  assert_int_equal(c.rounds, 0);
  assert_int_equal(c.answers, 0);
  hkt_result_free(&r);
  /* and without hkrun (a world of one) */
  char *argv[] = {W_NEGOT, "seq", "100", NULL};
  hkt_result r1;
  assert_int_equal(hkt_run(argv, NULL, 120, &r1), 0);
  assert_int_equal(r1.exit_code, 0);
  assert_non_null(
      strstr(r1.out, "counts requests=0 rounds=0 answers=0 fused_batches="));
  hkt_result_free(&r1);
}

/* Tensors submitted at once batch while a round is in flight, and the
 * batches run fused: at np 4, 20 steps of 200 tensors each. */
static void test_fusion_under_load(void **s) {
  (void)s;
  char *env[] = {NULL};
  hkt_result r;
  run(4, env, "burst 200 20", &r);
  for (int rank = 0; rank < 4; rank++) {
    counts c = counts_of(r.out, rank);
    /* every rank runs the same batches */
    counts c0 = counts_of(r.out, 0);
    assert_int_equal(c.fused_batches, c0.fused_batches);
    assert_int_equal(c.fused_tensors, c0.fused_tensors);
    if (c.fused_batches == 0 || c.fused_tensors < 2 * c.fused_batches)
      fail_msg("rank %d fused %llu tensors in %llu batches:\n%s", rank,
               c.fused_tensors, c.fused_batches, r.out);
    /* fewer rounds than tensors: they were negotiated in batches */
    if (c.rounds >= 4000)
      fail_msg("rank %d: %llu rounds for 4000 tensors", rank, c.rounds);
  }
  counts c0 = counts_of(r.out, 0);
  print_message("fusion under load (np 4, 4000 tensors): %llu requests, %llu "
                "rounds, %llu answers, %llu fused batches of %llu tensors\n",
                c0.requests, c0.rounds, c0.answers, c0.fused_batches,
                c0.fused_tensors);
  hkt_result_free(&r);
}

/* The seconds rank `rank` printed as "hold KIND <s>". */
static double hold_of(const hkt_result *r, int rank, const char *kind) {
  char tag[48];
  snprintf(tag, sizeof tag, "[%d] hold %s ", rank, kind);
  const char *p = strstr(r->out, tag);
  if (!p)
    fail_msg("no '%s' from rank %d:\n%.3000s", kind, rank, r->out);
  return atof(p + strlen(tag));
}

/* The submit queue's hold at np 2 (w_negot hold: the burst's own checks
 * and every sum are the worker's; the times are checked here). The gaps
 * and limits are seconds long where the hold must end otherwise, so
 * that only the rule under test can end it in time. */
static void test_burst_hold(void **s) {
  (void)s;
  char *gap_long[] = {"HK_BURST_GAP_US=5000000", "HK_BURST_MAX_US=5000000",
                      NULL};
  hkt_result r;
  /* one round for the burst, none while it went on (asserted there) */
  run(2, gap_long, "hold burst", &r);
  hkt_result_free(&r);
  /* hk_poll ends the burst at once */
  run(2, gap_long, "hold poll", &r);
  for (int rank = 0; rank < 2; rank++)
    if (hold_of(&r, rank, "poll") >= 2.5)
      fail_msg("a polled tensor waited %.3f s of a 5 s gap:\n%s",
               hold_of(&r, rank, "poll"), r.out);
  hkt_result_free(&r);
  /* nor a process set's add and remove (which wait without hk_wait) */
  run(2, gap_long, "hold set", &r);
  for (int rank = 0; rank < 2; rank++)
    if (hold_of(&r, rank, "set") >= 2.5)
      fail_msg("a process set's add and remove took %.3f s with a 5 s "
               "gap:\n%s",
               hold_of(&r, rank, "set"), r.out);
  hkt_result_free(&r);
  /* a blocking call is not held: 200 of them, each would wait 5 s */
  run(2, gap_long, "seq 200", &r);
  hkt_result_free(&r);
  /* a lone tensor: negotiated once the gap has passed, not before */
  char *gap[] = {"HK_BURST_GAP_US=30000", "HK_BURST_MAX_US=5000000", NULL};
  run(2, gap, "hold gap", &r);
  for (int rank = 0; rank < 2; rank++) {
    double t = hold_of(&r, rank, "gap");
    if (t < 0.03 || t >= 2.5)
      fail_msg("rank %d: a lone tensor's round came %.3f s after its "
               "submit (gap 0.03 s):\n%s",
               rank, t, r.out);
  }
  hkt_result_free(&r);
  /* a burst that never ends: held HK_BURST_MAX_US, not the 5 s gap */
  char *most[] = {"HK_BURST_GAP_US=5000000", "HK_BURST_MAX_US=40000", NULL};
  run(2, most, "hold most", &r);
  for (int rank = 0; rank < 2; rank++) {
    double t = hold_of(&r, rank, "most");
    if (t < 0.04 || t >= 2.5)
      fail_msg("rank %d: a burst's first round came %.3f s after its "
               "first submit (held at most 0.04 s):\n%s",
               rank, t, r.out);
  }
  hkt_result_free(&r);
}

/* A rank blocked in hk_wait on a tensor another rank has not submitted
 * sleeps: under 5% of a core over the measured second. */
static void idle(int np) {
  char *env[] = {NULL};
  hkt_result r;
  run(np, env, "idle", &r);
  for (int rank = 0; rank < np; rank++) {
    char tag[32];
    snprintf(tag, sizeof tag, "[%d] idle cpu ", rank);
    const char *p = strstr(r.out, tag);
    if (!p)
      fail_msg("no idle measurement from rank %d:\n%s", rank, r.out);
    double frac = atof(p + strlen(tag));
    if (frac >= 0.05)
      fail_msg("rank %d used %.1f%% of a core while blocked:\n%s", rank,
               100 * frac, r.out);
  }
  hkt_result_free(&r);
}

static void test_idle_np2(void **s) {
  (void)s;
  idle(2);
}

static void test_idle_np4(void **s) {
  (void)s;
  idle(4);
}

/* HK_CYCLE_TIME_MS > 0: rank 0 holds the empty answers, but only that
 * long: every rank blocked behind its unanswered request (its helper's
 * 'idle.measured' waits in the queue) gets it, and still sleeps. */
static void test_held_answers(void **s) {
  (void)s;
  char *env[] = {"HK_CYCLE_TIME_MS=200", NULL};
  hkt_result r;
  run(3, env, "idle", &r);
  for (int rank = 0; rank < 3; rank++) {
    char tag[32];
    snprintf(tag, sizeof tag, "[%d] idle cpu ", rank);
    const char *p = strstr(r.out, tag);
    if (!p || atof(p + strlen(tag)) >= 0.05)
      fail_msg("rank %d:\n%s", rank, r.out);
  }
  counts c0 = counts_of(r.out, 0);
  if (c0.answers == 0)
    fail_msg("no empty answer was sent:\n%s", r.out);
  hkt_result_free(&r);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sequential_np2),
      cmocka_unit_test(test_sequential_np4),
      cmocka_unit_test(test_one_rank_runs_no_round),
      cmocka_unit_test(test_fusion_under_load),
      cmocka_unit_test(test_idle_np2),
      cmocka_unit_test(test_idle_np4),
      cmocka_unit_test(test_held_answers),
      cmocka_unit_test(test_burst_hold),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
