/*
 * train.h - data-parallel training of a model of model.h's table (--model
 * mlp|cnn) the Horovod way, through hk's public API only.
 *
 * Every rank holds the whole data set (read once, kept in memory) and a
 * full model replica. Batches follow Horovod's convention: each of the
 * `size` workers trains on `shard` samples per step (--batch-size), the
 * global batch G being shard * size (--global-batch-size G gives G and
 * divides it). Per epoch every rank shuffles the training indices with the
 * same SplitMix64 stream (identical permutation everywhere, no
 * communication); step s takes the global batch perm[s*G .. (s+1)*G) and
 * rank r trains on its contiguous shard, r-th in rank order, prepared
 * ahead by the input pipeline (prefetch.h: gather, --augment from a
 * per-rank rng, conversion, and with bf16/fp16 the
 * rounding to the compute type in the pipeline's stage hook). The loss is the
 * mean over the shard; during backward each gradient tensor is handed to
 * hk_allreduce_async(HK_AVERAGE) under its own name ("fc3.bias",
 * "fc3.weight", "fc2.bias", ...) the moment it is complete, last layer
 * first, so communication overlaps the rest of backward. All handles are
 * waited before the optimiser step; hk's results are bitwise identical on
 * every rank and the update is elementwise, so replicas stay bitwise equal.
 * The average of the equal-sized shards' mean gradients is the gradient of
 * the mean over the global batch: any world size dividing G trains the
 * same model up to float rounding (for the CNN, up to its batch norm,
 * whose statistics are each rank's local shard's: cnn.h).
 * Buffers (batch norm's running statistics) are averaged over the ranks
 * with hk_allreduce at the end of every epoch, before the evaluation, so
 * every rank evaluates and saves the same model. The last n mod G samples of
 * each epoch (after shuffling) are dropped, as PyTorch's drop_last=True does.
 *
 * Mixed precision (--precision bf16|fp16, model_set_precision): the
 * input batch and dLoss/dlogits are rounded to the type, the model
 * computes in it (model.h), and each gradient tensor is packed into
 * 16-bit words and allreduced as an HK_BFLOAT16 / HK_FLOAT16 tensor (each
 * pairwise sum rounded in that type, hk.h), then widened back to float32
 * for the optimiser, which updates the float32 master weights. fp16 adds
 * dynamic loss scaling (scaler.h): dLoss/dlogits is multiplied by the
 * scale; a step whose allreduced gradients hold an inf or NaN is skipped
 * (identically on every rank, as hk's results are bitwise equal) and the
 * scale halved.
 *
 * Device (--device cpu|cuda|auto, compute.h): the model's passes run on
 * a compute row. On the CUDA row (the CNN only; the MLP runs on the CPU
 * row) activations and gradients live on the GPU (cnn_create_on); each
 * gradient is handed to hk as a float32 DEVICE tensor the moment
 * backward has queued it, with the row's compute stream set as its
 * producer (hk_set_stream before each submit), so hk's stream waits for
 * exactly that work; the step then orders the compute stream after every
 * result (hk_wait_stream). The rest of the step runs on the row too
 * (compute_ops' tail): the loss and its sums (row_acc: read once per
 * epoch, per step only for the progress bar), the loss scaling, fp16's
 * finite check of the allreduced gradients (one flag back; the decision
 * on the host, identical everywhere), and the optimiser on the row's
 * float32 master weights (model.row_params) and state (row_m, row_v).
 * The running statistics are averaged through hk from the row, and the
 * test set is evaluated there. The weights and state go over after the
 * initial broadcast and a resume (trainer_state_loaded) and come back
 * for a checkpoint, --save and the end (trainer_to_host). The input pipeline's
 * stage (on its thread) copies each prepared batch into a pinned buffer of its
 * ring slot and onto the device on the row's copy stream, recording an event;
 * the step makes the compute stream wait for that event (compute_ops.stage_*),
 * so the copy overlaps the previous step; when the step has queued its last
 * read of the slot, an event recorded on the compute stream makes the slot's
 * next copy wait for it (stage.h). With bf16/fp16 the device gradients
 * travel as float32 (HK_COMPRESSION=bf16|fp16 casts them inside hk); loss
 * scaling works alike. GPU index: --gpu, else the local rank (hk's own
 * choice; with HK_GPU set for hk, pass the same --gpu). The ranks agree on the
 * row (one hk allreduce in trainer_init): if a rank cannot open --device cuda
 * every rank fails; with auto, if one rank ends on the CPU, every rank does (hk
 * refuses a tensor that is on the device on some ranks and on the host on
 * others).
 *
 * Test hook: the environment variable TRAIN_INJECT_OVERFLOW="R:S" (fp16
 * only) makes rank R multiply the first element of its first gradient
 * tensor of step S (1-based, counted over the run) by inf before handing
 * it to hk; every rank must then skip that step.
 *
 * Learning rate: the peak is --lr times the number of workers (Horovod's
 * `lr * hvd.size()`, the linear scaling rule of Goyal et al., "Accurate,
 * Large Minibatch SGD", 2017, section 2.1), unless --no-lr-scaling; the
 * warm-up ramps from peak / W to that scaled peak over its W steps, the
 * gradual warm-up the same paper (section 2.2) pairs with the scaling.
 *
 * Errors: functions returning hk_status fail with the first hk error met,
 * after waiting every handle they launched; t->err then holds
 * "<what>: <hk_strerror>: <hk_last_error>".
 */
