/* test_large - one allreduce of more than 2^31 bytes at np=2 (label
 * "large": skipped under the sanitizers, which would need 3x the memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_over_2GiB)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
