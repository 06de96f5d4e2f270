/*
 * compute.h - the operations under the trainer's CNN as a table of rows
 * (`--device cpu|cuda|auto`): "cpu" (compute_cpu.c: OpenBLAS's
 * cblas_sgemm and plain loops, the code the CNN always ran) and "cuda"
 * (cuda/compute_cuda.cu, in the separately built module
 * libhk_train_cuda.so that compute_load.c opens with dlopen, so that
 * `train` never links CUDA and runs where there is none).
 *
 * Memory: every pointer an operation takes is the row's memory (host
 * memory for "cpu", device memory from alloc for "cuda"), except the
 * host sides of to_dev / to_host. Shapes are float32, row-major; the
 * CNN's activations are channel-major planes (C x N x h x w, cnn.h).
 *
 * Ordering and errors: the operations of one compute object run in call
 * order (on the CUDA row: queued on its one compute stream, returned
 * before they finish); to_host returns once the bytes are on the host.
 * An operation that fails records the first failure in c->failed and
 * c->err (e.g. "cublasGemmEx: CUBLAS_STATUS_EXECUTION_FAILED") and the
 * ones after it do nothing; the caller checks compute_failed() after a
 * pass. A failed compute object stays failed.
 *
 * Thread-safety: one thread uses a compute object.
 */
#ifndef HK_TRAIN_COMPUTE_H
#define HK_TRAIN_COMPUTE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lowp.h"
#include "optim.h"

/** Room for a compute object's error message. */
#define COMPUTE_ERR_CAP 512
/** Threads per block of the CUDA row's kernels. */
#define COMPUTE_THREADS 256

typedef struct compute compute;

/**
 * One row's operations. n counts floats, N samples, C channels, h x w a
 * plane; `plane` = N*h*w positions of one channel.
 */
