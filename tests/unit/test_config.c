/* Unit tests of the tunables table (common/config.h) for the links of
 * issue 5: HK_SOCKETS_PER_PEER (1..8, default 1) and HK_CROSS_TRANSPORT
 * (tcp|mpi, default tcp), with errors that name the variable, the value
 * and what is accepted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/log.h"
#include "common/status.h"

static void test_defaults(void **state) {
  (void)state;
  unsetenv("HK_SOCKETS_PER_PEER");
  unsetenv("HK_CROSS_TRANSPORT");
  hk_config cfg;
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.sockets_per_peer, 1);
  assert_int_equal(cfg.cross_transport, HK_CROSS_TCP);
}

static void test_sockets_per_peer(void **state) {
  (void)state;
  hk_config cfg;
  setenv("HK_SOCKETS_PER_PEER", "8", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.sockets_per_peer, 8);
  const char *bad[] = {"0", "9", "-1"};
  for (int i = 0; i < 3; i++) {
    setenv("HK_SOCKETS_PER_PEER", bad[i], 1);
    assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
    char want[96];
    snprintf(want, sizeof want,
             "HK_SOCKETS_PER_PEER=%s is out of range [1, 8] sockets", bad[i]);
    assert_string_equal(hk_last_error(), want);
  }
  /* written as the table's numbers are: decimal, nothing before it, a
   * size whole */
  const struct {
    const char *name, *value, *want;
  } odd[] = {
      {"HK_TIMEOUT_S", "0x10", "HK_TIMEOUT_S='0x10' is not a number"},
      {"HK_TIMEOUT_S", " 5", "HK_TIMEOUT_S=' 5' is not a number"},
      {"HK_RING_CHUNK_BYTES", "4096.5",
       "HK_RING_CHUNK_BYTES=4096.5 is not a whole number of bytes"},
  };
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    setenv(odd[i].name, odd[i].value, 1);
    assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
    if (!strstr(hk_last_error(), odd[i].want))
      fail_msg("'%s' not in '%s'", odd[i].want, hk_last_error());
    unsetenv(odd[i].name);
  }
  setenv("HK_SOCKETS_PER_PEER", "three", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "HK_SOCKETS_PER_PEER='three' is not a number (unit: "
                      "sockets)");
  unsetenv("HK_SOCKETS_PER_PEER");
}

/* A number a double cannot hold is too large (or small), not "not a
 * number". */
static void test_numbers_beyond_double(void **state) {
  (void)state;
  hk_config cfg;
  setenv("HK_NET_GBIT", "1e400", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(), "HK_NET_GBIT=1e400 is too large: the "
                                       "range is [0.001, 100000] Gbit/s");
  setenv("HK_NET_GBIT", "-1e400", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_NET_GBIT=-1e400 is too large"));
  setenv("HK_NET_GBIT", "1e-400", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_NET_GBIT=1e-400 is too small"));
  setenv("HK_NET_GBIT", "inf", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "is too large"));
  setenv("HK_NET_GBIT", "nan", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "is not a number"));
  unsetenv("HK_NET_GBIT");
}

static void test_cross_transport(void **state) {
  (void)state;
  hk_config cfg;
  setenv("HK_CROSS_TRANSPORT", "mpi", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.cross_transport, HK_CROSS_MPI);
  setenv("HK_CROSS_TRANSPORT", "tcp", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.cross_transport, HK_CROSS_TCP);
  /* case is ignored, as for every word-valued setting */
  setenv("HK_CROSS_TRANSPORT", "MPI", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.cross_transport, HK_CROSS_MPI);
  setenv("HK_CROSS_TRANSPORT", "Tcp", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.cross_transport, HK_CROSS_TCP);
  setenv("HK_CROSS_TRANSPORT", "MPI ", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "HK_CROSS_TRANSPORT='MPI ' is not one of tcp, mpi");
  unsetenv("HK_CROSS_TRANSPORT");
}

/* The monitor's settings (issue 15): off by default; each of HK_MONITOR,
 * HK_MONITOR_REPORT_S, HK_METRICS_FILE and HK_MONITOR_LIVE turns it on;
 * bad values are named. */
