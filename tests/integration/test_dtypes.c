/*
 * test_dtypes - int16, bool and Horovod's scale factors on integer
 * tensors through hkrun (worker program: workers/w_dtypes.c), every result
 * against a serial computation: integer prescale/postscale on allreduce
 * and reduce-scatter at np 2 and 3, one at a time and fused, through
 * shared memory, TCP with recursive doubling, and the hierarchical
 * allreduce on pseudo-hosts; every collective on int16 (join included);
 * bool moved by broadcast, allgather and alltoall and refused by the
 * reductions.
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

#define W_DTYPES WORKER_DIR "/w_dtypes"

/* Runs `w_dtypes mode` at np ranks (in pseudo-hosts of `local` ranks when
 * local > 0) with env; every rank must print "dtypes ok: <mode>". */
static void run_mode(int np, int local, char *const env[], const char *mode) {
  char n[16], cmd[512], ok[64];
  snprintf(n, sizeof n, "%d", np);
  hkt_hosts_cmd(cmd, sizeof cmd, local, W_DTYPES, mode);
  char *argv[] = {HKRUN_PATH, "-np", n, "sh", "-c", cmd, NULL};
  snprintf(ok, sizeof ok, "dtypes ok: %s np=%d", mode, np);
  hkt_result r;
  int rc = hkt_run(argv, env, 280, &r);
  if (rc != 0 || r.exit_code != 0 || hkt_count_lines(r.out, ok) != np)
    fail_msg("%s at np %d: rc=%d exit=%d, %d x '%s'\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             cmd, np, rc, r.exit_code, hkt_count_lines(r.out, ok), ok, r.out,
             r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void test_scaled_np2(void **s) {
  (void)s;
  run_mode(2, 0, NULL, "scaled");
}

static void test_scaled_np3(void **s) {
  (void)s;
  run_mode(3, 0, NULL, "scaled");
}

/* The finish (average, postscale) in recursive doubling and in the
 * hierarchical allreduce's ranks, over TCP links. */
static void test_scaled_other_algorithms(void **s) {
  (void)s;
  char *rd[] = {"HK_INTRA_TRANSPORT=tcp", "HK_ALLREDUCE_ALGO=rd", NULL};
  run_mode(3, 0, rd, "scaled");
  char *hier[] = {"HK_HIERARCHICAL_ALLREDUCE=1", NULL};
  run_mode(4, 2, hier, "scaled");
}

static void test_int16(void **s) {
  (void)s;
  for (int np = 1; np <= 3; np++)
    run_mode(np, 0, NULL, "int16");
}

static void test_bool(void **s) {
  (void)s;
  for (int np = 2; np <= 3; np++)
    run_mode(np, 0, NULL, "bool");
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scaled_np2),
      cmocka_unit_test(test_scaled_np3),
      cmocka_unit_test(test_scaled_other_algorithms),
      cmocka_unit_test(test_int16),
      cmocka_unit_test(test_bool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
