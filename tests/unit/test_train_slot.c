/*
 * test_train_slot.c - the trainer's device input slots are not refilled
 * while the GPU may still read them (examples/train/stage.h).
 *
 * The pipeline (prefetch.h) with the trainer's device hooks (stage.c:
 * stage_batch, stage_batch_done) over a stand-in row whose compute stream
 * lags behind the host: a thread that runs the step's reads of its slot
 * (standing for the forward pass's kernels) as late as it may. Each read
 * of step k is held until the pipeline has either refilled k's slot with
 * batch k + slots, or is blocked refilling it, or has no such batch: the
 * most a GPU can lag. The stand-in's stage_put keeps the row's contract
 * (compute.h): it waits for the slot's last stage_consumed mark to be
 * passed by the stream, then writes the slot at once (its "copy stream"
 * is the memcpy). Every step must read its own batch's images, at depths
 * 0, 1 and 3; without the consumed mark it reads those of the batch
 * `slots` later, with the step's own labels.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch.h"
#include "compute.h"
#include "prefetch.h"
#include "stage.h"

#define N_IMAGES 64
#define SHARD 4
#define STEPS 12
#define MAX_SLOTS 8
#define QUEUE (STEPS * 2)

/* A check on the pipeline's or the stream's thread (cmocka's asserts
 * belong to the test's). */
