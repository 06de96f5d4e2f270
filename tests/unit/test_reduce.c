/*
 * test_reduce.c - the CPU reduction kernels (device/host/reduce.c) against a
 * straightforward scalar reference written here, for every dtype x op,
 * counts 0, 1, 7 and 1000003, out of place and in place (dst == a,
 * dst == b); integer wrap-around; NaN propagation; the average's final
 * division; bit-equality of the AVX2+F16C and portable 16-bit paths on
 * adversarial inputs; the scale factors on integers (truncation toward
 * zero, saturation) against a reference in long double; bool, which is
 * moved but not reduced; and the dtype/op names and sizes of
 * common/dtype.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/half.h"
#include "device/host/reduce.h"

#define NDTYPES 9    /* the dtypes hk reduces: 0 .. HK_INT16 */
#define NALLTYPES 10 /* every dtype: those and bool */
#define NOPS 5

/* xorshift64*: deterministic test data. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

/* malloc that fails the test when it fails (n 0: 1 byte). */
static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

static uint16_t f16_bits(float f) { return hk_f32_to_f16(f); }
static uint16_t bf16_bits(float f) { return hk_f32_to_bf16(f); }

/* Random 16-bit float bits: 1/4 uniform over all patterns (NaN, inf,
 * subnormals included), else magnitudes 2^-4..2^6 where sums round. */
static uint16_t rand_half(unsigned exp_lo, int mant_bits) {
  uint64_t r = rnd();
  if ((r & 3) == 0)
    return (uint16_t)(r >> 16);
  unsigned exp = exp_lo + (unsigned)((r >> 8) % 11);
  uint64_t mant = r >> 32 & ((1u << mant_bits) - 1);
  return (uint16_t)((r >> 20 & 0x8000) | exp << mant_bits | mant);
}
/* fp16: biased exponents 11..21; bf16: 123..133 */
static uint16_t rand_f16(void) { return rand_half(11, 10); }
static uint16_t rand_bf16(void) { return rand_half(123, 7); }

/* Random element of any dtype written to p. Floats: 1/8 raw bit patterns
 * (NaN, inf, subnormals), else values in (-50, 50). */
static void rand_elem(hk_dtype dt, void *p) {
  uint64_t r = rnd();
  double v = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 100.0;
  int raw = (rnd() & 7) == 0;
  switch (dt) {
  case HK_FLOAT16: {
    uint16_t h = rand_f16();
    memcpy(p, &h, 2);
    break;
  }
  case HK_BFLOAT16: {
    uint16_t h = rand_bf16();
    memcpy(p, &h, 2);
    break;
  }
  case HK_FLOAT32: {
    float f = (float)v;
    if (raw)
      memcpy(p, &r, 4);
    else
      memcpy(p, &f, 4);
    break;
  }
  case HK_FLOAT64:
    if (raw)
      memcpy(p, &r, 8);
    else
      memcpy(p, &v, 8);
    break;
  default: /* integers: raw bits, all values */
    memcpy(p, &r, hk_dtype_size(dt));
    break;
  }
}

/* ---- the reference: one element, the obvious way ---- */

/* NAME: the op on two values of the floating type T (min and max give NaN
 * when either is NaN); NAME_bytes: the same on one element of T at a and
 * b, into out. */
#define REF_FLOAT_OP(T, name)                                                  \
  static T name(hk_op op, T x, T y) {                                          \
    if ((op == HK_MIN || op == HK_MAX) && (isnan(x) || isnan(y)))              \
      return NAN;                                                              \
    switch (op) {                                                              \
    case HK_SUM:                                                               \
    case HK_AVERAGE:                                                           \
      return x + y;                                                            \
    case HK_PRODUCT:                                                           \
      return x * y;                                                            \
    case HK_MIN:                                                               \
      return x < y ? x : y;                                                    \
    default:                                                                   \
      return x > y ? x : y;                                                    \
    }                                                                          \
  }                                                                            \
  static void name##_bytes(hk_op op, void *out, const void *a,                 \
                           const void *b) {                                    \
    T x, y, v;                                                                 \
    memcpy(&x, a, sizeof x);                                                   \
    memcpy(&y, b, sizeof y);                                                   \
    v = name(op, x, y);                                                        \
    memcpy(out, &v, sizeof v);                                                 \
  }
REF_FLOAT_OP(float, ref_fop)
REF_FLOAT_OP(double, ref_dop)

/* Integer op on values widened to __int128 (exact), then wrapped to
 * `bits` bits two's complement, as the reference for the kernels' wrap. */
static __int128 wrap(__int128 v, int bits, int is_signed) {
  unsigned __int128 m = ((unsigned __int128)1 << bits) - 1;
  unsigned __int128 u = (unsigned __int128)v & m;
  if (is_signed && (u >> (bits - 1)))
    return (__int128)u - ((__int128)1 << bits);
  return (__int128)u;
}
static __int128 ref_iop(hk_op op, __int128 x, __int128 y, int bits, int sgn) {
  switch (op) {
  case HK_SUM:
  case HK_AVERAGE:
    return wrap(x + y, bits, sgn);
  case HK_PRODUCT: /* |x*y| < 2^126: exact in __int128 */
    return wrap(x * y, bits, sgn);
  case HK_MIN:
    return x < y ? x : y;
  default:
    return x > y ? x : y;
  }
}

static __int128 load_int(hk_dtype dt, const void *p) {
  switch (dt) {
  case HK_INT8:
    return *(const int8_t *)p;
  case HK_UINT8:
    return *(const uint8_t *)p;
  case HK_INT16:
    return *(const int16_t *)p;
  case HK_INT32:
    return *(const int32_t *)p;
  default:
    return *(const int64_t *)p;
  }
}
static void store_int(hk_dtype dt, void *p, __int128 v) {
  switch (dt) {
  case HK_INT8:
    *(int8_t *)p = (int8_t)v;
    break;
  case HK_UINT8:
    *(uint8_t *)p = (uint8_t)v;
    break;
  case HK_INT16:
    *(int16_t *)p = (int16_t)v;
    break;
  case HK_INT32:
    *(int32_t *)p = (int32_t)v;
    break;
  default:
    *(int64_t *)p = (int64_t)v;
    break;
  }
}

