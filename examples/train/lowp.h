/*
 * lowp.h - the trainer's compute precisions (--precision fp32|bf16|fp16):
 * rounding float32 values to bfloat16 or IEEE binary16 and back, and
 * packing them into 16-bit words for hk's HK_BFLOAT16 / HK_FLOAT16
 * tensors.
 *
 * Rounding is to nearest, ties to even (the IEEE default, what CUDA's
 * __float2half_rn and __float2bfloat16_rn do). binary16 is bit arithmetic
 * (lowp.c; no compiler _Float16 needed; the tests check it against
 * _Float16 where the compiler has it); bfloat16 is the
 * top 16 bits of the binary32 after rounding (Kalamkar et al., "A Study
 * of BFLOAT16 for Deep Learning Training", 2019), NaN kept NaN. binary16
 * overflows to +-inf above 65504; bfloat16 has binary32's range.
 *
 * Pure functions; thread-safe.
 */
#ifndef HK_TRAIN_LOWP_H
#define HK_TRAIN_LOWP_H

#include <stddef.h>
#include <stdint.h>

typedef enum lowp_kind {
  LOWP_FP32 = 0, /* no rounding */
  LOWP_BF16 = 1,
  LOWP_FP16 = 2,
} lowp_kind;

/** "fp32", "bf16", "fp16". */
const char *lowp_name(lowp_kind k);

/** The kind named s ("fp32", "bf16", "fp16"); 0, or -1 for another name. */
int lowp_parse(const char *s, lowp_kind *out);

/** Rounds v[0..n) in place to kind k's values (still stored as float);
 *  a no-op for LOWP_FP32. */
void lowp_round(float *v, size_t n, lowp_kind k);

/** dst[0..n) = v[0..n) rounded to k (LOWP_FP32: a copy). */
void lowp_copy(float *dst, const float *v, size_t n, lowp_kind k);

/** Packs v[0..n) into 16-bit words of kind k (BF16 or FP16). */
void lowp_pack(uint16_t *dst, const float *v, size_t n, lowp_kind k);

/** Widens n 16-bit words of kind k (BF16 or FP16) into floats (exact). */
void lowp_unpack(float *dst, const uint16_t *src, size_t n, lowp_kind k);

#endif
