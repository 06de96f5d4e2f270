/*
 * test_train_optim.c - the trainer's optimisers against the textbook
 * formulas computed in double (optim.h cites them) and LAMB against
 * hand-computed values, the warm-up + cosine schedule at its landmarks,
 * reduce-on-plateau on a hand-traced loss sequence, and the command-line
 * parser.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"
#include "optim.h"

#define N 4

static void test_sgd_momentum(void **state) {
  (void)state;
  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    optim_config c = optim_defaults(OPTIM_SGD);
    assert_true(c.weight_decay == 0.0f && c.momentum == 0.9f);
    c.nesterov = nesterov;
    c.weight_decay = 0.1f;
    optim o;
    assert_int_equal(optim_init(&o, &c, N), 0);
    float p[N] = {1, -2, 0.5f, 3};
    double rp[N] = {1, -2, 0.5, 3}, rv[N] = {0};
    for (int step = 0; step < 5; step++) {
      float g[N];
      for (int i = 0; i < N; i++)
        g[i] = (float)(0.3 * (i + 1) * (step % 2 ? -1 : 1));
      optim_begin_step(&o);
      /* weights: decay on; the last element as a "bias": decay off */
      optim_update(&o, p, g, 0, N - 1, 0.1f, 1);
      optim_update(&o, p + N - 1, g + N - 1, N - 1, 1, 0.1f, 0);
      for (int i = 0; i < N; i++) {
        double gi = g[i] + (i < N - 1 ? 0.1 * rp[i] : 0.0);
        rv[i] = 0.9 * rv[i] + gi;
        rp[i] -= 0.1 * (nesterov ? gi + 0.9 * rv[i] : rv[i]);
      }
    }
    for (int i = 0; i < N; i++)
      assert_true(fabs(p[i] - rp[i]) < 1e-5);
    optim_free(&o);
  }
  /* One hand-computed case: p 1, g 0.5, lr 0.1, two steps: 0.95, 0.855. */
  optim_config c = optim_defaults(OPTIM_SGD);
  optim o;
  assert_int_equal(optim_init(&o, &c, 1), 0);
  float p = 1.0f, g = 0.5f;
  optim_begin_step(&o);
  optim_update(&o, &p, &g, 0, 1, 0.1f, 1);
  assert_true(fabsf(p - 0.95f) < 1e-6f);
  optim_begin_step(&o);
  optim_update(&o, &p, &g, 0, 1, 0.1f, 1);
  assert_true(fabsf(p - 0.855f) < 1e-6f);
  optim_free(&o);
}

static void test_adamw(void **state) {
  (void)state;
  optim_config c = optim_defaults(OPTIM_ADAMW);
  assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
  assert_true(c.weight_decay == 0.01f);
  c.weight_decay = 0.1f;
  optim o;
  assert_int_equal(optim_init(&o, &c, N), 0);
  float p[N] = {2, -1, 0.25f, 4};
  double rp[N] = {2, -1, 0.25, 4}, rm[N] = {0}, rv[N] = {0};
  for (int t = 1; t <= 20; t++) {
    float g[N], lr = 0.01f * (float)t / 20.0f; /* a changing rate */
    for (int i = 0; i < N; i++)
      g[i] = (float)(sin(t * (i + 1)) * (i + 1));
    optim_begin_step(&o);
    optim_update(&o, p, g, 0, N - 1, lr, 1);
    optim_update(&o, p + N - 1, g + N - 1, N - 1, 1, lr, 0);
    /* Loshchilov & Hutter 2019, Algorithm 2 (lr-scaled decay). */
    for (int i = 0; i < N; i++) {
      if (i < N - 1)
        rp[i] -= (double)lr * 0.1 * rp[i];
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.999 * rv[i] + 0.001 * (double)g[i] * g[i];
      double mh = rm[i] / (1 - pow(0.9, t)), vh = rv[i] / (1 - pow(0.999, t));
      rp[i] -= (double)lr * mh / (sqrt(vh) + 1e-8);
    }
  }
  for (int i = 0; i < N; i++)
    if (fabs(p[i] - rp[i]) > 1e-5)
      fail_msg("p[%d] = %.8f, reference %.8f", i, p[i], rp[i]);
  optim_free(&o);

  /* First step moves by lr * sign(g) (m_hat / sqrt(v_hat) = g / |g|),
   * after the decoupled decay: 2 * (1 - 0.01 * 0.1) + 0.01 = 2.008. */
  assert_int_equal(optim_init(&o, &c, 1), 0);
  float q = 2.0f, g = -3.0f;
  optim_begin_step(&o);
  optim_update(&o, &q, &g, 0, 1, 0.01f, 1);
  assert_true(fabsf(q - 2.008f) < 1e-6f);
  optim_free(&o);
}

