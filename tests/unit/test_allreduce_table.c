/* Unit tests of the table of allreduce implementations and the choice
 * among them (collectives/allreduce.h), on synthetic jobs: the cost
 * model's picks among ring, hierarchical and recursive doubling; the shm
 * engine on one host; forced entries and their fallbacks; the device
 * entries; the spans hk_allreduce_setup works out against the choice
 * itself; a fusable tensor costed as the batch it may grow to. No
 * schedule runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collectives/allreduce.h"

static hk_step_figures figs = {0.0, 16.0, 30.0};
static hk_ring local_ring, cross_ring; /* only their presence is asked */

/* A job of hosts x gpus ranks with hk's TCP figures (in-host 4 GB/s):
 * hierarchical's rings set when hier, the flat ring over shm when shm.
 */
static hk_allreduce_env job(int hosts, int gpus, double intra_gbps, int hier,
                            int shm) {
  hk_allreduce_env e;
  memset(&e, 0, sizeof e);
  e.size = hosts * gpus;
  e.hosts = hosts;
  e.local_size = gpus;
  e.one_host_shm = shm;
  e.local_ring = hier ? &local_ring : NULL;
  e.cross_ring = hier ? &cross_ring : NULL;
  cross_ring.size = hosts;
  e.figures = figs;
  e.model = (hk_host_model){gpus, intra_gbps, 0, &figs};
  e.model_hosts = hosts;
  e.net_gbit = 10.0;
  return e;
}

static const char *host_choice(const hk_allreduce_env *e, size_t bytes) {
  return hk_allreduce_choose(e, HK_MEM_HOST, bytes)->name;
}

static const char *dev_choice(const hk_allreduce_env *e, size_t bytes) {
  return hk_allreduce_choose(e, HK_MEM_DEVICE, bytes)->name;
}

/* The cost model's menu (ring, hierarchical, rd): rd for small messages,
 * the ring for large ones on one host over TCP; across 4 hosts with a fast
 * host inside, hierarchical (with a 4 GB/s inside, the two in-host phases
 * cost more than the ring's extra network bytes: 1.575 vs 1.5 s per GB). */
static void test_cost_picks(void **state) {
  (void)state;
  hk_allreduce_env one = job(1, 4, 4.0, 0, 0);
  assert_string_equal(host_choice(&one, 1024), "rd");
  assert_string_equal(host_choice(&one, 64 << 20), "ring");
  hk_allreduce_env fast = job(4, 4, 40.0, 1, 0);
  assert_string_equal(host_choice(&fast, 64 << 20), "hierarchical");
  hk_allreduce_env slow = job(4, 4, 4.0, 1, 0);
  assert_string_equal(host_choice(&slow, 64 << 20), "ring");
  /* HK_HIERARCHICAL_ALLREDUCE=0: auto never takes it */
  fast.no_hierarchical = 1;
  assert_string_equal(host_choice(&fast, 64 << 20), "ring");
  /* one rank: the ring (which moves nothing) */
  hk_allreduce_env alone = job(1, 1, 4.0, 0, 0);
  assert_string_equal(host_choice(&alone, 1024), "ring");
}

/* One host over shared memory: the engine, at every size, also with the
 * ring forced or a forced entry that cannot run here; not with rd forced.
 * Its timeline name is the ring's schedule, which it runs. */
static void test_shm_engine(void **state) {
  (void)state;
  hk_allreduce_env e = job(1, 4, 4.0, 0, 1);
  for (size_t b = 1; b <= ((size_t)1 << 30); b *= 8)
    assert_string_equal(host_choice(&e, b), "shm");
  const hk_allreduce_impl *shm = hk_allreduce_choose(&e, HK_MEM_HOST, 8);
  assert_string_equal(shm->schedule, "ring");
  assert_non_null(shm->run_pieces);
  e.forced = hk_allreduce_find(HK_MEM_HOST, "ring");
  assert_string_equal(host_choice(&e, 1024), "shm");
  e.forced = hk_allreduce_find(HK_MEM_HOST, "hierarchical");
  assert_string_equal(host_choice(&e, 1024), "shm");
  e.forced = hk_allreduce_find(HK_MEM_HOST, "rd");
  assert_string_equal(host_choice(&e, 64 << 20), "rd");
  assert_null(hk_allreduce_choose(&e, HK_MEM_HOST, 8)->run_pieces);
}

