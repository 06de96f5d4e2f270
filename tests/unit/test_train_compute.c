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
 * - the step's tail (scale, finite check, loss, sgd/adamw/lamb) on the
 *   row against the CPU row's entries: tolerances at
 *   test_step_tail_matches_cpu;
 * - the input staged through a pinned slot and the copy stream gives
 *   the logits of the input the forward copies itself, bit for bit; a
 *   slot out of range is refused naming it;
 * - a GEMM with 16-bit inputs (set_lowp): test_gemm16_matches_cpu;
 * - bf16 (the GEMMs on 16-bit inputs): logits within 2e-2 relative (a
 *   bf16 rounding boundary crossed differently is one bf16 ulp, 2^-8
 *   relative, and may carry on).
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
  model_to_row(gpu); /* the passes read the row's copy */
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

/* The row's B x classes logits z into host out. */
static const float *host_copy(compute *row, const float *z, float *out,
                              size_t n) {
  assert_int_equal(row->ops->to_host(row, out, z, n * sizeof(float)), 0);
  return out;
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

  float zh[NB * 4];
  const size_t nz = (size_t)NB * (size_t)shape.classes;
  const float *zc = model_forward(&cpu, x, NB, 1);
  const float *zg = host_copy(&row, model_forward(&gpu, x, NB, 1), zh, nz);
  assert_int_equal(model_to_host(&gpu), 0); /* the running statistics */
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
  row.ops->to_dev(&row, gpu.row_dlogits, cpu.dlogits, nz * sizeof(float));
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

  /* the input through the staging slots (pinned, copy stream, event):
   * the same logits as the input copied by the forward, bit for bit */
  float z1[NB * 4], z2[NB * 4];
  host_copy(&row, model_forward(&gpu, x, NB, 0), z1, nz);
  assert_int_equal(row.ops->stage_init(&row, 2, sizeof x), 0);
  assert_int_equal(row.ops->stage_put(&row, 1, x, sizeof x), 0);
  gpu.dev_x = row.ops->stage_take(&row, 1);
  host_copy(&row, model_forward(&gpu, NULL, NB, 0), z2, nz);
  assert_null(gpu.dev_x); /* model_forward cleared it */
  assert_int_equal(compute_failed(&row), 0);
  assert_memory_equal(z1, z2, sizeof z1);
  /* the slot refilled once its reads are marked consumed: the new batch */
  row.ops->stage_consumed(&row, 1);
  float xn[sizeof x / sizeof *x];
  for (size_t i = 0; i < sizeof xn / sizeof *xn; i++)
    xn[i] = -x[i];
  host_copy(&row, model_forward(&gpu, xn, NB, 0), z1, nz);
  assert_int_equal(row.ops->stage_put(&row, 1, xn, sizeof xn), 0);
  gpu.dev_x = row.ops->stage_take(&row, 1);
  host_copy(&row, model_forward(&gpu, NULL, NB, 0), z2, nz);
  assert_int_equal(compute_failed(&row), 0);
  assert_memory_equal(z1, z2, sizeof z1);
  assert_int_equal(row.ops->stage_put(&row, 2, x, sizeof x), -1);
  assert_non_null(strstr(row.stage_err, "slot 2 of 2"));

  /* bf16: the same passes in the low type on both rows */
  assert_int_equal(model_set_precision(&cpu, LOWP_BF16), 0);
  assert_int_equal(model_set_precision(&gpu, LOWP_BF16), 0);
  memcpy(gpu.params, cpu.params, cpu.n_params * sizeof(float));
  model_to_row(&gpu);
  float xb[NB * 12 * 12];
  lowp_copy(xb, x, sizeof xb / sizeof *xb, LOWP_BF16);
  zc = model_forward(&cpu, xb, NB, 0);
  zg = host_copy(&row, model_forward(&gpu, xb, NB, 0), zh, nz);
  assert_int_equal(compute_failed(&row), 0);
  assert_close(zc, zg, (size_t)NB * (size_t)shape.classes, 2e-2, "bf16 logits");

  free(gc);
  free(gg);
  model_free(&cpu);
  model_free(&gpu);
  compute_close(&row);
}

/* n floats of row memory holding host values v (the test's buffers). */
static float *row_floats(compute *row, const float *v, size_t n) {
  float *d = row->ops->alloc(row, n * sizeof *d);
  assert_non_null(d);
  row->ops->to_dev(row, d, v, n * sizeof *d);
  return d;
}

/* |a - b| <= tol * max(|a|, floor) for every element; tol 0: bitwise. */
static void assert_near(const float *a, const float *b, size_t n, double tol,
                        double floor, const char *what) {
  if (tol == 0.0) {
    assert_memory_equal(a, b, n * sizeof *a);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i] - (double)b[i]) >
        tol * fmax(fabs((double)a[i]), floor))
      fail_msg("%s[%zu]: %.9g vs %.9g (tolerance %g)", what, i, (double)a[i],
               (double)b[i], tol);
}

