/*
 * test_mpi_exchange.c - hk's bootstrap pieces under a real Open MPI
 * mpirun on this machine: placement from OMPI_COMM_WORLD_*, one
 * MPI_Allgather of every rank's record (worker/mpi_exchange.h), the
 * per-host layout from host names, MPI initialised and finalised by hk
 * only when the program did not do it; then the same through
 * `hkrun --mpi`, a failing rank's status coming back through it, and an
 * unknown HK_SOCKET_IFNAME reported with the interfaces that exist.
 * The worker is workers/w_mpi_exchange.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif
#ifndef W_MPI_EXCHANGE
#error "W_MPI_EXCHANGE must name the worker"
#endif

#define MPI_S 60.0 /* a start of Open MPI takes about a second */

/* Open MPI's own allocations are not ours to report under ASan. */
static char *const env[] = {"ASAN_OPTIONS=detect_leaks=0", NULL};

static void dump(const hkt_result *r) {
  fprintf(stderr,
          "--- exit %d signal %d timed_out %d\n--- stdout:\n%.4000s\n"
          "--- stderr:\n%.4000s\n",
          r->exit_code, r->signal, r->timed_out, r->out, r->err);
}

/* Runs argv and asserts exit status `code`. */
static void run(char **argv, int code, hkt_result *r) {
  hkt_run(argv, env, MPI_S, r);
  if (r->timed_out || !r->exited || r->exit_code != code) {
    dump(r);
    fail_msg("expected exit status %d", code);
  }
}

/* Asserts the "rank R of 3 ... ok" line of every rank: local R/3, one
 * host, owned as given. */
static void assert_ranks(const hkt_result *r, int owned) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  for (int k = 0; k < 3; k++) {
    char line[512];
    snprintf(line, sizeof line,
             "rank %d of 3 local %d/3 cross 0/1 host %s addr 127.0.0.1 owned "
             "%d ok",
             k, k, host, owned);
    if (hkt_count_lines(r->out, line) != 1) {
      dump(r);
      fail_msg("missing: %s", line);
    }
  }
  assert_int_equal(hkt_count_lines(r->out, " ok"), 3);
}

static void assert_nothing_left(void) {
  pid_t left[8];
  int n = hkt_orphans(left, 8);
  for (int i = 0; i < n && i < 8; i++)
    if (hkt_wait_gone(left[i], 5.0) != 0) {
      hkt_kill_orphans();
      fail_msg("%d process(es) left behind, e.g. pid %d", n, (int)left[i]);
    }
}

/* Fills argv with mpirun's command for mode (and arg). */
static void mpirun_argv(char **argv, const char *mode, const char *arg) {
  int n = 0;
  argv[n++] = "mpirun";
  if (geteuid() == 0)
    argv[n++] = "--allow-run-as-root";
  argv[n++] = "--oversubscribe";
  argv[n++] = "-np";
  argv[n++] = "3";
  argv[n++] = W_MPI_EXCHANGE;
  argv[n++] = (char *)mode;
  if (arg)
    argv[n++] = (char *)arg;
  argv[n] = NULL;
}

static void test_hk_initialises_mpi(void **state) {
  (void)state;
  char *argv[12];
  mpirun_argv(argv, "own", NULL);
  hkt_result r;
  run(argv, 0, &r);
  assert_ranks(&r, 1);
  hkt_result_free(&r);
  assert_nothing_left();
}

static void test_program_initialises_mpi(void **state) {
  (void)state;
  char *argv[12];
  mpirun_argv(argv, "app", NULL);
  hkt_result r;
  run(argv, 0, &r);
  assert_ranks(&r, 0);
  hkt_result_free(&r);
}

static void test_wrong_size_refused(void **state) {
  (void)state;
  char *argv[12];
  mpirun_argv(argv, "mismatch", NULL);
  hkt_result r;
  run(argv, 0, &r);
  assert_ranks(&r, 1);
  hkt_result_free(&r);
}

static void test_through_hkrun(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,        "--mpi",        "-np", "3",
                  "--no-tag-output", W_MPI_EXCHANGE, "own", NULL};
  hkt_result r;
  run(argv, 0, &r);
  assert_ranks(&r, 1);
  hkt_result_free(&r);
  assert_nothing_left();
}

/* Rank 1 exits 3 after the exchange: mpirun, and so hkrun, exits 3. */
static void test_failure_through_hkrun(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,     "--mpi", "-np", "3", "--no-tag-output",
                  W_MPI_EXCHANGE, "fail",  "1",   NULL};
  hkt_result r;
  run(argv, 3, &r);
  hkt_result_free(&r);
  assert_nothing_left();
}

/* Case C8's part here: HK_SOCKET_IFNAME names no interface. Every rank
 * fails at once, saying which interfaces exist; hkrun exits non-zero. */
static void test_unknown_interface(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH,        "--mpi",        "-np", "2",
                  "--no-tag-output", W_MPI_EXCHANGE, "own", NULL};
  char *bad_env[] = {"ASAN_OPTIONS=detect_leaks=0",
                     "HK_SOCKET_IFNAME=doesnotexist0", NULL};
  hkt_result r;
  hkt_run(argv, bad_env, MPI_S, &r);
  if (r.timed_out || !r.exited || r.exit_code != 1) {
    dump(&r);
    fail_msg("expected exit status 1");
  }
  for (int k = 0; k < 2; k++) {
    char want[160];
    snprintf(want, sizeof want,
             "rank %d: HK_SOCKET_IFNAME: no network interface "
             "'doesnotexist0' (interfaces here: lo 127.0.0.1",
             k);
    if (!strstr(r.err, want)) {
      /* mpirun may stop the second rank before it reports */
      if (k == 1)
        continue;
      dump(&r);
      fail_msg("missing: %s", want);
    }
  }
  assert_true(r.elapsed_s < 30.0);
  hkt_result_free(&r);
  assert_nothing_left();
}

int main(void) {
  if (hkt_setup() != 0)
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hk_initialises_mpi),
      cmocka_unit_test(test_program_initialises_mpi),
      cmocka_unit_test(test_wrong_size_refused),
      cmocka_unit_test(test_through_hkrun),
      cmocka_unit_test(test_failure_through_hkrun),
      cmocka_unit_test(test_unknown_interface),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hkt_kill_orphans();
  return failed;
}
