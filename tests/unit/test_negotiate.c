/* Unit tests of rank 0's readiness table: order, readiness, mismatch
 * reasons naming tensor, field, values and ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/negotiate.h"

static hk_wire_request req(const char *name, uint64_t count) {
  hk_wire_request q = {.coll = HK_COLL_ALLREDUCE,
                       .dtype = HK_FLOAT32,
                       .op = HK_SUM,
                       .count = count};
  snprintf(q.name, sizeof q.name, "%s", name);
  return q;
}

/* The ready responses, which must be `want` of them (free them with
 * hk_negotiator_free_responses(rs, want)). */
static hk_wire_response *take(hk_negotiator *n, uint32_t want) {
  hk_wire_response *rs;
  uint32_t cnt;
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, want);
  return rs;
}

/* r failed as a mismatch, for `reason`. */
static void mismatch(const hk_wire_response *r, const char *reason) {
  assert_int_equal(r->status, HK_ERR_MISMATCH);
  assert_string_equal(r->reason, reason);
}

/* r failed as invalid (a size that would overflow), for `reason`. */
static void invalid(const hk_wire_response *r, const char *reason) {
  assert_int_equal(r->status, HK_ERR_INVALID_ARG);
  assert_string_equal(r->reason, reason);
}

static void test_ready_only_when_all_submitted(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(3, &n), HK_OK);
  hk_wire_request a = req("a", 4), b = req("b", 4);
  hk_wire_response *rs;
  uint32_t cnt;
  assert_int_equal(hk_negotiator_add(n, 0, &a, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 1, &b, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 0);
  assert_int_equal(hk_negotiator_pending(n), 2);
  /* b completes before a: order follows completion, not first sight */
  hk_wire_request ba[2] = {b, a};
  assert_int_equal(hk_negotiator_add(n, 2, ba, 2, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 0); /* a still lacks rank 1, b lacks rank 0 */
  assert_int_equal(hk_negotiator_add(n, 0, &b, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 1, &a, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 2);
  assert_string_equal(rs[0].name, "b");
  assert_string_equal(rs[1].name, "a");
  assert_int_equal(rs[0].status, HK_OK);
  assert_null(rs[0].reason);
  hk_negotiator_free_responses(rs, cnt);
  assert_int_equal(hk_negotiator_pending(n), 0);
  /* the same name can be negotiated again once done */
  for (int r = 0; r < 3; r++)
    assert_int_equal(hk_negotiator_add(n, r, &a, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 1);
  hk_negotiator_free_responses(rs, cnt);
  hk_negotiator_destroy(n);
}

/* A process set's table: its members are 0..size-1, its messages name
 * them by their job ranks and say which set; the agreed request is kept
 * for rank 0 (when asked) and the straggler is a job rank. */
static void test_process_set_names(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(2, &n), HK_OK);
  const int ranks[2] = {4, 6};
  assert_int_equal(hk_negotiator_name(n, 3, ranks), HK_OK);
  hk_negotiator_keep_requests(n, 1);
  for (int r = 0; r < 2; r++) {
    hk_wire_request q = req("w", r ? 12 : 16);
    q.set = 3;
    assert_int_equal(hk_negotiator_add(n, r, &q, 1, HK_WIRE_NO_BIT, r), HK_OK);
    hk_wire_request rm = {.coll = HK_COLL_SET_REMOVE, .count = r ? 9 : 2};
    strcpy(rm.name, "hk.process_set.0");
    assert_int_equal(hk_negotiator_add(n, r, &rm, 1, HK_WIRE_NO_BIT, r), HK_OK);
  }
  hk_wire_request ok = req("fine", 8);
  assert_int_equal(hk_negotiator_add(n, 1, &ok, 1, HK_WIRE_NO_BIT, 1), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 0, &ok, 1, HK_WIRE_NO_BIT, 2), HK_OK);
  hk_wire_request x = req("x", 8);
  assert_int_equal(hk_negotiator_add(n, 0, &x, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  char what[512];
  double oldest;
  assert_int_equal(hk_negotiator_stalled(n, 5, 0, what, sizeof what, &oldest),
                   1);
  assert_string_equal(what, "tensor 'x' in process set 3 (waiting 5 s): "
                            "missing on rank 6, submitted by rank 4");
  hk_wire_response *rs;
  uint32_t cnt;
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 3);
  assert_string_equal(rs[0].reason,
                      "tensor 'w' in process set 3: ranks disagree: count "
                      "differs: count 16 on rank 4; count 12 on rank 6.");
  assert_null(rs[0].agreed);
  assert_string_equal(rs[1].reason, "tensor 'hk.process_set.0' in process "
                                    "set 3: ranks disagree: process set "
                                    "differs: process set 2 on rank 4; "
                                    "process set 9 on rank 6.");
  assert_int_equal(rs[2].status, HK_OK);
  assert_int_equal(rs[2].last_rank, 4); /* set rank 0 came last */
  assert_non_null(rs[2].agreed);
  assert_string_equal(rs[2].agreed->name, "fine");
  assert_int_equal(rs[2].agreed->count, 8);
  hk_negotiator_free_responses(rs, cnt);
  hk_negotiator_destroy(n);
}

static void test_count_mismatch_reason(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(4, &n), HK_OK);
  for (int r = 0; r < 4; r++) {
    hk_wire_request q = req("grad.w", r == 1 ? 12 : 16);
    assert_int_equal(hk_negotiator_add(n, r, &q, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  }
  hk_wire_response *rs = take(n, 1);
  mismatch(&rs[0], "tensor 'grad.w': ranks disagree: count differs: count "
                   "16 on ranks 0, 2, 3; count 12 on rank 1.");
  hk_negotiator_free_responses(rs, 1);
  hk_negotiator_destroy(n);
}

static void test_several_fields_and_root(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(2, &n), HK_OK);
  hk_wire_request a = req("t", 8), b = req("t", 8);
  b.dtype = HK_INT64;
  b.op = HK_MAX;
  assert_int_equal(hk_negotiator_add(n, 0, &a, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 1, &b, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  hk_wire_request c = req("bc", 8), d = req("bc", 8);
  c.coll = d.coll = HK_COLL_BROADCAST;
  c.root = 0;
  d.root = 1;
  assert_int_equal(hk_negotiator_add(n, 0, &c, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 1, &d, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  hk_wire_response *rs;
  uint32_t cnt;
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 2);
  assert_non_null(strstr(rs[0].reason, "dtype float32 on rank 0; dtype "
                                       "int64 on rank 1"));
  assert_non_null(strstr(rs[0].reason, "op sum on rank 0; op max on rank 1"));
  assert_null(strstr(rs[0].reason, "count"));
  assert_non_null(strstr(rs[1].reason, "root 0 on rank 0; root 1 on rank 1"));
  hk_negotiator_free_responses(rs, cnt);
  hk_negotiator_destroy(n);
}

static void test_duplicate_and_bad_rank(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(2, &n), HK_OK);
  hk_wire_request a = req("a", 1);
  assert_int_equal(hk_negotiator_add(n, 1, &a, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  assert_int_equal(hk_negotiator_add(n, 1, &a, 1, HK_WIRE_NO_BIT, 0),
                   HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "rank 1 submitted tensor 'a' twice"));
  assert_int_equal(hk_negotiator_add(n, 2, &a, 1, HK_WIRE_NO_BIT, 0),
                   HK_ERR_INVALID_ARG);
  hk_negotiator_destroy(n); /* frees the pending entry (ASan checks) */
}

/* A reason that would exceed the wire limit is cut, never overflowing. */
static void test_long_reason_truncated(void **state) {
  (void)state;
  int size = 600;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(size, &n), HK_OK);
  for (int r = 0; r < size; r++) {
    hk_wire_request q = req("wide", (uint64_t)r);
    assert_int_equal(hk_negotiator_add(n, r, &q, 1, HK_WIRE_NO_BIT, 0), HK_OK);
  }
  hk_wire_response *rs;
  uint32_t cnt;
  assert_int_equal(hk_negotiator_take_ready(n, &rs, &cnt), HK_OK);
  assert_int_equal(cnt, 1);
  assert_true(strlen(rs[0].reason) <= HK_WIRE_MAX_REASON_LEN);
  assert_non_null(strstr(rs[0].reason, "..."));
  hk_negotiator_free_responses(rs, cnt);
  hk_negotiator_destroy(n);
}

/* q with a shape of n extents. */
static hk_wire_request shaped(const char *name, unsigned coll, int n,
                              const int64_t *shape) {
  uint64_t count = 1;
  for (int d = 0; d < n; d++)
    count *= (uint64_t)shape[d];
  hk_wire_request q = req(name, count);
  q.coll = (uint8_t)coll;
  q.ndims = (uint8_t)n;
  memcpy(q.shape, shape, (size_t)n * sizeof shape[0]);
  if (coll != HK_COLL_ALLREDUCE) { /* rows of shape[1..] */
    q.count = (uint64_t)shape[0];
    q.row_elems = count / (shape[0] ? (uint64_t)shape[0] : 1);
  }
  return q;
}

/* Shapes: an allreduce of 17x1311 against 391x57 (the same count) fails
 * naming both; an allgather's and an alltoall's first extent (the rows a
 * rank sends) may differ, their other extents may not. */
static void test_shapes(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(2, &n), HK_OK);
  const int64_t s0[] = {17, 1311}, s1[] = {391, 57};
  const int64_t g0[] = {3, 4, 5}, g1[] = {7, 4, 5}, g2[] = {7, 4, 6};
  hk_wire_request q[2][4] = {{shaped("ar", HK_COLL_ALLREDUCE, 2, s0),
                              shaped("ag", HK_COLL_ALLGATHER, 3, g0),
                              shaped("a2a", HK_COLL_ALLTOALL, 3, g0),
                              shaped("a2a.bad", HK_COLL_ALLTOALL, 3, g0)},
                             {shaped("ar", HK_COLL_ALLREDUCE, 2, s1),
                              shaped("ag", HK_COLL_ALLGATHER, 3, g1),
                              shaped("a2a", HK_COLL_ALLTOALL, 3, g1),
                              shaped("a2a.bad", HK_COLL_ALLTOALL, 3, g2)}};
  q[1][3].row_elems = q[0][3].row_elems; /* only the shape tells */
  for (int r = 0; r < 2; r++)
    assert_int_equal(hk_negotiator_add(n, r, q[r], 4, HK_WIRE_NO_BIT, 0),
                     HK_OK);
  hk_wire_response *rs = take(n, 4);
  mismatch(&rs[0], "tensor 'ar': ranks disagree: shape differs: shape "
                   "17x1311 on rank 0; shape 391x57 on rank 1.");
  assert_int_equal(rs[1].status, HK_OK);
  assert_int_equal(rs[2].status, HK_OK);
  mismatch(&rs[3], "tensor 'a2a.bad': ranks disagree: shape differs: "
                   "shape *x4x5 on rank 0; shape *x4x6 on rank 1.");
  hk_negotiator_free_responses(rs, 4);
  hk_negotiator_destroy(n);
}

/* Sizes whose bytes would wrap fail the tensor as invalid on every rank,
 * naming it, the ranks and their rows: an allgather whose rows overflow
 * only summed (one rank 2^61 - 1 float64 rows, the other 1), an alltoall
 * whose rows x row size do, a reduce-scatter too large on every rank.
 * Sizes that fit exactly pass. */
static void test_sizes_that_overflow(void **state) {
  (void)state;
  hk_negotiator *n;
  assert_int_equal(hk_negotiator_create(2, &n), HK_OK);
  const uint64_t most = SIZE_MAX / 8; /* 2^61 - 1 elements */
  struct {
    const char *name;
    uint8_t coll;
    uint64_t rows[2], row_elems;
  } cases[] = {
      {"ag", HK_COLL_ALLGATHER, {1, most}, 1},
      {"ag_fits", HK_COLL_ALLGATHER, {most - 5, 5}, 1},
      {"a2a", HK_COLL_ALLTOALL, {3, 1ull << 40}, 1u << 21},
      {"rs", HK_COLL_REDUCESCATTER, {1ull << 60, 1ull << 60}, 4},
  };
  const int k = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < k; i++)
    for (int r = 0; r < 2; r++) {
      hk_wire_request q = req(cases[i].name, cases[i].rows[r]);
      q.coll = cases[i].coll;
      q.dtype = HK_FLOAT64;
      q.op = cases[i].coll == HK_COLL_REDUCESCATTER ? HK_SUM : 0;
      q.row_elems = cases[i].row_elems;
      assert_int_equal(hk_negotiator_add(n, r, &q, 1, HK_WIRE_NO_BIT, 0),
                       HK_OK);
    }
  hk_wire_response *rs = take(n, (uint32_t)k);
  invalid(&rs[0], "tensor 'ag': allgather needs more than "
                  "2305843009213693951 elements of float64, the rows of "
                  "every rank together (its size in bytes would "
                  "overflow): rows 1 on rank 0; rows 2305843009213693951 "
                  "on rank 1.");
  assert_null(rs[0].counts); /* nothing to run */
  assert_int_equal(rs[1].status, HK_OK);
  assert_int_equal(rs[1].ncounts, 2);
  invalid(&rs[2], "tensor 'a2a': alltoall needs more than "
                  "2305843009213693951 elements of float64, the rows of "
                  "every rank together (its size in bytes would "
                  "overflow): rows 3 on rank 0; rows 1099511627776 on "
                  "rank 1. Each row holds 2097152 elements.");
  invalid(&rs[3], "tensor 'rs': reducescatter needs more than "
                  "2305843009213693951 elements of float64 (its size in "
                  "bytes would overflow): rows 1152921504606846976 on "
                  "ranks 0, 1. Each row holds 4 elements.");
  hk_negotiator_free_responses(rs, (uint32_t)k);
  hk_negotiator_destroy(n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ready_only_when_all_submitted),
      cmocka_unit_test(test_count_mismatch_reason),
      cmocka_unit_test(test_process_set_names),
      cmocka_unit_test(test_several_fields_and_root),
      cmocka_unit_test(test_duplicate_and_bad_rank),
      cmocka_unit_test(test_long_reason_truncated),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_sizes_that_overflow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
