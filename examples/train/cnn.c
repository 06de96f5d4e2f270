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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} block;

/* Every pointer below but params, dlogits and hlogits is the compute
 * row's memory (compute.h); on a host row dW, dG, dx and ddl are NULL
 * and the passes read the model's own host buffers instead. */
typedef struct cnn {
  cnn_shape s;
  compute *cp; /* the row the passes run on (not owned) */
  model_tensor t[T_COUNT];
  size_t n_trainable; /* floats before the buffers */
  size_t n_params;
  int feat; /* c2 * (h/4) * (w/4) */
  block b[2];
  float *flat;    /* N x feat */
  float *logits;  /* N x classes */
  float *dflat;   /* N x feat */
  float *dp2;     /* c2 x N*(h/4)*(w/4) */
  float *dp1;     /* c1 x N*(h/2)*(w/2) */
  float *params;  /* n_params, host, owned */
  float *dlogits; /* N x classes, host (model_loss writes it) */
  float *hlogits; /* N x classes, host copy of logits (device rows) */
  float *dW;      /* device rows: the weights and running statistics
                     (the model's row_params: the master copy) */
  float *dWc;     /* device rows: the weights rounded to the compute type
                     (n_trainable; read when m->lowp is not fp32) */
  const float *W; /* the weights the last forward read (row memory) */
  float *dG;      /* device rows: the gradients (params' layout) */
  float *dx;      /* device rows: the input batch */
  float *ddl;     /* device rows: dlogits (the model's row_dlogits) */
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
  c->n_params = off;
}

/* Row memory of `floats` 4-byte words (NULL on failure: cp->err says). */
static void *row_alloc(compute *cp, size_t floats) {
  return cp->ops->alloc(cp, floats * sizeof(float));
}

static void row_free(compute *cp, void *p) {
  if (p)
    cp->ops->release(cp, p);
}

static int block_alloc(compute *cp, block *b, int N) {
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w;
  size_t np = n / 4, co = (size_t)b->cout;
  b->col = row_alloc(cp, (size_t)b->cin * 9 * n);
  b->xhat = row_alloc(cp, co * n);
  b->y = row_alloc(cp, co * n);
  b->dy = row_alloc(cp, co * n);
  b->out = row_alloc(cp, co * np);
  b->arg = row_alloc(cp, co * np); /* uint32_t: 4 bytes too */
  b->mean = row_alloc(cp, co * 4);
  if (!b->col || !b->xhat || !b->y || !b->dy || !b->out || !b->arg || !b->mean)
    return -1;
  b->invstd = b->mean + co;
  b->dg = b->mean + 2 * co;
  b->db = b->mean + 3 * co;
  return 0;
}

static void block_free(compute *cp, block *b) {
  row_free(cp, b->col);
  row_free(cp, b->xhat);
  row_free(cp, b->y);
  row_free(cp, b->dy);
  row_free(cp, b->out);
  row_free(cp, b->arg);
  row_free(cp, b->mean);
}

static void destroy(model *m) {
  cnn *c = m->impl;
  if (!c)
    return;
  compute *cp = c->cp;
  for (int i = 0; i < 2; i++)
    block_free(cp, &c->b[i]);
  float *rows[] = {c->flat, c->logits, c->dflat, c->dp2, c->dp1,
                   c->dW,   c->dWc,    c->dG,    c->dx,  c->ddl};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
    row_free(cp, rows[i]);
  free(c->params);
  free(c->dlogits);
  free(c->hlogits);
  free(c);
  m->impl = NULL;
}

static int bad_shape(const cnn_shape *s) {
  return s->h < 4 || s->h > 256 || s->h % 4 || s->w < 4 || s->w > 256 ||
         s->w % 4 || s->c1 < 1 || s->c1 > 1024 || s->c2 < 1 || s->c2 > 1024 ||
         s->classes < 2 || s->classes > 1024;
}

