/*
 * test_hkrun_flags.c - horovodrun's and mpirun's flags on one host, end
 * to end through hkrun (the mpirun path is test_hosts_cli's):
 * - -x NAME=value and -x NAME reach every worker; the tunable flags
 *   become their HK_* variables;
 * - --output-filename DIR: one folder per rank (zero-padded), stdout and
 *   stderr files, the terminal still gets every line;
 * - --bind-to none|hwthread|core|socket|numa really binds each rank, read
 *   back from /proc/self/status's Cpus_allowed_list against this
 *   machine's own topology; banana is refused;
 * - --network-interface eth99 and HK_SOCKET_IFNAME=eth99 fail before
 *   anything starts (and hk_init fails on its own without hkrun), naming
 *   the interface and listing those that exist; lo works;
 * - --check-build, --autotune-gaussian-process-noise's refusal, a typo's
 *   suggestion, a misspelt HK_* variable's warning.
 */
#include <dlfcn.h>
#include <sched.h>
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

#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif
#ifndef W_TIMELINE
#error "W_TIMELINE must name a worker program that calls hk_init"
#endif

#define FAST_S 60.0

static void dump(const hkt_result *r) {
  fprintf(stderr,
          "--- exit %d signal %d timed_out %d\n--- stdout:\n%.4000s\n"
          "--- stderr:\n%.4000s\n",
          r->exit_code, r->signal, r->timed_out, r->out, r->err);
}

/* Runs argv; fails the test unless it exits with `code`. */
static void run_expect(char *const *argv, char *const *env, int code,
                       hkt_result *r) {
  hkt_run(argv, env, FAST_S, r);
  if (!r->exited || r->exit_code != code) {
    dump(r);
    fail_msg("%s ... exited %d, expected %d", argv[1], r->exit_code, code);
  }
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* ---- the environment ---- */

static void test_env_x_and_tunables(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "-x",
                  "HKT_FOO=bar baz",
                  "-x",
                  "HKT_SET",
                  "-x",
                  "HKT_NOT_SET_ANYWHERE",
                  "--start-timeout",
                  "17",
                  "--log-level",
                  "WARNING",
                  "--hierarchical-allreduce",
                  "--stall-check-warning-time-seconds",
                  "33",
                  "--disable-cache",
                  "--",
                  "sh",
                  "-c",
                  "echo \"$HK_RANK FOO=$HKT_FOO SET=$HKT_SET "
                  "T=$HK_START_TIMEOUT_S L=$HK_LOG_LEVEL "
                  "H=$HK_HIERARCHICAL_ALLREDUCE S=$HK_STALL_CHECK_TIME_S\"",
                  NULL};
  char *env[] = {"HKT_SET=from hkrun", NULL};
  hkt_result r;
  run_expect(argv, env, 0, &r);
  for (int rank = 0; rank < 2; rank++) {
    char want[256];
    snprintf(want, sizeof want,
             "[%d] %d FOO=bar baz SET=from hkrun T=17 L=warning H=1 S=33\n",
             rank, rank);
    if (!strstr(r.out, want)) {
      dump(&r);
      fail_msg("no line '%s'", want);
    }
  }
  assert_non_null(strstr(r.err, "hkrun: -x HKT_NOT_SET_ANYWHERE: "
                                "HKT_NOT_SET_ANYWHERE is not set here"));
  hkt_result_free(&r);
}

/* ---- --output-filename ---- */

