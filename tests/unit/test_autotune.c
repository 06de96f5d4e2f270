/* Unit tests of the autotuner's search (coordinator/autotune.h), fed step
 * times from a known function of the setting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/autotune.h"

#define MIB (1ull << 20)

/* A job whose step costs 10 ms per fused group of a 6 MiB step (the
 * groups a threshold makes: ceil(6 MiB / threshold), 48 with no fusion),
 * plus 1 ms per ms of cycle time; best: 8 MiB, 0 ms. */
static double model_cost(const hk_tune_setting *s) {
  double groups =
      s->fusion_threshold == 0
          ? 48
          : (double)((6 * MIB + s->fusion_threshold - 1) / s->fusion_threshold);
  return 0.010 * groups + 0.001 * s->cycle_time_ms;
}

/* A deterministic value in [-1, 1] (xorshift). */
static double jitter(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return (double)(*x % 20001) / 10000.0 - 1.0;
}

typedef struct run {
  hk_tune_setting final;
  int changes, ntrials;
  long steps;
} run;

/* Runs the search to its end (at most 100000 steps) on model_cost times
 * (1 + amp * jitter). */
static run drive(const hk_tune_params *p, hk_tune_setting start,
                 hk_tune_setting model, double amp) {
  hk_autotune *t;
  assert_int_equal(hk_autotune_create(p, &start, &model, &t), HK_OK);
  hk_tune_setting cur = start, next;
  uint64_t x = 88172645463325252ull;
  run r = {.changes = 0};
  for (long i = 0; i < 100000 && !hk_autotune_done(t); i++)
    if (hk_autotune_step(t, model_cost(&cur) * (1 + amp * jitter(&x)), &next)) {
      cur = next;
      r.changes++;
    }
  assert_true(hk_autotune_done(t));
  r.final = cur;
  r.ntrials = hk_autotune_ntrials(t);
  r.steps = hk_autotune_steps(t);
  const hk_tune_trial *b = hk_autotune_best(t);
  assert_non_null(b);
  assert_true(hk_tune_setting_equal(&b->s, &cur));
  hk_autotune_destroy(t);
  return r;
}

static const hk_tune_params params = {.warmup_steps = 2,
                                      .steps_per_sample = 3,
                                      .min_samples = 3,
                                      .max_samples = 8,
                                      .max_trials = 30,
                                      .spread = 0.02};

static void test_converges_to_known_best(void **s) {
  (void)s;
  run r = drive(&params, (hk_tune_setting){0, 2, -1},
                (hk_tune_setting){1 * MIB, 2, -1}, 0);
  assert_int_equal(r.final.fusion_threshold, 8 * MIB);
  assert_true(r.final.cycle_time_ms == 0);
  /* baseline, model, 2 4 8 16 MiB up, then cycle 5 ms (up, not kept), 1
   * 0.5 0 down; a second pass from (8 MiB, 0): 16 MiB and 4 MiB, not
   * kept: 12 trials; exact times: 3 samples (9 steps) + 2 warm-up each */
  assert_int_equal(r.ntrials, 12);
  assert_int_equal(r.steps, 12 * 11);
}

/* From the default (128 MiB, as fast as 8 MiB here) the model's
 * suggestion is measured second and, slower, not kept; 64 MiB is no
 * faster either: the job stays at its start. */
static void test_model_start_then_descends(void **s) {
  (void)s;
  hk_autotune *t;
  hk_tune_setting start = {128 * MIB, 0, -1}, model = {4 * MIB, 0, -1}, next;
  hk_tune_setting cur = start;
  assert_int_equal(hk_autotune_create(&params, &start, &model, &t), HK_OK);
  for (int i = 0; i < 10000 && !hk_autotune_done(t); i++)
    if (hk_autotune_step(t, model_cost(&cur), &next))
      cur = next;
  assert_true(hk_autotune_done(t));
  assert_int_equal(hk_autotune_trial(t, 1)->s.fusion_threshold, 4 * MIB);
  assert_int_equal(hk_autotune_trial(t, 1)->kept, 0);
  assert_int_equal(hk_autotune_trial(t, 2)->s.fusion_threshold, 64 * MIB);
  assert_int_equal(cur.fusion_threshold, 128 * MIB);
  hk_autotune_destroy(t);
}

/* A flat cost: nothing beats the baseline by more than the bound, so the
 * setting never changes for good and ends where it started. */
