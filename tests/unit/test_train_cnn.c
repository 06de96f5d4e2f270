/*
 * test_train_cnn.c - the CNN of examples/train (cnn.h) and the model table
 * (model.h): tensor layout and names, initial values, the evaluation
 * forward against a naive double-precision direct convolution, the
 * training backward against central finite differences on a small shape
 * (batch norm in training mode, so its batch statistics are
 * differentiated too), the order and finality of the gradient callbacks,
 * the running statistics, the bf16/fp16 passes next to fp32's, and the
 * HKCNN1 weight file.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cnn.h"
#include "model.h"

#define TB 4
static const cnn_shape small = {8, 8, 3, 4, 3};

/* A small CNN with random non-trivial parameters (batch-norm scales and
 * shifts included) and random inputs x (TB x 64) and labels y. */
/* A small model and a batch for it, made by small_model; as a cmocka
 * fixture (SMALL_TEST), small_up makes it into *state for one test and
 * small_down frees it. */
typedef struct small_case {
  model m;
  float x[TB * 64];
  uint8_t y[TB];
} small_case;

static void small_model(model *m, float *x, uint8_t *y);

static int small_up(void **state) {
  small_case *c = malloc(sizeof *c);
  assert_non_null(c);
  small_model(&c->m, c->x, c->y);
  *state = c;
  return 0;
}

static int small_down(void **state) {
  small_case *c = *state;
  model_free(&c->m);
  free(c);
  return 0;
}

#define SMALL_TEST(test)                                                       \
  cmocka_unit_test_setup_teardown(test, small_up, small_down)

static void small_model(model *m, float *x, uint8_t *y) {
  assert_int_equal(cnn_create(m, &small, TB), 0);
  rng r;
  rng_seed(&r, 11);
  m->ops->init(m, &r);
  for (int t = 0; t < m->n_tensors; t++) {
    model_tensor d = model_tensor_at(m, t);
    if (d.trainable && !d.decay)
      for (size_t i = 0; i < d.count; i++)
        m->params[d.offset + i] += (float)(0.3 * rng_normal(&r));
  }
  for (int i = 0; i < TB * 64; i++)
    x[i] = (float)(2.0 * rng_uniform(&r) - 1.0);
  for (int i = 0; i < TB; i++)
    y[i] = (uint8_t)(i % 3);
}

static void test_layout_and_table(void **state) {
  (void)state;
  assert_ptr_equal(model_find("cnn"), &model_cnn_ops);
  assert_string_equal(model_find("mlp")->name, "mlp");
  assert_null(model_find("resnet"));
  model m;
  assert_int_equal(model_create(&m, model_find("cnn"), 2), 0);
  const char *names[] = {
      "conv1.weight",    "bn1.weight",       "bn1.bias",
      "conv2.weight",    "bn2.weight",       "bn2.bias",
      "fc.weight",       "fc.bias",          "bn1.running_mean",
      "bn1.running_var", "bn2.running_mean", "bn2.running_var"};
  const size_t counts[] = {16 * 9,          16, 16, 32 * 16 * 9, 32, 32,
                           10 * 32 * 7 * 7, 10, 16, 16,          32, 32};
  assert_int_equal(m.n_tensors, 12);
  size_t off = 0;
  for (int t = 0; t < 12; t++) {
    model_tensor d = model_tensor_at(&m, t);
    assert_string_equal(d.name, names[t]);
    assert_int_equal(d.offset, off);
    assert_int_equal(d.count, counts[t]);
    assert_int_equal(d.trainable, t < 8);
    assert_int_equal(d.decay, t == 0 || t == 3 || t == 6);
    off += d.count;
  }
  assert_int_equal(off, m.n_params);
  assert_int_equal(m.n_params, 20538 + 96);
  assert_int_equal(m.classes, 10);
  model_free(&m);
  cnn_shape bad = small;
  bad.h = 6; /* not a multiple of 4 */
  assert_int_equal(cnn_create(&m, &bad, 2), -1);
  assert_null(m.impl);
  assert_int_equal(cnn_create(&m, &small, 0), -1);
}

