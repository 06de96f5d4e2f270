/* Unit tests of the NCCL topology XML reader (expat): the real dumps in
 * tests/data/topologies/given/ncclxml parse with the GPUs, NICs, classes and
 * bandwidths read off the files; skeletons give 0 GPUs and their slots;
 * graph files are told apart (and their rings read); malformed XML and
 * missing or bad attributes fail naming the element and its line. The
 * dumps gathered in tests/data/topologies (SOURCES.md) all parse, and
 * NCCL's own conventions (hidden NVSwitch targets, NICs listed under every
 * CPU, one <gpu> per rank, fused multi-host files, empty attributes) are
 * read as NCCL reads them and said in the note. */
#include <dirent.h>
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

static void need_shared(void) {
  struct stat sb;
  if (stat(HK_TOPO_DIR, &sb) != 0) {
    fail_msg("%s is missing: the given topology files are part of the "
             "tree (tests/data/topologies/given)",
             HK_TOPO_DIR);
  }
}

static hk_topo *load_shared(const char *name) {
  need_shared();
  char path[1024];
  snprintf(path, sizeof path, "%s/ncclxml/%s", HK_TOPO_DIR, name);
  hk_topo *t = NULL;
  if (hk_topo_load_file(path, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  assert_string_equal(t->source, "ncclxml");
  return t;
}

static void test_h100_nvswitch_dump(void **state) {
  (void)state;
  hk_topo *t = load_shared("ibm-vpc-gx3d-h100-sxm-8gpu-nvswitch-8nic.xml");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 8);
  for (int a = 0; a < 8; a++)
    for (int b = 0; b < 8; b++)
      if (a != b) {
        /* 5+5+4+4 links to four NVSwitches, merged: NV18 via the switch */
        assert_int_equal(t->gpu_path[a][b].cls, HK_PATH_NVL);
        assert_int_equal(t->gpu_path[a][b].nvlinks, 18);
        assert_int_equal(t->gpu_path[a][b].nhops, 2);
        assert_true(t->gpu_path[a][b].gbps > 370.79 &&
                    t->gpu_path[a][b].gbps < 370.81); /* 18 x 20.6 */
      }
  const hk_topo_node *g0 = &t->node[t->gpu[0]];
  assert_string_equal(g0->name, "GPU0");
  assert_string_equal(g0->busid, "0000:a4:00.0");
  assert_int_equal(g0->sm, 90);
  /* NICs are numbered by their net dev: mlx5_0 is dev 0 */
  assert_string_equal(t->node[t->nic[0]].name, "mlx5_0");
  assert_true(t->node[t->nic[0]].nic_gbit == 200.0);
  /* GPU0 and mlx5_7 share a bridge (PIX); mlx5_4 is another bridge of the
   * same CPU (PHB); mlx5_0 is on the other CPU (SYS) */
  assert_int_equal(t->nic_path[0][7].cls, HK_PATH_PIX);
  assert_int_equal(t->nic_path[0][4].cls, HK_PATH_PHB);
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_SYS);
  assert_int_equal(hk_topo_nearest_nic(t, 0), 7);
  assert_int_equal(hk_topo_nearest_nic(t, 7), 0);
  assert_string_equal(t->node[g0->cpu].affinity, "0-79");
  hk_topo_free(t);
}

static void test_rtx3090_switches(void **state) {
  (void)state;
  hk_topo *t = load_shared("rtx3090-8gpu-pcie-switch-2socket-1ib.xml");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 1);
  assert_int_equal(t->gpu_path[0][1].cls, HK_PATH_PIX);
  assert_int_equal(t->gpu_path[0][3].cls, HK_PATH_PIX);
  assert_int_equal(t->gpu_path[0][4].cls, HK_PATH_SYS);
  assert_int_equal(t->gpu_path[5][7].cls, HK_PATH_PIX);
  assert_true(t->gpu_path[0][1].gbps == 24.0); /* gen4 x16 */
  /* Ice Lake (family 6, model 106 >= 0x55): NCCL's 10 GB/s UPI figure */
  assert_true(t->gpu_path[0][4].gbps == 10.0);
  assert_int_equal(t->nic_path[4][0].cls, HK_PATH_PIX);
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_SYS);
  assert_true(t->node[t->nic[0]].nic_gbit == 56.0);
  hk_topo_free(t);
}

