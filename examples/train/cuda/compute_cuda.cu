/*
 * compute_cuda.cu - the CUDA row of the trainer's compute table
 * (examples/train/compute.h), built as the module libhk_train_cuda.so and
 * opened by compute_load.c with dlopen: `train` never links CUDA.
 *
 * Everything runs on one non-blocking stream per compute object, in call
 * order. GEMMs are cuBLAS's cublasGemmEx on float32 storage with float32
 * compute (CUBLAS_COMPUTE_32F, default math mode: no TF32), the row-major
 * product computed as its column-major transpose (C^T = op(B)^T op(A)^T).
 * With bf16/fp16 (set_lowp) the activations and weights are the rounded
 * values held in float32, as on the CPU row (compute.h), and each GEMM
 * first copies its two operands into 16-bit scratch (exact: they are
 * rounded already), so cuBLAS runs 16-bit inputs with float32
 * accumulation on the tensor cores; the products are exact in float32,
 * only the order of the sums differs from the CPU row's. The other operations
 * are the kernels below, one thread per output element (grid-stride loops),
 * except the per-channel sums of batch norm (one block per channel, reduced in
 * double in shared memory), the loss (one thread per sample, then one thread
 * adds them in index order) and LAMB's norms (at most LAMB_BLOCKS blocks of
 * partial sums in double, then one block adds them: the shape depends on the
 * tensor's size only, so equal inputs give equal bits on every rank).
 *
 * Bits: built with -fmad=false (no multiply-add contraction), so the
 * elementwise kernels round as the CPU row does; the reductions (batch
 * norm's sums, cuBLAS's dot products) sum in another order than the CPU
 * row, so results agree within rounding, not bitwise
 * (tests/unit/test_train_compute.c states the tolerances).
 *
 * Errors: every CUDA runtime and cuBLAS call and every kernel launch is
 * checked; the first failure goes into c->err as "<call>: <reason>" and
 * the operations after it return without doing anything.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "compute.h"
}

#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1f
#define T COMPUTE_THREADS

/* Most input staging slots (the pipeline's ring: --prefetch + 1). */
#define MAX_SLOTS 65
/* Most blocks of LAMB's norm pass: its partial sums, one pair per block,
 * are then added by one block in a fixed order (deterministic). */
#define LAMB_BLOCKS 256

typedef struct cuda_row {
  cudaStream_t stream;
  cublasHandle_t blas;
  /* input staging (stage_init) */
  cudaStream_t copy;
  int slots;
  size_t slot_bytes;
  void *pinned[MAX_SLOTS];
  float *dev[MAX_SLOTS];
  cudaEvent_t ready[MAX_SLOTS];    /* the slot's copy is on the device */
  cudaEvent_t consumed[MAX_SLOTS]; /* the compute stream's reads are done */
  /* the step's tail (open allocates them) */
  int *flag;      /* finite: 1 when a value was not */
  double *part;   /* lamb: 2 x LAMB_BLOCKS partial norms */
  float *lamb_lr; /* lamb: lr x the trust ratio, computed on the device */
  /* xent: per-sample loss and hit, xent_cap samples (grown on demand) */
  double *xent_loss;
  int *xent_hit;
  int xent_cap;
  /* set_lowp: the GEMMs' input type, and their 16-bit operand copies */
  lowp_kind lowp;
  void *g16[2];
  size_t g16_cap[2]; /* elements */
} cuda_row;

/* 1 when call e succeeded; else records "<what>: <reason>". */
static int ok(compute *c, cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return 1;
  compute_fail(c, "%s: %s", what, cudaGetErrorString(e));
  return 0;
}

static int blas_ok(compute *c, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return 1;
  compute_fail(c, "%s: %s", what, cublasGetStatusString(s));
  return 0;
}

static cuda_row *row(compute *c) { return (cuda_row *)c->impl; }
static cudaStream_t st(compute *c) { return row(c)->stream; }

/* Blocks for n elements of a grid-stride loop (at least 1). */
static unsigned blocks(size_t n) {
  size_t b = (n + T - 1) / T;
  return b == 0 ? 1u : b > 65535u * 16u ? 65535u * 16u : (unsigned)b;
}

#define LOOP(i, n)                                                             \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);      \
       i += (size_t)gridDim.x * blockDim.x)

/* Checks the launch just made (configuration errors; faults show later,
 * at the next synchronising call). */
#define LAUNCHED(c, name) ok((c), cudaGetLastError(), "kernel " name)

