/* Unit tests of ring ordering on the real layouts: on every NVLink layout
 * each ring is NVLink only and visits every GPU once; on every PCIe layout
 * the best ring crosses SYS exactly the minimum number of times, computed
 * here by brute force over all orders; several rings use every NVLink of a
 * DGX-1; the local-rank order and the nearest NIC follow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "topology/parse.h"
#include "topology/ring.h"

static hk_topo *load(const char *dir, const char *name) {
  struct stat sb;
  if (strcmp(dir, HK_CONFIGS_DIR) != 0 && stat(HK_TOPO_DIR, &sb) != 0) {
    fail_msg("%s is missing: the given topology files are part of the "
             "tree (tests/data/topologies/given)",
             HK_TOPO_DIR);
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  hk_topo *t = NULL;
  if (hk_topo_load_file(path, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  return t;
}

static hk_topo_rings *all_rings(const hk_topo *t) {
  int gpus[HK_TOPO_MAX_GPUS];
  for (int i = 0; i < t->n_gpus; i++)
    gpus[i] = i;
  hk_topo_rings *rs = malloc(sizeof *rs);
  assert_non_null(rs);
  if (hk_topo_find_rings(t, gpus, t->n_gpus, rs) != HK_OK)
    fail_msg("%s", hk_last_error());
  assert_true(rs->exact);
  return rs;
}

/* Every GPU exactly once. */
static void assert_covers(const hk_topo *t, const hk_topo_ring *r) {
  int seen[HK_TOPO_MAX_GPUS] = {0};
  assert_int_equal(r->n, t->n_gpus);
  for (int i = 0; i < r->n; i++) {
    assert_in_range(r->gpu[i], 0, t->n_gpus - 1);
    assert_int_equal(seen[r->gpu[i]]++, 0);
  }
}

static int ring_sys_hops(const hk_topo *t, const int *order, int n) {
  int s = 0;
  for (int i = 0; i < n; i++)
    s += t->gpu_path[order[i]][order[(i + 1) % n]].cls == HK_PATH_SYS;
  return s;
}

/* Least SYS hops over all (n-1)! rings starting at GPU 0. */
static int brute_min_sys(const hk_topo *t) {
  int n = t->n_gpus, p[HK_TOPO_MAX_GPUS], c[HK_TOPO_MAX_GPUS] = {0};
  assert_true(n <= 8);
  for (int i = 0; i < n; i++)
    p[i] = i;
  int best = ring_sys_hops(t, p, n);
  /* Heap's algorithm over p[1..n-1] */
  int i = 1;
  while (i < n - 1) {
    if (c[i] < i) {
      int j = (i % 2 == 0) ? 0 : c[i];
      int tmp = p[1 + j];
      p[1 + j] = p[1 + i];
      p[1 + i] = tmp;
      int s = ring_sys_hops(t, p, n);
      if (s < best)
        best = s;
      c[i]++;
      i = 1;
    } else {
      c[i] = 0;
      i++;
    }
  }
  return best;
}

static void test_brute_force_is_exhaustive(void **state) {
  (void)state;
  /* sanity of the checker itself: 4 GPUs, sockets {0,2} {1,3}; the order
   * 0,1,2,3 crosses 4 times, the best twice */
  const char *text = "GPU0 GPU1 GPU2 GPU3\nGPU0 X SYS NODE SYS\n"
                     "GPU1 SYS X SYS NODE\nGPU2 NODE SYS X SYS\n"
                     "GPU3 SYS NODE SYS X\n";
  hk_topo *t;
  assert_int_equal(hk_topo_parse_smi(text, strlen(text), &t), HK_OK);
  int id[4] = {0, 1, 2, 3};
  assert_int_equal(ring_sys_hops(t, id, 4), 4);
  assert_int_equal(brute_min_sys(t), 2);
  hk_topo_rings *rs = all_rings(t);
  assert_int_equal(rs->ring[0].sys_hops, 2);
  assert_int_equal(ring_sys_hops(t, rs->ring[0].gpu, 4), 2);
  /* ties (0,1,3,2 and 0,2,1,3 both cross twice, over the same classes)
   * go to the first in lexicographic order */
  static const int want[4] = {0, 1, 3, 2};
  assert_memory_equal(rs->ring[0].gpu, want, sizeof want);
  free(rs);
  hk_topo_free(t);
}