typedef struct compute_ops {
  const char *name; /* "cpu", "cuda": the --device value */
  int host;         /* 1: the row's memory is host memory */
  /* Opens the row on this process (CUDA: picks the device, creates the
   * stream and the cuBLAS handle). 0, or -1 with c->err saying why. */
  int (*open)(compute *c);
  void (*close)(compute *c);
  /* bytes of row memory (uninitialised), or NULL with c->err set. */
  void *(*alloc)(compute *c, size_t bytes);
  void (*release)(compute *c, void *p);
  /* host src -> row dst. The copy may still be in flight on return (the
   * CUDA row queues it): src must stay unchanged until the next to_host
   * has returned. */
  void (*to_dev)(compute *c, void *dst, const void *src, size_t bytes);
  /* row src -> host dst, after everything queued before; 0 or -1. */
  int (*to_host)(compute *c, void *dst, const void *src, size_t bytes);
  void (*copy)(compute *c, void *dst, const void *src, size_t bytes);
  /* C (M x N, ldc) = alpha op(A) op(B) + beta C, row-major, op(X) = X or
   * X^T (ta, tb non-zero), float32 accumulation (cblas_sgemm's contract). */
  void (*gemm)(compute *c, int ta, int tb, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *Cm, int ldc);
  /* Rounds v[0..n) to kind k in place (lowp.h); no-op for LOWP_FP32. */
  void (*round)(compute *c, float *v, size_t n, lowp_kind k);
  /* col (cin*9 x plane) from A (cin x N x h x w): 3x3, padding 1. */
  void (*im2col)(compute *c, const float *A, int cin, int N, int h, int w,
                 float *col);
  /* dA (cin x N x h x w) = im2col's adjoint applied to dcol. */
  void (*col2im)(compute *c, const float *dcol, int cin, int N, int h, int w,
                 float *dA);
  /* Batch norm + ReLU of Z (C x n): train: batch statistics (biased
   * variance), running mean/var (rm, rv) updated with momentum 0.1 and
   * the unbiased variance; else the running ones. Writes mean, invstd
   * (C), xhat and Y = relu(gamma xhat + beta) (C x n). eps 1e-5. */
  void (*bn_relu)(compute *c, const float *Z, int C, size_t n,
                  const float *gamma, const float *beta, float *rm, float *rv,
                  int train, float *mean, float *invstd, float *xhat, float *Y);
  /* 2x2 stride-2 max pool of Y (C x N x h x w) into out (C x N x h/2 x
   * w/2), arg = each window's first largest index in its channel plane. */
  void (*pool)(compute *c, const float *Y, int C, int N, int h, int w,
               float *out, uint32_t *arg);
  /* dY (C x N x h x w) = dP routed to each window's arg, 0 elsewhere,
   * times relu'(Y) (0 where Y <= 0). */
  void (*pool_back)(compute *c, const float *Y, const uint32_t *arg,
                    const float *dP, int C, int N, int h, int w, float *dY);
  /* dbeta[k] = sum dY, dgamma[k] = sum dY xhat over channel k's n values
   * (double accumulation on the CPU row). */
  void (*bn_sums)(compute *c, const float *dY, const float *xhat, int C,
                  size_t n, float *dgamma, float *dbeta);
  /* dY -> dZ in place: gamma invstd / n (n dY - dbeta - xhat dgamma). */
  void (*bn_back)(compute *c, float *dY, const float *xhat, int C, size_t n,
                  const float *gamma, const float *invstd, const float *dgamma,
                  const float *dbeta);
  /* dst (N x C*S) from src (C x N x S) (PyTorch's flatten order), or the
   * reverse with back non-zero (dst C x N x S from src N x C*S). */
  void (*flatten)(compute *c, const float *src, int C, int N, int S, float *dst,
                  int back);
  /* Every row of Y (N x C) = bias (C). */
  void (*rows)(compute *c, float *Y, const float *bias, int N, int C);
  /* out[k] = sum over rows s = 0..N-1 of D[s][k] (D is N x C). */
  void (*colsum)(compute *c, const float *D, int N, int C, float *out);
  /* The row's compute stream (a cudaStream_t), NULL for the CPU row:
   * what the trainer hands hk_set_stream / hk_wait_stream. */
  void *(*stream)(compute *c);
  /* Input staging (NULL on the CPU row): `slots` pairs of a pinned host
   * buffer and a device buffer of `bytes` each, a copy stream of their
   * own and two events per slot (ready: the copy is done; consumed: the
   * compute stream is done reading it). stage_init on the compute thread,
   * before any stage_put; 0 or -1 (c->err). */
  int (*stage_init)(compute *c, int slots, size_t bytes);
  /* On the input pipeline's thread (the only caller besides the compute
   * thread's stage_take and stage_consumed, which never touch the same
   * slot at once): waits on the host until the compute stream has done
   * what it queued before the slot's last stage_consumed (and the slot's
   * previous copy has finished), copies host (bytes <= stage_init's) into
   * slot's pinned buffer, makes the copy stream wait for that same event,
   * queues the copy onto the device on the copy stream and records the
   * slot's ready event. 0, or -1 with c->stage_err (written by this
   * thread only) set. */
  int (*stage_put)(compute *c, int slot, const void *host, size_t bytes);
  /* On the compute thread: makes the compute stream wait (GPU-side) for
   * slot's ready event and returns its device buffer. */
  const float *(*stage_take)(compute *c, int slot);
  /* On the compute thread, once every operation that reads the slot's
   * device buffer is queued (and before the pipeline may refill the slot:
   * prefetch's done hook, stage.h): records the slot's consumed event on
   * the compute stream, which the slot's next stage_put waits for. Without
   * it a host ahead of its GPU refills a slot the GPU is still reading.
   * A failure is recorded in c->err. */
  void (*stage_consumed)(compute *c, int slot);
  /* The step's tail, so that on a device row the weights, optimiser
   * state, loss and gradients stay in row memory: */
  /* v[0..n) *= s, each product rounded to float (the loss scale on
   * dLoss/dlogits, its inverse on the gradients). */
  void (*scale)(compute *c, float *v, size_t n, float s);
  /* 1 when v[0..n) holds only finite values, else 0 (scaler.h's check;
   * on the CUDA row one int comes back); -1 with c->err when the row has
   * failed. Returns after the check. */
  int (*finite)(compute *c, const float *v, size_t n);
  /* Softmax cross-entropy (loss.h's softmax_xent) of logits (B x C)
   * against labels y (B bytes): writes dlogits (B x C) = (softmax -
   * onehot) / B, adds the mean loss over the B samples (nats) to acc[0]
   * and the samples whose first largest logit is the label to acc[1].
   * All row memory; acc is 2 doubles, read with to_host when needed. */
  void (*xent)(compute *c, const float *logits, const uint8_t *y, int B, int C,
               float *dlogits, double *acc);
  /* One tensor's optimiser update (optim.h's optim_apply from the same
   * optim_args): p, g, m, v count floats of row memory (v NULL for sgd).
   * LAMB's two norms: a fixed-shape reduction in double on the CUDA row,
   * so equal inputs give equal bits on every GPU of a kind. */
  void (*optim)(compute *c, const optim_args *a, float *p, const float *g,
                float *m, float *v, size_t count);
  /* The passes' compute type (model_set_precision tells the row). The
   * CUDA row's gemm then reads 16-bit copies of its operands (bf16 or
   * fp16, made on the GPU: exact, as every operand the CNN hands it is
   * already rounded to that type) through cublasGemmEx with CUDA_R_16BF /
   * CUDA_R_16F inputs, float32 output and accumulation
   * (CUBLAS_COMPUTE_32F: tensor cores); LOWP_FP32 goes back to float32
   * inputs. The CPU row does nothing (cblas_sgemm on the rounded floats).
   * A failure (scratch memory) is recorded in c->err. */
  void (*set_lowp)(compute *c, lowp_kind k);
} compute_ops;