static void test_init(void **state) {
  (void)state;
  model m;
  assert_int_equal(model_create(&m, model_find("cnn"), 1), 0);
  rng r;
  rng_seed(&r, 3);
  m.ops->init(&m, &r);
  const double fan_in[] = {9, 0, 0, 16 * 9, 0, 0, 32 * 7 * 7, 0, 0, 0, 0, 0};
  const float fill[] = {0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1};
  for (int t = 0; t < 12; t++) {
    model_tensor d = model_tensor_at(&m, t);
    const float *p = m.params + d.offset;
    if (fan_in[t] > 0) { /* He: variance 2 / fan_in */
      double sq = 0;
      for (size_t i = 0; i < d.count; i++)
        sq += (double)p[i] * p[i];
      assert_true(fabs(sq / (double)d.count / (2.0 / fan_in[t]) - 1.0) <
                  (d.count < 200 ? 0.3 : 0.1));
    } else {
      for (size_t i = 0; i < d.count; i++)
        assert_true(p[i] == fill[t]);
    }
  }
  model_free(&m);
}

/* ---- naive evaluation forward, in double ---- */

static double P(const model *m, int t, size_t i) {
  return m->params[model_tensor_at(m, t).offset + i];
}

/* One block on in[b][ci][y][x] (cin x h x w per sample) into out
 * (cout x h/2 x w/2 per sample), running statistics. */
static void naive_block(const model *m, int tconv, int tbn, int trm,
                        const double *in, int cin, int cout, int h, int w,
                        double *out) {
  double *z = calloc((size_t)cout * h * w, sizeof *z);
  for (int co = 0; co < cout; co++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        double s = 0;
        for (int ci = 0; ci < cin; ci++)
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              int iy = y + ky - 1, ix = x + kx - 1;
              if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                s += P(m, tconv, (size_t)((co * cin + ci) * 9 + ky * 3 + kx)) *
                     in[(ci * h + iy) * w + ix];
            }
        double v = (s - P(m, trm, co)) / sqrt(P(m, trm + 1, co) + 1e-5) *
                       P(m, tbn, co) +
                   P(m, tbn + 1, co);
        z[(co * h + y) * w + x] = v > 0 ? v : 0;
      }
  for (int co = 0; co < cout; co++)
    for (int y = 0; y < h / 2; y++)
      for (int x = 0; x < w / 2; x++) {
        double b = -1e300;
        for (int k = 0; k < 4; k++) {
          double v = z[(co * h + 2 * y + k / 2) * w + 2 * x + k % 2];
          b = v > b ? v : b;
        }
        out[(co * (h / 2) + y) * (w / 2) + x] = b;
      }
  free(z);
}

static void test_eval_forward_matches_naive(void **state) {
  small_case *c = *state; /* see small_up */
  model *m = &c->m;
  /* Non-trivial running statistics. */
  for (int t = 8; t < 12; t++) {
    model_tensor d = model_tensor_at(m, t);
    for (size_t i = 0; i < d.count; i++)
      m->params[d.offset + i] = t % 2 ? 0.5f + 0.25f * (float)i : 0.1f * i;
  }
  const float *z = m->ops->forward(m, c->x, TB, 0);
  for (int b = 0; b < TB; b++) {
    double in[64], h1[3 * 16], h2[4 * 4];
    for (int i = 0; i < 64; i++)
      in[i] = c->x[b * 64 + i];
    naive_block(m, 0, 1, 8, in, 1, 3, 8, 8, h1);
    naive_block(m, 3, 4, 10, h1, 3, 4, 4, 4, h2);
    for (int k = 0; k < 3; k++) {
      double s = P(m, 7, (size_t)k);
      for (int f = 0; f < 16; f++)
        s += P(m, 6, (size_t)(k * 16 + f)) * h2[f];
      if (fabs(z[b * 3 + k] - s) > 1e-4 * (1 + fabs(s)))
        fail_msg("sample %d logit %d: %g, naive %g", b, k, z[b * 3 + k], s);
    }
  }
}

/* ---- backward ---- */

static double loss_at(model *m, const float *x, const uint8_t *y) {
  const float *z = m->ops->forward(m, x, TB, 1);
  return model_loss(m, z, y, TB, NULL);
}