static void check_nvlink(const char *dir, const char *name, double ring0,
                         double total, int n_rings) {
  hk_topo *t = load(dir, name);
  hk_topo_rings *rs = all_rings(t);
  if (rs->n_rings != n_rings || rs->ring[0].gbps < ring0 - 1e-6 ||
      rs->ring[0].gbps > ring0 + 1e-6 || rs->total_gbps < total - 1e-6 ||
      rs->total_gbps > total + 1e-6)
    fail_msg("%s: %d rings, first %.2f, total %.2f GB/s; wanted %d, %.2f, "
             "%.2f",
             name, rs->n_rings, rs->ring[0].gbps, rs->total_gbps, n_rings,
             ring0, total);
  for (int r = 0; r < rs->n_rings; r++) {
    const hk_topo_ring *g = &rs->ring[r];
    assert_covers(t, g);
    assert_true(g->nvlink_only);
    assert_int_equal(g->sys_hops, 0);
    for (int i = 0; i < g->n; i++) /* each hop, read off the matrix */
      assert_int_equal(t->gpu_path[g->gpu[i]][g->gpu[(i + 1) % g->n]].cls,
                       HK_PATH_NVL);
  }
  free(rs);
  hk_topo_free(t);
}

static void test_nvlink_layouts(void **state) {
  (void)state;
  const char *smi = HK_TOPO_DIR "/smi", *xml = HK_TOPO_DIR "/ncclxml";
  check_nvlink(smi, "2gpu-nvlink-bridge-nv2.txt", 40, 40, 1);
  check_nvlink(smi, "a100-sxm4-8gpu-nvswitch-aws-p4d.txt", 240, 240, 1);
  check_nvlink(smi, "a100-sxm4-80gb-8gpu-nvswitch-8nic-roce.txt", 240, 240, 1);
  check_nvlink(smi, "h100-sxm5-8gpu-nvswitch-aws-p5.txt", 360, 360, 1);
  /* DGX-1: the NV2 cycle each way (2 x 20 GB/s), then the NV1 cycle each
   * way: all 6 links of every GPU, 6 x 20 GB/s */
  check_nvlink(smi, "v100-sxm2-8gpu-dgx1-hybrid-cube-mesh-1nic.txt", 40, 120,
               4);
  check_nvlink(xml, "ibm-vpc-gx3d-h100-sxm-8gpu-nvswitch-8nic.xml", 370.8,
               370.8, 1);
  check_nvlink(xml, "rtxa6000-2gpu-nvlink-bridge-nv4.xml", 48, 48, 1);
  check_nvlink(HK_CONFIGS_DIR, "a100-sxm4-8gpu-nvswitch.xml", 240, 240, 1);
  check_nvlink(HK_CONFIGS_DIR, "v100-sxm2-8gpu-dgx1.xml", 40, 120, 4);
}

static void test_dgx1_first_ring_is_nv2(void **state) {
  (void)state;
  hk_topo *t =
      load(HK_TOPO_DIR "/smi", "v100-sxm2-8gpu-dgx1-hybrid-cube-mesh-1nic.txt");
  hk_topo_rings *rs = all_rings(t);
  static const int want[8] = {0, 3, 2, 1, 5, 6, 7, 4};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(rs->ring[0].gpu[i], want[i]);
    assert_int_equal(t->gpu_path[want[i]][want[(i + 1) % 8]].nvlinks, 2);
  }
  /* the second ring is the first reversed (the other direction of each
   * NV2), starting from GPU0 */
  for (int i = 0; i < 8; i++)
    assert_int_equal(rs->ring[1].gpu[i], want[(8 - i) % 8]);
  int order[8];
  assert_int_equal(hk_topo_ring_order(t, 8, order), HK_OK);
  assert_memory_equal(order, want, sizeof want);
  free(rs);
  hk_topo_free(t);
}

