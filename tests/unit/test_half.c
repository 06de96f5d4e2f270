/*
 * test_half.c - binary16/bfloat16 <-> binary32 conversions (common/half.c):
 * exhaustive round trips, known values, round-to-nearest-even at every
 * halfway point between neighbouring 16-bit values, NaN handling, and
 * bit-equality with the x86 F16C instructions when the CPU has them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/half.h"
#include "device/host/reduce.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static int f16_is_nan(uint16_t h) { return (h & 0x7FFFu) > 0x7C00u; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7FFFu) > 0x7F80u; }

/* ---------------------------------------------------------------- f16 */

static void test_f16_roundtrip_all(void **state) {
  (void)state;
  for (uint32_t h = 0; h <= 0xFFFFu; h++) {
    float f = hk_f16_to_f32((uint16_t)h);
    uint16_t back = hk_f32_to_f16(f);
    if (f16_is_nan((uint16_t)h)) {
      assert_true(isnan(f));
      assert_int_equal(!!signbit(f), h >> 15);
      /* Payload kept, quiet bit set. */
      assert_int_equal(back, h | 0x200u);
    } else {
      assert_int_equal(back, h);
    }
  }
}

static void test_f16_known_values(void **state) {
  (void)state;
  assert_true(hk_f16_to_f32(0x3C00) == 1.0f);
  assert_true(hk_f16_to_f32(0xC000) == -2.0f);
  assert_true(hk_f16_to_f32(0x7BFF) == 65504.0f);
  assert_true(hk_f16_to_f32(0x0400) == 0x1p-14f);   /* smallest normal */
  assert_true(hk_f16_to_f32(0x0001) == 0x1p-24f);   /* smallest subnormal */
  assert_true(hk_f16_to_f32(0x03FF) == 0x3FFp-24f); /* largest subnormal */
  assert_true(hk_f16_to_f32(0x8001) == -0x1p-24f);
  assert_int_equal(bits(hk_f16_to_f32(0x0000)), 0x00000000u);
  assert_int_equal(bits(hk_f16_to_f32(0x8000)), 0x80000000u);
  assert_int_equal(bits(hk_f16_to_f32(0x7C00)), 0x7F800000u);
  assert_int_equal(bits(hk_f16_to_f32(0xFC00)), 0xFF800000u);
  assert_int_equal(bits(hk_f16_to_f32(0x7E00)), 0x7FC00000u);
  /* Signalling NaN: payload kept, quieted. */
  assert_int_equal(bits(hk_f16_to_f32(0x7C01)), 0x7FC02000u);
  assert_int_equal(bits(hk_f16_to_f32(0xFD55)), 0xFFEAA000u);

  assert_int_equal(hk_f32_to_f16(1.0f), 0x3C00);
  assert_int_equal(hk_f32_to_f16(-2.0f), 0xC000);
  assert_int_equal(hk_f32_to_f16(65504.0f), 0x7BFF);
  assert_int_equal(hk_f32_to_f16(0.0f), 0x0000);
  assert_int_equal(hk_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(hk_f32_to_f16(INFINITY), 0x7C00);
  assert_int_equal(hk_f32_to_f16(-INFINITY), 0xFC00);
  assert_int_equal(hk_f32_to_f16(0.1f), 0x2E66); /* 0.0999755859375 */
}

static void test_f16_round_nearest_even(void **state) {
  (void)state;
  /* Around 2048 the f16 spacing is 2: odd integers are ties. */
  assert_int_equal(hk_f32_to_f16(2048.0f), 0x6800);
  assert_int_equal(hk_f32_to_f16(2049.0f), 0x6800); /* tie -> even 2048 */
  assert_int_equal(hk_f32_to_f16(2050.0f), 0x6801);
  assert_int_equal(hk_f32_to_f16(2051.0f), 0x6802); /* tie -> even 2052 */
  assert_int_equal(hk_f32_to_f16(nextafterf(2049.0f, 3000.0f)), 0x6801);
  assert_int_equal(hk_f32_to_f16(nextafterf(2051.0f, 0.0f)), 0x6801);
  assert_int_equal(hk_f32_to_f16(-2049.0f), 0xE800);
  /* Overflow: 65520 is the tie between 65504 (odd) and 65536 (inf). */
  assert_int_equal(hk_f32_to_f16(65520.0f), 0x7C00);
  assert_int_equal(hk_f32_to_f16(-65520.0f), 0xFC00);
  assert_int_equal(hk_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7BFF);
  assert_int_equal(hk_f32_to_f16(1e10f), 0x7C00);
  assert_int_equal(hk_f32_to_f16(3.4028235e38f), 0x7C00);
  /* Underflow: 2^-25 is the tie between 0 (even) and 2^-24. */
  assert_int_equal(hk_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(hk_f32_to_f16(0x1p-25f), 0x0000);
  assert_int_equal(hk_f32_to_f16(-0x1p-25f), 0x8000);
  assert_int_equal(hk_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
  assert_int_equal(hk_f32_to_f16(0x1p-26f), 0x0000);
  assert_int_equal(hk_f32_to_f16(0x1p-149f), 0x0000); /* f32 subnormal */
  assert_int_equal(hk_f32_to_f16(0x1p-126f), 0x0000);
  /* Subnormal ties: 1.5 ulp -> 2, 2.5 ulp -> 2, 3.5 ulp -> 4. */
  assert_int_equal(hk_f32_to_f16(3 * 0x1p-25f), 0x0002);
  assert_int_equal(hk_f32_to_f16(5 * 0x1p-25f), 0x0002);
  assert_int_equal(hk_f32_to_f16(7 * 0x1p-25f), 0x0004);
  /* Largest subnormal + half an ulp ties up into the smallest normal. */
  assert_int_equal(hk_f32_to_f16(0x7FFp-25f), 0x0400);
  assert_int_equal(hk_f32_to_f16(nextafterf(0x7FFp-25f, 0.0f)), 0x03FF);
  /* Carry from the significand into the exponent: 1.99951171875 + tie. */
  assert_int_equal(hk_f32_to_f16(0x7FFp-10f + 0x1p-11f), 0x4000);
}

/* For every pair of neighbouring finite f16 values lo < hi (both signs):
 * lo itself, just above lo, just below the midpoint, the midpoint (tie:
 * the even one), just above the midpoint and just below hi. Independent of
 * the implementation: it only needs exact f16 -> f32 and f32 nextafterf. */
static void test_f16_every_halfway_point(void **state) {
  (void)state;
  for (uint32_t h = 0; h <= 0x7BFFu; h++) {
    for (int neg = 0; neg <= 1; neg++) {
      uint16_t s = neg ? 0x8000 : 0;
      float sg = neg ? -1.0f : 1.0f;
      uint16_t lo_h = (uint16_t)(s | h), hi_h = (uint16_t)(s | (h + 1));
      float lo = hk_f16_to_f32(lo_h);
      float hi = h == 0x7BFFu ? sg * 65536.0f : hk_f16_to_f32(hi_h);
      float mid = (lo + hi) / 2; /* exact: needs one more bit than f16 */
      uint16_t even = (h & 1) ? hi_h : lo_h;
      assert_int_equal(hk_f32_to_f16(lo), lo_h);
      assert_int_equal(hk_f32_to_f16(nextafterf(lo, hi)), lo_h);
      assert_int_equal(hk_f32_to_f16(nextafterf(mid, lo)), lo_h);
      assert_int_equal(hk_f32_to_f16(mid), even);
      assert_int_equal(hk_f32_to_f16(nextafterf(mid, hi)), hi_h);
      assert_int_equal(hk_f32_to_f16(nextafterf(hi, lo)), hi_h);
    }
  }
}

static void test_f16_nan(void **state) {
  (void)state;
  assert_int_equal(hk_f32_to_f16(NAN), 0x7E00);
  assert_int_equal(hk_f32_to_f16(from_bits(0x7FC00000u)), 0x7E00);
  assert_int_equal(hk_f32_to_f16(from_bits(0xFFC00000u)), 0xFE00);
  /* Payload only in the 13 dropped bits: still NaN (quiet), not inf. */
  assert_int_equal(hk_f32_to_f16(from_bits(0x7F800001u)), 0x7E00);
  assert_int_equal(hk_f32_to_f16(from_bits(0xFF801FFFu)), 0xFE00);
  /* Top payload bits kept; all-ones must not carry into the sign. */
  assert_int_equal(hk_f32_to_f16(from_bits(0x7FFFFFFFu)), 0x7FFF);
  assert_int_equal(hk_f32_to_f16(from_bits(0x7F802000u)), 0x7E01);
  assert_true(isnan(hk_f16_to_f32(0x7C01)));
  assert_true(isnan(hk_f16_to_f32(0xFFFF)));
}

#if HAVE_X86
__attribute__((target("avx2,f16c"))) static uint32_t hw_f16_to_f32(uint16_t h) {
  return bits(_mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16((short)h))));
}
__attribute__((target("avx2,f16c"))) static uint16_t hw_f32_to_f16(float f) {
  __m128i r = _mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT);
  return (uint16_t)_mm_extract_epi16(r, 0);
}
#endif

