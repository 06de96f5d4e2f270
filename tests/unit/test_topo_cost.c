/* Unit tests of the alpha-beta allreduce model: hand-computed times,
 * NVLink-over-PCIe factors on the real layouts, NCCL's predicted choice
 * (tree for small messages over many hosts, hierarchical over a slow
 * network, ring inside a host). The runtime's choice among hk's own
 * implementations is tests/unit/test_allreduce_table.c's;
 * HK_ALLREDUCE_ALGO's parsing is test_config.c's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "topology/cost.h"
#include "topology/parse.h"

#define GIB ((size_t)1 << 30)

static void assert_close(double got, double want, double rel) {
  double d = got - want;
  if (d < 0)
    d = -d;
  if (d > rel * (want < 0 ? -want : want))
    fail_msg("got %.6f, want %.6f (relative tolerance %g)", got, want, rel);
}

static void test_ring_by_hand(void **state) {
  (void)state;
  /* 2 GPUs, 40 GB/s NVLink, 1e9 bytes. Simple: 8.4 us + 2 steps x 3.4 us,
   * plus 1e9 B / (40 GB/s x N/(2(N-1)) = 1) = 25000 us. LL (3.6 + 2 x 0.47
   * us, a quarter of the bandwidth: 100000 us) loses. */
  hk_host_model h = {2, 40.0, 1, NULL};
  hk_cost c;
  assert_int_equal(hk_cost_ring(&h, 1000000000u, 1, 0, &c), HK_OK);
  assert_close(c.time_us, 25015.2, 1e-9);
  assert_int_equal(c.proto, 1); /* Simple */
  assert_close(c.algbw_gbps, 1e9 / 25015.2e3, 1e-9);
  assert_close(c.busbw_gbps, c.algbw_gbps, 1e-12); /* 2(N-1)/N = 1 */
  /* 0 bytes: the latency alone, LL's */
  assert_int_equal(hk_cost_ring(&h, 0, 1, 0, &c), HK_OK);
  assert_close(c.time_us, 3.6 + 2 * 0.47, 1e-9);
  assert_int_equal(c.proto, 0);
}

static void test_hierarchical_by_hand(void **state) {
  (void)state;
  /* 2 hosts x 4 GPUs over PCIe (100 GB/s rings), 100 Gbit/s = 12.5 GB/s.
   * reduce-scatter = allgather: 8.4 + 3 x 5.7 + 1e9 / (100 x 4/3) / 1e3 =
   * 7525.5 us; across hosts 4 rings of 2.5e8 B, each 12.5/4 GB/s: 8.4 + 2 x
   * 9.6 + 2.5e8 / 3.125e3 = 80027.6 us; total 95078.6 us. */
  hk_host_model h = {4, 100.0, 0, NULL};
  hk_cost c;
  assert_int_equal(hk_cost_hierarchical(&h, 1000000000u, 2, 100.0, &c), HK_OK);
  assert_close(c.time_us, 95078.6, 1e-9);
  assert_close(c.busbw_gbps, 1e9 / 95078.6e3 * 2 * 7 / 8, 1e-9);
  /* on one host it is the ring */
  hk_cost r;
  assert_int_equal(hk_cost_hierarchical(&h, 1u << 20, 1, 0, &c), HK_OK);
  assert_int_equal(hk_cost_ring(&h, 1u << 20, 1, 0, &r), HK_OK);
  assert_close(c.time_us, r.time_us, 1e-12);
}

static void test_tree_by_hand(void **state) {
  (void)state;
  /* 16 hosts x 8 GPUs, 8 KiB: tree/LL = 4.4 + 2 (7 x 0.52 + 4 x 5.0) us
   * + 8192 B / (12.5 x 0.9 / 3.8 x 0.5 GB/s) */
  hk_host_model h = {8, 120.0, 1, NULL};
  hk_cost c;
  assert_int_equal(hk_cost_tree(&h, 8192, 16, 100.0, &c), HK_OK);
  assert_close(c.time_us, 51.68 + 8192 / (12.5 * 0.9 / 3.8 * 0.5 * 1e3), 1e-9);
  assert_int_equal(c.proto, 0);
}

static void test_chooser(void **state) {
  (void)state;
  hk_host_model v100 = {8, 120.0, 1, NULL};
  hk_cost c;
  /* small messages over many hosts: the tree's log2 latency wins */
  assert_int_equal(hk_cost_nccl(&v100, 8192, 16, 100.0, &c), HK_OK);
  assert_string_equal(c.algo, "tree");
  /* big messages over a slow network: hierarchical sends (h-1)/h of the
   * bytes over the NIC instead of (N-1)/N */
  assert_int_equal(hk_cost_nccl(&v100, GIB, 2, 10.0, &c), HK_OK);
  assert_string_equal(c.algo, "hierarchical");
  hk_cost ring;
  assert_int_equal(hk_cost_ring(&v100, GIB, 2, 10.0, &ring), HK_OK);
  assert_true(c.time_us < 0.6 * ring.time_us);
  /* inside one host: the ring */
  assert_int_equal(hk_cost_nccl(&v100, GIB, 1, 0, &c), HK_OK);
  assert_string_equal(c.algo, "ring");
  assert_close(c.busbw_gbps, 120.0, 0.01);
  /* one formula asked for by name */
  assert_int_equal(hk_cost_tree(&v100, GIB, 1, 0, &c), HK_OK);
  assert_string_equal(c.algo, "tree");
  /* more bytes never take less time */
  double prev = 0;
  for (size_t b = 1; b <= GIB; b *= 4) {
    assert_int_equal(hk_cost_nccl(&v100, b, 4, 25.0, &c), HK_OK);
    assert_true(c.time_us >= prev);
    prev = c.time_us;
  }
}

