/*
 * test_runtime - the worker runtime end to end: real worker processes
 * (tests/integration/workers) started by hkrun, checked for their results,
 * their exit statuses, hkrun's exit status and timing, and for processes
 * left behind.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define W(name) WORKER_DIR "/" name

static void run_ok_env(char *const argv[], char *const env[],
                       const char *ok_line, int n_ok, double timeout) {
  hkt_result r;
  int rc = hkt_run(argv, env, timeout, &r);
  if (rc != 0 || !r.exited || r.exit_code != 0 ||
      hkt_count_lines(r.out, ok_line) != n_ok)
    fail_msg("%s: rc=%d exit=%d signal=%d timed_out=%d, %d x '%s' "
             "(expected %d)\nstdout:\n%.4000s\nstderr:\n%.4000s",
             argv[0], rc, r.exit_code, r.signal, r.timed_out,
             hkt_count_lines(r.out, ok_line), ok_line, n_ok, r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void run_ok(char *const argv[], const char *ok_line, int n_ok,
                   double timeout) {
  run_ok_env(argv, NULL, ok_line, n_ok, timeout);
}

/* The counts {0, 1, np-1, np, 1000003}. The sanitizer stages of
 * scripts/test.sh lower the big one with HKT_ALLREDUCE_BIG: there they hunt
 * memory errors and races, which the small counts reach as well. */
static void allreduce_np(const char *np) {
  const char *big = getenv("HKT_ALLREDUCE_BIG");
  char c2[16], c3[16];
  snprintf(c2, sizeof c2, "%d", atoi(np) - 1);
  snprintf(c3, sizeof c3, "%d", atoi(np));
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  (char *)np,
                  W("w_allreduce"),
                  "0",
                  "1",
                  c2,
                  c3,
                  (char *)(big && *big ? big : "1000003"),
                  NULL};
  char ok[64];
  snprintf(ok, sizeof ok, "allreduce ok: np=%s cases=225", np);
  /* one host: shared memory (the flat ring through the shm engine); the
   * TCP links are exercised by the socket and algorithm tests below */
  char *env[] = {"HK_INTRA_TRANSPORT=shm", NULL};
  run_ok_env(argv, env, ok, atoi(np), 280);
}

static void test_allreduce_np1(void **s) {
  (void)s;
  allreduce_np("1");
}
static void test_allreduce_np2(void **s) {
  (void)s;
  allreduce_np("2");
}
static void test_allreduce_np3(void **s) {
  (void)s;
  allreduce_np("3");
}
static void test_allreduce_np4(void **s) {
  (void)s;
  allreduce_np("4");
}
static void test_allreduce_np5(void **s) {
  (void)s;
  allreduce_np("5");
}
static void test_allreduce_np8(void **s) {
  (void)s;
  allreduce_np("8");
}

/* allgather, reducescatter, alltoall, grouped allreduce and join against
 * serial computations, np in {1, 2, 3, 4, 5, 8}, over shared memory. */
static void test_collectives(void **s) {
  (void)s;
  const char *nps[] = {"1", "2", "3", "4", "5", "8"};
  char *env[] = {"HK_INTRA_TRANSPORT=shm", NULL};
  for (int i = 0; i < 6; i++) {
    char ok[64];
    snprintf(ok, sizeof ok, "collectives ok: np=%s", nps[i]);
    char *argv[] = {HKRUN_PATH, "-np", (char *)nps[i], W("w_collectives"),
                    NULL};
    run_ok_env(argv, env, ok, atoi(nps[i]), 120);
  }
}

/* HK_SOCKETS_PER_PEER=3: every link stripes over 3 connections (blocks
 * of HK_LINK_BLOCK_BYTES, so the big allreduce spreads over all 3); the
 * allreduce cases and every collective still match the serial results.
 * (TCP inside the host: HK_INTRA_TRANSPORT=tcp, so the links are TCP.) */
