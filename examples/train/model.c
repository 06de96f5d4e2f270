/*
 * model.c - the table of model kinds and what every kind shares (see
 * model.h). A new kind is one more row here and its own file.
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>

extern const model_ops model_mlp_ops; /* model_mlp.c */
extern const model_ops model_cnn_ops; /* cnn.c */

static const model_ops *const kinds[] = {&model_mlp_ops, &model_cnn_ops};

const model_ops *model_find(const char *name) {
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    if (!strcmp(kinds[k]->name, name))
      return kinds[k];
  return NULL;
}

const char *model_names(void) { return "mlp|cnn"; }

int model_create(model *m, const model_ops *ops, int max_batch) {
  return model_create_on(m, ops, max_batch, compute_cpu());
}

int model_create_on(model *m, const model_ops *ops, int max_batch,
                    compute *cp) {
  memset(m, 0, sizeof *m);
  if (max_batch < 1 || (!ops->any_row && !cp->ops->host))
    return -1;
  m->ops = ops;
  m->cp = cp;
  m->max_batch = max_batch;
  if (ops->create(m, max_batch) != 0) {
    memset(m, 0, sizeof *m);
    return -1;
  }
  if (!m->row_params) /* a kind that runs on the CPU row only */
    m->row_params = m->params;
  if (!m->row_dlogits)
    m->row_dlogits = m->dlogits;
  return 0;
}

void model_free(model *m) {
  if (m->ops)
    m->ops->destroy(m);
  free(m->compute);
  memset(m, 0, sizeof *m);
}

int model_set_precision(model *m, lowp_kind k) {
  float *c = NULL;
  if (k != LOWP_FP32 && !(c = malloc(m->n_params * sizeof *c)))
    return -1;
  free(m->compute);
  m->compute = c;
  m->lowp = k;
  m->cp->ops->set_lowp(m->cp, k);
  return 0;
}

const float *model_forward(model *m, const float *x, int B, int train) {
  if (m->compute && m->cp->ops->host)
    lowp_copy(m->compute, m->params, m->n_params, m->lowp);
  const float *z = m->ops->forward(m, x, B, train);
  m->dev_x = NULL;
  return z;
}

model_tensor model_tensor_at(const model *m, int t) {
  return m->ops->tensor_at(m, t);
}

void model_to_row(model *m) {
  if (!m->cp->ops->host)
    m->cp->ops->to_dev(m->cp, m->row_params, m->params,
                       m->n_params * sizeof(float));
}

int model_to_host(model *m) {
  if (m->cp->ops->host)
    return 0;
  return m->cp->ops->to_host(m->cp, m->params, m->row_params,
                             m->n_params * sizeof(float));
}

/* The B x classes logits z on the host (a copy for device rows; zeros
 * when the row has failed: the caller reads compute_failed). */
static const float *host_logits(model *m, const float *z, int B) {
  if (m->cp->ops->host)
    return z;
  size_t bytes = (size_t)B * (size_t)m->classes * sizeof(float);
  if (m->cp->ops->to_host(m->cp, m->host_logits, z, bytes) != 0)
    memset(m->host_logits, 0, bytes);
  return m->host_logits;
}

double model_loss(model *m, const float *logits, const uint8_t *y, int B,
                  long *correct) {
  const float *z = host_logits(m, logits, B);
  double l = softmax_xent(z, y, B, m->classes, m->dlogits, correct);
  if (!m->cp->ops->host)
    m->cp->ops->to_dev(m->cp, m->row_dlogits, m->dlogits,
                       (size_t)B * (size_t)m->classes * sizeof(float));
  return l;
}

void model_count_correct(model *m, const float *x, const uint8_t *y, int B,
                         long *correct) {
  const float *z = host_logits(m, model_forward(m, x, B, 0), B);
  for (int i = 0; i < B; i++)
    if (loss_argmax(z + (size_t)i * (size_t)m->classes, m->classes) == y[i])
      (*correct)++;
}
