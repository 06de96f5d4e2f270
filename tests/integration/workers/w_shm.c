/*
 * w_shm - the collectives on real-valued inputs, for comparing transports
 * bit for bit (tests/integration/test_shm.c):
 *
 *   w_shm hash        every dtype x op: allreduce (a lone large tensor, a
 *                     batch of small ones submitted together, so fused;
 *                     out of place and in place), grouped allreduce,
 *                     reducescatter, allgather, broadcast, alltoall.
 *                     Values have rounding sums (the association shows in
 *                     the bits), some NaNs and signed zeros. Prints
 *                     "shm hash <hex>": a hash of every result (per-rank
 *                     outputs hashed over all ranks), identical on every
 *                     rank, or exits 1 if the rank-independent results
 *                     (all but reducescatter's and alltoall's) differ
 *                     between ranks (their hashes are gathered at the end).
 *   w_shm hold FILE   hk_init, prints "holding", allreduces until FILE
 *                     exists (rank 0 looks, broadcasts), then as hash.
 *   w_shm batch       mixed fused batches, each dtype x op: sizes 1, 2,
 *                     3, primes up to 4099, one of 100003, and 150 of
 *                     1-3 elements, every second one out of place, all
 *                     submitted at once; small-integer values (exact in
 *                     any order) checked against the serial result, and
 *                     float16/bfloat16 averages of values near the
 *                     type's largest (finite, exact). Prints "shm batch
 *                     <hex>": a hash of every result, for comparing
 *                     transports; exits 1 on a wrong element.
 */
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/transport/shm_seg.h"
#include "common/half.h"
#include "device/host/reduce.h"
#include "wcommon.h"

#define BIG 100003
#define SMALL 24

/* FNV-1a: of the results every rank shares, and of this rank's own */
static uint64_t H = 1469598103934665603ull, MINE = 1469598103934665603ull;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Element i of rank r's tensor `t`: rounding reals, NaNs, signed zeros. */
static void fill(void *buf, size_t count, hk_dtype d, hk_op op, int r, int t) {
  const size_t esz = hk_dtype_size(d);
  for (size_t i = 0; i < count; i++) {
    uint64_t h = hkt_mix((uint64_t)r << 48 ^ (uint64_t)t << 32 ^ i ^
                         (uint64_t)d << 56 ^ (uint64_t)op << 60);
    double v = ((double)(h >> 11) / 9007199254740992.0 - 0.5) *
               ldexp(1.0, (int)(h % 16) - 8);
    if (op == HK_PRODUCT)
      v = 1.0 + v / 64;
    if (h % 101 == 0)
      v = NAN;
    else if (h % 89 == 0)
      v = (h & 1) ? 0.0 : -0.0;
    uint8_t *p = (uint8_t *)buf + i * esz;
    if (d == HK_FLOAT32) {
      float f = (float)v;
      memcpy(p, &f, 4);
    } else if (d == HK_FLOAT64) {
      memcpy(p, &v, 8);
    } else if (d == HK_FLOAT16) { /* finite halves of about [-8, 8] */
      uint16_t x = (uint16_t)((h >> 20) & 0x83ff) | (uint16_t)((h % 26) << 10);
      memcpy(p, h % 101 == 0 ? &(uint16_t){0x7e00} : &x, 2);
    } else if (d == HK_BFLOAT16) {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t x = (uint16_t)(u >> 16);
      memcpy(p, &x, 2);
    } else if (op == HK_PRODUCT) { /* small factors: no UB-free worry */
      int64_t x = (int64_t)(h % 5) - 2;
      memcpy(p, &x, esz);
    } else {
      memcpy(p, &h, esz);
    }
  }
}

/* A result every rank must have bit for bit (checked at the end). */
static void same_everywhere(const char *what, void *buf, size_t n, hk_dtype d) {
  (void)what;
  H = fnv(H, buf, n * hk_dtype_size(d));
}

