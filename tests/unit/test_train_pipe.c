/*
 * test_train_pipe.c - the trainer's input pipeline: batch conversion and
 * augmentation against a direct computation of the crop and flip, and the
 * prefetch ring: the same batches in the same order (and the same rng
 * state afterwards) for every depth, batches ready ahead of a slow
 * consumer, an early stop, and a failing stage hook.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch.h"
#include "prefetch.h"

#define N_IMAGES 200
#define SHARD 8

static uint8_t images[N_IMAGES * DATA_PIXELS], labels[N_IMAGES];

static data_split split(void) {
  data_split s;
  memset(&s, 0, sizeof s);
  s.n = N_IMAGES;
  s.images = images;
  s.labels = labels;
  return s;
}

static int setup(void **state) {
  (void)state;
  uint32_t lcg = 7;
  for (size_t i = 0; i < sizeof images; i++) {
    lcg = lcg * 1103515245u + 12345u;
    images[i] = (uint8_t)(lcg >> 24);
  }
  for (int i = 0; i < N_IMAGES; i++)
    labels[i] = (uint8_t)(i % DATA_CLASSES);
  return 0;
}

static float expect_pixel(uint8_t p) {
  return ((float)p * (1.0f / 255.0f) - DATA_MEAN) * (1.0f / DATA_STD);
}

static void test_convert(void **state) {
  (void)state;
  data_split s = split();
  batch b;
  assert_int_equal(batch_init(&b, 4), 0);
  uint32_t idx[3] = {5, 0, 199};
  batch_fill(&b, &s, idx, 0, 3, NULL);
  assert_int_equal(b.n, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(b.y[i], labels[idx[i]]);
    for (int p = 0; p < DATA_PIXELS; p++)
      assert_true(b.x[i * DATA_PIXELS + p] ==
                  expect_pixel(images[idx[i] * DATA_PIXELS + p]));
  }
  /* Consecutive records when idx is NULL. */
  batch_fill(&b, &s, NULL, 10, 2, NULL);
  assert_true(b.x[DATA_PIXELS] == expect_pixel(images[11 * DATA_PIXELS]));
  assert_int_equal(b.y[1], labels[11]);
  batch_free(&b);
}

/* Augmentation: replays the rng's draws to find each sample's shift and
 * flip, then checks every pixel against the padded image. */
static void test_augment(void **state) {
  (void)state;
  data_split s = split();
  batch b;
  assert_int_equal(batch_init(&b, 50), 0);
  uint32_t idx[50];
  for (int i = 0; i < 50; i++)
    idx[i] = (uint32_t)(i * 3);
  rng aug, replay;
  rng_seed(&aug, 99);
  replay = aug;
  batch_fill(&b, &s, idx, 0, 50, &aug);
  int flips = 0, shifted = 0;
  for (int i = 0; i < 50; i++) {
    int span = 2 * BATCH_CROP_PAD + 1;
    int dy = (int)rng_below(&replay, (uint64_t)span) - BATCH_CROP_PAD;
    int dx = (int)rng_below(&replay, (uint64_t)span) - BATCH_CROP_PAD;
    int flip = (int)rng_below(&replay, 2);
    flips += flip;
    shifted += dy != 0 || dx != 0;
    const uint8_t *im = images + idx[i] * DATA_PIXELS;
    for (int r = 0; r < DATA_ROWS; r++)
      for (int c = 0; c < DATA_COLS; c++) {
        /* the padded image's pixel at (r + PAD + dy, col + PAD + dx) */
        int col = flip ? DATA_COLS - 1 - c : c;
        int pr = r + BATCH_CROP_PAD + dy, pc = col + BATCH_CROP_PAD + dx;
        int inside = pr >= BATCH_CROP_PAD && pr < DATA_ROWS + BATCH_CROP_PAD &&
                     pc >= BATCH_CROP_PAD && pc < DATA_COLS + BATCH_CROP_PAD;
        uint8_t v =
            inside ? im[(pr - BATCH_CROP_PAD) * DATA_COLS + pc - BATCH_CROP_PAD]
                   : 0;
        if (b.x[i * DATA_PIXELS + r * DATA_COLS + c] != expect_pixel(v))
          fail_msg("sample %d pixel (%d,%d): dy %d dx %d flip %d", i, r, c, dy,
                   dx, flip);
      }
    assert_int_equal(b.y[i], labels[idx[i]]);
  }
  /* The draws cover both kinds (50 samples: chance of none < 1e-14). */
  assert_true(flips > 0 && flips < 50);
  assert_true(shifted > 0);
  assert_int_equal(aug.state, replay.state);
  batch_free(&b);
}