static void test_monitor_settings(void **state) {
  (void)state;
  hk_config c;
  assert_int_equal(hk_config_load(&c), HK_OK);
  assert_int_equal(hk_config_monitoring(&c), 0);
  assert_int_equal(c.monitor_window, 100);
  assert_true(c.telemetry_s == 1 && c.metrics_interval_s == 5);
  assert_string_equal(c.nvml_library, "");
  const char *on[][2] = {{"HK_MONITOR", "1"},
                         {"HK_MONITOR_REPORT_S", "30"},
                         {"HK_METRICS_FILE", "job.prom"},
                         {"HK_MONITOR_LIVE", "1"}};
  for (int i = 0; i < 4; i++) {
    setenv(on[i][0], on[i][1], 1);
    assert_int_equal(hk_config_load(&c), HK_OK);
    assert_int_equal(hk_config_monitoring(&c), 1);
    unsetenv(on[i][0]);
  }
  setenv("HK_NVML_LIBRARY", "libstub-nvml.so", 1);
  assert_int_equal(hk_config_load(&c), HK_OK);
  assert_string_equal(c.nvml_library, "libstub-nvml.so");
  unsetenv("HK_NVML_LIBRARY");
  setenv("HK_MONITOR", "2", 1);
  assert_int_equal(hk_config_load(&c), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_MONITOR='2'"));
  unsetenv("HK_MONITOR");
  setenv("HK_MONITOR_WINDOW", "0", 1);
  assert_int_equal(hk_config_load(&c), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_MONITOR_WINDOW=0"));
  unsetenv("HK_MONITOR_WINDOW");
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  setenv("HK_METRICS_FILE", big, 1);
  assert_int_equal(hk_config_load(&c), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_METRICS_FILE is longer"));
  unsetenv("HK_METRICS_FILE");
}

/* The string settings: unset is "", the longest that fits is kept whole,
 * one byte more is an error naming the variable and its limit. */
#define FIELD(f) offsetof(hk_config, f), sizeof(((hk_config *)0)->f)
static void test_string_settings(void **state) {
  (void)state;
  static const struct {
    const char *var;
    size_t off, cap;
  } vars[] = {{"HK_TIMELINE", FIELD(timeline)},
              {"HK_METRICS_FILE", FIELD(metrics_file)},
              {"HK_NVML_LIBRARY", FIELD(nvml_library)},
              {"HK_FLIGHT_DIR", FIELD(flight_dir)},
              {"HK_SOCKET_IFNAME", FIELD(socket_ifname)},
              {"HK_TOPO_FILE", FIELD(topo_file)}};
  static char value[4097];
  hk_config cfg;
  const char *field = (const char *)&cfg;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    unsetenv(vars[i].var);
    assert_int_equal(hk_config_load(&cfg), HK_OK);
    assert_string_equal(field + vars[i].off, "");
    assert_true(vars[i].cap < sizeof value);
    memset(value, 'a', vars[i].cap - 1);
    value[vars[i].cap - 1] = '\0';
    setenv(vars[i].var, value, 1);
    assert_int_equal(hk_config_load(&cfg), HK_OK);
    assert_string_equal(field + vars[i].off, value);
    value[vars[i].cap - 1] = 'a';
    value[vars[i].cap] = '\0';
    setenv(vars[i].var, value, 1);
    assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
    char want[96];
    snprintf(want, sizeof want, "%s is longer than %zu bytes", vars[i].var,
             vars[i].cap - 1);
    assert_string_equal(hk_last_error(), want);
    unsetenv(vars[i].var);
  }
}
#undef FIELD

/* HK_PROCESS_SETS: sets by ';', ranks by ',', blanks around both, read
 * back one set at a time as written; anything else names the bad text. */
static void test_process_sets(void **state) {
  (void)state;
  hk_config cfg;
  unsetenv("HK_PROCESS_SETS");
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_string_equal(cfg.process_sets, "");
  setenv("HK_PROCESS_SETS", "3,1; 0 ,2 ;2;", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  const int want[3][2] = {{3, 1}, {0, 2}, {2, -1}};
  const char *pos = cfg.process_sets;
  int ranks[4], n;
  hk_status st;
  for (int k = 0; k < 3; k++) {
    assert_int_equal(hk_config_next_set(&pos, ranks, 4, &n, &st), 1);
    assert_int_equal(st, HK_OK);
    assert_int_equal(n, want[k][1] < 0 ? 1 : 2);
    for (int i = 0; i < n; i++)
      assert_int_equal(ranks[i], want[k][i]);
  }
  assert_int_equal(hk_config_next_set(&pos, ranks, 4, &n, &st), 0);
  assert_int_equal(st, HK_OK);
  pos = "0,1,2";
  assert_int_equal(hk_config_next_set(&pos, ranks, 2, &n, &st), 0);
  assert_int_equal(st, HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "lists more ranks than the job"));
  static const struct {
    const char *value, *error;
  } bad[] = {
      {"0,,1", "HK_PROCESS_SETS: ',1' is not a rank"},
      {";0", "HK_PROCESS_SETS: ';0' is not a rank"},
      {"0;x", "HK_PROCESS_SETS: 'x' is not a rank"},
      {"0 1", "HK_PROCESS_SETS: '1' is not a rank"},
      {"-1", "HK_PROCESS_SETS: '-1' is not a rank"},
      {"0,65536", "HK_PROCESS_SETS: '65536' is too large a rank"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("HK_PROCESS_SETS", bad[i].value, 1);
    assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
    if (!strstr(hk_last_error(), bad[i].error))
      fail_msg("HK_PROCESS_SETS='%s': '%s', want '%s'", bad[i].value,
               hk_last_error(), bad[i].error);
  }
  unsetenv("HK_PROCESS_SETS");
}

/* HK_ALLREDUCE_ALGO: the host allreduce every rank is forced to run, as
 * the word (lower case; "" for auto) collectives/allreduce.h looks up. */
static void test_allreduce_algo(void **state) {
  (void)state;
  hk_config cfg;
  unsetenv("HK_ALLREDUCE_ALGO");
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_string_equal(cfg.allreduce_algo, "");
  static const struct {
    const char *v, *a;
  } ok[] = {{"ring", "ring"},
            {"hierarchical", "hierarchical"},
            {"Rd", "rd"},
            {"auto", ""},
            {"", ""}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    setenv("HK_ALLREDUCE_ALGO", ok[i].v, 1);
    assert_int_equal(hk_config_load(&cfg), HK_OK);
    assert_string_equal(cfg.allreduce_algo, ok[i].a);
  }
  setenv("HK_ALLREDUCE_ALGO", "butterfly", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HK_ALLREDUCE_ALGO=\"butterfly\": "
                                          "expected ring, hierarchical, rd or "
                                          "auto"));
  /* the error never offers what it then refuses */
  assert_null(strstr(hk_last_error(), "tree"));
  setenv("HK_ALLREDUCE_ALGO", "TREE", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "no tree"));
  assert_non_null(strstr(hk_last_error(), "expected ring, hierarchical, rd"));
  unsetenv("HK_ALLREDUCE_ALGO");
}

/* Horovod's variables stand in for hk's where those are unset (a Horovod
 * job's scripts set them): hk's win, and a bad value is named as set. */
static void test_horovod_aliases(void **state) {
  (void)state;
  hk_config cfg;
  static const char *const vars[] = {"HK_FUSION_THRESHOLD",
                                     "HOROVOD_FUSION_THRESHOLD",
                                     "HK_LOG_LEVEL",
                                     "HOROVOD_LOG_LEVEL",
                                     "HOROVOD_STALL_CHECK_DISABLE",
                                     "HK_HIERARCHICAL_ALLREDUCE",
                                     "HOROVOD_HIERARCHICAL_ALLREDUCE",
                                     "HOROVOD_TIMELINE",
                                     "HOROVOD_CYCLE_TIME"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
  setenv("HOROVOD_FUSION_THRESHOLD", "4096", 1);
  setenv("HOROVOD_LOG_LEVEL", "TRACE", 1);
  setenv("HOROVOD_STALL_CHECK_DISABLE", "1", 1);
  setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1", 1);
  setenv("HOROVOD_TIMELINE", "/nonexistent/tl.json", 1);
  setenv("HOROVOD_CYCLE_TIME", "2.5", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.fusion_threshold, 4096);
  assert_int_equal(cfg.log_level, HK_LOG_DEBUG);
  assert_true(cfg.stall_check_s == 0.0);
  assert_int_equal(cfg.hierarchical, 1);
  assert_string_equal(cfg.timeline, "/nonexistent/tl.json");
  assert_true(cfg.cycle_time_ms == 2.5);
  /* hk's own variable wins */
  setenv("HK_FUSION_THRESHOLD", "8192", 1);
  setenv("HK_HIERARCHICAL_ALLREDUCE", "0", 1);
  assert_int_equal(hk_config_load(&cfg), HK_OK);
  assert_int_equal(cfg.fusion_threshold, 8192);
  assert_int_equal(cfg.hierarchical, 0);
  /* a bad value is named as the variable that held it */
  unsetenv("HK_FUSION_THRESHOLD");
  setenv("HOROVOD_FUSION_THRESHOLD", "lots", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "HOROVOD_FUSION_THRESHOLD='lots'"));
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  setenv("HOROVOD_STALL_CHECK_DISABLE", "yes", 1);
  assert_int_equal(hk_config_load(&cfg), HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "HOROVOD_STALL_CHECK_DISABLE='yes' is not 0 or 1");
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
}

/* A misspelt HK_* variable names the setting it is close to; settings,
 * other prefixes and far names give NULL. */
static void test_near_miss(void **state) {
  (void)state;
  assert_string_equal(hk_config_near_miss("HK_FUSION_TRESHOLD"),
                      "HK_FUSION_THRESHOLD");
  assert_string_equal(hk_config_near_miss("HK_CYCLE_TIMES"),
                      "HK_CYCLE_TIME_MS");
  assert_string_equal(hk_config_near_miss("HK_TIMOUT_S"), "HK_TIMEOUT_S");
  assert_null(hk_config_near_miss("HK_FUSION_THRESHOLD")); /* a setting */
  assert_null(hk_config_near_miss("HK_LIBRARY"));          /* hk.torch's, far */
  assert_null(hk_config_near_miss("HK_MPI")); /* short: not close */
  assert_null(hk_config_near_miss("HOROVOD_FUSION_TRESHOLD"));
  assert_null(hk_config_near_miss(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_sockets_per_peer),
      cmocka_unit_test(test_numbers_beyond_double),
      cmocka_unit_test(test_cross_transport),
      cmocka_unit_test(test_monitor_settings),
      cmocka_unit_test(test_string_settings),
      cmocka_unit_test(test_allreduce_algo),
      cmocka_unit_test(test_process_sets),
      cmocka_unit_test(test_horovod_aliases),
      cmocka_unit_test(test_near_miss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
