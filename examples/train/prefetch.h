/*
 * prefetch.h - the input pipeline: a thread that prepares the next batches
 * of an epoch (batch.h: gather of the shuffled records, augmentation,
 * conversion, the stage hook) into a ring of buffers while the step runs.
 *
 * An epoch's job: `steps` batches, batch k being the `shard` records
 * perm[first + k * stride ...] (this rank's shard of the k-th global
 * batch). The producer makes them strictly in order k = 0, 1, ... and
 * draws augmentation from *aug in that order, so with depth 0 (no thread:
 * prefetch_next prepares the batch itself) and any depth > 0 the batches,
 * and the rng state at the end of the epoch, are bitwise the same.
 *
 * Depth N > 0: a ring of N + 1 buffers, the one the step holds and up to N
 * prepared ahead. The thread lives for one epoch (prefetch_begin ..
 * prefetch_end), so nothing runs between epochs (evaluation, checkpoints
 * see the rng as the epoch left it).
 *
 * Accounting (since prefetch_begin): `ready` counts the batches that were
 * already prepared when prefetch_next asked for them, `wait_s` the seconds
 * prefetch_next spent waiting (depth 0: preparing) - the step's data wait.
 *
 * Thread-safety: one consumer thread calls every function; the producer
 * thread is internal. The data split, perm and *aug must stay valid and
 * untouched by the caller from prefetch_begin to prefetch_end (the rng's
 * state at a step: prefetch_aug_state).
 */
#ifndef HK_TRAIN_PREFETCH_H
#define HK_TRAIN_PREFETCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "data.h"
#include "rng.h"

/** Largest --prefetch. */
#define PREFETCH_MAX_DEPTH 64

typedef struct prefetch {
  int depth;    /* batches prepared ahead; 0 = synchronous */
  int n_slots;  /* depth + 1 */
  batch *slots; /* owned */
  batch_stage_fn stage;
  batch_done_fn done;
  void *stage_ctx;
  /* the epoch's job */
  const data_split *split;
  const uint32_t *perm;
  size_t first, stride, shard;
  long steps;
  rng *aug;    /* NULL: no augmentation */
  rng *aug_at; /* n_slots: *aug as each slot's batch began its draws */
  /* ring state, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running;   /* the thread exists */
  int stop;      /* asks the thread to finish early */
  int stage_rc;  /* first non-zero stage result */
  long produced; /* batches prepared */
  long taken;    /* batches handed to the step */
  long released; /* batches the step is done with */
  /* accounting */
  long ready;
  double wait_s;
} prefetch;

/**
 * A pipeline of `depth` (0..PREFETCH_MAX_DEPTH) batches ahead, each of up
 * to `shard` samples; stage and done (batch.h, both given stage_ctx) may
 * be NULL. Returns 0, or -1 (out of memory or a bad depth; *p then needs
 * no prefetch_free).
 */
int prefetch_init(prefetch *p, int depth, size_t shard, batch_stage_fn stage,
                  batch_done_fn done, void *stage_ctx);
void prefetch_free(prefetch *p);

/** Starts an epoch's job (see above). Returns 0, or -1 when the thread
 *  cannot be created. shard <= the shard given to prefetch_init. */
int prefetch_begin(prefetch *p, const data_split *split, const uint32_t *perm,
                   size_t first, size_t stride, size_t shard, long steps,
                   rng *aug);

/**
 * The next batch (k-th call since prefetch_begin is batch k, k < steps),
 * waiting for it if it is not ready yet. It stays valid and unchanged
 * until prefetch_release. Returns NULL if the stage hook failed.
 */
const batch *prefetch_next(prefetch *p);

/**
 * The augmentation rng as the next batch (the one the next prefetch_next
 * returns) begins its draws: what *aug holds at that point with depth 0,
 * whatever the producer has drawn ahead since (an elastic commit's copy,
 * elastic.h). Waits until that batch is prepared, without taking it.
 * Returns 0, or -1 without augmentation or when the epoch has no batch
 * left.
 */
int prefetch_aug_state(prefetch *p, rng *out);

/** The step is done with the batch prefetch_next gave last: calls the
 *  done hook on it, then lets the producer prepare its buffer again. */
void prefetch_release(prefetch *p);

/**
 * Test hook (a step made slow by a condition, not an amount of work):
 * blocks until the producer has prepared every batch it may (up to
 * released + n_slots, or the epoch's end), at most timeout_s seconds.
 * Returns 0, or -1 past the timeout (*produced, if not NULL, then says
 * how many it had). Depth 0 returns 0 at once. The step's thread only.
 */
int prefetch_wait_full(prefetch *p, double timeout_s, long *produced);

/** Ends the epoch: stops the thread early if batches remain, joins it. */
void prefetch_end(prefetch *p);

#endif