/* The scalar converters equal VCVTPH2PS (all 65536 inputs) and VCVTPS2PH
 * (every 251st binary32 bit pattern, ~17 million, all classes) bit for bit.
 * (All 2^32 were checked once by hand: 0 differences.) */
static void test_f16_matches_f16c(void **state) {
  (void)state;
#if HAVE_X86
  if (!hk_reduce_has_simd16()) { /* AVX2 and F16C, probed with CPUID */
    skip();
    return;
  }
  for (uint32_t h = 0; h <= 0xFFFFu; h++)
    assert_int_equal(bits(hk_f16_to_f32((uint16_t)h)),
                     hw_f16_to_f32((uint16_t)h));
  uint64_t mismatches = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 251) {
    float f = from_bits((uint32_t)u);
    mismatches += hk_f32_to_f16(f) != hw_f32_to_f16(f);
  }
  assert_int_equal(mismatches, 0);
#else
  skip();
#endif
}

/* --------------------------------------------------------------- bf16 */

static void test_bf16_roundtrip_all(void **state) {
  (void)state;
  for (uint32_t h = 0; h <= 0xFFFFu; h++) {
    float f = hk_bf16_to_f32((uint16_t)h);
    assert_int_equal(bits(f), h << 16); /* widening is exact */
    uint16_t back = hk_f32_to_bf16(f);
    if (bf16_is_nan((uint16_t)h)) {
      assert_true(isnan(f));
      assert_int_equal(back, h | 0x40u); /* payload kept, quieted */
    } else {
      assert_int_equal(back, h);
    }
  }
}

