/* test_large - one allreduce of more than 2^31 bytes at np=2, and the
 * peak memory of a 256 MiB allreduce (label "large": skipped under the
 * sanitizers, which would need 3x the memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static void test_over_2GiB(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "2", WORKER_DIR "/w_large", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 280, &r), 0);
  if (r.exit_code != 0 ||
      hkt_count_lines(r.out, "large ok: 2147484679 bytes") != 2)
    fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out, r.err);
  hkt_result_free(&r);
}

/* No algorithm keeps a scratch buffer the size of the tensor: every
 * rank's peak resident set (its buffer, hk's buffers and the shared
 * segment it maps) during a 256 MiB allreduce stays within 1.6x the
 * buffer, at np 2 and 4, over shm (the shm engine) and over TCP (auto:
 * recursive doubling at np 2, which kept a whole-buffer scratch before,
 * the ring at np 4). */
static void test_peak_memory(void **s) {
  (void)s;
  const char *nps[] = {"2", "4"};
  const char *envs[][2] = {
      {"HK_INTRA_TRANSPORT=shm", NULL},
      {"HK_INTRA_TRANSPORT=shm", "HK_ALLREDUCE_ALGO=rd"},
      {"HK_INTRA_TRANSPORT=tcp", "HK_ALLREDUCE_ALGO=ring"}};
  const size_t bytes = (size_t)256 << 20;
  for (int i = 0; i < 2; i++)
    for (int e = 0; e < 2; e++) {
      char *env[] = {(char *)envs[e][0], (char *)envs[e][1], NULL};
      char *argv[] = {
          HKRUN_PATH, "-np", (char *)nps[i], WORKER_DIR "/w_large", "268435456",
          "rss",      NULL};
      hkt_result r;
      assert_int_equal(hkt_run(argv, env, 280, &r), 0);
      if (r.exit_code != 0 ||
          hkt_count_lines(r.out, "rss peak ") != atoi(nps[i]))
        fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out,
                 r.err);
      for (char *p = r.out; (p = strstr(p, "rss peak ")); p += 9) {
        long kib = atol(p + 9);
        double x = (double)kib * 1024 / (double)bytes;
        printf("np %s %s %s: peak %.3fx the buffer\n", nps[i], envs[e][0],
               envs[e][1] ? envs[e][1] : "", x);
        if (x > 1.6)
          fail_msg("np %s, %s %s: a rank peaked at %ld KiB, %.2fx the "
                   "256 MiB buffer",
                   nps[i], envs[e][0], envs[e][1] ? envs[e][1] : "", kib, x);
      }
      hkt_result_free(&r);
    }
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_over_2GiB),
                                     cmocka_unit_test(test_peak_memory)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
