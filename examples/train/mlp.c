/*
 * mlp.c - the MLP's passes (see mlp.h). Matrix products are cblas_sgemm
 * calls; biases, ReLU and softmax are plain loops.
 *
 * Backward, for layer l with input A (B x in), output gradient D = dL/dZ
 * (B x out), weight W (out x in):
 *   dL/db = column sums of D
 *   dL/dW = D^T A                       (out x in)
 *   dL/dA = D W, then times relu'(A)    (B x in), the next D
 */
#include "mlp.h"

#include "loss.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WIDTH 65536

int mlp_init(mlp *m, int n_layers, const int *dims) {
  memset(m, 0, sizeof *m);
  if (n_layers < 1 || n_layers > MLP_MAX_LAYERS)
    return -1;
  size_t n = 0;
  for (int l = 0; l <= n_layers; l++) {
    if (dims[l] < 1 || dims[l] > MAX_WIDTH)
      return -1;
    m->dims[l] = dims[l];
  }
  for (int l = 0; l < n_layers; l++)
    n += (size_t)dims[l + 1] * (size_t)dims[l] + (size_t)dims[l + 1];
  m->params = calloc(n, sizeof *m->params);
  if (!m->params) {
    memset(m, 0, sizeof *m);
    return -1;
  }
  m->n_layers = n_layers;
  m->n_params = n;
  return 0;
}

void mlp_free(mlp *m) {
  free(m->params);
  memset(m, 0, sizeof *m);
}

int mlp_n_tensors(const mlp *m) { return 2 * m->n_layers; }

mlp_tensor mlp_tensor_at(const mlp *m, int t) {
  mlp_tensor d;
  memset(&d, 0, sizeof d);
  size_t off = 0;
  for (int l = 0; l < t / 2; l++)
    off += (size_t)m->dims[l + 1] * (size_t)m->dims[l] + (size_t)m->dims[l + 1];
  d.layer = t / 2;
  d.is_bias = t % 2;
  size_t wcount = (size_t)m->dims[d.layer + 1] * (size_t)m->dims[d.layer];
  d.offset = off + (d.is_bias ? wcount : 0);
  d.count = d.is_bias ? (size_t)m->dims[d.layer + 1] : wcount;
  snprintf(d.name, sizeof d.name, "fc%d.%s", d.layer + 1,
           d.is_bias ? "bias" : "weight");
  return d;
}

void mlp_init_he(mlp *m, rng *r) {
  for (int t = 0; t < mlp_n_tensors(m); t++) {
    mlp_tensor d = mlp_tensor_at(m, t);
    float *p = m->params + d.offset;
    double sd = sqrt(2.0 / (double)m->dims[d.layer]);
    for (size_t i = 0; i < d.count; i++)
      p[i] = d.is_bias ? 0.0f : (float)(sd * rng_normal(r));
  }
}

static int widest(const mlp *m) {
  int w = 0;
  for (int l = 0; l <= m->n_layers; l++)
    w = m->dims[l] > w ? m->dims[l] : w;
  return w;
}

int mlp_work_init(mlp_work *w, const mlp *m, int max_batch) {
  memset(w, 0, sizeof *w);
  if (max_batch < 1)
    return -1;
  w->max_batch = max_batch;
  int ok = 1;
  for (int l = 1; l <= m->n_layers; l++)
    ok &= (w->act[l] = malloc((size_t)max_batch * (size_t)m->dims[l] *
                              sizeof(float))) != NULL;
  for (int k = 0; k < 2; k++)
    ok &= (w->delta[k] = malloc((size_t)max_batch * (size_t)widest(m) *
                                sizeof(float))) != NULL;
  if (!ok) {
    mlp_work_free(w);
    return -1;
  }
  return 0;
}

void mlp_work_free(mlp_work *w) {
  for (int l = 0; l <= MLP_MAX_LAYERS; l++)
    free(w->act[l]);
  free(w->delta[0]);
  free(w->delta[1]);
  memset(w, 0, sizeof *w);
}

const float *mlp_forward(const mlp *m, mlp_work *w, const float *x, int B) {
  w->x = x;
  const float *in = x;
  for (int l = 0; l < m->n_layers; l++) {
    int nin = m->dims[l], nout = m->dims[l + 1];
    mlp_tensor wt = mlp_tensor_at(m, 2 * l), bt = mlp_tensor_at(m, 2 * l + 1);
    const float *P = m->compute ? m->compute : m->params;
    const float *W = P + wt.offset, *b = P + bt.offset;
    float *out = w->act[l + 1];
    for (int i = 0; i < B; i++) /* out = broadcast b, then += in W^T */
      memcpy(out + (size_t)i * (size_t)nout, b, (size_t)nout * sizeof *b);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, nout, nin, 1.0f, in,
                nin, W, nin, 1.0f, out, nout);
    if (l + 1 < m->n_layers)
      for (size_t i = 0; i < (size_t)B * (size_t)nout; i++)
        out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    lowp_round(out, (size_t)B * (size_t)nout, m->lowp);
    in = out;
  }
  return w->act[m->n_layers];
}

double mlp_loss(const mlp *m, mlp_work *w, const uint8_t *y, int B,
                long *correct) {
  int C = m->dims[m->n_layers];
  return softmax_xent(w->act[m->n_layers], y, B, C, w->delta[0], correct);
}

int mlp_backward(const mlp *m, mlp_work *w, int B, float *grads,
                 mlp_grad_ready ready, void *ctx) {
  int cur = 0; /* w->delta[cur] holds dL/dZ of the layer at hand */
  for (int l = m->n_layers - 1; l >= 0; l--) {
    int nin = m->dims[l], nout = m->dims[l + 1];
    mlp_tensor wt = mlp_tensor_at(m, 2 * l), bt = mlp_tensor_at(m, 2 * l + 1);
    const float *D = w->delta[cur];
    const float *A = l ? w->act[l] : w->x;
    float *gb = grads + bt.offset, *gW = grads + wt.offset;
    memset(gb, 0, bt.count * sizeof *gb);
    for (int i = 0; i < B; i++)
      for (int k = 0; k < nout; k++)
        gb[k] += D[(size_t)i * (size_t)nout + (size_t)k];
    int rc = ready ? ready(ctx, 2 * l + 1, gb, bt.count) : 0;
    if (rc)
      return rc;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nout, nin, B, 1.0f, D,
                nout, A, nin, 0.0f, gW, nin);
    rc = ready ? ready(ctx, 2 * l, gW, wt.count) : 0;
    if (rc)
      return rc;
    if (l == 0)
      break;
    float *Dn = w->delta[1 - cur];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, nin, nout, 1.0f,
                D, nout, (m->compute ? m->compute : m->params) + wt.offset, nin,
                0.0f, Dn, nin);
    for (size_t i = 0; i < (size_t)B * (size_t)nin; i++)
      if (A[i] <= 0.0f) /* relu'(z) = 0 where the output was clamped */
        Dn[i] = 0.0f;
    lowp_round(Dn, (size_t)B * (size_t)nin, m->lowp);
    cur = 1 - cur;
  }
  return 0;
}

void mlp_count_correct(const mlp *m, mlp_work *w, const float *x,
                       const uint8_t *y, int B, long *correct) {
  const float *z = mlp_forward(m, w, x, B);
  int C = m->dims[m->n_layers];
  for (int i = 0; i < B; i++)
    if (loss_argmax(z + (size_t)i * (size_t)C, C) == y[i])
      (*correct)++;
}