static int open_cuda(compute *c) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    compute_fail(c, "no CUDA device (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    return -1;
  }
  if (c->device_index < 0 || c->device_index >= count) {
    compute_fail(c,
                 "device %d requested (--gpu, or the local rank), %d visible",
                 c->device_index, count);
    return -1;
  }
  cuda_row *r = (cuda_row *)calloc(1, sizeof *r);
  if (!r) {
    compute_fail(c, "out of memory");
    return -1;
  }
  c->impl = r;
  if (!ok(c, cudaSetDevice(c->device_index), "cudaSetDevice") ||
      !ok(c, cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags") ||
      !blas_ok(c, cublasCreate(&r->blas), "cublasCreate") ||
      !blas_ok(c, cublasSetStream(r->blas, r->stream), "cublasSetStream") ||
      !ok(c, cudaMalloc((void **)&r->flag, sizeof(int)), "cudaMalloc") ||
      !ok(c, cudaMalloc((void **)&r->part, 2 * LAMB_BLOCKS * sizeof(double)),
          "cudaMalloc") ||
      !ok(c, cudaMalloc((void **)&r->lamb_lr, sizeof(float)), "cudaMalloc")) {
    return -1; /* close_cuda frees what was made */
  }
  return 0;
}

static void close_cuda(compute *c) {
  cuda_row *r = row(c);
  if (!r)
    return;
  if (r->stream)
    (void)cudaStreamSynchronize(r->stream);
  if (r->copy)
    (void)cudaStreamSynchronize(r->copy);
  for (int i = 0; i < r->slots; i++) {
    if (r->ready[i])
      (void)cudaEventDestroy(r->ready[i]);
    if (r->consumed[i])
      (void)cudaEventDestroy(r->consumed[i]);
    if (r->dev[i])
      (void)cudaFree(r->dev[i]);
    if (r->pinned[i])
      (void)cudaFreeHost(r->pinned[i]);
  }
  void *scratch[] = {r->flag,     r->part,   r->lamb_lr, r->xent_loss,
                     r->xent_hit, r->g16[0], r->g16[1]};
  for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
    if (scratch[i])
      (void)cudaFree(scratch[i]);
  if (r->copy)
    (void)cudaStreamDestroy(r->copy);
  if (r->blas)
    (void)cublasDestroy(r->blas);
  if (r->stream)
    (void)cudaStreamDestroy(r->stream);
  free(r);
  c->impl = NULL;
}

static void *alloc_cuda(compute *c, size_t bytes) {
  void *p = NULL;
  if (c->failed)
    return NULL;
  if (!ok(c, cudaMalloc(&p, bytes ? bytes : 4), "cudaMalloc"))
    return NULL;
  return p;
}

static void release_cuda(compute *c, void *p) {
  (void)c;
  if (!p)
    return;
  (void)cudaStreamSynchronize(st(c)); /* nothing queued still uses it */
  (void)cudaFree(p);
}

static void to_dev_cuda(compute *c, void *dst, const void *src, size_t bytes) {
  if (!c->failed && bytes)
    ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st(c)),
       "cudaMemcpyAsync (host to device)");
}

static int to_host_cuda(compute *c, void *dst, const void *src, size_t bytes) {
  if (c->failed)
    return -1;
  if (bytes &&
      !ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st(c)),
          "cudaMemcpyAsync (device to host)"))
    return -1;
  return ok(c, cudaStreamSynchronize(st(c)), "cudaStreamSynchronize") ? 0 : -1;
}

static void copy_cuda(compute *c, void *dst, const void *src, size_t bytes) {
  if (!c->failed && bytes && dst != src)
    ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st(c)),
       "cudaMemcpyAsync (device to device)");
}

/* src (n floats) as bf16 (kind LOWP_BF16) or fp16 words into dst. */
__global__ void k_to16(const float *src, size_t n, int kind, void *dst) {
  LOOP(i, n) {
    if (kind == LOWP_BF16)
      ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    else
      ((__half *)dst)[i] = __float2half_rn(src[i]);
  }
}

/* The 16-bit copy of a rows x cols operand with leading dimension ld
 * (row-major) in scratch slot k, grown on demand; NULL on failure. */
