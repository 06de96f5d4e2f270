/*
 * test_train_lowp.c - examples/train's mixed-precision pieces: rounding to
 * binary16 against the compiler's _Float16 conversion (round to nearest
 * even) over a spread of binary32 bit patterns (where the compiler has
 * _Float16) and on hand-picked values, bfloat16 rounding on
 * hand-picked values (ties, carries, NaN), packing and widening, and
 * GradScaler's state machine (scaler.h).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lowp.h"
#include "scaler.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_fp16_matches_compiler(void **state) {
  (void)state;
#ifndef __FLT16_MAX__
  skip(); /* this compiler has no _Float16 to compare with */
#else
  long checked = 0;
  /* Every 4099th pattern (all exponents, signs, mantissas) and the edges. */
  const uint32_t edges[] = {0x477FE000u, 0x477FEFFFu, 0x477FF000u,
                            0x38800000u, 0x387FFFFFu, 0x33800000u,
                            0x33000000u, 0x33000001u, 0x80000000u};
  for (uint64_t k = 0; k < (1ull << 32) + 9;
       k += (k < (1ull << 32) ? 4099 : 1)) {
    uint32_t u = k < (1ull << 32) ? (uint32_t)k : edges[k - (1ull << 32)];
    float f = from_bits(u), r = f;
    lowp_round(&r, 1, LOWP_FP16);
    _Float16 h = (_Float16)f;
    float want = (float)h;
    uint16_t bits, want_bits;
    memcpy(&want_bits, &h, 2);
    lowp_pack(&bits, &f, 1, LOWP_FP16);
    if (isnan(f)) {
      assert_true(isnan(r));
      assert_int_equal(bits & 0x7C00, 0x7C00);
      assert_true(bits & 0x3FF);
      continue;
    }
    if (memcmp(&r, &want, 4) != 0 || bits != want_bits)
      fail_msg("%a: rounded %a, packed %04x; _Float16 %a, %04x", (double)f,
               (double)r, bits, (double)want, want_bits);
    float back;
    lowp_unpack(&back, &bits, 1, LOWP_FP16);
    assert_memory_equal(&back, &want, 4);
    checked++;
  }
  assert_true(checked > 1000000);
#endif
  /* Named cases: the largest finite, the first overflow, a tie to even. */
  float v[4] = {65504.0f, 65520.0f, 1.0f + 1.0f / 2048.0f,
                1.0f + 3.0f / 2048.0f};
  lowp_round(v, 4, LOWP_FP16);
  assert_true(v[0] == 65504.0f);
  assert_true(isinf(v[1]));
  assert_true(v[2] == 1.0f);                  /* tie: down to even */
  assert_true(v[3] == 1.0f + 2.0f / 1024.0f); /* tie: up to even */
}

/* binary16 by hand, any compiler: rounding, packing and widening. */
static void test_fp16_values(void **state) {
  (void)state;
  float in[8] = {1.0f,
                 -2.5f,
                 65504.0f,
                 5.9604645e-8f /* 2^-24 */,
                 6.1035156e-5f /* 2^-14 */,
                 2.9802322e-8f /* tie: to 0 */,
                 -0.0f,
                 INFINITY};
  const uint16_t want[8] = {0x3C00, 0xC100, 0x7BFF, 0x0001,
                            0x0400, 0x0000, 0x8000, 0x7C00};
  uint16_t b[8];
  float out[8];
  lowp_pack(b, in, 8, LOWP_FP16);
  lowp_unpack(out, b, 8, LOWP_FP16);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(b[i], want[i]);
    if (i != 5)
      assert_true(out[i] == in[i] && signbit(out[i]) == signbit(in[i]));
  }
  assert_true(out[5] == 0.0f);
  float r[3] = {3.0e-8f, 70000.0f, -1.0f - 1.0f / 1024.0f - 1.0f / 4096.0f};
  lowp_round(r, 3, LOWP_FP16);
  assert_true(r[0] == 5.9604645e-8f); /* above the tie: up to 2^-24 */
  assert_true(isinf(r[1]));
  assert_true(r[2] == -1.0f - 1.0f / 1024.0f);
  uint16_t nan_bits = 0x7E00;
  lowp_unpack(out, &nan_bits, 1, LOWP_FP16);
  assert_true(isnan(out[0]));
}

