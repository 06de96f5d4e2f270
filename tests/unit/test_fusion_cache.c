/* Unit tests of the fusion plan and layout, and of the response cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/cache.h"
#include "coordinator/fusion.h"

static hk_fusion_item item(int fusable, int dtype, int op, size_t bytes) {
  return (hk_fusion_item){.fusable = fusable,
                          .dtype = (uint8_t)dtype,
                          .op = (uint8_t)op,
                          .divisor = 4,
                          .bytes = bytes};
}

static void test_plan_groups_compatible_within_threshold(void **s) {
  (void)s;
  hk_fusion_item it[7] = {
      item(1, HK_FLOAT32, HK_SUM, 100),    /* 0: opens group A */
      item(1, HK_FLOAT16, HK_SUM, 100),    /* 1: other dtype: group B */
      item(1, HK_FLOAT32, HK_SUM, 200),    /* 2: joins A (300) */
      item(0, HK_FLOAT32, HK_SUM, 10),     /* 3: not fusable: alone */
      item(1, HK_FLOAT32, HK_SUM, 2000),   /* 4: over threshold: alone */
      item(1, HK_FLOAT32, HK_AVERAGE, 50), /* 5: other op: group C */
      item(1, HK_FLOAT32, HK_SUM, 700),    /* 6: joins A exactly (1000) */
  };
  uint8_t taken[7];
  uint32_t order[7], starts[8];
  uint32_t g = hk_fusion_plan(it, 7, 1000, taken, order, starts);
  assert_int_equal(g, 5);
  uint32_t expect_order[7] = {0, 2, 6, 1, 3, 4, 5};
  uint32_t expect_starts[6] = {0, 3, 4, 5, 6, 7};
  assert_memory_equal(order, expect_order, sizeof expect_order);
  assert_memory_equal(starts, expect_starts, sizeof expect_starts);
  /* a different divisor (joined ranks) never shares a buffer */
  it[2].divisor = 3;
  g = hk_fusion_plan(it, 7, 1000, taken, order, starts);
  assert_int_equal(order[1], 6);
  /* another kind of collective (an allgather beside allreduces) never
   * shares a buffer either */
  it[2].divisor = 4;
  it[2].coll = 4;
  g = hk_fusion_plan(it, 7, 1000, taken, order, starts);
  assert_int_equal(order[1], 6);
  assert_int_equal(order[2], 1);
  it[2].coll = 0;
  /* nor a tensor of another process set */
  it[2].set = 3;
  g = hk_fusion_plan(it, 7, 1000, taken, order, starts);
  assert_int_equal(order[1], 6);
  assert_int_equal(order[2], 1);
  it[2].set = 0;
  /* threshold 0: nothing fuses */
  assert_int_equal(hk_fusion_plan(it, 7, 0, taken, order, starts), 7);
  for (uint32_t i = 0; i < 7; i++)
    assert_int_equal(order[i], i);
}

/* Segment-major layout: every tensor's segment j sits inside buffer
 * segment j, tensors in group order, and nothing overlaps. */
static void test_layout_segment_major(void **s) {
  (void)s;
  size_t counts[3] = {10, 1, 7};
  int n = 3;
  size_t seg[4], where[9];
  hk_fusion_layout(counts, 3, n, seg, where);
  /* tensor splits: 10 -> 4,3,3; 1 -> 1,0,0; 7 -> 3,2,2 */
  size_t expect_seg[4] = {0, 8, 13, 18};
  assert_memory_equal(seg, expect_seg, sizeof expect_seg);
  size_t expect_where[9] = {0, 8,  13,  /* tensor 0: segments 0,1,2 */
                            4, 11, 16,  /* tensor 1 */
                            5, 11, 16}; /* tensor 2 */
  assert_memory_equal(where, expect_where, sizeof expect_where);
}

static hk_wire_request req(const char *name, uint64_t count) {
  hk_wire_request q = {.coll = HK_COLL_ALLREDUCE,
                       .dtype = HK_FLOAT32,
                       .count = count,
                       .row_elems = 1,
                       .prescale = 1,
                       .postscale = 1};
  snprintf(q.name, sizeof q.name, "%s", name);
  return q;
}

static void test_cache_insert_lookup_retire(void **s) {
  (void)s;
  hk_cache *c;
  assert_int_equal(hk_cache_create(3, &c), HK_OK);
  hk_wire_request a = req("a", 4), b = req("b", 8);
  assert_int_equal(hk_cache_insert(c, &a), 0);
  assert_int_equal(hk_cache_insert(c, &a), HK_WIRE_NO_BIT); /* live */
  assert_int_equal(hk_cache_insert(c, &b), 1);
  assert_int_equal(hk_cache_lookup(c, &b), 1);
  hk_wire_request b2 = req("b", 9); /* a changed shape misses */
  assert_int_equal(hk_cache_lookup(c, &b2), HK_WIRE_NO_BIT);
  assert_int_equal(hk_cache_bit_of(c, "b"), 1);
  b2.count = 8;
  b2.postscale = 2;
  assert_int_equal(hk_cache_lookup(c, &b2), HK_WIRE_NO_BIT);
  /* retire: the bit keeps meaning what it meant, and comes back to the
   * same name only, with its new parameters */
  hk_cache_retire(c, 1);
  assert_false(hk_cache_is_live(c, 1));
  assert_string_equal(hk_cache_get(c, 1)->name, "b");
  assert_int_equal(hk_cache_bit_of(c, "b"), HK_WIRE_NO_BIT);
  assert_int_equal(hk_cache_live(c), 1);
  hk_wire_request e = req("e", 1);
  assert_int_equal(hk_cache_insert(c, &e), 2); /* a new name: a new bit */
  b2 = req("b", 9);
  assert_int_equal(hk_cache_insert(c, &b2), 1);
  assert_int_equal(hk_cache_lookup(c, &b2), 1);
  assert_true(hk_cache_get(c, 1)->count == 9);
  assert_null(hk_cache_get(c, 3));
  hk_cache_destroy(c);
}