static const void *operand16(compute *c, int k, const float *X, int rows,
                             int cols, int ld) {
  cuda_row *r = row(c);
  size_t n = rows > 0 && cols > 0 ? (size_t)(rows - 1) * ld + cols : 0;
  if (n > r->g16_cap[k]) { /* once per larger size: the layers' maximum */
    if (!ok(c, cudaStreamSynchronize(st(c)), "cudaStreamSynchronize"))
      return NULL;
    (void)cudaFree(r->g16[k]);
    r->g16[k] = NULL;
    r->g16_cap[k] = 0;
    if (!ok(c, cudaMalloc(&r->g16[k], n * 2), "cudaMalloc (16-bit operand)"))
      return NULL;
    r->g16_cap[k] = n;
  }
  if (n) {
    k_to16<<<blocks(n), T, 0, st(c)>>>(X, n, (int)r->lowp, r->g16[k]);
    if (!LAUNCHED(c, "to16"))
      return NULL;
  }
  return r->g16[k];
}

static void gemm_cuda(compute *c, int ta, int tb, int M, int N, int K,
                      float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *Cm, int ldc) {
  if (c->failed)
    return;
  cuda_row *r = row(c);
  const void *a = A, *b = B;
  cudaDataType in = CUDA_R_32F;
  if (r->lowp != LOWP_FP32) { /* 16-bit inputs, float32 out (set_lowp) */
    in = r->lowp == LOWP_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    a = operand16(c, 0, A, ta ? K : M, ta ? M : K, lda);
    b = operand16(c, 1, B, tb ? N : K, tb ? K : N, ldb);
    if (!a || !b)
      return;
  }
  /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T */
  blas_ok(c,
          cublasGemmEx(r->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, b, in,
                       ldb, a, in, lda, &beta, Cm, CUDA_R_32F, ldc,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
}

static void set_lowp_cuda(compute *c, lowp_kind k) {
  if (row(c))
    row(c)->lowp = k;
}

__global__ void k_round(float *v, size_t n, int kind) {
  LOOP(i, n) {
    v[i] = kind == LOWP_BF16 ? __bfloat162float(__float2bfloat16_rn(v[i]))
                             : __half2float(__float2half_rn(v[i]));
  }
}

static void round_cuda(compute *c, float *v, size_t n, lowp_kind k) {
  if (c->failed || k == LOWP_FP32 || !n)
    return;
  k_round<<<blocks(n), T, 0, st(c)>>>(v, n, (int)k);
  LAUNCHED(c, "round");
}

__global__ void k_im2col(const float *A, int cin, int N, int h, int w,
                         float *col) {
  size_t plane = (size_t)N * h * w, total = (size_t)cin * 9 * plane;
  LOOP(i, total) {
    size_t r = i / plane, p = i % plane;
    int ci = (int)(r / 9), k = (int)(r % 9), ky = k / 3, kx = k % 3;
    int x = (int)(p % w), y = (int)((p / w) % h);
    size_t b = p / ((size_t)h * w);
    int iy = y + ky - 1, ix = x + kx - 1;
    col[i] = iy >= 0 && iy < h && ix >= 0 && ix < w
                 ? A[ci * plane + (b * h + iy) * w + ix]
                 : 0.0f;
  }
}

static void im2col_cuda(compute *c, const float *A, int cin, int N, int h,
                        int w, float *col) {
  if (c->failed)
    return;
  k_im2col<<<blocks((size_t)cin * 9 * N * h * w), T, 0, st(c)>>>(A, cin, N, h,
                                                                 w, col);
  LAUNCHED(c, "im2col");
}

/* dA[ci][b][y][x] = sum over (ky, kx) of the col entry that read it; the
 * CPU row adds them in the order ky, kx too. */
__global__ void k_col2im(const float *dcol, int cin, int N, int h, int w,
                         float *dA) {
  size_t plane = (size_t)N * h * w, total = (size_t)cin * plane;
  LOOP(i, total) {
    size_t ci = i / plane, p = i % plane;
    int x = (int)(p % w), y = (int)((p / w) % h);
    size_t b = p / ((size_t)h * w);
    float s = 0.0f;
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        int oy = y - ky + 1, ox = x - kx + 1;
        if (oy >= 0 && oy < h && ox >= 0 && ox < w)
          s += dcol[(ci * 9 + ky * 3 + kx) * plane + (b * h + oy) * w + ox];
      }
    dA[i] = s;
  }
}

static void col2im_cuda(compute *c, const float *dcol, int cin, int N, int h,
                        int w, float *dA) {
  if (c->failed)
    return;
  k_col2im<<<blocks((size_t)cin * N * h * w), T, 0, st(c)>>>(dcol, cin, N, h, w,
                                                             dA);
  LAUNCHED(c, "col2im");
}

/* Sum of v over the block (T threads), in double; every thread gets it. */
__device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = T / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s)
      sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

