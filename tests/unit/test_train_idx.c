/*
 * test_train_idx.c - the trainer's data loading (examples/train/idx.c and
 * data.c) on IDX files generated here, gzip'ed with zlib or plain: the
 * values loaded, the limit, and every malformed case with the message it
 * must give (path first, then the problem).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "data.h"
#include "idx.h"

static char dir[96];

/* Writes an IDX header (type u8, ndims, dims) and `n` data bytes, with
 * byte k of the data = (k * 7 + 3) mod 256. gz: 1 gzip, 0 plain. Returns
 * the full path (static buffer). */
static const char *write_idx(const char *name, uint32_t magic,
                             const uint32_t *dims, int ndims, size_t n,
                             int gz) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t len = 4 + 4 * (size_t)ndims + n;
  uint8_t *b = malloc(len);
  assert_non_null(b);
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(magic >> (24 - 8 * i));
  for (int d = 0; d < ndims; d++)
    for (int i = 0; i < 4; i++)
      b[4 + 4 * d + i] = (uint8_t)(dims[d] >> (24 - 8 * i));
  for (size_t k = 0; k < n; k++)
    b[4 + 4 * (size_t)ndims + k] = (uint8_t)(k * 7 + 3);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, b, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
  }
  free(b);
  return path;
}

static const uint32_t img_dims[2] = {28, 28};

static const char *write_images(const char *name, uint32_t count,
                                size_t records_written, int gz) {
  uint32_t dims[3] = {count, 28, 28};
  return write_idx(name, 0x00000803, dims, 3, records_written * 784, gz);
}

/* Labels k mod 10 (all valid classes). */
static const char *write_labels(const char *name, uint32_t count, int gz) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t *b = malloc(8 + (size_t)count);
  assert_non_null(b);
  uint8_t head[8] = {0,
                     0,
                     8,
                     1,
                     (uint8_t)(count >> 24),
                     (uint8_t)(count >> 16),
                     (uint8_t)(count >> 8),
                     (uint8_t)count};
  memcpy(b, head, 8);
  for (uint32_t k = 0; k < count; k++)
    b[8 + k] = (uint8_t)(k % 10);
  gzFile f = gzopen(path, gz ? "wb" : "wbT"); /* T: no compression */
  assert_non_null(f);
  assert_int_equal(gzwrite(f, b, 8 + count), (int)(8 + count));
  assert_int_equal(gzclose(f), Z_OK);
  free(b);
  return path;
}

static long file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (long)st.st_size;
}

static void cut_file(const char *path, long keep) {
  assert_int_equal(truncate(path, keep), 0);
}

/* Asserts that loading path fails with a message starting with the path
 * and containing `what`. */
static void expect_fail(const char *path, int ndims, const char *what) {
  idx_array a;
  char err[512];
  memset(&a, 0x5a, sizeof a);
  assert_int_equal(idx_load(path, ndims, ndims > 1 ? img_dims : NULL, 0, &a,
                            err, sizeof err),
                   -1);
  assert_null(a.data);
  assert_int_equal(a.count, 0);
  if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, what))
    fail_msg("message '%s' should name '%s' and say '%s'", err, path, what);
}

static int setup(void **state) {
  (void)state;
  /* under $TMPDIR: scripts/test.sh removes it however the run ends */
  snprintf(dir, sizeof dir, "%s/hk_test_train_idx.XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR")
                                                          : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
}

static void test_loads_gz_and_plain(void **state) {
  (void)state;
  for (int gz = 0; gz <= 1; gz++) {
    const char *p = write_images("img", 5, 5, gz);
    idx_array a;
    char err[512] = "";
    assert_int_equal(idx_load(p, 3, img_dims, 0, &a, err, sizeof err), 0);
    assert_int_equal(a.count, 5);
    assert_int_equal(a.file_count, 5);
    assert_int_equal(a.record_size, 784);
    for (size_t k = 0; k < 5 * 784; k++)
      assert_int_equal(a.data[k], (uint8_t)(k * 7 + 3));
    idx_free(&a);
    assert_null(a.data);
  }
}

