/*
 * w_half16 - 16-bit float sums and averages near the top of the range
 * (issue 13 item 6), at any np (the driver runs 16):
 *  1. every rank averaging float16 5000.0 (and 60000.0, whose sum over 16
 *     ranks is 15 times float16's largest value) gets that value up to the
 *     rounding of float16's partial sums (exactly, where the algorithm
 *     adds in pairs), on tensors large enough to span every ring segment,
 *     alone and fused; bfloat16 too;
 *  2. every rank summing float16 5000.0 over two steps gets +inf (the sum
 *     does overflow: hk says so once, which the driver counts).
 * Prints "half16 ok" when every check passed.
 */
#include <string.h>

#include "wcommon.h"

#define COUNT 1001

/* float16 5000.0 = 1.220703125 x 2^12; 60000.0 = 1.8310546875 x 2^15;
 * bfloat16 5000.0 is the top half of binary32's 0x459C4000 */
#define F16_5000 0x6CE2u
#define F16_60000 0x7B53u
#define BF16_5000 0x459Cu
#define F16_INF 0x7C00u

static void fill(uint16_t *b, uint16_t v) {
  for (int i = 0; i < COUNT; i++)
    b[i] = v;
}

/* float16 bits -> double (normal numbers and inf) */
static double f16(uint16_t h) {
  int e = (h >> 10) & 31;
  double v = e == 31 ? 1.0 / 0.0
                     : (1.0 + (h & 1023) / 1024.0) * (double)(1 << e) / 32768.0;
  return (h & 0x8000) ? -v : v;
}

/* Every element within float16's rounding of n partial sums of v: a
 * relative 2^-11 per sum, 16 sums, and a margin. */
static void expect_near(const uint16_t *b, uint16_t v, const char *what) {
  for (int i = 0; i < COUNT; i++)
    HKT_CHECK(f16(b[i]) - f16(v) <= f16(v) / 64 &&
                  f16(v) - f16(b[i]) <= f16(v) / 64,
              "%s: element %d is %g (0x%04x), expected %g", what, i, f16(b[i]),
              b[i], f16(v));
}

static void expect_all(const uint16_t *b, uint16_t v, const char *what) {
  for (int i = 0; i < COUNT; i++)
    HKT_CHECK(b[i] == v, "%s: element %d is 0x%04x, expected 0x%04x", what, i,
              b[i], v);
}

int main(void) {
  HKT_OK(hk_init());
  static uint16_t a[COUNT], b[COUNT], c[COUNT];

  /* 1. averages: alone, then two fused in one step */
  fill(a, F16_5000);
  HKT_OK(hk_allreduce("avg.f16.5000", a, a, COUNT, HK_FLOAT16, HK_AVERAGE));
  expect_near(a, F16_5000, "float16 average of 5000");
  fill(a, F16_60000);
  fill(b, F16_5000);
  hk_handle ha, hb;
  HKT_OK(hk_allreduce_async("avg.f16.60000", a, a, COUNT, HK_FLOAT16,
                            HK_AVERAGE, &ha));
  HKT_OK(hk_allreduce_async("avg.f16.5000.b", b, b, COUNT, HK_FLOAT16,
                            HK_AVERAGE, &hb));
  HKT_OK(hk_wait(ha));
  HKT_OK(hk_wait(hb));
  expect_near(a, F16_60000, "float16 average of 60000 (fused)");
  expect_near(b, F16_5000, "float16 average of 5000 (fused)");
  fill(c, BF16_5000);
  HKT_OK(hk_allreduce("avg.bf16", c, c, COUNT, HK_BFLOAT16, HK_AVERAGE));
  for (int i = 0; i < COUNT; i++) { /* bfloat16 keeps 8 bits: 16 sums of
                                       rounding can move it by 2% */
    uint32_t u = (uint32_t)c[i] << 16;
    float v;
    memcpy(&v, &u, 4);
    HKT_CHECK(v > 4900.0f && v < 5100.0f,
              "bfloat16 average of 5000: element %d is %g (0x%04x)", i, v,
              c[i]);
  }

  /* 2. a sum that does overflow, twice: +inf both times */
  for (int step = 0; step < 2; step++) {
    fill(a, F16_5000);
    HKT_OK(hk_allreduce("sum.f16", a, a, COUNT, HK_FLOAT16, HK_SUM));
    if (hk_size() * 5000 > 65504)
      expect_all(a, F16_INF, "float16 sum of 5000");
  }
  HKT_OK(hk_shutdown());
  printf("half16 ok\n");
  return 0;
}