/* Full: the least recently used entry goes, where "used" is a cached run
 * (touch) or a run by name (insert of a live name), as every rank sees
 * them in the response stream; figures for the hit rate. */
/* The one rule every member applies to each response that ran (and rank 0
 * for a set it is not in): an OK uncached allreduce, broadcast or
 * reduce-scatter enters; an allgather, an alltoall and a failure do not;
 * a cached response counts as a hit. */
static void test_cache_apply(void **s) {
  (void)s;
  hk_cache *c;
  assert_int_equal(hk_cache_create(8, &c), HK_OK);
  static const struct {
    uint8_t coll;
    int enters;
  } kinds[] = {{HK_COLL_ALLREDUCE, 1},     {HK_COLL_BROADCAST, 1},
               {HK_COLL_REDUCESCATTER, 1}, {HK_COLL_ALLGATHER, 0},
               {HK_COLL_ALLTOALL, 0},      {HK_COLL_BARRIER, 0}};
  hk_wire_response r;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    hk_wire_request q = {
        .coll = kinds[i].coll, .dtype = HK_FLOAT32, .count = 4, .set = 2};
    snprintf(q.name, sizeof q.name, "t%zu", i);
    hk_wire_response_clear(&r);
    r.status = HK_ERR_MISMATCH; /* failed: never */
    hk_cache_apply(c, &r, &q);
    assert_int_equal(hk_cache_lookup(c, &q), HK_WIRE_NO_BIT);
    r.status = HK_OK;
    hk_cache_apply(c, &r, &q);
    assert_int_equal(hk_cache_lookup(c, &q) != HK_WIRE_NO_BIT, kinds[i].enters);
  }
  assert_int_equal(hk_cache_live(c), 3);
  hk_wire_response_clear(&r);
  r.flags = HK_RESP_CACHED;
  r.cache_bit = 0;
  hk_wire_request q0 = {.coll = HK_COLL_ALLREDUCE};
  hk_cache_apply(c, &r, &q0);
  assert_int_equal(hk_cache_get_stats(c).hits, 1);
  hk_cache_destroy(c);
}

static void test_cache_evicts_least_recently_used(void **s) {
  (void)s;
  hk_cache *c;
  assert_int_equal(hk_cache_create(2, &c), HK_OK);
  hk_wire_request a = req("a", 1), b = req("b", 1), d = req("d", 1);
  assert_int_equal(hk_cache_insert(c, &a), 0);
  assert_int_equal(hk_cache_insert(c, &b), 1);
  hk_cache_touch(c, 0);                        /* a is now the newest */
  assert_int_equal(hk_cache_insert(c, &d), 2); /* full: b goes */
  assert_false(hk_cache_is_live(c, 1));
  assert_true(hk_cache_is_live(c, 0) && hk_cache_is_live(c, 2));
  assert_int_equal(hk_cache_live(c), 2);
  /* b back: under its old bit; a is the least recently used now */
  assert_int_equal(hk_cache_insert(c, &b), 1);
  assert_false(hk_cache_is_live(c, 0));
  assert_int_equal(hk_cache_lookup(c, &a), HK_WIRE_NO_BIT);
  assert_string_equal(hk_cache_get(c, 0)->name, "a"); /* still names a */
  /* a live name run by name counts as used: d is kept over b */
  assert_int_equal(hk_cache_insert(c, &d), HK_WIRE_NO_BIT);
  assert_int_equal(hk_cache_insert(c, &a), 0);
  assert_true(hk_cache_is_live(c, 2) && !hk_cache_is_live(c, 1));
  hk_cache_touch(c, 1); /* not live: no effect, no hit */
  hk_cache_touch(c, 2);
  hk_cache_stats st = hk_cache_get_stats(c);
  assert_int_equal(st.hits, 2); /* touch(0) and touch(2) */
  assert_int_equal(st.misses, 6);
  assert_int_equal(st.evictions, 3);
  assert_int_equal(st.out_of_bits, 0);
  hk_cache_destroy(c);
}

static void test_cache_disabled_and_bounded(void **s) {
  (void)s;
  hk_cache *c;
  assert_int_equal(hk_cache_create(0, &c), HK_OK);
  hk_wire_request a = req("a", 4);
  assert_int_equal(hk_cache_insert(c, &a), HK_WIRE_NO_BIT);
  hk_cache_destroy(c);
  /* capacity 1: at most 4 names are ever given a bit; retired names come
   * back to their bits */
  assert_int_equal(hk_cache_create(1, &c), HK_OK);
  char nm[8];
  for (int i = 0; i < 4; i++) {
    snprintf(nm, sizeof nm, "n%d", i);
    hk_wire_request q = req(nm, 1);
    assert_int_equal(hk_cache_insert(c, &q), (uint32_t)i);
  }
  hk_wire_request q = req("n4", 1);
  assert_int_equal(hk_cache_insert(c, &q), HK_WIRE_NO_BIT);
  assert_int_equal(hk_cache_get_stats(c).out_of_bits, 1);
  q = req("n1", 1);
  assert_int_equal(hk_cache_insert(c, &q), 1);
  hk_cache_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_groups_compatible_within_threshold),
      cmocka_unit_test(test_layout_segment_major),
      cmocka_unit_test(test_cache_insert_lookup_retire),
      cmocka_unit_test(test_cache_apply),
      cmocka_unit_test(test_cache_evicts_least_recently_used),
      cmocka_unit_test(test_cache_disabled_and_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
