/*
 * w_dtypes - the dtypes hk took from Horovod last (int16, and bool, which
 * is moved and never reduced) and Horovod's scale factors on integer
 * tensors, end to end under hkrun (test_dtypes). Every rank regenerates
 * every rank's input and checks each element against a serial
 * computation written here, apart from hk's kernels (the scale rule of
 * hk.h in long double, sums and products wrapped from uint64):
 *
 *   w_dtypes scaled  allreduce and reduce-scatter of int8, uint8, int16,
 *                    int32 and int64 with prescale and postscale
 *                    (fractional, negative, saturating), every op, one at
 *                    a time and submitted together (fused)
 *   w_dtypes int16   every collective on int16: allreduce (every op,
 *                    counts 0 to 100003), broadcast from every root,
 *                    allgather, reduce-scatter, alltoall, a grouped
 *                    allreduce, and a rank that joined (it contributes
 *                    int16's identity of each op)
 *   w_dtypes bool    broadcast, allgather and alltoall of bool (every byte
 *                    value moves as it is); allreduce, reduce-scatter and
 *                    a grouped allreduce of bool refused at submit, naming
 *                    the tensor and the dtype; factors that are not finite
 *                    refused on integers
 * Prints "dtypes ok: <mode> np=N checks=K"; exits 1 naming the first
 * wrong element.
 */
#include <math.h>
#include <string.h>

#include "wcommon.h"

static int rank, np;
static long checks;

static const hk_dtype ints[] = {HK_INT8, HK_UINT8, HK_INT16, HK_INT32,
                                HK_INT64};
static const hk_op ops[] = {HK_SUM, HK_AVERAGE, HK_MIN, HK_MAX, HK_PRODUCT};
#define NOPS (sizeof ops / sizeof ops[0])

/* (prescale, postscale): fractions that truncate, negative factors,
 * factors that saturate at both ends of every type */
static const double scales[][2] = {
    {0.5, 1.0}, {1.0, -2.5}, {2.0, 0.75}, {-1.5, 3.0}, {1.0 / 3.0, 1e10}};
#define NSCALES (sizeof scales / sizeof scales[0])

/* The range of integer dtype d (uint8 the only unsigned one). */
static void limits(hk_dtype d, int64_t *lo, int64_t *hi) {
  const unsigned bits = 8 * (unsigned)hk_dtype_size(d);
  *hi = d == HK_UINT8 ? 255 : (int64_t)(UINT64_MAX >> (65 - bits));
  *lo = d == HK_UINT8 ? 0 : -*hi - 1;
}

static int64_t load(hk_dtype d, const void *p, size_t i) {
  switch (d) {
  case HK_INT8:
    return ((const int8_t *)p)[i];
  case HK_UINT8:
    return ((const uint8_t *)p)[i];
  case HK_INT16:
    return ((const int16_t *)p)[i];
  case HK_INT32:
    return ((const int32_t *)p)[i];
  default:
    return ((const int64_t *)p)[i];
  }
}

/* Stores the low bits of v (two's complement): wraps. */
static void store(hk_dtype d, void *p, size_t i, uint64_t v) {
  switch (d) {
  case HK_INT8:
  case HK_UINT8:
    ((uint8_t *)p)[i] = (uint8_t)v;
    break;
  case HK_INT16:
    ((uint16_t *)p)[i] = (uint16_t)v;
    break;
  case HK_INT32:
    ((uint32_t *)p)[i] = (uint32_t)v;
    break;
  default:
    ((uint64_t *)p)[i] = v;
    break;
  }
}

static int64_t wrap(hk_dtype d, uint64_t v) {
  uint64_t b = 0;
  store(d, &b, 0, v);
  return load(d, &b, 0);
}

/* hk.h's rule: x * f in binary64, truncated toward zero, saturated. */
static int64_t scaled(hk_dtype d, int64_t x, double f) {
  if (f == 1.0)
    return x;
  int64_t lo, hi;
  limits(d, &lo, &hi);
  long double t = truncl((long double)((double)x * f));
  if (t <= (long double)lo)
    return lo;
  if (t >= (long double)hi)
    return hi;
  return (int64_t)t;
}

/* Rank r's element i: any value of the type, a quarter of them small. */
static int64_t input(hk_dtype d, int r, size_t i, uint64_t salt) {
  uint64_t h = hkt_mix(salt * 1000003u ^ (uint64_t)r << 40 ^ i);
  if (h % 4 == 0)
    return wrap(d, (uint64_t)((int64_t)((h >> 8) % 201) - 100));
  return wrap(d, h >> 3);
}

