/*
 * w_allreduce - every dtype hk reduces x op for counts {0, 1, np-1, np,
 * 1000003} (or the counts given as arguments), in place and out of place, all
 * submitted at once per (dtype, op). Rank 0 regenerates every rank's input
 * and compares each element with a serial computation; every rank then
 * compares its result bitwise with rank 0's (broadcast).
 *
 * Inputs are small integers (|x| <= 8; {-2,-1,1,2} for products), so sums
 * and products are exact in every type and the serial result is exactly
 * what the documented arithmetic must give (hk.h, hk_op): an exact
 * comparison, no tolerance. 16-bit floats are rounded by the compiler's
 * converters written out here with nearbyint (the default IEEE rounding,
 * to nearest even), independently of hk's code.
 */
#include <math.h>
#include <string.h>

#include "wcommon.h"

#define NCOUNTS 5

static double input(int rank, size_t i, int dtype, int op) {
  uint64_t h = hkt_mix(((uint64_t)rank << 40) ^ ((uint64_t)i << 8) ^
                       (uint64_t)(dtype * 5 + op));
  if (op == HK_PRODUCT) {
    static const double f[4] = {-2, -1, 1, 2};
    return dtype == HK_UINT8 ? (double)(1 + (h & 1)) : f[h & 3];
  }
  if (dtype == HK_UINT8)
    return (double)(h % 17);
  return (double)(int)(h % 17) - 8;
}

/* Round-to-nearest-even float -> float16 for finite values, written
 * independently of common/half.c: scale to the binary16 quantum of the
 * value's binade, round with nearbyint, then encode. */
static uint16_t ref_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (a == 0)
    return sign;
  int e;
  frexp(a, &e);                        /* a = m * 2^e, m in [0.5, 1) */
  int q = e - 11 < -24 ? -24 : e - 11; /* 11 significant bits, min 2^-24 */
  double v = ldexp(nearbyint(ldexp(a, -q)), q);
  if (v >= 65520.0)
    return sign | 0x7c00;
  if (v < 0x1p-14)
    return sign | (uint16_t)(v * 0x1p24);
  frexp(v, &e);
  return sign | (uint16_t)((e - 1 + 15) << 10) |
         (uint16_t)((ldexp(v, 1 - e) - 1.0) * 1024.0);
}
static double ref_f16_to_double(uint16_t h) {
  int exp = (h >> 10) & 31, man = h & 1023;
  double v = exp ? ldexp(1024 + man, exp - 25) : ldexp(man, -24);
  return (h & 0x8000) ? -v : v;
}

/* Round-to-nearest-even float -> bfloat16, written independently. */
static uint16_t ref_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t lsb = (u >> 16) & 1;
  return (uint16_t)((u + 0x7fff + lsb) >> 16);
}
static float ref_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void store(void *buf, size_t i, int dtype, double v) {
  switch (dtype) {
  case HK_FLOAT16:
    ((uint16_t *)buf)[i] = ref_f16((float)v);
    break;
  case HK_BFLOAT16:
    ((uint16_t *)buf)[i] = ref_bf16((float)v);
    break;
  case HK_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case HK_FLOAT64:
    ((double *)buf)[i] = v;
    break;
  case HK_INT8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case HK_UINT8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case HK_INT16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  case HK_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case HK_INT64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  }
}

/* The serial result for element i, stored into ref. */
static void serial(void *ref, size_t i, int dtype, int op, int np) {
  if (dtype >= HK_INT8) {
    /* integers: wrap modulo 2^bits (computed in 64 bits, then truncated) */
    int64_t acc = (int64_t)input(0, i, dtype, op);
    for (int r = 1; r < np; r++) {
      int64_t x = (int64_t)input(r, i, dtype, op);
      if (op == HK_SUM || op == HK_AVERAGE)
        acc += x;
      else if (op == HK_PRODUCT)
        acc *= x;
      else if (op == HK_MIN)
        acc = x < acc ? x : acc;
      else
        acc = x > acc ? x : acc;
    }
    if (op == HK_AVERAGE) { /* divide the WRAPPED sum, truncating */
      int64_t wrapped = dtype == HK_INT8    ? (int8_t)acc
                        : dtype == HK_UINT8 ? (uint8_t)acc
                        : dtype == HK_INT16 ? (int16_t)acc
                        : dtype == HK_INT32 ? (int32_t)acc
                                            : acc;
      acc = wrapped / np;
    }
    store(ref, i, dtype,
          (double)(dtype == HK_UINT8   ? (uint8_t)acc
                   : dtype == HK_INT8  ? (int8_t)acc
                   : dtype == HK_INT16 ? (int16_t)acc
                   : dtype == HK_INT32 ? (int32_t)acc
                                       : acc));
    return;
  }
  double acc = input(0, i, dtype, op);
  for (int r = 1; r < np; r++) {
    double x = input(r, i, dtype, op);
    if (op == HK_SUM || op == HK_AVERAGE)
      acc += x;
    else if (op == HK_PRODUCT)
      acc *= x;
    else if (op == HK_MIN)
      acc = fmin(acc, x);
    else
      acc = fmax(acc, x);
  }
  if (op != HK_AVERAGE) {
    store(ref, i, dtype, acc); /* exact in every float type */
    return;
  }
  /* average: the exact sum divided once, in the type (binary32 for the
   * 16-bit types, then rounded to nearest even) */
  if (dtype == HK_FLOAT64)
    ((double *)ref)[i] = acc / np;
  else if (dtype == HK_FLOAT32)
    ((float *)ref)[i] = (float)acc / (float)np;
  else if (dtype == HK_FLOAT16)
    ((uint16_t *)ref)[i] = ref_f16((float)acc / (float)np);
  else
    ((uint16_t *)ref)[i] = ref_bf16((float)acc / (float)np);
}

