/*
 * cuda_emu.h - just enough of CUDA for device/cuda/kernels.cu to compile
 * as host C++ and run on the CPU (HKC_EMULATE; tests/gpu/kernels_emu.cpp),
 * so CPU CI checks the kernels' indexing (items to blocks, grid-stride
 * loops, head/vector/tail splits, alignment choices) against hk_elem_copy
 * bit for bit, under ASan too. A launch runs every block and every thread
 * of it in turn; kernels whose threads never wait for each other and write
 * disjoint bytes give the same result as on a GPU. What it cannot check:
 * the GPU's float arithmetic, memory model and speed (test_cuda and
 * cuda_copybw do, on a GPU).
 *
 * The C part (types and error codes) is what kernels.h needs; the rest is
 * C++ for kernels.cu. Single-threaded: one emulated launch at a time.
 */
#ifndef HK_TESTS_GPU_CUDA_EMU_H
#define HK_TESTS_GPU_CUDA_EMU_H

#include <stddef.h>

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
} cudaError_t;
typedef struct CUstream_st *cudaStream_t;

#ifdef __cplusplus
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __grid_constant__

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct hkc_dim3 {
  unsigned x, y, z;
};
inline hkc_dim3 threadIdx, blockIdx, gridDim;

/* Runs f as every thread of `blocks` blocks of `threads` threads. */
template <class F>
void hkc_emulate_launch(unsigned blocks, unsigned threads, F f) {
  gridDim = {blocks, 1, 1};
  for (unsigned b = 0; b < blocks; b++)
    for (unsigned t = 0; t < threads; t++) {
      blockIdx = {b, 0, 0};
      threadIdx = {t, 0, 0};
      f();
    }
}

inline cudaError_t cudaGetLastError() { return cudaSuccess; }

/* 8 blocks of 256 threads fill a multiprocessor of 2048 threads. */
template <class K>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int,
                                                          size_t) {
  *n = 8;
  return cudaSuccess;
}
#endif

#endif
