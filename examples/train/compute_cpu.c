/*
 * compute_cpu.c - the CPU row of the compute table (compute.h): OpenBLAS's
 * cblas_sgemm for the matrix products, plain loops for the rest. This is
 * the code cnn.c ran before the table existed, moved unchanged, so the
 * CPU results are bitwise what they were.
 */
#include "compute.h"
#include "loss.h"
#include "scaler.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

static int open_cpu(compute *c) {
  (void)c;
  return 0;
}

static void close_cpu(compute *c) { (void)c; }

static void *alloc_cpu(compute *c, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p)
    compute_fail(c, "out of memory (%zu bytes)", bytes);
  return p;
}

static void release_cpu(compute *c, void *p) {
  (void)c;
  free(p);
}

static void copy_cpu(compute *c, void *dst, const void *src, size_t bytes) {
  (void)c;
  if (dst != src)
    memcpy(dst, src, bytes);
}

static int to_host_cpu(compute *c, void *dst, const void *src, size_t bytes) {
  copy_cpu(c, dst, src, bytes);
  return 0;
}

static void gemm_cpu(compute *c, int ta, int tb, int M, int N, int K,
                     float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *Cm, int ldc) {
  (void)c;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb,
              beta, Cm, ldc);
}

static void round_cpu(compute *c, float *v, size_t n, lowp_kind k) {
  (void)c;
  lowp_round(v, n, k);
}

/* The output columns x whose input column x + kx - 1 lies in 0..w-1. */
static int x_lo(int kx) { return kx == 0 ? 1 : 0; }
static int x_hi(int kx, int w) { return kx == 2 ? w - 1 : w; }

static void im2col_cpu(compute *c, const float *A, int cin, int N, int h, int w,
                       float *col) {
  (void)c;
  size_t plane = (size_t)N * (size_t)h * (size_t)w;
  for (int ci = 0; ci < cin; ci++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        float *row = col + ((size_t)ci * 9 + (size_t)(ky * 3 + kx)) * plane;
        const float *a = A + (size_t)ci * plane;
        int lo = x_lo(kx), hi = x_hi(kx, w);
        for (int b = 0; b < N; b++)
          for (int y = 0; y < h; y++) {
            int iy = y + ky - 1;
            float *o = row + ((size_t)b * (size_t)h + (size_t)y) * (size_t)w;
            if (iy < 0 || iy >= h) {
              memset(o, 0, (size_t)w * sizeof *o);
              continue;
            }
            const float *src =
                a + ((size_t)b * (size_t)h + (size_t)iy) * (size_t)w;
            o[0] = o[w - 1] = 0.0f; /* the padding column, if any */
            memcpy(o + lo, src + lo + kx - 1, (size_t)(hi - lo) * sizeof *o);
          }
      }
}

static void col2im_cpu(compute *c, const float *dcol, int cin, int N, int h,
                       int w, float *dA) {
  (void)c;
  size_t plane = (size_t)N * (size_t)h * (size_t)w;
  memset(dA, 0, (size_t)cin * plane * sizeof *dA);
  for (int ci = 0; ci < cin; ci++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        const float *row =
            dcol + ((size_t)ci * 9 + (size_t)(ky * 3 + kx)) * plane;
        float *a = dA + (size_t)ci * plane;
        int lo = x_lo(kx), hi = x_hi(kx, w);
        for (int b = 0; b < N; b++)
          for (int y = 0; y < h; y++) {
            int iy = y + ky - 1;
            if (iy < 0 || iy >= h)
              continue;
            const float *g =
                row + ((size_t)b * (size_t)h + (size_t)y) * (size_t)w;
            float *dst =
                a + ((size_t)b * (size_t)h + (size_t)iy) * (size_t)w + kx - 1;
            for (int x = lo; x < hi; x++)
              dst[x] += g[x];
          }
      }
}

