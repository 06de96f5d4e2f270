/*
 * kernels.h - the cuda backend's kernels (device/cuda/kernels.cu), called
 * from the host code of the module (device/cuda/cuda.c). C linkage, so
 * cuda.c is plain C compiled by the host compiler and only kernels.cu goes
 * through nvcc.
 *
 * Every function enqueues work on `stream` and returns at once with the
 * launch status (cudaGetLastError after the launch): cudaSuccess, or the
 * reason the launch was refused (e.g. cudaErrorNoKernelImageForDevice when
 * the module was built without code for this GPU). Failures of the work
 * itself surface later, through the stream's events.
 *
 * The caller has checked the arguments (dtype pairs, element alignment,
 * NULL pointers) and made the right device current. Thread-safety: any
 * thread; one stream fed by one thread at a time (device.h).
 */
#ifndef HK_DEVICE_CUDA_KERNELS_H
#define HK_DEVICE_CUDA_KERNELS_H

#include <stddef.h>

#ifndef HKC_EMULATE /* (tests/gpu/cuda_emu.h stands in for it) */
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#include "device/device.h"

/** Threads per block of every hk kernel. */
#define HKC_THREADS 256

/** Items of a batched copy per launch: they travel as the kernel's
 *  parameter (48 bytes each, 64 x 48 = 3072 bytes, 3088 with the batch's
 *  counts, under the 4 KiB that every CUDA version and architecture
 *  accepts; kernels.cu asserts both sizes), so a launch needs no staging
 *  buffer whose lifetime would have to follow the stream. */
#define HKC_ITEMS_PER_LAUNCH 64

/**
 * Blocks of the batched copy kernel that fit on one multiprocessor at
 * once (cudaOccupancyMaxActiveBlocksPerMultiprocessor) into
 * *blocks_per_sm. Also the module's check that it holds code this GPU can
 * run: cudaErrorNoKernelImageForDevice otherwise.
 */
cudaError_t hkc_occupancy(int *blocks_per_sm);

/**
 * Enqueues items[0..n) (device.h's hk_dev_copy, element arithmetic of
 * device/elem.h's hk_elem_copy) in ceil(n / HKC_ITEMS_PER_LAUNCH)
 * launches; items with count 0 are skipped. target_blocks: blocks that
 * fill the GPU once (multiprocessors x hkc_occupancy); each launch spreads
 * about that many over its items in proportion to their bytes, at least
 * one each. The items array is read before returning.
 */
cudaError_t hkc_batch_copy(const hk_dev_copy *items, size_t n, int src_dtype,
                           int dst_dtype, int target_blocks,
                           cudaStream_t stream);

/**
 * Fills count elements of elem_bytes (1, 2, 4 or 8) bytes at p (aligned to
 * elem_bytes) with the first elem_bytes bytes of value (8 bytes, memory
 * order).
 */
cudaError_t hkc_fill(void *p, size_t count, int elem_bytes,
                     const unsigned char value[8], int target_blocks,
                     cudaStream_t stream);

/**
 * The conversions of the communicator's int16 reductions (NCCL has no
 * 16-bit integer type; cuda.c reduces int16 in int32): wide != 0
 * sign-extends count int16 at src into int32 at dst; wide == 0 stores the
 * low 16 bits of count int32 at src as int16 at dst (two's complement: an
 * int32 sum or product of int16 values, wrapped, gives the int16 one
 * wrapped; a min or max is exact). src and dst must not overlap; each is
 * aligned to its element size.
 */
cudaError_t hkc_int16_convert(void *dst, const void *src, size_t count,
                              int wide, int target_blocks, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