static void ref_elem(hk_dtype dt, hk_op op, void *out, const void *a,
                     const void *b) {
  switch (dt) {
  case HK_FLOAT16:
  case HK_BFLOAT16: {
    int f16 = dt == HK_FLOAT16;
    uint16_t ha, hb, r;
    memcpy(&ha, a, 2);
    memcpy(&hb, b, 2);
    float x = f16 ? hk_f16_to_f32(ha) : hk_bf16_to_f32(ha);
    float y = f16 ? hk_f16_to_f32(hb) : hk_bf16_to_f32(hb);
    float v = ref_fop(op, x, y);
    if (isnan(v))
      r = f16 ? 0x7E00 : 0x7FC0; /* the documented canonical NaN */
    else
      r = f16 ? hk_f32_to_f16(v) : hk_f32_to_bf16(v);
    memcpy(out, &r, 2);
    break;
  }
  case HK_FLOAT32:
    ref_fop_bytes(op, out, a, b);
    break;
  case HK_FLOAT64:
    ref_dop_bytes(op, out, a, b);
    break;
  default: {
    int bits = (int)hk_dtype_size(dt) * 8;
    store_int(
        dt, out,
        ref_iop(op, load_int(dt, a), load_int(dt, b), bits, dt != HK_UINT8));
    break;
  }
  }
}

/* Equal bit for bit, except that two float32/float64 NaNs match whatever
 * their payloads (the hardware picks those; documented in reduce.h). */
static int elem_equal(hk_dtype dt, const void *got, const void *want) {
  if (dt == HK_FLOAT32) {
    float g, w;
    memcpy(&g, got, 4);
    memcpy(&w, want, 4);
    if (isnan(w))
      return isnan(g);
  } else if (dt == HK_FLOAT64) {
    double g, w;
    memcpy(&g, got, 8);
    memcpy(&w, want, 8);
    if (isnan(w))
      return isnan(g);
  }
  return memcmp(got, want, hk_dtype_size(dt)) == 0;
}

/* Asserts got == want elementwise; reports the first difference. */
static void check_buf(hk_dtype dt, hk_op op, const char *what, const void *got,
                      const void *want, size_t n) {
  size_t es = hk_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    const char *g = (const char *)got + i * es;
    const char *w = (const char *)want + i * es;
    if (!elem_equal(dt, g, w)) {
      uint64_t gv = 0, wv = 0;
      memcpy(&gv, g, es);
      memcpy(&wv, w, es);
      fail_msg("%s %s %s: element %zu of %zu is 0x%llx, want 0x%llx",
               hk_dtype_name(dt), hk_op_name(op), what, i, n,
               (unsigned long long)gv, (unsigned long long)wv);
    }
  }
}

/* Every dtype x op x count against the reference: out of place, dst == a,
 * dst == b, and (for 16-bit types) the portable path too. */
static void test_all_dtypes_ops_counts(void **state) {
  (void)state;
  static const size_t counts[] = {0, 1, 7, 1000003};
  for (int dt = 0; dt < NDTYPES; dt++) {
    size_t es = hk_dtype_size((hk_dtype)dt);
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      size_t n = counts[ci];
      size_t bytes = n * es + 1; /* +1: the overrun canary */
      char *a = xmalloc(bytes), *b = xmalloc(bytes), *want = xmalloc(bytes);
      char *dst = xmalloc(bytes);
      for (size_t i = 0; i < n; i++) {
        rand_elem((hk_dtype)dt, a + i * es);
        rand_elem((hk_dtype)dt, b + i * es);
      }
      for (int op = 0; op < NOPS; op++) {
        for (size_t i = 0; i < n; i++)
          ref_elem((hk_dtype)dt, (hk_op)op, want + i * es, a + i * es,
                   b + i * es);
        memset(dst, 0x5A, bytes);
        hk_reduce(dst, a, b, n, (hk_dtype)dt, (hk_op)op);
        check_buf((hk_dtype)dt, (hk_op)op, "out of place", dst, want, n);
        assert_int_equal((unsigned char)dst[n * es], 0x5A); /* no overrun */

        memset(dst, 0x5A, bytes);
        hk_reduce_portable(dst, a, b, n, (hk_dtype)dt, (hk_op)op);
        check_buf((hk_dtype)dt, (hk_op)op, "portable", dst, want, n);

        memcpy(dst, a, n * es);
        hk_reduce(dst, dst, b, n, (hk_dtype)dt, (hk_op)op);
        check_buf((hk_dtype)dt, (hk_op)op, "dst == a", dst, want, n);

        memcpy(dst, b, n * es);
        hk_reduce(dst, a, dst, n, (hk_dtype)dt, (hk_op)op);
        check_buf((hk_dtype)dt, (hk_op)op, "dst == b", dst, want, n);
      }
      free(a);
      free(b);
      free(want);
      free(dst);
    }
  }
}

/* Buffers aligned only to their element size, at different offsets from
 * any vector boundary (the SIMD paths load and store unaligned). */
static void test_unaligned_buffers(void **state) {
  (void)state;
  enum { N = 4099 };
  for (int dt = 0; dt < NDTYPES; dt++) {
    size_t es = hk_dtype_size((hk_dtype)dt);
    char *a = xmalloc((N + 1) * es), *b = xmalloc((N + 3) * es);
    char *dst = xmalloc((N + 5) * es), *want = xmalloc(N * es);
    char *pa = a + es, *pb = b + 3 * es, *pd = dst + 5 * es;
    for (size_t i = 0; i < N; i++) {
      rand_elem((hk_dtype)dt, pa + i * es);
      rand_elem((hk_dtype)dt, pb + i * es);
      ref_elem((hk_dtype)dt, HK_SUM, want + i * es, pa + i * es, pb + i * es);
    }
    hk_reduce(pd, pa, pb, N, (hk_dtype)dt, HK_SUM);
    check_buf((hk_dtype)dt, HK_SUM, "unaligned", pd, want, N);
    free(a);
    free(b);
    free(dst);
    free(want);
  }
}

static void test_count_zero_touches_nothing(void **state) {
  (void)state;
  for (int dt = 0; dt < NDTYPES; dt++) {
    for (int op = 0; op < NOPS; op++)
      hk_reduce(NULL, NULL, NULL, 0, (hk_dtype)dt, (hk_op)op);
    hk_reduce_finish_average(NULL, 0, (hk_dtype)dt, 4);
  }
  int32_t x = 7;
  hk_reduce(&x, &x, &x, 1, (hk_dtype)99, HK_SUM); /* invalid: no-op */
  assert_int_equal(x, 7);
}

/* ---- integer wrap-around ---- */

#define REDUCE1(T, DT, OP, X, Y)                                               \
  ({                                                                           \
    T x_ = (X), y_ = (Y), r_;                                                  \
    hk_reduce(&r_, &x_, &y_, 1, DT, OP);                                       \
    r_;                                                                        \
  })

