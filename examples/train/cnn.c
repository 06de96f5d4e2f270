/*
 * cnn.c - the CNN's passes (see cnn.h for the model and its sources).
 *
 * A block (conv3x3 + batch norm + ReLU + maxpool2) with input A (cin x N
 * x h x w, n = N*h*w positions) and K = cin*9:
 *   col   = im2col(A)                     K x n
 *   Z     = Wc col                        cout x n
 *   xhat  = (Z - mean) * invstd           per channel
 *   Y     = relu(gamma xhat + beta)
 *   P     = maxpool2(Y)                   cout x N x h/2 x w/2
 * Backward from dP:
 *   dY    = dP at each window's argmax, 0 elsewhere, times relu'(Y)
 *   dbeta = sum dY;  dgamma = sum dY xhat           per channel
 *   dZ    = gamma invstd / n (n dY - dbeta - xhat dgamma)  (training mode)
 *   dWc   = dZ col^T;  dcol = Wc^T dZ;  dA = col2im(dcol)
 */
#include "cnn.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

enum {
  T_CONV1,
  T_BN1_W,
  T_BN1_B,
  T_CONV2,
  T_BN2_W,
  T_BN2_B,
  T_FC_W,
  T_FC_B,
  T_BN1_RM,
  T_BN1_RV,
  T_BN2_RM,
  T_BN2_RV,
  T_COUNT
};

typedef struct block {
  int cin, cout, h, w;       /* input channels, output channels, input h x w */
  int t_conv, t_gamma, t_rm; /* tensor indices (beta, var follow) */
  float *col;                /* cin*9 x n */
  float *xhat;               /* cout x n */
  float *y;                  /* cout x n, after ReLU */
  float *dy;                 /* cout x n */
  float *out;                /* cout x N*(h/2)*(w/2) */
  uint32_t *arg;             /* argmax of each window, index into y's plane */
  float *mean, *invstd;      /* cout, of the last forward */
  float *dg, *db;            /* cout: this pass's gamma and beta gradients */
  const float *in;           /* input of the last forward (not owned) */
} block;

typedef struct cnn {
  cnn_shape s;
  model_tensor t[T_COUNT];
  size_t n_trainable; /* floats before the buffers */
  int feat;           /* c2 * (h/4) * (w/4) */
  block b[2];
  float *flat;    /* N x feat */
  float *logits;  /* N x classes */
  float *dlogits; /* N x classes */
  float *dflat;   /* N x feat */
  float *dp2;     /* c2 x N*(h/4)*(w/4) */
  float *dp1;     /* c1 x N*(h/2)*(w/2) */
  float *params;  /* n_params, owned */
  int B;          /* batch of the last forward */
} cnn;

static const char *const names[T_COUNT] = {
    "conv1.weight",    "bn1.weight",       "bn1.bias",
    "conv2.weight",    "bn2.weight",       "bn2.bias",
    "fc.weight",       "fc.bias",          "bn1.running_mean",
    "bn1.running_var", "bn2.running_mean", "bn2.running_var"};

static void lay_out(cnn *c) {
  const cnn_shape *s = &c->s;
  size_t count[T_COUNT] = {
      [T_CONV1] = (size_t)s->c1 * 9,
      [T_BN1_W] = (size_t)s->c1,
      [T_BN1_B] = (size_t)s->c1,
      [T_CONV2] = (size_t)s->c2 * (size_t)s->c1 * 9,
      [T_BN2_W] = (size_t)s->c2,
      [T_BN2_B] = (size_t)s->c2,
      [T_FC_W] = (size_t)s->classes * (size_t)c->feat,
      [T_FC_B] = (size_t)s->classes,
      [T_BN1_RM] = (size_t)s->c1,
      [T_BN1_RV] = (size_t)s->c1,
      [T_BN2_RM] = (size_t)s->c2,
      [T_BN2_RV] = (size_t)s->c2,
  };
  size_t off = 0;
  for (int i = 0; i < T_COUNT; i++) {
    model_tensor *d = &c->t[i];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", names[i]);
    d->offset = off;
    d->count = count[i];
    d->trainable = i < T_BN1_RM;
    d->decay = i == T_CONV1 || i == T_CONV2 || i == T_FC_W;
    off += count[i];
    if (i == T_FC_B)
      c->n_trainable = off;
  }
}