#ifndef HK_TRAIN_TRAIN_H
#define HK_TRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "data.h"
#include "flags.h"
#include "hk/hk.h"
#include "model.h"
#include "optim.h"
#include "prefetch.h"
#include "progress.h"
#include "rng.h"
#include "scaler.h"
#include "stage.h"

/** Test samples evaluated per forward pass. */
#define TRAIN_EVAL_CHUNK 500
/** Test-only hook: this environment variable, set to K, adds K extra
 *  forward passes of the batch to every step, and makes every step last
 *  until the input pipeline has filled up (prefetch_wait_full), so tests
 *  can watch the pipeline keep ahead whatever the machine's load. */
#define TRAIN_SLOW_STEP_ENV "TRAIN_TEST_SLOW_STEP"

typedef struct trainer {
  int rank, size;
  int global_batch, shard; /* samples per step: all ranks, this rank */
  long steps_per_epoch, total_steps, warmup_steps;
  long step;       /* steps done so far (schedule position) */
  float peak_lr;   /* --lr, times size unless --no-lr-scaling */
  float last_lr;   /* rate of the last step taken */
  int use_plateau; /* --schedule plateau: peak_lr * plateau.scale */
  plateau plateau;
  int show_progress; /* --progress: rank 0 reports each epoch's progress */
  int augment;       /* --augment */
  int slow_passes;   /* TRAIN_SLOW_STEP_ENV's extra forward passes */
  compute cp;        /* the row the model runs on (--device) */
  int on_device;     /* cp's memory is not the host's */
  char device_note[COMPUTE_ERR_CAP + 64]; /* --device auto: why not cuda */
  const data_set *data;                   /* not owned */
  model model;
  optim opt;
  float *grads;       /* model.n_params floats, same layout as the params
                         (the CPU row's gradient buffer) */
  float *row_m;       /* the optimiser's state in the row's memory: opt.m and */
  float *row_v;       /* opt.v on the CPU row; device copies otherwise (row_v
                         NULL for sgd) */
  double *row_acc;    /* 4 doubles, row memory: the epoch's loss sum and
                         correct count (xent), then evaluation's */
  double host_acc[4]; /* row_acc's host side (to_dev's source) */
  uint8_t *row_y;     /* labels of the current batch, row memory */
  uint16_t *g16;      /* bf16/fp16: the gradients as hk receives them, same
                         layout; NULL for fp32 */
  loss_scaler scaler;
  long inject_rank, inject_step; /* TRAIN_INJECT_OVERFLOW, or -1 */
  long die_step;                 /* TRAIN_TEST_DIE (elastic.h): this process's
                                    step, or -1 */
  int die_in_checkpoint;         /* its ":checkpoint" form */
  batch eval;                    /* TRAIN_EVAL_CHUNK test samples */
  prefetch pipe;                 /* the training batches */
  stage_link link;               /* pipe's hooks on a device row */
  uint32_t *perm;                /* training order of the current epoch */
  rng shuffle;                   /* same seed on every rank */
  rng augment_rng;               /* --augment's draws: seeded per rank */
  rng epoch_shuffle; /* shuffle as the current epoch began (an elastic
                        commit restores it, so the epoch's order holds) */
  long epoch_k0;     /* the epoch starts at this step (a restored commit's:
                        elastic.h), then 0 */
  /* elastic.h: called before step k of `epoch` when k is a multiple of
   * commit_every (k = 0 included);
   * non-zero fails the epoch with HK_ERR_SYSTEM, t->err set by it */
  long commit_every; /* 0: never */
  int (*on_commit)(void *arg, struct trainer *t, int epoch, long k);
  void *commit_arg;
  hk_handle handles[MODEL_MAX_TENSORS];
  int launched; /* tensors handed to hk this step */
  hk_status failed;
  char err[4608]; /* room for a path and a reason */
} trainer;

/** One epoch's numbers, identical on every rank except the timings and
 *  the data counts. */
typedef struct epoch_stats {
  double loss;          /* mean training loss over all ranks' samples */
  double train_acc;     /* correct / training samples, all ranks (hk) */
  double test_acc;      /* correct / test samples, all ranks together */
  double samples_per_s; /* global training samples / this rank's wall s */
  double wait_share;    /* time in hk_wait for gradients / step time */
  double data_share;    /* time waiting for a batch / step time */
  long data_ready;      /* steps whose batch was ready when asked for */
  long steps;           /* steps of the epoch */
  double lr;            /* learning rate of the epoch's last step */
  double train_s;       /* wall seconds of the epoch's steps */
  int lr_reduced;       /* --schedule plateau reduced the rate after it */
} epoch_stats;