static void test_integer_wrap(void **state) {
  (void)state;
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_SUM, 127, 1), -128);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_SUM, -128, -1), 127);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_AVERAGE, 100, 100), -56);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_PRODUCT, 16, 16), 0);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_PRODUCT, -128, -1), -128);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_PRODUCT, 11, 13), -113);
  assert_int_equal(REDUCE1(uint8_t, HK_UINT8, HK_SUM, 255, 1), 0);
  assert_int_equal(REDUCE1(uint8_t, HK_UINT8, HK_PRODUCT, 255, 255), 1);
  assert_int_equal(REDUCE1(int32_t, HK_INT32, HK_SUM, INT32_MAX, 1), INT32_MIN);
  assert_int_equal(REDUCE1(int32_t, HK_INT32, HK_PRODUCT, 65536, 65536), 0);
  assert_int_equal(REDUCE1(int32_t, HK_INT32, HK_PRODUCT, INT32_MIN, -1),
                   INT32_MIN);
  assert_int_equal(REDUCE1(int32_t, HK_INT32, HK_PRODUCT, 46341, 46341),
                   -2147479015); /* 2147488281 - 2^32 */
  assert_true(REDUCE1(int64_t, HK_INT64, HK_SUM, INT64_MAX, 1) == INT64_MIN);
  assert_true(REDUCE1(int64_t, HK_INT64, HK_PRODUCT, INT64_MAX, 2) == -2);
  assert_true(REDUCE1(int64_t, HK_INT64, HK_PRODUCT, INT64_MAX, INT64_MAX) ==
              1); /* (2^63-1)^2 = 2^126 - 2^64 + 1 */
  assert_true(REDUCE1(int64_t, HK_INT64, HK_PRODUCT, INT64_MIN, -1) ==
              INT64_MIN);
  assert_true(REDUCE1(int64_t, HK_INT64, HK_PRODUCT, 4294967297LL,
                      4294967297LL) == 8589934593LL); /* 2^64+2^33+1 */
  assert_true(REDUCE1(int64_t, HK_INT64, HK_MIN, INT64_MIN, INT64_MAX) ==
              INT64_MIN);
  assert_int_equal(REDUCE1(uint8_t, HK_UINT8, HK_MAX, 200, 100), 200);
  assert_int_equal(REDUCE1(int8_t, HK_INT8, HK_MAX, -56, 100), 100);
  /* int16: every op wraps or compares as int16 */
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_SUM, INT16_MAX, 1), INT16_MIN);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_SUM, -32768, -1), 32767);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_AVERAGE, 20000, 20000),
                   -25536); /* 40000 - 2^16: the average sums */
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_PRODUCT, 256, 256), 0);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_PRODUCT, -32768, -1), -32768);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_PRODUCT, -1, -1), 1);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_PRODUCT, 181, 182),
                   -32594); /* 32942 - 2^16 */
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_PRODUCT, 32767, 32767),
                   1); /* (2^15-1)^2 = 2^30 - 2^16 + 1: beyond int */
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_MIN, -32768, 32767), -32768);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_MAX, -1, -2), -1);
  assert_int_equal(REDUCE1(int16_t, HK_INT16, HK_MAX, 300, -30000), 300);
}

/* ---- floats: NaN, infinities, signed zeros, 16-bit rounding ---- */

static void test_float_min_max_nan(void **state) {
  (void)state;
  for (int op = HK_MIN; op <= HK_MAX; op++) {
    assert_true(isnan(REDUCE1(float, HK_FLOAT32, op, NAN, 1.0f)));
    assert_true(isnan(REDUCE1(float, HK_FLOAT32, op, 1.0f, NAN)));
    assert_true(isnan(REDUCE1(float, HK_FLOAT32, op, NAN, -INFINITY)));
    assert_true(isnan(REDUCE1(float, HK_FLOAT32, op, INFINITY, NAN)));
    assert_true(isnan(REDUCE1(double, HK_FLOAT64, op, NAN, 1.0)));
    assert_true(isnan(REDUCE1(double, HK_FLOAT64, op, 1.0, NAN)));
    assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, op, 0x7E00, 0x3C00), 0x7E00);
    assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, op, 0x3C00, 0xFC01),
                     0x7E00); /* any NaN in, canonical NaN out */
    assert_int_equal(REDUCE1(uint16_t, HK_BFLOAT16, op, 0x3F80, 0xFFC1),
                     0x7FC0);
  }
  /* 8 lanes at once (the SIMD path) with a NaN in each position. */
  for (int pos = 0; pos < 16; pos++) {
    float a[16], b[16], d[16];
    uint16_t ha[16], hb[16], hd[16];
    for (int i = 0; i < 16; i++) {
      a[i] = (float)i;
      b[i] = (float)(16 - i);
    }
    (pos & 1 ? a : b)[pos] = NAN;
    for (int i = 0; i < 16; i++) {
      ha[i] = f16_bits(a[i]);
      hb[i] = f16_bits(b[i]);
    }
    hk_reduce(d, a, b, 16, HK_FLOAT32, HK_MAX);
    hk_reduce(hd, ha, hb, 16, HK_FLOAT16, HK_MIN);
    for (int i = 0; i < 16; i++) {
      if (i == pos) {
        assert_true(isnan(d[i]));
        assert_int_equal(hd[i], 0x7E00);
      } else {
        assert_true(d[i] == fmaxf(a[i], b[i]));
        assert_true(hk_f16_to_f32(hd[i]) == fminf(a[i], b[i]));
      }
    }
  }
  assert_true(REDUCE1(float, HK_FLOAT32, HK_MIN, -INFINITY, 1.0f) == -INFINITY);
  assert_true(REDUCE1(double, HK_FLOAT64, HK_MAX, 3.0, INFINITY) == INFINITY);
  /* Signed zeros: b wins ties. */
  assert_true(signbit(REDUCE1(float, HK_FLOAT32, HK_MIN, 0.0f, -0.0f)));
  assert_false(signbit(REDUCE1(float, HK_FLOAT32, HK_MIN, -0.0f, 0.0f)));
}