static void test_schedule(void **state) {
  (void)state;
  /* 100 steps, 10 of warm-up, peak 1. */
  assert_true(fabsf(lr_at(1.0f, 0, 100, 10) - 0.1f) < 1e-7f);
  assert_true(fabsf(lr_at(1.0f, 4, 100, 10) - 0.5f) < 1e-7f);
  assert_true(lr_at(1.0f, 9, 100, 10) == 1.0f);
  assert_true(lr_at(1.0f, 10, 100, 10) == 1.0f);
  assert_true(fabsf(lr_at(1.0f, 55, 100, 10) - 0.5f) < 1e-6f); /* midway */
  float last = lr_at(1.0f, 99, 100, 10);
  assert_true(last > 0.0f && last < 1e-3f);
  for (long s = 10; s < 99; s++) /* decreasing after the warm-up */
    assert_true(lr_at(2.0f, s + 1, 100, 10) <= lr_at(2.0f, s, 100, 10));
  assert_true(lr_at(0.5f, 0, 100, 0) == 0.5f);
  assert_true(fabsf(lr_at(1.0f, 1, 4, 4) - 0.5f) < 1e-7f); /* warm-up only */
}

/* LAMB, two steps on a 3-element tensor with decay, against values
 * computed by hand from Algorithm 2 (in double, Python):
 *   step 1: g (0.5, -1, 0.25): m_hat/sqrt(v_hat) = g/|g| (up to eps), so
 *     u ~ (1, -1, 1) + 0.01 p; trust ||p|| / ||u|| = sqrt(5.25) / ||u||
 *     = 1.3294256882; p = (0.8657282714,
 *     2.1302835845, -0.6322773242);
 *   step 2: g (-0.25, 0.5, 1): trust 2.5046001484, p = (0.7968533581,
 *     2.1916547704, -0.8521943675). */
static void test_lamb(void **state) {
  (void)state;
  optim_config c = optim_defaults(OPTIM_LAMB);
  assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-6f);
  assert_true(c.weight_decay == 0.01f);
  optim o;
  assert_int_equal(optim_init(&o, &c, 4), 0);
  float p[4] = {1.0f, 2.0f, -0.5f, 3.0f};
  float g1[4] = {0.5f, -1.0f, 0.25f, 0.0f}, g2[4] = {-0.25f, 0.5f, 1.0f, 0.0f};
  const double want1[3] = {0.8657282714, 2.1302835845, -0.6322773242};
  const double want2[3] = {0.7968533581, 2.1916547704, -0.8521943675};
  optim_begin_step(&o);
  optim_update(&o, p, g1, 0, 3, 0.1f, 1);
  /* The 4th element is a tensor of its own, without decay: zero gradient
   * and zero moments give u = 0, so the trust ratio falls back to 1 and
   * nothing moves. */
  optim_update(&o, p + 3, g1 + 3, 3, 1, 0.1f, 0);
  for (int i = 0; i < 3; i++)
    if (fabs(p[i] - want1[i]) > 2e-6)
      fail_msg("step 1: p[%d] = %.9f, by hand %.9f", i, p[i], want1[i]);
  assert_true(p[3] == 3.0f);
  optim_begin_step(&o);
  optim_update(&o, p, g2, 0, 3, 0.1f, 1);
  for (int i = 0; i < 3; i++)
    if (fabs(p[i] - want2[i]) > 2e-6)
      fail_msg("step 2: p[%d] = %.9f, by hand %.9f", i, p[i], want2[i]);
  /* Scale invariance of the trust ratio: a tensor 10x larger moves 10x
   * farther for the same gradient (unlike Adam). */
  optim_free(&o);
  optim a, b;
  assert_int_equal(optim_init(&a, &c, 2), 0);
  assert_int_equal(optim_init(&b, &c, 2), 0);
  float pa[2] = {1.0f, -1.0f}, pb[2] = {10.0f, -10.0f}, g[2] = {0.3f, 0.1f};
  optim_begin_step(&a);
  optim_begin_step(&b);
  optim_update(&a, pa, g, 0, 2, 0.01f, 0);
  optim_update(&b, pb, g, 0, 2, 0.01f, 0);
  for (int i = 0; i < 2; i++)
    assert_true(fabsf((pb[i] - (i ? -10.0f : 10.0f)) -
                      10.0f * (pa[i] - (i ? -1.0f : 1.0f))) < 1e-5f);
  optim_free(&a);
  optim_free(&b);
}

/* Reduce-on-plateau, factor 0.5, patience 1, by hand: losses 1.0 (best),
 * 0.9 (best), 0.95 (bad 1), 0.91 (bad 2 > 1: reduce to 0.5), 0.89 (best),
 * 0.8999 (bad 1: not better than 0.89 by 1e-4), 0.88995 (above
 * 0.89 * (1 - 1e-4) = 0.889911: bad 2, reduce to 0.25). */
