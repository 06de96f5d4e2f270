/*
 * test_netbed_multihost.c - hk across 4 "hosts" x 2 slots: network
 * namespaces on this machine linked at 1 Gbit/s (tests/netbed/netbed.sh),
 * the job started the way a user starts one on several servers:
 *
 *   hkrun -np 8 -H A:2,B:2,C:2,D:2 --network-interface <the bed's /24>
 *         --mpi-args "$NETBED_AGENT_ARGS" -- w_netbed ...
 *
 * Three groups, each on a bed of its own made once for the group (argv[1]
 * picks one; none runs them all):
 *
 * collectives: for each of {HK_CROSS_TRANSPORT=tcp, mpi} x
 *   {HK_HIERARCHICAL_ALLREDUCE=0, 1} (variables hkrun forwards to mpirun;
 *   until those features exist every combination runs the flat TCP ring),
 *   workers/w_netbed.c checks local/cross rank and size against the
 *   layout, allreduces float32/float64/int32/int64 with sum and average at
 *   sizes 1..1048583 and a fused batch, each element against a serial
 *   computation, and that every rank's results hash the same (gathered
 *   with hk_allgather). The test checks each rank's report: its host, its
 *   place, the variables it saw, and one hash for all. The two ranks of
 *   each host talk through shared memory (HK_INTRA_TRANSPORT=shm: hk_init
 *   fails if it cannot be set up), so the flat ring mixes shm and TCP (or
 *   MPI) links and hierarchical runs its in-host phases through the shm
 *   engine.
 *
 * faults: a host's link is cut (`ip link set <its veth> down`) while an
 *   allreduce is in flight, with HK_TIMEOUT_S=5:
 *   - mid-transfer: every rank has submitted the step (and printed so) when
 *     host 2's link goes down;
 *   - mid-negotiation: host 0's ranks (rank 0 coordinates) hold back their
 *     step at a gate (a FIFO), so the other ranks' step waits in
 *     negotiation with no transfer running; host 0 is cut, then the gate
 *     opens. Only TCP liveness on idle connections can notice this
 *     (hierarchical allreduce);
 *   - mid-transfer over MPI links (HK_CROSS_TRANSPORT=mpi, hierarchical):
 *     host 1 cut;
 *   Then: every rank fails with HK_ERR_TIMEOUT or HK_ERR_PEER_LOST naming a
 *   peer, within HK_TIMEOUT_S (+3 s) of the cut, in the step that was in
 *   flight (each rank writes its error and the time to a file: the cut
 *   host's output cannot reach mpirun); the ranks off the cut host show
 *   their error in hkrun's output too; hkrun exits non-zero within
 *   HK_TIMEOUT_S + NETBED_ALIVE_S (the bed's ssh-like liveness, after
 *   which mpirun learns the cut host's daemon is gone) + a margin; and no
 *   process is left in any namespace of the bed.
 *   - and mpirun SIGKILLed just after a host was cut: nothing is left in
 *     any namespace (the cut host's daemon cannot hear mpirun is gone; the
 *     bed's sessions die with mpirun).
 *
 * sets: process sets across 2 hosts x 2 slots (a bed of its own):
 *   workers/w_sets.c's collectives (every collective on a set of every
 *   rank, on ranks 1..3 and on the even ranks, one per host, against
 *   serial results) and concurrent (a set inside each host, each over its
 *   host's shared memory, at once with the world's collectives across the
 *   hosts) with HK_INTRA_TRANSPORT=shm: a set's ring mixes shm links
 *   inside a host and TCP between them.
 *
 * Skips (cmocka skip, printing the reason) where no bed can be made: not
 * root, no CAP_NET_ADMIN, no ip/tc/unshare, or no mpirun.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <regex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bed.h"
#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif
#ifndef NETBED_SH
#error "NETBED_SH must name tests/netbed/netbed.sh"
#endif
#ifndef W_NETBED
#error "W_NETBED must name the worker"
#endif
#ifndef W_SETS
#error "W_SETS must name workers/w_sets"
#endif

#define HOSTS 4
#define SLOTS 2
#define NP (HOSTS * SLOTS)
#define JOB_S 120.0 /* a check job takes ~8 s on 2 cores */