static void fill(void *buf, hk_dtype d, int r, size_t first, size_t n,
                 uint64_t salt) {
  for (size_t i = 0; i < n; i++)
    store(d, buf, i, (uint64_t)input(d, r, first + i, salt));
}

/* Element i of op over ranks [0, n) (each input prescaled), the
 * average's C division of the wrapped sum by n, then the postscale. */
static int64_t serial(hk_dtype d, hk_op op, size_t i, uint64_t salt, int n,
                      double pre, double post) {
  uint64_t acc = 0;
  int64_t m = 0;
  for (int r = 0; r < n; r++) {
    int64_t x = scaled(d, input(d, r, i, salt), pre);
    if (r == 0) {
      acc = (uint64_t)x;
      m = x;
    } else if (op == HK_PRODUCT) {
      acc *= (uint64_t)x;
    } else if (op == HK_MIN) {
      m = x < m ? x : m;
    } else if (op == HK_MAX) {
      m = x > m ? x : m;
    } else {
      acc += (uint64_t)x;
    }
  }
  int64_t v = op == HK_MIN || op == HK_MAX ? m : wrap(d, acc);
  if (op == HK_AVERAGE)
    v /= n;
  return scaled(d, v, post);
}

/* got[e] (e in [0, n)) against element first + e of the serial result. */
static void check(const char *what, hk_dtype d, hk_op op, const void *got,
                  size_t first, size_t n, uint64_t salt, int contributors,
                  double pre, double post) {
  for (size_t e = 0; e < n; e++) {
    int64_t want = serial(d, op, first + e, salt, contributors, pre, post);
    HKT_CHECK(load(d, got, e) == want,
              "%s (%s %s, prescale %g, postscale %g, np %d): element %zu is "
              "%lld, want %lld",
              what, hk_dtype_name(d), hk_op_name(op), pre, post, np, first + e,
              (long long)load(d, got, e), (long long)want);
    checks++;
  }
}

/* Reduce-scatter's split (hk.h): rank r's first row. */
static size_t rs_first(size_t rows, int r) {
  size_t q = rows / (size_t)np, m = rows % (size_t)np;
  return (size_t)r * q + ((size_t)r < m ? (size_t)r : m);
}

/* ---- scaled ---- */

typedef struct job {
  char name[64];
  hk_dtype d;
  hk_op op;
  double pre, post;
  size_t count; /* allreduce: elements; reducescatter: rows of RE */
  int rs;
  uint64_t salt;
  void *send, *recv;
  hk_handle h;
} job;

#define RE 3 /* reduce-scatter's row size */

static void job_start(job *j) {
  const size_t esz = hk_dtype_size(j->d);
  const size_t elems = j->rs ? j->count * RE : j->count;
  j->send = malloc(elems * esz + 1);
  j->recv = malloc(elems * esz + 1);
  fill(j->send, j->d, rank, 0, elems, j->salt);
  hk_collective c = {.kind = j->rs ? HK_REDUCESCATTER : HK_ALLREDUCE,
                     .name = j->name,
                     .dtype = j->d,
                     .op = j->op,
                     .sendbuf = j->send,
                     .recvbuf = j->recv,
                     .count = j->count,
                     .rows = j->count,
                     .row_elems = RE,
                     .prescale = j->pre,
                     .postscale = j->post};
  if (!j->rs) /* the shorthand takes the same path; use it once */
    HKT_OK(hk_allreduce_scaled_async(j->name, j->send, j->recv, j->count, j->d,
                                     j->op, j->pre, j->post, &j->h));
  else
    HKT_OK(hk_submit(&c, &j->h));
}

static void job_finish(job *j) {
  HKT_OK(hk_wait(j->h));
  if (j->rs) {
    size_t a = rs_first(j->count, rank), b = rs_first(j->count, rank + 1);
    check(j->name, j->d, j->op, j->recv, a * RE, (b - a) * RE, j->salt, np,
          j->pre, j->post);
  } else {
    check(j->name, j->d, j->op, j->recv, 0, j->count, j->salt, np, j->pre,
          j->post);
  }
  free(j->send);
  free(j->recv);
}

