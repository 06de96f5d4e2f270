/*
 * w_errors - negotiation errors complete on every rank and lose nothing:
 *  1. 'grad.w' has 16 elements on every rank but rank 1 (12), submitted at
 *     the same time as a healthy 'grad.ok': grad.w fails with
 *     HK_ERR_MISMATCH on EVERY rank, naming the tensor, both counts and
 *     the ranks; grad.ok has the right sum; a later grad.w that agrees
 *     works (cases C2, and the mismatch test).
 *  2. dtype, op and broadcast-root mismatches name the field and values.
 *  3. A name submitted twice while in flight fails at once with
 *     HK_ERR_DUPLICATE_NAME on that rank only; the first completes (C3).
 *  4. A call without a job says which side of it: "called before hk_init"
 *     before, "called after hk_shutdown" after (and hk_init again works);
 *     hk_rank, hk_size and the other four queries give -1 then.
 *  6. Sizes: an allgather whose rows, summed over the ranks, would wrap
 *     its size in bytes (rank 1: 2^61 - 1 float64 rows) fails with
 *     HK_ERR_INVALID_ARG on every rank naming it, rank 1 and its rows;
 *     one whose output no rank can allocate (rank 1: 2^40 rows, 8 TiB;
 *     skipped when the kernel overcommits always) fails with
 *     HK_ERR_NOMEM on every rank; the next allgather is right.
 * Prints "errors ok" when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wcommon.h"

/* Under AddressSanitizer and ThreadSanitizer, malloc of 8 TiB returns
 * NULL as glibc's does (section 6) instead of ending the process; unused
 * otherwise. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) {
  return "allocator_may_return_null=1";
}

static void expect_mismatch(hk_status st, const char *const needles[]) {
  HKT_CHECK(st == HK_ERR_MISMATCH, "expected a mismatch, got %s: %s",
            hk_strerror(st), hk_last_error());
  for (int i = 0; needles[i]; i++)
    HKT_CHECK(strstr(hk_last_error(), needles[i]),
              "mismatch message '%s' lacks '%s'", hk_last_error(), needles[i]);
}

/* st must be HK_ERR_NOT_INITIALIZED naming fn and `when` */
static void expect_no_job(hk_status st, const char *fn, const char *when) {
  HKT_CHECK(st == HK_ERR_NOT_INITIALIZED, "%s gave %s, not NOT_INITIALIZED", fn,
            hk_strerror(st));
  HKT_CHECK(strstr(hk_last_error(), fn) && strstr(hk_last_error(), when),
            "%s: '%s' lacks '%s'", fn, hk_last_error(), when);
}

/* Every entry point that needs a job, called without one. */
static void calls_without_a_job(const char *when) {
  float f[2] = {1, 2};
  hk_handle h;
  expect_no_job(hk_allreduce("x", f, f, 2, HK_FLOAT32, HK_SUM), "hk_allreduce",
                when);
  expect_no_job(hk_broadcast_async("x", f, 2, HK_FLOAT32, 0, &h),
                "hk_broadcast", when);
  expect_no_job(hk_barrier(), "hk_barrier", when);
  int last;
  expect_no_job(hk_join(&last), "hk_join", when);
  expect_no_job(hk_shutdown(), "hk_shutdown", when);
  /* the job's shape is -1 outside a job (hk.h) */
  const int shape[6] = {hk_rank(),       hk_size(),       hk_local_rank(),
                        hk_local_size(), hk_cross_rank(), hk_cross_size()};
  for (int i = 0; i < 6; i++)
    HKT_CHECK(shape[i] == -1, "query %d of hk_rank..hk_cross_size gave %d %s",
              i, shape[i], when);
}

