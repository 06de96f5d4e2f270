/*
 * train.c - the data-parallel loop (see train.h for the scheme).
 */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hk_status trainer_check(trainer *t, hk_status st, const char *what,
                        const char *name) {
  if (st != HK_OK && t->failed == HK_OK) {
    t->failed = st;
    snprintf(t->err, sizeof t->err, "%s%s%s: %s: %s", what, name ? " " : "",
             name ? name : "", hk_strerror(st), hk_last_error());
  }
  return st;
}

/* The per-worker and global batch of flags f on `size` ranks. */
static int batch_shape(trainer *t, const train_flags *f, const data_set *d,
                       int size, char *err, size_t err_cap) {
  if (f->global_batch_size > 0) {
    if (f->global_batch_size % size != 0) {
      snprintf(err, err_cap,
               "--global-batch-size %d is not divisible by the %d ranks "
               "(each rank takes an equal shard of the global batch)",
               f->global_batch_size, size);
      return 2;
    }
    t->global_batch = f->global_batch_size;
    t->shard = f->global_batch_size / size;
  } else {
    if ((long)f->batch_size * size > (1L << 30)) {
      snprintf(err, err_cap, "--batch-size %d times %d ranks is too large",
               f->batch_size, size);
      return 2;
    }
    t->shard = f->batch_size;
    t->global_batch = f->batch_size * size;
  }
  if (d->train.n < (size_t)t->global_batch) {
    snprintf(err, err_cap,
             "the %zu training samples do not fill one global batch of %d "
             "(%d per rank x %d ranks)",
             d->train.n, t->global_batch, t->shard, size);
    return 2;
  }
  return 0;
}

hk_status trainer_agree(trainer *t, const char *name, int failed_here,
                        int *failed_rank) {
  int64_t v[2] = {failed_here ? 1 : 0,
                  failed_here ? -(int64_t)t->rank : -(int64_t)t->size};
  if (trainer_check(t, hk_allreduce(name, v, v, 2, HK_INT64, HK_MAX),
                    "hk_allreduce", name) != HK_OK)
    return t->failed;
  *failed_rank = v[0] ? (int)-v[1] : -1;
  return HK_OK;
}

hk_status trainer_rank0_outcome(trainer *t, const char *name, int bad,
                                const char *err, const char *other) {
  int who;
  if (trainer_agree(t, name, bad, &who) != HK_OK)
    return t->failed;
  if (who < 0)
    return HK_OK;
  snprintf(t->err, sizeof t->err, "%s", bad ? err : other);
  return t->failed = HK_ERR_SYSTEM;
}

int trainer_init(trainer *t, const train_flags *f, const data_set *d, int rank,
                 int size, char *err, size_t err_cap) {
  memset(t, 0, sizeof *t);
  int rc = batch_shape(t, f, d, size, err, err_cap);
  if (rc != 0)
    return rc;
  t->rank = rank;
  t->size = size;
  t->data = d;
  t->steps_per_epoch = (long)(d->train.n / (size_t)t->global_batch);
  t->total_steps = t->steps_per_epoch * f->epochs;
  t->warmup_steps = f->warmup_steps;
  if (t->warmup_steps < 0) {
    t->warmup_steps =
        (long)((double)t->total_steps * TRAIN_DEFAULT_WARMUP_SHARE);
    if (t->warmup_steps < 1)
      t->warmup_steps = 1;
  }
  t->peak_lr = f->lr * (f->lr_scaling ? (float)size : 1.0f);
  t->show_progress = f->progress && rank == 0;
  t->augment = f->augment;
  const char *slow = getenv(TRAIN_SLOW_STEP_ENV);
  t->slow_passes = slow ? atoi(slow) : 0;
  rng_seed(&t->shuffle, f->seed ^ 0x53485546464C45ull); /* "SHUFFLE" */
  /* "AUGMENT", then one stream per rank: golden-ratio spaced seeds. */
  rng_seed(&t->augment_rng, f->seed ^ 0x4155474D454E54ull ^
                                ((uint64_t)rank * 0x9E3779B97F4A7C15ull));

  const int dims[] = {DATA_PIXELS, TRAIN_HIDDEN1, TRAIN_HIDDEN2, DATA_CLASSES};
  int rows = t->shard > TRAIN_EVAL_CHUNK ? t->shard : TRAIN_EVAL_CHUNK;
  optim_config oc = optim_defaults(f->optimizer);
  oc.weight_decay = f->weight_decay;
  oc.nesterov = f->nesterov;
  if (mlp_init(&t->model, 3, dims) != 0 ||
      mlp_work_init(&t->work, &t->model, rows) != 0 ||
      optim_init(&t->opt, &oc, t->model.n_params) != 0 ||
      !(t->grads = calloc(t->model.n_params, sizeof *t->grads)) ||
      batch_init(&t->eval, TRAIN_EVAL_CHUNK) != 0 ||
      prefetch_init(&t->pipe, f->prefetch, (size_t)t->shard, NULL, NULL) != 0 ||
      !(t->perm = malloc(d->train.n * sizeof *t->perm))) {
    trainer_free(t);
    snprintf(err, err_cap, "out of memory");
    return 1;
  }
  return 0;
}

