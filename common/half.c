/*
 * half.c - binary16/bfloat16 <-> binary32 conversions by bit manipulation.
 *
 * Formats (IEEE 754-2008 section 3.6): binary16 has 1 sign bit, 5 exponent
 * bits (bias 15) and 10 significand bits; binary32 has 8 exponent bits
 * (bias 127) and 23 significand bits; bfloat16 is binary32's top 16 bits
 * (8 exponent bits, 7 significand bits). Rounding is round-to-nearest,
 * ties-to-even, done on integers so the result does not depend on the FPU's
 * rounding mode or flush-to-zero flags. The code is common/half_inline.h,
 * which the device kernels compile too.
 */
#include "common/half.h"

#include "common/half_inline.h"

float hk_f16_to_f32(uint16_t h) { return hk_elem_f16_to_f32(h); }
uint16_t hk_f32_to_f16(float f) { return hk_elem_f32_to_f16(f); }
float hk_bf16_to_f32(uint16_t h) { return hk_elem_bf16_to_f32(h); }
uint16_t hk_f32_to_bf16(float f) { return hk_elem_f32_to_bf16(f); }
