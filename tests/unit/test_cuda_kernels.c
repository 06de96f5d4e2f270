/*
 * test_cuda_kernels.c - the cuda backend's kernels (device/cuda/kernels.cu)
 * run on the CPU through tests/gpu/cuda_emu.h (HKC_EMULATE): every block
 * and thread of each launch in turn, on host memory. Checks what no GPU is
 * needed for: the split of a batch into launches of HKC_ITEMS_PER_LAUNCH
 * items, the items' block ranges, the grid-stride loops, the head /
 * 16-byte vector / tail split and the choice of vector width for every
 * relative alignment of src and dst; byte for byte against hk_elem_copy
 * (device/elem.h) with guard bytes around every item, for every dtype pair,
 * scale and divisor, at several grid sizes (target_blocks); fill; and the
 * int16 <-> int32 conversion of the communicator's int16 reductions.
 * Under ASan (test.sh) an index past an item's end is an error too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/gpu/cuda_emu.h"

#include "device/cuda/kernels.h"
#include "device/elem.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

static size_t dsize(int dtype) {
  static const size_t s[] = {2, 2, 4, 8, 1, 1, 4, 8, 2, 1};
  return s[dtype];
}

static const int pairs[][2] = {
    {HK_ELEM_F16, HK_ELEM_F16}, {HK_ELEM_BF16, HK_ELEM_BF16},
    {HK_ELEM_F32, HK_ELEM_F32}, {HK_ELEM_F64, HK_ELEM_F64},
    {HK_ELEM_I8, HK_ELEM_I8},   {HK_ELEM_U8, HK_ELEM_U8},
    {HK_ELEM_I32, HK_ELEM_I32}, {HK_ELEM_I64, HK_ELEM_I64},
    {HK_ELEM_I16, HK_ELEM_I16}, {HK_ELEM_BOOL, HK_ELEM_BOOL},
    {HK_ELEM_F32, HK_ELEM_F16}, {HK_ELEM_F32, HK_ELEM_BF16},
    {HK_ELEM_F16, HK_ELEM_F32}, {HK_ELEM_BF16, HK_ELEM_F32},
};

/* One batch: items at element offsets 0..7 (src) and a different walk
 * (dst) from 16-byte boundaries, 16 guard bytes apart; exact compare of
 * the whole destination, gaps included. Sources are random bits (NaNs
 * included): the host runs the same arithmetic, so every bit must match. */
static void run_batch(int sdt, int ddt, double scale, int divisor,
                      const size_t *counts, size_t nitems, int target_blocks) {
  size_t ssz = dsize(sdt), dsz = dsize(ddt);
  size_t *soff = calloc(nitems, sizeof *soff);
  size_t *doff = calloc(nitems, sizeof *doff);
  size_t sbytes = 16, dbytes = 16;
  for (size_t k = 0; k < nitems; k++) {
    sbytes = (sbytes + 15) / 16 * 16 + (k % 8) * ssz;
    dbytes = (dbytes + 15) / 16 * 16 + ((k * 5 + k / 8) % 8) * dsz;
    soff[k] = sbytes;
    doff[k] = dbytes;
    sbytes += counts[k] * ssz + 16;
    dbytes += counts[k] * dsz + 16;
  }
  /* 16-byte aligned buffers, as cudaMalloc's are (256) */
  uint8_t *src = aligned_alloc(256, (sbytes + 255) / 256 * 256);
  uint8_t *got = aligned_alloc(256, (dbytes + 255) / 256 * 256);
  uint8_t *want = malloc(dbytes);
  for (size_t i = 0; i < sbytes; i++)
    src[i] = (uint8_t)(rnd() >> 24);
  memset(got, 0xA5, dbytes);
  memset(want, 0xA5, dbytes);
  hk_dev_copy *items = calloc(nitems, sizeof *items);
  for (size_t k = 0; k < nitems; k++) {
    /* a 16-bit average's pre-division multiplied back (elem.h) */
    const double pre = divisor > 1 ? 4.0 : 1.0;
    items[k] = (hk_dev_copy){got + doff[k], src + soff[k], counts[k],
                             scale,         divisor,       pre};
    for (size_t i = 0; i < counts[k]; i++)
      hk_elem_copy(want + doff[k], src + soff[k], i, sdt, ddt, scale, divisor,
                   (float)pre);
  }
  assert_int_equal(hkc_batch_copy(items, nitems, sdt, ddt, target_blocks, NULL),
                   cudaSuccess);
  if (memcmp(got, want, dbytes) != 0)
    for (size_t b = 0; b < dbytes; b++)
      if (got[b] != want[b]) {
        size_t k = 0;
        while (k + 1 < nitems && doff[k + 1] <= b)
          k++;
        fail_msg("dtype %d -> %d, scale %g, divisor %d, %d blocks: byte %zu "
                 "(item %zu of %zu: count %zu, src %% 16 = %zu, dst %% 16 = "
                 "%zu, starts at %zu): 0x%02x, want 0x%02x",
                 sdt, ddt, scale, divisor, target_blocks, b, k, nitems,
                 counts[k], soff[k] % 16, doff[k] % 16, doff[k], got[b],
                 want[b]);
      }
  free(items);
  free(src);
  free(got);
  free(want);
  free(soff);
  free(doff);
}