struct compute {
  const compute_ops *ops;
  int device_index; /* the GPU a device row opens (compute_open sets it) */
  void *impl;       /* the row's own state */
  int failed;       /* 1 after the first failure */
  char err[COMPUTE_ERR_CAP];
  char stage_err[COMPUTE_ERR_CAP]; /* stage_put's failure (its thread) */
};

/** The CPU row (compute_cpu.c); never fails. */
extern const compute_ops compute_cpu_ops;

/** A shared, opened CPU compute object (static; never closed). */
compute *compute_cpu(void);

/** Records the first failure of c as one printf-formatted line (inline:
 *  the CUDA module uses it too, linking nothing of train's). */
static inline __attribute__((format(printf, 2, 3))) void
compute_fail(compute *c, const char *fmt, ...) {
  if (c->failed)
    return;
  c->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

/** 1 when an operation of c has failed (c->err says which), else 0. */
static inline int compute_failed(const compute *c) { return c->failed; }

/** The entry point the module exports: its row. */
#define COMPUTE_CUDA_SYMBOL "hk_train_compute_cuda"
/** The module's file name (looked for beside `train`, then by dlopen's
 *  own search: LD_LIBRARY_PATH, the run path). */
#define COMPUTE_CUDA_MODULE "libhk_train_cuda.so"
/** This environment variable, when set, is the module's path (and no
 *  other place is tried): for tests and relocated installs. Read until
 *  a load succeeds; the loaded module then stays for the process. */
#define COMPUTE_CUDA_MODULE_ENV "TRAIN_CUDA_MODULE"

/**
 * Opens the row `device` names ("cpu", "cuda" or "auto") into *c, on GPU
 * device_index for a device row: "cuda" loads COMPUTE_CUDA_MODULE
 * (COMPUTE_CUDA_MODULE_ENV's path when set; else from the folder of the
 * running executable, else through dlopen's own search), then opens it (a
 * usable GPU, its stream, cuBLAS). "auto" is "cuda" when that works, else
 * "cpu", and then err[cap] says why cuda was not taken (empty otherwise).
 * Returns 0; or -1 with err naming the device and why, e.g. "--device cuda: no
 * CUDA device (cudaGetDeviceCount: no CUDA-capable device is detected)" or
 * "--device cuda: libhk_train_cuda.so: cannot open shared object file
 * ...". Close with compute_close (also after a failure). Not
 * thread-safe: call it at start-up (the module stays loaded for the
 * process's life, as the CUDA runtime expects).
 */
int compute_open(compute *c, const char *device, int device_index, char *err,
                 size_t cap);
void compute_close(compute *c);

#endif
