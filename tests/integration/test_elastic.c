/*
 * test_elastic.c - elastic jobs on one host (hkrun --min-np;
 * docs/elastic.md), with tests/integration/workers/w_elastic.c as the
 * trainer: a rank killed with SIGKILL at a known step (its own, through
 * the worker's arguments: no sleep), the survivors' restore and
 * hk_elastic_reset, their final weights against a serial replay of the
 * schedule; a second loss while the job re-forms; and a loss below
 * --min-np failing every rank, saying what is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "elastic_replay.h"
#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif
#define W(name) WORKER_DIR "/" name

/* The number after key on the first line of text holding key, or -1. */
static double number_after(const char *text, const char *key) {
  const char *p = strstr(text, key);
  return p ? strtod(p + strlen(key), NULL) : -1;
}

/* np 4, --min-np 2: the worker started as rank 2 dies (SIGKILL) at the
 * start of step 6; the others fail with HK_ERR_RANKS_CHANGED naming it,
 * restore their commit of step 4, re-form as ranks 0..2 of 3 and train
 * to step 12. Their weights equal steps 0-3 by 4 ranks, then 4-11 by 3;
 * hkrun exits 0. */
static void test_loss_reforms_and_matches_replay(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "4", "--min-np", "2", W("w_elastic"),
                  "12",       "4",   "2", "6",        NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  assert_non_null(strstr(r.err, "was killed by signal 9; the elastic job "
                                "goes on with 3 workers (--min-np 2)"));
  assert_non_null(strstr(r.err, "hkrun: rank 2 (pid "));
  /* every survivor's allreduce of step 6 failed with the new status,
   * naming the lost rank (in flight: "tensor 'grad.6': ..."; submitted
   * after the failure: "cannot submit 'grad.6': ...") */
  assert_int_equal(hkt_count_lines(r.err, "ranks changed: "), 3);
  assert_int_equal(hkt_count_lines(r.err, "'grad.6': rank 2 (pid "), 3);
  assert_int_equal(hkt_count_lines(r.out, "from step 4"), 3);
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1, 3};
  hkt_elastic_replay(all, 4, left, 3, 4, 12, want, sizeof want);
  int seen_rank[3] = {0};
  for (int k = 0; k < 3; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=3 w=%s\n", left[k],
             k, want);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s", line, r.out);
    seen_rank[k] = 1;
  }
  assert_int_equal(seen_rank[0] + seen_rank[1] + seen_rank[2], 3);
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 3);
  /* the replay is not the same with no loss: the loss mattered */
  char whole[512];
  hkt_elastic_replay(all, 4, all, 4, 12, 12, whole, sizeof whole);
  assert_string_not_equal(want, whole);
  double died = number_after(r.out, "dying at step 6 t=");
  double back = number_after(r.out, "resumed step 4 t=");
  assert_true(died > 0 && back >= died);
  fprintf(stderr,
          "elastic: %.1f ms from the loss to the first step after "
          "it\n",
          (back - died) * 1e3);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* The same with the gradient in a buffer of the emulated GPU
 * (HK_DEVICE=emu): each generation has a device communicator; every
 * survivor aborts the first one's (never destroys it: peers may hang in
 * it) at hk_elastic_reset, the new rank 0 makes a second id, and the
 * weights equal the replay; the last one is destroyed at hk_shutdown (no
 * second abort). */
static void test_device_communicator_rebuilt(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", NULL};
  char *argv[] = {
      HKRUN_PATH, "-np", "4", "--min-np", "2", WORKER_DIR "/../w_elastic_dev",
      "12",       "4",   "2", "6",        NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1, 3};
  hkt_elastic_replay(all, 4, left, 3, 4, 12, want, sizeof want);
  for (int k = 0; k < 3; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=3 w=%s\n", left[k],
             k, want);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s\nstderr:\n%s", line, r.out, r.err);
    snprintf(line, sizeof line, "device slot=%d ids=%d aborted=1\n", left[k],
             k == 0 ? 2 : 0);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s", line, r.out);
  }
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A worker lost before the job first formed (its shell kills itself
 * before it starts w_elastic): the others' hk_init forms the job without
 * it, as ranks 0..2 of 3, and they train all 12 steps by 3. */