static void allreduces(int rank, hk_dtype d, hk_op op) {
  const size_t esz = hk_dtype_size(d);
  char name[64];
  /* one large tensor, out of place */
  void *s = malloc(BIG * esz), *r = malloc(BIG * esz);
  fill(s, BIG, d, op, rank, 0);
  snprintf(name, sizeof name, "big.%d.%d", d, op);
  HKT_OK(hk_allreduce(name, s, r, BIG, d, op));
  same_everywhere(name, r, BIG, d);
  free(s);
  free(r);
  /* a batch of small ones at once (fused), in place */
  void *b[SMALL];
  hk_handle h[SMALL];
  for (int t = 0; t < SMALL; t++) {
    size_t n = 1 + (size_t)t * 37;
    b[t] = malloc(n * esz);
    fill(b[t], n, d, op, rank, t + 1);
    snprintf(name, sizeof name, "small.%d.%d.%d", d, op, t);
    HKT_OK(hk_allreduce_async(name, b[t], b[t], n, d, op, &h[t]));
  }
  for (int t = 0; t < SMALL; t++) {
    HKT_OK(hk_wait(h[t]));
    snprintf(name, sizeof name, "small.%d.%d.%d", d, op, t);
    same_everywhere(name, b[t], 1 + (size_t)t * 37, d);
    free(b[t]);
  }
}

static void others(int rank, int np) {
  /* reducescatter: per-rank outputs, hashed over all ranks below */
  const size_t re = 3, rows = 997 * (size_t)np + 5;
  float *in = malloc(rows * re * sizeof *in);
  fill(in, rows * re, HK_FLOAT32, HK_SUM, rank, 100);
  float *out = malloc((rows / (size_t)np + 1) * re * sizeof *out);
  size_t got = 0;
  HKT_OK(
      hk_reducescatter("rs", in, rows, re, HK_FLOAT32, HK_AVERAGE, out, &got));
  MINE = fnv(MINE, out, got * re * sizeof *out);
  /* alltoall: rank j gets a block of (rank + j) % 3 rows */
  size_t *splits = malloc((size_t)np * sizeof *splits), total = 0;
  for (int j = 0; j < np; j++)
    total += splits[j] = (size_t)((rank + j) % 3) * 1000;
  double *a2a = malloc((total + 1) * sizeof *a2a);
  fill(a2a, total, HK_FLOAT64, HK_SUM, rank, 101);
  void *a2a_out = NULL;
  size_t *recv = calloc((size_t)np, sizeof *recv);
  HKT_OK(hk_alltoall("a2a", a2a, splits, 1, HK_FLOAT64, &a2a_out, recv));
  size_t rtotal = 0;
  for (int j = 0; j < np; j++)
    rtotal += recv[j];
  MINE = fnv(MINE, a2a_out, rtotal * sizeof(double));
  /* allgather of ragged blocks */
  size_t mine_rows = (size_t)(rank * 7919) % 5000 + 1;
  double *ag = malloc(mine_rows * 2 * sizeof *ag);
  fill(ag, mine_rows * 2, HK_FLOAT64, HK_SUM, rank, 102);
  void *ag_out = NULL;
  size_t *per = calloc((size_t)np, sizeof *per), ag_total = 0;
  HKT_OK(hk_allgather("ag", ag, mine_rows, 2, HK_FLOAT64, &ag_out, per));
  for (int j = 0; j < np; j++)
    ag_total += per[j];
  same_everywhere("ag", ag_out, ag_total * 2, HK_FLOAT64);
  /* broadcast from the last rank */
  int16_t *bc = malloc(200003 * sizeof *bc);
  fill(bc, 200003, HK_BFLOAT16, HK_SUM, rank, 103);
  HKT_OK(hk_broadcast("bc", bc, 200003, HK_BFLOAT16, np - 1));
  same_everywhere("bc", bc, 200003, HK_BFLOAT16);
  /* grouped allreduce */
  const char *names[3] = {"g.0", "g.1", "g.2"};
  size_t counts[3] = {5, 50000, 3};
  double *g[3];
  for (int t = 0; t < 3; t++) {
    g[t] = malloc(counts[t] * sizeof(double));
    fill(g[t], counts[t], HK_FLOAT64, HK_SUM, rank, 104 + t);
  }
  HKT_OK(hk_grouped_allreduce(names, (const void *const *)g, (void *const *)g,
                              counts, 3, HK_FLOAT64, HK_SUM));
  for (int t = 0; t < 3; t++) {
    same_everywhere(names[t], g[t], counts[t], HK_FLOAT64);
    free(g[t]);
  }
  free(in);
  free(out);
  free(splits);
  free(a2a);
  free(a2a_out);
  free(recv);
  free(ag);
  free(ag_out);
  free(per);
  free(bc);
}

