/*
 * test_blacklist.c - launcher/blacklist.h: the cooldown of a host that
 * failed, min(B, A * 2^(n-1)) at its n-th failure, and for ever without a
 * range.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "launcher/blacklist.h"

static void test_backs_off_to_the_cap(void **s) {
  (void)s;
  hk_blacklist b;
  hk_blacklist_init(&b, 10, 35);
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 0) == 0);
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 100) == 10);
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 104) == 6);
  assert_true(hk_blacklist_left(&b, "10.0.0.4", 104) == 0); /* another */
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 110) == 0); /* over */
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 200) == 20);
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 300) == 35); /* 40 > B */
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 400) == 35);
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 430) == 5);
  assert_int_equal(hk_blacklist_failures(&b, "10.0.0.3"), 4);
  assert_int_equal(hk_blacklist_failures(&b, "10.0.0.4"), 0);
  hk_blacklist_free(&b);
  assert_int_equal(hk_blacklist_failures(&b, "10.0.0.3"), 0);
}

static void test_for_ever_without_a_range(void **s) {
  (void)s;
  hk_blacklist b;
  hk_blacklist_init(&b, -1, -1);
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 100) == -1);
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 1e9) == -1);
  hk_blacklist_free(&b);
}

static void test_zero_range_keeps_nobody_out(void **s) {
  (void)s;
  hk_blacklist b;
  hk_blacklist_init(&b, 0, 0);
  assert_true(hk_blacklist_fail(&b, "10.0.0.3", 100) == 0);
  assert_true(hk_blacklist_left(&b, "10.0.0.3", 100) == 0);
  hk_blacklist_free(&b);
}

static void test_many_hosts(void **s) {
  (void)s;
  hk_blacklist b;
  hk_blacklist_init(&b, 1, 1);
  char ip[32];
  for (int i = 0; i < 300; i++) {
    snprintf(ip, sizeof ip, "10.0.%d.%d", i / 256, i % 256);
    assert_true(hk_blacklist_fail(&b, ip, 0) == 1);
  }
  for (int i = 0; i < 300; i++) {
    snprintf(ip, sizeof ip, "10.0.%d.%d", i / 256, i % 256);
    assert_true(hk_blacklist_left(&b, ip, 0.5) == 0.5);
  }
  hk_blacklist_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_backs_off_to_the_cap),
      cmocka_unit_test(test_for_ever_without_a_range),
      cmocka_unit_test(test_zero_range_keeps_nobody_out),
      cmocka_unit_test(test_many_hosts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