void trainer_free(trainer *t) {
  mlp_free(&t->model);
  mlp_work_free(&t->work);
  optim_free(&t->opt);
  free(t->grads);
  batch_free(&t->eval);
  prefetch_free(&t->pipe);
  free(t->perm);
  memset(t, 0, sizeof *t);
}

hk_status trainer_broadcast_init(trainer *t, uint64_t seed) {
  if (t->rank == 0) {
    rng r;
    rng_seed(&r, seed);
    mlp_init_he(&t->model, &r);
  }
  int n = mlp_n_tensors(&t->model), started = 0;
  for (int i = 0; i < n; i++) {
    mlp_tensor d = mlp_tensor_at(&t->model, i);
    char name[MLP_NAME_CAP + 8];
    snprintf(name, sizeof name, "init.%s", d.name);
    if (trainer_check(t,
                      hk_broadcast_async(name, t->model.params + d.offset,
                                         d.count, HK_FLOAT32, 0,
                                         &t->handles[i]),
                      "hk_broadcast_async", name) != HK_OK)
      break;
    started++;
  }
  for (int i = 0; i < started; i++)
    trainer_check(t, hk_wait(t->handles[i]), "broadcast of the initial weights",
                  NULL);
  return t->failed;
}

/* mlp_backward's callback: launch the allreduce of a finished gradient. */
static int launch(void *ctx, int tensor, float *grad, size_t count) {
  trainer *t = ctx;
  mlp_tensor d = mlp_tensor_at(&t->model, tensor);
  if (trainer_check(t,
                    hk_allreduce_async(d.name, grad, grad, count, HK_FLOAT32,
                                       HK_AVERAGE, &t->handles[t->launched]),
                    "hk_allreduce_async", d.name) != HK_OK)
    return 1;
  t->launched++;
  return 0;
}

/* One step on the pipeline's next batch; adds the shard's mean loss to
 * *loss, its correct predictions to *correct and the time waited in
 * hk_wait to *wait_s. */
static hk_status step(trainer *t, double *loss, long *correct, double *wait_s) {
  const batch *b = prefetch_next(&t->pipe);
  if (!b) {
    snprintf(t->err, sizeof t->err, "input pipeline: staging a batch failed");
    return t->failed = HK_ERR_SYSTEM;
  }
  mlp_forward(&t->model, &t->work, b->x, t->shard);
  *loss += mlp_loss(&t->model, &t->work, b->y, t->shard, correct);
  t->launched = 0;
  mlp_backward(&t->model, &t->work, t->shard, t->grads, launch, t);
  for (int i = 0; i < t->slow_passes; i++) /* test hook, see train.h */
    mlp_forward(&t->model, &t->work, b->x, t->shard);
  prefetch_release(&t->pipe);
  double w0 = progress_now();
  for (int i = 0; i < t->launched; i++)
    trainer_check(t, hk_wait(t->handles[i]), "gradient allreduce", NULL);
  *wait_s += progress_now() - w0;
  if (t->failed)
    return t->failed;
  optim_begin_step(&t->opt);
  float lr = lr_at(t->peak_lr, t->step, t->total_steps, t->warmup_steps);
  for (int i = 0; i < mlp_n_tensors(&t->model); i++) {
    mlp_tensor d = mlp_tensor_at(&t->model, i);
    optim_update(&t->opt, t->model.params + d.offset, t->grads + d.offset,
                 d.offset, d.count, lr, !d.is_bias);
  }
  t->last_lr = lr;
  t->step++;
  return HK_OK;
}