static int block_alloc(block *b, int N) {
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w;
  size_t np = n / 4, co = (size_t)b->cout;
  b->col = malloc((size_t)b->cin * 9 * n * sizeof(float));
  b->xhat = malloc(co * n * sizeof(float));
  b->y = malloc(co * n * sizeof(float));
  b->dy = malloc(co * n * sizeof(float));
  b->out = malloc(co * np * sizeof(float));
  b->arg = malloc(co * np * sizeof(uint32_t));
  b->mean = malloc(co * 4 * sizeof(float));
  if (!b->col || !b->xhat || !b->y || !b->dy || !b->out || !b->arg || !b->mean)
    return -1;
  b->invstd = b->mean + co;
  b->dg = b->mean + 2 * co;
  b->db = b->mean + 3 * co;
  return 0;
}

static void block_free(block *b) {
  free(b->col);
  free(b->xhat);
  free(b->y);
  free(b->dy);
  free(b->out);
  free(b->arg);
  free(b->mean);
}

static void destroy(model *m) {
  cnn *c = m->impl;
  if (!c)
    return;
  for (int i = 0; i < 2; i++)
    block_free(&c->b[i]);
  free(c->flat);
  free(c->logits);
  free(c->dlogits);
  free(c->dflat);
  free(c->dp2);
  free(c->dp1);
  free(c->params);
  free(c);
  m->impl = NULL;
}

static int bad_shape(const cnn_shape *s) {
  return s->h < 4 || s->h > 256 || s->h % 4 || s->w < 4 || s->w > 256 ||
         s->w % 4 || s->c1 < 1 || s->c1 > 1024 || s->c2 < 1 || s->c2 > 1024 ||
         s->classes < 2 || s->classes > 1024;
}

int cnn_create(model *m, const cnn_shape *s, int max_batch) {
  memset(m, 0, sizeof *m);
  if (bad_shape(s) || max_batch < 1)
    return -1;
  cnn *c = calloc(1, sizeof *c);
  if (!c)
    return -1;
  m->impl = c;
  m->ops = &model_cnn_ops;
  c->s = *s;
  c->feat = s->c2 * (s->h / 4) * (s->w / 4);
  lay_out(c);
  c->b[0] = (block){.cin = 1,
                    .cout = s->c1,
                    .h = s->h,
                    .w = s->w,
                    .t_conv = T_CONV1,
                    .t_gamma = T_BN1_W,
                    .t_rm = T_BN1_RM};
  c->b[1] = (block){.cin = s->c1,
                    .cout = s->c2,
                    .h = s->h / 2,
                    .w = s->w / 2,
                    .t_conv = T_CONV2,
                    .t_gamma = T_BN2_W,
                    .t_rm = T_BN2_RM};
  size_t N = (size_t)max_batch,
         n_params = c->t[T_COUNT - 1].offset + c->t[T_COUNT - 1].count;
  size_t p1 = (size_t)s->c1 * N * (size_t)(s->h / 2) * (size_t)(s->w / 2);
  size_t p2 = (size_t)c->feat * N;
  c->params = calloc(n_params, sizeof(float));
  c->flat = malloc(p2 * sizeof(float));
  c->dflat = malloc(p2 * sizeof(float));
  c->dp2 = malloc(p2 * sizeof(float));
  c->dp1 = malloc(p1 * sizeof(float));
  c->logits = malloc(N * (size_t)s->classes * sizeof(float));
  c->dlogits = malloc(N * (size_t)s->classes * sizeof(float));
  if (!c->params || !c->flat || !c->dflat || !c->dp2 || !c->dp1 || !c->logits ||
      !c->dlogits || block_alloc(&c->b[0], max_batch) != 0 ||
      block_alloc(&c->b[1], max_batch) != 0) {
    destroy(m);
    memset(m, 0, sizeof *m);
    return -1;
  }
  m->params = c->params;
  m->n_params = n_params;
  m->n_tensors = T_COUNT;
  m->classes = s->classes;
  m->max_batch = max_batch;
  m->dlogits = c->dlogits;
  return 0;
}