static void test_loss_before_first_formed(void **s) {
  (void)s;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "if [ \"$HK_RANK\" = 2 ]; then kill -9 $$; fi; exec %s 12 4 -1 -1",
           W("w_elastic"));
  char *argv[] = {HKRUN_PATH, "-np", "4", "--min-np", "2",
                  "sh",       "-c",  cmd, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  assert_non_null(strstr(r.err, "hkrun: rank 2 (pid "));
  assert_non_null(strstr(r.err, "was killed by signal 9; the elastic job "
                                "goes on with 3 workers (--min-np 2)"));
  char want[512];
  const int three[] = {0, 1, 2};
  hkt_elastic_replay(three, 3, three, 3, 12, 12, want, sizeof want);
  for (int k = 0; k < 3; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=3 w=%s\n", k, k,
             want);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s\nstderr:\n%s", line, r.out, r.err);
  }
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 3);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A worker lost while the others start (HK_TEST_KILL_IN_START: the one
 * started as rank 1 kills itself in hk_init once its links are made, the
 * others still in theirs): their hk_init re-forms the job without it, as
 * ranks 0..2 of 3, and they train all 12 steps by 3. */
static void test_loss_while_starting(void **s) {
  (void)s;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "if [ \"$HK_RANK\" = 1 ]; then export HK_TEST_KILL_IN_START=1; "
           "fi; exec %s 12 4 -1 -1",
           W("w_elastic"));
  char *argv[] = {HKRUN_PATH, "-np", "4", "--min-np", "2",
                  "sh",       "-c",  cmd, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  assert_non_null(strstr(r.err, "hkrun: rank 1 (pid "));
  assert_non_null(strstr(r.err, "was killed by signal 9; the elastic job "
                                "goes on with 3 workers (--min-np 2)"));
  char want[512];
  const int three[] = {0, 1, 2};
  hkt_elastic_replay(three, 3, three, 3, 12, 12, want, sizeof want);
  for (int k = 0; k < 3; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=3 w=%s\n", k, k,
             want);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s\nstderr:\n%s", line, r.out, r.err);
  }
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 3);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A second loss while the job re-forms after the first: the worker
 * started as rank 1 dies before it calls hk_elastic_reset (when = "before":
 * the generation forms without it) or after its reset returned, before
 * the sync broadcast (when = "after": the others' sync fails with
 * HK_ERR_RANKS_CHANGED and they re-form again). Slots 0 and 3 finish as
 * ranks 0 and 1 of 2: steps 0-3 by 4 ranks, 4-11 by 2. */
static void second_loss(const char *when) {
  char *argv[] = {HKRUN_PATH, "-np", "4", "--min-np", "2", W("w_elastic"),
                  "12",       "4",   "2", "6",        "1", (char *)when,
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  char dying[64];
  snprintf(dying, sizeof dying, "[1] dying %s the reset", when);
  if (strcmp(when, "leave") == 0) {
    assert_int_equal(
        hkt_count_lines(r.out, "[1] leaving instead of re-forming"), 1);
    assert_null(strstr(r.err, "hkrun: rank 1 (pid "));
  } else if (strcmp(when, "exit") == 0) { /* hkrun says what it looks like */
    assert_int_equal(
        hkt_count_lines(r.out, "[1] exiting instead of re-forming"), 1);
    if (!strstr(r.err, "exited with status 4 instead of calling "
                       "hk_elastic_reset (a program not written for elastic "
                       "jobs: docs/elastic.md); the elastic job goes on with "
                       "2 workers (--min-np 2)"))
      fail_msg("no hint in:\n%s", r.err);
  } else {
    assert_int_equal(hkt_count_lines(r.out, dying), 1);
    assert_non_null(strstr(r.err, "was killed by signal 9; the elastic job "
                                  "goes on with 2 workers (--min-np 2)"));
  }
  if (strcmp(when, "after") == 0) { /* the sync met the second loss */
    assert_int_equal(hkt_count_lines(r.err, "ranks changed while re-forming: "),
                     2);
    assert_int_equal(hkt_count_lines(r.err, "'elastic.sync': rank 1 (pid "), 2);
  }
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 3};
  hkt_elastic_replay(all, 4, left, 2, 4, 12, want, sizeof want);
  for (int k = 0; k < 2; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=2 w=%s\n", left[k],
             k, want);
    if (!strstr(r.out, line))
      fail_msg("no line '%s' in:\n%s\nstderr:\n%s", line, r.out, r.err);
  }
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 2);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A survivor that leaves (hk_shutdown, exit 0) instead of re-forming is
 * no loss: the others re-form without it, and the job exits 0. */
static void test_survivor_leaves(void **s) {
  (void)s;
  second_loss("leave");
}

/* A survivor that exits with a status instead of re-forming (a program
 * not written for elastic jobs) is a loss, and hkrun says what it looks
 * like; the others re-form without it. */
static void test_survivor_exits(void **s) {
  (void)s;
  second_loss("exit");
}

static void test_loss_before_reset(void **s) {
  (void)s;
  second_loss("before");
}

static void test_loss_after_reset(void **s) {
  (void)s;
  second_loss("after");
}