/* The fault tests' settings. HK_TIMEOUT_S; NETBED_ALIVE_S, longer, so
 * that hk, not the bed, is what notices the cut; the steps done before the
 * one the cut interrupts; elements per step (32 MiB: ~0.5 s at 1 Gbit/s);
 * how late a rank may fail after HK_TIMEOUT_S (keepalive probes go once a
 * second, and 8 ranks share 2 cores: ranks off the cut host failed 1.5 s
 * late under a load of 20); how late hkrun may exit after HK_TIMEOUT_S +
 * NETBED_ALIVE_S. NETBED_ALIVE_S exceeds HK_TIMEOUT_S + the slack by 2 s:
 * when it did not (7 s against 5 + 2), the bed ended the cut host's session
 * before a late rank there had written its error (1 run in 20, two at
 * once). */
#define TIMEOUT_S 5
#define ALIVE_S 10
#define MARK_AFTER 2
#define COUNT "8388608"
#define FAIL_SLACK_S 3.0
#define EXIT_SLACK_S 10.0

#define STR(x) #x
#define XSTR(x) STR(x)

static hkt_bed bed;

static void dump(const char *what, const hkt_result *r) {
  fprintf(stderr,
          "--- %s: exit %d signal %d timed_out %d elapsed %.1f s\n"
          "--- stdout:\n%.6000s\n--- stderr:\n%.6000s\n",
          what, r->exit_code, r->signal, r->timed_out, r->elapsed_s, r->out,
          r->err);
}

static int group_setup(void **state) {
  (void)state;
  return hkt_bed_up(&bed, NETBED_SH, HOSTS, "1gbit");
}

static int group_teardown(void **state) {
  (void)state;
  return hkt_bed_down(&bed, NETBED_SH);
}

/* Asserts that no process is left in any namespace of the bed: each one
 * still listed must be gone within 5 s (SIGKILL's delivery and the exit of
 * a PID namespace's last processes are asynchronous). */
static void assert_namespaces_empty(void) {
  for (int h = 0; h < bed.nhosts; h++) {
    char *pids = hkt_bed_pids(&bed, h);
    assert_non_null(pids);
    for (char *p = pids; *p;) {
      long pid = strtol(p, &p, 10);
      if (pid > 0 && hkt_wait_gone((pid_t)pid, 5.0) != 0)
        fail_msg("pid %ld is still running in %s (host %s)", pid, bed.ns[h],
                 bed.host[h]);
      while (*p == '\n' || *p == ' ')
        p++;
    }
    free(pids);
  }
}

/* ---- collectives ---- */

/* A collectives case: the cross-host transport and whether the allreduce
 * is hierarchical ("0" or "1"). */
typedef struct check_case {
  const char *transport, *hier;
} check_case;

static void run_check(const char *transport, const char *hier);

/* *state points to the case. */
static void test_check(void **state) {
  const check_case *c = *state;
  run_check(c->transport, c->hier);
}