static void test_output_filename(void **state) {
  (void)state;
  char dir[96];
  assert_int_equal(hkt_mkdtemp("hk-outfile.", dir, sizeof dir), 0);
  char out[128];
  snprintf(out, sizeof out, "%s/logs", dir);
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "11",
                  "--output-filename",
                  out,
                  "--",
                  "sh",
                  "-c",
                  "echo out $HK_RANK; echo err $HK_RANK >&2",
                  NULL};
  hkt_result r;
  run_expect(argv, NULL, 0, &r);
  /* the terminal still gets every line, prefixed */
  assert_non_null(strstr(r.out, "[7] out 7\n"));
  assert_non_null(strstr(r.err, "[10] err 10\n"));
  hkt_result_free(&r);
  /* DIR/rank.<r>/ zero-padded to the width of 10, unprefixed lines */
  for (int rank = 0; rank < 11; rank++) {
    char path[256], want[32];
    snprintf(path, sizeof path, "%s/rank.%02d/stdout", out, rank);
    snprintf(want, sizeof want, "out %d\n", rank);
    char *text = read_text(path);
    if (!text || strcmp(text, want) != 0)
      fail_msg("%s holds '%s', expected '%s'", path, text ? text : "(none)",
               want);
    snprintf(path, sizeof path, "%s/rank.%02d/stderr", out, rank);
    snprintf(want, sizeof want, "err %d\n", rank);
    text = read_text(path);
    if (!text || strcmp(text, want) != 0)
      fail_msg("%s holds '%s', expected '%s'", path, text ? text : "(none)",
               want);
  }
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* ---- --bind-to ---- */

/* A CPU set as a bit mask (CPUs 0..1023). */
typedef struct cpus {
  unsigned char bit[128];
} cpus;

static void cpus_add(cpus *c, int cpu) {
  if (cpu >= 0 && cpu < 1024)
    c->bit[cpu / 8] |= (unsigned char)(1u << (cpu % 8));
}

static int cpus_has(const cpus *c, int cpu) {
  return cpu >= 0 && cpu < 1024 && (c->bit[cpu / 8] >> (cpu % 8)) & 1;
}

static int cpus_count(const cpus *c) {
  int n = 0;
  for (int i = 0; i < 1024; i++)
    n += cpus_has(c, i);
  return n;
}

static int cpus_equal(const cpus *a, const cpus *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

/* Parses the kernel's list syntax ("0-3,8"). */
static cpus parse_list(const char *s) {
  cpus c;
  memset(&c, 0, sizeof c);
  while (*s && *s != '\n') {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s)
      break;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      s = end;
    }
    for (long i = a; i <= b; i++)
      cpus_add(&c, (int)i);
    if (*s == ',')
      s++;
  }
  return c;
}

/* The CPUs this test (so hkrun) may use. */
static cpus allowed(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  cpus c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 1024 && i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set))
      cpus_add(&c, i);
  return c;
}

static int read_int(const char *fmt, int cpu, int def) {
  char path[160];
  snprintf(path, sizeof path, fmt, cpu);
  char *t = read_text(path);
  return t ? atoi(t) : def;
}

/* CPUs of `all` on the same core (package, core_id) or package as cpu. */
static cpus same(const cpus *all, int cpu, int by_package) {
  const char *pkg = "/sys/devices/system/cpu/cpu%d/topology/"
                    "physical_package_id";
  const char *core = "/sys/devices/system/cpu/cpu%d/topology/core_id";
  cpus c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 1024; i++)
    if (cpus_has(all, i) && read_int(pkg, i, 0) == read_int(pkg, cpu, 0) &&
        (by_package || read_int(core, i, i) == read_int(core, cpu, cpu)))
      cpus_add(&c, i);
  return c;
}

/* Runs np ranks under --bind-to policy; each prints its allowed list. */
static void bound_lists(const char *policy, int np, cpus *got, char **err) {
  char npv[16];
  snprintf(npv, sizeof npv, "%d", np);
  char *argv[] = {
      HKRUN_PATH,  "-np",          npv,
      "--bind-to", (char *)policy, "--",
      "sh",        "-c",           "grep Cpus_allowed_list: /proc/self/status",
      NULL};
  hkt_result r;
  run_expect(argv, NULL, 0, &r);
  for (int rank = 0; rank < np; rank++) {
    char key[48];
    snprintf(key, sizeof key, "[%d] Cpus_allowed_list:", rank);
    const char *line = strstr(r.out, key);
    if (!line) {
      dump(&r);
      fail_msg("rank %d printed no Cpus_allowed_list", rank);
    }
    line += strlen(key);
    while (*line == ' ' || *line == '\t')
      line++;
    got[rank] = parse_list(line);
  }
  *err = strdup(r.err);
  hkt_result_free(&r);
}