static void check_pcie(const char *dir, const char *name, int min_sys,
                       double gbps) {
  hk_topo *t = load(dir, name);
  int brute = brute_min_sys(t);
  hk_topo_rings *rs = all_rings(t);
  const hk_topo_ring *r = &rs->ring[0];
  assert_covers(t, r);
  if (brute != min_sys || r->sys_hops != brute ||
      ring_sys_hops(t, r->gpu, r->n) != brute || r->gbps < gbps - 1e-6 ||
      r->gbps > gbps + 1e-6)
    fail_msg("%s: ring crosses SYS %d times (recount %d), brute-force "
             "minimum %d (stated %d); %.2f GB/s, wanted %.2f",
             name, r->sys_hops, ring_sys_hops(t, r->gpu, r->n), brute, min_sys,
             r->gbps, gbps);
  assert_false(r->nvlink_only);
  free(rs);
  hk_topo_free(t);
}

static void test_pcie_layouts(void **state) {
  (void)state;
  const char *smi = HK_TOPO_DIR "/smi", *xml = HK_TOPO_DIR "/ncclxml";
  /* minimum SYS crossings (brute force agrees) and the ring's bottleneck */
  check_pcie(smi, "l40s-4gpu-pcie-node-aws-g6e12xl.txt", 0, 12.0);
  check_pcie(smi, "rtx3090-8gpu-pcie-pix-phb-sys.txt", 2, 10.0);
  check_pcie(smi, "rtx4090-8gpu-pcie-allsys-2nic.txt", 8, 10.0);
  check_pcie(smi, "t4-4gpu-pcie-2socket-sys-node.txt", 2, 10.0);
  check_pcie(xml, "rtx3090-8gpu-pcie-switch-2socket-1ib.xml", 2, 10.0);
  check_pcie(HK_CONFIGS_DIR, "rtx4090-8gpu-pcie-2socket.xml", 2, 24.0);
  check_pcie(HK_CONFIGS_DIR, "t4-4gpu-pcie-2socket.xml", 2, 10.0);
}