/* A forced entry runs where it applies, else the fallback (the ring). */
static void test_forced(void **state) {
  (void)state;
  hk_allreduce_env e = job(2, 3, 4.0, 0, 0); /* no hierarchical rings */
  e.forced = hk_allreduce_find(HK_MEM_HOST, "hierarchical");
  assert_non_null(e.forced);
  assert_string_equal(host_choice(&e, 1024), "ring");
  e.forced = hk_allreduce_find(HK_MEM_HOST, "RD"); /* any case */
  assert_string_equal(host_choice(&e, (size_t)1 << 30), "rd");
  e.forced = hk_allreduce_find(HK_MEM_HOST, "ring");
  assert_string_equal(host_choice(&e, 16), "ring");
  hk_allreduce_env h = job(3, 2, 4.0, 1, 0);
  h.forced = hk_allreduce_find(HK_MEM_HOST, "hierarchical");
  assert_string_equal(host_choice(&h, 16), "hierarchical");
  hk_allreduce_env alone = job(1, 1, 4.0, 0, 0);
  alone.forced = hk_allreduce_find(HK_MEM_HOST, "rd");
  assert_string_equal(host_choice(&alone, 16), "ring");
  /* names are per memory kind */
  assert_null(hk_allreduce_find(HK_MEM_HOST, "tree"));
  assert_null(hk_allreduce_find(HK_MEM_HOST, "staged"));
  assert_null(hk_allreduce_find(HK_MEM_DEVICE, "rd"));
  assert_int_equal(hk_allreduce_find(HK_MEM_DEVICE, "staged")->mem,
                   HK_MEM_DEVICE);
}

/* Device tensors: one rank runs locally; one host uses the communicator
 * unless the ring is forced (hk's own schedule, then staged); several
 * hosts run hierarchical where the host choice is, else staged. */
static void test_device_entries(void **state) {
  (void)state;
  hk_allreduce_env alone = job(1, 1, 4.0, 0, 0);
  assert_string_equal(dev_choice(&alone, 1024), "local");
  hk_allreduce_env one = job(1, 4, 4.0, 0, 1);
  assert_string_equal(dev_choice(&one, 1024), "comm");
  assert_int_equal(hk_allreduce_choose(&one, HK_MEM_DEVICE, 8)->needs,
                   HK_ALLREDUCE_NEEDS_COMM);
  one.forced = hk_allreduce_find(HK_MEM_HOST, "ring");
  assert_string_equal(dev_choice(&one, 1024), "staged");
  assert_int_equal(hk_allreduce_choose(&one, HK_MEM_DEVICE, 8)->segments(&one),
                   4);
  hk_allreduce_env fast = job(4, 4, 40.0, 1, 0);
  const hk_allreduce_impl *d =
      hk_allreduce_choose(&fast, HK_MEM_DEVICE, 64 << 20);
  assert_string_equal(d->name, "hierarchical");
  assert_int_equal(d->segments(&fast), 16);
  assert_int_equal(d->needs,
                   HK_ALLREDUCE_NEEDS_COMM | HK_ALLREDUCE_NEEDS_SLOTS);
  assert_string_equal(host_choice(&fast, 1024), "rd");
  assert_string_equal(dev_choice(&fast, 1024), "staged");
  hk_allreduce_env uneven = job(2, 3, 40.0, 0, 0);
  assert_string_equal(dev_choice(&uneven, 64 << 20), "staged");
}

/* The spans give the choice itself at every size, also next to where it
 * changes; hk_allreduce_describe lists them. */