static void mode_scaled(void) {
  enum { NJOBS = 2 * NOPS * NSCALES };
  job *jobs = calloc(NJOBS, sizeof *jobs);
  uint64_t salt = 1;
  for (size_t t = 0; t < sizeof ints / sizeof ints[0]; t++)
    for (int fused = 0; fused < 2; fused++) {
      int n = 0;
      for (int rs = 0; rs < 2; rs++)
        for (size_t o = 0; o < NOPS; o++)
          for (size_t k = 0; k < NSCALES; k++) {
            job *j = &jobs[n++];
            j->d = ints[t];
            j->op = ops[o];
            j->pre = scales[k][0];
            j->post = scales[k][1];
            j->rs = rs;
            j->salt = salt++;
            j->count = rs ? (size_t)(2 * np + 1) : (k == 0 ? 1 : 1001);
            snprintf(j->name, sizeof j->name, "%s.%s.%s.%zu.%d",
                     rs ? "rs" : "ar", hk_dtype_name(j->d), hk_op_name(j->op),
                     k, fused);
            job_start(j);
            if (!fused) /* one at a time */
              job_finish(j);
          }
      for (int i = 0; fused && i < n; i++) /* submitted together: fused */
        job_finish(&jobs[i]);
    }
  free(jobs);
}

/* ---- int16 ---- */

static void int16_allreduces(void) {
  const hk_dtype d = HK_INT16;
  const size_t counts[] = {0, 1, (size_t)np + 1, 100003};
  uint64_t salt = 100;
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
    for (size_t o = 0; o < NOPS; o++, salt++) {
      int16_t *buf = malloc(counts[c] * 2 + 2);
      fill(buf, d, rank, 0, counts[c], salt);
      char name[64];
      snprintf(name, sizeof name, "i16.%s.%zu", hk_op_name(ops[o]), counts[c]);
      HKT_OK(hk_allreduce(name, buf, buf, counts[c], d, ops[o]));
      check(name, d, ops[o], buf, 0, counts[c], salt, np, 1.0, 1.0);
      free(buf);
    }
}

static void int16_broadcasts(void) {
  const size_t n = 1001;
  int16_t *buf = malloc(n * 2);
  for (int root = 0; root < np; root++) {
    fill(buf, HK_INT16, rank, 0, n, 200 + (uint64_t)rank);
    char name[32];
    snprintf(name, sizeof name, "i16.bcast.%d", root);
    HKT_OK(hk_broadcast(name, buf, n, HK_INT16, root));
    for (size_t i = 0; i < n; i++, checks++)
      HKT_CHECK(buf[i] == input(HK_INT16, root, i, 200 + (uint64_t)root),
                "%s: element %zu is %d", name, i, buf[i]);
  }
  free(buf);
}

static size_t ag_rows(int r) { return (size_t)(r * 3 + 1) % 5; }

static void int16_allgather(void) {
  const size_t re = 3;
  int16_t *send = malloc(ag_rows(rank) * re * 2 + 2);
  fill(send, HK_INT16, rank, 0, ag_rows(rank) * re, 300);
  int16_t *out = NULL;
  size_t *per = calloc((size_t)np, sizeof *per);
  HKT_OK(hk_allgather("i16.ag", send, ag_rows(rank), re, HK_INT16,
                      (void **)&out, per));
  size_t at = 0;
  for (int r = 0; r < np; r++) {
    HKT_CHECK(per[r] == ag_rows(r), "allgather: rank %d: %zu rows, want %zu", r,
              per[r], ag_rows(r));
    for (size_t i = 0; i < ag_rows(r) * re; i++, at++, checks++)
      HKT_CHECK(out[at] == input(HK_INT16, r, i, 300),
                "allgather: rank %d's element %zu is %d", r, i, out[at]);
  }
  hk_free(out);
  free(per);
  free(send);
}

static void int16_reducescatters(void) {
  const size_t rows = 2 * (size_t)np + 1;
  uint64_t salt = 400;
  for (size_t o = 0; o < NOPS; o++, salt++) {
    int16_t *send = malloc(rows * RE * 2), *recv = malloc(rows * RE * 2);
    fill(send, HK_INT16, rank, 0, rows * RE, salt);
    size_t mine = 0;
    char name[32];
    snprintf(name, sizeof name, "i16.rs.%s", hk_op_name(ops[o]));
    HKT_OK(
        hk_reducescatter(name, send, rows, RE, HK_INT16, ops[o], recv, &mine));
    size_t a = rs_first(rows, rank), b = rs_first(rows, rank + 1);
    HKT_CHECK(mine == b - a, "%s: %zu rows, want %zu", name, mine, b - a);
    check(name, HK_INT16, ops[o], recv, a * RE, (b - a) * RE, salt, np, 1.0,
          1.0);
    free(send);
    free(recv);
  }
}

