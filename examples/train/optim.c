/*
 * optim.c - SGD-momentum, AdamW, LAMB, the warm-up + cosine schedule and
 * reduce-on-plateau
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
  c.eps = kind == OPTIM_LAMB ? 1e-6f : 1e-8f;
  c.weight_decay = kind == OPTIM_SGD ? 0.0f : 0.01f;
  return c;
}

int optim_init(optim *o, const optim_config *cfg, size_t n) {
  memset(o, 0, sizeof *o);
  o->cfg = *cfg;
  o->n = n;
  o->b1_t = o->b2_t = 1.0;
  o->m = calloc(n ? n : 1, sizeof *o->m);
  if (cfg->kind != OPTIM_SGD)
    o->v = calloc(n ? n : 1, sizeof *o->v);
  if (!o->m || (cfg->kind != OPTIM_SGD && !o->v)) {
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

optim_args optim_args_of(const optim *o, float lr, int decay) {
  const optim_config *c = &o->cfg;
  optim_args a;
  memset(&a, 0, sizeof a);
  a.kind = c->kind;
  a.lr = lr;
  a.wd = decay ? c->weight_decay : 0.0f;
  a.mu = c->momentum;
  a.nesterov = c->nesterov;
  a.b1 = c->beta1;
  a.b2 = c->beta2;
  if (c->kind == OPTIM_ADAMW) {
    /* Bias corrections folded into the step size and eps, as in Kingma &
     * Ba section 2 ("the efficiency ... could be improved"): equivalent
     * to m_hat / (sqrt(v_hat) + eps) exactly in real arithmetic. */
    float c1 = (float)(1.0 - o->b1_t), c2 = (float)sqrt(1.0 - o->b2_t);
    a.step = lr * c2 / c1;
    a.eps = c->eps * c2;
    a.keep = 1.0f - lr * a.wd;
  } else if (c->kind == OPTIM_LAMB) {
    a.c1 = (float)(1.0 - o->b1_t);
    a.c2 = (float)(1.0 - o->b2_t);
    a.eps = c->eps;
  }
  return a;
}

static void sgd(const optim_args *a, float *p, const float *g, float *vel,
                size_t count) {
  float mu = a->mu, lr = a->lr, wd = a->wd;
  for (size_t i = 0; i < count; i++) {
    float gi = g[i] + wd * p[i];
    vel[i] = mu * vel[i] + gi;
    p[i] -= lr * (a->nesterov ? gi + mu * vel[i] : vel[i]);
  }
}

static void adamw(const optim_args *a, float *p, const float *g, float *m,
                  float *v, size_t count) {
  float b1 = a->b1, b2 = a->b2, step = a->step, eps = a->eps, keep = a->keep;
  for (size_t i = 0; i < count; i++) {
    p[i] *= keep;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step * m[i] / (sqrtf(v[i]) + eps);
  }
}

/* LAMB's u_i from the updated moments (bias-corrected Adam ratio plus
 * decay), the same expression in both of lamb's passes. */
static float lamb_u(float m, float v, float p, float c1, float c2, float eps,
                    float wd) {
  return (m / c1) / (sqrtf(v / c2) + eps) + wd * p;
}

static void lamb(const optim_args *a, float *p, const float *g, float *m,
                 float *v, size_t count) {
  float b1 = a->b1, b2 = a->b2, c1 = a->c1, c2 = a->c2, wd = a->wd;
  double pn = 0.0, un = 0.0;
  for (size_t i = 0; i < count; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    double u = lamb_u(m[i], v[i], p[i], c1, c2, a->eps, wd);
    pn += (double)p[i] * p[i];
    un += u * u;
  }
  float trust = pn > 0.0 && un > 0.0 ? (float)(sqrt(pn) / sqrt(un)) : 1.0f;
  float step = a->lr * trust;
  for (size_t i = 0; i < count; i++)
    p[i] -= step * lamb_u(m[i], v[i], p[i], c1, c2, a->eps, wd);
}

void optim_apply(const optim_args *a, float *p, const float *g, float *m,
                 float *v, size_t count) {
  if (a->kind == OPTIM_SGD)
    sgd(a, p, g, m, count);
  else if (a->kind == OPTIM_ADAMW)
    adamw(a, p, g, m, v, count);
  else
    lamb(a, p, g, m, v, count);
}

void optim_update(optim *o, float *p, const float *g, size_t offset,
                  size_t count, float lr, int decay) {
  optim_args a = optim_args_of(o, lr, decay);
  optim_apply(&a, p, g, o->m + offset, o->v ? o->v + offset : NULL, count);
}

void plateau_init(plateau *p, float factor, int patience) {
  memset(p, 0, sizeof *p);
  p->factor = factor;
  p->patience = patience;
  p->best = INFINITY;
  p->scale = 1.0f;
}

int plateau_step(plateau *p, double loss) {
  if (loss < p->best * (1.0 - PLATEAU_THRESHOLD)) {
    p->best = loss;
    p->bad_epochs = 0;
    return 0;
  }
  if (++p->bad_epochs <= p->patience)
    return 0;
  p->scale *= p->factor;
  p->bad_epochs = 0;
  p->reductions++;
  return 1;
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