static void test_half_pairwise_rounding(void **state) {
  (void)state;
  /* One rounding per pairwise step, nearest even. */
  uint16_t x2048 = f16_bits(2048.0f), one = f16_bits(1.0f);
  assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, HK_SUM, x2048, one), x2048);
  assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, HK_SUM, x2048, f16_bits(3)),
                   f16_bits(2052.0f));
  /* 2048 + 1 + 1 over two steps stays 2048 (a single f32 sum would be
   * 2050): the contract in hk.h. */
  uint16_t acc = x2048;
  hk_reduce(&acc, &acc, &one, 1, HK_FLOAT16, HK_SUM);
  hk_reduce(&acc, &acc, &one, 1, HK_FLOAT16, HK_SUM);
  assert_int_equal(acc, x2048);
  assert_int_equal(
      REDUCE1(uint16_t, HK_FLOAT16, HK_SUM, 0x7BFF, f16_bits(16.0f)),
      0x7C00); /* 65520 overflows to inf */
  assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, HK_SUM, 0x7C00, 0xFC00),
                   0x7E00); /* inf - inf: canonical NaN */
  assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, HK_PRODUCT, 0x0001, 0x3800),
                   0x0000); /* 2^-24 * 0.5: tie to zero */
  assert_int_equal(REDUCE1(uint16_t, HK_FLOAT16, HK_PRODUCT, 0x0003, 0x3800),
                   0x0002); /* 1.5 ulp: tie to 2 */
  assert_int_equal(REDUCE1(uint16_t, HK_BFLOAT16, HK_SUM, bf16_bits(256.0f),
                           bf16_bits(1.0f)),
                   bf16_bits(256.0f)); /* 257: tie to even */
  assert_int_equal(REDUCE1(uint16_t, HK_BFLOAT16, HK_SUM, bf16_bits(256.0f),
                           bf16_bits(3.0f)),
                   bf16_bits(260.0f)); /* 259: tie to even */
  assert_int_equal(REDUCE1(uint16_t, HK_BFLOAT16, HK_PRODUCT, 0x7F7F, 0x4000),
                   0x7F80); /* overflow to inf */
  assert_int_equal(REDUCE1(uint16_t, HK_BFLOAT16, HK_SUM, 0x7F80, 0xFF80),
                   0x7FC0);
}

/* Adversarial 16-bit inputs: the AVX2+F16C kernels and the portable ones
 * give the same bits for every op and for the average's division. Pairs:
 * uniform random bits (NaN, inf, subnormals), pairs whose exponents differ
 * by 0..13 (every rounding position, many exact ties), and subnormals. */
static void test_half_simd_matches_portable(void **state) {
  (void)state;
  if (!hk_reduce_has_simd16()) {
    skip();
    return;
  }
  enum { N = 1 << 20 };
  uint16_t *a = xmalloc(N * 2), *b = xmalloc(N * 2);
  uint16_t *d1 = xmalloc(N * 2), *d2 = xmalloc(N * 2);
  for (int dt = HK_FLOAT16; dt <= HK_BFLOAT16; dt++) {
    int mbits = dt == HK_FLOAT16 ? 10 : 7, emax = dt == HK_FLOAT16 ? 31 : 255;
    for (size_t i = 0; i < N; i++) {
      uint64_t r = rnd();
      a[i] = (uint16_t)r;
      b[i] = (uint16_t)(r >> 16);
      if (i % 3 == 1) { /* close exponents: b below a by 0..13 binades */
        int ea = (int)((r >> 32) % (unsigned)emax);
        int eb = ea - (int)((r >> 40) % 14);
        if (eb < 0)
          eb = 0;
        a[i] = (uint16_t)((a[i] & ~(emax << mbits)) | ea << mbits);
        b[i] = (uint16_t)((b[i] & ~(emax << mbits)) | eb << mbits);
      } else if (i % 3 == 2) { /* subnormal or tiny-normal operands */
        a[i] &= (uint16_t)(0x8000 | ((2u << mbits) - 1));
        b[i] &= (uint16_t)(0x8000 | ((2u << mbits) - 1));
      }
    }
    for (int op = 0; op < NOPS; op++) {
      hk_reduce(d1, a, b, N, (hk_dtype)dt, (hk_op)op);
      hk_reduce_portable(d2, a, b, N, (hk_dtype)dt, (hk_op)op);
      check_buf((hk_dtype)dt, (hk_op)op, "simd vs portable", d1, d2, N);
    }
    static const int sizes[] = {2, 3, 7, 64, 1000, 65535};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      memcpy(d1, a, N * 2);
      memcpy(d2, a, N * 2);
      hk_reduce_finish_average(d1, N, (hk_dtype)dt, sizes[s]);
      hk_reduce_finish_average_portable(d2, N, (hk_dtype)dt, sizes[s]);
      check_buf((hk_dtype)dt, HK_AVERAGE, "finish simd vs portable", d1, d2, N);
    }
  }
  free(a);
  free(b);
  free(d1);
  free(d2);
}

/* ---- the average's final division ---- */

static void test_finish_average_integers(void **state) {
  (void)state;
  int8_t i8[] = {-7, 7, -128, 127, 1, -1};
  hk_reduce_finish_average(i8, 6, HK_INT8, 2);
  assert_int_equal(i8[0], -3); /* truncation toward zero */
  assert_int_equal(i8[1], 3);
  assert_int_equal(i8[2], -64);
  assert_int_equal(i8[3], 63);
  assert_int_equal(i8[4], 0);
  assert_int_equal(i8[5], 0);
  int8_t i8big[] = {-128, 127};
  hk_reduce_finish_average(i8big, 2, HK_INT8, 200); /* size > INT8_MAX */
  assert_int_equal(i8big[0], 0);
  assert_int_equal(i8big[1], 0);
  int8_t i8m[] = {-128};
  hk_reduce_finish_average(i8m, 1, HK_INT8, 100);
  assert_int_equal(i8m[0], -1);
  uint8_t u8[] = {255, 7};
  hk_reduce_finish_average(u8, 2, HK_UINT8, 2);
  assert_int_equal(u8[0], 127);
  assert_int_equal(u8[1], 3);
  int32_t i32[] = {-7, INT32_MIN, INT32_MAX};
  hk_reduce_finish_average(i32, 3, HK_INT32, 2);
  assert_int_equal(i32[0], -3);
  assert_int_equal(i32[1], -1073741824);
  assert_int_equal(i32[2], 1073741823);
  int16_t i16[] = {-7, 7, INT16_MIN, INT16_MAX, 1};
  hk_reduce_finish_average(i16, 5, HK_INT16, 2);
  assert_int_equal(i16[0], -3);
  assert_int_equal(i16[1], 3);
  assert_int_equal(i16[2], -16384);
  assert_int_equal(i16[3], 16383);
  assert_int_equal(i16[4], 0);
  int16_t i16big[] = {INT16_MIN, INT16_MAX};
  hk_reduce_finish_average(i16big, 2, HK_INT16, 40000); /* size > INT16_MAX */
  assert_int_equal(i16big[0], 0);
  assert_int_equal(i16big[1], 0);
  int64_t i64[] = {-7, INT64_MIN, 10};
  hk_reduce_finish_average(i64, 3, HK_INT64, 3);
  assert_true(i64[0] == -2);
  assert_true(i64[1] == INT64_MIN / 3);
  assert_true(i64[2] == 3);
  /* The wrapped sum is what gets divided: 100 + 100 = -56 in int8. */
  int8_t s[] = {100}, t[] = {100};
  hk_reduce(s, s, t, 1, HK_INT8, HK_AVERAGE);
  hk_reduce_finish_average(s, 1, HK_INT8, 2);
  assert_int_equal(s[0], -28);
}

