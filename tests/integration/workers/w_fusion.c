/*
 * w_fusion STEPS - a training-like loop whose results must not depend on
 * fusion or the response cache (case C4 and issue 4's acceptance): every
 * step, 40 tensors of mixed sizes (1 element to 64 Ki elements) and dtypes
 * (float32, float16, bfloat16, float64; sum and average, some with
 * prescale/postscale) are submitted in an order that differs on every rank
 * (rank 0 forward, rank 1 reverse, others shuffled), with random real
 * values, so that any change of reduction order would change the bits.
 * Each rank folds every result byte of every step into a hash (FNV-1a) and
 * prints it: the driver compares the hashes of runs with fusion and cache
 * on and off. One int32 tensor changes its count every 50 steps under the
 * same name (the cache must invalidate it) and is checked exactly against
 * the serial sum every step.
 */
#include <string.h>

#include "wcommon.h"

#define NT 40

static size_t count_of(int t) {
  static const size_t sizes[] = {1, 3, 17, 256, 1000, 4097, 16384, 65536};
  return sizes[hkt_mix((uint64_t)t * 7) % 8];
}
static hk_dtype dtype_of(int t) {
  static const hk_dtype d[] = {HK_FLOAT32, HK_FLOAT16, HK_BFLOAT16, HK_FLOAT64};
  return d[t % 4];
}
/* A value in (-1, 1) from a cheap hash (xorshift-multiply). */
static float value(int rank, int t, size_t i, int step) {
  uint32_t h = (uint32_t)(i * 2654435761u) ^
               (uint32_t)(rank * 40503 + t * 9973 + step * 131071);
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  return (float)((double)h * 0x1p-31 - 1.0);
}
static void store(void *b, size_t i, hk_dtype d, float v) {
  if (d == HK_FLOAT32)
    ((float *)b)[i] = v;
  else if (d == HK_FLOAT64)
    ((double *)b)[i] = (double)v * 1.0000001;
  else { /* 16-bit: keep the top bits of a float (bf16) or a half-ish */
    uint32_t u;
    memcpy(&u, &v, 4);
    if (d == HK_BFLOAT16)
      ((uint16_t *)b)[i] = (uint16_t)(u >> 16);
    else /* float16 of a value in (-1, 1): sign, exponent 14-ish, mantissa */
      ((uint16_t *)b)[i] =
          (uint16_t)((u >> 16 & 0x8000) | 0x3800 | (u >> 13 & 0x3ff));
  }
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 500;
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  void *buf[NT];
  for (int t = 0; t < NT; t++)
    buf[t] = malloc(count_of(t) * hk_dtype_size(dtype_of(t)));
  int32_t shape[300];
  uint64_t hash = 0xcbf29ce484222325ull;
  int order[NT];
  for (int step = 0; step < steps; step++) {
    for (int t = 0; t < NT; t++)
      order[t] = rank == 1 ? NT - 1 - t : t;
    if (rank >= 2) {
      uint64_t s = hkt_mix((uint64_t)(rank * 1000 + step));
      for (int t = NT - 1; t > 0; t--) {
        s = hkt_mix(s);
        int u = (int)(s % (uint64_t)(t + 1)), tmp = order[t];
        order[t] = order[u];
        order[u] = tmp;
      }
    }
    hk_handle h[NT + 1];
    for (int k = 0; k < NT; k++) {
      int t = order[k];
      size_t n = count_of(t);
      hk_dtype d = dtype_of(t);
      for (size_t i = 0; i < n; i++)
        store(buf[t], i, d, value(rank, t, i, step));
      char name[32];
      snprintf(name, sizeof name, "grad.%02d", t);
      double pre = t % 5 == 1 ? 0.5 : 1.0, post = t % 7 == 2 ? 3.0 : 1.0;
      HKT_OK(hk_allreduce_scaled_async(name, buf[t], buf[t], n, d,
                                       t % 3 ? HK_AVERAGE : HK_SUM, pre, post,
                                       &h[k]));
    }
    int shape_n = 100 + (step / 50) * 7;
    for (int i = 0; i < shape_n; i++)
      shape[i] = rank * 1000 + i + step;
    HKT_OK(hk_allreduce_async("grad.shape", shape, shape, (size_t)shape_n,
                              HK_INT32, HK_SUM, &h[NT]));
    for (int k = 0; k <= NT; k++)
      HKT_OK(hk_wait(h[k]));
    for (int i = 0; i < shape_n; i++) {
      int32_t expect = 0;
      for (int r = 0; r < np; r++)
        expect += r * 1000 + i + step;
      HKT_CHECK(shape[i] == expect, "step %d grad.shape[%d] = %d, expected %d",
                step, i, shape[i], expect);
    }
    for (int t = 0; t < NT; t++) {
      const uint8_t *p = buf[t];
      size_t bytes = count_of(t) * hk_dtype_size(dtype_of(t));
      for (size_t i = 0; i < bytes; i++)
        hash = (hash ^ p[i]) * 0x100000001b3ull;
    }
  }
  HKT_OK(hk_shutdown());
  printf("fusion hash %016llx after %d steps\n", (unsigned long long)hash,
         steps);
  for (int t = 0; t < NT; t++)
    free(buf[t]);
  return 0;
}