/* One block per channel: batch (train) or running statistics. */
__global__ void k_bn_stats(const float *Z, size_t n, float *rm, float *rv,
                           int train, float *mean_out, float *invstd) {
  __shared__ double sh[T];
  int c = blockIdx.x;
  const float *z = Z + (size_t)c * n;
  double mean = rm[c], var = rv[c];
  if (train) {
    double s = 0.0, q = 0.0;
    for (size_t i = threadIdx.x; i < n; i += T)
      s += z[i];
    mean = block_sum(s, sh) / (double)n;
    for (size_t i = threadIdx.x; i < n; i += T)
      q += (z[i] - mean) * (z[i] - mean);
    var = block_sum(q, sh) / (double)n;
    if (threadIdx.x == 0) {
      rm[c] = (1.0f - BN_MOMENTUM) * rm[c] + BN_MOMENTUM * (float)mean;
      rv[c] = (1.0f - BN_MOMENTUM) * rv[c] +
              BN_MOMENTUM *
                  (float)(n > 1 ? var * (double)n / (double)(n - 1) : var);
    }
  }
  if (threadIdx.x == 0) {
    mean_out[c] = (float)mean;
    invstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
  }
}

__global__ void k_bn_apply(const float *Z, int C, size_t n, const float *gamma,
                           const float *beta, const float *mean,
                           const float *invstd, float *xhat, float *Y) {
  LOOP(i, (size_t)C * n) {
    size_t c = i / n;
    float xh = (Z[i] - mean[c]) * invstd[c];
    float v = gamma[c] * xh + beta[c];
    xhat[i] = xh;
    Y[i] = v > 0.0f ? v : 0.0f;
  }
}

static void bn_relu_cuda(compute *c, const float *Z, int C, size_t n,
                         const float *gamma, const float *beta, float *rm,
                         float *rv, int train, float *mean, float *invstd,
                         float *xhat, float *Y) {
  if (c->failed)
    return;
  k_bn_stats<<<C, T, 0, st(c)>>>(Z, n, rm, rv, train, mean, invstd);
  if (!LAUNCHED(c, "bn_stats"))
    return;
  k_bn_apply<<<blocks((size_t)C * n), T, 0, st(c)>>>(Z, C, n, gamma, beta, mean,
                                                     invstd, xhat, Y);
  LAUNCHED(c, "bn_apply");
}

__global__ void k_pool(const float *Y, int C, int N, int h, int w, float *out,
                       uint32_t *arg) {
  int h2 = h / 2, w2 = w / 2;
  size_t n = (size_t)N * h * w, np = n / 4;
  LOOP(i, (size_t)C * np) {
    size_t c = i / np, j = i % np;
    int ox = (int)(j % w2), oy = (int)((j / w2) % h2);
    size_t s = j / ((size_t)h2 * w2);
    const float *y = Y + c * n;
    size_t i0 = (s * h + 2 * (size_t)oy) * w + 2 * (size_t)ox;
    size_t cand[4] = {i0, i0 + 1, i0 + (size_t)w, i0 + (size_t)w + 1};
    size_t best = cand[0];
    for (int k = 1; k < 4; k++)
      if (y[cand[k]] > y[best])
        best = cand[k];
    out[i] = y[best];
    arg[i] = (uint32_t)best;
  }
}

static void pool_cuda(compute *c, const float *Y, int C, int N, int h, int w,
                      float *out, uint32_t *arg) {
  if (c->failed)
    return;
  k_pool<<<blocks((size_t)C * N * h * w / 4), T, 0, st(c)>>>(Y, C, N, h, w, out,
                                                             arg);
  LAUNCHED(c, "pool");
}

/* Each window's arg is its own position: no two threads write one. */
__global__ void k_pool_back(const float *Y, const uint32_t *arg,
                            const float *dP, int C, size_t n, float *dY) {
  size_t np = n / 4;
  LOOP(i, (size_t)C * np) {
    size_t c = i / np, a = c * n + arg[i];
    if (Y[a] > 0.0f)
      dY[a] = dP[i];
  }
}

static void pool_back_cuda(compute *c, const float *Y, const uint32_t *arg,
                           const float *dP, int C, int N, int h, int w,
                           float *dY) {
  if (c->failed)
    return;
  size_t n = (size_t)N * h * w;
  if (!ok(c, cudaMemsetAsync(dY, 0, (size_t)C * n * sizeof(float), st(c)),
          "cudaMemsetAsync"))
    return;
  k_pool_back<<<blocks((size_t)C * n / 4), T, 0, st(c)>>>(Y, arg, dP, C, n, dY);
  LAUNCHED(c, "pool_back");
}

