/*
 * half.h - conversions between binary32 and the two 16-bit float formats hk
 * reduces: IEEE 754 binary16 ("float16", HK_FLOAT16) and bfloat16 (the top
 * 16 bits of a binary32, HK_BFLOAT16).
 *
 * These are the portable scalar reference: pure integer bit manipulation, no
 * dependence on the FPU rounding mode or on MXCSR flush-to-zero/denormals-
 * are-zero, identical on every CPU. The F16C/AVX2 kernels in
 * device/host/reduce.c are tested to give bit-identical results, and these
 * binary16 conversions match the x86 F16C instructions VCVTPH2PS/VCVTPS2PH
 * (imm8 = round to nearest even) bit for bit, NaNs included.
 *
 * NaN handling: a NaN converts to a NaN of the same sign. Narrowing keeps
 * the top significand bits that fit and sets the quiet bit, so a NaN whose
 * payload lies only in the dropped low bits still narrows to a NaN, never
 * to infinity. Widening binary16 keeps the payload and sets the quiet bit
 * (as VCVTPH2PS does); widening bfloat16 is a plain shift and keeps every
 * bit, signalling NaNs included.
 *
 * Thread-safety: pure functions.
 */
#ifndef HK_COMMON_HALF_H
#define HK_COMMON_HALF_H

#include <stdint.h>

/** The quiet NaNs the reduction kernels store for any NaN result. */
#define HK_F16_CANONICAL_NAN ((uint16_t)0x7E00)
#define HK_BF16_CANONICAL_NAN ((uint16_t)0x7FC0)

/** binary16 -> binary32. Exact for every number: subnormals become normal
 *  binary32 values, +-0 and +-inf are kept; a NaN keeps its sign and
 *  payload and becomes quiet (signalling 0x7C01 -> 0x7FC02000). */
float hk_f16_to_f32(uint16_t h);

/** binary32 -> binary16 with IEEE round-to-nearest-even. Magnitudes from
 *  65520 (the halfway point above the largest finite value, 65504) round to
 *  infinity; magnitudes up to 2^-25 (half the smallest subnormal, inclusive)
 *  round to zero; the sign is kept, also for zero. NaN -> NaN keeping the
 *  top 10 significand bits, with the quiet bit set (as VCVTPS2PH does). */
uint16_t hk_f32_to_f16(float f);

/** bfloat16 -> binary32. Exact (a 16-bit shift). */
float hk_bf16_to_f32(uint16_t h);

/** binary32 -> bfloat16 with round-to-nearest-even: adds 0x7FFF plus the
 *  lowest kept bit, then truncates, so finite values above the largest
 *  bfloat16 (0x1.FEp127) by half an ulp or more round to infinity. NaN ->
 *  NaN keeping the top 7 significand bits, with the quiet bit set. */
uint16_t hk_f32_to_bf16(float f);

#endif
