/*
 * optim.h - the optimisers and the learning-rate schedule.
 *
 * SGD with momentum (PyTorch's formulation, Sutskever et al. ICML 2013):
 *   g' = g + wd * p            (coupled L2 decay; wd defaults to 0 for sgd)
 *   v  = mu * v + g'
 *   p -= lr * v                       (classic), or
 *   p -= lr * (g' + mu * v)           (Nesterov)
 * AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization",
 * ICLR 2019, Algorithm 2, in PyTorch's parameterisation where the decay is
 * scaled by the scheduled learning rate):
 *   p -= lr * wd * p                  (decoupled decay)
 *   m  = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * with b1 0.9, b2 0.999, eps 1e-8 (Kingma & Ba, ICLR 2015).
 * LAMB (You et al., "Large Batch Optimization for Deep Learning: Training
 * BERT in 76 minutes", ICLR 2020, Algorithm 2), per named tensor (the
 * paper's layer), with phi the identity:
 *   m  = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   u  = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p
 *   p -= lr * (||p|| / ||u||) * u      (trust ratio 1 when either norm
 *                                       is 0, as reference codes do)
 * with b1 0.9, b2 0.999, eps 1e-6 (the paper's experiments); the norms
 * are summed in double, in index order (deterministic). Weight decay
 * applies to weight matrices only, never to biases (common practice,
 * e.g. Goyal et al. 2017 section 5.1 "no weight decay on bias").
 *
 * Schedules (--schedule): cosine (the default) is a linear warm-up from lr/W to
 * lr over the first W steps (Goyal et al., "Accurate, Large Minibatch SGD",
 * 2017, section 2.2 "gradual warmup"), then cosine decay to 0 at the last step
 * (Loshchilov & Hutter, "SGDR", ICLR 2017, eq. 5 with one cycle and eta_min =
 * 0). plateau is the same warm-up, then the peak rate times a factor that
 * reduce-on-plateau (PyTorch's ReduceLROnPlateau, mode "min", relative
 * threshold 1e-4, no cooldown) multiplies by `factor` whenever the epoch's
 * mean training loss has not improved on the best one by the threshold
 * for more than `patience` epochs in a row. The loss it sees is the one
 * averaged over the ranks (bitwise equal everywhere), so every rank
 * reduces at the same epoch.
 *
 * All arithmetic is elementwise and deterministic: equal inputs give
 * bitwise equal results on every rank.
 */
#ifndef HK_TRAIN_OPTIM_H
#define HK_TRAIN_OPTIM_H

#include <stddef.h>

typedef enum optim_kind {
  OPTIM_SGD = 0,
  OPTIM_ADAMW = 1,
  OPTIM_LAMB = 2
} optim_kind;

typedef struct optim_config {
  optim_kind kind;
  float weight_decay; /* >= 0; see above for how each kind applies it */
  float momentum;     /* sgd: mu, default 0.9 */
  int nesterov;       /* sgd: 1 for Nesterov momentum */
  float beta1, beta2; /* adamw, lamb: 0.9, 0.999 */
  float eps;          /* adamw: 1e-8; lamb: 1e-6 */
} optim_config;

/** Optimiser state for n parameters. Owns its buffers. */
typedef struct optim {
  optim_config cfg;
  size_t n;
  long step;   /* completed steps (t - 1 during optim_update) */
  float *m;    /* sgd: velocity; adamw, lamb: first moment. n, owned */
  float *v;    /* adamw, lamb: second moment, n floats, owned; sgd NULL */
  double b1_t; /* beta1^t and beta2^t for the bias corrections */
  double b2_t;
} optim;

/** cfg filled with the defaults above for kind (wd: 0 sgd, 0.01 adamw
 *  and lamb). */
optim_config optim_defaults(optim_kind kind);

/** Zeroed state for n parameters. Returns 0, or -1 (out of memory). */
int optim_init(optim *o, const optim_config *cfg, size_t n);
void optim_free(optim *o);

/** Starts step t = o->step + 1 (updates the bias corrections). Call once
 *  per step before the optim_update calls of that step. */
void optim_begin_step(optim *o);

/**
 * One tensor's update as plain numbers (what a compute row's `optim`
 * entry takes, compute.h): the kind, the rate and decay, and the scalars
 * optim.c derives from the step count, so every row does the same
 * arithmetic from the same float values.
 */
typedef struct optim_args {
  optim_kind kind;
  float lr;     /* this step's learning rate */
  float wd;     /* weight decay of this tensor (0 for biases) */
  float mu;     /* sgd: momentum */
  int nesterov; /* sgd: 1 for Nesterov */
  float b1, b2; /* adamw, lamb: the moment decays */
  float step;   /* adamw: lr * sqrt(1 - b2^t) / (1 - b1^t) */
  float eps;    /* adamw: eps * sqrt(1 - b2^t); lamb: eps */
  float keep;   /* adamw: 1 - lr * wd (decoupled decay) */
  float c1, c2; /* lamb: 1 - b1^t, 1 - b2^t */
} optim_args;

/** The arguments of the current step (after optim_begin_step) for a
 *  tensor with (decay 1) or without (0) weight decay, at rate lr. */
optim_args optim_args_of(const optim *o, float lr, int decay);

/**
 * The update of one tensor: params p, gradients g, state m and v (v
 * unused by sgd), count floats each, host memory; LAMB's trust ratio is
 * over exactly these count values. The CPU row of the compute table.
 */
void optim_apply(const optim_args *a, float *p, const float *g, float *m,
                 float *v, size_t count);

/**
 * Updates params p[0..count) from gradients g[0..count) at learning rate
 * lr; `offset` locates them in the flat parameter vector (for the state),
 * offset + count <= n. decay: 1 to apply weight decay (weights), 0 not
 * (biases). For LAMB one call is one tensor: its trust ratio uses the
 * norms over exactly these count values.
 */
void optim_update(optim *o, float *p, const float *g, size_t offset,
                  size_t count, float lr, int decay);

/**
 * The learning rate of step `step` (0-based) of `total`, peaking at
 * `peak` after `warmup` steps (warmup may be 0; warmup >= total means
 * warm-up only). Step warmup-1 has exactly peak; the last step's rate is
 * small but not 0 (the cosine reaches 0 one step past the end).
 */
float lr_at(float peak, long step, long total, long warmup);

/** Reduce-on-plateau state (see above). */
typedef struct plateau {
  float factor;   /* in (0, 1): multiplies the rate at each reduction */
  int patience;   /* epochs without improvement tolerated, >= 0 */
  double best;    /* best epoch loss so far (INFINITY at the start) */
  int bad_epochs; /* epochs in a row without improvement */
  float scale;    /* the factor so far: 1, factor, factor^2, ... */
  int reductions; /* how many times it reduced */
} plateau;

#define PLATEAU_THRESHOLD 1e-4 /* relative: better means < best (1 - t) */

void plateau_init(plateau *p, float factor, int patience);

/** Records an epoch's loss; returns 1 when it reduced the scale. */
int plateau_step(plateau *p, double loss);

#endif