int cnn_create_on(model *m, const cnn_shape *s, int max_batch, compute *cp) {
  memset(m, 0, sizeof *m);
  if (bad_shape(s) || max_batch < 1)
    return -1;
  cnn *c = calloc(1, sizeof *c);
  if (!c)
    return -1;
  m->impl = c;
  m->ops = &model_cnn_ops;
  c->cp = cp;
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
  size_t N = (size_t)max_batch, n_params = c->n_params;
  size_t p1 = (size_t)s->c1 * N * (size_t)(s->h / 2) * (size_t)(s->w / 2);
  size_t p2 = (size_t)c->feat * N, nl = N * (size_t)s->classes;
  int dev = !cp->ops->host;
  c->params = calloc(n_params, sizeof(float));
  c->dlogits = malloc(nl * sizeof(float));
  c->flat = row_alloc(cp, p2);
  c->dflat = row_alloc(cp, p2);
  c->dp2 = row_alloc(cp, p2);
  c->dp1 = row_alloc(cp, p1);
  c->logits = row_alloc(cp, nl);
  int fail = !c->params || !c->dlogits || !c->flat || !c->dflat || !c->dp2 ||
             !c->dp1 || !c->logits || block_alloc(cp, &c->b[0], max_batch) ||
             block_alloc(cp, &c->b[1], max_batch);
  if (!fail && dev) {
    c->hlogits = malloc(nl * sizeof(float));
    c->dW = row_alloc(cp, n_params);
    c->dWc = row_alloc(cp, c->n_trainable);
    c->dG = row_alloc(cp, n_params);
    c->dx = row_alloc(cp, N * (size_t)s->h * (size_t)s->w);
    c->ddl = row_alloc(cp, nl);
    fail = !c->hlogits || !c->dW || !c->dWc || !c->dG || !c->dx || !c->ddl;
  }
  if (fail) {
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
  m->cp = cp;
  m->dev_grads = c->dG;
  m->row_params = dev ? c->dW : c->params;
  m->row_dlogits = dev ? c->ddl : c->dlogits;
  m->host_logits = c->hlogits;
  return 0;
}

int cnn_create(model *m, const cnn_shape *s, int max_batch) {
  return cnn_create_on(m, s, max_batch, compute_cpu());
}

static int create(model *m, int max_batch) {
  const model_ops *ops = m->ops;
  cnn_shape s = CNN_DEFAULT_SHAPE;
  int rc = cnn_create_on(m, &s, max_batch, m->cp ? m->cp : compute_cpu());
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

/* A block's forward: P holds the running statistics, W the weights the
 * pass reads (both row memory). */
static void block_forward(compute *cp, block *b, const float *in, int N,
                          float *P, const float *W, const model_tensor *t,
                          int train, lowp_kind lp) {
  const compute_ops *o = cp->ops;
  int K = b->cin * 9;
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w;
  o->im2col(cp, in, b->cin, N, b->h, b->w, b->col);
  /* Z into dy (free until backward), then normalised into xhat. */
  o->gemm(cp, 0, 0, b->cout, (int)n, K, 1.0f, W + t[b->t_conv].offset, K,
          b->col, (int)n, 0.0f, b->dy, (int)n);
  o->round(cp, b->dy, (size_t)b->cout * n, lp);
  o->bn_relu(cp, b->dy, b->cout, n, W + t[b->t_gamma].offset,
             W + t[b->t_gamma + 1].offset, P + t[b->t_rm].offset,
             P + t[b->t_rm + 1].offset, train, b->mean, b->invstd, b->xhat,
             b->y);
  o->round(cp, b->y, (size_t)b->cout * n, lp);
  o->pool(cp, b->y, b->cout, N, b->h, b->w, b->out, b->arg);
}

static const float *forward(model *m, const float *x, int N, int train) {
  cnn *c = m->impl;
  compute *cp = c->cp;
  const compute_ops *o = cp->ops;
  const model_tensor *t = c->t;
  const float *W = m->compute ? m->compute : m->params;
  float *P = m->params;
  int C = c->s.classes;
  c->B = N;
  if (!o->host) { /* weights and statistics stay in dW; the batch over */
    W = P = c->dW;
    if (m->lowp != LOWP_FP32) { /* the pass reads rounded weights */
      o->copy(cp, c->dWc, c->dW, c->n_trainable * sizeof(float));
      o->round(cp, c->dWc, c->n_trainable, m->lowp);
      W = c->dWc;
    }
    if (m->dev_x) { /* staged by the input pipeline */
      x = m->dev_x;
    } else {
      o->to_dev(cp, c->dx, x,
                (size_t)N * (size_t)c->s.h * (size_t)c->s.w * sizeof(float));
      x = c->dx;
    }
  }
  c->W = W;
  block_forward(cp, &c->b[0], x, N, P, W, t, train, m->lowp);
  block_forward(cp, &c->b[1], c->b[0].out, N, P, W, t, train, m->lowp);
  /* Flatten c2 x N x S into N x (c2 * S), S = (h/4)(w/4). */
  o->flatten(cp, c->b[1].out, c->s.c2, N, c->feat / c->s.c2, c->flat, 0);
  o->rows(cp, c->logits, W + t[T_FC_B].offset, N, C);
  o->gemm(cp, 0, 1, N, C, c->feat, 1.0f, c->flat, c->feat, W + t[T_FC_W].offset,
          c->feat, 1.0f, c->logits, C);
  o->round(cp, c->logits, (size_t)N * (size_t)C, m->lowp);
  return c->logits;
}

/* Hands tensor i's finished gradient (in G, row memory) to ready. */
static int hand(model_grad_ready ready, void *ctx, const cnn *c, int i,
                float *G) {
  const model_tensor *d = &c->t[i];
  return ready ? ready(ctx, i, G + d->offset, d->count) : 0;
}

static int block_backward(const cnn *c, const block *b, int N, const float *dp,
                          float *dA, const float *W, lowp_kind lp, float *G,
                          model_grad_ready ready, void *ctx) {
  compute *cp = c->cp;
  const compute_ops *o = cp->ops;
  const model_tensor *t = c->t;
  int K = b->cin * 9;
  size_t n = (size_t)N * (size_t)b->h * (size_t)b->w;
  o->pool_back(cp, b->y, b->arg, dp, b->cout, N, b->h, b->w, b->dy);
  o->bn_sums(cp, b->dy, b->xhat, b->cout, n, b->dg, b->db);
  o->copy(cp, G + t[b->t_gamma + 1].offset, b->db, (size_t)b->cout * 4);
  int rc = hand(ready, ctx, c, b->t_gamma + 1, G);
  if (rc)
    return rc;
  o->copy(cp, G + t[b->t_gamma].offset, b->dg, (size_t)b->cout * 4);
  if ((rc = hand(ready, ctx, c, b->t_gamma, G)))
    return rc;
  o->bn_back(cp, b->dy, b->xhat, b->cout, n, W + t[b->t_gamma].offset,
             b->invstd, b->dg, b->db); /* dY -> dZ in place */
  o->round(cp, b->dy, (size_t)b->cout * n, lp);
  o->gemm(cp, 0, 1, b->cout, K, (int)n, 1.0f, b->dy, (int)n, b->col, (int)n,
          0.0f, G + t[b->t_conv].offset, K);
  if ((rc = hand(ready, ctx, c, b->t_conv, G)))
    return rc;
  if (!dA)
    return 0;
  o->gemm(cp, 1, 0, K, (int)n, b->cout, 1.0f, W + t[b->t_conv].offset, K, b->dy,
          (int)n, 0.0f, b->col, (int)n);
  o->col2im(cp, b->col, b->cin, N, b->h, b->w, dA);
  return 0;
}

static int backward(model *m, int N, float *grads, model_grad_ready ready,
                    void *ctx) {
  cnn *c = m->impl;
  compute *cp = c->cp;
  const compute_ops *o = cp->ops;
  const model_tensor *t = c->t;
  const float *W = c->W; /* what the forward read */
  int C = c->s.classes, S = c->feat / c->s.c2;
  const float *D = m->row_dlogits;
  float *G = o->host ? grads : c->dG;
  o->colsum(cp, D, N, C, G + t[T_FC_B].offset);
  int rc = hand(ready, ctx, c, T_FC_B, G);
  if (rc)
    return rc;
  o->gemm(cp, 1, 0, C, c->feat, N, 1.0f, D, C, c->flat, c->feat, 0.0f,
          G + t[T_FC_W].offset, c->feat);
  if ((rc = hand(ready, ctx, c, T_FC_W, G)))
    return rc;
  o->gemm(cp, 0, 0, N, c->feat, C, 1.0f, D, C, W + t[T_FC_W].offset, c->feat,
          0.0f, c->dflat, c->feat);
  o->round(cp, c->dflat, (size_t)N * (size_t)c->feat, m->lowp);
  o->flatten(cp, c->dflat, c->s.c2, N, S, c->dp2, 1); /* into c2 x N x S */
  if ((rc = block_backward(c, &c->b[1], N, c->dp2, c->dp1, W, m->lowp, G, ready,
                           ctx)))
    return rc;
  o->round(cp, c->dp1,
           (size_t)c->s.c1 * (size_t)N * (size_t)(c->s.h / 2) *
               (size_t)(c->s.w / 2),
           m->lowp);
  return block_backward(c, &c->b[0], N, c->dp1, NULL, W, m->lowp, G, ready,
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
    .any_row = 1,
    .create = create,
    .destroy = destroy,
    .tensor_at = tensor_at,
    .init = init,
    .forward = forward,
    .backward = backward,
    .header = header,
    .describe = describe,
};