static void run_check(const char *transport, const char *hier) {
  hkt_bed_need(&bed);
  char hosts[512];
  hkt_bed_hostlist(&bed, HOSTS, SLOTS, hosts, sizeof hosts);
  char tr_env[64], hier_env[64];
  snprintf(tr_env, sizeof tr_env, "HK_CROSS_TRANSPORT=%s", transport);
  snprintf(hier_env, sizeof hier_env, "HK_HIERARCHICAL_ALLREDUCE=%s", hier);
  /* Open MPI's own allocations are not ours to report under ASan */
  char *env[] = {"ASAN_OPTIONS=detect_leaks=0", tr_env, hier_env,
                 "HK_INTRA_TRANSPORT=shm", NULL};
  char *argv[HKT_BED_ARGV];
  hkt_bed_job_argv(&bed, argv, HKRUN_PATH, "8", hosts, 0,
                   (const char *[]){W_NETBED, "check", "2", NULL});
  hkt_result r;
  hkt_run(argv, env, JOB_S, &r);
  if (r.timed_out || !r.exited || r.exit_code != 0) {
    dump("hkrun", &r);
    fail_msg("%s, hierarchical %s: hkrun -H %s failed", transport, hier, hosts);
  }
  /* one report per rank, in its place on its host, that saw the variables
   * hkrun was given; all with the same hash */
  char hash[32] = "";
  for (int rank = 0; rank < NP; rank++) {
    char want[256];
    snprintf(want, sizeof want,
             "netbed ok: rank %d of %d local %d/%d cross %d/%d host %s "
             "hierarchical %s transport %s tensors ",
             rank, NP, rank % SLOTS, SLOTS, rank / SLOTS, HOSTS,
             bed.host[rank / SLOTS], hier, transport);
    const char *line = strstr(r.out, want);
    if (!line || hkt_count_lines(r.out, want) != 1) {
      dump("hkrun", &r);
      fail_msg("%s, hierarchical %s: no single line '%s...'", transport, hier,
               want);
    }
    const char *h = strstr(line, " hash ");
    assert_non_null(h);
    char mine[32];
    assert_int_equal(sscanf(h, " hash %31s", mine), 1);
    assert_int_equal(strlen(mine), 16);
    if (!hash[0])
      snprintf(hash, sizeof hash, "%s", mine);
    else if (strcmp(hash, mine) != 0)
      fail_msg("rank %d's results hash %s, rank 0's %s", rank, mine, hash);
  }
  assert_int_equal(hkt_count_lines(r.out, "netbed ok: "), NP);
  hkt_result_free(&r);
  assert_namespaces_empty();
}

/* ---- faults ---- */

