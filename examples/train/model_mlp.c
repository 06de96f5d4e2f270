/*
 * model_mlp.c - the MLP of mlp.h as a row of the model table (model.h):
 * 784-256-128-10 (train.h's widths), tensors fc1.weight, fc1.bias, ...,
 * no buffers. Every operation forwards to mlp.c, so the trainer computes
 * with --model mlp exactly what it computed before the table existed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "mlp.h"
#include "model.h"

/** Hidden widths of the model: 784-256-128-10. */
#define MLP_HIDDEN1 256
#define MLP_HIDDEN2 128

typedef struct mlp_impl {
  mlp net;
  mlp_work work;
} mlp_impl;

static int create(model *m, int max_batch) {
  const int dims[] = {DATA_PIXELS, MLP_HIDDEN1, MLP_HIDDEN2, DATA_CLASSES};
  mlp_impl *p = calloc(1, sizeof *p);
  if (!p || mlp_init(&p->net, 3, dims) != 0 ||
      mlp_work_init(&p->work, &p->net, max_batch) != 0) {
    if (p) {
      mlp_free(&p->net);
      free(p);
    }
    return -1;
  }
  m->impl = p;
  m->params = p->net.params;
  m->n_params = p->net.n_params;
  m->n_tensors = mlp_n_tensors(&p->net);
  m->classes = DATA_CLASSES;
  m->dlogits = p->work.delta[0]; /* where mlp_backward starts */
  return 0;
}

static void destroy(model *m) {
  mlp_impl *p = m->impl;
  if (!p)
    return;
  mlp_work_free(&p->work);
  mlp_free(&p->net);
  free(p);
}

static model_tensor tensor_at(const model *m, int t) {
  const mlp_impl *p = m->impl;
  mlp_tensor d = mlp_tensor_at(&p->net, t);
  model_tensor r;
  memset(&r, 0, sizeof r);
  snprintf(r.name, sizeof r.name, "%s", d.name);
  r.offset = d.offset;
  r.count = d.count;
  r.trainable = 1;
  r.decay = !d.is_bias;
  return r;
}

static void init(model *m, rng *r) {
  mlp_impl *p = m->impl;
  mlp_init_he(&p->net, r);
}

static const float *forward(model *m, const float *x, int B, int train) {
  (void)train;
  mlp_impl *p = m->impl;
  p->net.lowp = m->lowp;
  p->net.compute = m->compute;
  return mlp_forward(&p->net, &p->work, x, B);
}

static int backward(model *m, int B, float *grads, model_grad_ready ready,
                    void *ctx) {
  mlp_impl *p = m->impl;
  return mlp_backward(&p->net, &p->work, B, grads, ready, ctx);
}

static int header(const model *m, char magic[8], uint32_t *words) {
  const mlp *n = &((const mlp_impl *)m->impl)->net;
  memcpy(magic, "HKMLP1\0\0", 8);
  words[0] = (uint32_t)n->n_layers;
  for (int l = 0; l <= n->n_layers; l++)
    words[1 + l] = (uint32_t)n->dims[l];
  return n->n_layers + 2;
}

static void describe(const model *m, char *out, size_t cap) {
  const mlp *n = &((const mlp_impl *)m->impl)->net;
  snprintf(out, cap, "mlp %d-%d-%d-%d", n->dims[0], n->dims[1], n->dims[2],
           n->dims[3]);
}

const model_ops model_mlp_ops = {
    .name = "mlp",
    .create = create,
    .destroy = destroy,
    .tensor_at = tensor_at,
    .init = init,
    .forward = forward,
    .backward = backward,
    .header = header,
    .describe = describe,
};