__global__ void k_bn_sums(const float *dY, const float *xhat, size_t n,
                          float *dgamma, float *dbeta) {
  __shared__ double sh[T];
  int k = blockIdx.x;
  const float *dy = dY + (size_t)k * n, *xh = xhat + (size_t)k * n;
  double sg = 0.0, sb = 0.0;
  for (size_t i = threadIdx.x; i < n; i += T) {
    sb += dy[i];
    sg += (double)dy[i] * xh[i];
  }
  sb = block_sum(sb, sh);
  sg = block_sum(sg, sh);
  if (threadIdx.x == 0) {
    dgamma[k] = (float)sg;
    dbeta[k] = (float)sb;
  }
}

static void bn_sums_cuda(compute *c, const float *dY, const float *xhat, int C,
                         size_t n, float *dgamma, float *dbeta) {
  if (c->failed)
    return;
  k_bn_sums<<<C, T, 0, st(c)>>>(dY, xhat, n, dgamma, dbeta);
  LAUNCHED(c, "bn_sums");
}

__global__ void k_bn_back(float *dY, const float *xhat, int C, size_t n,
                          const float *gamma, const float *invstd,
                          const float *dgamma, const float *dbeta) {
  LOOP(i, (size_t)C * n) {
    size_t k = i / n;
    float a = gamma[k] * invstd[k] / (float)n;
    dY[i] = a * ((float)n * dY[i] - dbeta[k] - xhat[i] * dgamma[k]);
  }
}

static void bn_back_cuda(compute *c, float *dY, const float *xhat, int C,
                         size_t n, const float *gamma, const float *invstd,
                         const float *dgamma, const float *dbeta) {
  if (c->failed)
    return;
  k_bn_back<<<blocks((size_t)C * n), T, 0, st(c)>>>(dY, xhat, C, n, gamma,
                                                    invstd, dgamma, dbeta);
  LAUNCHED(c, "bn_back");
}

__global__ void k_flatten(const float *src, int C, int N, int S, float *dst,
                          int back) {
  size_t F = (size_t)C * S;
  LOOP(i, (size_t)N * F) {
    if (!back) { /* dst N x C*S */
      size_t s = i / F, r = i % F, k = r / S, q = r % S;
      dst[i] = src[(k * N + s) * S + q];
    } else { /* dst C x N x S */
      size_t k = i / ((size_t)N * S), s = (i / S) % N, q = i % S;
      dst[i] = src[s * F + k * S + q];
    }
  }
}

static void flatten_cuda(compute *c, const float *src, int C, int N, int S,
                         float *dst, int back) {
  if (c->failed)
    return;
  k_flatten<<<blocks((size_t)N * C * S), T, 0, st(c)>>>(src, C, N, S, dst,
                                                        back);
  LAUNCHED(c, "flatten");
}

__global__ void k_rows(float *Y, const float *bias, int N, int C) {
  LOOP(i, (size_t)N * C) { Y[i] = bias[i % C]; }
}

static void rows_cuda(compute *c, float *Y, const float *bias, int N, int C) {
  if (c->failed)
    return;
  k_rows<<<blocks((size_t)N * C), T, 0, st(c)>>>(Y, bias, N, C);
  LAUNCHED(c, "rows");
}

/* One thread per column, rows in order: the CPU row's sum exactly. */
__global__ void k_colsum(const float *D, int N, int C, float *out) {
  LOOP(k, (size_t)C) {
    float s = 0.0f;
    for (int r = 0; r < N; r++)
      s += D[(size_t)r * C + k];
    out[k] = s;
  }
}

static void colsum_cuda(compute *c, const float *D, int N, int C, float *out) {
  if (c->failed)
    return;
  k_colsum<<<blocks((size_t)C), T, 0, st(c)>>>(D, N, C, out);
  LAUNCHED(c, "colsum");
}

static void *stream_cuda(compute *c) { return (void *)st(c); }