static void test_bf16_known_values(void **state) {
  (void)state;
  assert_true(hk_bf16_to_f32(0x3F80) == 1.0f);
  assert_true(hk_bf16_to_f32(0xC000) == -2.0f);
  assert_true(hk_bf16_to_f32(0x7F7F) == 0x1.FEp127f);
  assert_true(hk_bf16_to_f32(0x0001) == 0x1p-133f); /* smallest subnormal */
  assert_int_equal(hk_f32_to_bf16(1.0f), 0x3F80);
  assert_int_equal(hk_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(hk_f32_to_bf16(INFINITY), 0x7F80);
  assert_int_equal(hk_f32_to_bf16(-INFINITY), 0xFF80);
  assert_int_equal(hk_f32_to_bf16(0.1f), 0x3DCD); /* 0x3DCCCCCD rounds up */
  assert_int_equal(hk_f32_to_bf16(3.0e38f), 0x7F62);
}

static void test_bf16_round_nearest_even(void **state) {
  (void)state;
  /* 1 + 2^-8 is the tie between 0x3F80 (even) and 0x3F81. */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x3F808000u)), 0x3F80);
  assert_int_equal(hk_f32_to_bf16(from_bits(0x3F807FFFu)), 0x3F80);
  assert_int_equal(hk_f32_to_bf16(from_bits(0x3F808001u)), 0x3F81);
  /* Tie between 0x3F81 (odd) and 0x3F82 (even). */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x3F818000u)), 0x3F82);
  assert_int_equal(hk_f32_to_bf16(257.0f), 0x4380); /* 257: tie -> 256 */
  assert_int_equal(hk_f32_to_bf16(259.0f), 0x4382); /* 259: tie -> 260 */
  /* Overflow: the tie above the largest finite (odd 0x7F7F) goes to inf. */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7F7F8000u)), 0x7F80);
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7F7F7FFFu)), 0x7F7F);
  assert_int_equal(hk_f32_to_bf16(3.4028235e38f), 0x7F80); /* FLT_MAX */
  assert_int_equal(hk_f32_to_bf16(-3.4028235e38f), 0xFF80);
  /* Subnormals round like everything else; the tie at 2^-134 goes to 0. */
  assert_int_equal(hk_f32_to_bf16(0x1p-134f), 0x0000);
  assert_int_equal(hk_f32_to_bf16(nextafterf(0x1p-134f, 1.0f)), 0x0001);
  assert_int_equal(hk_f32_to_bf16(0x1p-149f), 0x0000);
  /* Carry from the subnormal range into the smallest normal. */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x007FC000u)), 0x0080);
}