static void test_three_sockets_per_peer(void **s) {
  (void)s;
  char *env[] = {"HK_SOCKETS_PER_PEER=3", "HK_INTRA_TRANSPORT=tcp", NULL};
  const char *big = getenv("HKT_ALLREDUCE_BIG");
  char *ar[] = {HKRUN_PATH,
                "-np",
                "3",
                W("w_allreduce"),
                "0",
                "1",
                "2",
                "3",
                (char *)(big && *big ? big : "1000003"),
                NULL};
  run_ok_env(ar, env, "allreduce ok: np=3 cases=225", 3, 280);
  const char *nps[] = {"2", "3", "5"};
  for (int i = 0; i < 3; i++) {
    char ok[64];
    snprintf(ok, sizeof ok, "collectives ok: np=%s", nps[i]);
    char *argv[] = {HKRUN_PATH, "-np", (char *)nps[i], W("w_collectives"),
                    NULL};
    run_ok_env(argv, env, ok, atoi(nps[i]), 120);
  }
  /* ranks that disagree: rank 1 (2 sockets) refuses rank 0's HELLO (1),
   * saying so, and the job stops at once */
  char *mixed[] = {HKRUN_PATH,
                   "-np",
                   "2",
                   "sh",
                   "-c",
                   "HK_SOCKETS_PER_PEER=$((HK_RANK + 1)) exec \"$0\"",
                   W("w_collectives"),
                   NULL};
  hkt_result r;
  assert_int_equal(hkt_run(mixed, NULL, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  if (!strstr(r.err, "rank 0 opens 1 data connections to each peer but 2 "
                     "here (HK_SOCKETS_PER_PEER, or HK_AUTOTUNE_SOCKETS with "
                     "HK_AUTOTUNE, the larger): every rank must use the "
                     "same values"))
    fail_msg("stderr:\n%s", r.err);
  assert_true(r.elapsed_s < 30);
  hkt_result_free(&r);
  /* with --autotune both open HK_AUTOTUNE_SOCKETS (4) connections, but
   * would stripe over 1 and 2 of them: refused the same way */
  char *striped[] = {HKRUN_PATH,
                     "-np",
                     "2",
                     "sh",
                     "-c",
                     "HK_AUTOTUNE=1 HK_SOCKETS_PER_PEER=$((HK_RANK + 1)) exec "
                     "\"$0\"",
                     W("w_collectives"),
                     NULL};
  assert_int_equal(hkt_run(striped, NULL, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  if (!strstr(r.err, "rank 0 carries each link's stream over 1 "
                     "connection(s) but HK_SOCKETS_PER_PEER=2 here: every "
                     "rank must use the same value"))
    fail_msg("stderr:\n%s", r.err);
  assert_true(r.elapsed_s < 30);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* hkrun runs every rank on one host, but a worker given HK_LOCAL_RANK /
 * HK_LOCAL_SIZE of blocks of `local` ranks sees hosts of that size: how
 * the hierarchical allreduce runs here without network namespaces. */
static void run_with_hosts(const char *np, int local, char *const env[],
                           const char *worker_cmd, const char *ok,
                           const char *log_line) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "HK_LOCAL_RANK=$((HK_RANK %% %d)) HK_LOCAL_SIZE=%d exec %s", local,
           local, worker_cmd);
  char *argv[] = {HKRUN_PATH, "-np", (char *)np, "sh", "-c", cmd, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 280, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, ok) != atoi(np) ||
      (log_line && hkt_count_lines(r.err, log_line) != 1))
    fail_msg("%s: exit %d, %d x '%s', want %s; log '%s'\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             cmd, r.exit_code, hkt_count_lines(r.out, ok), ok, np,
             log_line ? log_line : "", r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* Every algorithm gives the serial results (exact inputs: w_allreduce's
 * check is exact and bitwise across ranks), every dtype x op, counts
 * around the segment boundaries: hierarchical over 3 hosts of 2 and 2
 * hosts of 3, recursive doubling over 5 ranks (not a power of two), and
 * the other collectives (grouped allreduce, join's divisor) hierarchical. */
static void test_allreduce_algorithms(void **s) {
  (void)s;
  const char *big = getenv("HKT_ALLREDUCE_BIG");
  char args[128];
  snprintf(args, sizeof args, "%s 0 1 5 6 7 %s", W("w_allreduce"),
           big && *big ? big : "100003");
  char *hier[] = {"HK_HIERARCHICAL_ALLREDUCE=1", "HK_LOG_LEVEL=info", NULL};
  run_with_hosts("6", 2, hier, args, "allreduce ok: np=6",
                 "allreduce algorithm (hierarchical): 1024 B: hierarchical;");
  run_with_hosts("6", 3, hier, args, "allreduce ok: np=6", NULL);
  char *rd[] = {"HK_ALLREDUCE_ALGO=rd", "HK_LOG_LEVEL=info", NULL};
  run_with_hosts("5", 5, rd, args, "allreduce ok: np=5",
                 "allreduce algorithm (rd): 1024 B: rd;");
  /* auto on 2 hosts of 2: the model's choice for each size, logged */
  char *autoenv[] = {"HK_LOG_LEVEL=info", NULL};
  run_with_hosts("4", 2, autoenv, args, "allreduce ok: np=4",
                 "allreduce algorithm (auto): 1024 B: rd;");
  run_with_hosts("5", 5, hier, W("w_collectives"), "collectives ok: np=5",
                 NULL);
  run_with_hosts("6", 2, hier, W("w_collectives"), "collectives ok: np=6",
                 NULL);
  /* settings that must match but differ: hk_init fails at once, with the
   * message naming the setting and both values (the ranks would otherwise
   * run different algorithms on the same tensor: wrong sums or a hang).
   * Every rank computes the same verdict; one that is still finishing the
   * check when the first exits may get hkrun's abort instead, so the test
   * asks for the message at least once and a failed job. */
  const char *mismatches[][2] = {
      {"HK_ALLREDUCE_ALGO=ring", "HK_ALLREDUCE_ALGO differs between ranks: "
                                 "rank 0 has 'auto', rank 1 has 'ring'"},
      {"HK_NET_GBIT=0.01", "HK_NET_GBIT differs between ranks: rank 0 has "
                           "'10', rank 1 has '0.01'"},
      {"HK_FUSION_THRESHOLD=0", "HK_FUSION_THRESHOLD differs between ranks"},
      {"HK_HIERARCHICAL_ALLREDUCE=0",
       "HK_HIERARCHICAL_ALLREDUCE differs between ranks"}};
  for (int i = 0; i < 4; i++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "if [ $HK_RANK = 1 ]; then export %s; fi; exec %s",
             mismatches[i][0], W("w_collectives"));
    char *mm[] = {HKRUN_PATH, "-np", "3", "sh", "-c", cmd, NULL};
    hkt_result m;
    assert_int_equal(hkt_run(mm, NULL, 60, &m), 0);
    if (m.exit_code == 0 || hkt_count_lines(m.err, mismatches[i][1]) < 1)
      fail_msg("%s: exit %d, want '%s' in:\n%.3000s", mismatches[i][0],
               m.exit_code, mismatches[i][1], m.err);
    hkt_result_free(&m);
    assert_int_equal(hkt_orphans(NULL, 0), 0);
  }
  /* bad layouts and settings fail hk_init on every rank, saying why */
  char *bad[] = {"HK_ALLREDUCE_ALGO=tree", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_collectives"), NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, bad, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "HK_ALLREDUCE_ALGO=\"tree\": hk's "
                                "collectives have no tree"));
  hkt_result_free(&r);
  char *argv2[] = {HKRUN_PATH, "-np",
                   "3",        "sh",
                   "-c",       "HK_LOCAL_SIZE=2 exec " W("w_collectives"),
                   NULL};
  assert_int_equal(hkt_run(argv2, NULL, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "do not describe rank"));
  hkt_result_free(&r);
}

/* The other algorithms over links of 3 striped sockets: recursive
 * doubling (whole buffers over the mesh's links) at np=5 and
 * hierarchical (local and cross rings) over 3 hosts of 2. */
static void test_algorithms_three_sockets(void **s) {
  (void)s;
  const char *big = getenv("HKT_ALLREDUCE_BIG");
  char args[128];
  snprintf(args, sizeof args, "%s 0 1 5 6 7 %s", W("w_allreduce"),
           big && *big ? big : "100003");
  char *rd[] = {"HK_ALLREDUCE_ALGO=rd", "HK_SOCKETS_PER_PEER=3",
                "HK_INTRA_TRANSPORT=tcp", NULL};
  run_with_hosts("5", 5, rd, args, "allreduce ok: np=5", NULL);
  char *hier[] = {"HK_HIERARCHICAL_ALLREDUCE=1", "HK_SOCKETS_PER_PEER=3",
                  "HK_INTRA_TRANSPORT=tcp", NULL};
  run_with_hosts("6", 2, hier, args, "allreduce ok: np=6", NULL);
}

/* HK_CROSS_TRANSPORT=mpi under hkrun: on one host it is unused (said at
 * info level) and the job runs over TCP; with ranks on several hosts
 * (HK_LOCAL_SIZE blocks) and no mpirun it fails hk_init, saying why. */
static void test_cross_transport_without_mpirun(void **s) {
  (void)s;
  char *env[] = {"HK_CROSS_TRANSPORT=mpi", "HK_LOG_LEVEL=info", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "3", W("w_collectives"), NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 120, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "collectives ok: np=3") != 3 ||
      hkt_count_lines(r.err, "HK_CROSS_TRANSPORT=mpi is unused: every rank "
                             "is on this host, the links are TCP") != 1)
    fail_msg("exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", r.exit_code, r.out,
             r.err);
  hkt_result_free(&r);
  char *hosts[] = {HKRUN_PATH,
                   "-np",
                   "4",
                   "sh",
                   "-c",
                   "HK_LOCAL_RANK=$((HK_RANK % 2)) HK_LOCAL_SIZE=2 exec \"$0\"",
                   W("w_collectives"),
                   NULL};
  assert_int_equal(hkt_run(hosts, env, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  if (!strstr(r.err, "HK_CROSS_TRANSPORT=mpi: this job spans 2 hosts (of 2 "
                     "ranks each) but was not started by mpirun or srun"))
    fail_msg("stderr:\n%.3000s", r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* HK_TOPO_FILE (like NCCL_TOPO_FILE): a job on a described 8-GPU DGX-1
 * uses the ring hktopo prints for that layout, and its collectives still
 * give the serial results (allgather/reducescatter/alltoall included). */
static void test_topo_file_ring_order(void **s) {
  (void)s;
  const char *file = CONFIG_DIR "/v100-sxm2-8gpu-dgx1.xml";
  char *topo_argv[] = {HKTOPO_PATH, (char *)file, NULL};
  hkt_result t;
  assert_int_equal(hkt_run(topo_argv, NULL, 60, &t), 0);
  assert_int_equal(t.exit_code, 0);
  /* "  ring 0: GPU0 -> GPU3 -> ... -> GPU0   40.0 GB/s ..." */
  char *ring = strstr(t.out, "ring 0: ");
  assert_non_null(ring);
  char expect[128] = "ring order from HK_TOPO_FILE:";
  ring += 8;
  for (int i = 0; i < 8; i++) {
    char *g = strstr(ring, "GPU");
    assert_non_null(g);
    int gpu = atoi(g + 3);
    snprintf(expect + strlen(expect), sizeof expect - strlen(expect), " %d",
             gpu);
    ring = g + 3;
  }
  hkt_result_free(&t);
  char env_file[256];
  snprintf(env_file, sizeof env_file, "HK_TOPO_FILE=%s", file);
  char *env[] = {env_file, "HK_LOG_LEVEL=info", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "8", W("w_collectives"), NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 120, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "collectives ok: np=8") != 8)
    fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out, r.err);
  if (hkt_count_lines(r.err, expect) != 1)
    fail_msg("expected '%s' in:\n%s", expect, r.err);
  hkt_result_free(&r);
  /* an unusable file fails hk_init on every rank with its reason */
  char *bad_env[] = {"HK_TOPO_FILE=/nonexistent/topo.xml", NULL};
  char *argv2[] = {HKRUN_PATH, "-np", "2", W("w_collectives"), NULL};
  assert_int_equal(hkt_run(argv2, bad_env, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "/nonexistent/topo.xml"));
  hkt_result_free(&r);
}

/* A program started without hkrun is a world of size 1. */
static void test_without_hkrun(void **s) {
  (void)s;
  char *argv[] = {W("w_allreduce"), "0", "1", "1000", NULL};
  hkt_result r;
  /* clear anything an outer hkrun may have set */
  unsetenv("HK_RANK");
  unsetenv("HK_SIZE");
  unsetenv("HK_RENDEZVOUS");
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(hkt_count_lines(r.out, "allreduce ok: np=1 cases=135"), 1);
  hkt_result_free(&r);
}

static void test_threads_random_order(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "4", W("w_threads"), NULL};
  run_ok(argv, "threads ok: 200 tensors x 3 steps from 2 threads", 4, 280);
}

/* 4 threads per rank with tensors of their own: hk_poll loops and
 * hk_wait calls racing the background thread's completions (the handle's
 * done is polled without the lock), grouped allreduces, and mismatches
 * whose reason reaches the waiting thread's hk_last_error; with the
 * default polling and with HK_SPIN_US=0 (every wait sleeps at once). */
static void test_threads_wait_poll_race(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "3", W("w_waitrace"), NULL};
  run_ok(argv, "waitrace ok: 4 threads x 24 steps", 3, 280);
  char *sleep_env[] = {"HK_SPIN_US=0", NULL};
  run_ok_env(argv, sleep_env, "waitrace ok: 4 threads x 24 steps", 3, 280);
}

static void test_negotiation_errors(void **s) {
  (void)s;
  char *argv2[] = {HKRUN_PATH, "-np", "2", W("w_errors"), NULL};
  run_ok(argv2, "errors ok", 2, 120);
  char *argv4[] = {HKRUN_PATH, "-np", "4", W("w_errors"), NULL};
  run_ok(argv4, "errors ok", 4, 120);
}

/* Parses "[r] ready pid=P" lines into pids[r]. */
static void ready_pids(const char *out, int n, long *pids) {
  for (int r = 0; r < n; r++) {
    char key[32];
    snprintf(key, sizeof key, "[%d] ready pid=", r);
    const char *p = strstr(out, key);
    assert_non_null(p);
    pids[r] = atol(p + strlen(key));
    assert_true(pids[r] > 1);
  }
}

/* Case C5: kill -9 of one worker in the middle of allreduces. */
static void test_kill9_mid_allreduce(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "4", W("w_fail"), "kill", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, NULL, &p), 0);
  assert_int_equal(hkt_wait_lines(&p, "ready pid=", 4, 120), 0);
  long pids[4];
  ready_pids(p.out.data, 4, pids);
  assert_int_equal(kill((pid_t)pids[2], SIGKILL), 0);
  double killed = hkt_now();
  hkt_result r;
  int rc = hkt_finish(&p, 10, &r);
  double took = hkt_now() - killed;
  if (rc != 0 || !r.exited || r.exit_code != 128 + 9)
    fail_msg("hkrun: rc=%d exit=%d signal=%d after %.1f s\nstderr:\n%s", rc,
             r.exit_code, r.signal, took, r.err);
  assert_true(took < 10);
  char who[64];
  snprintf(who, sizeof who, "rank 2 (pid %ld) was killed by signal 9", pids[2]);
  assert_non_null(strstr(r.err, who));
  /* the survivors learnt why (they print hk's message and exit 1) */
  assert_true(hkt_count_lines(r.err, "allreduce failed: peer lost") >= 1);
  assert_true(hkt_count_lines(r.err, who) >= 2);
  for (int i = 0; i < 4; i++)
    assert_int_equal(hkt_pid_alive((pid_t)pids[i]), 0);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* Case C6: rank 0 exits with status 3 before the others' collective. */
static void test_rank_exits_early(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_fail"), "early", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  assert_int_equal(r.exit_code, 3);
  assert_non_null(strstr(r.err, "exited with status 3"));
  char *line = strstr(r.err, "[1] rank 1: allreduce gave peer lost");
  if (!line)
    fail_msg("rank 1 did not report the lost peer:\n%s", r.err);
  char *eol = strchr(line, '\n');
  if (eol)
    *eol = '\0';
  assert_non_null(strstr(line, "rank 0 (pid"));
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* A connection to the rendezvous without the secret is refused; the job
 * still finishes correctly. */
static void test_rogue_connection(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "3", W("w_fail"), "rogue", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "rogue ok") != 3)
    fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out, r.err);
  assert_int_equal(hkt_count_lines(r.out, "[1] rogue connection refused"), 1);
  assert_non_null(strstr(r.err, "bad secret"));
  hkt_result_free(&r);
}

