/*
 * train - data-parallel training of a 784-256-128-10 MLP or a small CNN
 * (--model, model.h) on Fashion-MNIST with hk, the job hk exists for:
 *
 *   hkrun -np 4 build/train --epochs 5
 *   hkrun -np 4 build/train --model cnn --precision bf16
 *
 * Order of events on every rank: parse flags (bad ones: message, exit 2),
 * load and validate the whole data set (any problem: message naming the
 * file, exit 1) - all before hk_init, so a bad setup fails identically and
 * at once on every rank and no rank waits in a collective for one that
 * left - then join the job, check the batch against the world size (exit
 * 2), broadcast rank 0's initial weights, train, and save.
 *
 * Output (stdout, rank 0 only): a "train: ..." line with the setup, one
 * line per epoch with these fields in this order,
 *   epoch 1 loss 0.518123 test_acc 0.8159 train_acc 0.8012 samples/s 14890
 *   data_wait 0.1% data_ready 186/187 allreduce_wait 80.0% time_s 4.02
 * (one line in reality); with --schedule plateau, after an epoch that
 * reduced the rate, "plateau: loss L not below the best B for more than
 * P epochs: learning rate now F x the peak"; "checkpoint DIR/last.hkckpt
 * epoch N" after each checkpoint, and at the end "done epochs N time_s S
 * test_acc A" (S: wall seconds from the initial broadcast, or the resume,
 * to the last evaluation) and, with --save, "saved FILE". With --precision
 * fp16 EVERY rank then prints "loss_scale S skipped_steps K" (its loss
 * scaler's final scale and the steps it skipped; equal on all ranks).
 * loss is the mean training loss over all ranks' samples of the epoch and
 * train_acc the share of them predicted right (both averaged across ranks
 * through hk); test_acc the accuracy on the (limited) test set after the
 * epoch; samples/s the global training throughput over rank 0's wall time
 * of the epoch's steps (time_s, evaluation excluded); data_wait the share
 * of that time rank 0's steps waited for their batch, data_ready how many
 * steps found it already prepared (prefetch.h); allreduce_wait the share
 * rank 0 spent in hk_wait on gradient allreduces. With --progress,
 * progress.h's bar on stderr (terminals only); with --metrics, metrics.h's
 * CSV.
 *
 * Elastic (--batches-per-commit N under hkrun --min-np, elastic.h): when
 * a worker is lost the others re-form and rank 0 prints "re-formed: R
 * ranks, from epoch E step K (the last commit)", or "..., after epoch E
 * (the last commit)" when the loss came in that epoch's checkpoint (which
 * the survivors then write), then goes on.
 *
 * A run that resumes (--resume) prints "resumed DIR/last.hkckpt after
 * epoch N" and trains epochs N+1 .. --epochs; a refused checkpoint stops
 * every rank before any training, with the file and the reason.
 *
 * Exit status: 0, 1 (data, checkpoint, hk or I/O failure), 2 (bad command
 * line, or a malformed TRAIN_INJECT_OVERFLOW, train.h's test hook).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt.h"
#include "data.h"
#include "elastic.h"
#include "flags.h"
#include "hk/hk.h"
#include "metrics.h"
#include "progress.h"
#include "save.h"
#include "train.h"

static int hk_failed(hk_status st, const char *what) {
  fprintf(stderr, "train: %s: %s: %s\n", what, hk_strerror(st),
          hk_last_error());
  return 1;
}

static int save_weights(const train_flags *f, const trainer *t) {
  char err[4200];
  if (f->save && t->rank == 0 &&
      model_save(&t->model, f->save, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    return -1;
  }
  if (f->save_all) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", f->save_all, t->rank);
    if (model_save(&t->model, path, err, sizeof err) != 0) {
      fprintf(stderr, "train: %s\n", err);
      return -1;
    }
  }
  if (f->save && t->rank == 0)
    printf("saved %s\n", f->save);
  return 0;
}

/* Rank 0 opens the metrics file unless it has it open already (appending
 * when resuming, or after a re-form: a new rank 0 continues the lost
 * one's rows); every rank learns whether it could. */
static hk_status open_metrics(const train_flags *f, trainer *t,
                              metrics_file *mf, int append) {
  char err[4200] = "";
  int bad = t->rank == 0 && !mf->f &&
            metrics_open(mf, f->metrics, append, err, sizeof err) != 0;
  return trainer_rank0_outcome(t, "metrics.open", bad, err,
                               "rank 0 cannot write the --metrics file (its "
                               "message says why)");
}

/* The weights to start from: the checkpoint's (--resume; *done gets its
 * epochs) or rank 0's; then the checkpoint folder. After a re-form that
 * found no commit too (elastic.h). */