/* --reset-limit 1: the second loss (after the first re-forming, during
 * the sync) would re-form the job a second time: hkrun fails it instead,
 * every survivor's hk_elastic_reset says why, exit 137. */
static void test_reset_limit(void **s) {
  (void)s;
  char *argv[] = {
      HKRUN_PATH, "-np",          "4",  "--min-np", "2", "--reset-limit",
      "1",        W("w_elastic"), "12", "4",        "2", "6",
      "1",        "after",        NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 128 + 9)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  int pid = (int)number_after(r.err, "hkrun: rank 1 (pid ");
  assert_true(pid > 0);
  char want[256];
  snprintf(want, sizeof want,
           "rank 1 (pid %d) was killed by signal 9: the elastic job would "
           "re-form 2 times, more than --reset-limit 1",
           pid);
  char said[320];
  snprintf(said, sizeof said, "hkrun: %s\n", want);
  if (!strstr(r.err, said))
    fail_msg("no line '%s' in:\n%s", said, r.err);
  snprintf(said, sizeof said, "reset failed: peer lost: hk_elastic_reset: %s",
           want);
  assert_int_equal(hkt_count_lines(r.out, said), 2);
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 0);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A survivor that never calls hk_elastic_reset does not hang the others:
 * HK_START_TIMEOUT_S (20 s) after the loss hkrun fails the job naming it,
 * every other survivor's reset fails with that text, exit 1, nothing
 * left behind. */