static void test_spans_match_choice(void **state) {
  (void)state;
  hk_allreduce_env jobs[] = {job(1, 4, 4.0, 0, 0), job(4, 4, 40.0, 1, 0),
                             job(4, 4, 4.0, 1, 0), job(1, 4, 4.0, 0, 1),
                             job(8, 1, 4.0, 0, 0)};
  for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
    hk_allreduce_env *e = &jobs[j];
    assert_int_equal(hk_allreduce_setup(e), HK_OK);
    for (int mem = HK_MEM_HOST; mem <= HK_MEM_DEVICE; mem++) {
      assert_true(e->nspans[mem] >= 1);
      for (int i = 0; i < e->nspans[mem]; i++) {
        size_t from = e->spans[mem][i].from;
        assert_ptr_equal(hk_allreduce_for(e, mem, from),
                         hk_allreduce_choose(e, mem, from));
        if (from)
          assert_ptr_equal(hk_allreduce_for(e, mem, from - 1),
                           hk_allreduce_choose(e, mem, from - 1));
      }
      for (size_t b = 1; b <= ((size_t)1 << 34); b = b * 3 + 1)
        assert_ptr_equal(hk_allreduce_for(e, mem, b),
                         hk_allreduce_choose(e, mem, b));
    }
  }
  hk_allreduce_env one = job(1, 4, 4.0, 0, 0);
  assert_int_equal(hk_allreduce_setup(&one), HK_OK);
  assert_int_equal(one.nspans[HK_MEM_HOST], 2);
  char line[256];
  hk_allreduce_describe(&one, HK_MEM_HOST, line, sizeof line);
  char want[128];
  snprintf(want, sizeof want, "0 B: rd; %zu B: ring",
           one.spans[HK_MEM_HOST][1].from);
  assert_string_equal(line, want);
  hk_allreduce_describe(&one, HK_MEM_DEVICE, line, sizeof line);
  assert_string_equal(line, "0 B: comm");
}

/* A tensor that may be fused is costed as a batch of the direct size,
 * whatever its own: on 2 hosts x 2 ranks a 4 KiB gradient runs
 * hierarchical (by its own size rd, which would send a 4 MiB batch of
 * them across hosts once per rank of a host); one that may not, or above
 * the direct size, by its own size; a direct size inside rd's sizes
 * keeps rd. */
static void test_fusable_costed_as_batch(void **state) {
  (void)state;
  const hk_allreduce_impl *rd = hk_allreduce_find(HK_MEM_HOST, "rd");
  const hk_allreduce_impl *hier =
      hk_allreduce_find(HK_MEM_HOST, "hierarchical");
  hk_allreduce_env two = job(2, 2, 3.6, 1, 0);
  assert_int_equal(hk_allreduce_setup(&two), HK_OK);
  const size_t small = 4096, direct = 3 * ((size_t)256 << 10),
               big = (size_t)128 << 20;
  assert_ptr_equal(hk_allreduce_for(&two, HK_MEM_HOST, small), rd);
  assert_ptr_equal(hk_allreduce_for(&two, HK_MEM_HOST, (size_t)4 << 20), hier);
  assert_ptr_equal(hk_allreduce_for_tensor(&two, HK_MEM_HOST, small, 1, direct),
                   hier);
  assert_ptr_equal(hk_allreduce_for_tensor(&two, HK_MEM_HOST, small, 0, direct),
                   rd);
  assert_ptr_equal(hk_allreduce_for_tensor(&two, HK_MEM_HOST, small, 1, 0), rd);
  assert_ptr_equal(hk_allreduce_for_tensor(&two, HK_MEM_HOST, small, 1, 8192),
                   rd);
  assert_ptr_equal(hk_allreduce_for_tensor(&two, HK_MEM_HOST, big, 1, direct),
                   hk_allreduce_for(&two, HK_MEM_HOST, big));
  /* device tensors (always fusable) follow the host choice at the batch's
   * size */
  assert_string_equal(
      hk_allreduce_for_tensor(&two, HK_MEM_DEVICE, small, 1, direct)->name,
      "hierarchical");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cost_picks),
      cmocka_unit_test(test_shm_engine),
      cmocka_unit_test(test_forced),
      cmocka_unit_test(test_device_entries),
      cmocka_unit_test(test_spans_match_choice),
      cmocka_unit_test(test_fusable_costed_as_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
