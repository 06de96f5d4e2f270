/*
 * elem.h - the per-element arithmetic of hk's device kernels (pack, unpack,
 * scale, average, float16/bfloat16 conversion), written once as static
 * inline C that compiles both as host C (the emu backend, tests) and as
 * CUDA device code (device/cuda/kernels.cu), so CPU CI checks the bits
 * the GPU computes.
 *
 * The conversions are common/half.h's, bit for bit (IEEE round to nearest
 * even done on integers, so no FPU mode matters); tests/unit/test_elem.c
 * compares every binary16 and a sweep of binary32 values with half.c.
 * The average's division and the scale match hk_reduce_finish_average and
 * hk_scale_copy (device/host/reduce.h) bit for bit, including the
 * canonical NaN the average stores for 16-bit types.
 *
 * Thread-safety: pure functions.
 */
#ifndef HK_DEVICE_ELEM_H
#define HK_DEVICE_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include "common/half_inline.h"

/* hk_dtype's values, repeated so .cu files need not include hk.h's enum
 * (they may; these must stay equal, checked in test_elem.c). */
enum {
  HK_ELEM_F16 = 0,
  HK_ELEM_BF16 = 1,
  HK_ELEM_F32 = 2,
  HK_ELEM_F64 = 3,
  HK_ELEM_I8 = 4,
  HK_ELEM_U8 = 5,
  HK_ELEM_I32 = 6,
  HK_ELEM_I64 = 7,
  HK_ELEM_I16 = 8,
  HK_ELEM_BOOL = 9,
};

/* A 16-bit float widened (dtype HK_ELEM_F16 or HK_ELEM_BF16). */
HK_ELEM_FN float hk_elem_widen16(uint16_t v, int dtype) {
  return dtype == HK_ELEM_F16 ? hk_elem_f16_to_f32(v) : hk_elem_bf16_to_f32(v);
}

HK_ELEM_FN uint16_t hk_elem_narrow16(float f, int dtype) {
  return dtype == HK_ELEM_F16 ? hk_elem_f32_to_f16(f) : hk_elem_f32_to_bf16(f);
}

/* The average's rounding: any NaN is stored canonical (reduce.h). */
HK_ELEM_FN uint16_t hk_elem_narrow16_canonical(float f, int dtype) {
  if (f != f)
    return dtype == HK_ELEM_F16 ? (uint16_t)0x7E00u : (uint16_t)0x7FC0u;
  return hk_elem_narrow16(f, dtype);
}

/**
 * Horovod's scale factor on an integer x of a type whose range is
 * [lo, hi]: x * f in binary64 (x converted first, exactly up to 2^53 in
 * magnitude), truncated toward zero, and saturated to [lo, hi]; a NaN
 * product (no finite factor gives one) is 0. Horovod's ScaleBuffer
 * (horovod/common/ops/collective_operations.h, cuda_kernels.cu) computes
 * the same product and truncates, but leaves a result outside the type
 * undefined (C++'s conversion), where this saturates.
 */
HK_ELEM_FN int64_t hk_elem_scale_int(int64_t x, double f, int64_t lo,
                                     int64_t hi) {
  double y = (double)x * f;
  if (y != y)
    return 0;
  if (y <= (double)lo) /* -2^63 and the narrower limits are exact */
    return lo;
  if (y >= (double)hi) /* (double)INT64_MAX is 2^63, itself beyond */
    return hi;
  return (int64_t)y; /* in (lo, hi): truncation toward zero is defined */
}

/* One integer case of hk_elem_copy: the average's C division in W (int,
 * or the type itself for 32 and 64 bits), then the scale. */
#define HK_ELEM_INT_CASE(TAG, T, W, LO, HI)                                    \
  case TAG: {                                                                  \
    T x = ((const T *)src)[i];                                                 \
    if (div)                                                                   \
      x = (T)((W)x / (W)divisor);                                              \
    if (mul)                                                                   \
      x = (T)hk_elem_scale_int((int64_t)x, scale, LO, HI);                     \
    ((T *)dst)[i] = x;                                                         \
    return;                                                                    \
  }

