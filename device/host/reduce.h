/*
 * reduce.h - the host reduction kernels: the elementwise arithmetic of
 * allreduce (dst = a op b), run in the ring's inner loop, and the final
 * division of HK_AVERAGE. They live under device/ (the host is the device
 * of a host tensor) so that both the collectives' schedules and the
 * emulated device (device/emu, whose kernels must match the host path
 * bit for bit) use the one copy without an include pointing up a layer.
 *
 * Arithmetic: exactly the contract in include/hk/hk.h (see hk_op):
 * - float16/bfloat16: both operands widened to binary32, the op applied in
 *   binary32, the result rounded back to 16 bits, nearest-even, once per
 *   call. Any NaN result is stored as the canonical quiet NaN
 *   (HK_F16_CANONICAL_NAN 0x7E00 / HK_BF16_CANONICAL_NAN 0x7FC0 from
 *   common/half.h), so the bits do not depend on the CPU or the code path.
 * - float32/float64: IEEE arithmetic in the type (current rounding mode; a
 *   NaN result carries whatever sign/payload the hardware gives).
 * - Integers (int8, uint8, int16, int32, int64): sum and product wrap
 *   modulo 2^bits; no undefined behaviour.
 * - bool is not reduced (hk_reduce_supported is 0 for it).
 * - min/max on floats: NaN if either operand is NaN; otherwise
 *   min = (a < b ? a : b), max = (a > b ? a : b), so min(+0, -0) is -0 and
 *   min(-0, +0) is +0 (b wins ties).
 * - HK_AVERAGE reduces exactly like HK_SUM; the division by the world size
 *   happens once at the end, in hk_reduce_finish_average. For float16 and
 *   bfloat16 the callers first divide every input by a power of two
 *   (hk_average_pre_divisor), so that the sum cannot overflow where the
 *   average would not, and finish with hk_reduce_finish_average_pre.
 *
 * Speed: float32/float64/integer loops are written for the compiler's
 * auto-vectoriser (built at -O3). float16/bfloat16 use AVX2+F16C kernels
 * when the CPU has them (checked at run time on each call; the check is a
 * load and a bit test), otherwise the portable scalar path. The two paths
 * give bit-identical results, NaNs included (tests/unit/test_reduce.c).
 *
 * Thread-safety: all functions are pure apart from writing their output
 * buffer; concurrent calls on disjoint buffers are safe.
 */
#ifndef HK_DEVICE_HOST_REDUCE_H
#define HK_DEVICE_HOST_REDUCE_H

#include <stddef.h>

#include "hk/hk.h"

/**
 * dst[i] = a[i] op b[i] for i in [0, count). count is in ELEMENTS of dtype
 * (the buffers hold count * hk_dtype_size(dtype) bytes, each aligned to
 * the element size, as any array of the type is; no vector alignment is
 * needed). dst may be exactly a or exactly b (in place); any other overlap
 * is undefined. count 0 does nothing and the pointers may then be NULL.
 * HK_AVERAGE reduces as HK_SUM.
 * Precondition: hk_reduce_supported(dtype, op); an unsupported pair does
 * nothing.
 */
void hk_reduce(void *dst, const void *a, const void *b, size_t count,
               hk_dtype dtype, hk_op op);

/**
 * buf[i] = buf[i] / size for i in [0, count): the end of an HK_AVERAGE.
 * count is in ELEMENTS; buf is aligned to the element size. float32/float64
 * divide in the type; float16/bfloat16 divide in binary32 and round back to
 * nearest even (a NaN result is stored canonical, as in hk_reduce);
 * integers divide truncating toward zero (C division) the already-wrapped
 * sum, so -7 / 2 = -3.
 * size == 1 returns at once, leaving buf untouched (x / 1 == x).
 * Precondition: size >= 1 and a valid dtype; otherwise nothing is done.
 */
void hk_reduce_finish_average(void *buf, size_t count, hk_dtype dtype,
                              int size);

/**
 * The power of two an HK_AVERAGE of `divisor` ranks divides every input by
 * before the sum: for float16/bfloat16 the smallest 2^k >= divisor, else
 * (other dtypes or ops, divisor <= 1) 1.0. Dividing by a power of two
 * moves the exponent and changes no significand bit (unless a value falls
 * below the smallest normal number, where it keeps fewer bits), so every
 * partial sum is the one the ranks would have had, times 2^-k; and since
 * each scaled input is at most 1/divisor of the largest finite value, no
 * partial sum of finite inputs overflows. 16 ranks averaging float16
 * 5000.0 give 5000.0, where summing first gave +inf. Pure.
 */
double hk_average_pre_divisor(hk_dtype dtype, hk_op op, int divisor);

/**
 * The end of an average whose inputs were divided by `pre` (the value of
 * hk_average_pre_divisor): buf[i] = buf[i] * pre / size, in binary32, then
 * rounded to nearest even once (a NaN stored canonical). Where no sum
 * overflowed or fell below the normal range this gives exactly the bits
 * of hk_reduce_finish_average on the sum taken without pre-division.
 * A bfloat16 sum whose x * pre is beyond binary32 (inputs near
 * bfloat16's largest value) is finished as x / size * pre instead: the
 * average is finite where it is representable.
 * pre == 1 (or a dtype other than float16/bfloat16) is
 * hk_reduce_finish_average. count in ELEMENTS.
 */
void hk_reduce_finish_average_pre(void *buf, size_t count, hk_dtype dtype,
                                  int size, double pre);

/** Elements of buf that are +inf or -inf (floating dtypes; 0 for integer
 *  ones). count in ELEMENTS. Pure. */
size_t hk_count_inf(const void *buf, size_t count, hk_dtype dtype);

/**
 * dst[i] = src[i] * factor for i in [0, count) (ELEMENTS): Horovod's
 * prescale/postscale factors, applied while data is copied anyway (into or
 * out of the fusion buffer) or to the values a ring step just finished.
 * float32 multiplies by (float)factor, float64 by factor, float16/bfloat16
 * in binary32 then round to nearest even; integers multiply in binary64,
 * truncate toward zero and saturate to the type's range (device/elem.h's
 * hk_elem_scale_int, which the device kernels use too: -7 * 0.5 is -3,
 * 100 * 2 in int8 is 127, -1 * 2 in uint8 is 0). bool is copied.
 * dst may equal src. factor == 1 is exact (a plain copy when
 * dst != src), so int64 values beyond 2^53 pass unrounded; an unknown
 * dtype does nothing.
 */
void hk_scale_copy(void *dst, const void *src, size_t count, hk_dtype dtype,
                   double factor);

/** 1 if (dtype, op) is a pair hk reduces (every dtype but bool, with each
 *  of the 5 ops), 0 for bool or an enum value out of range. */
int hk_reduce_supported(hk_dtype dtype, hk_op op);

/** 1 if this CPU runs the AVX2+F16C float16/bfloat16 kernels, 0 if it runs
 *  the portable scalar ones. */
int hk_reduce_has_simd16(void);

/** hk_reduce / hk_reduce_finish_average forced onto the portable scalar
 *  path for float16/bfloat16 (other dtypes have only one path). Same
 *  contract and bit-identical results; for tests and cross-checks. */
void hk_reduce_portable(void *dst, const void *a, const void *b, size_t count,
                        hk_dtype dtype, hk_op op);
void hk_reduce_finish_average_portable(void *buf, size_t count, hk_dtype dtype,
                                       int size);

#endif
