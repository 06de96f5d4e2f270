/*
 * test_strmap - common/strmap.h against a plain array of the same keys:
 * every key found with its own value after puts, replacements, removals
 * and puts again (which reuse the removed nodes of short keys), keys on
 * both sides of the reused node's size (63 and 64 characters, and
 * longer), growth past many bucket doublings, and the size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/strmap.h"

enum { NKEYS = 3000 };

/* Key i: lengths cycle through 1..130 characters, so short (reused) and
 * long (fitted) nodes mix; unique by its number. */
static void key_of(int i, char *out, size_t cap) {
  int len = 1 + i % 130;
  int w = snprintf(out, cap, "%d.", i);
  for (; w < len && (size_t)w + 1 < cap; w++)
    out[w] = (char)('a' + (i + w) % 26);
  out[w] = '\0';
}

static void *value_of(int i, int gen) {
  return (void *)(uintptr_t)(1 + (size_t)i * 8 + (size_t)gen);
}

static void check_all(const hk_strmap *m, const int *gen, int n) {
  size_t present = 0;
  char key[160];
  for (int i = 0; i < n; i++) {
    key_of(i, key, sizeof key);
    void *got = hk_strmap_get(m, key);
    if (gen[i] < 0) {
      assert_null(got);
    } else {
      assert_ptr_equal(got, value_of(i, gen[i]));
      present++;
    }
  }
  assert_int_equal(hk_strmap_size(m), present);
}

static void test_against_array(void **s) {
  (void)s;
  hk_strmap *m;
  assert_int_equal(hk_strmap_create(&m), HK_OK);
  int gen[NKEYS];
  char key[160];
  for (int i = 0; i < NKEYS; i++) {
    key_of(i, key, sizeof key);
    assert_int_equal(hk_strmap_put(m, key, value_of(i, 0)), HK_OK);
    gen[i] = 0;
  }
  check_all(m, gen, NKEYS);
  for (int round = 1; round <= 4; round++) {
    /* remove every other key (a different half each round), replace a
     * third of the rest, then put the removed ones back: their nodes come
     * from the removed ones' spares, whatever their lengths */
    for (int i = round % 2; i < NKEYS; i += 2) {
      key_of(i, key, sizeof key);
      assert_ptr_equal(hk_strmap_remove(m, key), value_of(i, gen[i]));
      assert_null(hk_strmap_remove(m, key));
      gen[i] = -1;
    }
    check_all(m, gen, NKEYS);
    for (int i = 0; i < NKEYS; i += 3)
      if (gen[i] >= 0) {
        key_of(i, key, sizeof key);
        gen[i] = round;
        assert_int_equal(hk_strmap_put(m, key, value_of(i, round)), HK_OK);
      }
    for (int i = NKEYS - 1; i >= 0; i--)
      if (gen[i] < 0) {
        key_of(i, key, sizeof key);
        gen[i] = round;
        assert_int_equal(hk_strmap_put(m, key, value_of(i, round)), HK_OK);
      }
    check_all(m, gen, NKEYS);
  }
  hk_strmap_destroy(m); /* with spares and live nodes: LeakSanitizer */
}

/* The lengths around the reused node's size, one after another through
 * the same spare. */
static void test_key_lengths(void **s) {
  (void)s;
  hk_strmap *m;
  assert_int_equal(hk_strmap_create(&m), HK_OK);
  char key[300];
  const size_t lens[] = {0, 1, 62, 63, 64, 65, 200, 63, 0, 299};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    memset(key, 'a' + (int)k, lens[k]);
    key[lens[k]] = '\0';
    assert_int_equal(hk_strmap_put(m, key, (void *)(uintptr_t)(k + 1)), HK_OK);
    assert_ptr_equal(hk_strmap_get(m, key), (void *)(uintptr_t)(k + 1));
    assert_ptr_equal(hk_strmap_remove(m, key), (void *)(uintptr_t)(k + 1));
    assert_null(hk_strmap_get(m, key));
    assert_int_equal(hk_strmap_size(m), 0);
  }
  hk_strmap_destroy(m);
  hk_strmap_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_array),
      cmocka_unit_test(test_key_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