static void test_batch_copy_bits(void **state) {
  (void)state;
  static const double scales[] = {1.0, 0.5, 0.1, -3.0};
  static const int divisors[] = {0, 1, 3, 8};
  static const size_t counts[] = {0,  1,  2,  3,  7,  8,   9,   15,   16,  17,
                                  31, 33, 63, 64, 65, 100, 257, 1023, 4099};
  const size_t ncounts = sizeof counts / sizeof *counts;
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
    for (size_t a = 0; a < sizeof scales / sizeof *scales; a++)
      for (size_t b = 0; b < sizeof divisors / sizeof *divisors; b++)
        run_batch(pairs[p][0], pairs[p][1], scales[a], divisors[b], counts,
                  ncounts, (int)(1 + (a * 4 + b) % 5 * 7));
}

/* More items than a launch takes; a few large items over many blocks, and
 * over one block (so one block's grid-stride loop walks them). */
static void test_batch_copy_shapes(void **state) {
  (void)state;
  size_t many[150];
  for (size_t k = 0; k < 150; k++)
    many[k] = (k * 37) % 300;
  size_t big[3] = {200003, 5, 65537};
  static const int blocks[] = {1, 2, 13, 64};
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
    for (size_t g = 0; g < sizeof blocks / sizeof *blocks; g++) {
      run_batch(pairs[p][0], pairs[p][1], 1.0, 0, many, 150, blocks[g]);
      run_batch(pairs[p][0], pairs[p][1], 0.5, 3, many, 150, blocks[g]);
      run_batch(pairs[p][0], pairs[p][1], 1.0, 0, big, 3, blocks[g]);
      run_batch(pairs[p][0], pairs[p][1], 2.0, 4, big, 3, blocks[g]);
    }
  /* a mixed batch: plain and scaled items of one dtype (two launches) */
  size_t c[4] = {1000, 77, 4096, 3};
  run_batch(HK_ELEM_F32, HK_ELEM_F32, 1.0, 0, c, 4, 8);
  /* nothing to do */
  assert_int_equal(hkc_batch_copy(NULL, 0, HK_ELEM_F32, HK_ELEM_F32, 8, NULL),
                   cudaSuccess);
}

static void test_fill(void **state) {
  (void)state;
  static const size_t counts[] = {1, 2, 3, 15, 16, 17, 255, 1000, 65537};
  static const unsigned char value[8] = {0x11, 0x22, 0x33, 0x44,
                                         0x55, 0x66, 0x77, 0x88};
  for (int dt = 0; dt <= HK_ELEM_BOOL; dt++)
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
      for (size_t off = 0; off < 9; off++)
        for (int blocks = 1; blocks <= 64; blocks *= 8) {
          size_t esz = dsize(dt), n = counts[k];
          size_t bytes = (n + off + 8) * esz;
          uint8_t *got = aligned_alloc(256, (bytes + 255) / 256 * 256);
          uint8_t *want = malloc(bytes);
          memset(got, 0xA5, bytes);
          memset(want, 0xA5, bytes);
          for (size_t i = 0; i < n; i++)
            memcpy(want + (off + i) * esz, value, esz);
          assert_int_equal(
              hkc_fill(got + off * esz, n, (int)esz, value, blocks, NULL),
              cudaSuccess);
          if (memcmp(got, want, bytes))
            fail_msg("fill: dtype %d count %zu offset %zu blocks %d", dt, n,
                     off, blocks);
          free(got);
          free(want);
        }
}

/* The communicator's int16 reductions run in int32 (cuda.c): widening
 * sign-extends, narrowing keeps the low 16 bits (a wrapped int32 sum of
 * int16 values narrows to the wrapped int16 sum), at every grid size,
 * with guard elements around. */
static void test_int16_convert(void **state) {
  (void)state;
  static const size_t counts[] = {0, 1, 255, 256, 257, 4099, 100003};
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
    for (int blocks = 1; blocks <= 64; blocks *= 4) {
      const size_t n = counts[k];
      int16_t *h = malloc((n + 2) * 2), *back = malloc((n + 2) * 2);
      int32_t *w = malloc((n + 2) * 4), *sum = malloc((n + 2) * 4);
      for (size_t i = 0; i < n + 2; i++)
        h[i] = (int16_t)(rnd() >> 40);
      memset(w, 0xA5, (n + 2) * 4);
      assert_int_equal(hkc_int16_convert(w + 1, h + 1, n, 1, blocks, NULL),
                       cudaSuccess);
      assert_true(w[0] == (int32_t)0xA5A5A5A5 &&
                  w[n + 1] == (int32_t)0xA5A5A5A5);
      for (size_t i = 1; i <= n; i++) {
        if (w[i] != h[i])
          fail_msg("widen: element %zu: %d, want %d", i, w[i], h[i]);
        sum[i] = (int32_t)((uint32_t)w[i] * 3u + 40000u); /* beyond int16 */
      }
      memset(back, 0x5A, (n + 2) * 2);
      assert_int_equal(hkc_int16_convert(back + 1, sum + 1, n, 0, blocks, NULL),
                       cudaSuccess);
      assert_true(back[0] == (int16_t)0x5A5A && back[n + 1] == (int16_t)0x5A5A);
      for (size_t i = 1; i <= n; i++) {
        int16_t want = (int16_t)(uint16_t)((uint16_t)h[i] * 3u + 40000u);
        if (back[i] != want)
          fail_msg("narrow: element %zu: %d, want %d", i, back[i], want);
      }
      free(h);
      free(back);
      free(w);
      free(sum);
    }
}

static void test_occupancy(void **state) {
  (void)state;
  int n = 0;
  assert_int_equal(hkc_occupancy(&n), cudaSuccess);
  assert_int_equal(n, 8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_copy_bits),
      cmocka_unit_test(test_batch_copy_shapes),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_int16_convert),
      cmocka_unit_test(test_occupancy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