/* hk_shutdown on one rank ends the others' pending operations with
 * HK_ERR_SHUTDOWN naming that rank; a handle pending at shutdown can still
 * be waited afterwards. */
static void test_shutdown_semantics(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_fail"), "shutdown", NULL};
  run_ok(argv, "shutdown ok", 2, 60);
  char *argv2[] = {HKRUN_PATH, "-np", "2", W("w_fail"), "leave", NULL};
  run_ok(argv2, "leave ok", 2, 60);
}

/* A rank that returns 0 from main without hk_shutdown while the others
 * wait in an allreduce (what mpirun reports as "exited without calling
 * finalize"): hkrun names it at once as the job's failure and exits 1;
 * every other rank's error names it (not rank 0, the coordinator, which
 * noticed first); nothing is left running. */
static void test_exit_without_shutdown(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "4", W("w_fail"), "vanish", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  const char *v = strstr(r.out, "[2] vanishing pid=");
  if (!v || r.exit_code != 1)
    fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out, r.err);
  long pid = atol(v + strlen("[2] vanishing pid="));
  char why[128], expect[160];
  snprintf(why, sizeof why,
           "rank 2 (pid %ld) exited with status 0 without calling hk_shutdown",
           pid);
  snprintf(expect, sizeof expect, "hkrun: %s\n", why);
  /* hkrun's one report (the first failure) is rank 2's */
  if (!strstr(r.err, expect) || hkt_count_lines(r.err, "hkrun: rank") != 1)
    fail_msg("expected '%s' as hkrun's only report:\n%s", why, r.err);
  for (int k = 0; k < 4; k++) {
    if (k == 2)
      continue;
    char key[64];
    snprintf(key, sizeof key, "[%d] rank %d: allreduce gave peer lost: ", k, k);
    char *line = strstr(r.err, key);
    if (!line)
      fail_msg("rank %d did not report the lost peer:\n%s", k, r.err);
    char *eol = strchr(line, '\n');
    if (eol)
      *eol = '\0';
    if (!strstr(line, why))
      fail_msg("rank %d's error does not name rank 2: '%s'", k, line);
    if (eol)
      *eol = '\n';
  }
  assert_true(r.elapsed_s < 30);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* The guard against misjudging a normal exit: whichever hkrun sees first,
 * a worker's exit or the end of its rendezvous connection, every one of
 * many quick jobs whose ranks all call hk_shutdown exits 0. */