static double as_double(const void *buf, size_t i, int dtype) {
  switch (dtype) {
  case HK_FLOAT16:
    return ref_f16_to_double(((const uint16_t *)buf)[i]);
  case HK_BFLOAT16:
    return ref_bf16_to_f32(((const uint16_t *)buf)[i]);
  case HK_FLOAT32:
    return ((const float *)buf)[i];
  case HK_FLOAT64:
    return ((const double *)buf)[i];
  case HK_INT8:
    return ((const int8_t *)buf)[i];
  case HK_UINT8:
    return ((const uint8_t *)buf)[i];
  case HK_INT16:
    return ((const int16_t *)buf)[i];
  case HK_INT32:
    return ((const int32_t *)buf)[i];
  default:
    return (double)((const int64_t *)buf)[i];
  }
}

int main(int argc, char **argv) {
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  size_t counts[NCOUNTS] = {0, 1, (size_t)np - 1, (size_t)np, 1000003};
  int ncounts = NCOUNTS;
  if (argc > 1) {
    ncounts = argc - 1 < NCOUNTS ? argc - 1 : NCOUNTS;
    for (int c = 0; c < ncounts; c++)
      counts[c] = strtoull(argv[c + 1], NULL, 10);
  }
  long cases = 0, elements = 0;
  for (int dtype = HK_FLOAT16; dtype <= HK_INT16; dtype++) {
    size_t esz = hk_dtype_size((hk_dtype)dtype);
    for (int op = HK_SUM; op <= HK_PRODUCT; op++) {
      void *send[NCOUNTS], *recv[NCOUNTS];
      hk_handle h[NCOUNTS];
      for (int c = 0; c < ncounts; c++) {
        size_t n = counts[c];
        send[c] = malloc(n * esz + 1);
        for (size_t i = 0; i < n; i++)
          store(send[c], i, dtype, input(rank, i, dtype, op));
        /* odd counts in place, even counts out of place */
        recv[c] = (c % 2) ? send[c] : malloc(n * esz + 1);
        char name[64];
        snprintf(name, sizeof name, "t.%s.%s.%d",
                 hk_dtype_name((hk_dtype)dtype), hk_op_name((hk_op)op), c);
        HKT_OK(hk_allreduce_async(name, send[c], recv[c], n, (hk_dtype)dtype,
                                  (hk_op)op, &h[c]));
      }
      for (int c = ncounts - 1; c >= 0; c--) /* wait in reverse order */
        HKT_OK(hk_wait(h[c]));
      for (int c = 0; c < ncounts; c++) {
        size_t n = counts[c];
        if (rank == 0) {
          void *ref = malloc(n * esz + 1);
          for (size_t i = 0; i < n; i++)
            serial(ref, i, dtype, op, np);
          for (size_t i = 0; i < n; i++)
            HKT_CHECK(memcmp((char *)ref + i * esz, (char *)recv[c] + i * esz,
                             esz) == 0,
                      "%s %s count %zu np %d: element %zu is %g, serial "
                      "computation gives %g",
                      hk_dtype_name((hk_dtype)dtype), hk_op_name((hk_op)op), n,
                      np, i, as_double(recv[c], i, dtype),
                      as_double(ref, i, dtype));
          free(ref);
        }
        /* bitwise identical on every rank: compare with rank 0's result */
        void *mine = malloc(n * esz + 1);
        if (n)
          memcpy(mine, recv[c], n * esz);
        char name[64];
        snprintf(name, sizeof name, "check.%d.%d.%d", dtype, op, c);
        HKT_OK(hk_broadcast(name, recv[c], n, (hk_dtype)dtype, 0));
        HKT_CHECK(n == 0 || memcmp(mine, recv[c], n * esz) == 0,
                  "%s %s count %zu: rank %d's result differs bitwise from "
                  "rank 0's",
                  hk_dtype_name((hk_dtype)dtype), hk_op_name((hk_op)op), n,
                  rank);
        free(mine);
        if (recv[c] != send[c])
          free(recv[c]);
        free(send[c]);
        cases++;
        elements += (long)n;
      }
    }
  }
  HKT_OK(hk_shutdown());
  printf("allreduce ok: np=%d cases=%ld elements=%ld\n", np, cases, elements);
  return 0;
}