static void bn_relu_cpu(compute *cp, const float *Z, int C, size_t n,
                        const float *gamma, const float *beta, float *rm,
                        float *rv, int train, float *mean_out, float *invstd,
                        float *xhat, float *Y) {
  (void)cp;
  for (int c = 0; c < C; c++) {
    const float *z = Z + (size_t)c * n;
    double mean = rm[c], var = rv[c];
    if (train) { /* two passes in double: mean, then squared deviations */
      double s = 0.0, q = 0.0;
      for (size_t i = 0; i < n; i++)
        s += z[i];
      mean = s / (double)n;
      for (size_t i = 0; i < n; i++)
        q += (z[i] - mean) * (z[i] - mean);
      var = q / (double)n;
      rm[c] = (1.0f - BN_MOMENTUM) * rm[c] + BN_MOMENTUM * (float)mean;
      rv[c] = (1.0f - BN_MOMENTUM) * rv[c] +
              BN_MOMENTUM *
                  (float)(n > 1 ? var * (double)n / (double)(n - 1) : var);
    }
    float mu = (float)mean, is = (float)(1.0 / sqrt(var + (double)BN_EPS));
    mean_out[c] = mu;
    invstd[c] = is;
    float *xh = xhat + (size_t)c * n, *y = Y + (size_t)c * n;
    for (size_t i = 0; i < n; i++) {
      xh[i] = (z[i] - mu) * is;
      float v = gamma[c] * xh[i] + beta[c];
      y[i] = v > 0.0f ? v : 0.0f;
    }
  }
}

static void pool_cpu(compute *cp, const float *Y, int C, int N, int h, int w,
                     float *out, uint32_t *arg) {
  (void)cp;
  int h2 = h / 2, w2 = w / 2;
  size_t n = (size_t)N * (size_t)h * (size_t)w, np = n / 4;
  for (int c = 0; c < C; c++) {
    const float *y = Y + (size_t)c * n;
    float *o = out + (size_t)c * np;
    uint32_t *a = arg + (size_t)c * np;
    for (int s = 0; s < N; s++)
      for (int oy = 0; oy < h2; oy++)
        for (int ox = 0; ox < w2; ox++) {
          size_t i0 = ((size_t)s * (size_t)h + 2 * (size_t)oy) * (size_t)w +
                      2 * (size_t)ox;
          size_t cand[4] = {i0, i0 + 1, i0 + (size_t)w, i0 + (size_t)w + 1};
          size_t best = cand[0];
          for (int k = 1; k < 4; k++)
            if (y[cand[k]] > y[best])
              best = cand[k];
          size_t j =
              ((size_t)s * (size_t)h2 + (size_t)oy) * (size_t)w2 + (size_t)ox;
          o[j] = y[best];
          a[j] = (uint32_t)best;
        }
  }
}

static void pool_back_cpu(compute *cp, const float *Y, const uint32_t *arg,
                          const float *dP, int C, int N, int h, int w,
                          float *dY) {
  (void)cp;
  size_t n = (size_t)N * (size_t)h * (size_t)w, np = n / 4;
  memset(dY, 0, (size_t)C * n * sizeof(float));
  for (int k = 0; k < C; k++) {
    const float *y = Y + (size_t)k * n, *g = dP + (size_t)k * np;
    const uint32_t *a = arg + (size_t)k * np;
    float *dy = dY + (size_t)k * n;
    for (size_t j = 0; j < np; j++)
      if (y[a[j]] > 0.0f) /* relu'(.) = 0 where the output was clamped */
        dy[a[j]] = g[j];
  }
}

static void bn_sums_cpu(compute *cp, const float *dY, const float *xhat, int C,
                        size_t n, float *dgamma, float *dbeta) {
  (void)cp;
  for (int k = 0; k < C; k++) {
    const float *dy = dY + (size_t)k * n, *xh = xhat + (size_t)k * n;
    double sg = 0.0, sb = 0.0;
    for (size_t i = 0; i < n; i++) {
      sb += dy[i];
      sg += (double)dy[i] * xh[i];
    }
    dgamma[k] = (float)sg;
    dbeta[k] = (float)sb;
  }
}

