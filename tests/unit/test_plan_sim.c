/*
 * test_plan_sim - hkplan's simulation (planner/sim.h): a batch's time in
 * its units (µs for bytes at Gbit/s) against the formula worked out here,
 * the edge cases (no bytes, one rank, no tensors, no network, a ready
 * time that is not finite), and a
 * step's timeline (rounds, fusion, the copies) against a hand count.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/status.h"
#include "planner/sim.h"

/* hk's own step figures: 5 us per call, 30 us per step across hosts */
static const hk_step_figures fig = {5.0, 16.0, 30.0};

/* Two servers of one GPU each at 10 Gbit/s, hk's figures. */
static hk_sim_job two_hosts(int device) {
  return (hk_sim_job){.host = {1, 0.0, 0, &fig},
                      .hosts = 2,
                      .net_gbit = 10.0,
                      .device = device,
                      .threshold = (size_t)64 << 20,
                      .inflight = 4,
                      .round_us = 50.0,
                      .pack_gbps = 100.0,
                      .pcie_gbps = 20.0,
                      .dtype = HK_FLOAT32};
}

/* The flat ring of 2 ranks on 2 hosts by hand: 2(n-1) = 2 steps, both
 * across hosts; algbw = busbw * n / (2(n-1)) = 1.25 GB/s * 1; 1 GB/s is
 * 1e3 bytes per µs. */
static double ring2_us(double bytes) {
  return 5.0 + 2 * 30.0 + bytes / (1.25 * 1e3);
}

/* Recursive doubling of 2 ranks on 2 hosts by hand: one step across, the
 * whole buffer; at 2 ranks it is always the cheaper of the two (the same
 * bandwidth term, half the steps), so hk chooses it. */
static double rd2_us(double bytes) { return 5.0 + 30.0 + bytes / 1.25e3; }

static void batch_units(void **state) {
  (void)state;
  hk_sim_job j = two_hosts(0);
  hk_allreduce_env env;
  assert_int_equal(hk_sim_env(&j, &env), HK_OK);
  double us;
  const hk_allreduce_impl *ring = hk_allreduce_find(HK_MEM_HOST, "ring");
  /* 1 MB at 10 Gbit/s: 800 µs of bandwidth */
  assert_int_equal(hk_sim_batch_us(&env, &j, ring, 1000000, &us), HK_OK);
  assert_float_equal(us, ring2_us(1e6), 1e-9);
  assert_float_equal(us, 865.0, 1e-9);
  /* no bytes: the latency alone */
  assert_int_equal(hk_sim_batch_us(&env, &j, ring, 0, &us), HK_OK);
  assert_float_equal(us, 65.0, 1e-9);
  hk_allreduce_release(&env);

  /* device tensors: the staged schedule adds a copy out and back */
  j = two_hosts(1);
  assert_int_equal(hk_sim_env(&j, &env), HK_OK);
  const hk_allreduce_impl *staged =
      hk_allreduce_for(&env, HK_MEM_DEVICE, 1000000);
  assert_string_equal(staged->name, "staged");
  assert_int_equal(hk_sim_batch_us(&env, &j, staged, 1000000, &us), HK_OK);
  assert_float_equal(us, ring2_us(1e6) + 2 * 1e6 / (20.0 * 1e3), 1e-9);
  /* 12 MiB: three chunks of a 4 MiB pinned slot, the ring on one
   * overlapping the copies of the others: 3 rings and 2 copies */
  const double mib4 = 4194304;
  assert_int_equal(hk_sim_batch_us(&env, &j, staged, 3 * 4194304, &us), HK_OK);
  assert_float_equal(us, 3 * ring2_us(mib4) + 2 * mib4 / (20.0 * 1e3), 1e-6);
  /* --collective nccl-ring: NCCL's flat ring over every GPU, one call,
   * whatever hk's table chose */
  j.collective = HK_SIM_NCCL_RING;
  assert_int_equal(hk_sim_batch_us(&env, &j, staged, 3 * 4194304, &us), HK_OK);
  assert_float_equal(us, ring2_us(3 * mib4), 1e-6);
  j.collective = HK_SIM_HK;
  hk_allreduce_release(&env);

  /* one rank: nothing to exchange */
  j.hosts = 1;
  assert_int_equal(hk_sim_env(&j, &env), HK_OK);
  const hk_allreduce_impl *local = hk_allreduce_for(&env, HK_MEM_DEVICE, 64);
  assert_string_equal(local->name, "local");
  assert_int_equal(hk_sim_batch_us(&env, &j, local, 1 << 20, &us), HK_OK);
  assert_float_equal(us, 0.0, 0.0);
  hk_allreduce_release(&env);
}