static void test_a6000_bridge(void **state) {
  (void)state;
  hk_topo *t = load_shared("rtxa6000-2gpu-nvlink-bridge-nv4.xml");
  assert_int_equal(t->n_gpus, 2);
  assert_int_equal(t->n_nics, 1);
  assert_int_equal(t->gpu_path[0][1].cls, HK_PATH_NVL);
  assert_int_equal(t->gpu_path[0][1].nvlinks, 4);
  assert_true(t->gpu_path[0][1].gbps == 48.0); /* 4 x 12.0 (sm 86) */
  assert_string_equal(t->node[t->nic[0]].name, "eno1");
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_PHB); /* nic under cpu */
  assert_true(t->node[t->nic[0]].nic_gbit == 10.0);
  hk_topo_free(t);
}

static void test_skeletons(void **state) {
  (void)state;
  static const struct {
    const char *file;
    int gpu_slots, nic_slots;
  } sk[] = {
      {"aws-p4d-24xlarge-a100-8gpu-4efa-skeleton.xml", 8, 4},
      {"azure-ndv2-v100-8gpu-skeleton.xml", 8, 1},
      {"azure-ndv4-a100-8gpu-skeleton.xml", 8, 8},
  };
  for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++) {
    hk_topo *t = load_shared(sk[i].file);
    assert_int_equal(t->n_gpus, 0);
    assert_int_equal(t->n_nics, 0);
    assert_int_equal(t->gpu_slots, sk[i].gpu_slots);
    assert_int_equal(t->nic_slots, sk[i].nic_slots);
    assert_non_null(strstr(t->note, "skeleton"));
    int order[1];
    assert_int_equal(hk_topo_ring_order(t, 1, order), HK_ERR_CONFIG);
    assert_non_null(strstr(hk_last_error(), "describes no GPU"));
    hk_topo_free(t);
  }
}

static char *slurp(const char *name, size_t *len) {
  need_shared();
  char path[1024], *text;
  snprintf(path, sizeof path, "%s/ncclxml/%s", HK_TOPO_DIR, name);
  assert_int_equal(hk_topo_read_file(path, &text, len), HK_OK);
  return text;
}

static void test_graph_files(void **state) {
  (void)state;
  size_t len;
  char *text = slurp("rtx3090-8gpu-pcie-switch-2socket-1ib.graph.xml", &len);
  assert_int_equal(hk_topo_sniff(text, len), HK_TOPO_FMT_NCCLGRAPH);
  hk_topo *t = (hk_topo *)0x1;
  assert_int_equal(hk_topo_parse(text, len, &t), HK_ERR_CONFIG);
  assert_null(t);
  assert_non_null(strstr(hk_last_error(), "line 1: <graphs>: this is an NCCL "
                                          "graph file (NCCL_GRAPH_FILE"));
  hk_ncclgraph g;
  assert_int_equal(hk_ncclgraph_parse(text, len, &g), HK_OK);
  assert_int_equal(g.n_channels, 1);
  assert_int_equal(g.n_gpus[0], 8);
  for (int i = 0; i < 8; i++)
    assert_int_equal(g.gpu[0][i], i);
  assert_true(g.speed_intra == 4.0);
  assert_string_equal(g.type_intra, "SYS");
  free(text);

  /* NCCL's ring on this machine is 0..7; so is ours on its topology */
  hk_topo *topo = load_shared("rtx3090-8gpu-pcie-switch-2socket-1ib.xml");
  int order[8];
  assert_int_equal(hk_topo_ring_order(topo, 8, order), HK_OK);
  for (int i = 0; i < 8; i++)
    assert_int_equal(order[i], g.gpu[0][i]);
  hk_topo_free(topo);

  text = slurp("azure-ncv4-a100-4gpu.graph.xml", &len);
  assert_int_equal(hk_ncclgraph_parse(text, len, &g), HK_OK);
  assert_int_equal(g.n_channels, 2); /* graph id 0, pattern 4 */
  static const int want[2][4] = {{0, 1, 2, 3}, {0, 3, 2, 1}};
  for (int c = 0; c < 2; c++) {
    assert_int_equal(g.n_gpus[c], 4);
    for (int i = 0; i < 4; i++)
      assert_int_equal(g.gpu[c][i], want[c][i]);
  }
  assert_int_equal(hk_topo_parse_ncclxml(text, len, &t), HK_ERR_CONFIG);
  free(text);
  /* a topology is not a graph file either */
  const char *sys = "<system><cpu numaid=\"0\"/></system>";
  assert_int_equal(hk_ncclgraph_parse(sys, strlen(sys), &g), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "line 1: root element <system>"));
}

