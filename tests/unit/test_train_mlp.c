/*
 * test_train_mlp.c - the trainer's model pieces: SplitMix64 against its
 * reference outputs, He initialisation, the MLP's forward pass against a
 * naive double-precision one, its backward pass against finite
 * differences, the order and completeness of the per-tensor gradient
 * callbacks, and the HKMLP1 save format.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mlp.h"
#include "rng.h"
#include "save.h"

/* ---- rng ---- */

static void test_splitmix_reference(void **state) {
  (void)state;
  /* The first outputs of Vigna's splitmix64.c seeded with 0. */
  rng r;
  rng_seed(&r, 0);
  assert_true(rng_u64(&r) == 0xE220A8397B1DCDAFull);
  assert_true(rng_u64(&r) == 0x6E789E6AA1B965F4ull);
  assert_true(rng_u64(&r) == 0x06C45D188009454Full);
}

static void test_rng_below_shuffle_normal(void **state) {
  (void)state;
  rng r;
  rng_seed(&r, 7);
  int hist[3] = {0};
  for (int i = 0; i < 30000; i++) {
    uint64_t v = rng_below(&r, 3);
    assert_true(v < 3);
    hist[v]++;
  }
  for (int k = 0; k < 3; k++) /* 10000 expected, sd ~82 */
    assert_true(hist[k] > 9500 && hist[k] < 10500);

  uint32_t a[1000], b[1000];
  for (uint32_t i = 0; i < 1000; i++)
    a[i] = b[i] = i;
  rng r1, r2;
  rng_seed(&r1, 99);
  rng_seed(&r2, 99);
  rng_shuffle(&r1, a, 1000);
  rng_shuffle(&r2, b, 1000);
  assert_memory_equal(a, b, sizeof a); /* same seed, same order */
  int seen[1000] = {0}, moved = 0;
  for (int i = 0; i < 1000; i++) {
    seen[a[i]]++;
    moved += a[i] != (uint32_t)i;
  }
  for (int i = 0; i < 1000; i++)
    assert_int_equal(seen[i], 1); /* a permutation */
  assert_true(moved > 900);

  double sum = 0, sq = 0;
  for (int i = 0; i < 100000; i++) {
    double x = rng_normal(&r);
    sum += x;
    sq += x * x;
  }
  assert_true(fabs(sum / 1e5) < 0.02);
  assert_true(fabs(sq / 1e5 - 1.0) < 0.02);
}

/* ---- mlp ---- */

static const int tiny_dims[] = {6, 5, 4, 3};
#define TB 4

static void tiny_model(mlp *m, float *x, uint8_t *y) {
  assert_int_equal(mlp_init(m, 3, tiny_dims), 0);
  rng r;
  rng_seed(&r, 5);
  mlp_init_he(m, &r);
  /* Non-zero biases so that their gradients matter too. */
  for (int t = 1; t < mlp_n_tensors(m); t += 2) {
    mlp_tensor d = mlp_tensor_at(m, t);
    for (size_t i = 0; i < d.count; i++)
      m->params[d.offset + i] = (float)(0.2 * rng_normal(&r));
  }
  for (int i = 0; i < TB * 6; i++)
    x[i] = (float)(2.0 * rng_uniform(&r) - 1.0);
  for (int i = 0; i < TB; i++)
    y[i] = (uint8_t)(i % 3);
}

static void test_layout(void **state) {
  (void)state;
  mlp m;
  const int dims[] = {784, 256, 128, 10};
  assert_int_equal(mlp_init(&m, 3, dims), 0);
  assert_int_equal(m.n_params,
                   784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  assert_int_equal(mlp_n_tensors(&m), 6);
  const char *names[] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                         "fc2.bias",   "fc3.weight", "fc3.bias"};
  size_t off = 0;
  for (int t = 0; t < 6; t++) {
    mlp_tensor d = mlp_tensor_at(&m, t);
    assert_string_equal(d.name, names[t]);
    assert_int_equal(d.offset, off);
    assert_int_equal(d.is_bias, t % 2);
    off += d.count;
  }
  assert_int_equal(off, m.n_params);
  assert_int_equal(mlp_tensor_at(&m, 2).count, 256 * 128);
  mlp_free(&m);
  const int bad[] = {4, 0, 2};
  assert_int_equal(mlp_init(&m, 2, bad), -1);
  assert_int_equal(mlp_init(&m, 0, bad), -1);
}

