/*
 * optim.c - SGD-momentum, AdamW and the warm-up + cosine schedule
 * (formulas and sources in optim.h).
 */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

optim_config optim_defaults(optim_kind kind) {
  optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.momentum = 0.9f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.weight_decay = kind == OPTIM_ADAMW ? 0.01f : 0.0f;
  return c;
}

int optim_init(optim *o, const optim_config *cfg, size_t n) {
  memset(o, 0, sizeof *o);
  o->cfg = *cfg;
  o->n = n;
  o->b1_t = o->b2_t = 1.0;
  o->m = calloc(n ? n : 1, sizeof *o->m);
  if (cfg->kind == OPTIM_ADAMW)
    o->v = calloc(n ? n : 1, sizeof *o->v);
  if (!o->m || (cfg->kind == OPTIM_ADAMW && !o->v)) {
    optim_free(o);
    return -1;
  }
  return 0;
}

void optim_free(optim *o) {
  free(o->m);
  free(o->v);
  memset(o, 0, sizeof *o);
}

void optim_begin_step(optim *o) {
  o->step++;
  o->b1_t *= o->cfg.beta1;
  o->b2_t *= o->cfg.beta2;
}

static void sgd(const optim_config *c, float *p, const float *g, float *vel,
                size_t count, float lr, float wd) {
  float mu = c->momentum;
  for (size_t i = 0; i < count; i++) {
    float gi = g[i] + wd * p[i];
    vel[i] = mu * vel[i] + gi;
    p[i] -= lr * (c->nesterov ? gi + mu * vel[i] : vel[i]);
  }
}

static void adamw(const optim *o, float *p, const float *g, float *m, float *v,
                  size_t count, float lr, float wd) {
  const optim_config *c = &o->cfg;
  float b1 = c->beta1, b2 = c->beta2;
  /* Bias corrections folded into the step size and eps, as in Kingma &
   * Ba section 2 ("the efficiency ... could be improved"): equivalent to
   * m_hat / (sqrt(v_hat) + eps) exactly in real arithmetic. */
  float c1 = (float)(1.0 - o->b1_t), c2 = (float)sqrt(1.0 - o->b2_t);
  float step = lr * c2 / c1, eps = c->eps * c2;
  float keep = 1.0f - lr * wd;
  for (size_t i = 0; i < count; i++) {
    p[i] *= keep;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
  }
}

void optim_update(optim *o, float *p, const float *g, size_t offset,
                  size_t count, float lr, int decay) {
  float wd = decay ? o->cfg.weight_decay : 0.0f;
  if (o->cfg.kind == OPTIM_SGD)
    sgd(&o->cfg, p, g, o->m + offset, count, lr, wd);
  else
    adamw(o, p, g, o->m + offset, o->v + offset, count, lr, wd);
}

float lr_at(float peak, long step, long total, long warmup) {
  if (step < warmup)
    return peak * (float)(step + 1) / (float)warmup;
  long span = total - warmup;
  if (span <= 0)
    return peak;
  double t = (double)(step - warmup) / (double)span; /* in [0, 1) */
  return (float)(0.5 * (double)peak * (1.0 + cos(M_PI * t)));
}