#define TN 1000 /* elements of the step-tail tests (several blocks) */
#define TB 40   /* samples of the loss test */
#define TC 10   /* classes of the loss test */

/* The step's tail on the row against the CPU row: scale and the finite
 * check exactly; the loss (accumulated over two calls) within 1e-6
 * relative, dLoss/dlogits within 1e-6 of its largest element (CUDA's
 * expf is within 2 ulp, glibc's correctly rounded), the correct count
 * exactly; three steps of each optimiser: sgd and adamw elementwise in
 * the same operations (-fmad=false, IEEE sqrt and division), within 1e-6
 * relative (floor 1e-3); lamb within 1e-5 relative (its two norms are
 * summed in another order, which may move the float trust ratio by an
 * ulp). The stand-in row (CPU arithmetic) must match bit for bit. */
static void test_step_tail_matches_cpu(void **state) {
  (void)state;
  compute row;
  open_gpu_or_skip(&row);
  int fake = strcmp(row.ops->name, "cuda") != 0;
  const compute_ops *o = row.ops, *h = compute_cpu()->ops;
  compute *cpu = compute_cpu();
  rng r;
  rng_seed(&r, 11);
  static float v[TN], w[TN], back[TN];
  for (int i = 0; i < TN; i++)
    v[i] = (float)rng_normal(&r);

  /* scale and finite */
  float *dv = row_floats(&row, v, TN);
  memcpy(w, v, sizeof w);
  h->scale(cpu, w, TN, 0.25f);
  o->scale(&row, dv, TN, 0.25f);
  host_copy(&row, dv, back, TN);
  assert_memory_equal(w, back, sizeof w); /* a power of two: exact */
  assert_int_equal(o->finite(&row, dv, TN), 1);
  assert_int_equal(o->finite(&row, dv, 0), 1);
  float bad[2] = {INFINITY, NAN};
  for (int k = 0; k < 2; k++) {
    o->to_dev(&row, dv + 777, &bad[k], sizeof(float));
    assert_int_equal(o->finite(&row, dv, TN), 0);
    assert_int_equal(o->finite(&row, dv, 777), 1); /* before it */
    assert_int_equal(h->finite(cpu, &bad[k], 1), 0);
  }

  /* the loss */
  static float z[TB * TC], dc[TB * TC], dg[TB * TC];
  uint8_t y[TB];
  for (int i = 0; i < TB * TC; i++)
    z[i] = (float)(3.0 * rng_normal(&r));
  for (int i = 0; i < TB; i++)
    y[i] = (uint8_t)rng_below(&r, TC);
  double ac[2] = {0.0, 0.0}, ag[2] = {0.0, 0.0};
  float *dz = row_floats(&row, z, TB * TC), *dd = row_floats(&row, z, TB * TC);
  uint8_t *dy = o->alloc(&row, TB);
  double *da = o->alloc(&row, sizeof ag);
  assert_non_null(dy);
  assert_non_null(da);
  o->to_dev(&row, dy, y, TB);
  o->to_dev(&row, da, ag, sizeof ag);
  for (int k = 0; k < 2; k++) {
    h->xent(cpu, z, y, TB, TC, dc, ac);
    o->xent(&row, dz, dy, TB, TC, dd, da);
  }
  assert_int_equal(o->to_host(&row, ag, da, sizeof ag), 0);
  host_copy(&row, dd, dg, TB * TC);
  assert_true(ac[0] > 0.0);
  assert_true(fabs(ac[0] - ag[0]) <= (fake ? 0.0 : 1e-6 * ac[0]));
  assert_true(ac[1] == ag[1]);
  assert_true(ac[1] >= 2.0 && ac[1] <= 2.0 * TB && fmod(ac[1], 2.0) == 0.0);
  double big = 0.0;
  for (int i = 0; i < TB * TC; i++)
    big = fmax(big, fabs((double)dc[i]));
  assert_near(dc, dg, TB * TC, fake ? 0.0 : 1e-6, big, "dlogits");

  /* three steps of each optimiser from the same state and gradients */
  static float g[TN], p0[TN], pc[TN], mc[TN], vc[TN], tmp[TN];
  for (int i = 0; i < TN; i++) {
    g[i] = (float)(0.01 * rng_normal(&r));
    p0[i] = (float)(0.1 * rng_normal(&r));
  }
  float *dg_ = row_floats(&row, g, TN);
  const optim_kind kinds[3] = {OPTIM_SGD, OPTIM_ADAMW, OPTIM_LAMB};
  const char *const names[3] = {"sgd", "adamw", "lamb"};
  for (int k = 0; k < 3; k++) {
    optim_config cfg = optim_defaults(kinds[k]);
    cfg.weight_decay = 0.01f;
    optim oc;
    assert_int_equal(optim_init(&oc, &cfg, TN), 0);
    memcpy(pc, p0, sizeof pc);
    memset(mc, 0, sizeof mc);
    memset(vc, 0, sizeof vc);
    float *dp = row_floats(&row, p0, TN), *dm = row_floats(&row, mc, TN),
          *dvv = row_floats(&row, vc, TN);
    for (int s = 0; s < 3; s++) {
      optim_begin_step(&oc);
      optim_args a = optim_args_of(&oc, 1e-2f, 1);
      h->optim(cpu, &a, pc, g, mc, vc, TN);
      o->optim(&row, &a, dp, dg_, dm, kinds[k] == OPTIM_SGD ? NULL : dvv, TN);
    }
    host_copy(&row, dp, tmp, TN);
    assert_int_equal(compute_failed(&row), 0);
    double tol = fake ? 0.0 : kinds[k] == OPTIM_LAMB ? 1e-5 : 1e-6;
    assert_near(pc, tmp, TN, tol, 1e-3, names[k]);
    /* and they moved: the comparison is not of untouched weights */
    assert_true(memcmp(pc, p0, sizeof pc) != 0);
    /* optim_update (the host trainer's path) is the same arithmetic */
    optim ou;
    assert_int_equal(optim_init(&ou, &cfg, TN), 0);
    memcpy(tmp, p0, sizeof tmp);
    for (int s = 0; s < 3; s++) {
      optim_begin_step(&ou);
      optim_update(&ou, tmp, g, 0, TN, 1e-2f, 1);
    }
    assert_memory_equal(pc, tmp, sizeof tmp);
    optim_free(&ou);
    optim_free(&oc);
    o->release(&row, dp);
    o->release(&row, dm);
    o->release(&row, dvv);
  }
  void *rows[] = {dv, dz, dd, dy, da, dg_};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
    o->release(&row, rows[i]);
  compute_close(&row);
}

