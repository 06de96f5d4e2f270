/*
 * elastic.c - commits, restores and re-forms the trainer (see elastic.h).
 */
#include "elastic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk/hk.h"

static int grow(float **p, size_t n) {
  if (*p)
    return 0;
  *p = malloc(n * sizeof **p);
  return *p ? 0 : -1;
}

/* Copies t's state into c as the commit before step k of epoch: the
 * epoch began with the shuffle `shuffle`, step k's batch draws from the
 * augmentation rng `aug`. */
static int take(train_commit *c, trainer *t, int epoch, long k,
                const rng *shuffle, const rng *aug) {
  const size_t n = t->model.n_params;
  if (c->n != n) {
    elastic_commit_free(c);
    c->n = n;
  }
  if (grow(&c->params, n) != 0 || grow(&c->m, n) != 0 ||
      (t->opt.v && grow(&c->v, n) != 0)) {
    snprintf(t->err, sizeof t->err, "elastic commit: out of memory");
    return -1;
  }
  if (trainer_to_host(t) != HK_OK)
    return -1;
  memcpy(c->params, t->model.params, n * sizeof *c->params);
  memcpy(c->m, t->opt.m, n * sizeof *c->m);
  if (t->opt.v)
    memcpy(c->v, t->opt.v, n * sizeof *c->v);
  c->opt_step = t->opt.step;
  c->b1_t = t->opt.b1_t;
  c->b2_t = t->opt.b2_t;
  c->epoch = epoch;
  c->k = k;
  c->step = t->step;
  c->last_lr = t->last_lr;
  c->epoch_shuffle = *shuffle;
  c->augment = *aug;
  c->scaler = t->scaler;
  c->plateau = t->plateau;
  c->valid = 1;
  return 0;
}

int elastic_commit(void *arg, trainer *t, int epoch, long k) {
  /* the rng as step k's batch draws: the producer has drawn ahead (and
   * may be drawing: t->augment_rng is read only when it has no aug) */
  rng aug;
  if (!t->augment)
    aug = t->augment_rng;
  else if (prefetch_aug_state(&t->pipe, &aug) != 0) {
    snprintf(t->err, sizeof t->err,
             "elastic commit: no batch left at step %ld of epoch %d", k, epoch);
    return -1;
  }
  return take(arg, t, epoch, k, &t->epoch_shuffle, &aug);
}

int elastic_commit_epoch_end(train_commit *c, trainer *t, int next_epoch) {
  /* the next epoch shuffles from t->shuffle; the thread drew every batch */
  return take(c, t, next_epoch, 0, &t->shuffle, &t->augment_rng);
}

static void restore(const train_commit *c, trainer *t) {
  const size_t n = c->n;
  memcpy(t->model.params, c->params, n * sizeof *c->params);
  memcpy(t->opt.m, c->m, n * sizeof *c->m);
  if (t->opt.v && c->v)
    memcpy(t->opt.v, c->v, n * sizeof *c->v);
  t->opt.step = c->opt_step;
  t->opt.b1_t = c->b1_t;
  t->opt.b2_t = c->b2_t;
  t->step = c->step;
  t->last_lr = c->last_lr;
  t->shuffle = c->epoch_shuffle; /* the epoch shuffles again, alike */
  t->epoch_k0 = c->k;
  t->augment_rng = c->augment;
  t->scaler = c->scaler;
  t->plateau = c->plateau;
  trainer_state_loaded(t); /* a device row takes them over */
}

int elastic_reform(trainer *t, const train_flags *f, const data_set *d,
                   const train_commit *c, int g, float lr, int *epoch,
                   char *err, size_t err_cap) {
  /* the hooks and the commit survive the trainer */
  long every = t->commit_every;
  int (*hook)(void *, trainer *, int, long) = t->on_commit;
  void *arg = t->commit_arg;
  long die_step = t->die_step; /* the test hook's, for this process */
  int die_in_checkpoint = t->die_in_checkpoint;
  trainer_free(t);
  hk_status st = hk_elastic_reset();
  if (st != HK_OK) {
    /* hk's message begins with "hk_elastic_reset: " */
    snprintf(err, err_cap, "%s: %s", hk_strerror(st), hk_last_error());
    return 1;
  }
  train_flags fixed = *f; /* the first world's global batch and rate */
  fixed.global_batch_size = g;
  fixed.batch_size = 0;
  fixed.lr = lr;
  fixed.lr_scaling = 0;
  int rc = trainer_init(t, &fixed, d, hk_rank(), hk_size(), err, err_cap);
  if (rc != 0)
    return rc;
  t->die_step = die_step;
  t->die_in_checkpoint = die_in_checkpoint;
  t->commit_every = every;
  t->on_commit = hook;
  t->commit_arg = arg;
  *epoch = 1;
  if (c->valid) {
    restore(c, t);
    *epoch = c->epoch;
  }
  return 0;
}

void elastic_commit_free(train_commit *c) {
  free(c->params);
  free(c->m);
  free(c->v);
  c->params = c->m = c->v = NULL;
  c->valid = 0;
}
