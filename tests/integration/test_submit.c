/*
 * test_submit - hk_submit and hk_submit_group through hkrun (worker
 * program: workers/w_submit.c) at np 1 to 4: grouped allgathers and
 * reduce-scatters, fused and against a serial computation; shapes checked
 * across ranks like dtypes (a mismatch fails the tensor on every rank,
 * naming both shapes and the ranks, and the job goes on); the
 * descriptions hk_submit refuses, with their messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define W_SUBMIT WORKER_DIR "/w_submit"

/* Runs w_submit MODE at np 1..4; every rank must print "submit ok". */
static void run_all(const char *mode) {
  for (int np = 1; np <= 4; np++) {
    char n[16];
    snprintf(n, sizeof n, "%d", np);
    char *argv[] = {HKRUN_PATH, "-np", n, W_SUBMIT, (char *)mode, NULL};
    hkt_result r;
    int rc = hkt_run(argv, NULL, 120, &r);
    if (rc != 0 || r.exit_code != 0 ||
        hkt_count_lines(r.out, "submit ok") != np)
      fail_msg("w_submit %s at np %d: rc=%d exit=%d\nstdout:\n%.3000s\n"
               "stderr:\n%.3000s",
               mode, np, rc, r.exit_code, r.out, r.err);
    hkt_result_free(&r);
    assert_int_equal(hkt_orphans(NULL, 0), 0);
  }
}

static void test_groups(void **s) {
  (void)s;
  run_all("groups");
}

static void test_shapes(void **s) {
  (void)s;
  run_all("shapes");
}

static void test_refusals(void **s) {
  (void)s;
  run_all("refusals");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_groups),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
