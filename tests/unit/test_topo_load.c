/* Unit tests of loading layouts: format sniffing; EVERY file in
 * tests/data/topologies/given and in configs/ loads (graph files are recognised
 * and read as rings instead); HK_TOPO_FILE picks the file and reports
 * errors with its name; NVML's absence is a clear HK_ERR_SYSTEM. */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void test_sniff(void **state) {
  (void)state;
  static const struct {
    const char *text;
    hk_topo_format fmt;
  } cases[] = {
      {"\tGPU0\tGPU1\n", HK_TOPO_FMT_SMI},
      {"", HK_TOPO_FMT_SMI},
      {"  \n<system version=\"1\">", HK_TOPO_FMT_NCCLXML},
      {"<?xml version=\"1.0\"?>\n<!-- <graphs> -->\n<system>",
       HK_TOPO_FMT_NCCLXML},
      {"\xEF\xBB\xBF<graphs version=\"1\">", HK_TOPO_FMT_NCCLGRAPH},
      {"<!DOCTYPE x><graphs>", HK_TOPO_FMT_NCCLGRAPH},
      {"<graphsx>", HK_TOPO_FMT_NCCLXML},
      {"<", HK_TOPO_FMT_NCCLXML},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_int_equal(hk_topo_sniff(cases[i].text, strlen(cases[i].text)),
                     cases[i].fmt);
}

/* Loads every regular file of dir; returns how many. */
static int load_all(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    fail_msg("cannot open %s", dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
      continue;
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".md") == 0)
      continue; /* configs/README.md */
    if (len > 4 && strcmp(e->d_name + len - 4, ".tsv") == 0)
      continue; /* configs/prices.tsv: hkplan's price table */
    char *text;
    assert_int_equal(hk_topo_read_file(path, &text, &len), HK_OK);
    hk_topo *t = NULL;
    if (hk_topo_sniff(text, len) == HK_TOPO_FMT_NCCLGRAPH) {
      hk_ncclgraph g;
      if (hk_ncclgraph_parse(text, len, &g) != HK_OK)
        fail_msg("%s: %s", path, hk_last_error());
      assert_true(g.n_channels >= 1);
      assert_int_equal(hk_topo_load_file(path, &t), HK_ERR_CONFIG);
      assert_non_null(strstr(hk_last_error(), "NCCL graph file"));
    } else {
      if (hk_topo_load_file(path, &t) != HK_OK)
        fail_msg("%s", hk_last_error());
      assert_true(t->n_gpus > 0 || t->gpu_slots > 0);
      if (t->n_gpus > 0) { /* and a ring exists over all its GPUs */
        int order[HK_TOPO_MAX_GPUS];
        if (hk_topo_ring_order(t, t->n_gpus, order) != HK_OK)
          fail_msg("%s: %s", path, hk_last_error());
      }
      hk_topo_free(t);
    }
    free(text);
    n++;
  }
  closedir(d);
  return n;
}

static void test_every_shared_file(void **state) {
  (void)state;
  need_shared();
  /* 9 nvidia-smi matrices and 8 NCCL XML files at the time of writing;
   * files added later are loaded too */
  assert_true(load_all(HK_TOPO_DIR "/smi") >= 9);
  assert_true(load_all(HK_TOPO_DIR "/ncclxml") >= 8);
}

static void test_every_config(void **state) {
  (void)state;
  assert_int_equal(load_all(HK_CONFIGS_DIR), 4);
}

static void test_hk_topo_file(void **state) {
  (void)state;
  need_shared();
  const char *path =
      HK_TOPO_DIR "/smi/v100-sxm2-8gpu-dgx1-hybrid-cube-mesh-1nic.txt";
  hk_topo *t;
  assert_int_equal(hk_topo_load_setting(path, &t), HK_OK);
  assert_int_equal(t->n_gpus, 8);
  int order[8];
  assert_int_equal(hk_topo_ring_order(t, 8, order), HK_OK);
  static const int want[8] = {0, 3, 2, 1, 5, 6, 7, 4};
  assert_memory_equal(order, want, sizeof want);
  hk_topo_free(t);

  assert_int_equal(hk_topo_load_setting("/nonexistent/hk-topo.txt", &t),
                   HK_ERR_SYSTEM);
  assert_null(t);
  assert_non_null(strstr(hk_last_error(),
                         "HK_TOPO_FILE=/nonexistent/hk-topo.txt: cannot open"));

  char tmp[96];
  snprintf(tmp, sizeof tmp, "%s/hk-topo-test-XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR")
                                                          : "/tmp");
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  const char bad[] = "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\tXX\n";
  assert_int_equal(write(fd, bad, sizeof bad - 1), (ssize_t)(sizeof bad - 1));
  close(fd);
  assert_int_equal(hk_topo_load_setting(tmp, &t), HK_ERR_CONFIG);
  char want_msg[256];
  snprintf(want_msg, sizeof want_msg,
           "HK_TOPO_FILE=%s: line 3: row GPU1, column GPU1: unknown legend "
           "token 'XX'",
           tmp);
  if (!strstr(hk_last_error(), want_msg))
    fail_msg("%s", hk_last_error());
  unlink(tmp);
}

static void test_nvml_absent(void **state) {
  (void)state;
  hk_topo *t = (hk_topo *)0x1;
  assert_int_equal(hk_topo_load_nvml("libhk-no-such-nvml.so.1", &t),
                   HK_ERR_SYSTEM);
  assert_null(t);
  assert_non_null(
      strstr(hk_last_error(), "cannot load NVML: libhk-no-such-nvml.so.1: "));
  /* what a job sees without HK_TOPO_FILE: NVML, or why not */
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  hk_status st = hk_topo_load_setting("", &t);
  if (!lib) {
    assert_int_equal(st, HK_ERR_SYSTEM);
    assert_non_null(strstr(hk_last_error(),
                           "no layout: HK_TOPO_FILE is not set and NVML is "
                           "unavailable: cannot load NVML: "
                           "libnvidia-ml.so.1: "));
  } else {
    dlclose(lib);
    /* a driver is installed: either its GPUs, or why NVML gave none */
    if (st == HK_OK) {
      assert_true(t->n_gpus >= 1);
      assert_string_equal(t->source, "nvml");
      hk_topo_free(t);
    } else {
      assert_int_equal(st, HK_ERR_SYSTEM);
      assert_non_null(strstr(hk_last_error(), "no layout: "));
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sniff),
      cmocka_unit_test(test_every_shared_file),
      cmocka_unit_test(test_every_config),
      cmocka_unit_test(test_hk_topo_file),
      cmocka_unit_test(test_nvml_absent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
