/*
 * w_submit - hk_submit and hk_submit_group seen from a worker (include/
 * hk/hk.h, "One way to describe any collective"). Modes:
 *   groups    a group of three allgathers (ragged rows per rank and per
 *             member, different row sizes) and a group of three
 *             reduce-scatters (sums of int32, an average of float64 with
 *             a prescale and a postscale), each checked element by
 *             element against a serial computation, then the negotiation
 *             counters show what ran fused (the allgathers, the int32
 *             sums);
 *   shapes    allreduce and reduce-scatter with the same number of
 *             elements in different shapes on rank 0 (17x1311) and the
 *             others (391x57): HK_ERR_MISMATCH on every rank naming both
 *             shapes; an allgather whose first extent differs runs; one
 *             whose second differs fails; a healthy tensor in between
 *             still runs;
 *   refusals  descriptions hk_submit refuses on this rank alone, each
 *             with its message.
 * Every mode ends with "submit ok".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "wcommon.h"
#include "worker/internal.h"

/* rank r's rows of group member i: ragged across ranks and members */
static size_t ag_rows(int r, int i) { return (size_t)((r + 2 * i) % 4); }
static size_t ag_row_elems(int i) { return (size_t)(i + 1); }
static int32_t ag_value(int r, int i, size_t row, size_t e) {
  return (int32_t)(1000 * r + 100 * i + 10 * (int)row + (int)e);
}

static void group_allgather(void) {
  const int rank = hk_rank(), np = hk_size();
  enum { K = 3 };
  int32_t *send[K];
  void *out[K] = {NULL, NULL, NULL};
  size_t counts[K][64];
  hk_collective c[K];
  char names[K][16];
  for (int i = 0; i < K; i++) {
    const size_t rows = ag_rows(rank, i), re = ag_row_elems(i);
    send[i] = malloc(rows * re * sizeof(int32_t) + 1);
    for (size_t w = 0; w < rows; w++)
      for (size_t e = 0; e < re; e++)
        send[i][w * re + e] = ag_value(rank, i, w, e);
    snprintf(names[i], sizeof names[i], "ag.%d", i);
    c[i] = (hk_collective){.kind = HK_ALLGATHER,
                           .name = names[i],
                           .dtype = HK_INT32,
                           .sendbuf = send[i],
                           .rows = rows,
                           .row_elems = re,
                           .recvbuf_out = &out[i],
                           .rows_out = counts[i]};
  }
  hk_handle h;
  HKT_OK(hk_submit_group(c, K, &h));
  HKT_OK(hk_wait(h));
  for (int i = 0; i < K; i++) {
    const size_t re = ag_row_elems(i);
    const int32_t *got = out[i];
    size_t at = 0;
    for (int r = 0; r < np; r++) {
      HKT_CHECK(counts[i][r] == ag_rows(r, i),
                "ag.%d: rank %d rows %zu, want "
                "%zu",
                i, r, counts[i][r], ag_rows(r, i));
      for (size_t w = 0; w < ag_rows(r, i); w++)
        for (size_t e = 0; e < re; e++, at++)
          HKT_CHECK(got[at] == ag_value(r, i, w, e),
                    "ag.%d: rank %d row %zu elem %zu: got %d, want %d", i, r, w,
                    e, got[at], ag_value(r, i, w, e));
    }
    hk_free(out[i]);
    free(send[i]);
  }
}

/* rows q*np + m of a reduce-scatter split: rank r's share */
static size_t rs_first(size_t rows, int np, int r) {
  size_t q = rows / (size_t)np, m = rows % (size_t)np;
  return (size_t)r * q + ((size_t)r < m ? (size_t)r : m);
}

