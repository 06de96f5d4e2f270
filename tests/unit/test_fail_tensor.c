/*
 * test_fail_tensor - the message of a tensor's failure names the tensor
 * once (worker/queue.h hk_fail_tensor): a reason from below that already
 * begins "tensor '<name>': " (a device batch's watchdog) is not prefixed
 * again; any other reason is, including one naming another tensor (the
 * batch in flight ahead of this one).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/status.h"
#include "worker/queue.h"

static void prefixes_a_plain_reason(void **s) {
  (void)s;
  assert_int_equal(hk_fail_tensor(HK_ERR_TIMEOUT, "a", "it timed out"),
                   HK_ERR_TIMEOUT);
  assert_string_equal(hk_last_error(), "tensor 'a': it timed out");
}

static void names_the_tensor_once(void **s) {
  (void)s;
  assert_int_equal(
      hk_fail_tensor(HK_ERR_DEVICE, "overlap.a",
                     "tensor 'overlap.a': the device allreduce failed"),
      HK_ERR_DEVICE);
  assert_string_equal(hk_last_error(),
                      "tensor 'overlap.a': the device allreduce failed");
}

static void keeps_another_tensors_name(void **s) {
  (void)s;
  hk_fail_tensor(HK_ERR_DEVICE, "overlap.b",
                 "tensor 'overlap.a': the device allreduce failed");
  assert_string_equal(hk_last_error(),
                      "tensor 'overlap.b': tensor 'overlap.a': the device "
                      "allreduce failed");
  /* a name that only begins like this one's is another tensor */
  hk_fail_tensor(HK_ERR_DEVICE, "over", "tensor 'overlap.a': failed");
  assert_string_equal(hk_last_error(),
                      "tensor 'over': tensor 'overlap.a': failed");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(prefixes_a_plain_reason),
      cmocka_unit_test(names_the_tensor_once),
      cmocka_unit_test(keeps_another_tensors_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