#define STEPS 20
#define STRIDE 9 /* a "global batch" of 9 records, this rank's 8 at 1.. */

/* Runs one epoch at `depth`, copying every batch; returns the copies
 * (STEPS x SHARD x DATA_PIXELS floats) and the rng state after it. */
static float *epoch_at(int depth, int augment, uint64_t *rng_after, long *ready,
                       int slow) {
  data_split s = split();
  static uint32_t perm[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++)
    perm[i] = (uint32_t)((i * 37 + 11) % N_IMAGES);
  rng aug;
  rng_seed(&aug, 1234);
  prefetch p;
  assert_int_equal(prefetch_init(&p, depth, SHARD, NULL, NULL, NULL), 0);
  assert_int_equal(
      prefetch_begin(&p, &s, perm, 1, STRIDE, SHARD, STEPS, augment ? &aug : 0),
      0);
  float *all = malloc((size_t)STEPS * SHARD * DATA_PIXELS * sizeof *all);
  for (int k = 0; k < STEPS; k++) {
    const batch *b = prefetch_next(&p);
    assert_non_null(b);
    assert_int_equal(b->n, SHARD);
    for (int i = 0; i < SHARD; i++)
      assert_int_equal(b->y[i], labels[perm[1 + k * STRIDE + i]]);
    memcpy(all + (size_t)k * SHARD * DATA_PIXELS, b->x,
           SHARD * DATA_PIXELS * sizeof *all);
    prefetch_release(&p);
    long produced = 0; /* a slow step: until the producer has filled up */
    if (slow && prefetch_wait_full(&p, 30, &produced) != 0)
      fail_msg("the producer prepared %ld batches in 30 s, with %ld free",
               produced, p.released + p.n_slots);
  }
  prefetch_end(&p);
  *rng_after = aug.state;
  *ready = p.ready;
  prefetch_free(&p);
  return all;
}

static void test_same_batches_every_depth(void **state) {
  (void)state;
  for (int augment = 0; augment <= 1; augment++) {
    uint64_t r0, r;
    long ready;
    float *want = epoch_at(0, augment, &r0, &ready, 0);
    assert_int_equal(ready, 0); /* depth 0: always prepared on demand */
    const int depths[] = {1, 2, 4, 64};
    for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
      float *got = epoch_at(depths[d], augment, &r, &ready, 0);
      assert_memory_equal(got, want,
                          (size_t)STEPS * SHARD * DATA_PIXELS * sizeof *got);
      assert_int_equal(r, r0);
      free(got);
    }
    free(want);
  }
}

/* prefetch_aug_state before each batch, at `depth`, the producer filled
 * up after every step (prefetch_wait_full) so that it has drawn ahead:
 * states[k] gets the state batch k draws from. */
static void aug_states_at(int depth, uint64_t *states) {
  data_split s = split();
  static uint32_t perm[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++)
    perm[i] = (uint32_t)((i * 37 + 11) % N_IMAGES);
  rng aug, got;
  rng_seed(&aug, 1234);
  prefetch p;
  assert_int_equal(prefetch_init(&p, depth, SHARD, NULL, NULL, NULL), 0);
  assert_int_equal(prefetch_begin(&p, &s, perm, 1, STRIDE, SHARD, STEPS, &aug),
                   0);
  for (int k = 0; k < STEPS; k++) {
    assert_int_equal(prefetch_wait_full(&p, 30, NULL), 0);
    assert_int_equal(prefetch_aug_state(&p, &got), 0);
    states[k] = got.state;
    assert_non_null(prefetch_next(&p));
    prefetch_release(&p);
  }
  assert_int_equal(prefetch_aug_state(&p, &got), -1); /* no batch left */
  prefetch_end(&p);
  prefetch_free(&p);
}

/* The augmentation rng a batch draws from, asked before it is taken, is
 * the same at every depth (an elastic commit's copy, elastic.h): what the
 * rng holds at that point with depth 0, not what the producer left it
 * after the batches ahead. Without augmentation there is none. */