#define CHECK(x)                                                               \
  do {                                                                         \
    if (!(x)) {                                                                \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #x);                  \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static uint8_t images[N_IMAGES * DATA_PIXELS], labels[N_IMAGES];

/* The stand-in row's state, under mu. */
typedef struct lag {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t stream;
  int stop;
  int slots;
  size_t bytes;
  float *dev[MAX_SLOTS];
  /* the compute stream: reads queued (step, slot, samples), run in order */
  int q_step[QUEUE], q_slot[QUEUE], q_n[QUEUE];
  long queued, done;
  long consumed_at[MAX_SLOTS]; /* done >= this: the slot's reads passed */
  /* the pipeline's side: batch j's put is 1 blocked on the fence, 2
   * written */
  long puts;
  int put_state[STEPS];
  float seen[STEPS][SHARD * DATA_PIXELS]; /* what each step's read saw */
} lag;

static void *stream_main(void *arg) {
  lag *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && l->done == l->queued)
      pthread_cond_wait(&l->cv, &l->mu);
    if (l->done == l->queued)
      break;
    int i = (int)(l->done % QUEUE), k = l->q_step[i];
    /* as late as a GPU may: until the slot's next batch is written or
     * waits for this read */
    long next = k + l->slots;
    while (next < STEPS && !l->put_state[next])
      pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    memcpy(l->seen[k], l->dev[l->q_slot[i]],
           (size_t)l->q_n[i] * DATA_PIXELS * sizeof(float));
    pthread_mutex_lock(&l->mu);
    l->done++;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static int lag_stage_init(compute *c, int slots, size_t bytes) {
  lag *l = c->impl;
  assert_true(slots <= MAX_SLOTS);
  l->slots = slots;
  l->bytes = bytes;
  for (int i = 0; i < slots; i++)
    assert_non_null(l->dev[i] = calloc(1, bytes));
  return 0;
}

static int lag_stage_put(compute *c, int slot, const void *host, size_t bytes) {
  lag *l = c->impl;
  CHECK(slot >= 0 && slot < l->slots && bytes <= l->bytes);
  pthread_mutex_lock(&l->mu);
  long j = l->puts++;
  CHECK(j < STEPS);
  if (l->done < l->consumed_at[slot]) { /* the fence: the host waits */
    l->put_state[j] = 1;
    pthread_cond_broadcast(&l->cv);
    while (l->done < l->consumed_at[slot])
      pthread_cond_wait(&l->cv, &l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  memcpy(l->dev[slot], host, bytes);
  pthread_mutex_lock(&l->mu);
  l->put_state[j] = 2;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return 0;
}

static const float *lag_stage_take(compute *c, int slot) {
  return ((lag *)c->impl)->dev[slot];
}

static void lag_stage_consumed(compute *c, int slot) {
  lag *l = c->impl;
  pthread_mutex_lock(&l->mu);
  l->consumed_at[slot] = l->queued; /* after every read queued so far */
  pthread_mutex_unlock(&l->mu);
}

/* The step's forward pass: a read of slot's n samples, queued. */
static void lag_read(lag *l, int step, int slot, int n) {
  pthread_mutex_lock(&l->mu);
  int i = (int)(l->queued % QUEUE);
  assert_true(l->queued - l->done < QUEUE);
  l->q_step[i] = step;
  l->q_slot[i] = slot;
  l->q_n[i] = n;
  l->queued++;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static const compute_ops lag_ops = {
    .name = "lag",
    .host = 0,
    .stage_init = lag_stage_init,
    .stage_put = lag_stage_put,
    .stage_take = lag_stage_take,
    .stage_consumed = lag_stage_consumed,
};

static int setup(void **state) {
  (void)state;
  uint32_t lcg = 3;
  for (size_t i = 0; i < sizeof images; i++) {
    lcg = lcg * 1103515245u + 12345u;
    images[i] = (uint8_t)(lcg >> 24);
  }
  for (int i = 0; i < N_IMAGES; i++)
    labels[i] = (uint8_t)(i % DATA_CLASSES);
  return 0;
}

/* One epoch of STEPS batches at `depth` through the device hooks; each
 * step's read must see its own batch. */
static void epoch_at(int depth) {
  data_split s;
  memset(&s, 0, sizeof s);
  s.n = N_IMAGES;
  s.images = images;
  s.labels = labels;
  static uint32_t perm[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++)
    perm[i] = (uint32_t)((i * 29 + 5) % N_IMAGES);

  lag *l = calloc(1, sizeof *l);
  assert_non_null(l);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  assert_int_equal(pthread_create(&l->stream, NULL, stream_main, l), 0);
  compute row = {.ops = &lag_ops, .impl = l};
  lowp_kind fp32 = LOWP_FP32;
  stage_link link = {.cp = &row, .lowp = &fp32};
  prefetch p;
  assert_int_equal(
      prefetch_init(&p, depth, SHARD, stage_batch, stage_batch_done, &link), 0);
  link.slots = p.slots;
  assert_int_equal(
      row.ops->stage_init(&row, p.n_slots, SHARD * DATA_PIXELS * sizeof(float)),
      0);
  assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, STEPS, NULL),
                   0);
  uint8_t step_labels[STEPS][SHARD];
  for (int k = 0; k < STEPS; k++) {
    const batch *b = prefetch_next(&p);
    assert_non_null(b);
    int slot = (int)(b - p.slots);
    assert_ptr_equal(row.ops->stage_take(&row, slot), l->dev[slot]);
    lag_read(l, k, slot, (int)b->n);
    memcpy(step_labels[k], b->y, SHARD); /* the step's labels (to_dev) */
    prefetch_release(&p);
  }
  prefetch_end(&p);
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->stream, NULL);
  assert_int_equal(l->done, STEPS);

  /* every batch as the pipeline prepares it, to name what a step saw */
  static float want[STEPS][SHARD * DATA_PIXELS];
  batch ref;
  assert_int_equal(batch_init(&ref, SHARD), 0);
  for (int k = 0; k < STEPS; k++) {
    batch_fill(&ref, &s, perm + (size_t)k * SHARD, 0, SHARD, NULL);
    memcpy(want[k], ref.x, sizeof want[k]);
    assert_memory_equal(step_labels[k], ref.y, SHARD);
  }
  batch_free(&ref);
  for (int k = 0; k < STEPS; k++) {
    if (!memcmp(l->seen[k], want[k], sizeof want[k]))
      continue;
    int j = -1;
    for (int i = 0; i < STEPS && j < 0; i++)
      if (!memcmp(l->seen[k], want[i], sizeof want[i]))
        j = i;
    fail_msg("depth %d: step %d read the images of batch %d with the labels "
             "of batch %d (its slot was refilled while the stream could still "
             "read it)",
             depth, k, j, k);
  }
  prefetch_free(&p);
  for (int i = 0; i < l->slots; i++)
    free(l->dev[i]);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

static void test_depth0(void **state) {
  (void)state;
  epoch_at(0);
}

static void test_depth1(void **state) {
  (void)state;
  epoch_at(1);
}

static void test_depth3(void **state) {
  (void)state;
  epoch_at(3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_depth0),
      cmocka_unit_test(test_depth1),
      cmocka_unit_test(test_depth3),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