static int create(model *m, int max_batch) {
  const model_ops *ops = m->ops;
  cnn_shape s = CNN_DEFAULT_SHAPE;
  int rc = cnn_create(m, &s, max_batch);
  if (rc == 0)
    m->ops = ops;
  return rc;
}

static model_tensor tensor_at(const model *m, int t) {
  return ((const cnn *)m->impl)->t[t];
}

/* He/Kaiming normal (He et al., ICCV 2015) for the kernels and the linear
 * layer, N(0, 2 / fan_in), drawn in tensor order; batch norm scale 1,
 * shift 0, running mean 0, running variance 1 (PyTorch's). */
static void init(model *m, rng *r) {
  cnn *c = m->impl;
  const size_t fan_in[T_COUNT] = {[T_CONV1] = 9,
                                  [T_CONV2] = (size_t)c->s.c1 * 9,
                                  [T_FC_W] = (size_t)c->feat};
  for (int i = 0; i < T_COUNT; i++) {
    model_tensor *d = &c->t[i];
    float *p = m->params + d->offset;
    int ones = i == T_BN1_W || i == T_BN2_W || i == T_BN1_RV || i == T_BN2_RV;
    double sd = fan_in[i] ? sqrt(2.0 / (double)fan_in[i]) : 0.0;
    for (size_t k = 0; k < d->count; k++)
      p[k] = d->decay ? (float)(sd * rng_normal(r)) : ones ? 1.0f : 0.0f;
  }
}

/* The output columns x whose input column x + kx - 1 lies in 0..w-1. */
static int x_lo(int kx) { return kx == 0 ? 1 : 0; }
static int x_hi(int kx, int w) { return kx == 2 ? w - 1 : w; }