static void test_normal_exits_stay_clean(void **s) {
  (void)s;
  for (int i = 0; i < 20; i++) {
    char *argv[] = {HKRUN_PATH, "-np", "4", W("w_fail"), "quick", NULL};
    run_ok(argv, "quick ok", 4, 60);
  }
}

/* A rank that never joins (it sleeps before hk_init) is named: by hkrun,
 * which says that it was missing and exits 1 (not a joined rank's status),
 * and in every joined rank's hk_init error; all within the start timeout
 * plus the grace period, nothing left behind. Several missing ranks are
 * all named. */
static void late_ranks(const char *late_test, const char *named,
                       const char *joined) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "if %s; then sleep 60; fi; exec %s", late_test,
           W("w_collectives"));
  char *argv[] = {HKRUN_PATH, "-np", "4", "--grace-period", "1", "sh",
                  "-c",       cmd,   NULL};
  char *env[] = {"HK_START_TIMEOUT_S=3", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  char want[128], told[160];
  snprintf(want, sizeof want,
           "not every rank joined within "
           "HK_START_TIMEOUT_S=3 s: %s",
           named);
  snprintf(told, sizeof told, "the job was aborted during start-up: %s", named);
  int n_told = 0;
  for (const char *p = r.err; (p = strstr(p, told)); p++)
    n_told++;
  if (!r.exited || r.exit_code != 1 || !strstr(r.err, want) ||
      !strstr(r.err, joined) || n_told != atoi(joined) ||
      r.elapsed_s > 3 + 1 + 3)
    fail_msg("exit %d after %.1f s, %d ranks told\nstderr:\n%.3000s",
             r.exit_code, r.elapsed_s, n_told, r.err);
  assert_null(strstr(r.err, "hkrun: rank 0 (pid"));
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void test_late_rank_named(void **s) {
  (void)s;
  late_ranks("[ $HK_RANK = 3 ]", "rank 3", "3 of 4 joined");
  late_ranks("[ $HK_RANK -ge 2 ]", "ranks 2", "2 of 4 joined");
}

/* 16 ranks averaging float16 5000.0 get 5000.0 up to float16's rounding
 * (the sum alone is +inf), with the ring's sums one rank at a time and
 * with the algorithm hk picks; the sum's overflow is said once, by rank
 * 0, naming the tensor. */
static void float16_average_and_overflow(const char *algo) {
  char *argv[] = {HKRUN_PATH, "-np", "16", W("w_half16"), NULL};
  char *env[] = {"HK_LOG_LEVEL=warning", (char *)algo, NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 120, &r);
  int ok = hkt_count_lines(r.out, "half16 ok");
  const char *w =
      strstr(r.err, "tensor 'sum.f16': the float16 sum holds +-inf");
  int once = w && !strstr(w + 1, "tensor 'sum.f16': the float16 sum");
  if (rc != 0 || !r.exited || r.exit_code != 0 || ok != 16 || !once ||
      strstr(r.err, "avg."))
    fail_msg("exit %d, %d ok lines, warned once %d\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             r.exit_code, ok, once, r.out, r.err);
  assert_non_null(strstr(w, "in 1001 of its 1001 elements"));
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void test_float16_average_and_overflow(void **s) {
  (void)s;
  float16_average_and_overflow("HK_ALLREDUCE_ALGO=ring"); /* one at a time */
  float16_average_and_overflow("HK_ALLREDUCE_ALGO=auto");
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_np1),
      cmocka_unit_test(test_allreduce_np2),
      cmocka_unit_test(test_allreduce_np3),
      cmocka_unit_test(test_allreduce_np4),
      cmocka_unit_test(test_allreduce_np5),
      cmocka_unit_test(test_allreduce_np8),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_three_sockets_per_peer),
      cmocka_unit_test(test_algorithms_three_sockets),
      cmocka_unit_test(test_cross_transport_without_mpirun),
      cmocka_unit_test(test_allreduce_algorithms),
      cmocka_unit_test(test_topo_file_ring_order),
      cmocka_unit_test(test_without_hkrun),
      cmocka_unit_test(test_threads_random_order),
      cmocka_unit_test(test_threads_wait_poll_race),
      cmocka_unit_test(test_negotiation_errors),
      cmocka_unit_test(test_float16_average_and_overflow),
      cmocka_unit_test(test_kill9_mid_allreduce),
      cmocka_unit_test(test_rank_exits_early),
      cmocka_unit_test(test_late_rank_named),
      cmocka_unit_test(test_rogue_connection),
      cmocka_unit_test(test_shutdown_semantics),
      cmocka_unit_test(test_exit_without_shutdown),
      cmocka_unit_test(test_normal_exits_stay_clean),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