static void test_survivor_never_resets(void **s) {
  (void)s;
  char *argv[] = {
      HKRUN_PATH, "-np",          "4",  "--min-np", "2", "--start-timeout",
      "20",       W("w_elastic"), "12", "4",        "2", "6",
      "1",        "never",        NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 1)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  assert_int_equal(hkt_count_lines(r.out, "[1] never calling hk_elastic_reset"),
                   1);
  int pid = (int)number_after(r.err, "HK_START_TIMEOUT_S=20 s: rank 1 (pid ");
  assert_true(pid > 0);
  char want[256];
  snprintf(want, sizeof want,
           "the elastic job did not re-form within HK_START_TIMEOUT_S=20 s: "
           "rank 1 (pid %d) did not call hk_elastic_reset (or could not "
           "reach hkrun)",
           pid);
  char said[320];
  snprintf(said, sizeof said, "hkrun: %s\n", want);
  if (!strstr(r.err, said))
    fail_msg("no line '%s' in:\n%s", said, r.err);
  snprintf(said, sizeof said, "reset failed: peer lost: hk_elastic_reset: %s",
           want);
  assert_int_equal(hkt_count_lines(r.out, said), 2);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* np 3, --min-np 3: the worker started as rank 1 dies at step 6. With a
 * discovery script hkrun waits --elastic-timeout 2 s, then fails every
 * rank naming what is missing and what the script lists; without one
 * nothing could join, and it fails at once though --elastic-timeout is
 * its default 600 s. Either way it exits 137 (the lost worker's SIGKILL)
 * and leaves nothing behind. */
static void below_min_np(int with_script) {
  char script[512] = "";
  if (with_script) {
    assert_int_equal(hkt_mkstemp("hk-discover.", script, sizeof script), 0);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\necho localhost:3\n", f);
    fclose(f);
    assert_int_equal(chmod(script, 0700), 0);
  }
  char *argv[] = {HKRUN_PATH,     "-np", "3",  "--min-np", "3",
                  W("w_elastic"), "12",  "4",  "1",        "6",
                  NULL,           NULL,  NULL, NULL,       NULL};
  if (with_script) { /* the options go before the program */
    char *opts[] = {"--elastic-timeout", "2", "--host-discovery-script",
                    script};
    memmove(argv + 9, argv + 5, 5 * sizeof *argv);
    memcpy(argv + 5, opts, sizeof opts);
  }
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (with_script)
    unlink(script);
  if (r.exit_code != 128 + 9)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  char when[700];
  if (with_script)
    snprintf(when, sizeof when,
             "none joined within --elastic-timeout 2 s "
             "(--host-discovery-script %s lists 3 slots on 1 host "
             "(localhost:3)",
             script);
  else
    snprintf(when, sizeof when, "none can join (no --host-discovery-script");
  char want[1024];
  snprintf(want, sizeof want,
           "elastic job below --min-np 3: 2 workers left, 1 more needed "
           "(lost: rank 1 (pid %d) was killed by signal 9); %s; hkrun starts "
           "no new workers yet)",
           (int)number_after(r.err, "(lost: rank 1 (pid "), when);
  char said[1100];
  snprintf(said, sizeof said, "hkrun: %s\n", want);
  if (!strstr(r.err, said))
    fail_msg("no line '%s' in:\n%s", said, r.err);
  /* both survivors' hk_elastic_reset failed with hkrun's words */
  snprintf(said, sizeof said, "reset failed: peer lost: hk_elastic_reset: %s",
           want);
  assert_int_equal(hkt_count_lines(r.out, said), 2);
  assert_true(r.elapsed_s < (with_script ? 60 : 30));
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

static void test_below_min_np_fails_every_rank(void **s) {
  (void)s;
  below_min_np(1);
}

static void test_below_min_np_nothing_can_join(void **s) {
  (void)s;
  below_min_np(0);
}

/* np 3, --min-np 3, --elastic-timeout 1: the discovery script answers at
 * start-up, then hangs (a child sleeping 100 s) when hkrun asks it again
 * below --min-np: hkrun kills its process group after 1 s and fails the
 * job naming the script that did not answer, well before the sleep
 * would end; nothing of the script is left. */
static void test_discovery_script_hangs(void **s) {
  (void)s;
  char script[512], mark[520];
  assert_int_equal(hkt_mkstemp("hk-discover.", script, sizeof script), 0);
  snprintf(mark, sizeof mark, "%s.m", script);
  FILE *f = fopen(script, "w");
  assert_non_null(f);
  fprintf(f,
          "#!/bin/sh\nif [ -e %s ]; then sleep 100; fi\ntouch %s\n"
          "echo localhost:3\n",
          mark, mark);
  fclose(f);
  assert_int_equal(chmod(script, 0700), 0);
  char *argv[] = {HKRUN_PATH, "-np",
                  "3",        "--min-np",
                  "3",        "--elastic-timeout",
                  "1",        "--host-discovery-script",
                  script,     W("w_elastic"),
                  "12",       "4",
                  "1",        "6",
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  unlink(script);
  unlink(mark);
  if (r.exit_code != 128 + 9)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  char want[1024];
  snprintf(want, sizeof want,
           "none joined within --elastic-timeout 1 s "
           "(--host-discovery-script %s did not answer within 1 s (it was "
           "killed); hkrun starts no new workers yet)\n",
           script);
  if (!strstr(r.err, want))
    fail_msg("no '%s' in:\n%s", want, r.err);
  assert_true(r.elapsed_s < 60);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* np 3, --min-np 3, with a discovery script: every worker finishes and
 * calls hk_shutdown, then the one started as rank 1 exits 7 (its shell):
 * hkrun exits 7, naming it, as a static job does, and waits for
 * nothing. */
static void test_status_after_leaving_kept(void **s) {
  (void)s;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "%s 4 2 -1 -1 && if [ \"$HK_RANK\" = 1 ]; then exit 7; fi",
           W("w_elastic"));
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "3",
                  "--min-np",
                  "3",
                  "--host-discovery-script",
                  "echo localhost:3",
                  "sh",
                  "-c",
                  cmd,
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 7)
    fail_msg("hkrun exited %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
             r.err);
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 3);
  assert_int_equal(hkt_count_lines(r.err, "exited with status 7 after it "
                                          "left the job (hk_shutdown)"),
                   1);
  assert_null(strstr(r.err, "waiting up to"));
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A discovery script that fails is found before anything starts: hkrun
 * says how and exits 2. */
static void test_discovery_script_fails(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np",
                  "2",        "--min-np",
                  "2",        "--host-discovery-script",
                  "exit 3",   W("w_elastic"),
                  "4",        "2",
                  "-1",       "-1",
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_string_equal(r.err,
                      "hkrun: --host-discovery-script exit 3 exited with "
                      "status 3\n");
  assert_string_equal(r.out, "");
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

int main(int argc, char **argv) {
  hkt_setup();
  if (argc > 1) /* a pattern of the tests to run (cmocka's filter) */
    cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loss_reforms_and_matches_replay),
      cmocka_unit_test(test_device_communicator_rebuilt),
      cmocka_unit_test(test_loss_before_first_formed),
      cmocka_unit_test(test_loss_while_starting),
      cmocka_unit_test(test_loss_before_reset),
      cmocka_unit_test(test_loss_after_reset),
      cmocka_unit_test(test_survivor_leaves),
      cmocka_unit_test(test_survivor_exits),
      cmocka_unit_test(test_reset_limit),
      cmocka_unit_test(test_survivor_never_resets),
      cmocka_unit_test(test_below_min_np_fails_every_rank),
      cmocka_unit_test(test_below_min_np_nothing_can_join),
      cmocka_unit_test(test_discovery_script_fails),
      cmocka_unit_test(test_discovery_script_hangs),
      cmocka_unit_test(test_status_after_leaving_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