static int hash_mode(void) {
  const int rank = hk_rank(), np = hk_size();
  for (int d = HK_FLOAT16; d <= HK_INT16; d++)
    for (int op = HK_SUM; op <= HK_PRODUCT; op++)
      allreduces(rank, (hk_dtype)d, (hk_op)op);
  others(rank, np);
  /* every rank's two hashes: the shared ones must agree */
  uint64_t two[2] = {H, MINE};
  uint64_t *all = NULL;
  HKT_OK(hk_allgather("hashes", two, 1, 2, HK_INT64, (void **)&all, NULL));
  for (int r = 0; r < np; r++)
    HKT_CHECK(all[2 * r] == H,
              "rank %d's results differ bitwise from rank %d's", rank, r);
  uint64_t whole = fnv(H, all, 2 * (size_t)np * sizeof *all);
  free(all);
  HKT_OK(hk_shutdown());
  printf("shm hash %016llx\n", (unsigned long long)whole);
  return 0;
}

/* ---- batch mode ---- */

#define NTINY 150
static const size_t batch_sizes[] = {1,  2,  3,   5,   7,   11,   13,   17,
                                     31, 61, 127, 257, 509, 1021, 4099, 100003};
#define NSIZED (sizeof batch_sizes / sizeof batch_sizes[0])
#define NBATCH (NSIZED + NTINY)

static size_t batch_count(int t) {
  return t < (int)NSIZED ? batch_sizes[t] : (size_t)(t % 3) + 1;
}

/* Element i of rank r's tensor t as a double: small integers (near: a
 * float16 or bfloat16 value near its type's largest, exact in sums of
 * up to 7 after the pre-division) */
static double batch_value(int near, hk_dtype d, int r, int t, size_t i) {
  size_t k = ((size_t)r + i + (size_t)t) % 8;
  if (near && d == HK_FLOAT16)
    return 1024.0 * (double)(56 + k); /* 57344..64512 */
  if (near)
    return ldexp((double)(8 + k), 124); /* up to 2.55e38 */
  return (double)((i * 7 + (size_t)t) % 5 + 1) * (r + 1);
}

static void put(void *buf, size_t i, hk_dtype d, double v) {
  switch (d) {
  case HK_FLOAT16:
    ((uint16_t *)buf)[i] = hk_f32_to_f16((float)v);
    break;
  case HK_BFLOAT16:
    ((uint16_t *)buf)[i] = hk_f32_to_bf16((float)v);
    break;
  case HK_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case HK_FLOAT64:
    ((double *)buf)[i] = v;
    break;
  default:
    ((int32_t *)buf)[i] = (int32_t)v;
  }
}

/* The serial result of element i in the dtype's bits (written to want). */
static void batch_expect(int near, hk_dtype d, hk_op op, int np, int t,
                         size_t i, void *want) {
  double s = 0, m = -1e300;
  for (int r = 0; r < np; r++) {
    double v = batch_value(near, d, r, t, i);
    s += v;
    m = v > m ? v : m;
  }
  if (op == HK_MAX) {
    put(want, 0, d, m);
    return;
  }
  if (op == HK_SUM) {
    put(want, 0, d, s);
    return;
  }
  if (d == HK_FLOAT16 || d == HK_BFLOAT16) {
    /* the pre-divided sum (exact), divided by np in binary32 and scaled
     * back by the pre-divisor (exact: the average is in range) */
    double p = hk_average_pre_divisor(d, HK_AVERAGE, np);
    float q = (float)(s / p) / (float)np;
    put(want, 0, d, (double)(q * (float)p));
    return;
  }
  if (d == HK_FLOAT32) {
    ((float *)want)[0] = (float)s / (float)np;
    return;
  }
  ((double *)want)[0] = s / np;
}