/**
 * Sets up everything for flags f on rank `rank` of `size`: checks that a
 * --global-batch-size divides by size and that the training set holds at
 * least one global batch. Returns 0; or, with a message in err, 2 for a
 * batch/world-size/data-size combination that cannot train (a usage error,
 * the same on every rank, checked before the one collective here, the
 * device agreement above) or 1 when out of
 * memory, with no thread for the pipeline, or when --device cuda cannot
 * be opened (err: "--device cuda: no CUDA device (...)"); --device cuda
 * with the MLP or with TRAIN_INJECT_OVERFLOW, and a malformed
 * TRAIN_INJECT_OVERFLOW, are usage errors (2). Free with trainer_free
 * (also after a failure).
 */
int trainer_init(trainer *t, const train_flags *f, const data_set *d, int rank,
                 int size, char *err, size_t err_cap);
void trainer_free(trainer *t);

/** Records the first hk failure st of `what` (on tensor `name`, or NULL)
 *  in t->failed and t->err; returns st. */
hk_status trainer_check(trainer *t, hk_status st, const char *what,
                        const char *name);

/**
 * Tells every rank whether some rank failed a local step (an hk allreduce
 * named `name`, the same on every rank): *failed_rank gets the lowest
 * rank whose failed_here was non-zero, or -1 when none was (and when the
 * allreduce failed). Returns HK_OK or the allreduce's error.
 */
hk_status trainer_agree(trainer *t, const char *name, int failed_here,
                        int *failed_rank);

/**
 * Ends a step only rank 0 does (a file it writes): every rank learns
 * through trainer_agree (named `name`) whether it failed (bad, on rank 0).
 * Returns HK_OK; or HK_ERR_SYSTEM with t->err set to err on rank 0 and to
 * `other` elsewhere; or the agreement's hk error.
 */
hk_status trainer_rank0_outcome(trainer *t, const char *name, int bad,
                                const char *err, const char *other);

/** He-initialises the model on rank 0 (from f->seed) and broadcasts every
 *  tensor to the others; waits for all of them. */
hk_status trainer_broadcast_init(trainer *t, uint64_t seed);

/**
 * Device rows: copies the weights (row_params) and the optimiser state
 * back into the host buffers (model.params, opt.m, opt.v) for a
 * checkpoint, a weight file or the end; nothing on the CPU row. Returns
 * HK_OK, or HK_ERR_SYSTEM with t->err "--device cuda: <call>: <reason>".
 */
hk_status trainer_to_host(trainer *t);

/** After the host weights and optimiser state were replaced (a resume):
 *  queues them into the row (device rows; nothing on the CPU row). */
void trainer_state_loaded(trainer *t);

/** Trains one epoch (epoch is 1-based) from step epoch_k0 (0 but after an
 *  elastic restore), then evaluates the test set split across the ranks;
 *  fills *s (its loss, train_acc, steps and time: over the steps of this
 *  call). Commits through
 *  on_commit every commit_every steps. */
hk_status trainer_epoch(trainer *t, int epoch, progress *p, epoch_stats *s);

/**
 * The settings a checkpoint must match to be resumed bitwise, as
 * "key=value\n" lines into out[cap] (ckpt.h): model kind and shape (the
 * model table's description), np, batch per rank and global, precision,
 * optimiser and its hyper-parameters, the schedule (cosine or plateau with
 * its factor and patience, scaled peak rate, warm-up, total steps), seed,
 * training samples, augmentation, the compute row (--device: a run
 * resumes bitwise on the row it ran on). Returns 0, -1 if cap is too
 * small.
 */
int trainer_settings(const trainer *t, const train_flags *f, char *out,
                     size_t cap);

/** Rank 0 prepares f->checkpoint_dir (ckpt_prepare_dir); every rank
 *  learns whether it could. Returns HK_OK, or HK_ERR_SYSTEM with t->err
 *  naming the directory and the reason (elsewhere: that rank 0 failed). */
hk_status trainer_checkpoint_dir(trainer *t, const train_flags *f);

/**
 * After epoch `epoch`: gathers every rank's augmentation rng state, then
 * rank 0 writes the checkpoint (ckpt.h) into f->checkpoint_dir; every rank
 * learns whether it was written. Returns HK_OK; or an hk error, or
 * HK_ERR_SYSTEM when the write failed, with t->err saying why (on rank 0
 * the file and the reason, elsewhere that rank 0 failed).
 */
hk_status trainer_checkpoint(trainer *t, const train_flags *f, int epoch);

/**
 * Every rank reads f->checkpoint_dir's checkpoint and checks it against
 * this run (ckpt_read); every rank learns whether all could (an hk
 * allreduce), and only then is the state installed: weights, optimiser
 * state, step, shuffle and this rank's augmentation rng, the
 * fp16 loss scaler and the plateau schedule. *epochs_done gets
 * the checkpoint's epoch. Returns HK_OK, or HK_ERR_INVALID_ARG (refused:
 * t->err names the file and the problem, or says which rank refused it) or
 * an hk error. The directory must be visible to every rank.
 */
hk_status trainer_resume(trainer *t, const train_flags *f, int *epochs_done);

#endif