static void test_finish_average_floats(void **state) {
  (void)state;
  float f[] = {1.0f, -7.0f, INFINITY, 0x1p-149f};
  hk_reduce_finish_average(f, 4, HK_FLOAT32, 3);
  assert_true(f[0] == 1.0f / 3.0f);
  assert_true(f[1] == -7.0f / 3.0f);
  assert_true(f[2] == INFINITY);
  assert_true(f[3] == 0.0f); /* 2^-149 / 3 rounds to 0 */
  double d[] = {1.0, -7.0, NAN};
  hk_reduce_finish_average(d, 3, HK_FLOAT64, 3);
  assert_true(d[0] == 1.0 / 3.0);
  assert_true(d[1] == -7.0 / 3.0);
  assert_true(isnan(d[2]));
  /* 16-bit: divide in binary32, round once. Also over 1000003 elements so
   * the SIMD loop and the scalar tail both run, against the reference. */
  uint16_t h[] = {f16_bits(1.0f), f16_bits(-7.0f), 0x0001, 0x7C00, 0x7C01};
  hk_reduce_finish_average(h, 5, HK_FLOAT16, 3);
  assert_int_equal(h[0], 0x3555); /* 0.333251953125 */
  assert_int_equal(h[1], f16_bits(-7.0f / 3.0f));
  assert_int_equal(h[2], 0x0000); /* 2^-24 / 3 */
  assert_int_equal(h[3], 0x7C00);
  assert_int_equal(h[4], 0x7E00);
  uint16_t g[] = {bf16_bits(1.0f), bf16_bits(-7.0f), 0x7F80};
  hk_reduce_finish_average(g, 3, HK_BFLOAT16, 3);
  assert_int_equal(g[0], 0x3EAB); /* 0x3EAAAAAB rounds up */
  assert_int_equal(g[1], bf16_bits(-7.0f / 3.0f));
  assert_int_equal(g[2], 0x7F80);
  /* size 1 leaves the buffer alone, NaN payloads included. */
  uint16_t one[] = {0x7C01, 0x1234};
  hk_reduce_finish_average(one, 2, HK_FLOAT16, 1);
  assert_int_equal(one[0], 0x7C01);
  assert_int_equal(one[1], 0x1234);
}

/* Every dtype, a long buffer, against a reference division. */
static void test_finish_average_all_dtypes(void **state) {
  (void)state;
  enum { N = 1000003 };
  static const int sizes[] = {2, 3, 8, 255};
  for (int dt = 0; dt < NDTYPES; dt++) {
    size_t es = hk_dtype_size((hk_dtype)dt);
    char *buf = xmalloc(N * es), *want = xmalloc(N * es);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      int size = sizes[si];
      for (size_t i = 0; i < N; i++) {
        char *p = buf + i * es, *w = want + i * es;
        rand_elem((hk_dtype)dt, p);
        if (dt == HK_FLOAT16 || dt == HK_BFLOAT16) {
          uint16_t h, r;
          memcpy(&h, p, 2);
          float v = (dt == HK_FLOAT16 ? hk_f16_to_f32(h) : hk_bf16_to_f32(h)) /
                    (float)size;
          r = isnan(v)           ? (dt == HK_FLOAT16 ? 0x7E00 : 0x7FC0)
              : dt == HK_FLOAT16 ? hk_f32_to_f16(v)
                                 : hk_f32_to_bf16(v);
          memcpy(w, &r, 2);
        } else if (dt == HK_FLOAT32) {
          float v;
          memcpy(&v, p, 4);
          v /= (float)size;
          memcpy(w, &v, 4);
        } else if (dt == HK_FLOAT64) {
          double v;
          memcpy(&v, p, 8);
          v /= size;
          memcpy(w, &v, 8);
        } else {
          store_int((hk_dtype)dt, w, load_int((hk_dtype)dt, p) / size);
        }
      }
      hk_reduce_finish_average(buf, N, (hk_dtype)dt, size);
      check_buf((hk_dtype)dt, HK_AVERAGE, "finish", buf, want, N);
    }
    free(buf);
    free(want);
  }
}

/* An average over a power-of-two world size multiplies by the reciprocal
 * (reduce.c's float_finish_note): the bits must be the division's for
 * every bit pattern, subnormals, zeros, infinities and NaNs included. */
static void test_finish_power_of_two_is_division(void **state) {
  (void)state;
  enum { N = 200000 };
  static const int sizes[] = {1, 2, 4, 16, 1024, 1 << 23, 1 << 24, 1 << 30};
  static const uint32_t special32[] = {
      0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000003,
      0x007FFFFF, 0x00800000, 0x00800001, 0x7F7FFFFF, 0x7F800000,
      0xFF800000, 0x7FC00001, 0xFFC00000, 0x3F800000, 0x33800001};
  uint32_t *f = malloc(N * sizeof *f), *w = malloc(N * sizeof *w);
  uint64_t *d = malloc(N * sizeof *d), *wd = malloc(N * sizeof *wd);
  assert_true(f && w && d && wd);
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    srand((unsigned)si + 7);
    for (size_t i = 0; i < N; i++) {
      f[i] = i < sizeof special32 / sizeof special32[0]
                 ? special32[i]
                 : ((uint32_t)rand() << 16) ^ (uint32_t)rand();
      d[i] = i < 4 ? (uint64_t)i : ((uint64_t)f[i] << 32) ^ (uint64_t)rand();
      float v;
      memcpy(&v, &f[i], 4);
      v /= (float)sizes[si];
      memcpy(&w[i], &v, 4);
      double x;
      memcpy(&x, &d[i], 8);
      x /= sizes[si];
      memcpy(&wd[i], &x, 8);
    }
    hk_reduce_finish_average(f, N, HK_FLOAT32, sizes[si]);
    hk_reduce_finish_average(d, N, HK_FLOAT64, sizes[si]);
    check_buf(HK_FLOAT32, HK_AVERAGE, "power-of-two finish", f, w, N);
    check_buf(HK_FLOAT64, HK_AVERAGE, "power-of-two finish", d, wd, N);
  }
  free(f);
  free(w);
  free(d);
  free(wd);
}