static void test_he_init(void **state) {
  (void)state;
  mlp m;
  const int dims[] = {784, 256, 128, 10};
  assert_int_equal(mlp_init(&m, 3, dims), 0);
  rng r;
  rng_seed(&r, 1);
  mlp_init_he(&m, &r);
  for (int t = 0; t < 6; t++) {
    mlp_tensor d = mlp_tensor_at(&m, t);
    double sq = 0;
    for (size_t i = 0; i < d.count; i++)
      sq += (double)m.params[d.offset + i] * m.params[d.offset + i];
    if (d.is_bias) {
      assert_true(sq == 0.0);
    } else {
      double want = 2.0 / dims[d.layer], got = sq / (double)d.count;
      assert_true(fabs(got / want - 1.0) < 0.1);
    }
  }
  mlp_free(&m);
}

/* The logits computed naively in double. */
static void naive_logits(const mlp *m, const float *x, int B, double *out) {
  double a[TB][8], b[TB][8];
  for (int i = 0; i < B; i++)
    for (int k = 0; k < m->dims[0]; k++)
      a[i][k] = x[i * m->dims[0] + k];
  for (int l = 0; l < m->n_layers; l++) {
    const float *W = m->params + mlp_tensor_at(m, 2 * l).offset;
    const float *bias = m->params + mlp_tensor_at(m, 2 * l + 1).offset;
    for (int i = 0; i < B; i++)
      for (int o = 0; o < m->dims[l + 1]; o++) {
        double s = bias[o];
        for (int k = 0; k < m->dims[l]; k++)
          s += (double)W[o * m->dims[l] + k] * a[i][k];
        b[i][o] = l + 1 < m->n_layers && s < 0 ? 0 : s;
      }
    memcpy(a, b, sizeof a);
  }
  for (int i = 0; i < B; i++)
    for (int o = 0; o < m->dims[m->n_layers]; o++)
      out[i * m->dims[m->n_layers] + o] = a[i][o];
}

static void test_forward_matches_naive(void **state) {
  (void)state;
  mlp m;
  mlp_work w;
  float x[TB * 6];
  uint8_t y[TB];
  tiny_model(&m, x, y);
  assert_int_equal(mlp_work_init(&w, &m, TB), 0);
  const float *z = mlp_forward(&m, &w, x, TB);
  double want[TB * 3];
  naive_logits(&m, x, TB, want);
  for (int i = 0; i < TB * 3; i++)
    assert_true(fabs(z[i] - want[i]) < 1e-5);
  /* Loss: mean of log-sum-exp minus the label's logit. */
  double loss = 0;
  long correct = 0, want_correct = 0;
  for (int i = 0; i < TB; i++) {
    double s = 0;
    int top = 0;
    for (int k = 0; k < 3; k++) {
      s += exp(want[i * 3 + k]);
      top = want[i * 3 + k] > want[i * 3 + top] ? k : top;
    }
    loss += log(s) - want[i * 3 + y[i]];
    want_correct += top == y[i];
  }
  assert_true(fabs(mlp_loss(&m, &w, y, TB, &correct) - loss / TB) < 1e-5);
  assert_int_equal(correct, want_correct);
  correct = 0;
  mlp_count_correct(&m, &w, x, y, TB, &correct);
  assert_int_equal(correct, want_correct);
  mlp_work_free(&w);
  mlp_free(&m);
}

