/*
 * test_elem - device/elem.h, the per-element arithmetic of the device
 * kernels (pack, unpack, average, scale, float16/bfloat16 compression),
 * against the host kernels hk's CPU path uses (device/host/reduce.h,
 * common/half.h), bit for bit: every 16-bit pattern, special and random
 * binary32/binary64 values, every dtype. (The conversions themselves are
 * one code, common/half_inline.h, which half.c wraps.)
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/half.h"
#include "device/elem.h"
#include "device/host/reduce.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void test_dtype_values_match_hk_h(void **s) {
  (void)s;
  assert_int_equal(HK_ELEM_F16, HK_FLOAT16);
  assert_int_equal(HK_ELEM_BF16, HK_BFLOAT16);
  assert_int_equal(HK_ELEM_F32, HK_FLOAT32);
  assert_int_equal(HK_ELEM_F64, HK_FLOAT64);
  assert_int_equal(HK_ELEM_I8, HK_INT8);
  assert_int_equal(HK_ELEM_U8, HK_UINT8);
  assert_int_equal(HK_ELEM_I32, HK_INT32);
  assert_int_equal(HK_ELEM_I64, HK_INT64);
  assert_int_equal(HK_ELEM_I16, HK_INT16);
  assert_int_equal(HK_ELEM_BOOL, HK_BOOL);
}

/* n elements of dtype d: random bits, with specials mixed in for floats. */
static void fill(void *buf, size_t n, hk_dtype d, uint64_t salt) {
  const size_t esz = hk_dtype_size(d);
  for (size_t i = 0; i < n; i++) {
    uint64_t x = mix(salt + i);
    if (d == HK_FLOAT16 || d == HK_BFLOAT16) { /* every 16-bit pattern */
      uint16_t v = (uint16_t)(i & 0xffff);
      memcpy((uint8_t *)buf + i * 2, &v, 2);
    } else if (d == HK_FLOAT32 && i % 7 == 0) {
      static const float sp[] = {0.0f, -0.0f,  INFINITY, -INFINITY,
                                 NAN,  1e-45f, 3.4e38f,  -1.5f};
      memcpy((uint8_t *)buf + i * 4, &sp[(i / 7) % 8], 4);
    } else if (d == HK_FLOAT32) {
      float f = (float)((double)(int64_t)(x % 2000001) / 977.0 - 1000.0);
      memcpy((uint8_t *)buf + i * 4, &f, 4);
    } else if (d == HK_FLOAT64) {
      double f = (double)(int64_t)(x % 2000001) / 977.0 - 1000.0;
      memcpy((uint8_t *)buf + i * 8, &f, 8);
    } else {
      memcpy((uint8_t *)buf + i * esz, &x, esz);
    }
  }
}

/* The unpack's divisor and scale vs hk_reduce_finish_average then
 * hk_scale_copy, for every dtype hk reduces (integers scaled too: the
 * division is the host's, the scale the rule both share). */
static void test_divide_and_scale_match_host(void **s) {
  (void)s;
  enum { N = 65536 };
  static uint8_t in[N * 8], want[N * 8], got[N * 8];
  const int divisors[] = {1, 2, 3, 7};
  const double scales[] = {1.0, 0.5, 3.0, 1.0 / 3.0, -2.5};
  for (int d = HK_FLOAT16; d <= HK_INT16; d++) {
    const size_t esz = hk_dtype_size((hk_dtype)d);
    for (int k = 0; k < 4; k++)
      for (int m = 0; m < 5; m++) {
        double sc = scales[m];
        fill(in, N, (hk_dtype)d, (uint64_t)(d * 100 + k * 10 + m));
        memcpy(want, in, N * esz);
        hk_reduce_finish_average(want, N, (hk_dtype)d, divisors[k]);
        hk_scale_copy(want, want, N, (hk_dtype)d, sc);
        for (size_t i = 0; i < N; i++)
          hk_elem_copy(got, in, i, d, d, sc, divisors[k], 1.0f);
        for (size_t i = 0; i < N; i++)
          if (memcmp(got + i * esz, want + i * esz, esz))
            fail_msg("%s: divisor %d scale %g: element %zu differs",
                     hk_dtype_name((hk_dtype)d), divisors[k], sc, i);
      }
  }
}

/* Compression: float32 -> 16 bits after a scale, and back with the
 * average's division, as hk_f32_to_f16/bf16 and binary32 arithmetic. */
static void test_compression_round_trip(void **s) {
  (void)s;
  enum { N = 100003 };
  static float in[N], back[N];
  static uint16_t low[N];
  fill(in, N, HK_FLOAT32, 42);
  for (int t = HK_FLOAT16; t <= HK_BFLOAT16; t++)
    for (size_t i = 0; i < N; i++) {
      hk_elem_copy(low, in, i, HK_FLOAT32, t, 0.5, 1, 1.0f);
      float x = in[i] * 0.5f;
      uint16_t w = t == HK_FLOAT16 ? hk_f32_to_f16(x) : hk_f32_to_bf16(x);
      assert_int_equal(low[i], w);
      hk_elem_copy(back, low, i, t, HK_FLOAT32, 2.0, 3, 1.0f);
      float y = (t == HK_FLOAT16 ? hk_f16_to_f32(w) : hk_bf16_to_f32(w));
      y = y / 3.0f * 2.0f;
      if (memcmp(&back[i], &y, 4) && !(isnan(back[i]) && isnan(y)))
        fail_msg("%s back: element %zu: %a vs %a", hk_dtype_name((hk_dtype)t),
                 i, back[i], y);
    }
}

