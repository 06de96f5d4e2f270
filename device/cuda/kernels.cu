/*
 * kernels.cu - the cuda backend's kernels: the batched copy that packs
 * tensors into and unpacks them out of the fusion buffer (with scaling,
 * the average's division and float16/bfloat16 conversion fused in), and
 * fill, and the int16 <-> int32 conversion of the communicator's int16
 * reductions. Interface and conventions: device/cuda/kernels.h.
 *
 * Bits: every element that is not a plain byte copy goes through
 * device/elem.h's hk_elem_copy, the function the CPU tests and the emu
 * backend use. The fast paths only change how bytes are moved (16-byte
 * vectors, several loads in flight per thread), never the arithmetic; a
 * plain copy (same dtype, no divisor, scale 1) is what hk_elem_copy does
 * too: it loads and stores the element unchanged.
 *
 * Work split: one launch takes up to HKC_ITEMS_PER_LAUNCH items in its
 * parameter; the host gives each item a range of blocks in proportion to
 * its bytes (at least one), so one large tensor gets about a GPU's worth of
 * blocks and a small one a single block. Block b finds its item by binary
 * search over the items' first blocks and runs a grid-stride loop over the
 * item with the item's blocks. Each iteration of a thread moves
 * HKC_UNROLL vectors of 16 bytes (all loads issued before any store), so a
 * block of 256 threads keeps 16 KiB in flight: the memory-level parallelism
 * a device-to-device copy needs to reach the bandwidth of HBM (designed for
 * >= 0.9 of cudaMemcpy's device-to-device rate on batches of 64 MiB and
 * more; measured only on a GPU, by scripts/device-check.sh).
 *
 * Alignment: a plain copy uses the widest vector (16, 8, 4, 2 or 1 bytes)
 * that src and dst share modulo 16, with a few head and tail bytes done
 * singly; an arithmetic item uses 16-byte groups (on its wider side) when
 * src and dst reach such a boundary after the same number of head
 * elements, else it runs element by element.
 */
#include <stdint.h>
#include <string.h>

#ifndef HKC_EMULATE
#include <cuda_runtime.h>
#endif

#include "device/cuda/kernels.h"
#include "device/elem.h"

/* A launch of `kernel` on `blocks` blocks of HKC_THREADS threads. Under
 * HKC_EMULATE (tests/gpu/kernels_emu.cpp: this file compiled as host C++
 * for CPU CI) it runs every block and thread in turn on the CPU; that is
 * exact for these kernels, whose threads never wait for one another and
 * write disjoint bytes. */
#ifdef HKC_EMULATE
#define HKC_PRAGMA_UNROLL
#define HKC_LAUNCH(kernel, blocks, stream, ...)                                \
  do {                                                                         \
    (void)(stream);                                                            \
    hkc_emulate_launch((blocks), HKC_THREADS, [&] { kernel(__VA_ARGS__); });   \
  } while (0)
#else
#define HKC_PRAGMA_UNROLL _Pragma("unroll")
#define HKC_LAUNCH(kernel, blocks, stream, ...)                                \
  kernel<<<(blocks), HKC_THREADS, 0, (stream)>>>(__VA_ARGS__)
#endif

#define HKC_UNROLL 4