static void test_backward_matches_finite_differences(void **state) {
  small_case *c = *state; /* see small_up */
  model *m = &c->m;
  float *g = calloc(m->n_params, sizeof *g);
  loss_at(m, c->x, c->y);
  assert_int_equal(m->ops->backward(m, TB, g, NULL, NULL), 0);
  const float h = 1e-3f;
  double worst = 0;
  size_t n_train = model_tensor_at(m, 8).offset;
  for (size_t i = 0; i < n_train; i++) {
    float keep = m->params[i];
    m->params[i] = keep + h;
    double up = loss_at(m, c->x, c->y);
    m->params[i] = keep - h;
    double down = loss_at(m, c->x, c->y);
    m->params[i] = keep;
    double num = (up - down) / (2.0 * h);
    /* Relative, with an absolute floor for the float32 loss's noise
     * (measured worst: 0.7%). */
    double err = fabs(num - g[i]) / (2e-3 + fabs(num));
    worst = err > worst ? err : worst;
    if (err > 2e-2)
      fail_msg("param %zu: backward %g, finite difference %g", i, g[i], num);
  }
  fprintf(stderr, "worst relative error %.3g over %zu parameters\n", worst,
          n_train);
  free(g);
}

typedef struct seen {
  int n, order[MODEL_MAX_TENSORS];
  float *copy[MODEL_MAX_TENSORS];
  const model *m;
  float *grads;
  int stop_after;
} seen;

static int on_ready(void *ctx, int t, float *grad, size_t count) {
  seen *s = ctx;
  model_tensor d = model_tensor_at(s->m, t);
  assert_true(d.trainable);
  assert_ptr_equal(grad, s->grads + d.offset);
  assert_int_equal(count, d.count);
  s->copy[s->n] = malloc(count * sizeof *grad);
  memcpy(s->copy[s->n], grad, count * sizeof *grad);
  /* Scribble over it: a collective may change it in place at once, and
   * the rest of the pass must not read it back. */
  for (size_t i = 0; i < count; i++)
    grad[i] = 1e30f;
  s->order[s->n++] = t;
  return s->n == s->stop_after ? 7 : 0;
}

static void test_callbacks_last_layer_first(void **state) {
  small_case *c = *state; /* see small_up */
  model *m = &c->m;
  float *g = calloc(m->n_params, sizeof *g);
  float *want = calloc(m->n_params, sizeof *want);
  loss_at(m, c->x, c->y);
  assert_int_equal(m->ops->backward(m, TB, want, NULL, NULL), 0);
  seen s = {.m = m, .grads = g};
  loss_at(m, c->x, c->y);
  assert_int_equal(m->ops->backward(m, TB, g, on_ready, &s), 0);
  const int order[] = {7, 6, 5, 4, 3, 2, 1, 0};
  assert_int_equal(s.n, 8);
  assert_memory_equal(s.order, order, sizeof order);
  for (int i = 0; i < 8; i++) { /* final when handed over, unaffected */
    model_tensor d = model_tensor_at(m, s.order[i]);
    assert_memory_equal(s.copy[i], want + d.offset, d.count * sizeof *g);
    free(s.copy[i]);
  }
  seen s2 = {.m = m, .grads = g, .stop_after = 3};
  loss_at(m, c->x, c->y);
  assert_int_equal(m->ops->backward(m, TB, g, on_ready, &s2), 7);
  assert_int_equal(s2.n, 3);
  for (int i = 0; i < 3; i++)
    free(s2.copy[i]);
  free(g);
  free(want);
}

/* Training forwards on one batch move the running statistics toward the
 * batch's (momentum 0.1: 0.9^300 of the start is left); the evaluation
 * forward then reproduces the training one up to the unbiased variance's
 * n / (n - 1) (n = 4 x 64 and 4 x 16 here). */
static void test_running_statistics(void **state) {
  small_case *c = *state; /* see small_up */
  model *m = &c->m;
  float train_z[TB * 3];
  for (int k = 0; k < 300; k++)
    memcpy(train_z, m->ops->forward(m, c->x, TB, 1), sizeof train_z);
  const float *rv = m->params + model_tensor_at(m, 9).offset;
  for (int c = 0; c < 3; c++)
    assert_true(rv[c] != 1.0f);
  const float *z = m->ops->forward(m, c->x, TB, 0);
  double worst = 0;
  for (int i = 0; i < TB * 3; i++) {
    double e = fabs(z[i] - train_z[i]) / (0.1 + fabs(train_z[i]));
    worst = e > worst ? e : worst;
  }
  if (worst > 0.05)
    fail_msg("evaluation vs training logits differ by %g", worst);
}

/* bf16 and fp16 (model_set_precision): the passes really run rounded
 * (logits and gradients differ from fp32's), stay close to them (bf16
 * keeps 8 significant bits, fp16 11: relative errors in the 2-norm
 * measured 0.75% and 0.09%, allowed 4% and 0.5%), and leave the master
 * weights alone. */