static void expect_error(const char *xml, const char *n1, const char *n2) {
  hk_topo *t = (hk_topo *)0x1;
  hk_status st = hk_topo_parse_ncclxml(xml, strlen(xml), &t);
  const char *msg = hk_last_error();
  if (st != HK_ERR_CONFIG || !strstr(msg, n1) || (n2 && !strstr(msg, n2)))
    fail_msg("status %d, message \"%s\", wanted \"%s\" and \"%s\"", st, msg, n1,
             n2 ? n2 : "");
  assert_null(t);
}

#define CPU0 "<system>\n<cpu numaid=\"0\">\n"
#define END "</cpu>\n</system>\n"
#define GPU_PCI(bus) "<pci busid=\"" bus "\" class=\"0x030000\">"

static void test_malformed(void **state) {
  (void)state;
  expect_error("", "line 1: malformed XML: no element found", NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x030000\">\n" END,
               "line 4: malformed XML: mismatched tag", NULL);
  expect_error("<topology/>", "line 1: root element <topology>", NULL);
  expect_error("<!DOCTYPE system [<!ENTITY a \"b\">]><system/>",
               "line 1: <!DOCTYPE>: not allowed", NULL);
  /* missing attributes */
  expect_error(CPU0 GPU_PCI("0000:01:00.0") "\n<gpu sm=\"80\"/></pci>\n" END,
               "line 4: <gpu>: missing attribute \"dev\"", NULL);
  expect_error(CPU0 "<pci class=\"0x030000\"/>\n" END,
               "line 3: <pci>: missing attribute \"busid\"", NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\"/>\n" END,
               "line 3: <pci>: missing attribute \"class\"", NULL);
  expect_error(CPU0 GPU_PCI("0000:01:00.0") "<gpu dev=\"0\">\n<nvlink "
                                            "count=\"2\"/></gpu></pci>" END,
               "line 4: <nvlink>: missing attribute \"target\"", NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic>\n"
                    "<net dev=\"0\"/></nic></pci>" END,
               "line 4: <net>: missing attribute \"name\"", NULL);
  /* malformed attributes */
  expect_error(CPU0 "<pci busid=\"00:01.0\" class=\"0x030000\"/>" END,
               "line 3: <pci>: attribute busid=\"00:01.0\" is not a PCI bus "
               "id",
               NULL);
  expect_error(CPU0 GPU_PCI("0000:01:00.0") "<gpu dev=\"one\"/></pci>" END,
               "line 3: <gpu>: attribute dev=\"one\" is not a number", NULL);
  expect_error(CPU0 GPU_PCI("0000:01:00.0") "<gpu dev=\"0\"><nvlink "
                                            "target=\"0000:02:00.0\" "
                                            "count=\"0\"/></gpu></pci>" END,
               "line 3: <nvlink>: attribute count=\"0\" is out of range", NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x030000\" "
                    "link_speed=\"7 GT/s\" link_width=\"16\"/>" END,
               "line 3: <pci>: unknown link_speed \"7 GT/s\"", NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x030000\"/>\n"
                    "<pci busid=\"0000:01:00.0\" class=\"0x030000\"/>" END,
               "line 4: <pci>: bus id 0000:01:00.0 appears twice", NULL);
  expect_error("<system><cpu affinity=\"ffff,xyz\"/></system>",
               "line 1: <cpu>: attribute affinity=\"ffff,xyz\" is not a CPU "
               "mask",
               NULL);
  /* structure */
  expect_error(CPU0 "<nvlink target=\"0000:02:00.0\" count=\"1\"/>" END,
               "line 3: <nvlink> inside <cpu>: it belongs in <gpu>", NULL);
  expect_error("<system><gpu dev=\"0\"/></system>",
               "line 1: <gpu> inside <system>: it belongs in <pci>", NULL);
  expect_error(CPU0 GPU_PCI("0000:01:00.0") "<gpu dev=\"0\"/></pci>\n" GPU_PCI(
                   "0000:02:00.0") "<gpu dev=\"0\"/></pci>" END,
               "line 4: <gpu>: dev 0 appears twice (also line 3, on another "
               "PCI device)",
               NULL);
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic>"
                    "<net name=\"a\" dev=\"0\"/></nic>\n<gpu dev=\"1\"/>"
                    "</pci>" END,
               "line 4: <gpu>: its <pci> (line 3) already holds a NIC", NULL);
  char deep[4096] = CPU0;
  for (int i = 0; i < 40; i++)
    snprintf(deep + strlen(deep), sizeof deep - strlen(deep),
             "<pci busid=\"0000:%02x:00.0\" class=\"0x060400\">", i);
  expect_error(deep, "nested deeper than 32", NULL);
}