static void bad_jobs(void **state) {
  (void)state;
  hk_sim_job j = two_hosts(0);
  hk_sim_tensor t = {1024, 0.0};
  hk_sim_result r;
  assert_int_equal(hk_sim_step(&j, &t, 0, &r), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "no tensors"));
  j.net_gbit = 0.0;
  assert_int_equal(hk_sim_step(&j, &t, 1, &r), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "2 servers of 1 GPUs at 0 Gbit/s"));
  assert_null(r.order);
  /* a ready time that is not finite: refused (NaN never compares, so the
   * rounds never advanced past it) */
  j = two_hosts(0);
  j.cycle_s = 1e-3;
  hk_sim_tensor two[2] = {{1024, 0.0}, {1024, INFINITY}};
  assert_int_equal(hk_sim_step(&j, two, 2, &r), HK_ERR_INVALID_ARG);
  assert_string_equal(
      hk_last_error(),
      "simulation: tensor 1's ready time is inf s (not finite)");
  assert_null(r.order);
  two[1].ready_s = NAN;
  assert_int_equal(hk_sim_step(&j, two, 2, &r), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "tensor 1's ready time is"));
  assert_null(r.order);
}

/* Tensors a (4000 B, ready at 1 ms) and b, c (2000 B each, both ready at
 * 5 ms): round 1 at 1 ms runs a alone; round 2 at 5 ms fuses b and c (in
 * submission order) and copies them in and out of the fusion buffer; hk
 * chooses recursive doubling for both (rd2_us). */
static void step_by_hand(void **state) {
  (void)state;
  hk_sim_job j = two_hosts(0);
  hk_sim_tensor t[3] = {{4000, 0.001}, {2000, 0.005}, {2000, 0.005}};
  hk_sim_result r;
  assert_int_equal(hk_sim_step(&j, t, 3, &r), HK_OK);
  assert_int_equal(r.rounds, 2);
  assert_int_equal(r.nbatches, 2);
  assert_int_equal(r.batches[0].n, 1);
  assert_int_equal(r.order[0], 0);
  assert_int_equal(r.batches[1].n, 2);
  assert_int_equal(r.order[1], 1);
  assert_int_equal(r.order[2], 2);
  assert_int_equal(r.batches[1].bytes, 4000);
  assert_string_equal(r.batches[0].impl, "rd");
  assert_string_equal(r.batches[1].impl, "rd");
  double a_end = 0.001 + 50e-6 + rd2_us(4000) * 1e-6;
  assert_float_equal(r.batches[0].end_s, a_end, 1e-12);
  double pack = 2 * 4000 / 100e9;
  double bc = rd2_us(4000) * 1e-6 + pack;
  assert_float_equal(r.batches[1].start_s, 0.005 + 50e-6, 1e-12);
  assert_float_equal(r.end_s, 0.005 + 50e-6 + bc, 1e-12);
  assert_float_equal(r.busy_s, rd2_us(4000) * 1e-6 + bc, 1e-12);
  hk_sim_result_free(&r);

  /* 16-bit on the wire (HK_COMPRESSION): the same batches (planned by the
   * gradients' own bytes), half the bytes sent */
  j.wire_ratio = 0.5;
  assert_int_equal(hk_sim_step(&j, t, 3, &r), HK_OK);
  assert_int_equal(r.nbatches, 2);
  assert_int_equal(r.batches[1].bytes, 4000);
  assert_float_equal(r.batches[0].end_s, 0.001 + 50e-6 + rd2_us(2000) * 1e-6,
                     1e-12);
  hk_sim_result_free(&r);
  j.wire_ratio = 1.0;

  /* a threshold below b + c: they run apart */
  j.threshold = 3000;
  assert_int_equal(hk_sim_step(&j, t, 3, &r), HK_OK);
  assert_int_equal(r.nbatches, 3);
  hk_sim_result_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(batch_units),
      cmocka_unit_test(bad_jobs),
      cmocka_unit_test(step_by_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