static void group_reducescatter(void) {
  const int rank = hk_rank(), np = hk_size();
  enum { K = 3 };
  const size_t rows[K] = {7, 2 * (size_t)np + 1, 5}, re[K] = {3, 2, 1};
  int32_t in0[7 * 3], out0[7 * 3];
  double in1[(2 * 64 + 1) * 2], out1[(2 * 64 + 1) * 2];
  int32_t in2[5], out2[5];
  for (size_t e = 0; e < rows[0] * re[0]; e++)
    in0[e] = (int32_t)(rank * 7 + (int)e);
  for (size_t e = 0; e < rows[1] * re[1]; e++)
    in1[e] = (double)(rank + 1) * 0.5 + (double)e;
  for (size_t e = 0; e < rows[2] * re[2]; e++)
    in2[e] = (int32_t)(rank - (int)e);
  size_t mine[K];
  hk_collective c[K] = {
      {.kind = HK_REDUCESCATTER,
       .name = "rs.0",
       .dtype = HK_INT32,
       .op = HK_SUM,
       .sendbuf = in0,
       .recvbuf = out0,
       .rows = rows[0],
       .row_elems = re[0],
       .rows_out = &mine[0]},
      {.kind = HK_REDUCESCATTER,
       .name = "rs.1",
       .dtype = HK_FLOAT64,
       .op = HK_AVERAGE,
       .sendbuf = in1,
       .recvbuf = out1,
       .rows = rows[1],
       .row_elems = re[1],
       .prescale = 2.0,
       .postscale = 0.25,
       .rows_out = &mine[1]},
      {.kind = HK_REDUCESCATTER,
       .name = "rs.2",
       .dtype = HK_INT32,
       .op = HK_SUM,
       .sendbuf = in2,
       .recvbuf = out2,
       .rows = rows[2],
       .row_elems = re[2],
       .rows_out = &mine[2]},
  };
  hk_handle h;
  HKT_OK(hk_submit_group(c, K, &h));
  HKT_OK(hk_wait(h));
  for (int i = 0; i < K; i++) {
    const size_t first = rs_first(rows[i], np, rank);
    const size_t want_rows = rs_first(rows[i], np, rank + 1) - first;
    HKT_CHECK(mine[i] == want_rows, "rs.%d: %zu rows, want %zu", i, mine[i],
              want_rows);
    for (size_t w = 0; w < want_rows; w++)
      for (size_t e = 0; e < re[i]; e++) {
        const size_t at = (first + w) * re[i] + e, k = w * re[i] + e;
        if (i == 1) { /* average of 2x, then x 0.25: exact in binary64 */
          double sum = 0;
          for (int r = 0; r < np; r++)
            sum += 2.0 * ((double)(r + 1) * 0.5 + (double)at);
          double want = sum / np * 0.25;
          HKT_CHECK(fabs(out1[k] - want) <= 1e-12 * fabs(want),
                    "rs.1[%zu]: got %.17g, want %.17g", k, out1[k], want);
        } else {
          int64_t want = 0;
          for (int r = 0; r < np; r++)
            want += i == 0 ? r * 7 + (int64_t)at : r - (int64_t)at;
          const int32_t got = i == 0 ? out0[k] : out2[k];
          HKT_CHECK(got == (int32_t)want, "rs.%d[%zu]: got %d, want %lld", i, k,
                    got, (long long)want);
        }
      }
  }
}

static void groups(void) {
  hk_negotiation_counts before, after;
  HKT_OK(hk_internal_negotiation_counts(&before));
  group_allgather();
  group_reducescatter();
  HKT_OK(hk_internal_negotiation_counts(&after));
  /* the three allgathers run as one fused batch, the two int32 sums of the
   * reduce-scatters as another (the float64 average alone: a fusion
   * buffer holds one dtype and op); a world of one copies nothing into a
   * fusion buffer (HK_FUSION_DIRECT_BYTES is (size - 1) x 256 KiB) */
  if (hk_size() == 1)
    return;
  HKT_CHECK(after.fused_batches - before.fused_batches == 2 &&
                after.fused_tensors - before.fused_tensors == 5,
            "fused %llu batches of %llu tensors, want 2 of 5",
            (unsigned long long)(after.fused_batches - before.fused_batches),
            (unsigned long long)(after.fused_tensors - before.fused_tensors));
}

/* Expects hk_wait(h) to fail with HK_ERR_MISMATCH and every needle in the
 * message. */
static void expect_mismatch(hk_handle h, const char *const *needles, int n) {
  hk_status st = hk_wait(h);
  HKT_CHECK(st == HK_ERR_MISMATCH, "got %s (%s), want a mismatch",
            hk_strerror(st), hk_last_error());
  for (int i = 0; i < n; i++)
    HKT_CHECK(strstr(hk_last_error(), needles[i]), "'%s' not in: %s",
              needles[i], hk_last_error());
}