static void test_flat_cost_keeps_start(void **s) {
  (void)s;
  hk_autotune *t;
  hk_tune_setting start = {16 * MIB, 0, -1}, next, cur = start;
  assert_int_equal(hk_autotune_create(&params, &start, &start, &t), HK_OK);
  for (int i = 0; i < 10000 && !hk_autotune_done(t); i++)
    if (hk_autotune_step(t, 0.100 * (1 + 0.005 * (i % 2)), &next))
      cur = next;
  assert_true(hk_autotune_done(t));
  assert_true(hk_tune_setting_equal(&cur, &start));
  for (int i = 1; i < hk_autotune_ntrials(t); i++)
    assert_int_equal(hk_autotune_trial(t, i)->kept, 0);
  hk_autotune_destroy(t);
}

/* 10 % jitter: trials spend their sample budget, the spread is measured,
 * and the result is still the known best (the differences near it are
 * 50 % and more), with a bounded number of changes. */
static void test_noise_does_not_flip_flop(void **s) {
  (void)s;
  run r = drive(&params, (hk_tune_setting){0, 0, -1},
                (hk_tune_setting){0, 0, -1}, 0.10);
  assert_int_equal(r.final.fusion_threshold, 8 * MIB);
  assert_true(r.final.cycle_time_ms == 0);
  assert_true(r.changes <= r.ntrials);
  assert_true(r.ntrials <= 14);
}

/* The trial budget ends the search, on the best measured so far. */
static void test_trial_budget(void **s) {
  (void)s;
  hk_tune_params p = params;
  p.max_trials = 3;
  run r = drive(&p, (hk_tune_setting){0, 0, -1},
                (hk_tune_setting){1 * MIB, 0, -1}, 0);
  assert_int_equal(r.ntrials, 3);
  assert_int_equal(r.final.fusion_threshold, 2 * MIB);
}

/* Where the job allows both, hierarchical (3 ms a step faster here) is
 * found from auto; where it does not, the start's value stays. */
static double hier_cost(const hk_tune_setting *s) {
  return model_cost(s) - (s->hierarchical == 1 ? 0.003 : 0);
}

static hk_tune_setting search_hier(int allowed) {
  hk_tune_params p = params;
  p.hierarchical = allowed;
  hk_autotune *t;
  hk_tune_setting start = {8 * MIB, 0, -1}, cur = start, next;
  assert_int_equal(hk_autotune_create(&p, &start, &start, &t), HK_OK);
  for (int i = 0; i < 10000 && !hk_autotune_done(t); i++)
    if (hk_autotune_step(t, hier_cost(&cur), &next))
      cur = next;
  assert_true(hk_autotune_done(t));
  for (int i = 0; i < hk_autotune_ntrials(t); i++)
    assert_true(allowed || hk_autotune_trial(t, i)->s.hierarchical == -1);
  hk_autotune_destroy(t);
  return cur;
}

static void test_hierarchical_knob(void **s) {
  (void)s;
  hk_tune_setting on = search_hier(1), off = search_hier(0);
  assert_int_equal(on.hierarchical, 1);
  assert_int_equal(on.fusion_threshold, 8 * MIB);
  assert_true(on.cycle_time_ms == 0);
  assert_int_equal(off.hierarchical, -1);
  assert_int_equal(off.fusion_threshold, 8 * MIB);
}

static void test_bad_params(void **s) {
  (void)s;
  hk_autotune *t;
  hk_tune_setting z = {0, 0, -1};
  hk_tune_params p = params;
  p.steps_per_sample = 0;
  assert_int_equal(hk_autotune_create(&p, &z, &z, &t), HK_ERR_INVALID_ARG);
  assert_null(t);
  p = params;
  p.spread = 0;
  assert_int_equal(hk_autotune_create(&p, &z, &z, &t), HK_ERR_INVALID_ARG);
  p = params;
  p.min_samples = 5;
  p.max_samples = 4;
  assert_int_equal(hk_autotune_create(&p, &z, &z, &t), HK_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_converges_to_known_best),
      cmocka_unit_test(test_model_start_then_descends),
      cmocka_unit_test(test_flat_cost_keeps_start),
      cmocka_unit_test(test_noise_does_not_flip_flop),
      cmocka_unit_test(test_trial_budget),
      cmocka_unit_test(test_hierarchical_knob),
      cmocka_unit_test(test_bad_params),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