static void test_bf16(void **state) {
  (void)state;
  float v[6] = {1.0f + 1.0f / 256.0f,   /* tie: down to even (1) */
                1.0f + 3.0f / 256.0f,   /* tie: up to 1 + 4/256 */
                1.0f + 1.0f / 200.0f,   /* above the tie: up */
                from_bits(0x7F7FFFFFu), /* FLT_MAX: carries into inf */
                -0.0f,
                NAN};
  lowp_round(v, 6, LOWP_BF16);
  assert_true(v[0] == 1.0f);
  assert_true(v[1] == 1.0f + 4.0f / 256.0f);
  assert_true(v[2] == 1.0f + 2.0f / 256.0f);
  assert_true(isinf(v[3]));
  assert_true(v[4] == 0.0f && signbit(v[4]));
  assert_true(isnan(v[5]));
  float in[3] = {3.140625f, -2.0f, 1e-30f}, out[3];
  uint16_t b[3];
  lowp_pack(b, in, 3, LOWP_BF16);
  assert_int_equal(b[0], 0x4049); /* 3.140625 = 0x40490000 */
  assert_int_equal(b[1], 0xC000);
  lowp_unpack(out, b, 3, LOWP_BF16);
  assert_true(out[0] == 3.140625f && out[1] == -2.0f);
  assert_true(fabsf(out[2] - 1e-30f) < 1e-32f);
  /* fp32: untouched; names round-trip. */
  float keep = 1.0f / 3.0f, x = keep;
  lowp_round(&x, 1, LOWP_FP32);
  assert_true(x == keep);
  lowp_kind k;
  assert_int_equal(lowp_parse("bf16", &k), 0);
  assert_int_equal(k, LOWP_BF16);
  assert_string_equal(lowp_name(LOWP_FP16), "fp16");
  assert_int_equal(lowp_parse("fp8", &k), -1);
}

static void test_scaler(void **state) {
  (void)state;
  loss_scaler s;
  scaler_init(&s, 1);
  assert_true(s.scale == 65536.0f);
  assert_int_equal(scaler_update(&s, 0), 0); /* overflow: skip, halve */
  assert_true(s.scale == 32768.0f);
  assert_int_equal(s.skipped, 1);
  for (int i = 0; i < SCALER_GROWTH_INTERVAL - 1; i++)
    assert_int_equal(scaler_update(&s, 1), 1);
  assert_true(s.scale == 32768.0f); /* 1999 good steps: not yet */
  assert_int_equal(scaler_update(&s, 1), 1);
  assert_true(s.scale == 65536.0f); /* the 2000th doubles it */
  assert_int_equal(s.good, 0);
  for (int i = 0; i < 10; i++)
    scaler_update(&s, 1);
  assert_int_equal(scaler_update(&s, 0), 0); /* resets the good run */
  assert_int_equal(s.good, 0);
  assert_true(s.scale == 32768.0f);
  assert_int_equal(s.skipped, 2);
  loss_scaler off;
  scaler_init(&off, 0);
  assert_true(off.scale == 1.0f);
  assert_int_equal(scaler_update(&off, 0), 1); /* disabled: always apply */
  float g[3] = {1.0f, -2.0f, 0.0f};
  assert_int_equal(scaler_all_finite(g, 3), 1);
  g[1] = INFINITY;
  assert_int_equal(scaler_all_finite(g, 3), 0);
  g[1] = NAN;
  assert_int_equal(scaler_all_finite(g, 3), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp16_matches_compiler),
      cmocka_unit_test(test_fp16_values),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_scaler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