static void test_loss_of_zero_model(void **state) {
  (void)state;
  mlp m;
  mlp_work w;
  float x[TB * 6];
  uint8_t y[TB] = {0, 1, 2, 0};
  for (int i = 0; i < TB * 6; i++)
    x[i] = (float)i;
  assert_int_equal(mlp_init(&m, 3, tiny_dims), 0); /* all zero */
  assert_int_equal(mlp_work_init(&w, &m, TB), 0);
  mlp_forward(&m, &w, x, TB);
  long correct = 0;
  /* Equal logits: p = 1/3 each, loss log 3; ties go to class 0. */
  assert_true(fabs(mlp_loss(&m, &w, y, TB, &correct) - log(3.0)) < 1e-6);
  assert_int_equal(correct, 2);
  /* dL/dlogits = (1/3 - onehot) / B, so the last bias gradient is the
   * column mean of that: class 0 has 2 of 4 labels: (4/3 - 2) / 4. */
  float *g = calloc(m.n_params, sizeof *g);
  assert_int_equal(mlp_backward(&m, &w, TB, g, NULL, NULL), 0);
  const float *gb = g + mlp_tensor_at(&m, 5).offset;
  assert_true(fabs(gb[0] - (4.0 / 3.0 - 2.0) / 4.0) < 1e-6);
  assert_true(fabs(gb[1] - (4.0 / 3.0 - 1.0) / 4.0) < 1e-6);
  free(g);
  mlp_work_free(&w);
  mlp_free(&m);
}

static double loss_at(mlp *m, mlp_work *w, const float *x, const uint8_t *y) {
  mlp_forward(m, w, x, TB);
  return mlp_loss(m, w, y, TB, NULL);
}

static void test_backward_matches_finite_differences(void **state) {
  (void)state;
  mlp m;
  mlp_work w;
  float x[TB * 6];
  uint8_t y[TB];
  tiny_model(&m, x, y);
  assert_int_equal(mlp_work_init(&w, &m, TB), 0);
  float *g = calloc(m.n_params, sizeof *g);
  loss_at(&m, &w, x, y);
  assert_int_equal(mlp_backward(&m, &w, TB, g, NULL, NULL), 0);
  const float h = 1e-3f;
  double worst = 0;
  for (size_t i = 0; i < m.n_params; i++) {
    float keep = m.params[i];
    m.params[i] = keep + h;
    double up = loss_at(&m, &w, x, y);
    m.params[i] = keep - h;
    double down = loss_at(&m, &w, x, y);
    m.params[i] = keep;
    double num = (up - down) / (2.0 * h);
    double err = fabs(num - g[i]) / (1e-3 + fabs(num));
    worst = err > worst ? err : worst;
    if (err > 2e-2)
      fail_msg("param %zu: backward %g, finite difference %g", i, g[i], num);
  }
  assert_true(worst < 2e-2);
  free(g);
  mlp_work_free(&w);
  mlp_free(&m);
}

typedef struct seen {
  int n;
  int order[2 * MLP_MAX_LAYERS];
  float *copy[2 * MLP_MAX_LAYERS];
  const mlp *m;
  float *grads;
  int stop_after;
} seen;

static int on_ready(void *ctx, int t, float *grad, size_t count) {
  seen *s = ctx;
  mlp_tensor d = mlp_tensor_at(s->m, t);
  assert_ptr_equal(grad, s->grads + d.offset);
  assert_int_equal(count, d.count);
  s->copy[s->n] = malloc(count * sizeof *grad);
  memcpy(s->copy[s->n], grad, count * sizeof *grad);
  s->order[s->n++] = t;
  return s->n == s->stop_after ? 42 : 0;
}

