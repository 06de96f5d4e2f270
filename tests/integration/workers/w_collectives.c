/*
 * w_collectives - allgather (ragged first dimension, empty contributions),
 * reducescatter (rows not divisible by the world size), alltoall (per-rank
 * splits, empty blocks), grouped allreduce, and join (ranks that run out
 * of data: identity contributions, the average over contributors, the
 * last rank to join), each checked element by element against a serial
 * computation. Values are small integers, so the checks are exact.
 */
#include <string.h>

#include "wcommon.h"

static double val(int rank, size_t row, size_t col) {
  return (double)((rank * 7 + (int)row * 3 + (int)col) % 23) - 11;
}

static void test_allgather(int rank, int np) {
  const size_t re = 3;
  size_t rows = (size_t)(rank * 3 + 1) % 5;
  float *send = malloc((rows * re + 1) * sizeof(float));
  for (size_t i = 0; i < rows; i++)
    for (size_t c = 0; c < re; c++)
      send[i * re + c] = (float)val(rank, i, c);
  void *out = NULL;
  size_t *per = calloc((size_t)np, sizeof *per);
  HKT_OK(hk_allgather("ag", send, rows, re, HK_FLOAT32, &out, per));
  size_t at = 0;
  for (int r = 0; r < np; r++) {
    size_t rr = (size_t)(r * 3 + 1) % 5;
    HKT_CHECK(per[r] == rr, "allgather: rank %d has %zu rows, reported %zu", r,
              rr, per[r]);
    for (size_t i = 0; i < rr; i++, at++)
      for (size_t c = 0; c < re; c++)
        HKT_CHECK(((float *)out)[at * re + c] == (float)val(r, i, c),
                  "allgather: row %zu of rank %d col %zu", i, r, c);
  }
  free(out);
  free(per);
  free(send);
}

static void test_reducescatter(int rank, int np) {
  const size_t re = 2, rows = 7 * (size_t)np + 3;
  int32_t *send = malloc(rows * re * sizeof *send);
  for (size_t i = 0; i < rows * re; i++)
    send[i] = (int32_t)val(rank, i / re, i % re);
  size_t q = rows / (size_t)np, m = rows % (size_t)np;
  size_t first = (size_t)rank * q + ((size_t)rank < m ? (size_t)rank : m);
  size_t mine = q + ((size_t)rank < m);
  int32_t *out = malloc((q + 1) * re * sizeof *out);
  size_t got = 0;
  HKT_OK(hk_reducescatter("rs", send, rows, re, HK_INT32, HK_SUM, out, &got));
  HKT_CHECK(got == mine, "reducescatter: %zu rows, expected %zu", got, mine);
  for (size_t i = 0; i < mine * re; i++) {
    int32_t expect = 0;
    for (int r = 0; r < np; r++)
      expect += (int32_t)val(r, first + i / re, i % re);
    HKT_CHECK(out[i] == expect, "reducescatter: element %zu = %d, want %d", i,
              out[i], expect);
  }
  free(send);
  free(out);
}

static size_t split_of(int from, int to) {
  return (size_t)((from + 2 * to) % 4);
}

static void test_alltoall(int rank, int np) {
  const size_t re = 5;
  size_t *splits = malloc((size_t)np * sizeof *splits), rows = 0;
  for (int j = 0; j < np; j++)
    rows += splits[j] = split_of(rank, j);
  int64_t *send = malloc((rows * re + 1) * sizeof *send);
  size_t at = 0;
  for (int j = 0; j < np; j++) /* block for rank j: rows tagged (j, k) */
    for (size_t k = 0; k < splits[j]; k++, at++)
      for (size_t c = 0; c < re; c++)
        send[at * re + c] = rank * 10000 + j * 100 + (int64_t)(k * re + c);
  void *out = NULL;
  size_t *recv = calloc((size_t)np, sizeof *recv);
  HKT_OK(hk_alltoall("a2a", send, splits, re, HK_INT64, &out, recv));
  at = 0;
  for (int j = 0; j < np; j++) {
    HKT_CHECK(recv[j] == split_of(j, rank),
              "alltoall: %zu rows from rank %d, expected %zu", recv[j], j,
              split_of(j, rank));
    for (size_t k = 0; k < recv[j]; k++, at++)
      for (size_t c = 0; c < re; c++)
        HKT_CHECK(((int64_t *)out)[at * re + c] ==
                      j * 10000 + rank * 100 + (int64_t)(k * re + c),
                  "alltoall: row %zu from rank %d", k, j);
  }
  free(out);
  free(recv);
  free(send);
  free(splits);
}