static void test_bind_to(void **state) {
  (void)state;
  const cpus all = allowed();
  const int ncpu = cpus_count(&all);
  cpus got[8];
  char *err;

  /* none: every rank keeps hkrun's CPUs */
  bound_lists("none", 2, got, &err);
  for (int r = 0; r < 2; r++)
    assert_true(cpus_equal(&got[r], &all));
  free(err);

  /* core: one core each, different cores while there are enough */
  bound_lists("core", 2, got, &err);
  for (int r = 0; r < 2; r++) {
    int first = -1;
    for (int i = 0; i < 1024 && first < 0; i++)
      if (cpus_has(&got[r], i))
        first = i;
    assert_true(first >= 0 && cpus_has(&all, first));
    cpus core = same(&all, first, 0);
    if (!cpus_equal(&got[r], &core))
      fail_msg("--bind-to core: rank %d is not on exactly one core", r);
  }
  int cores = 0; /* distinct cores among hkrun's CPUs */
  for (int i = 0; i < 1024; i++)
    if (cpus_has(&all, i)) {
      int lowest = 1;
      cpus c = same(&all, i, 0);
      for (int k = 0; k < i; k++)
        lowest &= !cpus_has(&c, k);
      cores += lowest;
    }
  if (cores >= 2)
    assert_false(cpus_equal(&got[0], &got[1]));
  free(err);

  /* more ranks than cores: they wrap around, with a warning */
  if (cores <= 7) {
    bound_lists("core", cores + 1, got, &err);
    assert_true(cpus_equal(&got[cores], &got[0]));
    if (!strstr(err, "ranks share them"))
      fail_msg("no warning for %d ranks on %d cores:\n%s", cores + 1, cores,
               err);
    free(err);
  }

  /* hwthread: one CPU each */
  bound_lists("hwthread", 2, got, &err);
  for (int r = 0; r < 2; r++)
    assert_int_equal(cpus_count(&got[r]), 1);
  if (ncpu >= 2)
    assert_false(cpus_equal(&got[0], &got[1]));
  free(err);

  /* socket and numa: the whole socket / node of the rank's core (on a
   * one-socket, one-node machine: every CPU) */
  bound_lists("socket", 2, got, &err);
  for (int r = 0; r < 2; r++) {
    int first = -1;
    for (int i = 0; i < 1024 && first < 0; i++)
      if (cpus_has(&got[r], i))
        first = i;
    cpus pkg = same(&all, first, 1);
    assert_true(cpus_equal(&got[r], &pkg));
  }
  free(err);
  bound_lists("numa", 1, got, &err);
  assert_true(cpus_count(&got[0]) >= 1);
  free(err);

  /* anything else is refused, naming the valid values */
  char *argv[] = {HKRUN_PATH, "-np", "1", "--bind-to", "banana", "true", NULL};
  hkt_result r;
  run_expect(argv, NULL, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: --bind-to: 'banana' is not one of "
                                "none, hwthread, core, socket, numa\n"));
  hkt_result_free(&r);
}

/* ---- the network interface ---- */

