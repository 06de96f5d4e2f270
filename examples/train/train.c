/*
 * train.c - the data-parallel loop (see train.h for the scheme).
 */
#include "train.h"

#include <math.h>
#include <signal.h>
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

/* Reads TRAIN_INJECT_OVERFLOW ("R:S") into t; 0, or 2 with err. */
static int read_inject(trainer *t, const train_flags *f, char *err,
                       size_t err_cap) {
  t->inject_rank = t->inject_step = -1;
  const char *v = getenv("TRAIN_INJECT_OVERFLOW");
  if (!v || !*v)
    return 0;
  char tail;
  if (sscanf(v, "%ld:%ld%c", &t->inject_rank, &t->inject_step, &tail) != 2 ||
      t->inject_rank < 0 || t->inject_step < 1) {
    snprintf(err, err_cap,
             "TRAIN_INJECT_OVERFLOW: '%s' is not RANK:STEP (STEP >= 1)", v);
    return 2;
  }
  if (f->precision != LOWP_FP16) {
    snprintf(err, err_cap,
             "TRAIN_INJECT_OVERFLOW: only with --precision fp16 (loss "
             "scaling is what skips the step)");
    return 2;
  }
  return 0;
}

/* elastic.h's test hook, TRAIN_TEST_DIE: "R:S" or "R:S:checkpoint", a
 * comma-separated list; this process keeps the entry of its rank. */