static void test_invalid_args(void **state) {
  (void)state;
  hk_cost c;
  hk_host_model h = {8, 100.0, 0, NULL}, zero = {0, 100.0, 0, NULL},
                nobw = {8, 0, 0, NULL};
  assert_int_equal(hk_cost_ring(&zero, 1, 1, 0, &c), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_cost_ring(&nobw, 1, 1, 0, &c), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_cost_ring(&h, 1, 2, 0, &c), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_cost_ring(NULL, 1, 1, 0, &c), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_cost_ring(&h, 1, 0, 10, &c), HK_ERR_INVALID_ARG);
  hk_host_model one = {1, 0, 0, NULL}; /* one GPU per host: no in-host phase */
  assert_int_equal(hk_cost_ring(&one, 1u << 20, 1, 0, &c), HK_OK);
  assert_true(c.time_us == 0.0 && c.busbw_gbps == 0.0);
  assert_int_equal(hk_cost_hierarchical(&one, 1u << 20, 4, 25, &c), HK_OK);
  assert_true(c.time_us > 0.0);
}

/* Recursive doubling with hk's own TCP figures (Simple only), by hand:
 * 4 ranks on one host: 2 steps of (16 us + bytes / 4 GB/s). 8 ranks on 2
 * hosts of 4: 2 steps inside (as above) + 1 across (30 us + 4 x bytes at
 * 10 Gbit/s = 1.25 GB/s, the host's ranks sharing it). 6 ranks: 2 steps +
 * the 2 pair steps. */
static void test_rd_by_hand(void **state) {
  (void)state;
  hk_step_figures f = {0.0, 16.0, 30.0};
  hk_host_model h = {4, 4.0, 0, &f};
  hk_cost c;
  const size_t b = 1 << 20;
  assert_int_equal(hk_cost_rd(&h, b, 1, 0, &c), HK_OK);
  assert_float_equal(c.time_us, 2 * (16.0 + b / 4e3), 1e-9);
  assert_int_equal(hk_cost_rd(&h, b, 2, 10.0, &c), HK_OK);
  assert_float_equal(c.time_us, 2 * (16.0 + b / 4e3) + 30.0 + 4.0 * b / 1.25e3,
                     1e-9);
  hk_host_model six = {6, 4.0, 0, &f};
  assert_int_equal(hk_cost_rd(&six, b, 1, 0, &c), HK_OK);
  assert_float_equal(c.time_us, 4 * (16.0 + b / 4e3), 1e-9);
  /* Simple only: the ring has no LL term with these figures either:
   * 6 steps of 16 us + 1.5 x bytes / 4 GB/s */
  assert_int_equal(hk_cost_ring(&h, b, 1, 0, &c), HK_OK);
  assert_float_equal(c.time_us, 6 * 16.0 + 1.5 * b / 4e3, 1e-9);
}

/* Recursive doubling's steps counted by brute force, pairing the ranks as
 * collectives/rd.c does (rank 2i < 2e hands over to 2i + 1; virtual
 * index v of rank 2v + 1 or v + e exchanges with v ^ mask): the time
 * hk_cost_rd should give for g ranks a host on `hosts` hosts. */
static double rd_by_pairs(const hk_step_figures *f, double intra_gbs, int g,
                          int hosts, double net_gbit, double b) {
  const int n = g * hosts;
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  const int e = n - p;
  if (n == 1)
    return 0.0;
  double us = f->call_us;
  int cross[64];
  const double in = f->intra_step_us + b / (intra_gbs * 1e3);
  const double net = net_gbit / 8.0 * 1e3; /* bytes per us */
  if (e > 0) {
    int c = 0;
    for (int i = 0; i < e; i++)
      c |= (2 * i) / g != (2 * i + 1) / g;
    us += 2 * (c ? f->net_step_us + b / net : in);
  }
  for (int m = 1; m < p; m *= 2) {
    memset(cross, 0, sizeof cross);
    int most = 0;
    for (int v = 0; v < p; v++) {
      const int r = v < e ? 2 * v + 1 : v + e, w = v ^ m;
      const int q = w < e ? 2 * w + 1 : w + e;
      if (r / g != q / g && ++cross[r / g] > most)
        most = cross[r / g];
    }
    us += most ? f->net_step_us + most * b / net : in;
  }
  return us;
}