/* ---- enums: support, sizes, names ---- */

static void test_supported_pairs(void **state) {
  (void)state;
  for (int dt = 0; dt < NDTYPES; dt++)
    for (int op = 0; op < NOPS; op++)
      assert_int_equal(hk_reduce_supported((hk_dtype)dt, (hk_op)op), 1);
  for (int op = 0; op < NOPS; op++)
    assert_int_equal(hk_reduce_supported(HK_BOOL, (hk_op)op), 0);
  assert_int_equal(hk_reduce_supported((hk_dtype)NALLTYPES, HK_SUM), 0);
  assert_int_equal(hk_reduce_supported((hk_dtype)-1, HK_SUM), 0);
  assert_int_equal(hk_reduce_supported(HK_FLOAT32, (hk_op)5), 0);
  assert_int_equal(hk_reduce_supported(HK_FLOAT32, (hk_op)-1), 0);
}

static void test_dtype_sizes_and_names(void **state) {
  (void)state;
  /* the values are fixed (the wire and the Python front carry them) */
  assert_int_equal(HK_INT16, 8);
  assert_int_equal(HK_BOOL, 9);
  static const size_t sizes[NALLTYPES] = {2, 2, 4, 8, 1, 1, 4, 8, 2, 1};
  static const char *const names[NALLTYPES] = {
      "float16", "bfloat16", "float32", "float64", "int8",
      "uint8",   "int32",    "int64",   "int16",   "bool"};
  for (int dt = 0; dt < NALLTYPES; dt++) {
    assert_int_equal(hk_dtype_size((hk_dtype)dt), sizes[dt]);
    assert_string_equal(hk_dtype_name((hk_dtype)dt), names[dt]);
  }
  assert_int_equal(hk_dtype_size((hk_dtype)NALLTYPES), 0);
  assert_int_equal(hk_dtype_size((hk_dtype)-1), 0);
  assert_string_equal(hk_dtype_name((hk_dtype)NALLTYPES), "unknown");
  assert_string_equal(hk_dtype_name((hk_dtype)-1), "unknown");
  static const char *const ops[NOPS] = {"sum", "average", "min", "max",
                                        "product"};
  for (int op = 0; op < NOPS; op++)
    assert_string_equal(hk_op_name((hk_op)op), ops[op]);
  assert_string_equal(hk_op_name((hk_op)5), "unknown");
  assert_string_equal(hk_op_name((hk_op)-1), "unknown");
}

/* 16-bit averages divide each input by a power of two first: which one,
 * and that the end gives the plain sum's bits wherever the plain sum did
 * not overflow, and a representable value where it did. */
static void test_average_pre_division(void **state) {
  (void)state;
  assert_true(hk_average_pre_divisor(HK_FLOAT16, HK_AVERAGE, 16) == 16.0);
  assert_true(hk_average_pre_divisor(HK_FLOAT16, HK_AVERAGE, 9) == 16.0);
  assert_true(hk_average_pre_divisor(HK_BFLOAT16, HK_AVERAGE, 3) == 4.0);
  assert_true(hk_average_pre_divisor(HK_FLOAT16, HK_AVERAGE, 1) == 1.0);
  assert_true(hk_average_pre_divisor(HK_FLOAT16, HK_SUM, 16) == 1.0);
  assert_true(hk_average_pre_divisor(HK_FLOAT32, HK_AVERAGE, 16) == 1.0);
  assert_true(hk_average_pre_divisor(HK_INT32, HK_AVERAGE, 16) == 1.0);

  /* every normal float16 sum S and world sizes 2..64: S scaled down by
   * the pre-divisor, finished, equals S finished the old way */
  for (int n = 2; n <= 64; n++) {
    double p = hk_average_pre_divisor(HK_FLOAT16, HK_AVERAGE, n);
    for (uint32_t bits = 0; bits < 0x7c00; bits += 7) {
      uint16_t s16 = (uint16_t)bits, scaled, plain = s16;
      float f = hk_f16_to_f32(s16);
      if (fabsf(f) / (float)p < 0x1p-14f)
        continue; /* below the normal range the scaled sum keeps fewer bits */
      scaled = hk_f32_to_f16(f / (float)p);
      hk_reduce_finish_average(&plain, 1, HK_FLOAT16, n);
      hk_reduce_finish_average_pre(&scaled, 1, HK_FLOAT16, n, p);
      if (scaled != plain)
        fail_msg("n=%d sum 0x%04x: 0x%04x, plain 0x%04x", n, bits, scaled,
                 plain);
    }
  }
  /* 16 ranks of float16 5000.0 summed one after the other, as the ring
   * does: summed first it is inf; divided first every partial sum is in
   * range and the average is 5000 but for float16's rounding of the
   * partial sums (4996) */
  uint16_t in = hk_f32_to_f16(5000.0f), acc, sum = in;
  hk_scale_copy(&acc, &in, 1, HK_FLOAT16, 1.0 / 16.0);
  uint16_t part = acc;
  for (int r = 1; r < 16; r++) {
    hk_reduce(&acc, &acc, &part, 1, HK_FLOAT16, HK_SUM);
    hk_reduce(&sum, &sum, &in, 1, HK_FLOAT16, HK_SUM);
  }
  hk_reduce_finish_average_pre(&acc, 1, HK_FLOAT16, 16, 16.0);
  assert_true(fabsf(hk_f16_to_f32(acc) - 5000.0f) <= 8.0f);
  assert_int_equal(hk_count_inf(&sum, 1, HK_FLOAT16), 1);
  /* bfloat16 takes the same path; pre 1 is the plain finish */
  uint16_t b = hk_f32_to_bf16(3.0f), b2 = b;
  hk_reduce_finish_average_pre(&b, 1, HK_BFLOAT16, 2, 1.0);
  hk_reduce_finish_average(&b2, 1, HK_BFLOAT16, 2);
  assert_int_equal(b, b2);
}

/* bfloat16 has binary32's range: an average whose inputs are near its
 * largest value (each finite, the average finite) must end finite, as
 * the pre-division promised, though the sum times the pre-divisor is
 * beyond binary32 (3 ranks of 1.5e38: pre 4, the pre-divided sum 1.125e38,
 * times 4 is 4.5e38 = inf in binary32, where 1.125e38 / 3 * 4 is not). */