/* Rank r sends (r + j) % 3 rows of 2 to rank j; element (row, col) from
 * r to j is input(r, j * 64 + row * 2 + col). */
static void int16_alltoall(void) {
  const size_t re = 2;
  size_t *splits = malloc((size_t)np * sizeof *splits), total = 0;
  for (int j = 0; j < np; j++)
    total += splits[j] = (size_t)(rank + j) % 3;
  int16_t *send = malloc(total * re * 2 + 2);
  size_t at = 0;
  for (int j = 0; j < np; j++)
    for (size_t e = 0; e < splits[j] * re; e++)
      send[at++] = (int16_t)input(HK_INT16, rank, (size_t)j * 64 + e, 500);
  int16_t *out = NULL;
  size_t *got = calloc((size_t)np, sizeof *got);
  HKT_OK(
      hk_alltoall("i16.a2a", send, splits, re, HK_INT16, (void **)&out, got));
  at = 0;
  for (int r = 0; r < np; r++) {
    size_t rows = (size_t)(r + rank) % 3;
    HKT_CHECK(got[r] == rows, "alltoall: %zu rows from rank %d, want %zu",
              got[r], r, rows);
    for (size_t e = 0; e < rows * re; e++, at++, checks++)
      HKT_CHECK(out[at] == input(HK_INT16, r, (size_t)rank * 64 + e, 500),
                "alltoall: element %zu from rank %d is %d", e, r, out[at]);
  }
  hk_free(out);
  free(got);
  free(send);
  free(splits);
}

static void int16_grouped(void) {
  const char *names[] = {"i16.g.0", "i16.g.1", "i16.g.2"};
  const size_t counts[] = {5, 0, 1003};
  int16_t *bufs[3];
  for (int t = 0; t < 3; t++) {
    bufs[t] = malloc(counts[t] * 2 + 2);
    fill(bufs[t], HK_INT16, rank, 0, counts[t], 600 + (uint64_t)t);
  }
  HKT_OK(hk_grouped_allreduce(names, (const void *const *)bufs,
                              (void *const *)bufs, counts, 3, HK_INT16,
                              HK_MAX));
  for (int t = 0; t < 3; t++) {
    check(names[t], HK_INT16, HK_MAX, bufs[t], 0, counts[t], 600 + (uint64_t)t,
          np, 1.0, 1.0);
    free(bufs[t]);
  }
}

/* The last rank joins first: the others' int16 allreduces take its
 * identity for every op (and the average divides by who contributed). */
static void int16_join(void) {
  const int joiner = np - 1;
  int last = -1;
  if (rank == joiner) {
    HKT_OK(hk_join(&last));
  } else {
    for (size_t o = 0; o < NOPS; o++) {
      int16_t buf[7];
      fill(buf, HK_INT16, rank, 0, 7, 700 + o);
      char name[32];
      snprintf(name, sizeof name, "i16.join.%s", hk_op_name(ops[o]));
      HKT_OK(hk_allreduce(name, buf, buf, 7, HK_INT16, ops[o]));
      check(name, HK_INT16, ops[o], buf, 0, 7, 700 + o, np - 1, 1.0, 1.0);
    }
    HKT_OK(hk_join(&last));
  }
  HKT_CHECK(last >= 0 && last < np && (np == 1 || last != joiner),
            "join: last rank %d", last);
}

/* ---- bool ---- */

static void expect_refused(hk_status st, const char *name, const char *what,
                           const char *needle) {
  HKT_CHECK(st == HK_ERR_INVALID_ARG && strstr(hk_last_error(), name) &&
                strstr(hk_last_error(), needle),
            "%s was not refused as it should: %s: %s", what, hk_strerror(st),
            hk_last_error());
  checks++;
}