static void test_unknown_elements_skipped(void **state) {
  (void)state;
  const char *xml =
      "<?xml version=\"1.0\"?>\n<!-- a comment -->\n<system version=\"1\">\n"
      "<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
      "familyid=\"6\" modelid=\"143\">\n"
      "<c2c bw=\"x\"><gpu dev=\"bad\"/></c2c>\n"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s "
      "PCIe\" link_width=\"16\"><gpu dev=\"0\" sm=\"90\"/></pci>\n"
      "</cpu>\n<cpu numaid=\"1\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
      "familyid=\"6\" modelid=\"143\">\n"
      "<pci busid=\"0000:81:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s "
      "PCIe\" link_width=\"0\"><gpu dev=\"1\" sm=\"90\"/></pci>\n"
      "</cpu></system>\n";
  assert_int_equal(hk_topo_sniff(xml, strlen(xml)), HK_TOPO_FMT_NCCLXML);
  hk_topo *t;
  if (hk_topo_parse(xml, strlen(xml), &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  assert_int_equal(t->n_gpus, 2);
  assert_int_equal(t->gpu_path[0][1].cls, HK_PATH_SYS);
  /* Sapphire Rapids (model 143 = 0x8F): 22 GB/s; gen5 x16 = 48 GB/s, and
   * width 0 counts as x16 */
  assert_true(t->gpu_path[0][1].gbps == 22.0);
  int l =
      hk_topo_find_link(t, t->gpu[1], t->node[t->gpu[1]].parent, HK_LINK_PCI);
  assert_true(l >= 0 && t->link[l].gbps == 48.0);
  hk_topo_free(t);
}

/* --- the gathered dumps (tests/data/topologies, in the tree) --- */

static hk_topo *load_data(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/ncclxml/%s", HK_TOPO_DATA_DIR, name);
  hk_topo *t = NULL;
  if (hk_topo_load_file(path, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  return t;
}

/* Every XML topology gathered parses (graph files are read as graphs). */
static void test_every_gathered_dump_parses(void **state) {
  (void)state;
  const char *dirs[] = {HK_TOPO_DATA_DIR "/ncclxml", HK_TOPO_DIR "/ncclxml"};
  int n = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    DIR *dir = opendir(dirs[d]);
    if (!dir)
      continue; /* a folder may be empty */
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
      if (!strstr(de->d_name, ".xml"))
        continue;
      char path[1024], *text;
      size_t len;
      snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
      assert_int_equal(hk_topo_read_file(path, &text, &len), HK_OK);
      hk_status st;
      if (hk_topo_sniff(text, len) == HK_TOPO_FMT_NCCLGRAPH) {
        hk_ncclgraph g;
        st = hk_ncclgraph_parse(text, len, &g);
      } else {
        hk_topo *t = NULL;
        st = hk_topo_parse(text, len, &t);
        hk_topo_free(t);
      }
      free(text);
      if (st != HK_OK)
        fail_msg("%s: %s", path, hk_last_error());
      n++;
    }
    closedir(dir);
  }
  assert_true(n >= 6);
}

static void all_pairs_nvl(const hk_topo *t, int links, int hops) {
  for (int a = 0; a < t->n_gpus; a++)
    for (int b = 0; b < t->n_gpus; b++)
      if (a != b) {
        assert_int_equal(t->gpu_path[a][b].cls, HK_PATH_NVL);
        assert_int_equal(t->gpu_path[a][b].nvlinks, links);
        assert_int_equal(t->gpu_path[a][b].nhops, hops);
      }
}

static void test_hidden_nvswitch_and_nic_under_every_cpu(void **state) {
  (void)state;
  /* a container on an HGX B200: NVML cannot see the NVSwitches, so NCCL
   * names the peer "fffffff:ff:ff.0"; the socket NIC is under both CPUs */
  hk_topo *t = load_data("b200-8gpu-nvswitch-hidden-nic-per-cpu.xml");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 1);
  all_pairs_nvl(t, 18, 2); /* through the one merged NVSwitch node */
  assert_non_null(strstr(t->note, "not visible"));
  assert_non_null(strstr(t->note, "fffffff:ff:ff.0"));
  assert_non_null(strstr(t->note, "NIC eth0 is listed 2 times"));
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_PHB); /* first place */
  assert_int_equal(t->nic_path[7][0].cls, HK_PATH_SYS);
  hk_topo_free(t);

  t = load_data("h200-8gpu-nvswitch-nic-per-cpu.xml");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 1);
  all_pairs_nvl(t, 18, 2); /* 5+5+4+4 to four visible NVSwitches */
  assert_null(strstr(t->note, "not visible"));
  assert_non_null(strstr(t->note, "listed 2 times"));
  hk_topo_free(t);
}