static int read_die(trainer *t, int rank, char *err, size_t err_cap) {
  t->die_step = -1;
  t->die_in_checkpoint = 0;
  const char *v = getenv("TRAIN_TEST_DIE");
  for (const char *at = v; at && *at;) {
    long r = -1, s = -1;
    int end = -1, ckpt = 0;
    size_t len = strcspn(at, ",");
    if (sscanf(at, "%ld:%ld%n", &r, &s, &end) == 2 && (size_t)end + 11 == len &&
        !strncmp(at + end, ":checkpoint", 11)) {
      ckpt = 1;
      end = (int)len;
    }
    if (end < 0 || (size_t)end != len || r < 0 || s < 1) {
      t->die_step = -1;
      snprintf(err, err_cap,
               "TRAIN_TEST_DIE: '%s' is not RANK:STEP[:checkpoint][,...] "
               "(STEP >= 1)",
               v);
      return 2;
    }
    if (r == rank) {
      t->die_step = s;
      t->die_in_checkpoint = ckpt;
    }
    at += len + (at[len] == ',');
  }
  return 0;
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
  *failed_rank = -1; /* set on every return, a failed agreement's too */
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

/* The pipeline's stage for --precision bf16|fp16: rounds the prepared
 * batch to the compute type on the thread that prepared it (the prefetch
 * thread), so the step gets its input ready. ctx: the model's lowp_kind,
 * set before the pipeline starts and never written again. */
static int round_stage(void *ctx, batch *b) {
  lowp_round(b->x, b->n * DATA_PIXELS, *(const lowp_kind *)ctx);
  return 0;
}

/* Opens the compute row --device names (train.h); 0, or 1 / 2 with err. */
static int open_device(trainer *t, const train_flags *f, char *err,
                       size_t err_cap) {
  const char *dev = f->device ? f->device : "auto";
  int cuda = !strcmp(dev, "cuda");
  if (!model_find(f->model)->any_row || t->inject_rank >= 0) {
    if (cuda) {
      snprintf(err, err_cap,
               t->inject_rank >= 0
                   ? "--device cuda: TRAIN_INJECT_OVERFLOW works on the CPU "
                     "row only (use --device cpu)"
                   : "--device cuda: --model %s runs on the CPU row only "
                     "(--model cnn has a CUDA row)",
               f->model);
      return 2;
    }
    dev = "cpu";
  }
  int index = f->gpu >= 0 ? f->gpu : hk_local_rank();
  int failed = compute_open(&t->cp, dev, index, t->device_note,
                            sizeof t->device_note) != 0;
  int on_host = !t->cp.ops || t->cp.ops->host;
  /* Every rank learns whether some rank could not open its row, or
   * (auto) ended on the CPU: then all fail (cuda) or all run on the CPU
   * (auto), never a mix of device and host tensors. Lowest such rank:
   * the max of -rank. */
  int64_t v[4] = {failed, failed ? -(int64_t)t->rank : -(int64_t)t->size,
                  on_host, on_host ? -(int64_t)t->rank : -(int64_t)t->size};
  hk_status st = hk_allreduce("device.agree", v, v, 4, HK_INT64, HK_MAX);
  if (st != HK_OK) {
    snprintf(err, err_cap, "hk_allreduce device.agree: %s: %s", hk_strerror(st),
             hk_last_error());
    return 1;
  }
  if (v[0]) {
    if (failed)
      snprintf(err, err_cap, "%s", t->device_note);
    else
      snprintf(err, err_cap, "--device %s: rank %d could not open it", dev,
               (int)-v[1]);
    return 1;
  }
  if (v[2] && !on_host) { /* auto, and some rank is on the CPU */
    compute_close(&t->cp);
    snprintf(t->device_note, sizeof t->device_note,
             "--device auto: rank %d runs on the cpu, so every rank does",
             (int)-v[3]);
    char why[COMPUTE_ERR_CAP + 64];
    if (compute_open(&t->cp, "cpu", 0, why, sizeof why) != 0) {
      snprintf(err, err_cap, "%s", why);
      return 1;
    }
  }
  t->on_device = !t->cp.ops->host;
  return 0;
}

/* The row's failure, if any, as the trainer's error. */
static hk_status check_device(trainer *t) {
  if (!t->on_device || !compute_failed(&t->cp) || t->failed)
    return t->failed;
  snprintf(t->err, sizeof t->err, "--device %s: %s", t->cp.ops->name,
           t->cp.err);
  return t->failed = HK_ERR_SYSTEM;
}

/* The optimiser state, the metric accumulators and the labels in the
 * row's memory (the host buffers themselves on the CPU row). 0, or -1
 * (t->cp.err says why when the row failed). */
static int row_state_init(trainer *t) {
  compute *cp = &t->cp;
  size_t n = t->model.n_params * sizeof(float);
  int rows = t->shard > TRAIN_EVAL_CHUNK ? t->shard : TRAIN_EVAL_CHUNK;
  if (!(t->row_acc = cp->ops->alloc(cp, sizeof t->host_acc)) ||
      !(t->row_y = cp->ops->alloc(cp, (size_t)rows)))
    return -1;
  if (!t->on_device) {
    t->row_m = t->opt.m;
    t->row_v = t->opt.v;
    return 0;
  }
  if (!(t->row_m = cp->ops->alloc(cp, n)) ||
      (t->opt.v && !(t->row_v = cp->ops->alloc(cp, n))))
    return -1;
  return 0;
}

/* Device rows: the weights and optimiser state from the host into the
 * row (after the initial broadcast or a resume). */
static void state_to_row(trainer *t) {
  if (!t->on_device)
    return;
  size_t n = t->model.n_params * sizeof(float);
  model_to_row(&t->model);
  t->cp.ops->to_dev(&t->cp, t->row_m, t->opt.m, n);
  if (t->row_v)
    t->cp.ops->to_dev(&t->cp, t->row_v, t->opt.v, n);
}

hk_status trainer_to_host(trainer *t) {
  if (!t->on_device)
    return t->failed;
  size_t n = t->model.n_params * sizeof(float);
  if (model_to_host(&t->model) == 0 &&
      t->cp.ops->to_host(&t->cp, t->opt.m, t->row_m, n) == 0 && t->row_v)
    (void)t->cp.ops->to_host(&t->cp, t->opt.v, t->row_v, n);
  return check_device(t);
}

int trainer_init(trainer *t, const train_flags *f, const data_set *d, int rank,
                 int size, char *err, size_t err_cap) {
  memset(t, 0, sizeof *t);
  int rc = batch_shape(t, f, d, size, err, err_cap);
  if (rc != 0)
    return rc;
  rc = read_inject(t, f, err, err_cap);
  if (rc == 0)
    rc = read_die(t, rank, err, err_cap);
  if (rc)
    return rc;
  t->rank = rank;
  t->size = size;
  scaler_init(&t->scaler, f->precision == LOWP_FP16);
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
  t->use_plateau = f->plateau;
  plateau_init(&t->plateau, f->plateau_factor, f->plateau_patience);
  t->show_progress = f->progress && rank == 0;
  t->augment = f->augment;
  const char *slow = getenv(TRAIN_SLOW_STEP_ENV);
  t->slow_passes = slow ? atoi(slow) : 0;
  rng_seed(&t->shuffle, f->seed ^ 0x53485546464C45ull); /* "SHUFFLE" */
  /* "AUGMENT", then one stream per rank: golden-ratio spaced seeds. */
  rng_seed(&t->augment_rng, f->seed ^ 0x4155474D454E54ull ^
                                ((uint64_t)rank * 0x9E3779B97F4A7C15ull));

  if ((rc = open_device(t, f, err, err_cap)) != 0) {
    trainer_free(t);
    return rc;
  }
  int rows = t->shard > TRAIN_EVAL_CHUNK ? t->shard : TRAIN_EVAL_CHUNK;
  /* a device row's pipeline hooks (stage.h); the ring's slots once made */
  t->link = (stage_link){.cp = &t->cp, .lowp = &t->model.lowp};
  optim_config oc = optim_defaults(f->optimizer);
  oc.weight_decay = f->weight_decay;
  oc.nesterov = f->nesterov;
  if (model_create_on(&t->model, model_find(f->model), rows, &t->cp) != 0) {
    snprintf(err, err_cap, "--device %s: %s", t->cp.ops->name,
             t->cp.err[0] ? t->cp.err : "out of memory");
    trainer_free(t);
    return 1;
  }
  if (model_set_precision(&t->model, f->precision) != 0 ||
      (f->precision != LOWP_FP32 && !t->on_device &&
       !(t->g16 = malloc(t->model.n_params * sizeof *t->g16))) ||
      optim_init(&t->opt, &oc, t->model.n_params) != 0 ||
      !(t->grads = calloc(t->model.n_params, sizeof *t->grads)) ||
      batch_init(&t->eval, TRAIN_EVAL_CHUNK) != 0 ||
      (t->on_device
           ? prefetch_init(&t->pipe, f->prefetch, (size_t)t->shard, stage_batch,
                           stage_batch_done, &t->link)
           : prefetch_init(&t->pipe, f->prefetch, (size_t)t->shard,
                           f->precision != LOWP_FP32 ? round_stage : NULL, NULL,
                           &t->model.lowp)) != 0 ||
      !(t->perm = malloc(d->train.n * sizeof *t->perm))) {
    trainer_free(t);
    snprintf(err, err_cap, "out of memory");
    return 1;
  }
  t->link.slots = t->pipe.slots;
  if (row_state_init(t) != 0) {
    snprintf(err, err_cap, "--device %s: %s", t->cp.ops->name,
             t->cp.err[0] ? t->cp.err : "out of memory");
    trainer_free(t);
    return 1;
  }
  if (t->on_device && t->cp.ops->stage_init(&t->cp, t->pipe.n_slots,
                                            (size_t)t->shard * DATA_PIXELS *
                                                sizeof(float)) != 0) {
    snprintf(err, err_cap, "--device %s: input staging: %s", t->cp.ops->name,
             t->cp.err);
    trainer_free(t);
    return 1;
  }
  return 0;
}

void trainer_free(trainer *t) {
  model_free(&t->model); /* before its row closes */
  if (t->cp.ops) {
    void *rows[] = {t->row_acc, t->row_y, t->on_device ? t->row_m : NULL,
                    t->on_device ? t->row_v : NULL};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
      if (rows[i])
        t->cp.ops->release(&t->cp, rows[i]);
  }
  compute_close(&t->cp);
  optim_free(&t->opt);
  free(t->grads);
  free(t->g16);
  batch_free(&t->eval);
  prefetch_free(&t->pipe);
  free(t->perm);
  memset(t, 0, sizeof *t);
}

/* Starts one in-place collective per tensor of the params (all of them,
 * or only the buffers), named "<prefix>.<tensor name>": a broadcast from
 * rank 0, or an average; then waits for every one started. */
static hk_status per_tensor(trainer *t, const char *prefix, int buffers_only,
                            int broadcast, const char *what, int on_row) {
  /* on_row: the tensors are row_params (device memory on a device row,
   * queued on the compute stream: hk is told so, and the stream waits
   * for the results); else the host params */
  float *base = on_row ? t->model.row_params : t->model.params;
  void *s = on_row && t->on_device ? t->cp.ops->stream(&t->cp) : NULL;
  int started = 0;
  for (int i = 0; i < t->model.n_tensors; i++) {
    model_tensor d = model_tensor_at(&t->model, i);
    if (buffers_only && d.trainable)
      continue;
    char name[MODEL_NAME_CAP + 16];
    snprintf(name, sizeof name, "%s.%s", prefix, d.name);
    float *p = base + d.offset;
    hk_handle *h = &t->handles[started];
    if (s)
      hk_set_stream(s);
    hk_status st = broadcast
                       ? hk_broadcast_async(name, p, d.count, HK_FLOAT32, 0, h)
                       : hk_allreduce_async(name, p, p, d.count, HK_FLOAT32,
                                            HK_AVERAGE, h);
    if (trainer_check(t, st,
                      broadcast ? "hk_broadcast_async" : "hk_allreduce_async",
                      name) != HK_OK)
      break;
    started++;
  }
  for (int i = 0; i < started; i++)
    trainer_check(t,
                  s ? hk_wait_stream(t->handles[i], s) : hk_wait(t->handles[i]),
                  what, NULL);
  return t->failed;
}

hk_status trainer_broadcast_init(trainer *t, uint64_t seed) {
  if (t->rank == 0) {
    rng r;
    rng_seed(&r, seed);
    t->model.ops->init(&t->model, &r);
  }
  if (per_tensor(t, "init", 0, 1, "broadcast of the initial weights", 0) !=
      HK_OK)
    return t->failed;
  state_to_row(t);
  return check_device(t);
}

void trainer_state_loaded(trainer *t) { state_to_row(t); }

/* model_backward's callback: launch the allreduce of a finished gradient
 * (packed into 16 bits first when computing in bf16/fp16). */
static int launch(void *ctx, int tensor, float *grad, size_t count) {
  trainer *t = ctx;
  model_tensor d = model_tensor_at(&t->model, tensor);
  if (t->launched == 0 && t->rank == t->inject_rank &&
      t->step + 1 == t->inject_step)
    grad[0] *= INFINITY; /* the test hook (train.h) */
  void *buf = grad;
  hk_dtype type = HK_FLOAT32;
  if (t->on_device) /* grad is device memory, queued on the stream */
    hk_set_stream(t->cp.ops->stream(&t->cp));
  else if (t->g16) {
    buf = t->g16 + d.offset;
    type = t->model.lowp == LOWP_BF16 ? HK_BFLOAT16 : HK_FLOAT16;
    lowp_pack(buf, grad, count, t->model.lowp);
  }
  if (trainer_check(t,
                    hk_allreduce_async(d.name, buf, buf, count, type,
                                       HK_AVERAGE, &t->handles[t->launched]),
                    "hk_allreduce_async", d.name) != HK_OK)
    return 1;
  t->launched++;
  return 0;
}

/* Floats of the trainable tensors (they come first, model.h). */
static size_t trainable_floats(const model *m) {
  size_t n = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    model_tensor d = model_tensor_at(m, i);
    if (d.trainable && d.offset + d.count > n)
      n = d.offset + d.count;
  }
  return n;
}