static void test_callbacks_last_layer_first(void **state) {
  (void)state;
  mlp m;
  mlp_work w;
  float x[TB * 6];
  uint8_t y[TB];
  tiny_model(&m, x, y);
  assert_int_equal(mlp_work_init(&w, &m, TB), 0);
  float *g = calloc(m.n_params, sizeof *g);
  seen s = {.m = &m, .grads = g};
  loss_at(&m, &w, x, y);
  assert_int_equal(mlp_backward(&m, &w, TB, g, on_ready, &s), 0);
  /* fc3.bias, fc3.weight, fc2.bias, fc2.weight, fc1.bias, fc1.weight */
  const int want[] = {5, 4, 3, 2, 1, 0};
  assert_int_equal(s.n, 6);
  assert_memory_equal(s.order, want, sizeof want);
  /* Each gradient was final when handed over. */
  for (int i = 0; i < 6; i++) {
    mlp_tensor d = mlp_tensor_at(&m, s.order[i]);
    assert_memory_equal(s.copy[i], g + d.offset, d.count * sizeof *g);
    free(s.copy[i]);
  }
  /* A non-zero return stops the pass and comes back. */
  seen s2 = {.m = &m, .grads = g, .stop_after = 2};
  assert_int_equal(mlp_backward(&m, &w, TB, g, on_ready, &s2), 42);
  assert_int_equal(s2.n, 2);
  free(s2.copy[0]);
  free(s2.copy[1]);
  free(g);
  mlp_work_free(&w);
  mlp_free(&m);
}

/* ---- save format ---- */

static void test_save_load_roundtrip(void **state) {
  (void)state;
  mlp m;
  float x[TB * 6];
  uint8_t y[TB];
  tiny_model(&m, x, y);
  char path[96];
  snprintf(path, sizeof path, "%s/hk_test_train_save.XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR")
                                                          : "/tmp");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char err[512];
  assert_int_equal(mlp_save(&m, path, err, sizeof err), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 12 + 4 * 4 + 4 * (long)m.n_params);
  FILE *f = fopen(path, "rb");
  uint8_t head[28], first[4];
  assert_int_equal(fread(head, 1, 28, f), 28);
  assert_int_equal(fread(first, 1, 4, f), 4);
  fclose(f);
  const uint8_t want[28] = {'H', 'K', 'M', 'L', 'P', '1', 0, 0, 3, 0,
                            0,   0,   6,   0,   0,   0,   5, 0, 0, 0,
                            4,   0,   0,   0,   3,   0,   0, 0};
  assert_memory_equal(head, want, 28);
  uint32_t bits;
  memcpy(&bits, &m.params[0], 4); /* little-endian on disk */
  assert_int_equal(first[0] | first[1] << 8 | first[2] << 16 |
                       (uint32_t)first[3] << 24,
                   bits);

  mlp back;
  assert_int_equal(mlp_load(&back, path, err, sizeof err), 0);
  assert_int_equal(back.n_layers, 3);
  assert_int_equal(back.n_params, m.n_params);
  assert_memory_equal(back.params, m.params, m.n_params * sizeof(float));
  mlp_free(&back);

  /* Trailing, truncated, bad magic. */
  f = fopen(path, "ab");
  fputc(0, f);
  fclose(f);
  assert_int_equal(mlp_load(&back, path, err, sizeof err), -1);
  assert_non_null(strstr(err, "trailing"));
  assert_int_equal(truncate(path, st.st_size - 1), 0);
  assert_int_equal(mlp_load(&back, path, err, sizeof err), -1);
  assert_non_null(strstr(err, "truncated"));
  f = fopen(path, "r+b");
  fputc('X', f);
  fclose(f);
  assert_int_equal(mlp_load(&back, path, err, sizeof err), -1);
  assert_non_null(strstr(err, "bad magic"));
  assert_int_equal(strncmp(err, path, strlen(path)), 0);
  unlink(path);
  assert_int_equal(mlp_save(&m, "/nonexistent/dir/w", err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/dir/w: cannot create"));
  mlp_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_splitmix_reference),
      cmocka_unit_test(test_rng_below_shuffle_normal),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_he_init),
      cmocka_unit_test(test_forward_matches_naive),
      cmocka_unit_test(test_loss_of_zero_model),
      cmocka_unit_test(test_backward_matches_finite_differences),
      cmocka_unit_test(test_callbacks_last_layer_first),
      cmocka_unit_test(test_save_load_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