static void test_network_interface(void **state) {
  (void)state;
  char dir[96];
  assert_int_equal(hkt_mkdtemp("hk-iface.", dir, sizeof dir), 0);
  char marker[128], script[200];
  snprintf(marker, sizeof marker, "%s/ran", dir);
  snprintf(script, sizeof script, "touch '%s'", marker);
  hkt_result r;
  /* the flag and the variable: refused before anything starts */
  char *flag[] = {HKRUN_PATH, "-np", "2",  "--network-interface",
                  "eth99",    "--",  "sh", "-c",
                  script,     NULL};
  run_expect(flag, NULL, 2, &r);
  if (!strstr(r.err, "hkrun: --network-interface: no network interface "
                     "'eth99' (interfaces here: lo 127.0.0.1")) {
    dump(&r);
    fail_msg("no message naming eth99 and the interfaces");
  }
  hkt_result_free(&r);
  char *var[] = {HKRUN_PATH, "-np", "2", "--", "sh", "-c", script, NULL};
  char *env[] = {"HK_SOCKET_IFNAME=eth99", NULL};
  run_expect(var, env, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: HK_SOCKET_IFNAME: no network "
                                "interface 'eth99' (interfaces here: lo "));
  hkt_result_free(&r);
  assert_int_equal(access(marker, F_OK), -1); /* nothing ran */
  /* a program started without hkrun: hk_init fails the same way */
  char *alone[] = {W_TIMELINE, NULL};
  run_expect(alone, env, 1, &r);
  assert_non_null(strstr(r.err, "HK_SOCKET_IFNAME: no network interface "
                                "'eth99' (interfaces here: lo "));
  hkt_result_free(&r);
  /* one that exists works, on one host too */
  char *lo[] = {HKRUN_PATH, "-np",      "2", "--network-interface",
                "lo",       W_TIMELINE, NULL};
  run_expect(lo, NULL, 0, &r);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* ---- what hk has, and what it does not ---- */