static void test_limit_reads_a_prefix(void **state) {
  (void)state;
  /* The header declares 9 records but only 4 are present: a limit of 3
   * never reaches the cut, all records do. */
  const char *p = write_images("img", 9, 4, 1);
  idx_array a;
  char err[512];
  assert_int_equal(idx_load(p, 3, img_dims, 3, &a, err, sizeof err), 0);
  assert_int_equal(a.count, 3);
  assert_int_equal(a.file_count, 9);
  assert_int_equal(a.data[784 * 3 - 1], (uint8_t)((784 * 3 - 1) * 7 + 3));
  idx_free(&a);
  expect_fail(p, 3,
              "truncated: the header declares 9 records of 784 bytes, "
              "the file ends after 4 of them");
  /* A limit above the count loads everything. */
  p = write_labels("lab", 6, 1);
  assert_int_equal(idx_load(p, 1, NULL, 100, &a, err, sizeof err), 0);
  assert_int_equal(a.count, 6);
  idx_free(&a);
}

static void test_missing(void **state) {
  (void)state;
  char p[256];
  snprintf(p, sizeof p, "%s/nope.gz", dir);
  expect_fail(p, 1, "cannot open: No such file or directory");
}

static void test_bad_magic(void **state) {
  (void)state;
  uint32_t d1[1] = {4};
  const char *p = write_idx("lab", 0x00000803, d1, 1, 4, 1);
  expect_fail(p, 1,
              "bad magic 0x00000803 (expected 0x00000801: unsigned "
              "bytes, 1 dimension)");
  p = write_idx("lab", 0x12345678, d1, 1, 4, 0);
  expect_fail(p, 1, "bad magic 0x12345678");
  /* Bytes that start like gzip (1f 8b) but end at once read as a gzip
   * stream cut short. */
  p = write_idx("lab", 0x1f8b0801, d1, 1, 4, 0);
  expect_fail(p, 1, "truncated: 0 of the 4 magic bytes");
  p = write_idx("lab", 0x00000c01, d1, 1, 4, 1); /* type int32 */
  expect_fail(p, 1, "bad magic 0x00000c01");
  /* Labels where images are expected. */
  p = write_labels("img", 3, 1);
  expect_fail(p, 3,
              "bad magic 0x00000801 (expected 0x00000803: unsigned "
              "bytes, 3 dimensions)");
}

static void test_wrong_dims(void **state) {
  (void)state;
  uint32_t d[3] = {2, 28, 29};
  const char *p = write_idx("img", 0x00000803, d, 3, 2 * 28 * 29, 1);
  expect_fail(p, 3, "wrong dims 28x29 (expected 28x28)");
}

static void test_truncated(void **state) {
  (void)state;
  /* Plain files cut in the magic, in the header, in the data. */
  const char *p = write_images("img", 3, 3, 0);
  cut_file(p, 2);
  expect_fail(p, 3, "truncated: 2 of the 4 magic bytes");
  p = write_images("img", 3, 3, 0);
  cut_file(p, 10);
  expect_fail(p, 3, "truncated: header ends after 10 of its 16 bytes");
  p = write_images("img", 3, 3, 0);
  cut_file(p, 16 + 784 + 100);
  expect_fail(p, 3, "the file ends after 1 of them");
  /* An empty file. */
  p = write_images("img", 3, 3, 0);
  cut_file(p, 0);
  expect_fail(p, 3, "truncated: 0 of the 4 magic bytes");
  /* A gzip stream cut short. */
  p = write_images("img", 3, 3, 1);
  cut_file(p, file_size(p) / 2);
  expect_fail(p, 3, "truncated:");
}