static void test_gathered_pcie_and_mesh_dumps(void **state) {
  (void)state;
  /* 4x A100 SXM4 with a direct NV4 mesh, one NIC per NUMA node */
  hk_topo *t = load_data("a100-sxm4-4gpu-nvlink-mesh-4nic.xml");
  assert_int_equal(t->n_gpus, 4);
  assert_int_equal(t->n_nics, 4);
  all_pairs_nvl(t, 4, 1);
  for (int g = 0; g < 4; g++) {
    int k = hk_topo_nearest_nic(t, g);
    assert_int_equal(t->nic_path[g][k].cls, HK_PATH_PHB);
    assert_int_equal(t->node[t->nic[k]].cpu, t->node[t->gpu[g]].cpu);
  }
  assert_string_equal(t->note, "");
  hk_topo_free(t);

  /* Azure NC A100 v4: each GPU's NVLink names the GPU itself, PCIe speed
   * and width empty: no NVLink pair, gen3 x16 assumed and said */
  t = load_data("azure-ncv4-a100-pcie-4gpu-nvlink-self-target.xml");
  assert_int_equal(t->n_gpus, 4);
  assert_int_equal(t->gpu_path[0][1].cls, HK_PATH_SYS);
  assert_non_null(strstr(t->note, "4 NVLink entries name their own GPU"));
  assert_non_null(strstr(t->note, "no link_speed"));
  assert_non_null(strstr(t->note, "counted as x16"));
  int l =
      hk_topo_find_link(t, t->gpu[0], t->node[t->gpu[0]].parent, HK_LINK_PCI);
  assert_true(l >= 0 && t->link[l].gbps == 12.0); /* gen3 x16 */
  hk_topo_free(t);

  /* two ports of one NIC, each a NIC (as NCCL's net devices) */
  t = load_data("a100-pcie-2gpu-dualport-nic.xml");
  assert_int_equal(t->n_gpus, 2);
  assert_int_equal(t->n_nics, 2);
  assert_string_equal(t->node[t->nic[1]].name, "mlx5_1");
  assert_int_equal(t->node[t->nic[1]].parent, t->nic[0]); /* same card */
  assert_int_equal(t->nic_path[0][1].cls, HK_PATH_PHB);
  assert_int_equal(t->nic_path[1][1].cls, HK_PATH_SYS);
  hk_topo_free(t);

  t = load_data("azure-ndv5-h100-8gpu-skeleton.xml");
  assert_int_equal(t->n_gpus, 0);
  assert_int_equal(t->gpu_slots, 8);
  assert_int_equal(t->nic_slots, 8);
  hk_topo_free(t);
}

