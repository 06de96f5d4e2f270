/* Unit tests of the `nvidia-smi topo -m` parser: every real matrix in
 * tests/data/topologies/given/smi parses with the GPU/NIC counts and the
 * classes read off the files by eye; tabs, CRLF and ANSI escapes are accepted;
 * malformed text fails with HK_ERR_CONFIG naming the line and the fault.
 * Every matrix gathered in tests/data/topologies/smi (SOURCES.md) parses. */
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

static hk_topo *load_shared(const char *name) {
  struct stat sb;
  if (stat(HK_TOPO_DIR, &sb) != 0) {
    fail_msg("%s is missing: the given topology files are part of the "
             "tree (tests/data/topologies/given)",
             HK_TOPO_DIR);
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/smi/%s", HK_TOPO_DIR, name);
  hk_topo *t = NULL;
  hk_status st = hk_topo_load_file(path, &t);
  if (st != HK_OK)
    fail_msg("%s: %s", path, hk_last_error());
  assert_non_null(t);
  assert_string_equal(t->source, "nvidia-smi");
  return t;
}

static void assert_pair(const hk_topo *t, int a, int b, hk_topo_path cls,
                        int nv) {
  assert_int_equal(t->gpu_path[a][b].cls, cls);
  assert_int_equal(t->gpu_path[b][a].cls, cls);
  assert_int_equal(t->gpu_path[a][b].nvlinks, nv);
}

static void test_nvlink_bridge(void **state) {
  (void)state;
  hk_topo *t = load_shared("2gpu-nvlink-bridge-nv2.txt");
  assert_int_equal(t->n_gpus, 2);
  assert_int_equal(t->n_nics, 0);
  assert_pair(t, 0, 1, HK_PATH_NVL, 2);
  assert_int_equal(t->gpu_path[0][1].gbps, 40); /* 2 links x 20 GB/s */
  assert_string_equal(t->node[t->gpu[1]].affinity, "0-23");
  hk_topo_free(t);
}

static void test_a100_roce_nics(void **state) {
  (void)state;
  hk_topo *t = load_shared("a100-sxm4-80gb-8gpu-nvswitch-8nic-roce.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 8);
  assert_pair(t, 0, 7, HK_PATH_NVL, 12);
  assert_pair(t, 3, 4, HK_PATH_NVL, 12);
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_PXB);
  assert_int_equal(t->nic_path[0][2].cls, HK_PATH_NODE);
  assert_int_equal(t->nic_path[0][4].cls, HK_PATH_SYS);
  assert_int_equal(t->nic_path[6][6].cls, HK_PATH_PXB);
  assert_int_equal(t->nic_path[6][4].cls, HK_PATH_NODE);
  /* the "NIC Legend" names the NICs */
  assert_string_equal(t->node[t->nic[0]].name, "NIC0");
  assert_string_equal(t->node[t->nic[7]].model, "mlx5_7");
  assert_int_equal(t->node[t->gpu[5]].numa, 1);
  /* NV12 to all 7 peers is 84 links: an NVSwitch, 12 x 20 GB/s per GPU */
  assert_non_null(strstr(t->note, "NVSwitch"));
  assert_true(t->gpu_path[0][7].gbps == 240.0);
  hk_topo_free(t);
}

static void test_a100_h100_aws(void **state) {
  (void)state;
  hk_topo *t = load_shared("a100-sxm4-8gpu-nvswitch-aws-p4d.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_pair(t, 0, 1, HK_PATH_NVL, 12);
  assert_string_equal(t->node[t->gpu[4]].affinity, "24-47,72-95");
  assert_int_equal(t->node[t->gpu[4]].numa, 1);
  assert_int_equal(t->node[t->gpu[3]].numa, 0);
  hk_topo_free(t);
  t = load_shared("h100-sxm5-8gpu-nvswitch-aws-p5.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_pair(t, 2, 5, HK_PATH_NVL, 18);
  assert_true(t->gpu_path[2][5].gbps == 360.0);
  hk_topo_free(t);
}

static void test_pcie_boxes(void **state) {
  (void)state;
  hk_topo *t = load_shared("l40s-4gpu-pcie-node-aws-g6e12xl.txt");
  assert_int_equal(t->n_gpus, 4);
  assert_pair(t, 1, 3, HK_PATH_NODE, 0);
  hk_topo_free(t);

  t = load_shared("rtx3090-8gpu-pcie-pix-phb-sys.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_pair(t, 0, 1, HK_PATH_PIX, 0);
  assert_pair(t, 0, 2, HK_PATH_PHB, 0);
  assert_pair(t, 3, 4, HK_PATH_SYS, 0);
  assert_pair(t, 6, 7, HK_PATH_PIX, 0);
  assert_true(t->gpu_path[0][1].gbps == 12.0); /* gen3 x16 assumed */
  assert_true(t->gpu_path[3][4].gbps == 10.0); /* the SMP link */
  hk_topo_free(t);

  t = load_shared("rtx4090-8gpu-pcie-allsys-2nic.txt"); /* tab separated */
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 2);
  assert_pair(t, 0, 1, HK_PATH_SYS, 0);
  assert_pair(t, 5, 6, HK_PATH_SYS, 0);
  assert_int_equal(t->nic_path[6][0].cls, HK_PATH_PHB);
  assert_int_equal(t->nic_path[6][1].cls, HK_PATH_PHB);
  assert_int_equal(t->nic_path[7][1].cls, HK_PATH_SYS);
  assert_string_equal(t->node[t->gpu[4]].affinity, "56-111,168-223");
  assert_int_equal(t->node[t->gpu[4]].numa, 1);
  hk_topo_free(t);

  t = load_shared("t4-4gpu-pcie-2socket-sys-node.txt");
  assert_int_equal(t->n_gpus, 4);
  assert_pair(t, 0, 1, HK_PATH_SYS, 0);
  assert_pair(t, 0, 3, HK_PATH_SYS, 0);
  assert_pair(t, 1, 2, HK_PATH_NODE, 0);
  assert_string_equal(t->node[t->gpu[0]].affinity, "0-15,32-47");
  assert_int_equal(t->node[t->gpu[0]].numa, -1); /* no NUMA column */
  hk_topo_free(t);
}

static void test_dgx1_hybrid_cube_mesh(void **state) {
  (void)state;
  hk_topo *t = load_shared("v100-sxm2-8gpu-dgx1-hybrid-cube-mesh-1nic.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 1);
  assert_string_equal(t->node[t->nic[0]].name, "mlx5_0");
  assert_pair(t, 0, 1, HK_PATH_NVL, 1);
  assert_pair(t, 0, 3, HK_PATH_NVL, 2);
  assert_pair(t, 0, 4, HK_PATH_NVL, 2);
  assert_pair(t, 0, 5, HK_PATH_SYS, 0);
  assert_pair(t, 4, 7, HK_PATH_NVL, 2);
  assert_pair(t, 2, 6, HK_PATH_NVL, 1);
  assert_pair(t, 3, 6, HK_PATH_SYS, 0);
  assert_true(t->gpu_path[0][1].gbps == 20.0);
  assert_true(t->gpu_path[0][3].gbps == 40.0);
  assert_int_equal(t->nic_path[2][0].cls, HK_PATH_PIX);
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_NODE);
  assert_int_equal(t->nic_path[4][0].cls, HK_PATH_SYS);
  /* 6 NVLinks per GPU at most: direct links, no NVSwitch */
  assert_null(strstr(t->note, "NVSwitch"));
  hk_topo_free(t);
}

static hk_topo *parse_ok(const char *text) {
  hk_topo *t = NULL;
  hk_status st = hk_topo_parse_smi(text, strlen(text), &t);
  if (st != HK_OK)
    fail_msg("%s", hk_last_error());
  return t;
}

static void test_escapes_tabs_crlf(void **state) {
  (void)state;
  const char *text = "\n\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA "
                     "Affinity\x1b[0m\r\n"
                     "\x1b[1mGPU0\x1b[0m\t X \tNV4\tPIX\t0-7\t0\r\n"
                     "GPU1\tNV4\t X \tPHB\t0-7\t0\r\n"
                     "NIC0\tPIX\tPHB\t X \r\n"
                     "\r\nNIC Legend:\r\n\r\n  NIC0: mlx5_3\r\n";
  hk_topo *t = parse_ok(text);
  assert_int_equal(t->n_gpus, 2);
  assert_int_equal(t->n_nics, 1);
  assert_pair(t, 0, 1, HK_PATH_NVL, 4);
  assert_int_equal(t->nic_path[0][0].cls, HK_PATH_PIX);
  assert_int_equal(t->nic_path[1][0].cls, HK_PATH_PHB);
  assert_string_equal(t->node[t->nic[0]].model, "mlx5_3");
  assert_string_equal(t->node[t->gpu[0]].affinity, "0-7");
  hk_topo_free(t);
}

static void test_real_h200_output(void **state) {
  (void)state;
  /* `nvidia-smi topo -m` as printed on a 1 x H200 machine (driver 570):
   * an underlined header, tabs, and an empty field before GPU NUMA ID */
  hk_topo *t = parse_ok(
      "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
      "GPU0\t X \t0-15\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
      "  NV#  = Connection traversing a bonded set of # NVLinks\n");
  assert_int_equal(t->n_gpus, 1);
  assert_string_equal(t->node[t->gpu[0]].affinity, "0-15");
  assert_int_equal(t->node[t->gpu[0]].numa, 0);
  hk_topo_free(t);
}

static void test_old_soc_token(void **state) {
  (void)state;
  hk_topo *t = parse_ok("\tGPU0\tGPU1\n"
                        "GPU0\t X \tSOC\n"
                        "GPU1\tSOC\t X \n");
  assert_pair(t, 0, 1, HK_PATH_SYS, 0);
  hk_topo_free(t);
}

/* Parses text, expects HK_ERR_CONFIG and every needle in the message. */
static void expect_error(const char *text, const char *n1, const char *n2) {
  hk_topo *t = (hk_topo *)0x1;
  hk_status st = hk_topo_parse_smi(text, strlen(text), &t);
  const char *msg = hk_last_error();
  if (st != HK_ERR_CONFIG || !strstr(msg, n1) || (n2 && !strstr(msg, n2)))
    fail_msg("status %d, message \"%s\", wanted \"%s\" and \"%s\"", st, msg, n1,
             n2 ? n2 : "");
  assert_null(t);
}

static void test_malformed(void **state) {
  (void)state;
  const char *hdr = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n";
  char buf[512];
  /* truncated matrix: the text stops, or a blank line / legend comes */
  snprintf(buf, sizeof buf,
           "%sGPU0\t X \tPIX\tSYS\t0-3\nGPU1\tPIX\t X \tSYS\t0-3\n", hdr);
  expect_error(buf, "line 3: the text ends after 2 of the matrix's 3 rows",
               "no row for GPU2");
  snprintf(buf, sizeof buf,
           "%sGPU0\t X \tPIX\tSYS\t0-3\n\nLegend:\n  X = Self\n", hdr);
  expect_error(buf, "line 3: the matrix ends after 1 of its 3 rows", "GPU1");
  /* unknown legend token */
  snprintf(buf, sizeof buf, "%sGPU0\t X \tPIX\tQPI\t0-3\n", hdr);
  expect_error(buf,
               "line 2: row GPU0, column GPU2: unknown legend token "
               "'QPI'",
               NULL);
  expect_error("GPU0 GPU1\nGPU0 X NV0\nGPU1 NV0 X\n",
               "line 2: row GPU0, column GPU1: unknown legend token 'NV0'",
               NULL);
  /* wrong column counts */
  snprintf(buf, sizeof buf, "%sGPU0\t X \tPIX\n", hdr);
  expect_error(buf,
               "line 2: row GPU0 has 2 entries where the header has 3 "
               "device columns",
               NULL);
  snprintf(buf, sizeof buf, "%sGPU0\t X \tPIX\t0-3\n", hdr);
  expect_error(buf,
               "line 2: row GPU0 has 2 device entries where the header "
               "has 3 (entry 3 is '0-3')",
               NULL);
  snprintf(buf, sizeof buf, "%sGPU0\t X \tPIX\tSYS\t0-3\t1\n", hdr);
  expect_error(buf,
               "line 2: row GPU0 has 2 values after its 3 device "
               "entries where the header has 1 affinity columns",
               NULL);
  /* the matrix must be consistent */
  expect_error("GPU0 GPU1\nGPU0 X NV2\nGPU1 NV1 X\n",
               "line 3: GPU1/GPU0 is NV1 but GPU0/GPU1 is NV2 (line 2)",
               "symmetric");
  expect_error("GPU0 GPU1\nGPU0 X X\nGPU1 X X\n",
               "line 2: row GPU0, column GPU1: X between two different", NULL);
  expect_error("GPU0 GPU1\nGPU0 PIX PIX\n",
               "line 2: row GPU0, column GPU0: a device's own entry must be X",
               NULL);
  expect_error("GPU0 NIC0\nGPU0 X NV2\nNIC0 NV2 X\n",
               "line 2: row GPU0, column NIC0: NVLink to a NIC", NULL);
  /* header and rows */
  expect_error("$ nvidia-smi topo -m\nGPU0\nGPU0 X\n",
               "line 1: expected the header of `nvidia-smi topo -m`", "'$'");
  expect_error("", "no header", NULL);
  expect_error("\n\n   \n", "line 3: no header", NULL);
  expect_error("GPU0 GPU2\n", "line 1: column 'GPU2' where GPU1 was expected",
               NULL);
  expect_error("GPU0 NIC0 GPU1\n", "line 1: GPU column 'GPU1' after a NIC",
               NULL);
  expect_error("GPU0 GPU1 CPU Affinity Bogus\n",
               "line 1: unknown column 'Bogus' after the affinity", NULL);
  expect_error("GPU0 GPU0\n", "line 1: column 'GPU0' appears twice", NULL);
  expect_error("GPU0 GPU1\nGPU1 X PIX\n",
               "line 2: row 'GPU1' where the row of GPU0 was expected", NULL);
  expect_error("GPU0 GPU1 CPU Affinity\nGPU0 X PIX 0-\n",
               "line 2: row GPU0, CPU Affinity: malformed value '0-'", NULL);
  expect_error("GPU0 GPU1\nGPU0 X PIX\nGPU1 PIX X\nGPU2 SYS SYS\n",
               "line 4: row 'GPU2' after the matrix: the header names 2 GPUs",
               NULL);
  expect_error("GPU0\nGPU0 X\x01\n", "line 2: control character 0x01", NULL);
  expect_error("\x1bXGPU0\n", "line 1: escape character not followed by", NULL);
}

static void test_never_reads_past_len(void **state) {
  (void)state;
  /* the buffer is not NUL-terminated: the row is cut in the middle */
  const char text[] = "GPU0 GPU1\nGPU0 X NV2\nGPU1 NV2 XYZ";
  hk_topo *t;
  hk_status st = hk_topo_parse_smi(text, sizeof text - 3, &t);
  assert_int_equal(st, HK_OK); /* "GPU1 NV2 X" */
  assert_pair(t, 0, 1, HK_PATH_NVL, 2);
  hk_topo_free(t);
}

static hk_topo *load_data(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/smi/%s", HK_TOPO_DATA_DIR, name);
  hk_topo *t = NULL;
  if (hk_topo_load_file(path, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  return t;
}

static void test_every_gathered_matrix_parses(void **state) {
  (void)state;
  const char *dirs[] = {HK_TOPO_DATA_DIR "/smi", HK_TOPO_DIR "/smi"};
  int n = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    DIR *dir = opendir(dirs[d]);
    if (!dir)
      continue;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
      if (de->d_name[0] == '.')
        continue;
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
      hk_topo *t = NULL;
      if (hk_topo_load_file(path, &t) != HK_OK)
        fail_msg("%s", hk_last_error());
      assert_true(t->n_gpus > 0);
      hk_topo_free(t);
      n++;
    }
    closedir(dir);
  }
  assert_true(n >= 4);
}

static void test_gathered_matrices(void **state) {
  (void)state;
  /* tab separated, "GPU NUMA ID" N/A after an empty column */
  hk_topo *t = load_data("b200-8gpu-nv18-no-nic.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 0);
  for (int b = 1; b < 8; b++)
    assert_pair(t, 0, b, HK_PATH_NVL, 18);
  assert_string_equal(t->node[t->gpu[4]].affinity, "48-95,144-191");
  hk_topo_free(t);
  /* NIC rows end in empty affinity columns */
  t = load_data("h200-8gpu-nv18-8nic.txt");
  assert_int_equal(t->n_gpus, 8);
  assert_int_equal(t->n_nics, 8);
  for (int g = 0; g < 8; g++) {
    assert_int_equal(t->nic_path[g][g].cls, HK_PATH_PIX);
    assert_int_equal(hk_topo_nearest_nic(t, g), g);
  }
  assert_string_equal(t->node[t->nic[5]].model, "mlx5_5"); /* legend */
  hk_topo_free(t);
  t = load_data("a100-sxm4-4gpu-nv4-mesh.txt");
  assert_int_equal(t->n_gpus, 4);
  assert_pair(t, 1, 3, HK_PATH_NVL, 4);
  hk_topo_free(t);
  t = load_data("rtx5090-2gpu-phb.txt");
  assert_pair(t, 0, 1, HK_PATH_PHB, 0);
  hk_topo_free(t);
}

/* A machine with 36 NICs (8x H20 with virtual functions, seen in a public
 * report whose stored copy glued columns together): more than the 32 hk
 * once allowed. */
static void test_many_nics(void **state) {
  (void)state;
  enum { G = 8, N = 36 };
  size_t cap = 64 * 1024, used = 0;
  char *m = malloc(cap);
  used += (size_t)snprintf(m + used, cap - used, " ");
  for (int d = 0; d < G + N; d++)
    used += (size_t)snprintf(m + used, cap - used, "\t%s%d",
                             d < G ? "GPU" : "NIC", d < G ? d : d - G);
  used +=
      (size_t)snprintf(m + used, cap - used, "\tCPU Affinity\tNUMA Affinity\n");
  for (int a = 0; a < G + N; a++) {
    used += (size_t)snprintf(m + used, cap - used, "%s%d",
                             a < G ? "GPU" : "NIC", a < G ? a : a - G);
    for (int b = 0; b < G + N; b++) {
      const char *tok = a == b ? " X " : (a < G && b < G) ? "NV18" : "SYS";
      if (a != b && (a >= G || b >= G) && (a % 4) == (b % 4))
        tok = "PIX";
      used += (size_t)snprintf(m + used, cap - used, "\t%s", tok);
    }
    if (a < G)
      used += (size_t)snprintf(m + used, cap - used, "\t0-55\t0");
    used += (size_t)snprintf(m + used, cap - used, "\n");
  }
  hk_topo *t = NULL;
  if (hk_topo_parse_smi(m, used, &t) != HK_OK)
    fail_msg("%s", hk_last_error());
  assert_int_equal(t->n_nics, N);
  assert_int_equal(t->nic_path[1][N - 1].cls, HK_PATH_SYS);
  hk_topo_free(t);
  free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nvlink_bridge),
      cmocka_unit_test(test_a100_roce_nics),
      cmocka_unit_test(test_a100_h100_aws),
      cmocka_unit_test(test_pcie_boxes),
      cmocka_unit_test(test_dgx1_hybrid_cube_mesh),
      cmocka_unit_test(test_escapes_tabs_crlf),
      cmocka_unit_test(test_real_h200_output),
      cmocka_unit_test(test_old_soc_token),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_never_reads_past_len),
      cmocka_unit_test(test_every_gathered_matrix_parses),
      cmocka_unit_test(test_gathered_matrices),
      cmocka_unit_test(test_many_nics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