static void test_plateau(void **state) {
  (void)state;
  plateau p;
  plateau_init(&p, 0.5f, 1);
  const double loss[] = {1.0, 0.9, 0.95, 0.91, 0.89, 0.8999, 0.88995};
  const int reduced[] = {0, 0, 0, 1, 0, 0, 1};
  const float scale[] = {1, 1, 1, 0.5f, 0.5f, 0.5f, 0.25f};
  for (int e = 0; e < 7; e++) {
    assert_int_equal(plateau_step(&p, loss[e]), reduced[e]);
    assert_true(p.scale == scale[e]);
  }
  assert_int_equal(p.reductions, 2);
  assert_true(p.best == 0.89);
  /* Patience 0: the first epoch that does not improve reduces. */
  plateau_init(&p, 0.1f, 0);
  assert_int_equal(plateau_step(&p, 2.0), 0);
  assert_int_equal(plateau_step(&p, 2.0), 1);
  assert_true(fabsf(p.scale - 0.1f) < 1e-8f);
}

/* ---- flags ---- */

static int parse(train_flags *f, char *err, int argc, ...) {
  char *argv[32] = {"train"};
  va_list ap;
  va_start(ap, argc);
  for (int i = 1; i <= argc; i++)
    argv[i] = va_arg(ap, char *);
  va_end(ap);
  return flags_parse(argc + 1, argv, f, err, 256);
}

static void test_flags_defaults_and_values(void **state) {
  (void)state;
  train_flags f;
  char err[256];
  assert_int_equal(parse(&f, err, 0), 0);
  assert_int_equal(f.epochs, 5);
  assert_int_equal(f.batch_size, 32); /* per worker (Horovod's meaning) */
  assert_int_equal(f.global_batch_size, 0);
  assert_int_equal(f.lr_scaling, 1);
  assert_int_equal(f.prefetch, TRAIN_DEFAULT_PREFETCH);
  assert_int_equal(f.augment, 0);
  assert_null(f.checkpoint_dir);
  assert_int_equal(f.resume, 0);
  assert_null(f.metrics);
  assert_int_equal(f.optimizer, OPTIM_ADAMW);
  assert_true(f.lr == TRAIN_DEFAULT_LR_ADAMW && f.weight_decay == 0.01f);
  assert_int_equal(f.warmup_steps, -1);
  assert_string_equal(f.data_dir, "/usr/share/datasets/fashion-mnist");
  assert_null(f.save);
  assert_null(f.save_all);
  assert_int_equal(f.limit_train, 0);
  assert_int_equal(f.progress, 0);

  assert_int_equal(parse(&f, err, 18, "--epochs", "3", "--batch-size=64",
                         "--lr", "0.1", "--optimizer", "sgd", "--nesterov",
                         "--seed=7", "--data", "/d", "--save", "w.bin",
                         "--save-all=p", "--limit-train", "600",
                         "--limit-test=50", "--progress"),
                   0);
  assert_int_equal(f.epochs, 3);
  assert_int_equal(f.batch_size, 64);
  assert_true(f.lr == 0.1f);
  assert_int_equal(f.optimizer, OPTIM_SGD);
  assert_int_equal(f.nesterov, 1);
  assert_true(f.weight_decay == 0.0f); /* sgd's default */
  assert_int_equal(f.seed, 7);
  assert_string_equal(f.data_dir, "/d");
  assert_string_equal(f.save, "w.bin");
  assert_string_equal(f.save_all, "p");
  assert_int_equal(f.limit_train, 600);
  assert_int_equal(f.limit_test, 50);
  assert_int_equal(f.progress, 1);

  assert_int_equal(
      parse(&f, err, 4, "--optimizer", "sgd", "--weight-decay", "0.5"), 0);
  assert_true(f.lr == TRAIN_DEFAULT_LR_SGD && f.weight_decay == 0.5f);
  assert_int_equal(parse(&f, err, 2, "--warmup-steps", "0"), 0);
  assert_int_equal(f.warmup_steps, 0);
  assert_int_equal(parse(&f, err, 1, "-h"), 1);
  assert_int_equal(parse(&f, err, 2, "--epochs", "--help"), -1);

  /* The input pipeline, Horovod's conventions, checkpoints, metrics. */
  assert_int_equal(parse(&f, err, 10, "--global-batch-size", "96",
                         "--no-lr-scaling", "--prefetch=0", "--augment",
                         "--checkpoint-dir", "ck", "--resume", "--metrics",
                         "m.csv"),
                   0);
  assert_int_equal(f.global_batch_size, 96);
  assert_int_equal(f.batch_size, 0);
  assert_int_equal(f.lr_scaling, 0);
  assert_int_equal(f.prefetch, 0);
  assert_int_equal(f.augment, 1);
  assert_string_equal(f.checkpoint_dir, "ck");
  assert_int_equal(f.resume, 1);
  assert_string_equal(f.metrics, "m.csv");
  assert_int_equal(parse(&f, err, 2, "--prefetch", "64"), 0);
  assert_int_equal(f.prefetch, 64);
}

