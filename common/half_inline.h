/*
 * half_inline.h - the binary16/bfloat16 <-> binary32 conversions as static
 * inline functions that compile both as host C and as CUDA device code
 * (__CUDACC__). common/half.h's functions are these; device/elem.h builds
 * the device kernels' arithmetic on them, so the GPU rounds exactly as
 * the CPU does. Formats and rounding: see common/half.h.
 * Thread-safety: pure functions.
 */
#ifndef HK_COMMON_HALF_INLINE_H
#define HK_COMMON_HALF_INLINE_H

#include <stdint.h>

#ifdef __CUDACC__
#define HK_ELEM_FN static __host__ __device__ inline
#else
#define HK_ELEM_FN static inline
#endif

HK_ELEM_FN uint32_t hk_elem_f32_bits(float f) {
  union {
    float f;
    uint32_t u;
  } x;
  x.f = f;
  return x.u;
}

HK_ELEM_FN float hk_elem_f32_from_bits(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } x;
  x.u = u;
  return x.f;
}

/* m >> shift (1..31), rounding to nearest, ties to even. */
HK_ELEM_FN uint32_t hk_elem_shift_rne(uint32_t m, unsigned shift) {
  uint32_t half = 1u << (shift - 1);
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t r = m >> shift;
  if (rem > half || (rem == half && (r & 1u)))
    r++;
  return r;
}

/** binary16 -> binary32, exactly as hk_f16_to_f32. */
HK_ELEM_FN float hk_elem_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {
    if (mant != 0)
      mant |= 0x200u;
    return hk_elem_f32_from_bits(sign | 0x7F800000u | (mant << 13));
  }
  if (exp != 0)
    return hk_elem_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return hk_elem_f32_from_bits(sign);
  int e = -14;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    e--;
  }
  return hk_elem_f32_from_bits(sign | ((uint32_t)(e + 127) << 23) |
                               ((mant & 0x3FFu) << 13));
}

/** binary32 -> binary16, round to nearest even, exactly as hk_f32_to_f16. */
HK_ELEM_FN uint16_t hk_elem_f32_to_f16(float f) {
  uint32_t u = hk_elem_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u)
    return (uint16_t)(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u)
    return (uint16_t)(sign | 0x7C00u);
  if (abs >= 0x38800000u)
    return (uint16_t)(sign | hk_elem_shift_rne(abs - 0x38000000u, 13));
  if (abs <= 0x33000000u)
    return sign;
  uint32_t e = abs >> 23;
  uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  return (uint16_t)(sign | hk_elem_shift_rne(m, 126u - e));
}

/** bfloat16 -> binary32 (a shift). */
HK_ELEM_FN float hk_elem_bf16_to_f32(uint16_t h) {
  return hk_elem_f32_from_bits((uint32_t)h << 16);
}

/** binary32 -> bfloat16, round to nearest even, as hk_f32_to_bf16. */
HK_ELEM_FN uint16_t hk_elem_f32_to_bf16(float f) {
  uint32_t u = hk_elem_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* The end of a 16-bit average whose inputs were divided by pre (a power
 * of two, hk_average_pre_divisor): x * pre / divisor in binary32, one
 * rounding (x * pre is exact). bfloat16 has binary32's range, so x * pre
 * can pass binary32's largest value where the average does not (3 ranks
 * of 1.5e38: 1.125e38 * 4): then x / divisor * pre, the same rounding of
 * the same quotient, scaled by a power of two after it. The host finish
 * (device/host/reduce.c) and the device kernels (device/elem.h) both use
 * it, so their bits agree. */
HK_ELEM_FN float hk_elem_undo_pre(float x, float pre, float divisor) {
  const float y = x * pre;
  /* y - y is NaN only for an infinite y (or NaN); x - x == 0: x finite */
  if (y - y != 0.0f && x - x == 0.0f)
    return x / divisor * pre;
  return y / divisor;
}

#endif