/* After the allreduces, on the row's gradient buffer g: widens 16-bit
 * gradients back into it (CPU row), lets the loss scaler decide from the
 * row's finite check (one flag from a device), and unscales. Returns 1
 * to apply the step, 0 to skip it, -1 when the row failed. */
static int finish_gradients(trainer *t, float *g) {
  model *m = &t->model;
  compute *cp = &t->cp;
  for (int i = 0; t->g16 && i < m->n_tensors; i++) {
    model_tensor d = model_tensor_at(m, i);
    if (d.trainable)
      lowp_unpack(g + d.offset, t->g16 + d.offset, d.count, m->lowp);
  }
  int finite = 1;
  if (t->scaler.enabled &&
      (finite = cp->ops->finite(cp, g, trainable_floats(m))) < 0)
    return -1;
  float inv = 1.0f / t->scaler.scale; /* exact: a power of two */
  if (!scaler_update(&t->scaler, finite))
    return 0;
  for (int i = 0; inv != 1.0f && i < m->n_tensors; i++) {
    model_tensor d = model_tensor_at(m, i);
    if (d.trainable)
      cp->ops->scale(cp, g + d.offset, d.count, inv);
  }
  return 1;
}

/* The rate of step t->step: warm-up, then cosine or the plateau's scale. */
static float learning_rate(const trainer *t) {
  if (!t->use_plateau || t->step < t->warmup_steps)
    return lr_at(t->peak_lr, t->step, t->total_steps, t->warmup_steps);
  return t->peak_lr * t->plateau.scale;
}