static void test_grouped(int rank, int np) {
  enum { N = 5 };
  const char *names[N] = {"g.a", "g.b", "g.c", "g.d", "g.e"};
  size_t counts[N] = {1, 1000, 0, 77, 4097};
  double *bufs[N];
  for (int t = 0; t < N; t++) {
    bufs[t] = malloc((counts[t] + 1) * sizeof(double));
    for (size_t i = 0; i < counts[t]; i++)
      bufs[t][i] = val(rank, (size_t)t, i);
  }
  HKT_OK(hk_grouped_allreduce(names, (const void *const *)bufs,
                              (void *const *)bufs, counts, N, HK_FLOAT64,
                              HK_SUM));
  for (int t = 0; t < N; t++) {
    for (size_t i = 0; i < counts[t]; i++) {
      double e = 0;
      for (int r = 0; r < np; r++)
        e += val(r, (size_t)t, i);
      HKT_CHECK(bufs[t][i] == e, "grouped %s[%zu] = %g, want %g", names[t], i,
                bufs[t][i], e);
    }
    free(bufs[t]);
  }
}

/* The last rank joins at once; the others keep reducing without it, and
 * hold barriers among themselves; once all joined, a barrier needs every
 * rank again (a joined rank's next barrier pairs with the others' next). */
static void test_join(int rank, int np) {
  int joiner = np - 1, last = -1;
  if (rank == joiner) {
    HKT_OK(hk_join(&last));
  } else {
    for (int step = 0; step < 3; step++) {
      float s[6], a[6], mx[6];
      for (int i = 0; i < 6; i++)
        s[i] = a[i] = mx[i] = (float)(rank + i + step);
      HKT_OK(hk_allreduce("j.sum", s, s, 6, HK_FLOAT32, HK_SUM));
      HKT_OK(hk_allreduce("j.avg", a, a, 6, HK_FLOAT32, HK_AVERAGE));
      HKT_OK(hk_allreduce("j.max", mx, mx, 6, HK_FLOAT32, HK_MIN));
      int n = np - 1; /* contributors */
      for (int i = 0; i < 6; i++) {
        float sum = 0;
        for (int r = 0; r < n; r++)
          sum += (float)(r + i + step);
        HKT_CHECK(s[i] == sum, "join: sum %g want %g", s[i], sum);
        HKT_CHECK(a[i] == sum / (float)n, "join: average %g want %g", a[i],
                  sum / (float)n);
        HKT_CHECK(mx[i] == (float)(i + step), "join: min %g", mx[i]);
      }
    }
    HKT_OK(hk_barrier());
    HKT_OK(hk_barrier());
    float b = 1;
    hk_status st = hk_broadcast("j.bcast", &b, 1, HK_FLOAT32, joiner);
    HKT_CHECK(st == HK_ERR_MISMATCH && strstr(hk_last_error(), "has joined"),
              "broadcast from a joined root gave %s: %s", hk_strerror(st),
              hk_last_error());
    HKT_OK(hk_join(&last));
  }
  HKT_CHECK(last >= 0 && last < np && (np == 1 || last != joiner),
            "join: last rank %d", last);
  /* after everyone joined, collectives need every rank again */
  int32_t v = rank;
  HKT_OK(hk_allreduce("after.join", &v, &v, 1, HK_INT32, HK_SUM));
  HKT_CHECK(v == np * (np - 1) / 2, "after join: %d", v);
  HKT_OK(hk_barrier());
}

int main(void) {
  HKT_OK(hk_init());
  int rank = hk_rank(), np = hk_size();
  test_allgather(rank, np);
  test_reducescatter(rank, np);
  test_alltoall(rank, np);
  test_grouped(rank, np);
  test_join(rank, np);
  HKT_OK(hk_shutdown());
  printf("collectives ok: np=%d\n", np);
  return 0;
}
