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
 *   epoch 1 loss 0.518123 test_acc 0.8159 samples/s 14890
 *   allreduce_wait 80.0% time_s 4.02
 * (one line in reality); with --schedule plateau, after an epoch that
 * reduced the rate, "plateau: loss L not below the best B for more than
 * P epochs: learning rate now F x the peak"; at the end "done epochs N
 * time_s S test_acc A" (S: wall seconds from the initial broadcast to the
 * last evaluation) and, with --save, "saved FILE". With --precision fp16
 * EVERY rank then prints "loss_scale S skipped_steps K" (its loss
 * scaler's final scale and the steps it skipped; equal on all ranks). loss is
 * the mean training loss over all ranks' samples of the epoch; test_acc the
 * accuracy on the (limited) test set after the epoch; samples/s the global
 * training throughput over rank 0's wall time of the epoch's steps (time_s,
 * evaluation excluded); allreduce_wait the share of that time rank 0 spent in
 * hk_wait on gradient allreduces. With --progress, progress.h's display on
 * stderr. Exit status: 0, 1 (data, hk or I/O failure), 2 (bad command line, or
 * a malformed TRAIN_INJECT_OVERFLOW, train.h's test hook).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"
#include "flags.h"
#include "hk/hk.h"
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

static void print_setup(const train_flags *f, const trainer *t,
                        const data_set *d) {
  char shape[128];
  t->model.ops->describe(&t->model, shape, sizeof shape);
  printf("train: %d rank%s, model %s (%zu parameters), %s lr %g "
         "weight_decay %g, global batch %d (%d per rank), %ld steps/epoch, "
         "warm-up %ld steps, schedule %s, precision %s, %zu train / %zu "
         "test samples\n",
         t->size, t->size > 1 ? "s" : "", shape, t->model.n_params,
         f->optimizer == OPTIM_ADAMW  ? "adamw"
         : f->optimizer == OPTIM_LAMB ? "lamb"
         : f->nesterov                ? "sgd-nesterov"
                                      : "sgd",
         (double)f->lr, (double)f->weight_decay, t->global_batch, t->shard,
         t->steps_per_epoch, t->warmup_steps, f->plateau ? "plateau" : "cosine",
         lowp_name(t->model.lowp), d->train.n, d->test.n);
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

  double start = progress_now();
  st = trainer_broadcast_init(&t, f.seed);
  epoch_stats s = {0};
  progress p = {0};
  for (int e = 1; st == HK_OK && e <= f.epochs; e++) {
    st = trainer_epoch(&t, e, &p, &s);
    if (st == HK_OK && t.rank == 0) {
      printf("epoch %d loss %.6f test_acc %.4f samples/s %.0f "
             "allreduce_wait %.1f%% time_s %.2f\n",
             e, s.loss, s.test_acc, s.samples_per_s, 100.0 * s.wait_share,
             s.train_s);
      if (s.lr_reduced)
        printf("plateau: loss %.6f not below the best %.6f for more than %d "
               "epoch%s: learning rate now %g x the peak\n",
               s.loss, t.plateau.best, f.plateau_patience,
               f.plateau_patience == 1 ? "" : "s", (double)t.plateau.scale);
      fflush(stdout);
    }
  }
  if (st != HK_OK) {
    fprintf(stderr, "train: %s\n", t.err);
    status = 1;
  } else {
    if (t.rank == 0)
      printf("done epochs %d time_s %.2f test_acc %.4f\n", f.epochs,
             progress_now() - start, s.test_acc);
    if (t.scaler.enabled) /* every rank: the tests compare them */
      printf("loss_scale %g skipped_steps %ld\n", (double)t.scaler.scale,
             t.scaler.skipped);
    if (save_weights(&f, &t) != 0)
      status = 1;
  }
  trainer_free(&t);
  data_free(&data);
  st = hk_shutdown();
  if (st != HK_OK && status == 0)
    status = hk_failed(st, "hk_shutdown");
  return status;
}