static void test_average_pre_division_bf16_near_max(void **state) {
  (void)state;
  static const float vals[] = {1.5e38f, 3.0e38f, 3.38e38f, -3.38e38f};
  for (size_t vi = 0; vi < sizeof vals / sizeof vals[0]; vi++)
    for (int n = 2; n <= 64; n++) {
      const double p = hk_average_pre_divisor(HK_BFLOAT16, HK_AVERAGE, n);
      uint16_t in = hk_f32_to_bf16(vals[vi]), part, acc;
      hk_scale_copy(&part, &in, 1, HK_BFLOAT16, 1.0 / p);
      acc = part;
      for (int r = 1; r < n; r++)
        hk_reduce(&acc, &acc, &part, 1, HK_BFLOAT16, HK_SUM);
      const float sum = hk_bf16_to_f32(acc);
      hk_reduce_finish_average_pre(&acc, 1, HK_BFLOAT16, n, p);
      /* the pre-divided sum, divided, then scaled back: exact scalings by
       * powers of two around one rounded division */
      const uint16_t want = hk_f32_to_bf16(sum / (float)n * (float)p);
      if (acc != want || hk_count_inf(&acc, 1, HK_BFLOAT16) != 0)
        fail_msg("n=%d, bfloat16 average of %g: 0x%04x (%g), want 0x%04x "
                 "(%g)",
                 n, (double)vals[vi], acc, (double)hk_bf16_to_f32(acc), want,
                 (double)hk_bf16_to_f32(want));
    }
}

/* ---- the scale factors on integers ---- */

/* The rule of hk.h (hk_allreduce_scaled_async), written independently of
 * device/elem.h: the binary64 product x * f, truncated toward zero by
 * truncl and clamped in long double (whose 64-bit significand holds every
 * int64 and 2^63 exactly). */
static __int128 ref_scale(__int128 x, double f, __int128 lo, __int128 hi) {
  double y = (double)(int64_t)x * f; /* the product hk.h names */
  if (isnan(y))
    return 0;
  long double t = truncl((long double)y);
  if (t <= (long double)lo)
    return lo;
  if (t >= (long double)hi)
    return hi;
  return (__int128)t;
}

/* The range of integer dtype dt (uint8 the only unsigned one). */
static void int_limits(hk_dtype dt, __int128 *lo, __int128 *hi) {
  const int bits = (int)hk_dtype_size(dt) * 8;
  *hi = dt == HK_UINT8 ? 255 : ((__int128)1 << (bits - 1)) - 1;
  *lo = dt == HK_UINT8 ? 0 : -*hi - 1;
}

#define SCALE1(T, DT, X, F)                                                    \
  ({                                                                           \
    T x_ = (X), r_;                                                            \
    hk_scale_copy(&r_, &x_, 1, DT, F);                                         \
    r_;                                                                        \
  })

/* Worked cases on every integer type: truncation toward zero, saturation
 * at both limits, negative factors, factor 1 exact beyond 2^53. */
static void test_scale_integers_cases(void **state) {
  (void)state;
  /* truncation toward zero, both signs */
  assert_int_equal(SCALE1(int8_t, HK_INT8, -7, 0.5), -3);
  assert_int_equal(SCALE1(int8_t, HK_INT8, 7, 0.5), 3);
  assert_int_equal(SCALE1(uint8_t, HK_UINT8, 7, 0.5), 3);
  assert_int_equal(SCALE1(int16_t, HK_INT16, -7, 0.5), -3);
  assert_int_equal(SCALE1(int32_t, HK_INT32, -7, 0.5), -3);
  assert_true(SCALE1(int64_t, HK_INT64, -7, 0.5) == -3);
  assert_int_equal(SCALE1(int16_t, HK_INT16, 10, 1.0 / 3.0), 3);
  assert_int_equal(SCALE1(int32_t, HK_INT32, 3, 1.0 / 3.0),
                   1); /* 3 * 0.333..33 rounds to 1.0 exactly */
  assert_int_equal(SCALE1(int32_t, HK_INT32, 49, 1.0 / 49.0),
                   0); /* 0.99999999999999989: truncated, not rounded */
  assert_int_equal(SCALE1(int16_t, HK_INT16, -1, 0.999), 0);
  /* negative factors */
  assert_int_equal(SCALE1(int8_t, HK_INT8, 5, -2.5), -12);
  assert_int_equal(SCALE1(int16_t, HK_INT16, -300, -1.5), 450);
  assert_int_equal(SCALE1(uint8_t, HK_UINT8, 5, -1.0), 0);    /* saturated */
  assert_int_equal(SCALE1(uint8_t, HK_UINT8, 1, -0.5), 0);    /* -0 */
  assert_int_equal(SCALE1(int8_t, HK_INT8, -128, -1.0), 127); /* 128 */
  assert_int_equal(SCALE1(int16_t, HK_INT16, INT16_MIN, -1.0), INT16_MAX);
  assert_int_equal(SCALE1(int32_t, HK_INT32, INT32_MIN, -1.0), INT32_MAX);
  assert_true(SCALE1(int64_t, HK_INT64, INT64_MIN, -1.0) == INT64_MAX);
  /* saturation at the top and the bottom */
  assert_int_equal(SCALE1(int8_t, HK_INT8, 100, 2.0), 127);
  assert_int_equal(SCALE1(int8_t, HK_INT8, -100, 2.0), -128);
  assert_int_equal(SCALE1(int8_t, HK_INT8, 64, 1.99), 127); /* 127.36 */
  assert_int_equal(SCALE1(uint8_t, HK_UINT8, 200, 2.0), 255);
  assert_int_equal(SCALE1(int16_t, HK_INT16, 30000, 2.0), INT16_MAX);
  assert_int_equal(SCALE1(int16_t, HK_INT16, -30000, 1.5), INT16_MIN);
  assert_int_equal(SCALE1(int16_t, HK_INT16, 16384, 1.9999), 32766);
  assert_int_equal(SCALE1(int32_t, HK_INT32, INT32_MAX, 2.0), INT32_MAX);
  assert_int_equal(SCALE1(int32_t, HK_INT32, -2, 1e300), INT32_MIN);
  assert_true(SCALE1(int64_t, HK_INT64, INT64_MAX, 2.0) == INT64_MAX);
  assert_true(SCALE1(int64_t, HK_INT64, INT64_MIN, 2.0) == INT64_MIN);
  assert_true(SCALE1(int64_t, HK_INT64, 3, 1e30) == INT64_MAX);
  assert_true(SCALE1(int64_t, HK_INT64, -3, 1e30) == INT64_MIN);
  assert_true(SCALE1(int64_t, HK_INT64, INT64_MAX, 1e308) ==
              INT64_MAX); /* the product is +inf */
  assert_true(SCALE1(int64_t, HK_INT64, 1LL << 62, 2.0) ==
              INT64_MAX); /* 2^63: one past the largest */
  assert_true(SCALE1(int64_t, HK_INT64, -(1LL << 62), 2.0) ==
              INT64_MIN); /* -2^63 exactly: in range */
  assert_true(SCALE1(int64_t, HK_INT64, 1LL << 61, 3.0) ==
              3LL << 61); /* 0.75 * 2^63: in range, exact */
  /* binary64: an int64 beyond 2^53 is rounded by the conversion, unless
   * the factor is 1, which is exact */
  assert_true(SCALE1(int64_t, HK_INT64, (1LL << 53) + 1, 2.0) == (1LL << 54));
  assert_true(SCALE1(int64_t, HK_INT64, (1LL << 53) + 1, 1.0) ==
              (1LL << 53) + 1);
  assert_true(SCALE1(int64_t, HK_INT64, INT64_MAX, 1.0) == INT64_MAX);
  /* a zero factor gives zeros; a NaN (which the API refuses) gives 0 */
  assert_int_equal(SCALE1(int16_t, HK_INT16, -300, 0.0), 0);
  assert_int_equal(SCALE1(int32_t, HK_INT32, 5, NAN), 0);
  /* in place, over many elements */
  int16_t v[1000];
  for (int i = 0; i < 1000; i++)
    v[i] = (int16_t)(i * 65 - 32500);
  hk_scale_copy(v, v, 1000, HK_INT16, -0.75);
  for (int i = 0; i < 1000; i++)
    assert_int_equal(v[i], (int16_t)(-(i * 65 - 32500) * 3 / 4));
}