static void expect_error(const char *want, int argc, char *a, char *b) {
  train_flags f;
  char err[256] = "";
  assert_int_equal(parse(&f, err, argc, a, b), -1);
  if (!strstr(err, want))
    fail_msg("message '%s' should contain '%s'", err, want);
}

static void test_flags_new_options(void **state) {
  (void)state;
  train_flags f;
  char err[256] = "";
  assert_int_equal(parse(&f, err, 0), 0);
  assert_string_equal(f.model, "mlp");
  assert_int_equal(f.precision, LOWP_FP32);
  assert_int_equal(f.plateau, 0);
  assert_true(f.plateau_factor == 0.5f);
  assert_int_equal(f.plateau_patience, 1);
  assert_int_equal(parse(&f, err, 10, "--optimizer", "lamb", "--schedule",
                         "plateau", "--plateau-factor", "0.2",
                         "--plateau-patience", "3", "--model", "cnn"),
                   0);
  assert_int_equal(f.optimizer, OPTIM_LAMB);
  assert_true(f.lr == TRAIN_DEFAULT_LR_LAMB && f.weight_decay == 0.01f);
  assert_int_equal(f.plateau, 1);
  assert_true(f.plateau_factor == 0.2f);
  assert_int_equal(f.plateau_patience, 3);
  assert_string_equal(f.model, "cnn");
  assert_int_equal(parse(&f, err, 2, "--model", "cnn"), 0);
  assert_true(f.lr == TRAIN_DEFAULT_LR_ADAMW_CNN);
  assert_int_equal(parse(&f, err, 4, "--model", "cnn", "--lr", "0.1"), 0);
  assert_true(f.lr == 0.1f);
  assert_int_equal(parse(&f, err, 2, "--precision=bf16", "--schedule=cosine"),
                   0);
  assert_int_equal(f.precision, LOWP_BF16);
  assert_int_equal(f.plateau, 0);
}

static void test_flags_errors(void **state) {
  (void)state;
  expect_error("unknown option '--epoch'", 2, "--epoch", "3");
  expect_error("unknown argument 'foo'", 1, "foo", NULL);
  expect_error("unknown argument '-x'", 1, "-x", NULL);
  expect_error("--epochs: 'x' is not an integer in 1..100000", 2, "--epochs",
               "x");
  expect_error("--epochs: '0' is not an integer", 2, "--epochs", "0");
  expect_error("--batch-size: '12abc' is not an integer", 2, "--batch-size",
               "12abc");
  expect_error("--lr: '-1' is not a number", 2, "--lr", "-1");
  expect_error("--lr: 'nan' is not a number", 2, "--lr", "nan");
  expect_error("--limit-train: missing value", 1, "--limit-train", NULL);
  expect_error("--optimizer: 'adam' is not sgd or adamw", 2, "--optimizer",
               "adam");
  expect_error("--nesterov: only with --optimizer sgd", 1, "--nesterov", NULL);
  expect_error("--schedule: 'step' is not cosine or plateau", 2, "--schedule",
               "step");
  expect_error("--plateau-factor: '1' is not a number in [0.01, 0.99]", 2,
               "--plateau-factor", "1");
  expect_error("--plateau-patience: '-1' is not an integer in 0..1000", 2,
               "--plateau-patience", "-1");
  expect_error("--model: 'vgg' is not one of mlp|cnn", 2, "--model", "vgg");
  expect_error("--precision: 'fp64' is not fp32, bf16 or fp16", 2,
               "--precision", "fp64");
  expect_error("--data: empty value", 1, "--data=", NULL);
  expect_error("--prefetch: '65' is not an integer in 0..64", 2, "--prefetch",
               "65");
  expect_error("--global-batch-size: '0' is not an integer", 2,
               "--global-batch-size", "0");
  expect_error("--batch-size and --global-batch-size: give one of them", 2,
               "--batch-size=8", "--global-batch-size=16");
  expect_error("--resume: needs --checkpoint-dir", 1, "--resume", NULL);
  expect_error("--metrics: empty value", 1, "--metrics=", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd_momentum),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_lamb),
      cmocka_unit_test(test_plateau),
      cmocka_unit_test(test_flags_new_options),
      cmocka_unit_test(test_flags_defaults_and_values),
      cmocka_unit_test(test_flags_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
