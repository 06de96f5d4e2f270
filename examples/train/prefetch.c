/*
 * prefetch.c - the input pipeline's ring and thread (see prefetch.h).
 */
#include "prefetch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "progress.h"

int prefetch_init(prefetch *p, int depth, size_t shard, batch_stage_fn stage,
                  batch_done_fn done, void *stage_ctx) {
  memset(p, 0, sizeof *p);
  if (depth < 0 || depth > PREFETCH_MAX_DEPTH)
    return -1;
  p->depth = depth;
  p->n_slots = depth + 1;
  p->stage = stage;
  p->done = done;
  p->stage_ctx = stage_ctx;
  p->slots = calloc((size_t)p->n_slots, sizeof *p->slots);
  p->aug_at = calloc((size_t)p->n_slots, sizeof *p->aug_at);
  if (!p->slots || !p->aug_at) {
    free(p->slots);
    free(p->aug_at);
    memset(p, 0, sizeof *p);
    return -1;
  }
  for (int i = 0; i < p->n_slots; i++)
    if (batch_init(&p->slots[i], shard) != 0) {
      for (int j = 0; j < i; j++)
        batch_free(&p->slots[j]);
      free(p->slots);
      free(p->aug_at);
      memset(p, 0, sizeof *p);
      return -1;
    }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  return 0;
}

void prefetch_free(prefetch *p) {
  if (!p->slots)
    return;
  prefetch_end(p);
  for (int i = 0; i < p->n_slots; i++)
    batch_free(&p->slots[i]);
  free(p->slots);
  free(p->aug_at);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  memset(p, 0, sizeof *p);
}

/* Prepares batch k into its slot; returns the stage's result. */
static int make(prefetch *p, long k) {
  batch *b = &p->slots[k % p->n_slots];
  size_t at = p->first + (size_t)k * p->stride;
  if (p->aug) /* the slot is the producer's until produced++ */
    p->aug_at[k % p->n_slots] = *p->aug;
  batch_fill(b, p->split, p->perm + at, 0, p->shard, p->aug);
  return p->stage ? p->stage(p->stage_ctx, b) : 0;
}

static void *producer(void *arg) {
  prefetch *p = arg;
  pthread_mutex_lock(&p->mu);
  for (long k = 0; k < p->steps; k++) {
    while (!p->stop && p->produced - p->released >= p->n_slots)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop)
      break;
    pthread_mutex_unlock(&p->mu); /* the slot is ours until produced++ */
    int rc = make(p, k);
    pthread_mutex_lock(&p->mu);
    if (rc && !p->stage_rc)
      p->stage_rc = rc;
    p->produced++;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int prefetch_begin(prefetch *p, const data_split *split, const uint32_t *perm,
                   size_t first, size_t stride, size_t shard, long steps,
                   rng *aug) {
  prefetch_end(p);
  p->split = split;
  p->perm = perm;
  p->first = first;
  p->stride = stride;
  p->shard = shard;
  p->steps = steps;
  p->aug = aug;
  p->stop = 0;
  p->stage_rc = 0;
  p->produced = p->taken = p->released = 0;
  p->ready = 0;
  p->wait_s = 0.0;
  if (p->depth == 0 || steps == 0)
    return 0;
  if (pthread_create(&p->thread, NULL, producer, p) != 0)
    return -1;
  p->running = 1;
  return 0;
}

const batch *prefetch_next(prefetch *p) {
  long k = p->taken++;
  const batch *b = &p->slots[k % p->n_slots];
  if (!p->running) { /* depth 0: prepare it now, all of it data wait */
    double t0 = progress_now();
    int rc = make(p, k);
    p->wait_s += progress_now() - t0;
    return rc ? NULL : b;
  }
  pthread_mutex_lock(&p->mu);
  if (p->produced > k)
    p->ready++;
  else {
    double t0 = progress_now();
    while (p->produced <= k)
      pthread_cond_wait(&p->cv, &p->mu);
    p->wait_s += progress_now() - t0;
  }
  int rc = p->stage_rc;
  pthread_mutex_unlock(&p->mu);
  return rc ? NULL : b;
}

int prefetch_aug_state(prefetch *p, rng *out) {
  if (!p->aug || p->taken >= p->steps)
    return -1;
  if (!p->running) { /* depth 0: nothing drawn ahead */
    *out = *p->aug;
    return 0;
  }
  pthread_mutex_lock(&p->mu);
  while (p->produced <= p->taken) /* its slot is kept until it is taken */
    pthread_cond_wait(&p->cv, &p->mu);
  *out = p->aug_at[p->taken % p->n_slots];
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int prefetch_wait_full(prefetch *p, double timeout_s, long *produced) {
  if (!p->running)
    return 0;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)timeout_s;
  until.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&p->mu);
  long want = p->released + p->n_slots;
  if (want > p->steps)
    want = p->steps;
  int rc = 0;
  while (p->produced < want && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&p->cv, &p->mu, &until);
  long got = p->produced;
  pthread_mutex_unlock(&p->mu);
  if (produced)
    *produced = got;
  return got < want ? -1 : 0;
}

void prefetch_release(prefetch *p) {
  /* before the producer may refill it (it waits for released below) */
  if (p->done)
    p->done(p->stage_ctx, &p->slots[p->released % p->n_slots]);
  if (!p->running) {
    p->released++;
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->released++;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void prefetch_end(prefetch *p) {
  if (!p->running)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  p->running = 0;
}