static int stage_init_cuda(compute *c, int slots, size_t bytes) {
  cuda_row *r = row(c);
  if (c->failed)
    return -1;
  if (slots < 1 || slots > MAX_SLOTS || r->slots) {
    compute_fail(c, "stage_init: %d slots (1..%d, once)", slots, MAX_SLOTS);
    return -1;
  }
  if (!ok(c, cudaStreamCreateWithFlags(&r->copy, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags (copy stream)"))
    return -1;
  r->slot_bytes = bytes;
  for (int i = 0; i < slots; i++) {
    r->slots = i + 1; /* what close_cuda frees */
    if (!ok(c, cudaMallocHost(&r->pinned[i], bytes ? bytes : 4),
            "cudaMallocHost") ||
        !ok(c, cudaMalloc((void **)&r->dev[i], bytes ? bytes : 4),
            "cudaMalloc") ||
        !ok(c, cudaEventCreateWithFlags(&r->ready[i], cudaEventDisableTiming),
            "cudaEventCreateWithFlags") ||
        !ok(c,
            cudaEventCreateWithFlags(&r->consumed[i], cudaEventDisableTiming),
            "cudaEventCreateWithFlags"))
      return -1;
  }
  return 0;
}

/* The pipeline's thread: its own error buffer, never c->err. */
static int stage_fail(compute *c, cudaError_t e, const char *what) {
  snprintf(c->stage_err, sizeof c->stage_err, "%s: %s", what,
           cudaGetErrorString(e));
  return -1;
}

static int stage_put_cuda(compute *c, int slot, const void *host,
                          size_t bytes) {
  cuda_row *r = row(c);
  if (slot < 0 || slot >= r->slots || bytes > r->slot_bytes) {
    snprintf(c->stage_err, sizeof c->stage_err,
             "stage_put: slot %d of %d, %zu bytes of %zu", slot, r->slots,
             bytes, r->slot_bytes);
    return -1;
  }
  cudaError_t e = cudaSetDevice(c->device_index); /* this thread's device */
  if (e != cudaSuccess)
    return stage_fail(c, e, "cudaSetDevice (input pipeline)");
  /* The slot's previous batch: its copy out of the pinned buffer, and the
   * compute stream's reads of the device buffer up to stage_consumed (an
   * event never recorded is complete: the slot's first use waits for
   * nothing). The host waits before it writes the pinned buffer; the copy
   * stream waits too, so the device buffer is safe by the stream order
   * alone. */
  if ((e = cudaEventSynchronize(r->ready[slot])) != cudaSuccess ||
      (e = cudaEventSynchronize(r->consumed[slot])) != cudaSuccess)
    return stage_fail(c, e, "cudaEventSynchronize (input slot consumed)");
  memcpy(r->pinned[slot], host, bytes);
  if ((e = cudaStreamWaitEvent(r->copy, r->consumed[slot], 0)) != cudaSuccess)
    return stage_fail(c, e, "cudaStreamWaitEvent (input slot consumed)");
  if ((e = cudaMemcpyAsync(r->dev[slot], r->pinned[slot], bytes,
                           cudaMemcpyHostToDevice, r->copy)) != cudaSuccess)
    return stage_fail(c, e, "cudaMemcpyAsync (input, pinned to device)");
  if ((e = cudaEventRecord(r->ready[slot], r->copy)) != cudaSuccess)
    return stage_fail(c, e, "cudaEventRecord (input)");
  return 0;
}

static const float *stage_take_cuda(compute *c, int slot) {
  cuda_row *r = row(c);
  if (!c->failed)
    ok(c, cudaStreamWaitEvent(st(c), r->ready[slot], 0),
       "cudaStreamWaitEvent (input)");
  return r->dev[slot];
}

static void stage_consumed_cuda(compute *c, int slot) {
  cuda_row *r = row(c);
  if (!c->failed)
    ok(c, cudaEventRecord(r->consumed[slot], st(c)),
       "cudaEventRecord (input slot consumed)");
}

/* ---- the step's tail: loss, loss scaling, finite check, optimiser ---- */

__global__ void k_scale(float *v, size_t n, float s) { LOOP(i, n) v[i] *= s; }

static void scale_cuda(compute *c, float *v, size_t n, float s) {
  if (c->failed || !n)
    return;
  k_scale<<<blocks(n), T, 0, st(c)>>>(v, n, s);
  LAUNCHED(c, "scale");
}

/* Every thread that meets an inf or NaN writes 1 (the same value). */
__global__ void k_nonfinite(const float *v, size_t n, int *flag) {
  LOOP(i, n) {
    if (!isfinite(v[i]))
      *flag = 1;
  }
}

static int finite_cuda(compute *c, const float *v, size_t n) {
  cuda_row *r = row(c);
  if (c->failed || !ok(c, cudaMemsetAsync(r->flag, 0, sizeof(int), st(c)),
                       "cudaMemsetAsync (finite flag)"))
    return -1;
  if (n) {
    k_nonfinite<<<blocks(n), T, 0, st(c)>>>(v, n, r->flag);
    if (!LAUNCHED(c, "finite"))
      return -1;
  }
  int bad = 0;
  if (to_host_cuda(c, &bad, r->flag, sizeof bad) != 0)
    return -1;
  return bad ? 0 : 1;
}

/* One thread per sample: loss.c's softmax_xent for row i (stable
 * softmax, the loss in double, dlogits = (softmax - onehot) / B). expf
 * here is CUDA's (within 2 ulp, not glibc's correctly rounded one). */
__global__ void k_xent(const float *Z, const uint8_t *y, int B, int C, float *D,
                       double *loss, int *hit) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B)
    return;
  const float *z = Z + (size_t)i * C;
  float *g = D + (size_t)i * C;
  int top = 0;
  for (int k = 1; k < C; k++)
    if (z[k] > z[top])
      top = k;
  hit[i] = top == y[i];
  double sum = 0.0;
  for (int k = 0; k < C; k++) {
    g[k] = expf(z[k] - z[top]);
    sum += g[k];
  }
  loss[i] = log(sum) - (double)(z[y[i]] - z[top]);
  float scale = (float)(1.0 / (sum * (double)B));
  for (int k = 0; k < C; k++)
    g[k] = g[k] * scale - (k == y[i] ? 1.0f / (float)B : 0.0f);
}

/* One thread: the samples' losses and hits in index order, as the CPU
 * row adds them, into the accumulators. */
__global__ void k_xent_sum(const double *loss, const int *hit, int B,
                           double *acc) {
  double total = 0.0;
  long n = 0;
  for (int i = 0; i < B; i++) {
    total += loss[i];
    n += hit[i];
  }
  acc[0] += total / (double)B;
  acc[1] += (double)n;
}

static void xent_cuda(compute *c, const float *logits, const uint8_t *y, int B,
                      int C, float *dlogits, double *acc) {
  cuda_row *r = row(c);
  if (c->failed || B < 1)
    return;
  if (B > r->xent_cap) { /* once, at the largest batch */
    if (!ok(c, cudaStreamSynchronize(st(c)), "cudaStreamSynchronize"))
      return;
    (void)cudaFree(r->xent_loss);
    (void)cudaFree(r->xent_hit);
    r->xent_loss = NULL;
    r->xent_hit = NULL;
    r->xent_cap = 0;
    if (!ok(c, cudaMalloc((void **)&r->xent_loss, (size_t)B * sizeof(double)),
            "cudaMalloc") ||
        !ok(c, cudaMalloc((void **)&r->xent_hit, (size_t)B * sizeof(int)),
            "cudaMalloc"))
      return;
    r->xent_cap = B;
  }
  k_xent<<<(B + T - 1) / T, T, 0, st(c)>>>(logits, y, B, C, dlogits,
                                           r->xent_loss, r->xent_hit);
  if (!LAUNCHED(c, "xent"))
    return;
  k_xent_sum<<<1, 1, 0, st(c)>>>(r->xent_loss, r->xent_hit, B, acc);
  LAUNCHED(c, "xent_sum");
}

/* optim.c's sgd, elementwise, the same operations in the same order. */
__global__ void k_sgd(float *p, const float *g, float *vel, size_t n, float mu,
                      float lr, float wd, int nesterov) {
  LOOP(i, n) {
    float gi = g[i] + wd * p[i];
    vel[i] = mu * vel[i] + gi;
    p[i] -= lr * (nesterov ? gi + mu * vel[i] : vel[i]);
  }
}

/* optim.c's adamw (step, eps and keep from optim_args_of). */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n,
                        float b1, float b2, float step, float eps, float keep) {
  LOOP(i, n) {
    p[i] *= keep;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
  }
}