static hk_topo *parse_ok(const char *xml) {
  hk_topo *t = NULL;
  if (hk_topo_parse_ncclxml(xml, strlen(xml), &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  return t;
}

#define PCI2(bus, body)                                                        \
  "<pci busid=\"" bus "\" class=\"0x030200\">" body "</pci>"

/* NCCL's conventions, each on the smallest file that shows it. */
static void test_nccl_conventions(void **state) {
  (void)state;
  /* the older sentinel, without tclass: an NVSwitch (NCCL assumes it) */
  hk_topo *t = parse_ok(
      CPU0 PCI2("0000:01:00.0", "<gpu dev=\"0\" sm=\"80\"><nvlink "
                                "target=\"fffffff:ffff:ff\" count=\"12\"/>"
                                "</gpu>")
          PCI2("0000:02:00.0", "<gpu dev=\"1\" sm=\"80\">"
                               "<nvlink target=\"fffffff:ffff:"
                               "ff\" count=\"12\"/></gpu>") END);
  all_pairs_nvl(t, 12, 2);
  assert_non_null(strstr(t->note, "fffffff:ffff:ff"));
  hk_topo_free(t);

  /* a tclass that is neither GPU nor CPU: NCCL's NVSwitch */
  t = parse_ok(
      CPU0 PCI2("0000:01:00.0",
                "<gpu dev=\"0\"><nvlink target=\"0000:05:00.0\" "
                "count=\"6\" tclass=\"0x060400\"/></gpu>")
          PCI2("0000:02:00.0", "<gpu dev=\"1\"><nvlink target=\"0000:05:00.0\" "
                               "count=\"6\" tclass=\"0x060400\"/></gpu>") END);
  all_pairs_nvl(t, 6, 2);
  assert_non_null(strstr(t->note, "tclass 0x060400"));
  hk_topo_free(t);

  /* one <gpu> per rank: two ranks on GPU 0 (or its MLOPart halves) */
  t = parse_ok(CPU0 PCI2("0000:01:00.0",
                         "<gpu dev=\"0\" sm=\"107\" mlopart=\"0\" rank=\"0\"/>"
                         "<gpu dev=\"0\" sm=\"107\" mlopart=\"1\" rank=\"1\"/>")
                   END);
  assert_int_equal(t->n_gpus, 1);
  assert_non_null(strstr(t->note, "share a PCI device"));
  hk_topo_free(t);

  /* a fused multi-host file: the first host only */
  t = parse_ok(
      "<system version=\"1\"><cpu host_hash=\"0xa\" numaid=\"0\">" PCI2(
          "0000:01:00.0",
          "<gpu dev=\"0\"/>") "</cpu><cpu host_hash=\"0xb\" "
                              "numaid=\"0\">" PCI2(
                                  "0000:01:00.0",
                                  "<gpu dev=\"0\"/>") "</cpu>"
                                                      "</system>");
  assert_int_equal(t->n_gpus, 1);
  assert_non_null(strstr(t->note, "host_hash 0xa"));
  hk_topo_free(t);

  /* bus ids: a 5-digit (VMD) domain, upper case matching lower case */
  t = parse_ok(CPU0 PCI2("10000:3B:00.0",
                         "<gpu dev=\"0\"><nvlink target=\"10000:3c:00.0\" "
                         "count=\"4\" tclass=\"0x030200\"/></gpu>")
                   PCI2("10000:3c:00.0", "<gpu dev=\"1\"/>") END);
  assert_string_equal(t->node[t->gpu[0]].busid, "10000:3b:00.0");
  assert_int_equal(t->gpu_path[0][1].cls, HK_PATH_NVL);
  assert_int_equal(t->gpu_path[0][1].nvlinks, 4);
  hk_topo_free(t);

  /* nets NCCL does not add: no dev, or net="0" (GIN/CollNet only) */
  t = parse_ok(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x020000\" "
                    "link_width=\"\"><nic><net name=\"a\"/><net name=\"b\" "
                    "dev=\"1\" net=\"0\" gin=\"1\"/><net name=\"c\" "
                    "dev=\"2\"/></nic></pci>" END);
  assert_int_equal(t->n_nics, 1);
  assert_string_equal(t->node[t->nic[0]].name, "c");
  assert_non_null(strstr(t->note, "1 <net> entries without dev and 1 with"));
  assert_non_null(strstr(t->note, "counted as x16"));
  hk_topo_free(t);

  /* what is truly broken is still refused, with line and reason */
  expect_error(CPU0 PCI2("0000:01:00.0", "<gpu dev=\"0\">\n<nvlink "
                                         "target=\"banana\" count=\"2\"/>"
                                         "</gpu>") END,
               "line 4: <nvlink>: attribute target=\"banana\" is not a PCI "
               "bus id",
               NULL);
  expect_error(CPU0 PCI2("0000:01:00.0", "<gpu dev=\"0\">\n<nvlink "
                                         "target=\"fffffff:ff:ff.0\" "
                                         "count=\"2\" tclass=\"0x030200\"/>"
                                         "</gpu>") END,
               "line 4: <nvlink>: target=\"fffffff:ff:ff.0\" is not a GPU's",
               "tclass 0x030200 says the peer is a GPU");
  expect_error(CPU0 "<pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic>"
                    "<net name=\"mlx5_0\" dev=\"0\"/></nic></pci>\n<nic><net "
                    "name=\"eth0\" dev=\"0\"/></nic>" END,
               "line 4: <net>: dev 0 is \"eth0\" here but \"mlx5_0\" on line 3",
               NULL);
  expect_error("<system version=\"2\"/>",
               "line 1: <system>: version \"2\": NCCL reads topology version "
               "1 only",
               NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_h100_nvswitch_dump),
      cmocka_unit_test(test_rtx3090_switches),
      cmocka_unit_test(test_a6000_bridge),
      cmocka_unit_test(test_skeletons),
      cmocka_unit_test(test_graph_files),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_unknown_elements_skipped),
      cmocka_unit_test(test_every_gathered_dump_parses),
      cmocka_unit_test(test_hidden_nvswitch_and_nic_under_every_cpu),
      cmocka_unit_test(test_gathered_pcie_and_mesh_dumps),
      cmocka_unit_test(test_nccl_conventions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