static void mode_bool(void) {
  const size_t n = 1003;
  uint8_t *b = malloc(n), *mine = malloc(n);
  for (size_t i = 0; i < n; i++) /* every byte value, 0 and 1 most */
    mine[i] = (uint8_t)(i % 7 < 5 ? i % 2 : hkt_mix(i + (uint64_t)rank));
  for (int root = 0; root < np; root++) {
    memcpy(b, mine, n);
    char name[32];
    snprintf(name, sizeof name, "b.bcast.%d", root);
    HKT_OK(hk_broadcast(name, b, n, HK_BOOL, root));
    for (size_t i = 0; i < n; i++, checks++) {
      uint8_t want = (uint8_t)(i % 7 < 5 ? i % 2 : hkt_mix(i + (uint64_t)root));
      HKT_CHECK(b[i] == want, "%s: byte %zu is %u, want %u", name, i, b[i],
                want);
    }
  }
  /* allgather: rank r gives r + 1 rows of 5 */
  uint8_t *out = NULL;
  size_t *per = calloc((size_t)np, sizeof *per);
  HKT_OK(hk_allgather("b.ag", mine, (size_t)rank + 1, 5, HK_BOOL, (void **)&out,
                      per));
  size_t at = 0;
  for (int r = 0; r < np; r++) {
    HKT_CHECK(per[r] == (size_t)r + 1, "allgather: rank %d: %zu rows", r,
              per[r]);
    for (size_t i = 0; i < ((size_t)r + 1) * 5; i++, at++, checks++) {
      uint8_t want = (uint8_t)(i % 7 < 5 ? i % 2 : hkt_mix(i + (uint64_t)r));
      HKT_CHECK(out[at] == want, "allgather: rank %d's byte %zu is %u", r, i,
                out[at]);
    }
  }
  hk_free(out);
  /* alltoall: one row of 4 to every rank, byte k of it rank * 16 + j + k */
  size_t *splits = malloc((size_t)np * sizeof *splits);
  uint8_t *send = malloc((size_t)np * 4);
  for (int j = 0; j < np; j++) {
    splits[j] = 1;
    for (int k = 0; k < 4; k++)
      send[j * 4 + k] = (uint8_t)(rank * 16 + j + k * 64);
  }
  HKT_OK(hk_alltoall("b.a2a", send, splits, 4, HK_BOOL, (void **)&out, per));
  for (int r = 0; r < np; r++)
    for (int k = 0; k < 4; k++, checks++)
      HKT_CHECK(per[r] == 1 &&
                    out[r * 4 + k] == (uint8_t)(r * 16 + rank + k * 64),
                "alltoall: byte %d from rank %d is %u", k, r, out[r * 4 + k]);
  hk_free(out);
  /* reductions are refused at once, on every rank alike */
  hk_handle h;
  expect_refused(hk_allreduce_async("b.ar", b, b, n, HK_BOOL, HK_MAX, &h),
                 "b.ar", "allreduce of bool", "bool");
  expect_refused(
      hk_reducescatter_async("b.rs", b, 2, 1, HK_BOOL, HK_SUM, b, NULL, &h),
      "b.rs", "reduce-scatter of bool", "bool");
  const char *gn[] = {"b.g.0", "b.g.1"};
  const void *gs[] = {b, mine};
  void *gr[] = {b, mine};
  const size_t gc[] = {3, 3};
  expect_refused(
      hk_grouped_allreduce_async(gn, gs, gr, gc, 2, HK_BOOL, HK_MIN, &h),
      "b.g.0", "grouped allreduce of bool", "bool");
  /* integer factors are taken; those that are not finite are not */
  int32_t x[2] = {1, 2};
  expect_refused(hk_allreduce_scaled_async("i.nan", x, x, 2, HK_INT32, HK_SUM,
                                           NAN, 1.0, &h),
                 "i.nan", "a NaN prescale", "finite");
  expect_refused(hk_allreduce_scaled_async("i.inf", x, x, 2, HK_INT32, HK_SUM,
                                           1.0, -INFINITY, &h),
                 "i.inf", "an infinite postscale", "finite");
  /* and the job goes on */
  HKT_OK(hk_allreduce("after", x, x, 2, HK_INT32, HK_SUM));
  HKT_CHECK(x[0] == np && x[1] == 2 * np, "after the refusals: %d %d", x[0],
            x[1]);
  free(per);
  free(splits);
  free(send);
  free(b);
  free(mine);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  HKT_OK(hk_init());
  rank = hk_rank();
  np = hk_size();
  if (!strcmp(mode, "scaled")) {
    mode_scaled();
  } else if (!strcmp(mode, "int16")) {
    int16_allreduces();
    int16_broadcasts();
    int16_allgather();
    int16_reducescatters();
    int16_alltoall();
    int16_grouped();
    int16_join();
  } else if (!strcmp(mode, "bool")) {
    mode_bool();
  } else {
    fprintf(stderr, "usage: w_dtypes scaled|int16|bool\n");
    return 2;
  }
  HKT_OK(hk_shutdown());
  printf("dtypes ok: %s np=%d checks=%ld\n", mode, np, checks);
  return 0;
}