/* col (cin*9 x N*h*w) from A (cin x N x h x w), zero padding 1. */
static void im2col(const float *A, int cin, int N, int h, int w, float *col) {
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

/* dA (cin x N x h x w) = the adjoint of im2col applied to dcol. */
static void col2im(const float *dcol, int cin, int N, int h, int w, float *dA) {
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

/* Batch norm + ReLU of channel plane z (n values) into xhat and y. */
static void bn_relu(block *b, int c, const float *z, size_t n, float *params,
                    const float *W, const model_tensor *t, int train) {
  float *rm = params + t[b->t_rm].offset, *rv = params + t[b->t_rm + 1].offset;
  float gamma = W[t[b->t_gamma].offset + (size_t)c];
  float beta = W[t[b->t_gamma + 1].offset + (size_t)c];
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
    rv[c] =
        (1.0f - BN_MOMENTUM) * rv[c] +
        BN_MOMENTUM * (float)(n > 1 ? var * (double)n / (double)(n - 1) : var);
  }
  float mu = (float)mean, is = (float)(1.0 / sqrt(var + (double)BN_EPS));
  b->mean[c] = mu;
  b->invstd[c] = is;
  float *xh = b->xhat + (size_t)c * n, *y = b->y + (size_t)c * n;
  for (size_t i = 0; i < n; i++) {
    xh[i] = (z[i] - mu) * is;
    float v = gamma * xh[i] + beta;
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

static void block_forward(block *b, const float *in, int N, float *params,
                          const float *W, const model_tensor *t, int train,
                          lowp_kind lp) {
  b->in = in;
  int K = b->cin * 9, h2 = b->h / 2, w2 = b->w / 2;
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w;
  im2col(in, b->cin, N, b->h, b->w, b->col);
  /* Z into dy (free until backward), then normalised into xhat. */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b->cout, (int)n, K,
              1.0f, W + t[b->t_conv].offset, K, b->col, (int)n, 0.0f, b->dy,
              (int)n);
  lowp_round(b->dy, (size_t)b->cout * n, lp);
  for (int c = 0; c < b->cout; c++)
    bn_relu(b, c, b->dy + (size_t)c * n, n, params, W, t, train);
  lowp_round(b->y, (size_t)b->cout * n, lp);
  size_t np = n / 4;
  for (int c = 0; c < b->cout; c++) {
    const float *y = b->y + (size_t)c * n;
    float *o = b->out + (size_t)c * np;
    uint32_t *arg = b->arg + (size_t)c * np;
    for (int s = 0; s < N; s++)
      for (int oy = 0; oy < h2; oy++)
        for (int ox = 0; ox < w2; ox++) {
          size_t i0 =
              ((size_t)s * (size_t)b->h + 2 * (size_t)oy) * (size_t)b->w +
              2 * (size_t)ox;
          size_t cand[4] = {i0, i0 + 1, i0 + (size_t)b->w,
                            i0 + (size_t)b->w + 1};
          size_t best = cand[0];
          for (int k = 1; k < 4; k++)
            if (y[cand[k]] > y[best])
              best = cand[k];
          size_t j =
              ((size_t)s * (size_t)h2 + (size_t)oy) * (size_t)w2 + (size_t)ox;
          o[j] = y[best];
          arg[j] = (uint32_t)best;
        }
  }
}

static const float *forward(model *m, const float *x, int N, int train) {
  cnn *c = m->impl;
  const model_tensor *t = c->t;
  const float *W = m->compute ? m->compute : m->params;
  c->B = N;
  block_forward(&c->b[0], x, N, m->params, W, t, train, m->lowp);
  block_forward(&c->b[1], c->b[0].out, N, m->params, W, t, train, m->lowp);
  /* Flatten c2 x N x S into N x (c2 * S), S = (h/4)(w/4). */
  int S = c->feat / c->s.c2, C = c->s.classes;
  for (int k = 0; k < c->s.c2; k++)
    for (int s = 0; s < N; s++)
      memcpy(c->flat + (size_t)s * (size_t)c->feat + (size_t)k * (size_t)S,
             c->b[1].out + ((size_t)k * (size_t)N + (size_t)s) * (size_t)S,
             (size_t)S * sizeof(float));
  for (int s = 0; s < N; s++)
    memcpy(c->logits + (size_t)s * (size_t)C, W + t[T_FC_B].offset,
           (size_t)C * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, c->feat, 1.0f,
              c->flat, c->feat, W + t[T_FC_W].offset, c->feat, 1.0f, c->logits,
              C);
  lowp_round(c->logits, (size_t)N * (size_t)C, m->lowp);
  return c->logits;
}

/* Hands tensor i's finished gradient to ready (if any). */
static int hand(model_grad_ready ready, void *ctx, const cnn *c, int i,
                float *grads) {
  const model_tensor *d = &c->t[i];
  return ready ? ready(ctx, i, grads + d->offset, d->count) : 0;
}

static int block_backward(const cnn *c, block *b, int N, const float *dp,
                          float *dA, const float *params, lowp_kind lp,
                          float *grads, model_grad_ready ready, void *ctx) {
  const model_tensor *t = c->t;
  int K = b->cin * 9;
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w, np = n / 4;
  memset(b->dy, 0, (size_t)b->cout * n * sizeof(float));
  for (int k = 0; k < b->cout; k++) {
    const float *y = b->y + (size_t)k * n, *g = dp + (size_t)k * np;
    const uint32_t *arg = b->arg + (size_t)k * np;
    float *dy = b->dy + (size_t)k * n;
    for (size_t j = 0; j < np; j++)
      if (y[arg[j]] > 0.0f) /* relu'(.) = 0 where the output was clamped */
        dy[arg[j]] = g[j];
  }
  for (int k = 0; k < b->cout; k++) {
    const float *dy = b->dy + (size_t)k * n, *xh = b->xhat + (size_t)k * n;
    double sg = 0.0, sb = 0.0;
    for (size_t i = 0; i < n; i++) {
      sb += dy[i];
      sg += (double)dy[i] * xh[i];
    }
    b->dg[k] = (float)sg;
    b->db[k] = (float)sb;
  }
  memcpy(grads + t[b->t_gamma + 1].offset, b->db, (size_t)b->cout * 4);
  int rc = hand(ready, ctx, c, b->t_gamma + 1, grads);
  if (rc)
    return rc;
  memcpy(grads + t[b->t_gamma].offset, b->dg, (size_t)b->cout * 4);
  if ((rc = hand(ready, ctx, c, b->t_gamma, grads)))
    return rc;
  for (int k = 0; k < b->cout; k++) { /* dY -> dZ in place */
    float *dy = b->dy + (size_t)k * n;
    const float *xh = b->xhat + (size_t)k * n;
    float gamma = params[t[b->t_gamma].offset + (size_t)k];
    float a = gamma * b->invstd[k] / (float)n, dbk = b->db[k], dgk = b->dg[k];
    for (size_t i = 0; i < n; i++)
      dy[i] = a * ((float)n * dy[i] - dbk - xh[i] * dgk);
  }
  lowp_round(b->dy, (size_t)b->cout * n, lp);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->cout, K, (int)n, 1.0f,
              b->dy, (int)n, b->col, (int)n, 0.0f, grads + t[b->t_conv].offset,
              K);
  if ((rc = hand(ready, ctx, c, b->t_conv, grads)))
    return rc;
  if (!dA)
    return 0;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, (int)n, b->cout, 1.0f,
              params + t[b->t_conv].offset, K, b->dy, (int)n, 0.0f, b->col,
              (int)n);
  col2im(b->col, b->cin, N, b->h, b->w, dA);
  return 0;
}