static double realtime(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads dir/rank-R: its first line into line (without '\n') and the
 * time it gives. Returns 0, or -1 if missing or malformed. */
static int read_failure(const char *dir, int rank, char *line, size_t cap,
                        double *t) {
  char path[512];
  snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  int ok = fgets(line, (int)cap, f) != NULL;
  line[strcspn(line, "\n")] = '\0';
  char tl[64];
  ok = ok && fgets(tl, sizeof tl, f) && sscanf(tl, "time %lf", t) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

/* The ranks named in msg other than `self`, as a bit mask. */
static unsigned peers_named(const char *msg, int self) {
  regex_t re;
  assert_int_equal(regcomp(&re, "rank ([0-9]+)", REG_EXTENDED), 0);
  unsigned mask = 0;
  regmatch_t m[2];
  for (const char *p = msg; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
    int r = atoi(p + m[1].rm_so);
    if (r != self && r >= 0 && r < NP)
      mask |= 1u << r;
  }
  regfree(&re);
  return mask;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* Removes the job's directory and all in it: the ranks' files, the gate,
 * and the session directories of Open MPI's daemons (the job's TMPDIR:
 * a daemon SIGKILLed with its host cut off cannot remove its own). */
static void remove_dir(const char *dir) {
  if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    fprintf(stderr, "cannot remove %s: %s\n", dir, strerror(errno));
}

/*
 * Runs the loop worker, cuts host `cut`'s link once the step after
 * MARK_AFTER is in flight (gate: host `cut`'s ranks hold it back first, so
 * the others wait in negotiation), and checks how the job ends.
 */
static void run_cut(int cut, int gate, const char *transport,
                    const char *hier) {
  hkt_bed_need(&bed);
  char dir[96];
  assert_int_equal(hkt_mkdtemp("hk-netbed-cut-", dir, sizeof dir), 0);
  char fifo[512], gate_host[16];
  snprintf(fifo, sizeof fifo, "%s/gate", dir);
  snprintf(gate_host, sizeof gate_host, "%d", cut);
  int gate_fd = -1;
  if (gate) {
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* held open for writing, so the workers' opens never block */
    gate_fd = open(fifo, O_RDWR | O_CLOEXEC);
    assert_true(gate_fd >= 0);
  }
  char hosts[512];
  hkt_bed_hostlist(&bed, HOSTS, SLOTS, hosts, sizeof hosts);
  char hier_env[64], tr_env[64];
  snprintf(hier_env, sizeof hier_env, "HK_HIERARCHICAL_ALLREDUCE=%s", hier);
  snprintf(tr_env, sizeof tr_env, "HK_CROSS_TRANSPORT=%s", transport);
  char tmp_env[128];
  snprintf(tmp_env, sizeof tmp_env, "TMPDIR=%s", dir);
  char *env[] = {"ASAN_OPTIONS=detect_leaks=0",
                 tmp_env,
                 "HK_TIMEOUT_S=" XSTR(TIMEOUT_S),
                 "NETBED_ALIVE_S=" XSTR(ALIVE_S),
                 tr_env,
                 hier_env,
                 NULL};
  char mark[16];
  snprintf(mark, sizeof mark, "%d", MARK_AFTER);
  char *argv[HKT_BED_ARGV];
  const char *args[] = {W_NETBED,           "loop", mark, COUNT, dir,
                        gate ? fifo : NULL, /* without a gate, the end */
                        gate_host,          NULL};
  hkt_bed_job_argv(&bed, argv, HKRUN_PATH, "8", hosts, 0, args);
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  /* the step is in flight on every rank (gate: on every rank but the cut
   * host's, which wait at the gate) */
  int flying = gate ? NP - SLOTS : NP;
  if (hkt_wait_lines(&p, "netbed mid-allreduce: ", flying, JOB_S) != 0 ||
      (gate && hkt_wait_lines(&p, "netbed gate: ", SLOTS, JOB_S) != 0)) {
    hkt_result r;
    hkt_finish(&p, 1, &r);
    dump("hkrun", &r);
    hkt_bed_dump_net(&bed);
    remove_dir(dir);
    fail_msg("the job never had the step in flight");
  }
  double cut_at = realtime(), cut_mono = hkt_now();
  if (hkt_bed_link(&bed, cut, 1) != 0) {
    hkt_result r;
    hkt_finish(&p, 1, &r);
    hkt_result_free(&r);
    remove_dir(dir);
    fail_msg("cannot cut %s's link %s", bed.host[cut], bed.link[cut]);
  }
  if (gate) {
    /* one byte for each rank at the gate */
    assert_int_equal(write(gate_fd, "gg", SLOTS), SLOTS);
    close(gate_fd);
  }
  hkt_result r;
  hkt_finish(&p, TIMEOUT_S + ALIVE_S + 60, &r);
  double exit_s = hkt_now() - cut_mono;
  int restored = hkt_bed_link(&bed, cut, 0);
  if (r.timed_out || !r.exited || r.exit_code == 0 ||
      exit_s > TIMEOUT_S + ALIVE_S + EXIT_SLACK_S) {
    dump("hkrun", &r);
    remove_dir(dir);
    fail_msg("hkrun should exit non-zero within %d s of the cut; it %s %d "
             "after %.1f s",
             TIMEOUT_S + ALIVE_S + (int)EXIT_SLACK_S,
             r.exited ? "exited" : "was killed by signal",
             r.exited ? r.exit_code : r.signal, exit_s);
  }
  assert_int_equal(restored, 0);
  fprintf(stderr,
          "cut %s (host %d) at step %d (%s, hierarchical %s): hkrun exited %d "
          "after %.1f s\n",
          bed.host[cut], cut, MARK_AFTER + 1, transport, hier, r.exit_code,
          exit_s);

  unsigned on_cut = ((1u << SLOTS) - 1) << (cut * SLOTS);
  unsigned cut_names_off = 0, off_names_cut = 0;
  for (int rank = 0; rank < NP; rank++) {
    char line[1024];
    double t;
    if (read_failure(dir, rank, line, sizeof line, &t) != 0) {
      dump("hkrun", &r);
      remove_dir(dir);
      fail_msg("rank %d left no error in %s/rank-%d", rank, dir, rank);
    }
    fprintf(stderr, "  %+.2f s  %s\n", t - cut_at, line);
    char want[96];
    snprintf(want, sizeof want, "netbed failed: rank %d step %d: ", rank,
             MARK_AFTER + 1);
    const char *msg = line + strlen(want);
    if (strncmp(line, want, strlen(want)) != 0 ||
        (strncmp(msg, "timed out: ", 11) != 0 &&
         strncmp(msg, "peer lost: ", 11) != 0))
      fail_msg("rank %d: expected '%s' and a timeout or lost peer: %s", rank,
               want, line);
    unsigned named = peers_named(msg, rank);
    if (!named)
      fail_msg("rank %d's error names no peer: %s", rank, line);
    if (t - cut_at > TIMEOUT_S + FAIL_SLACK_S || t < cut_at)
      fail_msg("rank %d failed %.2f s after the cut (HK_TIMEOUT_S=%d): %s",
               rank, t - cut_at, TIMEOUT_S, line);
    int on = (on_cut >> rank) & 1;
    if (on)
      cut_names_off |= named & ~on_cut;
    else
      off_names_cut |= named & on_cut;
    /* the ranks mpirun can still hear show it through hkrun too */
    if (!on &&
        hkt_count_lines(r.out, line) + hkt_count_lines(r.err, line) < 1) {
      dump("hkrun", &r);
      fail_msg("rank %d's error is not in hkrun's output: %s", rank, line);
    }
  }
  /* both sides of the cut noticed the other */
  if (!cut_names_off || !off_names_cut)
    fail_msg("the ranks on %s name no rank off it (%#x), or those off it "
             "none on it (%#x)",
             bed.host[cut], cut_names_off, off_names_cut);
  hkt_result_free(&r);
  remove_dir(dir);
  assert_namespaces_empty();
}

/* hkrun (and with it mpirun, its child) SIGKILLed right after a host was
 * cut off: the cut host's daemon and ranks cannot hear that mpirun is
 * gone, yet nothing is left in any namespace, at once (the bed's sessions
 * die with the agent, and the agent with mpirun), not only after
 * NETBED_ALIVE_S. */
static void test_mpirun_killed_after_cut(void **state) {
  (void)state;
  hkt_bed_need(&bed);
  char dir[96];
  assert_int_equal(hkt_mkdtemp("hk-netbed-kill-", dir, sizeof dir), 0);
  char hosts[512];
  hkt_bed_hostlist(&bed, HOSTS, SLOTS, hosts, sizeof hosts);
  char tmp_env[128];
  snprintf(tmp_env, sizeof tmp_env, "TMPDIR=%s", dir);
  char *env[] = {"ASAN_OPTIONS=detect_leaks=0", "NETBED_ALIVE_S=600", tmp_env,
                 NULL};
  char *argv[HKT_BED_ARGV];
  hkt_bed_job_argv(&bed, argv, HKRUN_PATH, "8", hosts, 0,
                   (const char *[]){W_NETBED, "loop", "1", "1000", dir, NULL});
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  int ok = hkt_wait_lines(&p, "netbed mid-allreduce: ", NP, JOB_S) == 0;
  int cut = ok && hkt_bed_link(&bed, 1, 1) == 0;
  /* p.pid is hkrun; mpirun gets SIGKILL when it dies (PDEATHSIG) */
  if (cut)
    assert_int_equal(kill(p.pid, SIGKILL), 0);
  hkt_result r;
  hkt_finish(&p, JOB_S, &r);
  if (!ok || !cut || r.exited || r.signal != SIGKILL) {
    dump("hkrun", &r);
    if (cut)
      hkt_bed_link(&bed, 1, 0);
    remove_dir(dir);
    fail_msg("expected a job in flight, then mpirun killed by SIGKILL");
  }
  hkt_result_free(&r);
  assert_namespaces_empty();
  assert_int_equal(hkt_bed_link(&bed, 1, 0), 0);
  remove_dir(dir);
}

/* A cut case: run_cut's arguments. */
typedef struct cut_case {
  int cut, gate;
  const char *transport, *hier;
} cut_case;

/* *state points to the case. */
static void test_cut(void **state) {
  const cut_case *c = *state;
  run_cut(c->cut, c->gate, c->transport, c->hier);
}

/* ---- process sets ---- */

static int sets_setup(void **state) {
  (void)state;
  return hkt_bed_up(&bed, NETBED_SH, 2, "1gbit");
}

/* w_sets `mode` `arg` on 2 hosts x 2 slots: every rank prints `ok`. */
static void run_sets(const char *mode, const char *arg, const char *ok) {
  hkt_bed_need(&bed);
  char hosts[512];
  hkt_bed_hostlist(&bed, 2, SLOTS, hosts, sizeof hosts);
  char *env[] = {"ASAN_OPTIONS=detect_leaks=0", "HK_INTRA_TRANSPORT=shm", NULL};
  char *argv[HKT_BED_ARGV];
  hkt_bed_job_argv(&bed, argv, HKRUN_PATH, "4", hosts, 0,
                   (const char *[]){W_SETS, mode, arg, NULL});
  hkt_result r;
  hkt_run(argv, env, JOB_S, &r);
  if (r.timed_out || !r.exited || r.exit_code != 0 ||
      hkt_count_lines(r.out, ok) != 4) {
    dump("hkrun", &r);
    fail_msg("w_sets %s across 2 hosts: %d x '%s'", mode,
             hkt_count_lines(r.out, ok), ok);
  }
  hkt_result_free(&r);
  assert_namespaces_empty();
}

static void test_sets_collectives(void **state) {
  (void)state;
  run_sets("collectives", "2", "sets ok: collectives np=4 sets=3");
}

static void test_sets_concurrent(void **state) {
  (void)state;
  run_sets("concurrent", "10", "sets ok: concurrent np=4");
}

int main(int argc, char **argv) {
  if (hkt_setup() != 0)
    return 1;
  const char *which = argc > 1 ? argv[1] : "all";
  int all = !strcmp(which, "all");
  if (!all && strcmp(which, "collectives") && strcmp(which, "faults") &&
      strcmp(which, "sets")) {
    fprintf(stderr, "usage: %s [collectives|faults|sets|all]\n", argv[0]);
    return 2;
  }
  int failed = 0;
  if (all || !strcmp(which, "collectives")) {
    const struct CMUnitTest tests[] = {
        HKT_CASE_TEST(test_tcp_flat, test_check, check_case, "tcp", "0"),
        HKT_CASE_TEST(test_tcp_hierarchical, test_check, check_case, "tcp",
                      "1"),
        HKT_CASE_TEST(test_mpi_flat, test_check, check_case, "mpi", "0"),
        HKT_CASE_TEST(test_mpi_hierarchical, test_check, check_case, "mpi",
                      "1"),
    };
    failed += cmocka_run_group_tests_name("collectives", tests, group_setup,
                                          group_teardown);
  }
  if (all || !strcmp(which, "faults")) {
    const struct CMUnitTest tests[] = {
        HKT_CASE_TEST(test_cut_mid_transfer, test_cut, cut_case, 2, 0, "tcp",
                      "0"),
        HKT_CASE_TEST(test_cut_mid_negotiation, test_cut, cut_case, 0, 1, "tcp",
                      "1"),
        /* Over MPI links (Open MPI's TCP, which has no timeout of its own):
         * hk's waits on them time out. */
        HKT_CASE_TEST(test_cut_mid_transfer_mpi, test_cut, cut_case, 1, 0,
                      "mpi", "1"),
        cmocka_unit_test(test_mpirun_killed_after_cut),
    };
    failed += cmocka_run_group_tests_name("faults", tests, group_setup,
                                          group_teardown);
  }
  if (all || !strcmp(which, "sets")) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sets_collectives),
        cmocka_unit_test(test_sets_concurrent),
    };
    failed +=
        cmocka_run_group_tests_name("sets", tests, sets_setup, group_teardown);
  }
  hkt_kill_orphans();
  return failed;
}