int main(void) {
  calls_without_a_job("called before hk_init");
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  HKT_CHECK(np >= 2, "run with at least 2 ranks");

  /* 1. count mismatch beside a healthy tensor */
  float w[16], ok[8];
  for (int i = 0; i < 16; i++)
    w[i] = 1.0f;
  for (int i = 0; i < 8; i++)
    ok[i] = (float)(rank + i);
  hk_handle hw, hok;
  HKT_OK(hk_allreduce_async("grad.w", w, w, rank == 1 ? 12 : 16, HK_FLOAT32,
                            HK_SUM, &hw));
  HKT_OK(hk_allreduce_async("grad.ok", ok, ok, 8, HK_FLOAT32, HK_SUM, &hok));
  const char *const count_needles[] = {"grad.w", "count",  "16",
                                       "12",     "rank 1", NULL};
  expect_mismatch(hk_wait(hw), count_needles);
  if (rank == 0)
    printf("mismatch message: %s\n", hk_last_error());
  HKT_OK(hk_wait(hok));
  for (int i = 0; i < 8; i++) {
    float expect = 0;
    for (int r = 0; r < np; r++)
      expect += (float)(r + i);
    HKT_CHECK(ok[i] == expect, "grad.ok[%d] = %g, expected %g", i, ok[i],
              expect);
  }
  for (int i = 0; i < 16; i++)
    w[i] = (float)rank;
  HKT_OK(hk_allreduce("grad.w", w, w, 16, HK_FLOAT32, HK_MAX));
  HKT_CHECK(w[15] == (float)(np - 1), "grad.w after the mismatch: %g", w[15]);

  /* 2. dtype, op, root */
  int32_t x[4] = {1, 2, 3, 4};
  const char *const dtype_needles[] = {"t.dtype", "dtype", "int32", "int64",
                                       NULL};
  expect_mismatch(hk_allreduce("t.dtype", x, x, 2,
                               rank == np - 1 ? HK_INT64 : HK_INT32, HK_SUM),
                  dtype_needles);
  const char *const op_needles[] = {"t.op", "op", "sum", "max", NULL};
  expect_mismatch(
      hk_allreduce("t.op", x, x, 4, HK_INT32, rank == 0 ? HK_MAX : HK_SUM),
      op_needles);
  const char *const root_needles[] = {"t.root", "root", NULL};
  expect_mismatch(hk_broadcast("t.root", x, 4, HK_INT32, rank == 0 ? 1 : 0),
                  root_needles);

  /* 3. duplicate name while in flight (on rank 0 only). The others submit
   * 'dup' only after a barrier that rank 0 enters after its second try:
   * until then 'dup' cannot complete, so that try meets it in flight. */
  int64_t d[3] = {rank, rank, rank}, d2[3];
  hk_handle hd, hd2;
  if (rank == 0) {
    HKT_OK(hk_allreduce_async("dup", d, d, 3, HK_INT64, HK_SUM, &hd));
    hk_status st = hk_allreduce_async("dup", d2, d2, 3, HK_INT64, HK_SUM, &hd2);
    HKT_CHECK(st == HK_ERR_DUPLICATE_NAME, "second 'dup' gave %s",
              hk_strerror(st));
    HKT_CHECK(strstr(hk_last_error(), "'dup'") &&
                  strstr(hk_last_error(), "in flight"),
              "duplicate message: %s", hk_last_error());
  }
  HKT_OK(hk_barrier());
  if (rank != 0)
    HKT_OK(hk_allreduce_async("dup", d, d, 3, HK_INT64, HK_SUM, &hd));
  HKT_OK(hk_wait(hd));
  HKT_CHECK(d[2] == (int64_t)np * (np - 1) / 2, "dup sum %lld",
            (long long)d[2]);

  /* 4. bad arguments are refused at once with a message naming them */
  hk_handle hb;
  HKT_CHECK(hk_allreduce_async("", x, x, 1, HK_INT32, HK_SUM, &hb) ==
                    HK_ERR_INVALID_ARG &&
                strstr(hk_last_error(), "name is empty"),
            "empty name: %s", hk_last_error());
  HKT_CHECK(hk_allreduce_async("bad.op", x, x, 1, HK_INT32, (hk_op)42, &hb) ==
                    HK_ERR_INVALID_ARG &&
                strstr(hk_last_error(), "unknown op 42"),
            "bad op: %s", hk_last_error());
  HKT_CHECK(hk_broadcast_async("bad.root", x, 1, HK_INT32, np, &hb) ==
                    HK_ERR_INVALID_ARG &&
                strstr(hk_last_error(), "root"),
            "bad root: %s", hk_last_error());
  HKT_CHECK(hk_allreduce_async("overlap", x, x + 1, 2, HK_INT32, HK_SUM, &hb) ==
                    HK_ERR_INVALID_ARG &&
                strstr(hk_last_error(), "overlap"),
            "overlap: %s", hk_last_error());

  /* 5. a cached tensor whose count changes on one rank only: the cache
   * entry is invalidated and the mismatch reported on every rank; the
   * next agreeing step works (and is cached again). */
  int32_t c[16];
  for (int step = 0; step < 7; step++) {
    size_t n = step == 3 && rank == 1 ? 12 : 16;
    for (int i = 0; i < 16; i++)
      c[i] = rank + i + step;
    hk_status st = hk_allreduce("cached.t", c, c, n, HK_INT32, HK_SUM);
    if (step == 3) {
      const char *const needles[] = {"cached.t", "count 16", "count 12",
                                     "rank 1", NULL};
      expect_mismatch(st, needles);
      continue;
    }
    HKT_OK(st);
    for (int i = 0; i < 16; i++)
      HKT_CHECK(c[i] == np * (i + step) + np * (np - 1) / 2,
                "cached.t step %d [%d] = %d", step, i, c[i]);
  }

  /* 6. sizes that overflow, an output nobody can allocate */
  double one[1] = {rank}, *all = NULL;
  const size_t most = SIZE_MAX / 8; /* rows: each rank's own count fits */
  hk_status st = hk_allgather("huge.rows", one, rank == 1 ? most : 1, 1,
                              HK_FLOAT64, (void **)&all, NULL);
  HKT_CHECK(st == HK_ERR_INVALID_ARG && !all,
            "huge.rows gave %s (%s), not HK_ERR_INVALID_ARG", hk_strerror(st),
            hk_last_error());
  HKT_CHECK(strstr(hk_last_error(), "'huge.rows'") &&
                strstr(hk_last_error(), "rows 2305843009213693951 on rank 1") &&
                strstr(hk_last_error(), "overflow"),
            "huge.rows: %s", hk_last_error());
  if (rank == 0)
    printf("size message: %s\n", hk_last_error());
  FILE *oc = fopen("/proc/sys/vm/overcommit_memory", "r");
  int always = oc && fgetc(oc) == '1';
  if (oc)
    fclose(oc);
  if (!always) {
    st = hk_allgather("huge.alloc", one, rank == 1 ? (size_t)1 << 40 : 1, 1,
                      HK_FLOAT64, (void **)&all, NULL);
    HKT_CHECK(st == HK_ERR_NOMEM && !all &&
                  strstr(hk_last_error(), "'huge.alloc'") &&
                  strstr(hk_last_error(), "cannot allocate"),
              "huge.alloc gave %s: %s", hk_strerror(st), hk_last_error());
    if (rank == 0)
      printf("allocation message: %s\n", hk_last_error());
  }
  double two[2] = {rank, 10.0 * rank};
  size_t rows[64];
  HKT_OK(
      hk_allgather("after.huge", two, 2, 1, HK_FLOAT64, (void **)&all, rows));
  for (int r = 0; r < np; r++)
    HKT_CHECK(rows[r] == 2 && all[2 * r] == r && all[2 * r + 1] == 10.0 * r,
              "after.huge: rank %d's rows %zu: %g %g", r, rows[r], all[2 * r],
              all[2 * r + 1]);
  hk_free(all);

  HKT_OK(hk_barrier());
  HKT_OK(hk_shutdown());
  calls_without_a_job("called after hk_shutdown");
  printf("errors ok\n");
  return 0;
}