static int backward(model *m, int N, float *grads, model_grad_ready ready,
                    void *ctx) {
  cnn *c = m->impl;
  const model_tensor *t = c->t;
  const float *W = m->compute ? m->compute : m->params;
  int C = c->s.classes, S = c->feat / c->s.c2;
  const float *D = c->dlogits;
  float *gb = grads + t[T_FC_B].offset;
  memset(gb, 0, (size_t)C * sizeof *gb);
  for (int s = 0; s < N; s++)
    for (int k = 0; k < C; k++)
      gb[k] += D[(size_t)s * (size_t)C + (size_t)k];
  int rc = hand(ready, ctx, c, T_FC_B, grads);
  if (rc)
    return rc;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, c->feat, N, 1.0f, D,
              C, c->flat, c->feat, 0.0f, grads + t[T_FC_W].offset, c->feat);
  if ((rc = hand(ready, ctx, c, T_FC_W, grads)))
    return rc;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, c->feat, C, 1.0f, D,
              C, W + t[T_FC_W].offset, c->feat, 0.0f, c->dflat, c->feat);
  lowp_round(c->dflat, (size_t)N * (size_t)c->feat, m->lowp);
  for (int k = 0; k < c->s.c2; k++) /* un-flatten into c2 x N x S */
    for (int s = 0; s < N; s++)
      memcpy(c->dp2 + ((size_t)k * (size_t)N + (size_t)s) * (size_t)S,
             c->dflat + (size_t)s * (size_t)c->feat + (size_t)k * (size_t)S,
             (size_t)S * sizeof(float));
  if ((rc = block_backward(c, &c->b[1], N, c->dp2, c->dp1, W, m->lowp, grads,
                           ready, ctx)))
    return rc;
  lowp_round(c->dp1,
             (size_t)c->s.c1 * (size_t)N * (size_t)(c->s.h / 2) *
                 (size_t)(c->s.w / 2),
             m->lowp);
  return block_backward(c, &c->b[0], N, c->dp1, NULL, W, m->lowp, grads, ready,
                        ctx);
}

static int header(const model *m, char magic[8], uint32_t *words) {
  const cnn *c = m->impl;
  memcpy(magic, "HKCNN1\0\0", 8);
  words[0] = (uint32_t)c->s.h;
  words[1] = (uint32_t)c->s.w;
  words[2] = (uint32_t)c->s.c1;
  words[3] = (uint32_t)c->s.c2;
  words[4] = (uint32_t)c->s.classes;
  return 5;
}

static void describe(const model *m, char *out, size_t cap) {
  const cnn *c = m->impl;
  snprintf(out, cap, "cnn conv%d-conv%d-fc%d (batch norm: local statistics)",
           c->s.c1, c->s.c2, c->s.classes);
}

const model_ops model_cnn_ops = {
    .name = "cnn",
    .create = create,
    .destroy = destroy,
    .tensor_at = tensor_at,
    .init = init,
    .forward = forward,
    .backward = backward,
    .header = header,
    .describe = describe,
};