/* Writes text into dir/name (dir made if missing). */
static void put_file(const char *dir, const char *name, const char *text) {
  char path[4400];
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* --check-build's PyTorch box: python3 (the real one) must import torch
 * and hk.torch; a torch that cannot be imported (a stand-in package on
 * PYTHONPATH that raises) leaves it empty with python's reason, stand-ins
 * of both that import tick it. */
static void check_build_pytorch(void) {
  if (access("/usr/bin/python3", X_OK) != 0)
    return;
  char dir[4096], sub[4200], env_p[4300];
  assert_int_equal(hkt_mkdtemp("hk-check-build.", dir, sizeof dir), 0);
  snprintf(sub, sizeof sub, "%s/torch", dir);
  put_file(sub, "__init__.py", "raise ImportError('no torch here')\n");
  snprintf(env_p, sizeof env_p, "PYTHONPATH=%s", dir);
  char *env[] = {env_p, "PATH=/usr/bin:/bin", NULL}; /* the system's python3 */
  char *cb[] = {HKRUN_PATH, "--check-build", NULL};
  hkt_result r;
  run_expect(cb, env, 0, &r);
  if (!strstr(r.out, "    [ ] PyTorch: built: hk.torch (python/: import "
                     "hk.torch as hvd, over libhk); here: python3 "
                     "(/usr/bin/python3) cannot import torch: ImportError: "
                     "no torch here\n"))
    fail_msg("PyTorch ticked without torch:\n%s", r.out);
  hkt_result_free(&r);
  put_file(sub, "__init__.py", "__version__ = '9.9-test'\n");
  snprintf(sub, sizeof sub, "%s/hk", dir);
  put_file(sub, "__init__.py", "");
  snprintf(sub, sizeof sub, "%s/hk/torch", dir);
  put_file(sub, "__init__.py", "");
  run_expect(cb, env, 0, &r);
  char want[4400];
  snprintf(want, sizeof want,
           "    [X] PyTorch: built: hk.torch (python/: import hk.torch as "
           "hvd, over libhk); here: python3 (/usr/bin/python3) imports torch "
           "9.9-test and "
           "hk.torch (%s/hk/__init__.py)\n",
           dir);
  if (!strstr(r.out, want))
    fail_msg("'%s' not in:\n%s", want, r.out);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* A misspelt HK_* variable gets a warning naming the setting it is
 * close to; the job still runs (exit 0), and a setting spelt right,
 * another program's HK_LIBRARY, get none. */
static void test_misspelt_variable(void **state) {
  (void)state;
  hkt_result r;
  char *argv[] = {HKRUN_PATH, "-np", "1", "true", NULL};
  char *env[] = {"HK_FUSION_TRESHOLD=1", "HK_CYCLE_TIME_MS=2",
                 "HK_LIBRARY=libhk.so", NULL};
  run_expect(argv, env, 0, &r);
  if (hkt_count_lines(r.err, "hkrun warning: HK_FUSION_TRESHOLD is not an hk "
                             "setting (did you mean HK_FUSION_THRESHOLD?): "
                             "it is ignored") != 1 ||
      hkt_count_lines(r.err, "not an hk setting") != 1) {
    dump(&r);
    fail_msg("expected one warning, for HK_FUSION_TRESHOLD");
  }
  hkt_result_free(&r);
}

/* A misspelt name with more than letters, digits and '_' (here a blank
 * at its end, invisible otherwise) is quoted in the warning. */
static void test_misspelt_variable_quoted(void **state) {
  (void)state;
  hkt_result r;
  char *argv[] = {HKRUN_PATH, "-np", "1", "true", NULL};
  char *env[] = {"HK_TIMEOUT_S =2", "HK_FUSION-THRESHOLD=1", NULL};
  run_expect(argv, env, 0, &r);
  if (hkt_count_lines(r.err, "hkrun warning: 'HK_TIMEOUT_S ' is not an hk "
                             "setting (did you mean HK_TIMEOUT_S?): it is "
                             "ignored") != 1 ||
      hkt_count_lines(r.err,
                      "hkrun warning: 'HK_FUSION-THRESHOLD' is not an "
                      "hk setting (did you mean HK_FUSION_THRESHOLD?)") != 1 ||
      hkt_count_lines(r.err, "not an hk setting") != 2) {
    dump(&r);
    fail_msg("expected the two names quoted, once each");
  }
  hkt_result_free(&r);
}

static void test_check_build_and_refusals(void **state) {
  (void)state;
  hkt_result r;
  char *cb[] = {HKRUN_PATH, "--check-build", NULL};
  run_expect(cb, NULL, 0, &r);
  assert_non_null(strstr(r.out, "hk v"));
  assert_non_null(strstr(r.out, "Available Controllers:"));
  assert_non_null(strstr(r.out, "Available Tensor Operations:"));
  assert_non_null(strstr(r.out, "] MPI: "));
  assert_non_null(strstr(r.out, "] CUDA (device tensors): "));
  assert_non_null(strstr(r.out, "] NCCL: "));
  /* a box is ticked for what works here, not for what was built: CUDA
   * needs a driver that sees a GPU */
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    assert_non_null(strstr(r.out, "    [ ] CUDA (device tensors): built: "));
    /* (after the module's own state where it is not built: sanitizer
     * builds) */
    assert_non_null(strstr(r.out, "no CUDA driver (libcuda.so.1"));
    assert_non_null(strstr(r.out, "    [ ] NCCL: built: "));
  } else {
    dlclose(driver);
  }
  hkt_result_free(&r);
  check_build_pytorch();

  char *at[] = {HKRUN_PATH,
                "-np",
                "2",
                "--autotune",
                "--autotune-gaussian-process-noise",
                "0.8",
                "true",
                NULL};
  run_expect(at, NULL, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: --autotune-gaussian-process-noise: "
                                "hk's autotuner has no Gaussian process"));
  assert_non_null(strstr(r.err, "HK_AUTOTUNE_SPREAD"));
  assert_null(strstr(r.err, "unknown option"));
  hkt_result_free(&r);

  char *typo[] = {HKRUN_PATH, "-np",  "2", "--cycle-time-msec",
                  "3",        "true", NULL};
  run_expect(typo, NULL, 2, &r);
  assert_non_null(strstr(r.err, "hkrun: unknown option '--cycle-time-msec' "
                                "(did you mean --cycle-time-ms?)\n"));
  hkt_result_free(&r);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_env_x_and_tunables),
      cmocka_unit_test(test_output_filename),
      cmocka_unit_test(test_bind_to),
      cmocka_unit_test(test_network_interface),
      cmocka_unit_test(test_check_build_and_refusals),
      cmocka_unit_test(test_misspelt_variable),
      cmocka_unit_test(test_misspelt_variable_quoted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