static void test_aug_state_every_depth(void **state) {
  (void)state;
  uint64_t want[STEPS], got[STEPS];
  aug_states_at(0, want);
  assert_true(want[1] != want[0]);
  const int depths[] = {1, 2, 4};
  for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
    aug_states_at(depths[d], got);
    for (int k = 0; k < STEPS; k++)
      if (got[k] != want[k])
        fail_msg("depth %d, batch %d: state %llx, depth 0 %llx", depths[d], k,
                 (unsigned long long)got[k], (unsigned long long)want[k]);
  }
  data_split s = split();
  static uint32_t perm[N_IMAGES];
  prefetch p;
  rng r;
  assert_int_equal(prefetch_init(&p, 2, SHARD, NULL, NULL, NULL), 0);
  assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, 3, NULL), 0);
  assert_int_equal(prefetch_aug_state(&p, &r), -1);
  prefetch_end(&p);
  prefetch_free(&p);
}

/* With a slow consumer the producer keeps ahead: every batch after the
 * first is ready when asked for (counted, not timed). Each step lasts
 * until the producer has filled the free slots (prefetch_wait_full: a
 * condition, so a loaded machine or a sanitizer changes nothing); the
 * first batch may still be in the making. */
static void test_ready_ahead_of_slow_step(void **state) {
  (void)state;
  uint64_t r;
  long ready;
  free(epoch_at(4, 1, &r, &ready, 1));
  if (ready < STEPS - 1)
    fail_msg("only %ld of %d batches were ready", ready, STEPS);
}

/* Ending an epoch early (a failed step) stops and joins the thread. */
static void test_early_end(void **state) {
  (void)state;
  data_split s = split();
  static uint32_t perm[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++)
    perm[i] = (uint32_t)i;
  prefetch p;
  assert_int_equal(prefetch_init(&p, 2, SHARD, NULL, NULL, NULL), 0);
  assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, 20, NULL), 0);
  assert_non_null(prefetch_next(&p));
  prefetch_end(&p);
  assert_int_equal(p.running, 0);
  assert_true(p.produced <= 1 + 2 + 1);
  /* A new epoch after it starts cleanly. */
  assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, 3, NULL), 0);
  for (int k = 0; k < 3; k++) {
    const batch *b = prefetch_next(&p);
    assert_non_null(b);
    assert_int_equal(b->y[0], labels[k * SHARD]);
    prefetch_release(&p);
  }
  prefetch_free(&p);
  assert_int_equal(
      prefetch_init(&p, PREFETCH_MAX_DEPTH + 1, 1, NULL, NULL, NULL), -1);
  assert_int_equal(prefetch_init(&p, -1, 1, NULL, NULL, NULL), -1);
}

/* The stage hook sees every batch on the preparing thread; a failure
 * reaches the consumer as NULL. */
static int staged;
static int stage(void *ctx, batch *b) {
  (void)b;
  staged++;
  return staged >= *(int *)ctx ? 5 : 0;
}

static void test_stage_hook(void **state) {
  (void)state;
  data_split s = split();
  static uint32_t perm[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++)
    perm[i] = (uint32_t)i;
  for (int depth = 0; depth <= 3; depth += 3) {
    int fail_at = 1000;
    staged = 0;
    prefetch p;
    assert_int_equal(prefetch_init(&p, depth, SHARD, stage, NULL, &fail_at), 0);
    assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, 5, NULL), 0);
    for (int k = 0; k < 5; k++) {
      assert_non_null(prefetch_next(&p));
      prefetch_release(&p);
    }
    prefetch_end(&p);
    assert_int_equal(staged, 5);
    fail_at = 1;
    staged = 0;
    assert_int_equal(prefetch_begin(&p, &s, perm, 0, SHARD, SHARD, 5, NULL), 0);
    assert_null(prefetch_next(&p));
    prefetch_free(&p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_convert),
      cmocka_unit_test(test_augment),
      cmocka_unit_test(test_same_batches_every_depth),
      cmocka_unit_test(test_aug_state_every_depth),
      cmocka_unit_test(test_ready_ahead_of_slow_step),
      cmocka_unit_test(test_early_end),
      cmocka_unit_test(test_stage_hook),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