#define GM 24 /* the 16-bit GEMM test's shape: M x K times K x N */
#define GK 64
#define GN 40

/* The row's GEMM after set_lowp(bf16 | fp16) (16-bit inputs, float32
 * accumulation on the CUDA row) against cblas_sgemm on the same values,
 * rounded to that type first (what the CNN hands it), for the four
 * transposition cases and beta 0 and 1: within 1e-5 of the largest
 * |C|. The products of 16-bit values are exact in float32, so only the
 * order of the K sums differs (bounded by K 2^-24 sum |a b|, about 6e-6
 * of |C| here). Bit for bit on the stand-in row (set_lowp does nothing
 * there). set_lowp(fp32) then gives float32 inputs again. */
static void test_gemm16_matches_cpu(void **state) {
  (void)state;
  compute row;
  open_gpu_or_skip(&row);
  int fake = strcmp(row.ops->name, "cuda") != 0;
  const compute_ops *o = row.ops;
  compute *cpu = compute_cpu();
  rng r;
  rng_seed(&r, 17);
  static float A[GM * GK], B[GK * GN], C0[GM * GN], Cc[GM * GN], Cg[GM * GN];
  const lowp_kind kinds[2] = {LOWP_BF16, LOWP_FP16};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < GM * GK; i++)
      A[i] = (float)rng_normal(&r);
    for (int i = 0; i < GK * GN; i++)
      B[i] = (float)rng_normal(&r);
    for (int i = 0; i < GM * GN; i++)
      C0[i] = (float)rng_normal(&r);
    lowp_round(A, GM * GK, kinds[k]);
    lowp_round(B, GK * GN, kinds[k]);
    o->set_lowp(&row, kinds[k]);
    float *dA = row_floats(&row, A, GM * GK),
          *dB = row_floats(&row, B, GK * GN);
    float *dC = row_floats(&row, C0, GM * GN);
    for (int t = 0; t < 8; t++) {
      int ta = t & 1, tb = (t >> 1) & 1;
      float beta = (t >> 2) ? 1.0f : 0.0f;
      /* A read as M x K (lda K) or, transposed, as K x M (lda M) */
      int lda = ta ? GM : GK, ldb = tb ? GK : GN;
      memcpy(Cc, C0, sizeof Cc);
      o->to_dev(&row, dC, C0, sizeof C0);
      cpu->ops->gemm(cpu, ta, tb, GM, GN, GK, 1.0f, A, lda, B, ldb, beta, Cc,
                     GN);
      o->gemm(&row, ta, tb, GM, GN, GK, 1.0f, dA, lda, dB, ldb, beta, dC, GN);
      host_copy(&row, dC, Cg, GM * GN);
      assert_int_equal(compute_failed(&row), 0);
      if (fake)
        assert_memory_equal(Cc, Cg, sizeof Cc);
      else
        assert_close(Cc, Cg, GM * GN, 1e-5, "16-bit gemm");
    }
    o->set_lowp(&row, LOWP_FP32);
    o->release(&row, dA);
    o->release(&row, dB);
    o->release(&row, dC);
  }
  compute_close(&row);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_names),
      cmocka_unit_test(test_cuda_matches_cpu),
      cmocka_unit_test(test_step_tail_matches_cpu),
      cmocka_unit_test(test_gemm16_matches_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