static void shapes(void) {
  const int rank = hk_rank(), np = hk_size();
  enum { N = 17 * 1311 }; /* = 391 x 57 */
  float *buf = calloc(N, sizeof *buf), ok[4] = {1, 2, 3, 4};
  int64_t odd[2] = {17, 1311}, even[2] = {391, 57};
  const int64_t *shape = rank == 0 ? odd : even;
  hk_collective ar = {.kind = HK_ALLREDUCE,
                      .name = "shape.ar",
                      .dtype = HK_FLOAT32,
                      .op = HK_SUM,
                      .sendbuf = buf,
                      .recvbuf = buf,
                      .count = N,
                      .ndims = 2,
                      .shape = shape};
  hk_collective fine = {.kind = HK_ALLREDUCE,
                        .name = "shape.ok",
                        .dtype = HK_FLOAT32,
                        .op = HK_SUM,
                        .sendbuf = ok,
                        .recvbuf = ok,
                        .count = 4,
                        .ndims = 1,
                        .shape = (int64_t[]){4}};
  hk_collective rs = {.kind = HK_REDUCESCATTER,
                      .name = "shape.rs",
                      .dtype = HK_FLOAT32,
                      .op = HK_SUM,
                      .sendbuf = buf,
                      .recvbuf = buf,
                      .rows = (size_t)shape[0],
                      .row_elems = (size_t)shape[1],
                      .ndims = 2,
                      .shape = shape};
  hk_handle h[3];
  HKT_OK(hk_submit(&ar, &h[0]));
  HKT_OK(hk_submit(&fine, &h[1]));
  HKT_OK(hk_submit(&rs, &h[2]));
  const char *need[] = {"shape.ar", "shape 17x1311 on rank 0",
                        np > 2 ? "shape 391x57 on ranks 1"
                               : "shape 391x57 on "
                                 "rank 1"};
  if (np > 1)
    expect_mismatch(h[0], need, 3);
  else
    HKT_OK(hk_wait(h[0]));
  HKT_OK(hk_wait(h[1]));
  for (int i = 0; i < 4; i++)
    HKT_CHECK(ok[i] == (float)((i + 1) * np), "shape.ok[%d] = %g", i,
              (double)ok[i]);
  const char *need_rs[] = {"shape.rs", "17x1311", "391x57"};
  if (np > 1)
    expect_mismatch(h[2], need_rs, 3);
  else
    HKT_OK(hk_wait(h[2]));
  /* allgather: the first extent (rows) may differ, the others may not */
  float row[6 * 4] = {0};
  void *out = NULL;
  int64_t mine[2] = {rank + 1, 2};
  hk_collective ag = {.kind = HK_ALLGATHER,
                      .name = "shape.ag.rows",
                      .dtype = HK_FLOAT32,
                      .sendbuf = row,
                      .rows = (size_t)rank + 1,
                      .row_elems = 2,
                      .recvbuf_out = &out,
                      .ndims = 2,
                      .shape = mine};
  HKT_OK(hk_submit(&ag, &h[0]));
  HKT_OK(hk_wait(h[0]));
  hk_free(out);
  /* the same row size, 6, in different shapes: 2x3 and 3x2 */
  int64_t tail[3] = {1, rank == 0 ? 2 : 3, rank == 0 ? 3 : 2};
  ag.name = "shape.ag.cols";
  ag.rows = 1;
  ag.row_elems = 6;
  ag.ndims = 3;
  ag.shape = tail;
  out = NULL;
  HKT_OK(hk_submit(&ag, &h[0]));
  const char *need_ag[] = {"shape.ag.cols", "shape *x2x3 on rank 0",
                           "shape *x3x2 on rank"};
  if (np > 1)
    expect_mismatch(h[0], need_ag, 3);
  else
    HKT_OK(hk_wait(h[0]));
  hk_free(out);
  free(buf);
}

/* hk_submit refuses, on this rank alone, saying what is wrong. */
static void expect_refused(const hk_collective *c, const char *needle) {
  hk_handle h;
  hk_status st = hk_submit(c, &h);
  HKT_CHECK(st == HK_ERR_INVALID_ARG && strstr(hk_last_error(), needle),
            "'%s': got %s (%s)", needle, hk_strerror(st), hk_last_error());
}

static void refusals(void) {
  float v[6] = {0};
  int64_t two_by_three[2] = {2, 3}, negative[1] = {-1};
  hk_collective c = {.kind = HK_ALLREDUCE,
                     .name = "bad",
                     .dtype = HK_FLOAT32,
                     .op = HK_SUM,
                     .sendbuf = v,
                     .recvbuf = v,
                     .count = 5,
                     .ndims = 2,
                     .shape = two_by_three};
  expect_refused(&c, "hk_submit: tensor 'bad': its shape holds 6 elements, "
                     "its counts 5");
  c.count = 1;
  c.ndims = 1;
  c.shape = negative;
  expect_refused(&c, "extent 0 of its shape is -1");
  c.ndims = HK_MAX_DIMS + 1;
  expect_refused(&c, "a shape of 9 dimensions");
  c.ndims = 0;
  c.kind = (hk_collective_kind)8; /* past HK_JOIN, the last kind */
  expect_refused(&c, "unknown kind 8");
  c.kind = (hk_collective_kind)0;
  expect_refused(&c, "unknown kind 0");
  c.kind = HK_ALLREDUCE;
  c.set = 7;
  expect_refused(&c, "process set 7 does not exist");
  c.set = HK_WORLD;
  hk_collective g[2] = {c, c};
  g[1].kind = HK_BROADCAST;
  hk_handle h;
  hk_status st = hk_submit_group(g, 2, &h);
  HKT_CHECK(st == HK_ERR_INVALID_ARG &&
                strstr(hk_last_error(), "of one kind and one process set"),
            "mixed group: %s", hk_last_error());
  g[1] = c;
  st = hk_submit_group(g, 2, &h);
  HKT_CHECK(st == HK_ERR_DUPLICATE_NAME &&
                strstr(hk_last_error(), "'bad' appears twice in the group"),
            "duplicate: %s", hk_last_error());
  /* nothing was left in flight: the name is free */
  HKT_OK(hk_submit(&c, &h));
  HKT_OK(hk_wait(h));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: w_submit groups|shapes|refusals\n");
    return 2;
  }
  HKT_OK(hk_init());
  if (!strcmp(argv[1], "groups"))
    groups();
  else if (!strcmp(argv[1], "shapes"))
    shapes();
  else if (!strcmp(argv[1], "refusals"))
    refusals();
  else
    HKT_CHECK(0, "unknown mode %s", argv[1]);
  HKT_OK(hk_shutdown());
  printf("submit ok\n");
  return 0;
}