static void test_sys_crossings_when_bandwidth_ties(void **state) {
  (void)state;
  /* Emerald Rapids sockets (40 GB/s between them) with gen3 GPUs (12 GB/s):
   * the GPUs' links are the bottleneck whatever the order, so only the
   * count of SYS hops tells 0,1,2,3 (4 crossings: GPUs 0,2 on socket 0,
   * 1,3 on socket 1) from the best rings (2 crossings). */
  const char *xml =
      "<system>\n"
      "<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
      "familyid=\"6\" modelid=\"207\">\n"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"8 "
      "GT/s\" link_width=\"16\"><gpu dev=\"0\"/></pci>\n"
      "<pci busid=\"0000:03:00.0\" class=\"0x030200\" link_speed=\"8 "
      "GT/s\" link_width=\"16\"><gpu dev=\"2\"/></pci>\n"
      "</cpu>\n"
      "<cpu numaid=\"1\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
      "familyid=\"6\" modelid=\"207\">\n"
      "<pci busid=\"0000:81:00.0\" class=\"0x030200\" link_speed=\"8 "
      "GT/s\" link_width=\"16\"><gpu dev=\"1\"/></pci>\n"
      "<pci busid=\"0000:83:00.0\" class=\"0x030200\" link_speed=\"8 "
      "GT/s\" link_width=\"16\"><gpu dev=\"3\"/></pci>\n"
      "</cpu>\n</system>\n";
  hk_topo *t;
  if (hk_topo_parse_ncclxml(xml, strlen(xml), &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  int id[4] = {0, 1, 2, 3};
  assert_int_equal(ring_sys_hops(t, id, 4), 4);
  assert_int_equal(brute_min_sys(t), 2);
  hk_topo_rings *rs = all_rings(t);
  assert_int_equal(rs->ring[0].sys_hops, 2);
  assert_int_equal(ring_sys_hops(t, rs->ring[0].gpu, 4), 2);
  assert_true(rs->ring[0].gbps == 12.0);
  free(rs);
  hk_topo_free(t);
}

static void test_pix_pairs_stay_adjacent(void **state) {
  (void)state;
  /* 3090 box: PIX pairs (0,1) (2,3) (4,5) (6,7); the best ring keeps each
   * pair together and crosses sockets twice: 0 1 2 3 4 5 6 7 */
  hk_topo *t = load(HK_TOPO_DIR "/smi", "rtx3090-8gpu-pcie-pix-phb-sys.txt");
  int order[8];
  assert_int_equal(hk_topo_ring_order(t, 8, order), HK_OK);
  for (int i = 0; i < 8; i++)
    assert_int_equal(order[i], i);
  /* on 4 local ranks the ring stays inside socket 0 */
  assert_int_equal(hk_topo_ring_order(t, 4, order), HK_OK);
  assert_int_equal(ring_sys_hops(t, order, 4), 0);
  hk_topo_free(t);
}

static void test_ring_order_errors(void **state) {
  (void)state;
  hk_topo *t = load(HK_TOPO_DIR "/smi", "t4-4gpu-pcie-2socket-sys-node.txt");
  int order[8];
  assert_int_equal(hk_topo_ring_order(t, 5, order), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "5 local ranks but the layout has "
                                          "4 GPUs"));
  assert_int_equal(hk_topo_ring_order(t, 0, order), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_topo_ring_order(t, 1, order), HK_OK);
  assert_int_equal(order[0], 0);
  int dup[2] = {1, 1};
  hk_topo_rings rs;
  assert_int_equal(hk_topo_find_rings(t, dup, 2, &rs), HK_ERR_INVALID_ARG);
  int bad[1] = {4};
  assert_int_equal(hk_topo_find_rings(t, bad, 1, &rs), HK_ERR_INVALID_ARG);
  int one[1] = {2};
  assert_int_equal(hk_topo_find_rings(t, one, 1, &rs), HK_OK);
  assert_int_equal(rs.n_rings, 1);
  assert_int_equal(rs.ring[0].n, 1);
  assert_int_equal(rs.ring[0].gpu[0], 2);
  assert_true(rs.total_gbps == 0.0);
  hk_topo_free(t);
}

static void test_nearest_nic(void **state) {
  (void)state;
  hk_topo *t =
      load(HK_TOPO_DIR "/smi", "a100-sxm4-80gb-8gpu-nvswitch-8nic-roce.txt");
  static const int want[8] = {0, 0, 2, 2, 4, 4, 6, 6}; /* PXB, lowest */
  for (int g = 0; g < 8; g++)
    assert_int_equal(hk_topo_nearest_nic(t, g), want[g]);
  assert_int_equal(hk_topo_nearest_nic(t, 8), -1);
  hk_topo_free(t);
  t = load(HK_TOPO_DIR "/smi", "a100-sxm4-8gpu-nvswitch-aws-p4d.txt");
  assert_int_equal(hk_topo_nearest_nic(t, 0), -1); /* no NIC listed */
  hk_topo_free(t);
  t = load(HK_TOPO_DIR "/smi", "rtx4090-8gpu-pcie-allsys-2nic.txt");
  assert_int_equal(hk_topo_nearest_nic(t, 6), 0); /* PHB */
  assert_int_equal(t->nic_path[6][0].cls, HK_PATH_PHB);
  hk_topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_brute_force_is_exhaustive),
      cmocka_unit_test(test_nvlink_layouts),
      cmocka_unit_test(test_dgx1_first_ring_is_nv2),
      cmocka_unit_test(test_pcie_layouts),
      cmocka_unit_test(test_sys_crossings_when_bandwidth_ties),
      cmocka_unit_test(test_pix_pairs_stay_adjacent),
      cmocka_unit_test(test_ring_order_errors),
      cmocka_unit_test(test_nearest_nic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