/**
 * Element i of one batched copy (device.h's hk_dev_copy): reads src[i] of
 * src_dtype, divides by divisor when divisor > 1 (HK_AVERAGE; a 16-bit
 * source is first multiplied by pre when pre > 1, the power of two its
 * inputs were divided by, hk_average_pre_divisor: hk_elem_undo_pre's
 * x * pre / divisor in binary32, one rounding, as
 * hk_reduce_finish_average_pre), multiplies
 * by scale when scale != 1 (integers by hk_elem_scale_int), and stores
 * dst[i] as dst_dtype. bool is copied as it is (it is never divided or
 * scaled: hk does not reduce it).
 * Source and destination dtypes are equal, or one is float32 and the
 * other float16/bfloat16 (compression). Each step rounds to the stored
 * type as the host kernels do: a 16-bit value is divided in binary32 and
 * rounded (canonical NaN), then scaled in binary32 and rounded again.
 */
HK_ELEM_FN void hk_elem_copy(void *dst, const void *src, size_t i,
                             int src_dtype, int dst_dtype, double scale,
                             int divisor, float pre) {
  int div = divisor > 1;
  int mul = scale != 1.0;
  switch (src_dtype) {
  case HK_ELEM_F64: {
    double x = ((const double *)src)[i];
    if (div)
      x = x / (double)divisor;
    if (mul)
      x = x * scale;
    ((double *)dst)[i] = x;
    return;
  }
  case HK_ELEM_F32: {
    float x = ((const float *)src)[i];
    if (div)
      x = x / (float)divisor;
    if (mul)
      x = x * (float)scale;
    if (dst_dtype == HK_ELEM_F32)
      ((float *)dst)[i] = x;
    else /* compression: float32 -> 16 bits */
      ((uint16_t *)dst)[i] = hk_elem_narrow16(x, dst_dtype);
    return;
  }
  case HK_ELEM_F16:
  case HK_ELEM_BF16: {
    uint16_t v = ((const uint16_t *)src)[i];
    if (dst_dtype == HK_ELEM_F32) { /* decompression: widen exactly */
      float x = hk_elem_widen16(v, src_dtype);
      if (div) /* x * pre exact (a power of two), then / divisor */
        x = hk_elem_undo_pre(x, pre > 1.0f ? pre : 1.0f, (float)divisor);
      if (mul)
        x = x * (float)scale;
      ((float *)dst)[i] = x;
      return;
    }
    if (div)
      v = hk_elem_narrow16_canonical(
          hk_elem_undo_pre(hk_elem_widen16(v, src_dtype),
                           pre > 1.0f ? pre : 1.0f, (float)divisor),
          src_dtype);
    if (mul)
      v = hk_elem_narrow16(hk_elem_widen16(v, src_dtype) * (float)scale,
                           src_dtype);
    ((uint16_t *)dst)[i] = v;
    return;
  }
    HK_ELEM_INT_CASE(HK_ELEM_I8, int8_t, int, INT8_MIN, INT8_MAX)
    HK_ELEM_INT_CASE(HK_ELEM_U8, uint8_t, int, 0, UINT8_MAX)
    HK_ELEM_INT_CASE(HK_ELEM_I16, int16_t, int, INT16_MIN, INT16_MAX)
    HK_ELEM_INT_CASE(HK_ELEM_I32, int32_t, int32_t, INT32_MIN, INT32_MAX)
    HK_ELEM_INT_CASE(HK_ELEM_I64, int64_t, int64_t, INT64_MIN, INT64_MAX)
  case HK_ELEM_BOOL:
    ((uint8_t *)dst)[i] = ((const uint8_t *)src)[i];
    return;
  }
}

#undef HK_ELEM_INT_CASE

#endif