/* One step on the pipeline's next batch (already rounded to the compute
 * type by the pipeline's stage); adds the shard's mean loss and its
 * correct predictions to row_acc[0..1] (on the row) and the time waited
 * in hk_wait to *wait_s. */
static hk_status step(trainer *t, double *wait_s) {
  if (!t->die_in_checkpoint && t->step + 1 == t->die_step)
    raise(SIGKILL); /* the test hook (elastic.h) */
  const batch *b = prefetch_next(&t->pipe);
  if (!b) {
    snprintf(t->err, sizeof t->err,
             "input pipeline: staging a batch failed%s%s",
             t->cp.stage_err[0] ? ": " : "", t->cp.stage_err);
    return t->failed = HK_ERR_SYSTEM;
  }
  model *m = &t->model;
  if (t->on_device) /* the compute stream waits for the batch's copy */
    m->dev_x = t->cp.ops->stage_take(&t->cp, (int)(b - t->pipe.slots));
  compute *cp = &t->cp;
  const compute_ops *o = cp->ops;
  const float *z = model_forward(m, b->x, t->shard, 1);
  /* the loss on the row: its sums stay there (row_acc) until read */
  o->to_dev(cp, t->row_y, b->y, (size_t)t->shard);
  o->xent(cp, z, t->row_y, t->shard, m->classes, m->row_dlogits, t->row_acc);
  size_t nd = (size_t)t->shard * (size_t)m->classes;
  if (t->scaler.enabled)
    o->scale(cp, m->row_dlogits, nd, t->scaler.scale);
  o->round(cp, m->row_dlogits, nd, m->lowp);
  t->launched = 0;
  m->ops->backward(m, t->shard, t->grads, launch, t);
  /* Test hook (train.h): evaluation-mode passes, which leave batch
   * norm's running statistics alone, so the run's results do not change. */
  for (int i = 0; i < t->slow_passes; i++)
    model_forward(m, b->x, t->shard, 0);
  /* every read of the batch is queued: on a device row the pipeline's
   * done hook records so on the compute stream, and the slot's next copy
   * waits for it (stage.h) */
  prefetch_release(&t->pipe);
  /* Test hook (train.h): the step also lasts until the input pipeline has
   * filled up (a condition, not a time: tests count batches found ready) */
  if (t->slow_passes > 0 && prefetch_wait_full(&t->pipe, 30, NULL) != 0)
    fprintf(stderr, "train: the input pipeline did not fill up in 30 s\n");
  double w0 = progress_now();
  float *g = t->on_device ? m->dev_grads : t->grads;
  if (t->on_device) { /* the stream waits GPU-side; nothing comes back */
    void *s = o->stream(cp);
    for (int i = 0; i < t->launched; i++)
      trainer_check(t, hk_wait_stream(t->handles[i], s), "gradient allreduce",
                    NULL);
  } else {
    for (int i = 0; i < t->launched; i++)
      trainer_check(t, hk_wait(t->handles[i]), "gradient allreduce", NULL);
  }
  *wait_s += progress_now() - w0;
  if (check_device(t) != HK_OK)
    return t->failed;
  int apply = finish_gradients(t, g);
  if (apply < 0)
    return check_device(t);
  if (!apply) {
    if (t->inject_rank >= 0) /* the test hook's witness, on every rank */
      printf("[%d] skipped step %ld scale %g\n", t->rank, t->step + 1,
             (double)t->scaler.scale);
    t->step++; /* skipped (fp16 overflow): the schedule still moves on */
    return HK_OK;
  }
  optim_begin_step(&t->opt);
  float lr = learning_rate(t);
  for (int i = 0; i < m->n_tensors; i++) {
    model_tensor d = model_tensor_at(m, i);
    if (!d.trainable)
      continue;
    optim_args a = optim_args_of(&t->opt, lr, d.decay);
    o->optim(cp, &a, m->row_params + d.offset, g + d.offset,
             t->row_m + d.offset, t->row_v ? t->row_v + d.offset : NULL,
             d.count);
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
  compute *cp = &t->cp;
  model *m = &t->model;
  t->host_acc[2] = t->host_acc[3] = 0.0;
  cp->ops->to_dev(cp, t->row_acc + 2, t->host_acc + 2, 2 * sizeof(double));
  for (size_t i = lo; i < hi; i += TRAIN_EVAL_CHUNK) {
    size_t k = hi - i < TRAIN_EVAL_CHUNK ? hi - i : TRAIN_EVAL_CHUNK;
    batch_fill(&t->eval, &t->data->test, NULL, i, k, NULL);
    lowp_round(t->eval.x, k * DATA_PIXELS, m->lowp);
    const float *z = model_forward(m, t->eval.x, (int)k, 0);
    cp->ops->to_dev(cp, t->row_y, t->eval.y, k);
    /* the counts on the row (its dLoss/dlogits are scratch here) */
    cp->ops->xent(cp, z, t->row_y, (int)k, m->classes, m->row_dlogits,
                  t->row_acc + 2);
  }
  (void)cp->ops->to_host(cp, t->host_acc + 2, t->row_acc + 2,
                         2 * sizeof(double));
  if (check_device(t) != HK_OK)
    return t->failed;
  int64_t total = (int64_t)t->host_acc[3];
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
  const long k0 = t->epoch_k0;
  t->epoch_k0 = 0;
  for (size_t i = 0; i < n; i++)
    t->perm[i] = (uint32_t)i;
  t->epoch_shuffle = t->shuffle;
  rng_shuffle(&t->shuffle, t->perm, n);
  if (prefetch_begin(&t->pipe, &t->data->train, t->perm,
                     (size_t)k0 * (size_t)t->global_batch +
                         (size_t)t->rank * (size_t)t->shard,
                     (size_t)t->global_batch, (size_t)t->shard,
                     t->steps_per_epoch - k0,
                     t->augment ? &t->augment_rng : NULL) != 0) {
    snprintf(t->err, sizeof t->err,
             "input pipeline: cannot start the prefetch thread");
    return t->failed = HK_ERR_SYSTEM;
  }

  progress_start(p, t->show_progress, epoch, t->steps_per_epoch);
  compute *cp = &t->cp;
  double wait_s = 0.0, t0 = progress_now();
  t->host_acc[0] = t->host_acc[1] = 0.0;
  cp->ops->to_dev(cp, t->row_acc, t->host_acc, 2 * sizeof(double));
  for (long k = k0; k < t->steps_per_epoch; k++) {
    if (t->commit_every > 0 && k % t->commit_every == 0 &&
        t->on_commit(t->commit_arg, t, epoch, k) != 0)
      t->failed = HK_ERR_SYSTEM;
    if (t->failed != HK_OK || step(t, &wait_s) != HK_OK) {
      prefetch_end(&t->pipe);
      progress_end(p);
      return t->failed;
    }
    if (t->show_progress) /* the running loss: two doubles back */
      (void)cp->ops->to_host(cp, t->host_acc, t->row_acc, 2 * sizeof(double));
    progress_update(p, k + 1, t->host_acc[0] / (double)(k + 1 - k0));
  }
  (void)cp->ops->to_host(cp, t->host_acc, t->row_acc, 2 * sizeof(double));
  if (check_device(t) != HK_OK) {
    prefetch_end(&t->pipe);
    progress_end(p);
    return t->failed;
  }
  double loss = t->host_acc[0], correct = t->host_acc[1];
  s->train_s = progress_now() - t0;
  prefetch_end(&t->pipe);
  progress_end(p);

  /* Mean over ranks of the per-rank mean shard loss = mean over samples;
   * the correct counts likewise (equal shards). */
  const double steps = (double)(t->steps_per_epoch - k0);
  double m[2] = {loss / steps, correct / (steps * t->shard)};
  if (trainer_check(
          t, hk_allreduce("epoch.metrics", m, m, 2, HK_FLOAT64, HK_AVERAGE),
          "hk_allreduce", "epoch.metrics") != HK_OK)
    return t->failed;
  s->loss = m[0];
  s->train_acc = m[1];
  /* Every rank holds the same mean (hk's result), so all reduce alike. */
  s->lr_reduced = t->use_plateau && plateau_step(&t->plateau, m[0]);
  s->steps = t->steps_per_epoch - k0;
  s->lr = t->last_lr;
  s->samples_per_s =
      (double)s->steps * t->global_batch / (s->train_s > 0 ? s->train_s : 1e-9);
  s->wait_share = s->train_s > 0 ? wait_s / s->train_s : 0.0;
  s->data_share = s->train_s > 0 ? t->pipe.wait_s / s->train_s : 0.0;
  s->data_ready = t->pipe.ready;
  /* Buffers (batch norm's running statistics, each rank's own during the
   * epoch) averaged, so that every rank evaluates and saves one model. */
  if (per_tensor(t, "epoch", 1, 0, "running statistics average", 1) != HK_OK)
    return t->failed;
  return evaluate(t, &s->test_acc);
}