namespace {

/* One item of a launch: device.h's hk_dev_copy plus its first block. */
struct Item {
  char *dst;
  const char *src;
  unsigned long long count; /* elements */
  double scale;
  int divisor;
  float pre;            /* hk_dev_copy's */
  unsigned first_block; /* blocks [first_block, next item's) are its own */
};

struct Batch {
  Item item[HKC_ITEMS_PER_LAUNCH];
  int n;
  int elem_bytes; /* plain copies: bytes per element */
  unsigned total_blocks;
};
static_assert(sizeof(Item) == 48, "kernels.h says 48 bytes per item");
static_assert(sizeof(Batch) <= 4096, "kernel parameters are limited to 4 KiB");

template <int BYTES> struct Vec;
template <> struct Vec<16> { typedef uint4 T; };
template <> struct Vec<8> { typedef uint2 T; };
template <> struct Vec<4> { typedef unsigned T; };
template <> struct Vec<2> { typedef unsigned short T; };
template <> struct Vec<1> { typedef unsigned char T; };

/* The C type of an element of dtype DT: hk_elem_copy reads and writes
 * through it, so a group's elements are held in such an array (a copy of
 * the group's vector, not the vector read through a cast pointer, which
 * breaks C++'s aliasing rule). */
template <int DT> struct Elem;
template <> struct Elem<HK_ELEM_F16> { typedef uint16_t T; };
template <> struct Elem<HK_ELEM_BF16> { typedef uint16_t T; };
template <> struct Elem<HK_ELEM_F32> { typedef float T; };
template <> struct Elem<HK_ELEM_F64> { typedef double T; };
template <> struct Elem<HK_ELEM_I8> { typedef int8_t T; };
template <> struct Elem<HK_ELEM_U8> { typedef uint8_t T; };
template <> struct Elem<HK_ELEM_I32> { typedef int32_t T; };
template <> struct Elem<HK_ELEM_I64> { typedef int64_t T; };
template <> struct Elem<HK_ELEM_I16> { typedef int16_t T; };
template <> struct Elem<HK_ELEM_BOOL> { typedef uint8_t T; };

__host__ __device__ constexpr int dtype_bytes(int dtype) {
  switch (dtype) {
  case HK_ELEM_F16:
  case HK_ELEM_BF16:
  case HK_ELEM_I16:
    return 2;
  case HK_ELEM_F32:
  case HK_ELEM_I32:
    return 4;
  case HK_ELEM_F64:
  case HK_ELEM_I64:
    return 8;
  default:
    return 1;
  }
}

/* Vectors [0, nvec) of sv, each through f, to dv: this block's share of
 * them (lb: its index among the item's nb blocks; a grid-stride loop).
 * An iteration whose HKC_UNROLL lanes all lie before nvec issues every
 * load before any store; the item's last iteration moves its lanes one
 * at a time (no lane is held unfilled). */
template <class SV, class DV, class F>
__device__ __forceinline__ void move_vectors(DV *dv, const SV *sv, size_t nvec,
                                             unsigned lb, unsigned nb, F f) {
  const size_t per = (size_t)HKC_THREADS * HKC_UNROLL;
  const unsigned tx = threadIdx.x;
  for (size_t c = (size_t)lb * per; c < nvec; c += (size_t)nb * per) {
    if (c + (size_t)(HKC_UNROLL - 1) * HKC_THREADS + tx < nvec) {
      SV r[HKC_UNROLL];
      HKC_PRAGMA_UNROLL
      for (int j = 0; j < HKC_UNROLL; j++)
        r[j] = sv[c + (size_t)j * HKC_THREADS + tx];
      HKC_PRAGMA_UNROLL
      for (int j = 0; j < HKC_UNROLL; j++)
        dv[c + (size_t)j * HKC_THREADS + tx] = f(r[j]);
    } else {
      for (int j = 0; j < HKC_UNROLL; j++) {
        size_t i = c + (size_t)j * HKC_THREADS + tx;
        if (i < nvec)
          dv[i] = f(sv[i]);
      }
    }
  }
}

/* bytes [0, bytes) of src to dst in vectors of W bytes; (src - dst) is a
 * multiple of W. lb: this block's index among the item's nb blocks. */
template <int W>
__device__ __forceinline__ void
copy_bytes(char *dst, const char *src, size_t bytes, unsigned lb, unsigned nb) {
  typedef typename Vec<W>::T V;
  size_t head = (W - ((uintptr_t)src & (W - 1))) & (W - 1);
  if (head > bytes)
    head = bytes;
  size_t nvec = (bytes - head) / W;
  size_t tail = head + nvec * W;
  if (lb == 0) { /* fewer than W (<= 16) head and tail bytes */
    unsigned t = threadIdx.x;
    if (t < head)
      dst[t] = src[t];
    if (t < bytes - tail)
      dst[tail + t] = src[tail + t];
  }
  move_vectors(reinterpret_cast<V *>(dst + head),
               reinterpret_cast<const V *>(src + head), nvec, lb, nb,
               [](const V &v) { return v; });
}

__device__ __forceinline__ void copy_raw(const Item &it, int esz, unsigned lb,
                                         unsigned nb) {
  size_t bytes = (size_t)it.count * (size_t)esz;
  unsigned mis = (unsigned)(((uintptr_t)it.src ^ (uintptr_t)it.dst) & 15u);
  if (mis == 0)
    copy_bytes<16>(it.dst, it.src, bytes, lb, nb);
  else if ((mis & 7u) == 0)
    copy_bytes<8>(it.dst, it.src, bytes, lb, nb);
  else if ((mis & 3u) == 0)
    copy_bytes<4>(it.dst, it.src, bytes, lb, nb);
  else if ((mis & 1u) == 0)
    copy_bytes<2>(it.dst, it.src, bytes, lb, nb);
  else
    copy_bytes<1>(it.dst, it.src, bytes, lb, nb);
}

/* An arithmetic item (scale, divisor or conversion) from SDT to DDT
 * (compile-time dtypes, so hk_elem_copy's switch folds to one case): G
 * elements make a group of 16 bytes on the wider side. Element
 * arithmetic: hk_elem_copy, always. */
template <int SDT, int DDT>
__device__ __forceinline__ void copy_elems(const Item &it, unsigned lb,
                                           unsigned nb) {
  constexpr int SSZ = dtype_bytes(SDT), DSZ = dtype_bytes(DDT);
  constexpr int G = 16 / (SSZ > DSZ ? SSZ : DSZ);
  typedef typename Vec<G * SSZ>::T SV;
  typedef typename Vec<G * DSZ>::T DV;
  typedef typename Elem<SDT>::T SE;
  typedef typename Elem<DDT>::T DE;
  static_assert(sizeof(SE) == SSZ && sizeof(DE) == DSZ, "Elem and dtype_bytes");
  const size_t n = (size_t)it.count;
  const double scale = it.scale;
  const int divisor = it.divisor;
  const float pre = it.pre;
  const uintptr_t s = (uintptr_t)it.src, d = (uintptr_t)it.dst;
  size_t head = ((G * SSZ - (s % (G * SSZ))) % (G * SSZ)) / SSZ;
  if (head > n || (d + head * DSZ) % (G * DSZ) != 0) {
    /* src and dst never reach a group boundary together: one by one */
    size_t stride = (size_t)nb * HKC_THREADS;
    for (size_t i = (size_t)lb * HKC_THREADS + threadIdx.x; i < n; i += stride)
      hk_elem_copy(it.dst, it.src, i, SDT, DDT, scale, divisor, pre);
    return;
  }
  size_t ng = (n - head) / G;
  size_t tail = head + ng * G;
  if (lb == 0) { /* fewer than G (<= 16) head and tail elements */
    unsigned t = threadIdx.x;
    if (t < head)
      hk_elem_copy(it.dst, it.src, t, SDT, DDT, scale, divisor, pre);
    if (t < n - tail)
      hk_elem_copy(it.dst, it.src, tail + t, SDT, DDT, scale, divisor, pre);
  }
  /* a group through hk_elem_copy as arrays of its elements (the vector
   * is copied, not read through a cast pointer: C++'s aliasing rule) */
  move_vectors(reinterpret_cast<DV *>(it.dst + head * DSZ),
               reinterpret_cast<const SV *>(it.src + head * SSZ), ng, lb, nb,
               [=](const SV &v) {
                 SE se[G];
                 DE de[G];
                 memcpy(se, &v, sizeof se);
                 HKC_PRAGMA_UNROLL
                 for (int e = 0; e < G; e++)
                   hk_elem_copy(de, se, (size_t)e, SDT, DDT, scale, divisor,
                                pre);
                 DV o;
                 memcpy(&o, de, sizeof o);
                 return o;
               });
}

/* This block's item (binary search over the items' first blocks), its
 * index lb among the item's blocks and their number nb. */
__device__ __forceinline__ const Item &my_item(const Batch &b, unsigned *lb,
                                               unsigned *nb) {
  int lo = 0, hi = b.n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (b.item[mid].first_block <= blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const Item &it = b.item[lo];
  unsigned end = lo + 1 < b.n ? b.item[lo + 1].first_block : b.total_blocks;
  *nb = end - it.first_block;
  *lb = blockIdx.x - it.first_block;
  return it;
}

/* Plain copies (any dtype: b.elem_bytes per element). */
__global__ void __launch_bounds__(HKC_THREADS)
    raw_kernel(const __grid_constant__ Batch b) {
  unsigned lb, nb;
  const Item &it = my_item(b, &lb, &nb);
  copy_raw(it, b.elem_bytes, lb, nb);
}

/* Arithmetic items from SDT to DDT. */
template <int SDT, int DDT>
__global__ void __launch_bounds__(HKC_THREADS)
    elems_kernel(const __grid_constant__ Batch b) {
  unsigned lb, nb;
  const Item &it = my_item(b, &lb, &nb);
  copy_elems<SDT, DDT>(it, lb, nb);
}

typedef void (*batch_kernel)(const Batch);

/* The kernel for an arithmetic (src, dst) pair; NULL for a pair device.h
 * does not define (cuda.c refuses those first). */
batch_kernel elems_kernel_for(int sdt, int ddt) {
  if (sdt == ddt)
    switch (sdt) {
    case HK_ELEM_F16:
      return elems_kernel<HK_ELEM_F16, HK_ELEM_F16>;
    case HK_ELEM_BF16:
      return elems_kernel<HK_ELEM_BF16, HK_ELEM_BF16>;
    case HK_ELEM_F32:
      return elems_kernel<HK_ELEM_F32, HK_ELEM_F32>;
    case HK_ELEM_F64:
      return elems_kernel<HK_ELEM_F64, HK_ELEM_F64>;
    case HK_ELEM_I8:
      return elems_kernel<HK_ELEM_I8, HK_ELEM_I8>;
    case HK_ELEM_U8:
      return elems_kernel<HK_ELEM_U8, HK_ELEM_U8>;
    case HK_ELEM_I16:
      return elems_kernel<HK_ELEM_I16, HK_ELEM_I16>;
    case HK_ELEM_I32:
      return elems_kernel<HK_ELEM_I32, HK_ELEM_I32>;
    case HK_ELEM_I64:
      return elems_kernel<HK_ELEM_I64, HK_ELEM_I64>;
    case HK_ELEM_BOOL:
      return elems_kernel<HK_ELEM_BOOL, HK_ELEM_BOOL>;
    default:
      return NULL;
    }
  if (sdt == HK_ELEM_F32 && ddt == HK_ELEM_F16)
    return elems_kernel<HK_ELEM_F32, HK_ELEM_F16>;
  if (sdt == HK_ELEM_F32 && ddt == HK_ELEM_BF16)
    return elems_kernel<HK_ELEM_F32, HK_ELEM_BF16>;
  if (sdt == HK_ELEM_F16 && ddt == HK_ELEM_F32)
    return elems_kernel<HK_ELEM_F16, HK_ELEM_F32>;
  if (sdt == HK_ELEM_BF16 && ddt == HK_ELEM_F32)
    return elems_kernel<HK_ELEM_BF16, HK_ELEM_F32>;
  return NULL;
}

/* p[0, bytes) = the element pattern: byte k gets value byte k % esz
 * (head: bytes before the first 16-byte boundary, a multiple of esz). */
__global__ void __launch_bounds__(HKC_THREADS)
    fill_kernel(char *p, size_t bytes, size_t head, uint4 pattern,
                unsigned long long value, int esz) {
  size_t nvec = (bytes - head) / 16;
  size_t tail = head + nvec * 16;
  if (blockIdx.x == 0) {
    unsigned t = threadIdx.x;
    if (t < head)
      p[t] = (char)(value >> (8 * (t % esz)));
    if (t < bytes - tail)
      p[tail + t] = (char)(value >> (8 * ((tail + t) % esz)));
  }
  uint4 *v = reinterpret_cast<uint4 *>(p + head);
  size_t stride = (size_t)gridDim.x * HKC_THREADS;
  for (size_t i = (size_t)blockIdx.x * HKC_THREADS + threadIdx.x; i < nvec;
       i += stride)
    v[i] = pattern;
}

/* A plain byte copy: what hk_elem_copy does with no divisor and no scale
 * (bool, which it never scales, also with one). */
bool is_raw(const hk_dev_copy *c, int sdt, int ddt) {
  return sdt == ddt && c->divisor <= 1 &&
         (c->scale == 1.0 || sdt == HK_ELEM_BOOL);
}

/* n int16 at src sign-extended to int32 at dst (wide), or the low 16 bits
 * of n int32 at src to int16 at dst (narrow). */
__global__ void __launch_bounds__(HKC_THREADS)
    int16_kernel(void *dst, const void *src, size_t n, int wide) {
  size_t stride = (size_t)gridDim.x * HKC_THREADS;
  for (size_t i = (size_t)blockIdx.x * HKC_THREADS + threadIdx.x; i < n;
       i += stride) {
    if (wide)
      ((int32_t *)dst)[i] = ((const int16_t *)src)[i];
    else /* two's complement: uint16_t's modulo, read back as int16 */
      ((uint16_t *)dst)[i] = (uint16_t)((const int32_t *)src)[i];
  }
}

/* Enqueues the items of items[0..n) that `want` selects (plain copies, or
 * arithmetic ones), HKC_ITEMS_PER_LAUNCH per launch of kernel k. */
cudaError_t launch_items(const hk_dev_copy *items, size_t n, int src_dtype,
                         int dst_dtype, int want_raw, batch_kernel k,
                         int target_blocks, cudaStream_t stream) {
  const size_t ssz = (size_t)dtype_bytes(src_dtype);
  const size_t dsz = (size_t)dtype_bytes(dst_dtype);
  const size_t wide = ssz > dsz ? ssz : dsz;
  /* a block's least share: one pass of its threads over 16-byte vectors */
  const size_t min_block_bytes = (size_t)HKC_THREADS * HKC_UNROLL * 16;
  size_t next = 0;
  while (next < n) {
    Batch b;
    size_t first = next, bytes = 0;
    int m = 0;
    for (; next < n && m < HKC_ITEMS_PER_LAUNCH; next++) {
      const hk_dev_copy *c = &items[next];
      if (c->count > 0 && is_raw(c, src_dtype, dst_dtype) == want_raw) {
        bytes += c->count * wide;
        m++;
      }
    }
    if (m == 0)
      break;
    size_t per = (bytes + (size_t)target_blocks - 1) / (size_t)target_blocks;
    if (per < min_block_bytes)
      per = min_block_bytes;
    unsigned blocks = 0;
    b.n = 0;
    for (size_t i = first; i < next; i++) {
      const hk_dev_copy *c = &items[i];
      if (c->count == 0 || is_raw(c, src_dtype, dst_dtype) != want_raw)
        continue;
      Item *it = &b.item[b.n++];
      it->dst = (char *)c->dst;
      it->src = (const char *)c->src;
      it->count = c->count;
      it->scale = c->scale;
      it->divisor = c->divisor;
      it->pre = (float)c->pre;
      it->first_block = blocks;
      size_t share = (c->count * wide + per - 1) / per;
      blocks += (unsigned)share;
    }
    b.elem_bytes = (int)ssz;
    b.total_blocks = blocks;
    HKC_LAUNCH(k, blocks, stream, b);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

} // namespace

extern "C" cudaError_t hkc_occupancy(int *blocks_per_sm) {
  *blocks_per_sm = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, raw_kernel, HKC_THREADS, 0);
  if (e == cudaSuccess && *blocks_per_sm < 1)
    *blocks_per_sm = 1;
  return e;
}

extern "C" cudaError_t hkc_batch_copy(const hk_dev_copy *items, size_t n,
                                      int src_dtype, int dst_dtype,
                                      int target_blocks, cudaStream_t stream) {
  if (target_blocks < 1)
    target_blocks = 1;
  /* items do not overlap (device.h), so the plain copies and the
   * arithmetic ones may go in separate launches, in either order */
  cudaError_t e = launch_items(items, n, src_dtype, dst_dtype, 1, raw_kernel,
                               target_blocks, stream);
  if (e != cudaSuccess)
    return e;
  batch_kernel k = elems_kernel_for(src_dtype, dst_dtype);
  if (!k)
    return cudaErrorInvalidValue;
  return launch_items(items, n, src_dtype, dst_dtype, 0, k, target_blocks,
                      stream);
}

extern "C" cudaError_t hkc_int16_convert(void *dst, const void *src,
                                         size_t count, int wide,
                                         int target_blocks,
                                         cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  size_t blocks = (count + HKC_THREADS - 1) / HKC_THREADS;
  if (blocks > (size_t)target_blocks)
    blocks = (size_t)target_blocks;
  if (blocks < 1)
    blocks = 1;
  HKC_LAUNCH(int16_kernel, (unsigned)blocks, stream, dst, src, count, wide);
  return cudaGetLastError();
}

extern "C" cudaError_t hkc_fill(void *p, size_t count, int elem_bytes,
                                const unsigned char value[8], int target_blocks,
                                cudaStream_t stream) {
  if (count == 0)
    return cudaSuccess;
  size_t bytes = count * (size_t)elem_bytes;
  unsigned long long v = 0;
  for (int i = 0; i < 8; i++)
    v |= (unsigned long long)value[i] << (8 * i);
  unsigned char pat[16];
  for (int i = 0; i < 16; i++)
    pat[i] = value[i % elem_bytes];
  uint4 pattern;
  memcpy(&pattern, pat, sizeof pattern);
  size_t head = (16 - ((uintptr_t)p & 15u)) & 15u;
  if (head > bytes)
    head = bytes;
  size_t nvec = (bytes - head) / 16;
  size_t blocks = (nvec + HKC_THREADS - 1) / HKC_THREADS;
  if (blocks > (size_t)target_blocks)
    blocks = (size_t)target_blocks;
  if (blocks < 1)
    blocks = 1;
  HKC_LAUNCH(fill_kernel, (unsigned)blocks, stream, (char *)p, bytes, head,
             pattern, v, elem_bytes);
  return cudaGetLastError();
}