static void batch_one(int rank, int np, hk_dtype d, hk_op op, int near) {
  const size_t esz = hk_dtype_size(d);
  void *in[NBATCH], *out[NBATCH];
  hk_handle h[NBATCH];
  char name[64];
  for (int t = 0; t < (int)NBATCH; t++) {
    size_t n = batch_count(t);
    in[t] = malloc(n * esz);
    out[t] = t % 2 ? malloc(n * esz) : in[t];
    for (size_t i = 0; i < n; i++)
      put(in[t], i, d, batch_value(near, d, rank, t, i));
    snprintf(name, sizeof name, "batch.%d.%d.%d.%d", d, op, near, t);
    HKT_OK(hk_allreduce_async(name, in[t], out[t], n, d, op, &h[t]));
  }
  for (int t = 0; t < (int)NBATCH; t++) {
    HKT_OK(hk_wait(h[t]));
    size_t n = batch_count(t);
    for (size_t i = 0; i < n; i++) {
      uint64_t want = 0, got = 0;
      batch_expect(near, d, op, np, t, i, &want);
      memcpy(&got, (uint8_t *)out[t] + i * esz, esz);
      HKT_CHECK(got == want,
                "%s %s%s np %d: tensor %d (%zu elements), element %zu: bits "
                "0x%llx, serial 0x%llx",
                hk_dtype_name(d), hk_op_name(op), near ? " near max" : "", np,
                t, n, i, (unsigned long long)got, (unsigned long long)want);
    }
    same_everywhere("batch", out[t], n, d);
    if (out[t] != in[t])
      free(out[t]);
    free(in[t]);
  }
}

static int batch_mode(void) {
  const int rank = hk_rank(), np = hk_size();
  static const hk_dtype ds[] = {HK_FLOAT16, HK_BFLOAT16, HK_FLOAT32, HK_FLOAT64,
                                HK_INT32};
  static const hk_op ops[] = {HK_SUM, HK_AVERAGE, HK_MAX};
  for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++)
      if (ds[di] != HK_INT32 || ops[oi] != HK_AVERAGE)
        batch_one(rank, np, ds[di], ops[oi], 0);
  batch_one(rank, np, HK_FLOAT16, HK_AVERAGE, 1);
  batch_one(rank, np, HK_BFLOAT16, HK_AVERAGE, 1);
  uint64_t mine = H, *all = NULL;
  HKT_OK(
      hk_allgather("batch.hashes", &mine, 1, 1, HK_INT64, (void **)&all, NULL));
  for (int r = 0; r < np; r++)
    HKT_CHECK(all[r] == H, "rank %d's batch results differ from rank %d's",
              rank, r);
  free(all);
  HKT_OK(hk_shutdown());
  printf("shm batch %016llx\n", (unsigned long long)H);
  return 0;
}

static int hold_mode(const char *file) {
  printf("holding\n");
  fflush(stdout);
  for (uint64_t i = 0;; i++) {
    int32_t there = hk_rank() == 0 && access(file, F_OK) == 0;
    char name[64];
    snprintf(name, sizeof name, "hold.%llu", (unsigned long long)i);
    HKT_OK(hk_broadcast(name, &there, 1, HK_INT32, 0));
    if (there)
      break;
  }
  return hash_mode();
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "hash";
  HKT_OK(hk_init());
  if (!strcmp(mode, "batch"))
    return batch_mode();
  if (!strcmp(mode, "hold") && argc > 2)
    return hold_mode(argv[2]);
  return hash_mode();
}