/* Every shape up to 8 ranks a host and 7 hosts against the brute-force
 * pairing; 3 ranks a host on 2 hosts by hand: every step crosses (the
 * pair steps: rank 2 hands over to rank 3 on the other host; mask 1:
 * rank 1 with 3; mask 2: rank 1 with 4, rank 3 with 5 stays), one rank
 * of each host at a time. */
static void test_rd_pairs_across_hosts(void **state) {
  (void)state;
  hk_step_figures f = {5.0, 16.0, 30.0};
  hk_cost c;
  const size_t b = 1 << 20;
  for (int g = 1; g <= 8; g++)
    for (int hosts = 1; hosts <= 7; hosts++) {
      hk_host_model h = {g, 4.0, 0, &f};
      assert_int_equal(hk_cost_rd(&h, b, hosts, 10.0, &c), HK_OK);
      const double want = rd_by_pairs(&f, 4.0, g, hosts, 10.0, (double)b);
      if (fabs(c.time_us - want) > 1e-6 * want)
        fail_msg("rd, %d ranks a host, %d hosts: %.3f us, by the pairs %.3f", g,
                 hosts, c.time_us, want);
    }
  hk_host_model three = {3, 4.0, 0, &f};
  assert_int_equal(hk_cost_rd(&three, b, 2, 10.0, &c), HK_OK);
  assert_float_equal(c.time_us, 5.0 + 4 * (30.0 + b / 1.25e3), 1e-9);
}

static hk_host_model model_of(const char *sub, const char *name) {
  struct stat sb;
  if (stat(HK_TOPO_DIR, &sb) != 0) {
    fail_msg("%s is missing: the given topology files are part of the "
             "tree (tests/data/topologies/given)",
             HK_TOPO_DIR);
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", HK_TOPO_DIR, sub, name);
  hk_topo *t;
  if (hk_topo_load_file(path, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  hk_host_model h;
  assert_int_equal(hk_host_model_from_topo(t, t->n_gpus, &h), HK_OK);
  hk_topo_free(t);
  return h;
}

static double busbw(const hk_host_model *h, size_t bytes) {
  hk_cost c;
  assert_int_equal(hk_cost_ring(h, bytes, 1, 0, &c), HK_OK);
  return c.busbw_gbps;
}

static void test_nvlink_over_pcie(void **state) {
  (void)state;
  hk_host_model a100 = model_of("smi", "a100-sxm4-8gpu-nvswitch-aws-p4d.txt");
  hk_host_model rtx4090 = model_of("smi", "rtx4090-8gpu-pcie-allsys-2nic.txt");
  hk_host_model v100 =
      model_of("smi", "v100-sxm2-8gpu-dgx1-hybrid-cube-mesh-1nic.txt");
  hk_host_model t4 = model_of("smi", "t4-4gpu-pcie-2socket-sys-node.txt");
  hk_host_model h100 =
      model_of("ncclxml", "ibm-vpc-gx3d-h100-sxm-8gpu-nvswitch-8nic.xml");
  hk_host_model rtx3090 =
      model_of("ncclxml", "rtx3090-8gpu-pcie-switch-2socket-1ib.xml");
  assert_true(a100.intra_nvlink && v100.intra_nvlink && h100.intra_nvlink);
  assert_false(rtx4090.intra_nvlink || t4.intra_nvlink || rtx3090.intra_nvlink);
  /* At 1 GiB the busbw inside a host is the rings' bandwidth (within 1%),
   * so the expected factors are the ratios of the ring bottlenecks:
   *  A100 NVSwitch 12 links x 20 GB/s = 240 over the 4090's SMP link 10:
   *  24x; DGX-1 V100 6 links x 20 = 120 over the T4's SMP link 10: 12x;
   *  H100 18 x 20.6 = 370.8 over the 3090 box's UPI 10: 37.08x. */
  assert_close(busbw(&a100, GIB), 240.0, 0.01);
  assert_close(busbw(&rtx4090, GIB), 10.0, 0.01);
  assert_close(busbw(&a100, GIB) / busbw(&rtx4090, GIB), 24.0, 0.02);
  assert_close(busbw(&v100, GIB) / busbw(&t4, GIB), 12.0, 0.02);
  assert_close(busbw(&h100, GIB) / busbw(&rtx3090, GIB), 37.08, 0.02);
  /* at 1 MiB latency matters: the factor shrinks but NVLink still wins */
  double small = busbw(&a100, 1u << 20) / busbw(&rtx4090, 1u << 20);
  assert_true(small > 2.0 && small < 24.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_by_hand),
      cmocka_unit_test(test_hierarchical_by_hand),
      cmocka_unit_test(test_tree_by_hand),
      cmocka_unit_test(test_chooser),
      cmocka_unit_test(test_invalid_args),
      cmocka_unit_test(test_rd_by_hand),
      cmocka_unit_test(test_rd_pairs_across_hosts),
      cmocka_unit_test(test_nvlink_over_pcie),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