/* Random values of every integer type x factors (fractional, negative,
 * huge, tiny) against ref_scale, out of place and in place. */
static void test_scale_integers_sweep(void **state) {
  (void)state;
  static const hk_dtype ints[] = {HK_INT8, HK_UINT8, HK_INT16, HK_INT32,
                                  HK_INT64};
  static const double factors[] = {
      0.5,  -0.5,  2.5,     -2.5,         1.0 / 3.0, 3.0,
      -3.0, 1e-3,  1e30,    -1e30,        1e-30,     0.0,
      -1.0, 255.5, 65536.0, 4294967296.0, 0.9999999, 1.0000001};
  enum { N = 4099 };
  for (size_t t = 0; t < sizeof ints / sizeof ints[0]; t++) {
    const hk_dtype dt = ints[t];
    const size_t es = hk_dtype_size(dt);
    __int128 lo, hi;
    int_limits(dt, &lo, &hi);
    char *in = xmalloc(N * es + 1), *out = xmalloc(N * es + 1),
         *want = xmalloc(N * es + 1);
    for (size_t i = 0; i < N; i++) {
      uint64_t r = rnd();
      if (i % 4 == 1) /* small values, where fractions matter */
        r = (uint64_t)((int64_t)(r % 2001) - 1000);
      memcpy(in + i * es, &r, es);
    }
    for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++) {
      for (size_t i = 0; i < N; i++)
        store_int(dt, want + i * es,
                  ref_scale(load_int(dt, in + i * es), factors[f], lo, hi));
      memset(out, 0x5A, N * es + 1);
      hk_scale_copy(out, in, N, dt, factors[f]);
      check_buf(dt, HK_SUM, "scale", out, want, N);
      assert_int_equal((unsigned char)out[N * es], 0x5A); /* no overrun */
      memcpy(out, in, N * es);
      hk_scale_copy(out, out, N, dt, factors[f]);
      check_buf(dt, HK_SUM, "scale in place", out, want, N);
    }
    free(in);
    free(out);
    free(want);
  }
}

/* bool: hk moves it and never reduces it: every op does nothing, the
 * average's end does nothing, a scale copies the bytes as they are. */
static void test_bool_is_not_reduced(void **state) {
  (void)state;
  uint8_t a[5] = {0, 1, 2, 255, 1}, b[5] = {1, 1, 0, 7, 0};
  uint8_t d[5] = {9, 9, 9, 9, 9};
  for (int op = 0; op < NOPS; op++) {
    hk_reduce(d, a, b, 5, HK_BOOL, (hk_op)op);
    for (int i = 0; i < 5; i++)
      assert_int_equal(d[i], 9);
  }
  hk_reduce_finish_average(a, 5, HK_BOOL, 2);
  assert_int_equal(a[1], 1);
  assert_int_equal(a[2], 2);
  hk_scale_copy(d, a, 5, HK_BOOL, 3.0);
  assert_memory_equal(d, a, 5);
  assert_int_equal(hk_count_inf(a, 5, HK_BOOL), 0);
}

static void test_count_inf(void **state) {
  (void)state;
  const uint16_t h[4] = {0x7c00, 0xfc00, 0x7e00, 0x7bff}; /* +inf -inf nan */
  assert_int_equal(hk_count_inf(h, 4, HK_FLOAT16), 2);
  const uint16_t bf[3] = {0x7f80, 0xff80, 0x7fc0};
  assert_int_equal(hk_count_inf(bf, 3, HK_BFLOAT16), 2);
  const float f[3] = {INFINITY, -INFINITY, NAN};
  assert_int_equal(hk_count_inf(f, 3, HK_FLOAT32), 2);
  const double d[2] = {HUGE_VAL, 1.0};
  assert_int_equal(hk_count_inf(d, 2, HK_FLOAT64), 1);
  const int32_t i[1] = {0x7f800000};
  assert_int_equal(hk_count_inf(i, 1, HK_INT32), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_dtypes_ops_counts),
      cmocka_unit_test(test_unaligned_buffers),
      cmocka_unit_test(test_count_zero_touches_nothing),
      cmocka_unit_test(test_integer_wrap),
      cmocka_unit_test(test_float_min_max_nan),
      cmocka_unit_test(test_half_pairwise_rounding),
      cmocka_unit_test(test_half_simd_matches_portable),
      cmocka_unit_test(test_finish_average_integers),
      cmocka_unit_test(test_finish_average_floats),
      cmocka_unit_test(test_finish_average_all_dtypes),
      cmocka_unit_test(test_finish_power_of_two_is_division),
      cmocka_unit_test(test_average_pre_division),
      cmocka_unit_test(test_average_pre_division_bf16_near_max),
      cmocka_unit_test(test_scale_integers_cases),
      cmocka_unit_test(test_scale_integers_sweep),
      cmocka_unit_test(test_bool_is_not_reduced),
      cmocka_unit_test(test_count_inf),
      cmocka_unit_test(test_supported_pairs),
      cmocka_unit_test(test_dtype_sizes_and_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