/* A 16-bit average whose inputs the pack divided by a power of two: the
 * unpack's x * pre / divisor gives hk_reduce_finish_average_pre's bits
 * for every 16-bit pattern, and (decompression) the binary32 value
 * x * pre / divisor then the scale; pre = 1 is the plain division. */
static void test_pre_division_matches_host(void **s) {
  (void)s;
  enum { N = 65536 };
  static uint16_t in[N], want[N], got[N];
  static float back[N];
  static const int divisors[] = {2, 3, 5, 16, 1000};
  for (int t = HK_FLOAT16; t <= HK_BFLOAT16; t++)
    for (size_t k = 0; k < sizeof divisors / sizeof divisors[0]; k++) {
      const int dv = divisors[k];
      const double pre = hk_average_pre_divisor((hk_dtype)t, HK_AVERAGE, dv);
      assert_true(pre >= dv && pre < 2.0 * dv);
      for (size_t i = 0; i < N; i++)
        in[i] = (uint16_t)i;
      memcpy(want, in, sizeof want);
      hk_reduce_finish_average_pre(want, N, (hk_dtype)t, dv, pre);
      for (size_t i = 0; i < N; i++) {
        hk_elem_copy(got, in, i, t, t, 1.0, dv, (float)pre);
        if (got[i] != want[i])
          fail_msg("%s: divisor %d pre %g: pattern %#zx gives %#x, host %#x",
                   hk_dtype_name((hk_dtype)t), dv, pre, i, got[i], want[i]);
        hk_elem_copy(back, in, i, t, HK_FLOAT32, 0.5, dv, (float)pre);
        /* x * pre / divisor; x / divisor * pre where x * pre is beyond
         * binary32 (bfloat16 near its largest value) */
        float x = hk_elem_widen16(in[i], t), xp = x * (float)pre;
        x = (isinf(xp) && !isinf(x) ? x / (float)dv * (float)pre
                                    : xp / (float)dv) *
            0.5f;
        if (memcmp(&back[i], &x, 4) && !(isnan(back[i]) && isnan(x)))
          fail_msg("%s -> float32: divisor %d: pattern %#zx: %a vs %a",
                   hk_dtype_name((hk_dtype)t), dv, i, back[i], x);
      }
    }
  /* 16 ranks averaging float16 5000.0: the plain sum is +inf (80000 >
   * 65504); the pack's 5000 / 16 summed 16 times stays finite, and the
   * unpack gives 5000 back up to the float16 rounding of 16 partial sums */
  uint16_t v = hk_f32_to_f16(5000.0f), part, sum = 0, plain = 0;
  hk_elem_copy(&part, &v, 0, HK_FLOAT16, HK_FLOAT16, 1.0 / 16.0, 1, 1.0f);
  for (int r = 0; r < 16; r++) {
    hk_reduce(&sum, &sum, &part, 1, HK_FLOAT16, HK_SUM);
    hk_reduce(&plain, &plain, &v, 1, HK_FLOAT16, HK_SUM);
  }
  assert_true(isinf(hk_f16_to_f32(plain)));
  uint16_t avg;
  hk_elem_copy(&avg, &sum, 0, HK_FLOAT16, HK_FLOAT16, 1.0, 16, 16.0f);
  assert_float_equal(hk_f16_to_f32(avg), 5000.0, 5000.0 * 17 / 2048);
  assert_int_equal(avg, hk_f32_to_f16(hk_f16_to_f32(sum) * 16.0f / 16.0f));
}

/* bool is copied as it is, whatever the scale and divisor (it is never
 * reduced, so the unpack never asks for them); int16 divides as C does
 * and its scale saturates. */
static void test_bool_and_int16(void **s) {
  (void)s;
  const uint8_t b[4] = {0, 1, 2, 255};
  uint8_t bo[4] = {9, 9, 9, 9};
  for (size_t i = 0; i < 4; i++)
    hk_elem_copy(bo, b, i, HK_ELEM_BOOL, HK_ELEM_BOOL, 3.0, 7, 1.0f);
  assert_memory_equal(bo, b, 4);
  const int16_t x[5] = {-7, 7, INT16_MIN, 30000, -30000};
  int16_t y[5];
  for (size_t i = 0; i < 5; i++)
    hk_elem_copy(y, x, i, HK_ELEM_I16, HK_ELEM_I16, 1.0, 2, 1.0f);
  assert_int_equal(y[0], -3);
  assert_int_equal(y[1], 3);
  assert_int_equal(y[2], -16384);
  assert_int_equal(y[3], 15000);
  for (size_t i = 0; i < 5; i++)
    hk_elem_copy(y, x, i, HK_ELEM_I16, HK_ELEM_I16, 1.5, 1, 1.0f);
  assert_int_equal(y[0], -10); /* -10.5 toward zero */
  assert_int_equal(y[1], 10);
  assert_int_equal(y[2], INT16_MIN);
  assert_int_equal(y[3], INT16_MAX); /* 45000 saturated */
  assert_int_equal(y[4], INT16_MIN);
  /* the average's division, then the scale: -7 / 2 = -3, * -3.5 = 10.5 */
  hk_elem_copy(y, x, 0, HK_ELEM_I16, HK_ELEM_I16, -3.5, 2, 1.0f);
  assert_int_equal(y[0], 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_values_match_hk_h),
      cmocka_unit_test(test_divide_and_scale_match_host),
      cmocka_unit_test(test_compression_round_trip),
      cmocka_unit_test(test_pre_division_matches_host),
      cmocka_unit_test(test_bool_and_int16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
