/*
 * train.h - data-parallel training of a model of model.h's table (--model
 * mlp|cnn) the Horovod way, through hk's public API only.
 *
 * Every rank holds the whole data set and a full model replica. Per epoch
 * every rank shuffles the training indices with the same SplitMix64 stream
 * (identical permutation everywhere, no communication); step s takes the
 * global batch perm[s*G .. (s+1)*G) and rank r trains on its contiguous
 * shard of G/size samples, r-th in rank order. The loss is the mean over
 * the shard; during backward each gradient tensor is handed to
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
 * Test hook: the environment variable TRAIN_INJECT_OVERFLOW="R:S" (fp16
 * only) makes rank R multiply the first element of its first gradient
 * tensor of step S (1-based, counted over the run) by inf before handing
 * it to hk; every rank must then skip that step.
 *
 * Errors: functions returning hk_status fail with the first hk error met,
 * after waiting every handle they launched; t->err then holds
 * "<what>: <hk_strerror>: <hk_last_error>".
 */
#ifndef HK_TRAIN_TRAIN_H
#define HK_TRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "flags.h"
#include "hk/hk.h"
#include "model.h"
#include "optim.h"
#include "progress.h"
#include "rng.h"
#include "scaler.h"

/** Test samples evaluated per forward pass. */
#define TRAIN_EVAL_CHUNK 500

typedef struct trainer {
  int rank, size;
  int global_batch, shard; /* samples per step: all ranks, this rank */
  long steps_per_epoch, total_steps, warmup_steps;
  long step; /* steps done so far (schedule position) */
  float peak_lr;
  int use_plateau; /* --schedule plateau: peak_lr * plateau.scale */
  plateau plateau;
  int show_progress;    /* --progress: rank 0 reports each epoch's progress */
  const data_set *data; /* not owned */
  model model;
  optim opt;
  float *grads;  /* model.n_params floats, same layout as the params */
  uint16_t *g16; /* bf16/fp16: the gradients as hk receives them, same
                    layout; NULL for fp32 */
  loss_scaler scaler;
  long inject_rank, inject_step; /* TRAIN_INJECT_OVERFLOW, or -1 */
  float *x;       /* input batch: max(shard, eval chunk) x 784 floats */
  uint8_t *y;     /* its labels */
  uint32_t *perm; /* training order of the current epoch */
  rng shuffle;    /* same seed on every rank */
  hk_handle handles[MODEL_MAX_TENSORS];
  int launched; /* tensors handed to hk this step */
  hk_status failed;
  char err[1024];
} trainer;

/** One epoch's numbers, identical on every rank except the timings. */
typedef struct epoch_stats {
  double loss;          /* mean training loss over all ranks' samples */
  double test_acc;      /* correct / test samples, all ranks together */
  double samples_per_s; /* global training samples / this rank's wall s */
  double wait_share;    /* time in hk_wait for gradients / step time */
  double train_s;       /* wall seconds of the epoch's steps */
  int lr_reduced;       /* --schedule plateau reduced the rate after it */
} epoch_stats;

/**
 * Sets up everything for flags f on rank `rank` of `size`: checks that the
 * global batch divides by size and that the training set holds at least
 * one global batch. Returns 0; or, with a message in err, 2 for a
 * batch/world-size/data-size combination that cannot train (a usage error,
 * the same on every rank: nothing here communicates) or 1 when out of
 * memory (a malformed TRAIN_INJECT_OVERFLOW is a usage error too). Free
 * with trainer_free (also after a failure).
 */
int trainer_init(trainer *t, const train_flags *f, const data_set *d, int rank,
                 int size, char *err, size_t err_cap);
void trainer_free(trainer *t);

/** He-initialises the model on rank 0 (from f->seed) and broadcasts every
 *  tensor to the others; waits for all of them. */
hk_status trainer_broadcast_init(trainer *t, uint64_t seed);

/** Trains one epoch (epoch is 1-based), then evaluates the test set split
 *  across the ranks; fills *s. */
hk_status trainer_epoch(trainer *t, int epoch, progress *p, epoch_stats *s);

#endif
