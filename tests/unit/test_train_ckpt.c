/*
 * test_train_ckpt.c - the trainer's checkpoint format (ckpt.h) and metrics
 * CSV (metrics.h): a checkpoint reads back bit for bit; a truncated,
 * lengthened, bit-flipped, foreign, wrong-version or other-settings file is
 * refused with the path and the reason and leaves the reader's buffers
 * untouched (so is a version-1 file, and a loss scaler or plateau state
 * out of range); writing leaves no temporary file; the CSV has its header and
 * rows, and a resumed run appends without a second header.
 */
#include <dirent.h>
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

#include "ckpt.h"
#include "metrics.h"

#define NP 5

static char dir[256];

static const char settings[] = "model=mlp 3-2\nnp=2\nbatch=4\n";

typedef struct arrays {
  uint64_t rng[3];
  float params[NP], m[NP], v[NP];
} arrays;

static ckpt_state state_over(arrays *a, const char *set) {
  ckpt_state s = {0};
  s.settings = set;
  s.n_rng = 3;
  s.rng = a->rng;
  s.n_params = NP;
  s.params = a->params;
  s.has_v = 1;
  s.m = a->m;
  s.v = a->v;
  return s;
}

static void write_sample(void) {
  arrays a;
  for (int i = 0; i < NP; i++) {
    a.params[i] = 0.5f * (float)i - 1.0f;
    a.m[i] = 1e-3f * (float)i;
    a.v[i] = 1e-6f * (float)(i + 1);
  }
  a.rng[0] = 0x0123456789abcdefull;
  a.rng[1] = 0xffffffffffffffffull;
  a.rng[2] = 7;
  ckpt_state s = state_over(&a, settings);
  s.epoch = 3;
  s.step = 123456789012ull;
  s.opt_step = 99;
  s.b1_t = 0.9 * 0.9;
  s.b2_t = 0.999;
  s.loss_scale = 32768.0f;
  s.scaler_good = 1999;
  s.scaler_skipped = 3;
  s.plateau_best = 0.3125;
  s.plateau_bad = 2;
  s.plateau_scale = 0.25f;
  s.plateau_reductions = 2;
  char err[512];
  if (ckpt_write(dir, &s, err, sizeof err) != 0)
    fail_msg("%s", err);
}

static char *path(void) {
  static char p[300];
  snprintf(p, sizeof p, "%s/" CKPT_FILE, dir);
  return p;
}

static int setup(void **state) {
  (void)state;
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/hk_test_ckpt.XXXXXX",
           t && t[0] == '/' ? t : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
}