static void bn_back_cpu(compute *cp, float *dY, const float *xhat, int C,
                        size_t n, const float *gamma, const float *invstd,
                        const float *dgamma, const float *dbeta) {
  (void)cp;
  for (int k = 0; k < C; k++) {
    float *dy = dY + (size_t)k * n;
    const float *xh = xhat + (size_t)k * n;
    float a = gamma[k] * invstd[k] / (float)n, dbk = dbeta[k], dgk = dgamma[k];
    for (size_t i = 0; i < n; i++)
      dy[i] = a * ((float)n * dy[i] - dbk - xh[i] * dgk);
  }
}

static void flatten_cpu(compute *cp, const float *src, int C, int N, int S,
                        float *dst, int back) {
  (void)cp;
  size_t F = (size_t)C * (size_t)S;
  for (int k = 0; k < C; k++)
    for (int s = 0; s < N; s++) {
      size_t flat = (size_t)s * F + (size_t)k * (size_t)S;
      size_t planar = ((size_t)k * (size_t)N + (size_t)s) * (size_t)S;
      memcpy(dst + (back ? planar : flat), src + (back ? flat : planar),
             (size_t)S * sizeof(float));
    }
}

static void rows_cpu(compute *cp, float *Y, const float *bias, int N, int C) {
  (void)cp;
  for (int s = 0; s < N; s++)
    memcpy(Y + (size_t)s * (size_t)C, bias, (size_t)C * sizeof(float));
}

static void colsum_cpu(compute *cp, const float *D, int N, int C, float *out) {
  (void)cp;
  memset(out, 0, (size_t)C * sizeof *out);
  for (int s = 0; s < N; s++)
    for (int k = 0; k < C; k++)
      out[k] += D[(size_t)s * (size_t)C + (size_t)k];
}

static void *stream_cpu(compute *c) {
  (void)c;
  return NULL;
}

static void scale_cpu(compute *cp, float *v, size_t n, float s) {
  (void)cp;
  for (size_t i = 0; i < n; i++)
    v[i] *= s;
}

static int finite_cpu(compute *cp, const float *v, size_t n) {
  (void)cp;
  return scaler_all_finite(v, n);
}

static void xent_cpu(compute *cp, const float *logits, const uint8_t *y, int B,
                     int C, float *dlogits, double *acc) {
  (void)cp;
  long correct = 0;
  acc[0] += softmax_xent(logits, y, B, C, dlogits, &correct);
  acc[1] += (double)correct;
}

static void optim_cpu(compute *cp, const optim_args *a, float *p,
                      const float *g, float *m, float *v, size_t count) {
  (void)cp;
  optim_apply(a, p, g, m, v, count);
}

static void set_lowp_cpu(compute *cp, lowp_kind k) {
  (void)cp;
  (void)k;
}

const compute_ops compute_cpu_ops = {
    .name = "cpu",
    .host = 1,
    .open = open_cpu,
    .close = close_cpu,
    .alloc = alloc_cpu,
    .release = release_cpu,
    .to_dev = copy_cpu,
    .to_host = to_host_cpu,
    .copy = copy_cpu,
    .gemm = gemm_cpu,
    .round = round_cpu,
    .im2col = im2col_cpu,
    .col2im = col2im_cpu,
    .bn_relu = bn_relu_cpu,
    .pool = pool_cpu,
    .pool_back = pool_back_cpu,
    .bn_sums = bn_sums_cpu,
    .bn_back = bn_back_cpu,
    .flatten = flatten_cpu,
    .rows = rows_cpu,
    .colsum = colsum_cpu,
    .stream = stream_cpu,
    .scale = scale_cpu,
    .finite = finite_cpu,
    .xent = xent_cpu,
    .optim = optim_cpu,
    .set_lowp = set_lowp_cpu,
};

compute *compute_cpu(void) {
  static compute cpu = {.ops = &compute_cpu_ops};
  return &cpu;
}
