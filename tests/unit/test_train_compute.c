/*
 * test_train_compute.c - the trainer's compute rows (examples/train
 * compute.h): opening them by their --device name, and the CUDA row
 * (libhk_train_cuda.so) against the CPU row on small CNN shapes.
 *
 * Everywhere: "cpu" opens; a bad name is refused naming it; "cuda"
 * either opens or fails with a message that starts "--device cuda: ";
 * "auto" always opens, on cuda or with a note saying why not.
 *
 * With a GPU (the module built and a device seen; else skipped, unless
 * HK_TEST_GPU=1 turns the skip into a failure naming why), or with the
 * module TEST_TRAIN_ROW_MODULE names instead (ctest's
 * test_train_compute_fake: the stand-in row tests/unit/train_fake_row.c,
 * so that this test's own logic runs in CI): the same CNN
 * (shape 12x12, c1 3, c2 5, classes 4, batch 6, random weights and
 * batch-norm parameters) on both rows:
 * - training forward: logits within 1e-4 (relative to the largest
 *   logit): the GEMMs and batch norm's sums add in another order
 *   (cuBLAS's blocking; a tree in double instead of a serial double);
 * - running statistics after it: within 1e-5 relative;
 * - backward from the same dLoss/dlogits: every gradient tensor within
 *   2e-4 of its largest element, and handed over in the same order;
 * - one AdamW step on each row's gradients: the first step moves each
 *   weight by about lr sign(g), so weights agree within 1e-6 wherever
 *   the gradient is above 1e-4 of its tensor's largest (below, a sign
 *   flip at rounding level may move a weight by 2 lr), and every weight
 *   within 2.5 lr;
 * - the input staged through a pinned slot and the copy stream gives
 *   the logits of the input the forward copies itself, bit for bit; a
 *   slot out of range is refused naming it;
 * - bf16: logits within 2e-2 relative (a bf16 rounding boundary crossed
 *   differently is one bf16 ulp, 2^-8 relative, and may carry on).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cnn.h"
#include "compute.h"
#include "model.h"
#include "optim.h"

#define NB 6
static const cnn_shape shape = {12, 12, 3, 5, 4};

static void test_open_names(void **state) {
  (void)state;
  compute c;
  char err[1024];
  /* first (the module is loaded once per process): a module path that is
   * not there is named in the message */
  setenv(COMPUTE_CUDA_MODULE_ENV, "/nonexistent/libhk_train_cuda.so", 1);
  assert_int_equal(compute_open(&c, "cuda", 0, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/libhk_train_cuda.so"));
  compute_close(&c);
  const char *row = getenv("TEST_TRAIN_ROW_MODULE");
  if (row && *row)
    setenv(COMPUTE_CUDA_MODULE_ENV, row, 1);
  else
#ifdef TRAIN_CUDA_MODULE
    setenv(COMPUTE_CUDA_MODULE_ENV, TRAIN_CUDA_MODULE, 1);
#else
    unsetenv(COMPUTE_CUDA_MODULE_ENV);
#endif

  assert_int_equal(compute_open(&c, "cpu", 0, err, sizeof err), 0);
  assert_string_equal(c.ops->name, "cpu");
  assert_int_equal(c.ops->host, 1);
  assert_string_equal(err, "");
  compute_close(&c);

  assert_int_equal(compute_open(&c, "tpu", 0, err, sizeof err), -1);
  assert_string_equal(err, "--device: 'tpu' is not cpu, cuda or auto");
  compute_close(&c);

  if (compute_open(&c, "cuda", 0, err, sizeof err) == 0) {
    assert_int_equal(c.ops->host, 0); /* "cuda", or the stand-in */
  } else {
    assert_int_equal(strncmp(err, "--device cuda: ", 15), 0);
    assert_true(strlen(err) > 20); /* and says why */
  }
  compute_close(&c);

  assert_int_equal(compute_open(&c, "auto", 0, err, sizeof err), 0);
  if (!strcmp(c.ops->name, "cpu"))
    assert_int_equal(strncmp(err, "--device auto (cuda): ", 22), 0);
  else
    assert_string_equal(err, "");
  compute_close(&c);
}

/* Opens the CUDA row into *c or skips (fails under HK_TEST_GPU=1). */
static void open_gpu_or_skip(compute *c) {
  char err[1024];
  if (compute_open(c, "cuda", 0, err, sizeof err) == 0)
    return;
  const char *need = getenv("HK_TEST_GPU");
  if (need && !strcmp(need, "1"))
    fail_msg("HK_TEST_GPU=1, but the CUDA row did not open: %s", err);
  print_message("skipped: %s\n", err);
  skip();
}

/* The same random model on both rows, and a batch x, y. */
static void twin_models(model *cpu, model *gpu, compute *row, float *x,
                        uint8_t *y) {
  assert_int_equal(cnn_create_on(cpu, &shape, NB, compute_cpu()), 0);
  assert_int_equal(cnn_create_on(gpu, &shape, NB, row), 0);
  rng r;
  rng_seed(&r, 5);
  cpu->ops->init(cpu, &r);
  for (int t = 0; t < cpu->n_tensors; t++) {
    model_tensor d = model_tensor_at(cpu, t);
    if (d.trainable && !d.decay)
      for (size_t i = 0; i < d.count; i++)
        cpu->params[d.offset + i] += (float)(0.3 * rng_normal(&r));
  }
  memcpy(gpu->params, cpu->params, cpu->n_params * sizeof(float));
  for (int i = 0; i < NB * shape.h * shape.w; i++)
    x[i] = (float)rng_normal(&r);
  for (int i = 0; i < NB; i++)
    y[i] = (uint8_t)rng_below(&r, (uint64_t)shape.classes);
}

/* max |a - b| <= tol * max(max |a|, 1e-3) over n values. */
static void assert_close(const float *a, const float *b, size_t n, double tol,
                         const char *what) {
  double big = 1e-3, diff = 0.0;
  for (size_t i = 0; i < n; i++) {
    big = fmax(big, fabs((double)a[i]));
    diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
  }
  if (diff > tol * big)
    fail_msg("%s: max difference %g > %g x %g", what, diff, tol, big);
}

typedef struct order {
  int n, tensor[MODEL_MAX_TENSORS];
} order;

static int record(void *ctx, int t, float *grad, size_t count) {
  (void)grad;
  (void)count;
  order *o = ctx;
  o->tensor[o->n++] = t;
  return 0;
}

static void test_cuda_matches_cpu(void **state) {
  (void)state;
  compute row;
  open_gpu_or_skip(&row);
  model cpu, gpu;
  float x[NB * 12 * 12];
  uint8_t y[NB];
  twin_models(&cpu, &gpu, &row, x, y);

  const float *zc = model_forward(&cpu, x, NB, 1);
  const float *zg = model_forward(&gpu, x, NB, 1);
  assert_int_equal(compute_failed(&row), 0);
  assert_close(zc, zg, (size_t)NB * (size_t)shape.classes, 1e-4, "logits");
  size_t nt = 0; /* trainable floats: the buffers follow */
  for (int t = 0; t < cpu.n_tensors; t++) {
    model_tensor d = model_tensor_at(&cpu, t);
    if (d.trainable)
      nt = d.offset + d.count;
  }
  assert_close(cpu.params + nt, gpu.params + nt, cpu.n_params - nt, 1e-5,
               "running statistics");

  model_loss(&cpu, zc, y, NB, NULL);
  memcpy(gpu.dlogits, cpu.dlogits,
         (size_t)NB * (size_t)shape.classes * sizeof(float));
  float *gc = calloc(cpu.n_params, sizeof *gc);
  float *gg = calloc(cpu.n_params, sizeof *gg);
  assert_non_null(gc);
  assert_non_null(gg);
  order oc = {0}, og = {0};
  assert_int_equal(cpu.ops->backward(&cpu, NB, gc, record, &oc), 0);
  assert_int_equal(gpu.ops->backward(&gpu, NB, NULL, record, &og), 0);
  assert_non_null(gpu.dev_grads);
  assert_int_equal(
      row.ops->to_host(&row, gg, gpu.dev_grads, gpu.n_params * sizeof *gg), 0);
  assert_int_equal(compute_failed(&row), 0);
  assert_int_equal(oc.n, og.n);
  assert_memory_equal(oc.tensor, og.tensor, (size_t)oc.n * sizeof(int));
  for (int t = 0; t < cpu.n_tensors; t++) {
    model_tensor d = model_tensor_at(&cpu, t);
    if (d.trainable)
      assert_close(gc + d.offset, gg + d.offset, d.count, 2e-4, d.name);
  }

  optim oa, ob;
  optim_config cfg = optim_defaults(OPTIM_ADAMW);
  assert_int_equal(optim_init(&oa, &cfg, cpu.n_params), 0);
  assert_int_equal(optim_init(&ob, &cfg, cpu.n_params), 0);
  optim_begin_step(&oa);
  optim_begin_step(&ob);
  for (int t = 0; t < cpu.n_tensors; t++) {
    model_tensor d = model_tensor_at(&cpu, t);
    if (!d.trainable)
      continue;
    optim_update(&oa, cpu.params + d.offset, gc + d.offset, d.offset, d.count,
                 1e-3f, d.decay);
    optim_update(&ob, gpu.params + d.offset, gg + d.offset, d.offset, d.count,
                 1e-3f, d.decay);
  }
  for (int t = 0; t < cpu.n_tensors; t++) {
    model_tensor d = model_tensor_at(&cpu, t);
    double big = 0.0;
    for (size_t i = 0; d.trainable && i < d.count; i++)
      big = fmax(big, fabs((double)gc[d.offset + i]));
    for (size_t i = 0; d.trainable && i < d.count; i++) {
      size_t k = d.offset + i;
      double diff = fabs((double)cpu.params[k] - (double)gpu.params[k]);
      double tol = fabs((double)gc[k]) > 1e-4 * big ? 1e-6 : 2.5e-3;
      if (diff > tol)
        fail_msg("%s[%zu] after AdamW: %g vs %g (gradient %g vs %g)", d.name, i,
                 (double)cpu.params[k], (double)gpu.params[k], (double)gc[k],
                 (double)gg[k]);
    }
  }
  optim_free(&oa);
  optim_free(&ob);

  /* the input through the staging slots (pinned, copy stream, event):
   * the same logits as the input copied by the forward, bit for bit */
  float z1[NB * 4], z2[NB * 4];
  memcpy(z1, model_forward(&gpu, x, NB, 0), sizeof z1);
  assert_int_equal(row.ops->stage_init(&row, 2, sizeof x), 0);
  assert_int_equal(row.ops->stage_put(&row, 1, x, sizeof x), 0);
  gpu.dev_x = row.ops->stage_take(&row, 1);
  memcpy(z2, model_forward(&gpu, NULL, NB, 0), sizeof z2);
  assert_null(gpu.dev_x); /* model_forward cleared it */
  assert_int_equal(compute_failed(&row), 0);
  assert_memory_equal(z1, z2, sizeof z1);
  assert_int_equal(row.ops->stage_put(&row, 2, x, sizeof x), -1);
  assert_non_null(strstr(row.stage_err, "slot 2 of 2"));

  /* bf16: the same passes in the low type on both rows */
  assert_int_equal(model_set_precision(&cpu, LOWP_BF16), 0);
  assert_int_equal(model_set_precision(&gpu, LOWP_BF16), 0);
  memcpy(gpu.params, cpu.params, cpu.n_params * sizeof(float));
  float xb[NB * 12 * 12];
  lowp_copy(xb, x, sizeof xb / sizeof *xb, LOWP_BF16);
  zc = model_forward(&cpu, xb, NB, 0);
  zg = model_forward(&gpu, xb, NB, 0);
  assert_int_equal(compute_failed(&row), 0);
  assert_close(zc, zg, (size_t)NB * (size_t)shape.classes, 2e-2, "bf16 logits");

  free(gc);
  free(gg);
  model_free(&cpu);
  model_free(&gpu);
  compute_close(&row);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_names),
      cmocka_unit_test(test_cuda_matches_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