static void test_roundtrip(void **state) {
  (void)state;
  /* A killed writer's temporary file: removed by the next write. */
  char stale[320];
  snprintf(stale, sizeof stale, "%s.tmp", path());
  FILE *f = fopen(stale, "w");
  assert_non_null(f);
  fputs("half", f);
  fclose(f);
  write_sample();
  arrays a;
  memset(&a, 0xAB, sizeof a);
  ckpt_state s = state_over(&a, settings);
  char err[512];
  if (ckpt_read(dir, &s, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(s.epoch, 3);
  assert_true(s.step == 123456789012ull);
  assert_int_equal(s.opt_step, 99);
  assert_true(s.b1_t == 0.9 * 0.9 && s.b2_t == 0.999);
  assert_true(s.loss_scale == 32768.0f);
  assert_true(s.scaler_good == 1999 && s.scaler_skipped == 3);
  assert_true(s.plateau_best == 0.3125 && s.plateau_scale == 0.25f);
  assert_int_equal(s.plateau_bad, 2);
  assert_int_equal(s.plateau_reductions, 2);
  assert_true(a.rng[0] == 0x0123456789abcdefull &&
              a.rng[1] == 0xffffffffffffffffull && a.rng[2] == 7);
  for (int i = 0; i < NP; i++) {
    assert_true(a.params[i] == 0.5f * (float)i - 1.0f);
    assert_true(a.m[i] == 1e-3f * (float)i);
    assert_true(a.v[i] == 1e-6f * (float)(i + 1));
  }
  /* Only the checkpoint is left in the directory: no temporary file. */
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      files++;
      assert_string_equal(e->d_name, CKPT_FILE);
    }
  closedir(d);
  assert_int_equal(files, 1);
  /* The size the format says: 24 + payload. */
  struct stat st;
  assert_int_equal(stat(path(), &st), 0);
  size_t payload =
      4 + strlen(settings) + 16 + 8 * 3 + 40 + 8 + 4 * NP + 28 + 8 * NP;
  assert_int_equal((size_t)st.st_size, CKPT_HEADER + payload);
}

/* Reads with the sample's expectations; asserts refusal with `why` and
 * that nothing was copied. */
static void expect_refused(const char *set, int has_v, uint64_t n_params,
                           const char *why) {
  arrays a;
  memset(&a, 0xAB, sizeof a);
  arrays before = a;
  ckpt_state s = state_over(&a, set);
  s.has_v = has_v;
  s.n_params = n_params;
  char err[1024] = "";
  assert_int_equal(ckpt_read(dir, &s, err, sizeof err), -1);
  char want[1200];
  snprintf(want, sizeof want, "%s: checkpoint refused: %s", path(), why);
  if (strncmp(err, want, strlen(want)) != 0)
    fail_msg("message '%s'\nshould start '%s'", err, want);
  assert_memory_equal(&a, &before, sizeof a);
  assert_int_equal(s.epoch, 0);
}

static void rewrite(long keep, long flip_at, const char *append) {
  FILE *f = fopen(path(), "rb");
  assert_non_null(f);
  static uint8_t b[4096];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (keep >= 0)
    n = (size_t)keep;
  if (flip_at >= 0)
    b[flip_at] ^= 0x10;
  f = fopen(path(), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  if (append)
    fputs(append, f);
  assert_int_equal(fclose(f), 0);
}

/* Writes the sample with the given loss and plateau scales; expects the
 * refusal `why`. */
static void bad_schedule(float loss_scale, float plateau_scale,
                         const char *why) {
  arrays a = {0};
  ckpt_state s = state_over(&a, settings);
  s.loss_scale = loss_scale;
  s.plateau_scale = plateau_scale;
  char err[512];
  if (ckpt_write(dir, &s, err, sizeof err) != 0)
    fail_msg("%s", err);
  expect_refused(settings, 1, NP, why);
}

static void test_refusals(void **state) {
  (void)state;
  write_sample();
  expect_refused("model=mlp 3-2\nnp=4\nbatch=4\n", 1, NP,
                 "settings differ: np is 2 in the checkpoint, 4 in this run");
  expect_refused("model=mlp 3-2\nnp=2\nbatch=4\nprecision=fp32\n", 1, NP,
                 "settings differ: precision is absent in the checkpoint, "
                 "fp32 in this run");
  expect_refused("model=mlp 3-2\nnp=2\n", 1, NP,
                 "settings differ: batch is 4 in the checkpoint, absent in "
                 "this run");
  expect_refused(settings, 1, NP + 1, "5 parameters, this run's model has 6");
  expect_refused(settings, 0, NP, "optimiser state has a second moment");

  rewrite(100, -1, NULL); /* truncated */
  expect_refused(settings, 1, NP, "truncated: the header declares a payload");
  write_sample();
  rewrite(10, -1, NULL); /* inside the header */
  expect_refused(settings, 1, NP, "truncated: 10 bytes, shorter than the");
  write_sample();
  rewrite(-1, -1, "x"); /* a byte too many */
  expect_refused(settings, 1, NP, "wrong size: the header declares");
  write_sample();
  rewrite(-1, CKPT_HEADER + 40, NULL); /* one bit in the payload */
  expect_refused(settings, 1, NP, "CRC32 mismatch");
  write_sample();
  rewrite(-1, 2, NULL); /* the magic */
  expect_refused(settings, 1, NP, "bad magic: not an hk checkpoint");
  write_sample();
  rewrite(-1, 8, NULL); /* the version: 2 ^ 0x10 */
  expect_refused(settings, 1, NP,
                 "unsupported version 18 (this trainer reads 2)");
  write_sample();
  /* A version-1 file (no scaler and plateau state): refused by version. */
  {
    FILE *f = fopen(path(), "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fputc(1, f), 1);
    assert_int_equal(fclose(f), 0);
  }
  expect_refused(settings, 1, NP,
                 "unsupported version 1 (this trainer reads 2)");
  write_sample();
  /* Values a sane writer never stores, under a valid CRC. */
  bad_schedule(-1.0f, 1.0f, "loss scale -1 is not a finite positive number");
  bad_schedule(65536.0f, 2.0f, "plateau state out of range (scale 2,");
  bad_schedule(65536.0f, 0.0f, "plateau state out of range (scale 0,");
  unlink(path());
  expect_refused(settings, 1, NP, "cannot open: No such file or directory");
}

static void test_write_errors(void **state) {
  (void)state;
  /* The directory is a file: named, nothing written. */
  char file[300], err[512] = "";
  snprintf(file, sizeof file, "%s/plain", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  arrays a = {0};
  ckpt_state s = state_over(&a, settings);
  assert_int_equal(ckpt_write(file, &s, err, sizeof err), -1);
  char want[400];
  snprintf(want, sizeof want,
           "%s: cannot use as checkpoint directory: not a directory", file);
  assert_string_equal(err, want);
  /* Below a file: mkdir's reason. */
  char below[340];
  snprintf(below, sizeof below, "%s/ck", file);
  assert_int_equal(ckpt_write(below, &s, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "%s: cannot use as checkpoint directory: Not a directory", below);
  assert_string_equal(err, want);
  unlink(file);
}

static char *slurp(const char *p) {
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  static char b[4096];
  size_t n = fread(b, 1, sizeof b - 1, f);
  b[n] = '\0';
  fclose(f);
  return b;
}

static void test_metrics_csv(void **state) {
  (void)state;
  char p[300], err[512];
  snprintf(p, sizeof p, "%s/m.csv", dir);
  metrics_file m;
  assert_int_equal(metrics_open(&m, p, 0, err, sizeof err), 0);
  metrics_row r = {1, 0.5, 0.75, 0.8125, 1234.4, 0.001, 0.25, 0.002};
  assert_int_equal(metrics_write(&m, &r, err, sizeof err), 0);
  assert_int_equal(metrics_close(&m, err, sizeof err), 0);
  assert_string_equal(slurp(p), METRICS_HEADER "\n"
                                               "1,0.500000,0.7500,0.8125,1234,"
                                               "0.0010,0.2500,0.002\n");
  /* Appending (a resumed run) adds rows, not a header. */
  assert_int_equal(metrics_open(&m, p, 1, err, sizeof err), 0);
  r.epoch = 2;
  assert_int_equal(metrics_write(&m, &r, err, sizeof err), 0);
  assert_int_equal(metrics_close(&m, err, sizeof err), 0);
  const char *text = slurp(p);
  assert_non_null(strstr(text, "\n2,0.500000,"));
  assert_null(strstr(text + 1, "epoch,"));
  /* Append to a file that does not exist yet: it gets the header. */
  unlink(p);
  assert_int_equal(metrics_open(&m, p, 1, err, sizeof err), 0);
  assert_int_equal(metrics_close(&m, err, sizeof err), 0);
  assert_string_equal(slurp(p), METRICS_HEADER "\n");
  unlink(p);
  snprintf(p, sizeof p, "%s/absent/m.csv", dir);
  assert_int_equal(metrics_open(&m, p, 0, err, sizeof err), -1);
  char want[400];
  snprintf(want, sizeof want,
           "%s: cannot open the metrics file: No such file or directory", p);
  assert_string_equal(err, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_write_errors),
      cmocka_unit_test(test_metrics_csv),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
