/*
 * test_burst - a burst of tensors never deadlocks the control path
 * (worker/background.c: a round's REQUESTS is bounded so that it fits the
 * control socket's buffer; worker program: workers/w_burst.c):
 *  - 100 000 distinct 4-byte allreduces submitted at once on every rank,
 *  - 10 000 with 480-byte names,
 * at np 2 and 4, over shared memory and over TCP, every result checked
 * against the serial sum. HK_TIMEOUT_S is short (10 s), so a deadlock
 * (a rank blocked sending its requests while rank 0 waits for it inside a
 * collective) fails within seconds instead of hanging for a minute.
 *
 * ctest runs each of the eight combinations once (about 20 s in all);
 * `test_burst all N` runs each N times and prints the counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define W_BURST WORKER_DIR "/w_burst"

typedef struct burst_case {
  int np;
  const char *transport; /* HK_INTRA_TRANSPORT */
  int n;                 /* tensors */
  int name_len;          /* 0: short names */
} burst_case;

/* Runs one case; 0 when every rank checked every tensor, else -1 with the
 * reason on stderr. */
static int run_case(const burst_case *c) {
  char np[16], cmd[512], tr[64];
  snprintf(np, sizeof np, "%d", c->np);
  snprintf(cmd, sizeof cmd, "exec %s %d %d", W_BURST, c->n, c->name_len);
  snprintf(tr, sizeof tr, "HK_INTRA_TRANSPORT=%s", c->transport);
  char *env[] = {tr, "HK_TIMEOUT_S=10", NULL};
  char *argv[] = {HKRUN_PATH, "-np", np, "sh", "-c", cmd, NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 120, &r);
  char want[64];
  snprintf(want, sizeof want, "burst ok %d", c->n);
  int ok = rc == 0 && r.exit_code == 0 && hkt_count_lines(r.out, want) == c->np;
  if (!ok)
    fprintf(stderr,
            "w_burst %d tensors (names of %d bytes) at np %d over %s: rc=%d "
            "exit=%d after %.1f s\nstdout:\n%.2000s\nstderr:\n%.3000s\n",
            c->n, c->name_len, c->np, c->transport, rc, r.exit_code,
            r.elapsed_s, r.out, r.err);
  else
    print_message("%d tensors (names of %d bytes) at np %d over %s: %.1f s\n",
                  c->n, c->name_len, c->np, c->transport, r.elapsed_s);
  hkt_result_free(&r);
  return ok ? 0 : -1;
}

static void test_case(void **state) { assert_int_equal(run_case(*state), 0); }

static const burst_case all[] = {
    {2, "shm", 100000, 0},  {2, "tcp", 100000, 0},  {4, "shm", 100000, 0},
    {4, "tcp", 100000, 0},  {2, "shm", 10000, 480}, {2, "tcp", 10000, 480},
    {4, "shm", 10000, 480}, {4, "tcp", 10000, 480},
};

/* `test_burst all N`: every case N times, counting the failures. */
static int repeat(int times) {
  int bad = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    int failed = 0;
    for (int k = 0; k < times; k++)
      failed += run_case(&all[i]) != 0;
    printf("burst %d tensors (names of %d bytes) np %d %s: %d of %d runs "
           "failed\n",
           all[i].n, all[i].name_len, all[i].np, all[i].transport, failed,
           times);
    fflush(stdout);
    bad += failed;
  }
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  hkt_setup();
  if (argc == 3 && !strcmp(argv[1], "all"))
    return repeat(atoi(argv[2]));
  const struct CMUnitTest tests[] = {
      HKT_CASE_TEST(short_names_np2_shm, test_case, burst_case, 2, "shm",
                    100000, 0),
      HKT_CASE_TEST(short_names_np2_tcp, test_case, burst_case, 2, "tcp",
                    100000, 0),
      HKT_CASE_TEST(short_names_np4_shm, test_case, burst_case, 4, "shm",
                    100000, 0),
      HKT_CASE_TEST(short_names_np4_tcp, test_case, burst_case, 4, "tcp",
                    100000, 0),
      HKT_CASE_TEST(long_names_np2_shm, test_case, burst_case, 2, "shm", 10000,
                    480),
      HKT_CASE_TEST(long_names_np2_tcp, test_case, burst_case, 2, "tcp", 10000,
                    480),
      HKT_CASE_TEST(long_names_np4_shm, test_case, burst_case, 4, "shm", 10000,
                    480),
      HKT_CASE_TEST(long_names_np4_tcp, test_case, burst_case, 4, "tcp", 10000,
                    480),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