static void test_corrupt_gzip(void **state) {
  (void)state;
  const char *p = write_images("img", 3, 3, 1);
  /* Flip a bit of the CRC-32 in the gzip trailer (RFC 1952): the data
   * inflates but fails its check. */
  FILE *f = fopen(p, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, -8, SEEK_END), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, -8, SEEK_END), 0);
  fputc(c ^ 1, f);
  assert_int_equal(fclose(f), 0);
  expect_fail(p, 3, "corrupt gzip data: incorrect data check");
}

static void test_trailing_data(void **state) {
  (void)state;
  uint32_t d[1] = {4};
  const char *p = write_idx("lab", 0x00000801, d, 1, 5, 1);
  expect_fail(p, 1, "trailing data after 4 records");
}

/* ---- data_load: the four files together ---- */

static void write_set(uint32_t ntrain, uint32_t ntrain_labels, uint32_t ntest) {
  write_images(DATA_TRAIN_IMAGES, ntrain, ntrain, 1);
  write_labels(DATA_TRAIN_LABELS, ntrain_labels, 1);
  write_images(DATA_TEST_IMAGES, ntest, ntest, 1);
  write_labels(DATA_TEST_LABELS, ntest, 1);
}

static void expect_set_fail(const char *file, const char *what) {
  data_set d;
  char err[1024], path[256];
  assert_int_equal(data_load(dir, 0, 0, &d, err, sizeof err), -1);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, what))
    fail_msg("message '%s' should name '%s' and say '%s'", err, path, what);
}

static void test_set_loads(void **state) {
  (void)state;
  write_set(20, 20, 8);
  data_set ds;
  char err[1024] = "";
  if (data_load(dir, 12, 0, &ds, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(ds.train.n, 12);
  assert_int_equal(ds.test.n, 8);
  assert_int_equal(ds.train.labels[11], 1);
  assert_int_equal(ds.test.labels[7], 7);
  assert_int_equal(ds.train.images[784 + 1], (uint8_t)(785 * 7 + 3));
  data_free(&ds);
  assert_null(ds.train.images);

  /* Labels (k * 7 + 3) mod 256: record 1 holds 10, not a class. */
  uint32_t d[1] = {8};
  write_idx(DATA_TEST_LABELS, 0x00000801, d, 1, 8, 1);
  expect_set_fail(DATA_TEST_LABELS, "label 10 of record 1 is not a class");
}

static void test_set_count_mismatch(void **state) {
  (void)state;
  write_set(20, 19, 8);
  expect_set_fail(DATA_TRAIN_LABELS, "count mismatch: 19 labels, but "
                                     "train-images-idx3-ubyte.gz holds 20 "
                                     "images");
}

static void test_set_missing_file_and_dir(void **state) {
  (void)state;
  write_set(20, 20, 8);
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, DATA_TEST_IMAGES);
  assert_int_equal(unlink(path), 0);
  expect_set_fail(DATA_TEST_IMAGES, "cannot open: No such file or directory");

  data_set d;
  char err[1024];
  snprintf(path, sizeof path, "%s/absent", dir);
  assert_int_equal(data_load(path, 0, 0, &d, err, sizeof err), -1);
  assert_true(strncmp(err, path, strlen(path)) == 0);
  assert_non_null(strstr(err, "cannot read the data directory: No such file "
                              "or directory"));
  snprintf(path, sizeof path, "%s/%s", dir, DATA_TRAIN_IMAGES);
  assert_int_equal(data_load(path, 0, 0, &d, err, sizeof err), -1);
  assert_non_null(strstr(err, "not a directory"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loads_gz_and_plain),
      cmocka_unit_test(test_limit_reads_a_prefix),
      cmocka_unit_test(test_missing),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_wrong_dims),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_corrupt_gzip),
      cmocka_unit_test(test_trailing_data),
      cmocka_unit_test(test_set_loads),
      cmocka_unit_test(test_set_count_mismatch),
      cmocka_unit_test(test_set_missing_file_and_dir),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