static void test_low_precision_passes(void **state) {
  (void)state;
  const lowp_kind kinds[] = {LOWP_BF16, LOWP_FP16};
  const double tol[] = {4e-2, 5e-3};
  for (int k = 0; k < 2; k++) {
    model m;
    float x[TB * 64];
    uint8_t y[TB];
    small_model(&m, x, y);
    float *g32 = calloc(m.n_params, sizeof *g32);
    float *glo = calloc(m.n_params, sizeof *glo);
    float *before = malloc(m.n_params * sizeof *before);
    float z32[TB * 3], zlo[TB * 3];
    memcpy(z32, model_forward(&m, x, TB, 1), sizeof z32);
    model_loss(&m, z32, y, TB, NULL);
    assert_int_equal(m.ops->backward(&m, TB, g32, NULL, NULL), 0);
    assert_int_equal(model_set_precision(&m, kinds[k]), 0);
    assert_non_null(m.compute);
    memcpy(before, m.params, m.n_params * sizeof *before);
    memcpy(zlo, model_forward(&m, x, TB, 1), sizeof zlo);
    model_loss(&m, zlo, y, TB, NULL);
    assert_int_equal(m.ops->backward(&m, TB, glo, NULL, NULL), 0);
    /* Only the running statistics (buffers) may have moved. */
    size_t n_train = model_tensor_at(&m, 8).offset;
    assert_memory_equal(before, m.params, n_train * sizeof *before);
    double dz = 0, nz = 0, dg = 0, ng = 0;
    int differ = 0;
    for (int i = 0; i < TB * 3; i++) {
      dz += (zlo[i] - z32[i]) * (double)(zlo[i] - z32[i]);
      nz += (double)z32[i] * z32[i];
      differ |= zlo[i] != z32[i];
    }
    for (size_t i = 0; i < n_train; i++) {
      assert_true(isfinite(glo[i]));
      dg += (glo[i] - g32[i]) * (double)(glo[i] - g32[i]);
      ng += (double)g32[i] * g32[i];
    }
    assert_true(differ);
    if (sqrt(dz / nz) > tol[k] || sqrt(dg / ng) > tol[k])
      fail_msg("%s: logits off by %g, gradients by %g (relative)",
               lowp_name(kinds[k]), sqrt(dz / nz), sqrt(dg / ng));
    fprintf(stderr, "%s: logits %.3g, gradients %.3g relative to fp32\n",
            lowp_name(kinds[k]), sqrt(dz / nz), sqrt(dg / ng));
    free(g32);
    free(glo);
    free(before);
    model_free(&m);
  }
}

/* model_save: "HKCNN1\0\0", the words h w c1 c2 classes, then every float
 * of the buffer (running statistics included), little-endian. */
static void test_weight_file(void **state) {
  small_case *c = *state; /* see small_up */
  model *m = &c->m;
  char path[128];
  snprintf(path, sizeof path, "%s/hk_test_train_cnn.XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR")
                                                          : "/tmp");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char err[256];
  assert_int_equal(model_save(m, path, err, sizeof err), 0);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t want = 8 + 4 * 5 + 4 * m->n_params;
  uint8_t *b = malloc(want + 1);
  assert_int_equal(fread(b, 1, want + 1, f), want); /* and nothing after */
  fclose(f);
  unlink(path);
  const uint8_t head[28] = {'H', 'K', 'C', 'N', 'N', '1', 0, 0, 8, 0,
                            0,   0,   8,   0,   0,   0,   3, 0, 0, 0,
                            4,   0,   0,   0,   3,   0,   0, 0};
  assert_memory_equal(b, head, 28);
  for (size_t i = 0; i < m->n_params; i++) {
    const uint8_t *q = b + 28 + 4 * i;
    uint32_t bits = (uint32_t)q[0] | (uint32_t)q[1] << 8 |
                    (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24,
             want_bits;
    memcpy(&want_bits, &m->params[i], 4);
    assert_int_equal(bits, want_bits);
  }
  free(b);
  assert_int_equal(model_save(m, "/nonexistent/dir/w", err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/dir/w: cannot create"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_and_table),
      cmocka_unit_test(test_init),
      SMALL_TEST(test_eval_forward_matches_naive),
      SMALL_TEST(test_backward_matches_finite_differences),
      SMALL_TEST(test_callbacks_last_layer_first),
      SMALL_TEST(test_running_statistics),
      cmocka_unit_test(test_low_precision_passes),
      SMALL_TEST(test_weight_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
