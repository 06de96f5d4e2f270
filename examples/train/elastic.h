/*
 * elastic.h - the trainer as an elastic job (--batches-per-commit N, with
 * hkrun --min-np): a lost worker costs the steps since the last commit,
 * not the run. Horovod Elastic's model (its State.commit / restore /
 * sync), in C on hk's public API (hk.h: HK_ERR_RANKS_CHANGED,
 * hk_elastic_reset).
 *
 * A commit is a local copy (no collective): the weights and buffers, the
 * optimiser's state and step, the schedule position, the epoch's shuffle
 * seed and the step within the epoch, the loss scaler, the plateau
 * schedule and this rank's augmentation rng as the committed step's batch
 * draws from it (the prefetch thread has drawn ahead:
 * prefetch_aug_state), so a restore is independent of --prefetch. The
 * trainer takes one before step 0 of every epoch and every N steps
 * (train.h's on_commit).
 *
 * When a call fails with HK_ERR_RANKS_CHANGED, every survivor re-forms
 * (elastic_reform): it drops its trainer, calls hk_elastic_reset, builds
 * a trainer for its new rank and world size, and installs the last
 * commit; the epoch goes on from the committed step. Every survivor holds
 * the same commit (hk's results are bitwise equal on every rank, and the
 * commit points are the same steps), so no broadcast is needed. The
 * global batch and the learning rate are fixed at the first world's
 * values (--global-batch-size G, or --batch-size times the starting
 * world; the peak rate scaled by that world), so the schedule and the
 * order of the samples do not change with the world size: a new world
 * must divide G (else the run fails, naming G and the size). The epoch
 * a re-form interrupted reports its loss and train_acc over the steps
 * after the commit.
 *
 * After an epoch is reported, before its checkpoint (--checkpoint-dir:
 * collectives), main takes a commit of the next epoch's step 0
 * (elastic_commit_epoch_end): a loss during the checkpoint then costs no
 * step, nor reports the epoch twice; the survivors write the checkpoint
 * after the re-form.
 *
 * Test hook: TRAIN_TEST_DIE="R:S" makes rank R of the first world kill
 * itself (SIGKILL) before step S (1-based, counted over the run, so
 * again after a rollback past it); "R:S:checkpoint" in the checkpoint
 * written just before step S (at the start of trainer_checkpoint, after
 * the epoch that ends with step S - 1), or read just before it (--resume
 * of a checkpoint of step S - 1: before the ranks agree on it). Several,
 * comma-separated
 * ("1:5,2:8"), for several losses: R is always a first-world rank.
 *
 * Thread-safety: the trainer's thread only.
 */
#ifndef HK_TRAIN_ELASTIC_H
#define HK_TRAIN_ELASTIC_H

#include <stddef.h>

#include "data.h"
#include "flags.h"
#include "train.h"

typedef struct train_commit {
  int valid;     /* a commit was taken */
  int epoch;     /* 1-based */
  long k;        /* the step within the epoch it precedes */
  long step;     /* the trainer's schedule position */
  float last_lr; /* the rate of the last step taken */
  size_t n;      /* parameters */
  float *params; /* n: weights and buffers, as model.params */
  float *m, *v;  /* n each: the optimiser's state (v NULL for sgd) */
  long opt_step;
  double b1_t, b2_t;
  rng epoch_shuffle, augment;
  loss_scaler scaler;
  plateau plateau;
} train_commit;

/**
 * train.h's on_commit for a train_commit (arg): copies t's state into it
 * (a device row's weights and state come back first, trainer_to_host).
 * Returns 0, or -1 out of memory or when the copy back failed (t->err
 * says which).
 */
int elastic_commit(void *arg, trainer *t, int epoch, long k);

/**
 * After a call of the trainer failed with HK_ERR_RANKS_CHANGED: frees t,
 * re-forms the job (hk_elastic_reset), initialises t for the new rank and
 * world size from f with the first world's global batch and peak rate
 * (first: those of the trainer that failed, passed in g and lr), and
 * installs commit c (when c->valid; else t is fresh, to start as the run
 * did: main broadcasts rank 0's weights again, or resumes). *epoch gets
 * the epoch to go on with (c's, or 1).
 * Returns 0; or, with err, 1 when hk_elastic_reset failed (the job is
 * over: its message says why) or out of memory, 2 when the new world
 * cannot split the global batch.
 */
int elastic_reform(trainer *t, const train_flags *f, const data_set *d,
                   const train_commit *c, int g, float lr, int *epoch,
                   char *err, size_t err_cap);

/**
 * The commit of epoch next_epoch's step 0 (the state as trainer_epoch of
 * the epoch before left it, prefetch thread ended), taken between epochs.
 * Returns 0, or -1 as elastic_commit.
 */
int elastic_commit_epoch_end(train_commit *c, trainer *t, int next_epoch);

/** Frees c's buffers (c may be zeroed or partly filled). */
void elastic_commit_free(train_commit *c);

#endif
