/*
 * train_ckpt.c - the trainer's checkpoints: what goes into one, who writes
 * it, and how a run resumes from it (see train.h; the format is ckpt.h).
 *
 * RNG states, in this order: the shuffle stream (the same on every rank),
 * then the augmentation stream of rank 0, 1, ..., size - 1. The models
 * have no dropout, so there is no other stream. The fp16 loss scaler and
 * the plateau schedule are the same on every rank (they decide from hk's
 * bitwise-equal results), so rank 0's are written and every rank installs
 * them. Batch norm's running statistics are buffers inside the
 * parameters; the fp16/bf16 compute copy of the weights is rebuilt by
 * every forward, so it is not saved.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "train.h"

int trainer_settings(const trainer *t, const train_flags *f, char *out,
                     size_t cap) {
  char shape[128]; /* the model table's kind and shape, "mlp 784-256-128-10" */
  t->model.ops->describe(&t->model, shape, sizeof shape);
  static const char *const optimizers[] = {
      [OPTIM_SGD] = "sgd", [OPTIM_ADAMW] = "adamw", [OPTIM_LAMB] = "lamb"};
  const optim_config *c = &t->opt.cfg;
  int n = snprintf(
      out, cap,
      "model=%s\nnp=%d\nbatch=%d\nglobal_batch=%d\nprecision=%s\n"
      "optimizer=%s\nweight_decay=%.9g\nmomentum=%.9g\nnesterov=%d\n"
      "beta1=%.9g\nbeta2=%.9g\neps=%.9g\nschedule=%s\n"
      "plateau_factor=%.9g\nplateau_patience=%d\npeak_lr=%.9g\n"
      "warmup_steps=%ld\ntotal_steps=%ld\nseed=%llu\ntrain_samples=%zu\n"
      "augment=%d\ndevice=%s\n",
      shape, t->size, t->shard, t->global_batch, lowp_name(t->model.lowp),
      optimizers[c->kind], (double)c->weight_decay, (double)c->momentum,
      c->nesterov, (double)c->beta1, (double)c->beta2, (double)c->eps,
      t->use_plateau ? "plateau" : "cosine", (double)t->plateau.factor,
      t->plateau.patience, (double)t->peak_lr, t->warmup_steps, t->total_steps,
      (unsigned long long)f->seed, t->data->train.n, t->augment,
      t->cp.ops ? t->cp.ops->name : "cpu");
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The state struct over t's arrays; rng points at n_rng states. */
static ckpt_state state_of(trainer *t, const char *settings, uint64_t *rng) {
  ckpt_state s = {0};
  s.settings = settings;
  s.step = (uint64_t)t->step;
  s.n_rng = (uint32_t)t->size + 1;
  s.rng = rng;
  s.loss_scale = t->scaler.scale;
  s.scaler_good = (uint64_t)t->scaler.good;
  s.scaler_skipped = (uint64_t)t->scaler.skipped;
  s.plateau_best = t->plateau.best;
  s.plateau_bad = (uint32_t)t->plateau.bad_epochs;
  s.plateau_scale = t->plateau.scale;
  s.plateau_reductions = (uint32_t)t->plateau.reductions;
  s.n_params = t->model.n_params;
  s.params = t->model.params;
  s.has_v = t->opt.v != NULL;
  s.opt_step = t->opt.step;
  s.b1_t = t->opt.b1_t;
  s.b2_t = t->opt.b2_t;
  s.m = t->opt.m;
  s.v = t->opt.v;
  return s;
}

hk_status trainer_checkpoint_dir(trainer *t, const train_flags *f) {
  char err[4200] = "";
  int bad =
      t->rank == 0 && ckpt_prepare_dir(f->checkpoint_dir, err, sizeof err) != 0;
  return trainer_rank0_outcome(
      t, "ckpt.dir", bad, err,
      "rank 0 cannot use the checkpoint directory (its "
      "message says why)");
}