/* optim.c's lamb_u. */
__device__ float lamb_u(float m, float v, float p, float c1, float c2,
                        float eps, float wd) {
  return (m / c1) / (sqrtf(v / c2) + eps) + wd * p;
}

/* LAMB's first pass: the moments, and each block's partial sums of p^2
 * and u^2 in double into part[block] and part[gridDim.x + block]. */
__global__ void k_lamb_moments(const float *p, const float *g, float *m,
                               float *v, size_t n, float b1, float b2, float c1,
                               float c2, float eps, float wd, double *part) {
  __shared__ double sh[T];
  double pn = 0.0, un = 0.0;
  LOOP(i, n) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    double u = lamb_u(m[i], v[i], p[i], c1, c2, eps, wd);
    pn += (double)p[i] * p[i];
    un += u * u;
  }
  pn = block_sum(pn, sh);
  un = block_sum(un, sh);
  if (threadIdx.x == 0) {
    part[blockIdx.x] = pn;
    part[gridDim.x + blockIdx.x] = un;
  }
}

/* One block: the nb partial pairs in a fixed order, then lr x the trust
 * ratio ||p|| / ||u|| (1 when either norm is 0), as optim.c. */
__global__ void k_lamb_trust(const double *part, int nb, float lr,
                             float *step) {
  __shared__ double sh[T];
  double pn = 0.0, un = 0.0;
  for (int b = threadIdx.x; b < nb; b += T) {
    pn += part[b];
    un += part[nb + b];
  }
  pn = block_sum(pn, sh);
  un = block_sum(un, sh);
  if (threadIdx.x == 0) {
    float trust = pn > 0.0 && un > 0.0 ? (float)(sqrt(pn) / sqrt(un)) : 1.0f;
    *step = lr * trust;
  }
}

