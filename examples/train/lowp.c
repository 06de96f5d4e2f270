/*
 * lowp.c - float32 <-> bfloat16 / binary16 (see lowp.h).
 */
#include "lowp.h"

#include <math.h>
#include <string.h>

static const char *const names[] = {"fp32", "bf16", "fp16"};

const char *lowp_name(lowp_kind k) { return names[k]; }

int lowp_parse(const char *s, lowp_kind *out) {
  for (int k = 0; k < 3; k++)
    if (!strcmp(s, names[k])) {
      *out = (lowp_kind)k;
      return 0;
    }
  return -1;
}

static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it NaN (quiet) */
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f rounded to the nearest binary16 value (ties to even), as a float.
 * Bit arithmetic rather than a _Float16 cast, which needs GCC >= 12 and
 * compiles to a libgcc call on x86-64 without F16C (20 ns a value
 * measured, this: ~3):
 * normal range: keep 10 of binary32's 23 mantissa bits, rounding the 13
 * dropped ones, a carry bumping the exponent; subnormal range (below
 * 2^-14): multiples of 2^-24, which adding and subtracting 0.75 (whose
 * ulp is 2^-24) rounds to, the sign kept; overflow: >= 65520 becomes inf. */
static float f16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) /* inf or NaN */
    return f;
  if (a < 0x38800000u) {                  /* |f| < 2^-14 */
    volatile float big = 0.75f;           /* volatile: no folding of (f+c)-c */
    return copysignf((f + big) - big, f); /* -0 stays -0 */
  }
  a += 0xFFFu + ((a >> 13) & 1u);
  a &= ~0x1FFFu;
  if (a > 0x477FE000u) /* above 65504 */
    a = 0x7F800000u;
  u = (u & 0x80000000u) | a;
  memcpy(&f, &u, 4);
  return f;
}

/* The binary16 bits of f16_round(f). */
static uint16_t f16_bits(float f) {
  float r = f16_round(f);
  uint32_t u;
  memcpy(&u, &r, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) /* inf, or NaN kept quiet */
    return (uint16_t)(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u));
  if (a < 0x38800000u) { /* subnormal or zero: a multiple of 2^-24 */
    float m;
    memcpy(&m, &a, 4);
    return (uint16_t)(sign | (uint16_t)(m * 16777216.0f));
  }
  return (uint16_t)(sign | ((a >> 13) - (112u << 10)));
}

/* binary16 bits -> the float of the same value (exact). */
static float f16_value(uint16_t b) {
  uint32_t sign = (uint32_t)(b & 0x8000u) << 16;
  uint32_t exp = (b >> 10) & 0x1Fu, mant = b & 0x3FFu, u;
  if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
    float f = (float)mant * 5.9604645e-8f;
    return sign ? -f : f;
  }
  if (exp == 0x1F) /* inf or NaN (its payload kept) */
    u = sign | 0x7F800000u | (mant << 13);
  else
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void lowp_round(float *v, size_t n, lowp_kind k) {
  if (k == LOWP_BF16)
    for (size_t i = 0; i < n; i++)
      v[i] = bf16_value(bf16_bits(v[i]));
  else if (k == LOWP_FP16)
    for (size_t i = 0; i < n; i++)
      v[i] = f16_round(v[i]);
}

void lowp_copy(float *dst, const float *v, size_t n, lowp_kind k) {
  memcpy(dst, v, n * sizeof *v);
  lowp_round(dst, n, k);
}

void lowp_pack(uint16_t *dst, const float *v, size_t n, lowp_kind k) {
  for (size_t i = 0; i < n; i++)
    dst[i] = k == LOWP_BF16 ? bf16_bits(v[i]) : f16_bits(v[i]);
}

void lowp_unpack(float *dst, const uint16_t *src, size_t n, lowp_kind k) {
  for (size_t i = 0; i < n; i++)
    dst[i] = k == LOWP_BF16 ? bf16_value(src[i]) : f16_value(src[i]);
}