static hk_status start_weights(const train_flags *f, trainer *t,
                               const char *ckpt, int *done) {
  hk_status st;
  if (f->resume) {
    st = trainer_resume(t, f, done);
    if (st == HK_OK && t->rank == 0) {
      printf("resumed %s after epoch %d\n", ckpt, *done);
      fflush(stdout);
    }
  } else
    st = trainer_broadcast_init(t, f->seed);
  if (st == HK_OK && f->checkpoint_dir)
    st = trainer_checkpoint_dir(t, f);
  return st;
}

/* Rank 0's epoch line and metrics row. */
static hk_status report_epoch(trainer *t, int e, const epoch_stats *s,
                              metrics_file *mf) {
  printf("epoch %d loss %.6f test_acc %.4f train_acc %.4f samples/s %.0f "
         "data_wait %.1f%% data_ready %ld/%ld allreduce_wait %.1f%% "
         "time_s %.2f\n",
         e, s->loss, s->test_acc, s->train_acc, s->samples_per_s,
         100.0 * s->data_share, s->data_ready, s->steps, 100.0 * s->wait_share,
         s->train_s);
  if (s->lr_reduced)
    printf("plateau: loss %.6f not below the best %.6f for more than %d "
           "epoch%s: learning rate now %g x the peak\n",
           s->loss, t->plateau.best, t->plateau.patience,
           t->plateau.patience == 1 ? "" : "s", (double)t->plateau.scale);
  fflush(stdout);
  if (!mf->f)
    return HK_OK;
  metrics_row row = {e,
                     s->loss,
                     s->train_acc,
                     s->test_acc,
                     s->samples_per_s,
                     s->data_share,
                     s->wait_share,
                     s->lr};
  if (metrics_write(mf, &row, t->err, sizeof t->err) != 0)
    return t->failed = HK_ERR_SYSTEM;
  return HK_OK;
}

static void print_setup(const train_flags *f, const trainer *t,
                        const data_set *d) {
  char shape[128];
  t->model.ops->describe(&t->model, shape, sizeof shape);
  printf("train: %d rank%s, model %s (%zu parameters), %s lr %g (%s) "
         "weight_decay %g, global batch %d (%d per rank), %ld steps/epoch, "
         "warm-up %ld steps, schedule %s, precision %s, %zu train / %zu "
         "test samples, prefetch %d, augment %s, device %s\n",
         t->size, t->size > 1 ? "s" : "", shape, t->model.n_params,
         f->optimizer == OPTIM_ADAMW  ? "adamw"
         : f->optimizer == OPTIM_LAMB ? "lamb"
         : f->nesterov                ? "sgd-nesterov"
                                      : "sgd",
         (double)t->peak_lr, f->lr_scaling ? "--lr x ranks" : "not scaled",
         (double)f->weight_decay, t->global_batch, t->shard, t->steps_per_epoch,
         t->warmup_steps, f->plateau ? "plateau" : "cosine",
         lowp_name(t->model.lowp), d->train.n, d->test.n, f->prefetch,
         f->augment ? "on" : "off", t->cp.ops->name);
  if (t->device_note[0])
    printf("train: %s; running on the cpu\n", t->device_note);
  fflush(stdout);
}