__global__ void k_lamb_apply(float *p, const float *m, const float *v, size_t n,
                             float c1, float c2, float eps, float wd,
                             const float *step) {
  float s = *step;
  LOOP(i, n) { p[i] -= s * lamb_u(m[i], v[i], p[i], c1, c2, eps, wd); }
}

static void optim_cuda(compute *c, const optim_args *a, float *p,
                       const float *g, float *m, float *v, size_t count) {
  cuda_row *r = row(c);
  if (c->failed || !count)
    return;
  unsigned nb = blocks(count);
  if (a->kind == OPTIM_SGD) {
    k_sgd<<<nb, T, 0, st(c)>>>(p, g, m, count, a->mu, a->lr, a->wd,
                               a->nesterov);
    LAUNCHED(c, "sgd");
  } else if (a->kind == OPTIM_ADAMW) {
    k_adamw<<<nb, T, 0, st(c)>>>(p, g, m, v, count, a->b1, a->b2, a->step,
                                 a->eps, a->keep);
    LAUNCHED(c, "adamw");
  } else {
    nb = nb > LAMB_BLOCKS ? LAMB_BLOCKS : nb; /* depends on count only */
    k_lamb_moments<<<nb, T, 0, st(c)>>>(p, g, m, v, count, a->b1, a->b2, a->c1,
                                        a->c2, a->eps, a->wd, r->part);
    if (!LAUNCHED(c, "lamb_moments"))
      return;
    k_lamb_trust<<<1, T, 0, st(c)>>>(r->part, (int)nb, a->lr, r->lamb_lr);
    if (!LAUNCHED(c, "lamb_trust"))
      return;
    k_lamb_apply<<<blocks(count), T, 0, st(c)>>>(p, m, v, count, a->c1, a->c2,
                                                 a->eps, a->wd, r->lamb_lr);
    LAUNCHED(c, "lamb_apply");
  }
}

static const compute_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .host = */ 0,
    /* .open = */ open_cuda,
    /* .close = */ close_cuda,
    /* .alloc = */ alloc_cuda,
    /* .release = */ release_cuda,
    /* .to_dev = */ to_dev_cuda,
    /* .to_host = */ to_host_cuda,
    /* .copy = */ copy_cuda,
    /* .gemm = */ gemm_cuda,
    /* .round = */ round_cuda,
    /* .im2col = */ im2col_cuda,
    /* .col2im = */ col2im_cuda,
    /* .bn_relu = */ bn_relu_cuda,
    /* .pool = */ pool_cuda,
    /* .pool_back = */ pool_back_cuda,
    /* .bn_sums = */ bn_sums_cuda,
    /* .bn_back = */ bn_back_cuda,
    /* .flatten = */ flatten_cuda,
    /* .rows = */ rows_cuda,
    /* .colsum = */ colsum_cuda,
    /* .stream = */ stream_cuda,
    /* .stage_init = */ stage_init_cuda,
    /* .stage_put = */ stage_put_cuda,
    /* .stage_take = */ stage_take_cuda,
    /* .stage_consumed = */ stage_consumed_cuda,
    /* .scale = */ scale_cuda,
    /* .finite = */ finite_cuda,
    /* .xent = */ xent_cuda,
    /* .optim = */ optim_cuda,
    /* .set_lowp = */ set_lowp_cuda,
};

/* The module's one entry point (COMPUTE_CUDA_SYMBOL). */
extern "C" __attribute__((visibility("default"))) const compute_ops *
hk_train_compute_cuda(void) {
  return &cuda_ops;
}