static void test_bf16_every_halfway_point(void **state) {
  (void)state;
  for (uint32_t h = 0; h <= 0x7F7Fu; h++) {
    for (int neg = 0; neg <= 1; neg++) {
      uint32_t s = neg ? 0x8000u : 0;
      uint16_t lo_h = (uint16_t)(s | h), hi_h = (uint16_t)(s | (h + 1));
      float lo = hk_bf16_to_f32(lo_h);
      float hi = hk_bf16_to_f32(hi_h); /* 0x7F80 is inf, the right bound */
      /* The midpoint is lo's bits + 0x8000: exact. */
      float mid = from_bits(((uint32_t)lo_h << 16) + 0x8000u);
      uint16_t even = (h & 1) ? hi_h : lo_h;
      assert_int_equal(hk_f32_to_bf16(lo), lo_h);
      assert_int_equal(hk_f32_to_bf16(nextafterf(lo, hi)), lo_h);
      assert_int_equal(hk_f32_to_bf16(nextafterf(mid, lo)), lo_h);
      assert_int_equal(hk_f32_to_bf16(mid), even);
      assert_int_equal(hk_f32_to_bf16(nextafterf(mid, hi)), hi_h);
      if (!isinf(hi))
        assert_int_equal(hk_f32_to_bf16(nextafterf(hi, lo)), hi_h);
    }
  }
}

static void test_bf16_nan(void **state) {
  (void)state;
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7FC00000u)), 0x7FC0);
  assert_int_equal(hk_f32_to_bf16(from_bits(0xFFC00000u)), 0xFFC0);
  /* Payload only in the low 16 bits: plain rounding would give inf. */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7F800001u)), 0x7FC0);
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7F80FFFFu)), 0x7FC0);
  assert_int_equal(hk_f32_to_bf16(from_bits(0xFF808000u)), 0xFFC0);
  /* All-ones payload: plain rounding would carry into the sign bit. */
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7FFFFFFFu)), 0x7FFF);
  assert_int_equal(hk_f32_to_bf16(from_bits(0x7F810000u)), 0x7FC1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_roundtrip_all),
      cmocka_unit_test(test_f16_known_values),
      cmocka_unit_test(test_f16_round_nearest_even),
      cmocka_unit_test(test_f16_every_halfway_point),
      cmocka_unit_test(test_f16_nan),
      cmocka_unit_test(test_f16_matches_f16c),
      cmocka_unit_test(test_bf16_roundtrip_all),
      cmocka_unit_test(test_bf16_known_values),
      cmocka_unit_test(test_bf16_round_nearest_even),
      cmocka_unit_test(test_bf16_every_halfway_point),
      cmocka_unit_test(test_bf16_nan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
