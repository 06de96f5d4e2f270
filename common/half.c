/*
 * half.c - binary16/bfloat16 <-> binary32 conversions by bit manipulation.
 *
 * Formats (IEEE 754-2008 section 3.6): binary16 has 1 sign bit, 5 exponent
 * bits (bias 15) and 10 significand bits; binary32 has 8 exponent bits
 * (bias 127) and 23 significand bits; bfloat16 is binary32's top 16 bits
 * (8 exponent bits, 7 significand bits). Rounding is round-to-nearest,
 * ties-to-even, done on integers so the result does not depend on the FPU's
 * rounding mode or flush-to-zero flags.
 */
#include "common/half.h"

#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Shifts m right by `shift` (1..31) bits rounding to nearest, ties to even. */
static uint32_t shift_rne(uint32_t m, unsigned shift) {
  uint32_t half = 1u << (shift - 1);
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t r = m >> shift;
  if (rem > half || (rem == half && (r & 1u)))
    r++;
  return r;
}

float hk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) { /* inf, or NaN: payload kept, quiet bit set as
                         VCVTPH2PS sets it */
    if (mant != 0)
      mant |= 0x200u;
    return f32_from_bits(sign | 0x7F800000u | (mant << 13));
  }
  if (exp != 0) /* normal: rebias 15 -> 127 */
    return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return f32_from_bits(sign);
  /* Subnormal: mant * 2^-24. Normalise so the leading one is bit 10. */
  int e = -14;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    e--;
  }
  return f32_from_bits(sign | ((uint32_t)(e + 127) << 23) |
                       ((mant & 0x3FFu) << 13));
}

uint16_t hk_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) /* NaN: top 10 significand bits, quiet bit set */
    return (uint16_t)(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u) /* >= 65520: rounds to inf (inf included) */
    return (uint16_t)(sign | 0x7C00u);
  if (abs >= 0x38800000u) /* >= 2^-14: normal. Rebias 127 -> 15 and round;
                             a carry out of the significand bumps the
                             exponent, which is the correct result. */
    return (uint16_t)(sign | shift_rne(abs - 0x38000000u, 13));
  if (abs <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
    return sign;
  /* Subnormal result: value = m * 2^(e-150) with a 24-bit m; we want
     value * 2^24 = m >> (126 - e), 126 - e in [14, 24]. Rounding up from
     0x3FF gives 0x400, the smallest normal, which is again correct. */
  uint32_t e = abs >> 23;
  uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  return (uint16_t)(sign | shift_rne(m, 126u - e));
}

float hk_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t hk_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: must not round to inf */
    return (uint16_t)((u >> 16) | 0x40u);
  /* Round to nearest even: add just under half an ulp, plus one when the
     kept lsb is odd, then truncate. Overflow carries into inf correctly. */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