hk_status trainer_checkpoint(trainer *t, const train_flags *f, int epoch) {
  if (t->die_in_checkpoint && t->step + 1 == t->die_step)
    raise(SIGKILL); /* the test hook (elastic.h) */
  int n_rng = t->size + 1;
  uint64_t *rng = calloc((size_t)n_rng, sizeof *rng);
  char settings[CKPT_SETTINGS_CAP], err[4200] = "";
  int bad = 0;
  if (!rng || trainer_settings(t, f, settings, sizeof settings) != 0) {
    snprintf(err, sizeof err, "checkpoint: out of memory");
    bad = 1;
  }
  /* rank 0 writes: its weights and optimiser state back from a device
   * row (a failure is its outcome, which every rank learns below) */
  if (!bad && t->rank == 0 && trainer_to_host(t) != HK_OK) {
    snprintf(err, sizeof err, "checkpoint: %.4000s", t->err);
    t->failed = HK_OK;
    bad = 1;
  }
  /* Rank r contributes its augmentation state at slot 1 + r, zeros
   * elsewhere: the sum is every rank's state (adding zeros is exact). */
  if (rng) {
    rng[1 + t->rank] = t->augment_rng.state;
    if (trainer_check(
            t,
            hk_allreduce("ckpt.rng", rng, rng, (size_t)n_rng, HK_INT64, HK_SUM),
            "hk_allreduce", "ckpt.rng") != HK_OK) {
      free(rng);
      return t->failed;
    }
    rng[0] = t->shuffle.state;
  }
  if (!bad && t->rank == 0) {
    ckpt_state s = state_of(t, settings, rng);
    s.epoch = (uint32_t)epoch;
    bad = ckpt_write(f->checkpoint_dir, &s, err, sizeof err) != 0;
  }
  free(rng);
  char other[96];
  snprintf(other, sizeof other,
           "checkpoint of epoch %d failed on rank 0 (its message says why)",
           epoch);
  return trainer_rank0_outcome(t, "ckpt.written", bad, err, other);
}

hk_status trainer_resume(trainer *t, const train_flags *f, int *epochs_done) {
  int n_rng = t->size + 1;
  size_t n = t->model.n_params;
  uint64_t *rng = calloc((size_t)n_rng, sizeof *rng);
  float *params = malloc(n * sizeof *params);
  float *m = malloc(n * sizeof *m);
  float *v = t->opt.v ? malloc(n * sizeof *v) : NULL;
  char settings[CKPT_SETTINGS_CAP], err[4200] = "";
  ckpt_state s = {0};
  int bad = 0;
  if (!rng || !params || !m || (t->opt.v && !v) ||
      trainer_settings(t, f, settings, sizeof settings) != 0) {
    snprintf(err, sizeof err, "resume: out of memory");
    bad = 1;
  } else {
    /* Read into scratch first: t changes only once every rank agreed. */
    s = state_of(t, settings, rng);
    s.params = params;
    s.m = m;
    s.v = v;
    bad = ckpt_read(f->checkpoint_dir, &s, err, sizeof err) != 0;
    if (!bad && t->die_in_checkpoint && (long)s.step + 1 == t->die_step)
      raise(SIGKILL); /* the test hook (elastic.h) */
  }
  int who;
  hk_status st = trainer_agree(t, "resume.read", bad, &who);
  if (st == HK_OK && who >= 0) {
    if (bad)
      snprintf(t->err, sizeof t->err, "%s", err);
    else
      snprintf(t->err, sizeof t->err,
               "resume: rank %d refused the checkpoint (its message says "
               "why); not training",
               who);
    st = t->failed = HK_ERR_INVALID_ARG;
  }
  if (st == HK_OK) {
    memcpy(t->model.params, params, n * sizeof *params);
    memcpy(t->opt.m, m, n * sizeof *m);
    if (v)
      memcpy(t->opt.v, v, n * sizeof *v);
    t->opt.step = (long)s.opt_step;
    t->opt.b1_t = s.b1_t;
    t->opt.b2_t = s.b2_t;
    t->step = (long)s.step;
    t->shuffle.state = rng[0];
    t->augment_rng.state = rng[1 + t->rank];
    t->scaler.scale = s.loss_scale;
    t->scaler.good = (long)s.scaler_good;
    t->scaler.skipped = (long)s.scaler_skipped;
    t->plateau.best = s.plateau_best;
    t->plateau.bad_epochs = (int)s.plateau_bad;
    t->plateau.scale = s.plateau_scale;
    t->plateau.reductions = (int)s.plateau_reductions;
    *epochs_done = (int)s.epoch;
    trainer_state_loaded(t);
  }
  free(rng);
  free(params);
  free(m);
  free(v);
  return st;
}