/* Accuracy on the test set: rank r evaluates the r-th contiguous slice,
 * then the correct counts are summed over the ranks. */
static hk_status evaluate(trainer *t, double *acc) {
  size_t n = t->data->test.n;
  size_t lo = n * (size_t)t->rank / (size_t)t->size;
  size_t hi = n * (size_t)(t->rank + 1) / (size_t)t->size;
  long correct = 0;
  for (size_t i = lo; i < hi; i += TRAIN_EVAL_CHUNK) {
    size_t k = hi - i < TRAIN_EVAL_CHUNK ? hi - i : TRAIN_EVAL_CHUNK;
    batch_fill(&t->eval, &t->data->test, NULL, i, k, NULL);
    mlp_count_correct(&t->model, &t->work, t->eval.x, t->eval.y, (int)k,
                      &correct);
  }
  int64_t total = correct;
  if (trainer_check(
          t, hk_allreduce("eval.correct", &total, &total, 1, HK_INT64, HK_SUM),
          "hk_allreduce", "eval.correct") != HK_OK)
    return t->failed;
  *acc = n ? (double)total / (double)n : 0.0;
  return HK_OK;
}

hk_status trainer_epoch(trainer *t, int epoch, progress *p, epoch_stats *s) {
  memset(s, 0, sizeof *s);
  size_t n = t->data->train.n;
  for (size_t i = 0; i < n; i++)
    t->perm[i] = (uint32_t)i;
  rng_shuffle(&t->shuffle, t->perm, n);
  if (prefetch_begin(&t->pipe, &t->data->train, t->perm,
                     (size_t)t->rank * (size_t)t->shard,
                     (size_t)t->global_batch, (size_t)t->shard,
                     t->steps_per_epoch,
                     t->augment ? &t->augment_rng : NULL) != 0) {
    snprintf(t->err, sizeof t->err,
             "input pipeline: cannot start the prefetch thread");
    return t->failed = HK_ERR_SYSTEM;
  }

  progress_start(p, t->show_progress, epoch, t->steps_per_epoch);
  double loss = 0.0, wait_s = 0.0, t0 = progress_now();
  long correct = 0;
  for (long k = 0; k < t->steps_per_epoch; k++) {
    if (step(t, &loss, &correct, &wait_s) != HK_OK) {
      prefetch_end(&t->pipe);
      progress_end(p);
      return t->failed;
    }
    progress_update(p, k + 1, loss / (double)(k + 1));
  }
  s->train_s = progress_now() - t0;
  prefetch_end(&t->pipe);
  progress_end(p);

  /* Mean over ranks of the per-rank mean shard loss = mean over samples;
   * the correct counts likewise (equal shards). */
  double m[2] = {loss / (double)t->steps_per_epoch,
                 (double)correct / ((double)t->steps_per_epoch * t->shard)};
  if (trainer_check(
          t, hk_allreduce("epoch.metrics", m, m, 2, HK_FLOAT64, HK_AVERAGE),
          "hk_allreduce", "epoch.metrics") != HK_OK)
    return t->failed;
  s->loss = m[0];
  s->train_acc = m[1];
  s->steps = t->steps_per_epoch;
  s->lr = t->last_lr;
  s->samples_per_s = (double)t->steps_per_epoch * t->global_batch /
                     (s->train_s > 0 ? s->train_s : 1e-9);
  s->wait_share = s->train_s > 0 ? wait_s / s->train_s : 0.0;
  s->data_share = s->train_s > 0 ? t->pipe.wait_s / s->train_s : 0.0;
  s->data_ready = t->pipe.ready;
  return evaluate(t, &s->test_acc);
}