int main(int argc, char **argv) {
  train_flags f;
  char err[4200];
  int rc = flags_parse(argc, argv, &f, err, sizeof err);
  if (rc == 1) {
    fputs(flags_usage(), stdout);
    return 0;
  }
  if (rc != 0) {
    fprintf(stderr, "train: %s\n(train --help lists the options)\n", err);
    return 2;
  }

  data_set data;
  if (data_load(f.data_dir, f.limit_train, f.limit_test, &data, err,
                sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    return 1;
  }

  hk_status st = hk_init();
  if (st != HK_OK) {
    data_free(&data);
    return hk_failed(st, "hk_init");
  }
  /* One BLAS thread per worker. Always when workers share the host (or
   * hkrun -np 16 on 2 cores would run 16 x cores threads); by default
   * with a single worker too, since this model's GEMMs (at most 128 rows)
   * ran no faster with a second thread on 2 cores, and one thread keeps
   * the sums, hence the trajectory, independent of the core count, so
   * -np 1 reproduces -np 2 and -np 4 up to the rounding of the sharded
   * sums. A single worker honours OPENBLAS_NUM_THREADS when it is set. */
  if (hk_local_size() > 1 || !getenv("OPENBLAS_NUM_THREADS"))
    openblas_set_num_threads(1);

  trainer t;
  int status = 0;
  rc = trainer_init(&t, &f, &data, hk_rank(), hk_size(), err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "train: %s\n", err);
    st = hk_shutdown();
    if (st != HK_OK)
      hk_failed(st, "hk_shutdown");
    data_free(&data);
    return rc;
  }
  if (t.rank == 0)
    print_setup(&f, &t, &data);

  /* elastic: commits, and the first world's global batch and rate */
  train_commit commit = {0};
  const int g0 = t.global_batch;
  const float lr0 = t.peak_lr;
  if (f.batches_per_commit) {
    t.commit_every = f.batches_per_commit;
    t.on_commit = elastic_commit;
    t.commit_arg = &commit;
  }
  double start = progress_now();
  int done = 0;
  char ckpt[4200] = "";
  if (f.checkpoint_dir)
    ckpt_path(f.checkpoint_dir, ckpt, sizeof ckpt);
  st = start_weights(&f, &t, ckpt, &done);
  metrics_file mf = {0};
  if (st == HK_OK && f.metrics)
    st = open_metrics(&f, &t, &mf, f.resume);
  epoch_stats s = {0};
  progress p = {0};
  int ckpt_due = 0; /* an epoch done whose checkpoint is not written yet */
  for (int e = done + 1; e <= f.epochs || ckpt_due;) {
    if (st == HK_OK && !ckpt_due) {
      st = trainer_epoch(&t, e, &p, &s);
      if (st == HK_OK && t.rank == 0)
        st = report_epoch(&t, e, &s, &mf);
      if (st == HK_OK && f.checkpoint_dir) {
        ckpt_due = e;
        /* elastic: a loss in the checkpoint goes on from the next epoch */
        if (f.batches_per_commit &&
            elastic_commit_epoch_end(&commit, &t, e + 1) != 0)
          st = HK_ERR_SYSTEM;
      }
      if (st == HK_OK)
        e++;
    }
    if (st == HK_OK && ckpt_due) {
      st = trainer_checkpoint(&t, &f, ckpt_due);
      if (st == HK_OK && t.rank == 0) {
        printf("checkpoint %s epoch %d\n", ckpt, ckpt_due);
        fflush(stdout);
      }
      if (st == HK_OK)
        ckpt_due = 0;
    }
    if (st == HK_OK)
      continue;
    if (st != HK_ERR_RANKS_CHANGED || !f.batches_per_commit)
      break;
    /* elastic: the survivors go on from the last commit (elastic.h) */
    rc = elastic_reform(&t, &f, &data, &commit, g0, lr0, &e, err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "train: %s\n", err);
      status = rc;
      break;
    }
    if (t.rank == 0 && !commit.valid)
      printf("re-formed: %d rank%s, before the first commit: starting "
             "again\n",
             t.size, t.size > 1 ? "s" : "");
    else if (t.rank == 0 && ckpt_due) /* its checkpoint comes next */
      printf("re-formed: %d rank%s, after epoch %d (the last commit)\n", t.size,
             t.size > 1 ? "s" : "", ckpt_due);
    else if (t.rank == 0)
      printf("re-formed: %d rank%s, from epoch %d step %ld (the last "
             "commit)\n",
             t.size, t.size > 1 ? "s" : "", e, t.epoch_k0);
    fflush(stdout);
    st = HK_OK;
    if (!commit.valid) { /* lost before the first commit: start again */
      st = start_weights(&f, &t, ckpt, &done);
      e = done + 1;
    }
    /* a new rank 0 (the old one was lost) continues the old one's rows */
    if (st == HK_OK && f.metrics)
      st = open_metrics(&f, &t, &mf, commit.valid || f.resume);
  }
  elastic_commit_free(&commit);
  if (metrics_close(&mf, err, sizeof err) != 0 && st == HK_OK) {
    snprintf(t.err, sizeof t.err, "%s", err);
    st = HK_ERR_SYSTEM;
  }
  if (status != 0) {
    /* the job could not re-form: said above */
  } else if (st != HK_OK) {
    fprintf(stderr, "train: %s\n", t.err);
    status = 1;
  } else {
    if (t.rank == 0 && done >= f.epochs) /* resumed a finished run */
      printf("done epochs %d time_s %.2f: the checkpoint already holds all "
             "%d epochs, nothing to train\n",
             f.epochs, progress_now() - start, f.epochs);
    else if (t.rank == 0)
      printf("done epochs %d time_s %.2f test_acc %.4f\n", f.epochs,
             progress_now() - start, s.test_acc);
    if (t.scaler.enabled) /* every rank: the tests compare them */
      printf("loss_scale %g skipped_steps %ld\n", (double)t.scaler.scale,
             t.scaler.skipped);
    if (trainer_to_host(&t) != HK_OK) { /* the weights from a device row */
      fprintf(stderr, "train: %s\n", t.err);
      status = 1;
    } else if (save_weights(&f, &t) != 0) {
      status = 1;
    }
  }
  trainer_free(&t);
  data_free(&data);
  st = hk_shutdown();
  /* elastic: a worker lost after the last step changes nothing here */
  if (st == HK_ERR_RANKS_CHANGED && f.batches_per_commit)
    st = HK_OK;
  if (st != HK_OK && status == 0)
    status = hk_failed(st, "hk_shutdown");
  return status;
}
