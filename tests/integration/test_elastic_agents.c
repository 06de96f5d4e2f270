/*
 * test_elastic_agents.c - elastic jobs over several hosts through one
 * hkrun agent per host (hkrun --rdzv-endpoint; docs/elastic.md), on a
 * 3-host netns bed (tests/netbed): each agent is started in its host's
 * namespace (`ip netns exec NS hkrun ...`), the agent on host 0 holding
 * the rendezvous at host 0's address; the trainer is
 * workers/w_elastic.c, whose final weights are checked against a serial
 * replay of the schedule (as test_elastic.c does on one host).
 *
 *   worker_lost: 2 hosts x 2 workers; the worker of slot 3 (host 1)
 *     kills itself at step 6: the job re-forms with 3 across both hosts,
 *     both agents exit 0, weights == steps 0-3 by 4, 4-11 by 3.
 *   host_lost: host 1's workers stop at step 6 and the test SIGKILLs
 *     every process of host 1 (its agent and workers): host 0's workers
 *     re-form as 2 and finish; weights == steps 0-3 by 4, 4-11 by {0, 1}.
 *   link_cut: the same, but host 1's link goes down instead
 *     (HK_TIMEOUT_S=3): the agent on host 0 learns from its connection's
 *     keepalive, the job re-forms as 2 and finishes; host 1's agent
 *     loses the rendezvous the same way, ends its workers and exits 1.
 *   endpoint_lost: host 0 (holding the endpoint) is killed whole while
 *     host 1's workers wait at step 6: host 1's agent says it lost the
 *     rendezvous, ends its workers and exits 1.
 *   bind: host 1's agent with --bind-to core binds its worker (slot 1) to
 *     the CPUs it names (-v), read back from the worker's
 *     /proc/self/status, unlike host 0's unbound one; plain programs, so
 *     no job forms, and both agents exit 0.
 *   endpoint_only: host 0's agent holds the endpoint with -np 0 (no
 *     workers), host 1's starts 2, of which slot 1 kills itself at step
 *     6: slot 0 finishes alone; both agents exit 0.
 *   refused: host 1's agent with another secret, then with more
 *     workers than the job has slots left, are refused (exit 1, saying
 *     why); host 0's agent, whose slots 2 and 3 no agent took, fails the
 *     job at HK_START_TIMEOUT_S naming them, exit 1.
 *   link_cut_3: 3 hosts x 2 (each agent started once the one before
 *     holds its slots, so that host h holds slots 2h, 2h+1); host 2's
 *     workers stop at step 6 and its link goes down (HK_TIMEOUT_S=3):
 *     the 4 left finish, weights == steps 0-3 by 6, 4-11 by {0..3};
 *     prints the time from the cut to the first step completed after it.
 *   host_joins: link_cut_3 with W_ELASTIC_JOIN_STEP=8: the 4 left
 *     re-form from step 4's commit and wait at step 8's for workers to
 *     join; host 2, back once its agent has gone, is refused (blacklisted
 *     for 600 s after its failure: --blacklist-cooldown-range 600 900,
 *     exit 1, no worker started); then an agent starts on host 3 with
 *     -np 2: it takes the
 *     lost host's slots 4 and 5, its workers join at that commit (the
 *     4 admit them without rolling back), and the 6 finish: weights ==
 *     steps 0-3 by 6, 4-7 by {0..3}, 8-11 by 6; prints the time from
 *     the new agent's start to its workers' first step.
 *   joins_below_min_np: two_hosts_lost's start and cuts, then, once host
 *     0's agent waits for more (--elastic-timeout 10), an agent starts
 *     on host 3 with -np 2: it takes slots 2 and 3 (host 1's), and the
 *     job re-forms as 4 from step 4's commit and finishes: weights ==
 *     steps 0-3 by 6, 4-11 by {0..3}.
 *   discovery: only host 0's hkrun is started (-np 2 --max-np 6), with a
 *     --host-discovery-script listing host 1 and an address of no host,
 *     and the bed's rsh agent (ssh's stand-in) as --agent-launcher: it
 *     starts an agent on host 1; the other's launcher fails (exit 255),
 *     so that host is blacklisted and the job forms as 4 without it; the
 *     4 wait at step 8's commit; the test then adds host 2 to what the
 *     script lists, hkrun starts an agent there, its 2 workers are
 *     admitted, and the 6 finish: weights == steps 0-7 by 4, 8-11 by 6.
 *   discovery_after_loss: (a) and (b) through discovery: the script
 *     lists hosts 1 and 2 and an address of no host, --max-np 8; the job
 *     forms as 6; host 2's workers stop at step 6 (W_ELASTIC_STOP) and
 *     its link goes down; the 4 left re-form from step 4's commit and
 *     wait at step 8's; the list then names host 3 instead of host 2:
 *     hkrun starts an agent there (slots 6 and 7), admitted at step 8;
 *     weights == steps 0-3 by 6, 4-7 by 4, 8-11 by 6.
 *   two_hosts_lost: 3 x 2 with --min-np 4; hosts 1 and 2 stop at step 6
 *     and both links go down: both ranks left fail (hk_elastic_reset)
 *     naming the job below --min-np 4 with 2 left and 2 more needed,
 *     host 0's agent exits non-zero, hosts 1 and 2's exit 1 (lost the
 *     rendezvous).
 *   lost_while_reforming: 3 x 2; host 2 stops at step 6 and is killed
 *     whole; while the job re-forms, slot 2 (host 1) does not call
 *     hk_elastic_reset ("never"), and once it says so host 1 is killed
 *     whole: host 0's 2 re-form again and finish, weights == steps 0-3
 *     by 6, 4-11 by {0, 1}.
 *   lost_while_meshing: 3 x 2 committing at steps 0 and 6 only; host 2
 *     stops at step 6 and is killed whole; once host 0's agent says the
 *     generation of 4 is complete (its peers are connecting), host 1 is
 *     killed whole: host 0's 2 re-form again and finish, weights ==
 *     steps 0-5 by 6, 6-11 by {0, 1}. A race by nature (where the kill
 *     lands in the connecting): it failed 3 runs of 12 when a peer's
 *     closed handshake read as a refused secret, 2 of 15 when a reset read
 *     late registered a stale address again, 0 of 30 since.
 *   device_link_cut: link_cut on 2 x 2 with w_elastic_dev (HK_DEVICE=emu,
 *     HK_HIERARCHICAL_ALLREDUCE=1): the weights match, host 0's first
 *     rank made 2 communicator ids and both its ranks aborted the first.
 *   bad_input (no bed): no HK_SECRET, and a malformed endpoint, are
 *     refused with exit 2 naming what is wrong.
 *
 * `test_elastic_agents PATTERN` runs only the tests whose names match
 * (cmocka's filter). The bed has 4 hosts; the 2-host tests leave hosts 2
 * and 3 idle, the 3-host ones host 3 (host_joins starts an agent there).
 *
 * Nothing is left in the bed's namespaces nor as an orphan; the bed goes
 * with the group (and with this process however it ends: bed.h). Skips
 * (77 through cmocka's skip) where no bed can be made.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bed.h"
#include "elastic_replay.h"
#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif
#ifndef NETBED_SH
#error "NETBED_SH must name tests/netbed/netbed.sh"
#endif
#ifndef W_ELASTIC
#error "W_ELASTIC must name workers/w_elastic"
#endif
#ifndef W_ELASTIC_DEV
#error "W_ELASTIC_DEV must name w_elastic_dev"
#endif

#define PORT "29400" /* each bed's hosts are namespaces of their own */
#define JOB_S 90.0

static hkt_bed bed;
static const char *commit_every = "4"; /* w_elastic's COMMIT_EVERY */

/* "HK_SECRET=<64 random hex digits>" into env. */
static void make_secret(char *env, size_t cap) {
  unsigned char b[32];
  FILE *f = fopen("/dev/urandom", "rb");
  assert_non_null(f);
  assert_int_equal(fread(b, 1, sizeof b, f), sizeof b);
  fclose(f);
  size_t n = (size_t)snprintf(env, cap, "HK_SECRET=");
  for (int i = 0; i < 32; i++)
    n += (size_t)snprintf(env + n, cap - n, "%02x", b[i]);
}

/* Starts the agent of host h: `ip netns exec NS hkrun -v --rdzv-endpoint
 * HOST0:PORT -np NP --min-np MIN --max-np MAX --elastic-timeout 10
 * --blacklist-cooldown-range 600 900 WORKER 12 4 KILL_SLOT KILL_STEP
 * [KILL2_SLOT KILL2_HOW]` (KILL2_HOW NULL: without those). */
static void start_worker_of(int h, const char *np, const char *min,
                            const char *max, const char *worker,
                            const char *kill_slot, const char *kill_step,
                            const char *kill2_slot, const char *kill2_how,
                            char *const env[], hkt_proc *p) {
  char ep[64];
  snprintf(ep, sizeof ep, "%s:%s", bed.host[0], PORT);
  char *argv[] = {"ip",
                  "netns",
                  "exec",
                  bed.ns[h],
                  HKRUN_PATH,
                  "-v",
                  "--rdzv-endpoint",
                  ep,
                  "-np",
                  (char *)np,
                  "--min-np",
                  (char *)min,
                  "--max-np",
                  (char *)max,
                  "--elastic-timeout",
                  "10",
                  "--blacklist-cooldown-range",
                  "600",
                  "900",
                  (char *)worker,
                  "12",
                  (char *)commit_every,
                  (char *)kill_slot,
                  (char *)kill_step,
                  (char *)kill2_slot,
                  (char *)kill2_how,
                  NULL};
  if (!kill2_how)
    argv[24] = NULL;
  assert_int_equal(hkt_start(argv, env, p), 0);
}

/* start_worker_of with w_elastic and no second loss. */
static void start_agent_of(int h, const char *np, const char *min,
                           const char *max, const char *kill_slot,
                           const char *kill_step, char *const env[],
                           hkt_proc *p) {
  start_worker_of(h, np, min, max, W_ELASTIC, kill_slot, kill_step, NULL, NULL,
                  env, p);
}

/* start_agent_of with -np 2 --min-np 2 --max-np 4. */
static void start_agent(int h, const char *kill_slot, const char *kill_step,
                        char *const env[], hkt_proc *p) {
  start_agent_of(h, "2", "2", "4", kill_slot, kill_step, env, p);
}

/* Fails unless text holds line for every slot of slots (n) with weights
 * want: "final slot=S rank=R size=N w=...". */
static void expect_finals(const char *text, const char *who, const int *slots,
                          const int *ranks, int n, int size, const char *want) {
  for (int k = 0; k < n; k++) {
    char line[640];
    snprintf(line, sizeof line, "final slot=%d rank=%d size=%d w=%s\n",
             slots[k], ranks[k], size, want);
    if (!strstr(text, line))
      fail_msg("no line '%s' in %s's output:\n%s", line, who, text);
  }
}

/* Nothing of the job is left: every process still listed in a host is
 * gone within 5 s (SIGKILL's delivery is asynchronous), and no orphan. */
static void expect_nothing_left(void) {
  for (int h = 0; h < bed.nhosts; h++) {
    char *pids = hkt_bed_pids(&bed, h);
    assert_non_null(pids);
    for (char *p = pids; *p;) {
      long pid = strtol(p, &p, 10);
      if (pid > 0 && hkt_wait_gone((pid_t)pid, 5.0) != 0)
        fail_msg("pid %ld is still running in host %d", pid, h);
      while (*p == '\n' || *p == ' ')
        p++;
    }
    free(pids);
  }
  pid_t left[8];
  int n = hkt_orphans(left, 8), stray = 0;
  for (int i = 0; i < n && i < 8; i++) {
    char path[64], cmd[256] = "";
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)left[i]);
    FILE *f = fopen(path, "r");
    if (f) {
      size_t k = fread(cmd, 1, sizeof cmd - 1, f);
      for (size_t c = 0; c < k; c++)
        cmd[c] = cmd[c] ? cmd[c] : ' ';
      cmd[k] = '\0';
      fclose(f);
    }
    if (strstr(cmd, "netbed.sh guard"))
      continue; /* the bed's own guard (bed.h), not the job's */
    fprintf(stderr, "left behind: pid %d: %s\n", (int)left[i], cmd);
    stray++;
  }
  assert_true(n <= 8);
  assert_int_equal(stray, 0);
}

static void test_worker_lost(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  hkt_proc p0, p1;
  start_agent(0, "3", "6", env, &p0);
  start_agent(1, "3", "6", env, &p1);
  hkt_result r0, r1;
  hkt_finish(&p1, JOB_S, &r1);
  hkt_finish(&p0, JOB_S, &r0);
  if (r0.exit_code != 0 || r1.exit_code != 0)
    fail_msg("agents exited %d and %d\nhost 0:\n%s\n%s\nhost 1:\n%s\n%s",
             r0.exit_code, r1.exit_code, r0.out, r0.err, r1.out, r1.err);
  /* host 1's workers are slots 2 and 3 and registered from its address */
  char reg[128];
  snprintf(reg, sizeof reg, "registered %s:", bed.host[1]);
  assert_int_equal(hkt_count_lines(r0.err, reg), 2);
  assert_non_null(strstr(r0.err, "rank 3 (pid "));
  assert_non_null(strstr(r0.err, "was killed by signal 9; the elastic job "
                                 "goes on with 3 workers (--min-np 2)"));
  assert_non_null(strstr(r1.out, "[3] dying at step 6"));
  /* every survivor, on both hosts, failed step 6 naming slot 3 */
  assert_int_equal(hkt_count_lines(r0.err, "'grad.6': rank 3 (pid "), 2);
  assert_int_equal(hkt_count_lines(r1.err, "'grad.6': rank 3 (pid "), 1);
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1, 2};
  hkt_elastic_replay(all, 4, left, 3, 4, 12, want, sizeof want);
  expect_finals(r0.out, "host 0", left, left, 2, 3, want);
  expect_finals(r1.out, "host 1", left + 2, left + 2, 1, 3, want);
  assert_int_equal(hkt_count_lines(r0.out, "final slot=") +
                       hkt_count_lines(r1.out, "final slot="),
                   3);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

static void test_host_lost(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  hkt_proc p0, p1;
  start_agent(0, "-1", "-1", env, &p0);
  start_agent(1, "-2", "6", env, &p1); /* both stop at step 6 */
  if (hkt_wait_lines(&p1, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 1's workers did not reach step 6");
  /* the whole host goes: its agent and both workers, at once */
  char *pids = hkt_bed_pids(&bed, 1);
  assert_non_null(pids);
  int killed = 0;
  for (char *t = strtok(pids, " \n"); t; t = strtok(NULL, " \n"))
    killed += kill((pid_t)atol(t), SIGKILL) == 0;
  free(pids);
  assert_true(killed >= 3);
  hkt_result r0, r1;
  hkt_finish(&p1, JOB_S, &r1);
  hkt_finish(&p0, JOB_S, &r0);
  assert_int_equal(r1.signal, SIGKILL);
  if (r0.exit_code != 0)
    fail_msg("host 0's agent exited %d\n%s\n%s", r0.exit_code, r0.out, r0.err);
  /* both slots of host 1 lost with it, named by its agent's address */
  char from[128];
  snprintf(from, sizeof from, "(its agent's connection from %s:", bed.host[1]);
  assert_int_equal(hkt_count_lines(r0.err, "hkrun: rank 2 (pid "), 1);
  assert_int_equal(hkt_count_lines(r0.err, "hkrun: rank 3 (pid "), 1);
  assert_int_equal(hkt_count_lines(r0.err, "ended: its connection closed); "
                                           "the elastic job goes on with "),
                   2);
  assert_true(hkt_count_lines(r0.err, from) >= 2);
  assert_null(strstr(r0.err, "(pid 0)")); /* the lost workers' pids */
  /* each survivor's step 6 failed naming the first slot lost */
  assert_int_equal(hkt_count_lines(r0.err, "'grad.6': rank 2 (pid "), 2);
  assert_non_null(strstr(r0.err, "the elastic job goes on with 2 workers "
                                 "(--min-np 2)"));
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1};
  hkt_elastic_replay(all, 4, left, 2, 4, 12, want, sizeof want);
  expect_finals(r0.out, "host 0", left, left, 2, 2, want);
  assert_int_equal(hkt_count_lines(r0.out, "final slot="), 2);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

static void test_link_cut(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", NULL};
  hkt_proc p0, p1;
  start_agent(0, "-1", "-1", env, &p0);
  start_agent(1, "-2", "6", env, &p1);
  if (hkt_wait_lines(&p1, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 1's workers did not reach step 6");
  assert_int_equal(hkt_bed_link(&bed, 1, 1), 0); /* host 1's cable out */
  hkt_result r0, r1;
  hkt_finish(&p0, JOB_S, &r0);
  hkt_finish(&p1, JOB_S, &r1);
  int up = hkt_bed_link(&bed, 1, 0);
  if (r0.exit_code != 0)
    fail_msg("host 0's agent exited %d\n%s\n%s", r0.exit_code, r0.out, r0.err);
  char from[128];
  snprintf(from, sizeof from, "(its agent's connection from %s:", bed.host[1]);
  assert_int_equal(hkt_count_lines(r0.err,
                                   "ended: its connection failed: connection "
                                   "timed out); the elastic job goes on with "),
                   2);
  assert_true(hkt_count_lines(r0.err, from) >= 2);
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1};
  hkt_elastic_replay(all, 4, left, 2, 4, 12, want, sizeof want);
  expect_finals(r0.out, "host 0", left, left, 2, 2, want);
  /* host 1: its agent lost the rendezvous, ended its workers, exit 1 */
  char lost[160];
  snprintf(lost, sizeof lost, "hkrun: lost the rendezvous at %s:%s (",
           bed.host[0], PORT);
  if (r1.exit_code != 1 || !strstr(r1.err, lost))
    fail_msg("host 1's agent exited %d, expected 1 and '%s' in:\n%s",
             r1.exit_code, lost, r1.err);
  assert_non_null(strstr(r1.err, "): the host holding it is gone or cut "
                                 "off; ending this host's workers\n"));
  assert_int_equal(hkt_count_lines(r1.out, "final slot="), 0);
  assert_int_equal(up, 0);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

/* SIGKILLs every process of host h; returns how many. */
static int kill_host(int h) {
  char *pids = hkt_bed_pids(&bed, h);
  assert_non_null(pids);
  int killed = 0;
  for (char *t = strtok(pids, " \n"); t; t = strtok(NULL, " \n"))
    killed += kill((pid_t)atol(t), SIGKILL) == 0;
  free(pids);
  return killed;
}

static void test_endpoint_lost(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  hkt_proc p0, p1;
  start_agent(0, "-1", "-1", env, &p0);
  start_agent(1, "-2", "6", env, &p1);
  if (hkt_wait_lines(&p1, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 1's workers did not reach step 6");
  assert_true(kill_host(0) >= 3); /* its agent and both workers */
  hkt_result r0, r1;
  hkt_finish(&p0, JOB_S, &r0);
  hkt_finish(&p1, JOB_S, &r1);
  assert_int_equal(r0.signal, SIGKILL);
  char lost[256];
  snprintf(lost, sizeof lost,
           "hkrun: lost the rendezvous at %s:%s (the rendezvous closed the "
           "connection): "
           "the host holding it is gone or cut off; ending this host's "
           "workers\n",
           bed.host[0], PORT);
  if (r1.exit_code != 1 || !strstr(r1.err, lost))
    fail_msg("host 1's agent exited %d, expected 1 and '%s' in:\n%s",
             r1.exit_code, lost, r1.err);
  assert_int_equal(hkt_count_lines(r1.out, "final slot="), 0);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

static void test_endpoint_only(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  hkt_proc p0, p1;
  start_agent_of(0, "0", "1", "2", "-1", "-1", env, &p0);
  start_agent_of(1, "2", "1", "2", "1", "6", env, &p1);
  hkt_result r0, r1;
  hkt_finish(&p1, JOB_S, &r1);
  hkt_finish(&p0, JOB_S, &r0);
  if (r0.exit_code != 0 || r1.exit_code != 0)
    fail_msg("agents exited %d and %d\nhost 0:\n%s\n%s\nhost 1:\n%s\n%s",
             r0.exit_code, r1.exit_code, r0.out, r0.err, r1.out, r1.err);
  assert_non_null(strstr(r0.err, "was killed by signal 9; the elastic job "
                                 "goes on with 1 worker (--min-np 1)"));
  assert_string_equal(r0.out, ""); /* no worker of its own */
  char want[512];
  const int all[] = {0, 1}, left[] = {0};
  hkt_elastic_replay(all, 2, left, 1, 4, 12, want, sizeof want);
  expect_finals(r1.out, "host 1", left, left, 1, 1, want);
  assert_int_equal(hkt_count_lines(r1.out, "final slot="), 1);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

static void test_refused(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80], other[80];
  make_secret(secret, sizeof secret);
  make_secret(other, sizeof other);
  char *env[] = {secret, "HK_START_TIMEOUT_S=4", NULL};
  char *bad_env[] = {other, "HK_START_TIMEOUT_S=4", NULL};
  hkt_proc p0, p1;
  start_agent(0, "-1", "-1", env, &p0);
  if (hkt_wait_line(&p0, "rendezvous listening on", JOB_S, NULL) != 0)
    fail_msg("host 0's agent did not listen");
  char want[400];
  hkt_result r;
  start_agent(1, "-1", "-1", bad_env, &p1);
  hkt_finish(&p1, JOB_S, &r);
  snprintf(want, sizeof want,
           "hkrun: --rdzv-endpoint %s:%s: the rendezvous refused our proof "
           "of the job's secret (is HK_SECRET the job's?) (every agent "
           "needs the same HK_SECRET; ",
           bed.host[0], PORT);
  if (r.exit_code != 1 || !strstr(r.err, want))
    fail_msg("exit %d, expected 1 and '%s' in:\n%s", r.exit_code, want, r.err);
  hkt_result_free(&r);
  start_agent_of(1, "3", "2", "4", "-1", "-1", env, &p1);
  hkt_finish(&p1, JOB_S, &r);
  snprintf(want, sizeof want,
           "hkrun: --rdzv-endpoint %s:%s: the rendezvous refused this "
           "agent: the job has 4 slots (--max-np of the agent holding the "
           "endpoint) and 2 are taken: 3 more from host ",
           bed.host[0], PORT);
  if (r.exit_code != 1 || !strstr(r.err, want))
    fail_msg("exit %d, expected 1 and '%s' in:\n%s", r.exit_code, want, r.err);
  hkt_result_free(&r);
  hkt_finish(&p0, JOB_S, &r);
  if (r.exit_code != 1 ||
      !strstr(r.err, "hkrun: not every rank joined within "
                     "HK_START_TIMEOUT_S=4 s: ranks 2 (no agent took it), 3 "
                     "(no agent took it) on "))
    fail_msg("host 0's agent exited %d:\n%s", r.exit_code, r.err);
  hkt_result_free(&r);
  expect_nothing_left();
}

/* The value after "key" on the line of text holding it, into out. */
static void value_after(const char *text, const char *key, char *out,
                        size_t cap) {
  const char *p = strstr(text, key);
  if (!p)
    fail_msg("no '%s' in:\n%s", key, text);
  p += strlen(key);
  size_t n = strcspn(p, "\n");
  snprintf(out, cap, "%.*s", (int)n, p);
}

static void test_bind(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  char ep[64];
  snprintf(ep, sizeof ep, "%s:%s", bed.host[0], PORT);
  char *show = "grep Cpus_allowed_list /proc/self/status";
  char *a0[] = {
      "ip", "netns", "exec", bed.ns[0],  HKRUN_PATH, "--rdzv-endpoint",
      ep,   "-np",   "1",    "--max-np", "2",        "sh",
      "-c", show,    NULL};
  char *a1[] = {"ip",        "netns",    "exec",
                bed.ns[1],   HKRUN_PATH, "-v",
                "--bind-to", "core",     "--rdzv-endpoint",
                ep,          "-np",      "1",
                "--max-np",  "2",        "sh",
                "-c",        show,       NULL};
  hkt_proc p0, p1;
  assert_int_equal(hkt_start(a0, env, &p0), 0);
  assert_int_equal(hkt_start(a1, env, &p1), 0);
  hkt_result r0, r1;
  hkt_finish(&p1, JOB_S, &r1);
  hkt_finish(&p0, JOB_S, &r0);
  if (r0.exit_code != 0 || r1.exit_code != 0)
    fail_msg("agents exited %d and %d\nhost 0:\n%s\n%s\nhost 1:\n%s\n%s",
             r0.exit_code, r1.exit_code, r0.out, r0.err, r1.out, r1.err);
  char said[64], bound[64], unbound[64];
  value_after(r1.err, "hkrun: --bind-to core: rank 1 on CPUs ", said,
              sizeof said);
  value_after(r1.out, "[1] Cpus_allowed_list:\t", bound, sizeof bound);
  value_after(r0.out, "[0] Cpus_allowed_list:\t", unbound, sizeof unbound);
  assert_string_equal(bound, said);
  if (sysconf(_SC_NPROCESSORS_ONLN) > 1 && strchr(unbound, '-'))
    assert_string_not_equal(bound, unbound);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

/* The wall clock, in s (as w_elastic's t=). */
static double wall_s(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Starts the agents of hosts 0, 1 and 2 (-np 2 each, --max-np 6, --min-np
 * min) one after the other, each once the one before holds its slots, so
 * that host h holds slots 2h and 2h+1. kill[h]: host h's KILL_SLOT
 * KILL_STEP; kill2: host 1's KILL2_SLOT KILL2_HOW, or NULLs. */
static void start_three(const char *min, const char *worker,
                        const char *const kill[3][2], const char *kill2_slot,
                        const char *kill2_how, char *const env[],
                        hkt_proc p[3]) {
  for (int h = 0; h < 3; h++) {
    start_worker_of(h, "2", min, "6", worker, kill[h][0], kill[h][1],
                    h == 1 ? kill2_slot : NULL, h == 1 ? kill2_how : NULL, env,
                    &p[h]);
    char slots[64];
    snprintf(slots, sizeof slots, "agent: slots %d..%d of 6 at ", 2 * h,
             2 * h + 1);
    if (hkt_wait_line(&p[h], h ? slots : "rendezvous listening on", JOB_S,
                      NULL) != 0)
      fail_msg("host %d's agent did not say '%s'", h,
               h ? slots : "rendezvous listening on");
  }
}

/* The earliest "resumed step S t=T" of text's lines: T, or 0 if none. */
static double first_resumed(const char *text) {
  double first = 0;
  for (const char *p = text; (p = strstr(p, "resumed step ")); p++) {
    const char *t = strstr(p, " t=");
    if (!t)
      break;
    double v = strtod(t + 3, NULL);
    if (first == 0 || v < first)
      first = v;
  }
  return first;
}

/* Waits until host h's two workers stopped at step 6 (KILL_SLOT -2),
 * then takes host h's cable out. */
static void cut_when_stopped(hkt_proc *p, int h) {
  if (hkt_wait_lines(p, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host %d's workers did not reach step 6", h);
  assert_int_equal(hkt_bed_link(&bed, h, 1), 0);
}

/* Host h's agent, cut off, lost the rendezvous (said so, exit 1). */
static void expect_rendezvous_lost(const hkt_result *r, int h) {
  char lost[160];
  snprintf(lost, sizeof lost, "hkrun: lost the rendezvous at %s:%s (",
           bed.host[0], PORT);
  if (r->exit_code != 1 || !strstr(r->err, lost))
    fail_msg("host %d's agent exited %d, expected 1 and '%s' in:\n%s", h,
             r->exit_code, lost, r->err);
}

static void test_link_cut_3(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", NULL};
  const char *const kill[3][2] = {{"-1", "-1"}, {"-1", "-1"}, {"-2", "6"}};
  hkt_proc p[3];
  start_three("2", W_ELASTIC, kill, NULL, NULL, env, p);
  if (hkt_wait_lines(&p[2], "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 2's workers did not reach step 6");
  const double cut = wall_s();
  assert_int_equal(hkt_bed_link(&bed, 2, 1), 0); /* host 2's cable out */
  hkt_result r[3];
  for (int h = 0; h < 3; h++)
    hkt_finish(&p[h], JOB_S, &r[h]);
  int up = hkt_bed_link(&bed, 2, 0);
  for (int h = 0; h < 2; h++)
    if (r[h].exit_code != 0)
      fail_msg("host %d's agent exited %d\n%s\n%s", h, r[h].exit_code, r[h].out,
               r[h].err);
  assert_int_equal(hkt_count_lines(r[0].err,
                                   "ended: its connection failed: connection "
                                   "timed out); the elastic job goes on with "),
                   2);
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5}, left[] = {0, 1, 2, 3};
  hkt_elastic_replay(all, 6, left, 4, 4, 12, want, sizeof want);
  expect_finals(r[0].out, "host 0", left, left, 2, 4, want);
  expect_finals(r[1].out, "host 1", left + 2, left + 2, 2, 4, want);
  assert_int_equal(hkt_count_lines(r[0].out, "final slot=") +
                       hkt_count_lines(r[1].out, "final slot="),
                   4);
  expect_rendezvous_lost(&r[2], 2);
  assert_int_equal(hkt_count_lines(r[2].out, "final slot="), 0);
  double back0 = first_resumed(r[0].out), back1 = first_resumed(r[1].out);
  double back = back0 && (!back1 || back0 < back1) ? back0 : back1;
  assert_true(back > cut);
  fprintf(stderr,
          "link_cut_3: %.2f s from the cut to the first step after it "
          "(HK_TIMEOUT_S=3)\n",
          back - cut);
  assert_int_equal(up, 0);
  for (int h = 0; h < 3; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

static void test_host_joins(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", "W_ELASTIC_JOIN_STEP=8", NULL};
  const char *const kill[3][2] = {{"-1", "-1"}, {"-1", "-1"}, {"-2", "6"}};
  hkt_proc p[4];
  start_three("2", W_ELASTIC, kill, NULL, NULL, env, p);
  cut_when_stopped(&p[2], 2);
  if (hkt_wait_line(&p[0], "waiting for workers to join at step 8", JOB_S,
                    NULL) != 0)
    fail_msg("host 0's workers did not wait at step 8");
  /* host 2 back (its agent gone): blacklisted for 600 s, it is refused */
  hkt_result r[4];
  hkt_finish(&p[2], JOB_S, &r[2]);
  int up = hkt_bed_link(&bed, 2, 0);
  hkt_proc again;
  hkt_result ra;
  start_worker_of(2, "2", "2", "6", W_ELASTIC, "-1", "-1", NULL, NULL, env,
                  &again);
  hkt_finish(&again, JOB_S, &ra);
  char black[160];
  snprintf(black, sizeof black, "host %s is blacklisted for ", bed.host[2]);
  const char *b = strstr(ra.err, black);
  if (ra.exit_code != 1 || !b ||
      !strstr(b, " s more after 1 failure (--blacklist-cooldown-range 600 "
                 "900)"))
    fail_msg("host 2's second agent exited %d, expected 1 and '%s... s more "
             "after 1 failure' in:\n%s",
             ra.exit_code, black, ra.err);
  const double cooldown = strtod(b + strlen(black), NULL);
  assert_true(cooldown > 500 && cooldown <= 600);
  assert_int_equal(hkt_count_lines(ra.out, "] "), 0); /* no worker ran */
  hkt_result_free(&ra);
  const double arrive = wall_s();
  start_worker_of(3, "2", "2", "6", W_ELASTIC, "-1", "-1", NULL, NULL, env,
                  &p[3]);
  for (int h = 0; h < 4; h++)
    if (h != 2)
      hkt_finish(&p[h], JOB_S, &r[h]);
  for (int h = 0; h < 4; h++)
    if (h != 2 && r[h].exit_code != 0)
      fail_msg("host %d's agent exited %d\n%s\n%s\nhost 0:\n%s", h,
               r[h].exit_code, r[h].out, r[h].err, r[0].err);
  char joined[256];
  snprintf(joined, sizeof joined, " (%s:", bed.host[3]);
  if (!strstr(r[0].err, joined) ||
      !strstr(r[0].err, ") joined the running job: 2 workers as slots 4..5, "
                        "admitted at the members' next commit"))
    fail_msg("host 0's agent did not say host 3 joined:\n%s",
             strstr(r[0].err, " lost: ") ? strstr(r[0].err, " lost: ")
                                         : r[0].err);
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5}, left[] = {0, 1, 2, 3};
  hkt_elastic_replay3(all, 6, left, 4, 4, all, 6, 8, 12, want, sizeof want);
  expect_finals(r[0].out, "host 0", all, all, 2, 6, want);
  expect_finals(r[1].out, "host 1", all + 2, all + 2, 2, 6, want);
  expect_finals(r[3].out, "host 3", all + 4, all + 4, 2, 6, want);
  assert_int_equal(hkt_count_lines(r[0].out, "final slot=") +
                       hkt_count_lines(r[1].out, "final slot=") +
                       hkt_count_lines(r[3].out, "final slot="),
                   6);
  /* the 4 admitted the newcomers at step 8's commit, rolling nothing
   * back (one reset each: the loss's, from step 4) */
  for (int k = 0; k < 4; k++) {
    char line[96];
    snprintf(line, sizeof line,
             "[%d] admitted: rank %d of 6 (slot %d) at "
             "step 8\n",
             k, k, k);
    if (!strstr(r[k / 2].out, line))
      fail_msg("no '%s' in host %d's output:\n%s", line, k / 2, r[k / 2].out);
  }
  assert_int_equal(hkt_count_lines(r[0].out, "reset: rank ") +
                       hkt_count_lines(r[1].out, "reset: rank "),
                   4);
  for (int k = 4; k < 6; k++) {
    char line[96];
    snprintf(line, sizeof line,
             "[%d] joined at step 8 as rank %d of 6 "
             "(slot %d)\n",
             k, k, k);
    if (!strstr(r[3].out, line))
      fail_msg("no '%s' in host 3's output:\n%s", line, r[3].out);
  }
  expect_rendezvous_lost(&r[2], 2);
  const char *f = strstr(r[3].out, "first step 8 t=");
  assert_non_null(f);
  const double first = strtod(f + strlen("first step 8 t="), NULL);
  assert_true(first > arrive);
  fprintf(stderr,
          "host_joins: %.2f s from the new agent's start to its workers' "
          "first step\n",
          first - arrive);
  assert_int_equal(up, 0);
  for (int h = 0; h < 4; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

static void test_joins_below_min_np(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", NULL};
  const char *const kill[3][2] = {{"-1", "-1"}, {"-2", "6"}, {"-2", "6"}};
  hkt_proc p[4];
  start_three("4", W_ELASTIC, kill, NULL, NULL, env, p);
  for (int h = 1; h < 3; h++)
    cut_when_stopped(&p[h], h);
  if (hkt_wait_line(&p[0], "fewer than --min-np 4: waiting up to", JOB_S,
                    NULL) != 0)
    fail_msg("host 0's agent did not wait for more workers");
  start_worker_of(3, "2", "2", "6", W_ELASTIC, "-1", "-1", NULL, NULL, env,
                  &p[3]);
  hkt_result r[4];
  for (int h = 0; h < 4; h++)
    hkt_finish(&p[h], JOB_S, &r[h]);
  int up = hkt_bed_link(&bed, 1, 0) | hkt_bed_link(&bed, 2, 0);
  for (int h = 0; h < 4; h += 3)
    if (r[h].exit_code != 0)
      fail_msg("host %d's agent exited %d\n%s\n%s", h, r[h].exit_code, r[h].out,
               r[h].err);
  assert_non_null(strstr(r[0].err, ") joined the running job: 2 workers as "
                                   "slots 2..3, admitted at the members' "
                                   "next commit"));
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5};
  hkt_elastic_replay(all, 6, all, 4, 4, 12, want, sizeof want);
  expect_finals(r[0].out, "host 0", all, all, 2, 4, want);
  expect_finals(r[3].out, "host 3", all + 2, all + 2, 2, 4, want);
  assert_int_equal(hkt_count_lines(r[0].out, "final slot=") +
                       hkt_count_lines(r[3].out, "final slot="),
                   4);
  for (int h = 1; h < 3; h++)
    expect_rendezvous_lost(&r[h], h);
  assert_int_equal(up, 0);
  for (int h = 0; h < 4; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

/* Writes text into path (replacing it: a rename, so that a reader sees
 * the old content or the new, never a part). */
static void write_file(const char *path, const char *text) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  FILE *f = fopen(tmp, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(rename(tmp, path), 0);
}

/* A discovery job: host 0's hkrun alone (-v --rdzv-endpoint, -np 2
 * --min-np 2 --max-np MAX), with a --host-discovery-script (in a fresh
 * directory dir[256]: `cat` of the file list[320], which first holds
 * first) and the bed's rsh agent as --agent-launcher, training w_elastic
 * 12 steps. */
static void start_discovery(const char *max, const char *first,
                            char *const env[], char *dir, char *list,
                            hkt_proc *p) {
  char script[320];
  assert_int_equal(hkt_mkdtemp("hk-discovery-", dir, 256), 0);
  snprintf(list, 320, "%s/hosts", dir);
  snprintf(script, sizeof script, "%s/discover.sh", dir);
  write_file(list, first);
  char body[400];
  snprintf(body, sizeof body, "#!/bin/sh\nexec cat '%s'\n", list);
  write_file(script, body);
  assert_int_equal(chmod(script, 0755), 0);
  char ep[64], agent[200];
  snprintf(ep, sizeof ep, "%s:%s", bed.host[0], PORT);
  snprintf(agent, sizeof agent, "%s/agent", bed.dir);
  char *argv[] = {"ip",
                  "netns",
                  "exec",
                  bed.ns[0],
                  HKRUN_PATH,
                  "-v",
                  "--rdzv-endpoint",
                  ep,
                  "-np",
                  "2",
                  "--min-np",
                  "2",
                  "--max-np",
                  (char *)max,
                  "--host-discovery-script",
                  script,
                  "--agent-launcher",
                  agent,
                  W_ELASTIC,
                  "12",
                  (char *)commit_every,
                  "-1",
                  "-1",
                  NULL};
  assert_int_equal(hkt_start(argv, env, p), 0);
}

/* An address of the bed's subnet that no host has, into out[64]. */
static void no_host(char *out) {
  snprintf(out, 64, "%s", bed.host[0]);
  snprintf(strrchr(out, '.'), 8, ".200");
}

/* hkrun said that host h's launcher failed and that h is blacklisted. */
static void expect_launch_failed(const char *err, const char *h) {
  char line[300];
  snprintf(line, sizeof line,
           "host %s (%s): its launcher exited with status 255 before its "
           "agent joined",
           h, h);
  if (!strstr(err, line))
    fail_msg("no '%s' in:\n%s", line, err);
  snprintf(line, sizeof line,
           "host %s is blacklisted for the rest of the job (failure 1; no "
           "--blacklist-cooldown-range)",
           h);
  if (!strstr(err, line))
    fail_msg("no '%s' in:\n%s", line, err);
}

static void test_discovery(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", "W_ELASTIC_JOIN_STEP=8", NULL};
  char dir[256], list[320], text[256], nowhere[64];
  no_host(nowhere);
  snprintf(text, sizeof text, "%s:2\n%s:2\n", bed.host[1], nowhere);
  hkt_proc p;
  start_discovery("6", text, env, dir, list, &p);
  if (hkt_wait_line(&p, "waiting for workers to join at step 8", JOB_S, NULL) !=
      0)
    fail_msg("the job of 4 did not wait at step 8");
  snprintf(text, sizeof text, "%s:2\n%s:2\n%s:2\n", bed.host[1], nowhere,
           bed.host[2]);
  write_file(list, text);
  hkt_result r;
  hkt_finish(&p, JOB_S, &r);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\n%s\n%s", r.exit_code, r.out, r.err);
  expect_launch_failed(r.err, nowhere);
  char line[300];
  for (int h = 1; h < 3; h++) {
    snprintf(line, sizeof line, "starting an agent on %s (%s) for 2 workers",
             bed.host[h], bed.host[h]);
    if (hkt_count_lines(r.err, line) != 1)
      fail_msg("no one '%s' in:\n%s", line, r.err);
  }
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5};
  hkt_elastic_replay(all, 4, all, 6, 8, 12, want, sizeof want);
  expect_finals(r.out, "the job", all, all, 6, 6, want);
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 6);
  for (int k = 4; k < 6; k++) {
    snprintf(line, sizeof line,
             "[%d] joined at step 8 as rank %d of 6 (slot %d)\n", k, k, k);
    if (!strstr(r.out, line))
      fail_msg("no '%s' in:\n%s", line, r.out);
  }
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
  expect_nothing_left();
}

/* The first slot hkrun -v gave host h's agent ("agent on host H (IP:PORT)
 * joined: 2 workers, slots A..B"), or -1. */
static int slots_of(const char *err, int h) {
  char key[96];
  snprintf(key, sizeof key, "(%s:", bed.host[h]);
  for (const char *at = err; (at = strstr(at, key)); at++) {
    const char *sl = strstr(at, "joined: 2 workers, slots ");
    const char *nl = strchr(at, '\n');
    if (sl && (!nl || sl < nl))
      return atoi(sl + strlen("joined: 2 workers, slots "));
  }
  return -1;
}

static void test_discovery_after_loss(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80], stop[96];
  make_secret(secret, sizeof secret);
  snprintf(stop, sizeof stop, "W_ELASTIC_STOP=%s:6", bed.host[2]);
  char *env[] = {secret, "HK_TIMEOUT_S=3", "W_ELASTIC_JOIN_STEP=8", stop, NULL};
  char dir[256], list[320], text[256], nowhere[64];
  no_host(nowhere);
  snprintf(text, sizeof text, "%s:2\n%s:2\n%s:2\n", bed.host[1], bed.host[2],
           nowhere);
  hkt_proc p;
  start_discovery("8", text, env, dir, list, &p);
  if (hkt_wait_lines(&p, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 2's workers did not stop at step 6");
  assert_int_equal(hkt_bed_link(&bed, 2, 1), 0); /* host 2's cable out */
  if (hkt_wait_line(&p, "waiting for workers to join at step 8", JOB_S, NULL) !=
      0)
    fail_msg("the job of 4 did not wait at step 8");
  /* the cluster replaced host 2 with host 3 */
  snprintf(text, sizeof text, "%s:2\n%s:2\n%s:2\n", bed.host[1], nowhere,
           bed.host[3]);
  write_file(list, text);
  hkt_result r;
  hkt_finish(&p, JOB_S, &r);
  int up = hkt_bed_link(&bed, 2, 0);
  if (r.exit_code != 0)
    fail_msg("hkrun exited %d\n%s\n%s", r.exit_code, r.out, r.err);
  expect_launch_failed(r.err, nowhere);
  /* hosts 1 and 2 took slots 2-5 in the order they joined; host 3 the
   * two never taken */
  const int s1 = slots_of(r.err, 1), s2 = slots_of(r.err, 2),
            s3 = slots_of(r.err, 3);
  if (!((s1 == 2 && s2 == 4) || (s1 == 4 && s2 == 2)) || s3 != 6)
    fail_msg("slots %d, %d and %d for hosts 1, 2 and 3 in:\n%s", s1, s2, s3,
             r.err);
  const int six[] = {0, 1, 2, 3, 4, 5};
  const int four[] = {0, 1, s1, s1 + 1};
  const int again[] = {0, 1, s1, s1 + 1, 6, 7};
  char want[512];
  hkt_elastic_replay3(six, 6, four, 4, 4, again, 6, 8, 12, want, sizeof want);
  const int left_slots[] = {0, 1, s1, s1 + 1, 6, 7},
            left_ranks[] = {0, 1, 2, 3, 4, 5};
  expect_finals(r.out, "the job", left_slots, left_ranks, 6, 6, want);
  assert_int_equal(hkt_count_lines(r.out, "final slot="), 6);
  assert_int_equal(hkt_count_lines(r.out, "joined at step 8 as rank "), 2);
  assert_int_equal(hkt_count_lines(r.out, "admitted: rank "), 4);
  assert_int_equal(up, 0);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
  expect_nothing_left();
}

static void test_two_hosts_lost(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, "HK_TIMEOUT_S=3", NULL};
  const char *const kill[3][2] = {{"-1", "-1"}, {"-2", "6"}, {"-2", "6"}};
  hkt_proc p[3];
  start_three("4", W_ELASTIC, kill, NULL, NULL, env, p);
  for (int h = 1; h < 3; h++)
    if (hkt_wait_lines(&p[h], "stopped at step 6", 2, JOB_S) != 0)
      fail_msg("host %d's workers did not reach step 6", h);
  const double t0 = hkt_now();
  assert_int_equal(hkt_bed_link(&bed, 1, 1), 0);
  assert_int_equal(hkt_bed_link(&bed, 2, 1), 0);
  hkt_result r[3];
  for (int h = 0; h < 3; h++)
    hkt_finish(&p[h], JOB_S, &r[h]);
  const double took = hkt_now() - t0;
  int up = hkt_bed_link(&bed, 1, 0) | hkt_bed_link(&bed, 2, 0);
  const char *why = "elastic job below --min-np 4: 2 workers left, 2 more "
                    "needed (lost: rank ";
  if (r[0].exit_code == 0 || !strstr(r[0].err, why))
    fail_msg("host 0's agent exited %d, expected non-zero and '%s' in:\n%s\n%s",
             r[0].exit_code, why, r[0].out, r[0].err);
  /* both ranks left fail naming it */
  for (int k = 0; k < 2; k++) {
    char line[128];
    snprintf(line, sizeof line, "[%d] reset failed: ", k);
    char *at = strstr(r[0].out, line);
    if (!at || !strstr(at, why))
      fail_msg("no '%s...%s' in host 0's output:\n%s\n%s", line, why, r[0].out,
               r[0].err);
  }
  for (int h = 1; h < 3; h++)
    expect_rendezvous_lost(&r[h], h);
  fprintf(stderr, "two_hosts_lost: every agent ended %.2f s after the cuts\n",
          took);
  assert_true(took < 30);
  assert_int_equal(up, 0);
  for (int h = 0; h < 3; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

static void test_lost_while_reforming(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  /* host 2 stops at step 6 (to be killed); slot 2 (host 1) will not call
   * hk_elastic_reset, so the job is still re-forming when host 1 goes */
  const char *const kill[3][2] = {{"-1", "-1"}, {"-1", "-1"}, {"-2", "6"}};
  hkt_proc p[3];
  start_three("2", W_ELASTIC, kill, "2", "never", env, p);
  if (hkt_wait_lines(&p[2], "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 2's workers did not reach step 6");
  assert_true(kill_host(2) >= 3);
  if (hkt_wait_line(&p[1], "never calling hk_elastic_reset", JOB_S, NULL) != 0)
    fail_msg("host 1's slot 2 did not reach the re-form");
  assert_true(kill_host(1) >= 3);
  hkt_result r[3];
  for (int h = 0; h < 3; h++)
    hkt_finish(&p[h], JOB_S, &r[h]);
  assert_int_equal(r[1].signal, SIGKILL);
  assert_int_equal(r[2].signal, SIGKILL);
  if (r[0].exit_code != 0)
    fail_msg("host 0's agent exited %d\n%s\n%s", r[0].exit_code, r[0].out,
             r[0].err);
  assert_non_null(strstr(r[0].err, "the elastic job goes on with 4 workers "
                                   "(--min-np 2)"));
  assert_non_null(strstr(r[0].err, "the elastic job goes on with 2 workers "
                                   "(--min-np 2)"));
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5}, left[] = {0, 1};
  hkt_elastic_replay(all, 6, left, 2, 4, 12, want, sizeof want);
  expect_finals(r[0].out, "host 0", left, left, 2, 2, want);
  assert_int_equal(hkt_count_lines(r[0].out, "final slot="), 2);
  /* the re-form with 4 never completed (slot 2 held it): each re-formed
   * once, as 2, from the commit of step 4 */
  assert_int_equal(hkt_count_lines(r[0].out, "reset: rank "), 2);
  assert_int_equal(
      hkt_count_lines(r[0].out, "[0] reset: rank 0 of 2 (slot 0) from step 4"),
      1);
  assert_int_equal(
      hkt_count_lines(r[0].out, "[1] reset: rank 1 of 2 (slot 1) from step 4"),
      1);
  for (int h = 0; h < 3; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

static void test_lost_while_meshing(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  /* commits at steps 0 and 6 only: host 2 stops at step 6 (after its
   * commit), host 1 at step 9 of the next generation, so that the 2 left
   * restore step 6's commit however far the generation of 4 got */
  const char *const kill[3][2] = {{"-1", "-1"}, {"-2", "9"}, {"-2", "6"}};
  hkt_proc p[3];
  commit_every = "6";
  start_three("2", W_ELASTIC, kill, NULL, NULL, env, p);
  commit_every = "4";
  if (hkt_wait_lines(&p[2], "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 2's workers did not reach step 6");
  assert_true(kill_host(2) >= 3);
  /* the generation of 4 has its peer table: they are connecting */
  if (hkt_wait_line(&p[0], ", 4 ranks", JOB_S, NULL) != 0)
    fail_msg("host 0's agent did not form the generation of 4");
  assert_true(kill_host(1) >= 3);
  hkt_result r[3];
  for (int h = 0; h < 3; h++)
    hkt_finish(&p[h], JOB_S, &r[h]);
  assert_int_equal(r[1].signal, SIGKILL);
  assert_int_equal(r[2].signal, SIGKILL);
  if (r[0].exit_code != 0)
    fail_msg("host 0's agent exited %d\n%s\n%s", r[0].exit_code, r[0].out,
             r[0].err);
  char want[512];
  const int all[] = {0, 1, 2, 3, 4, 5}, left[] = {0, 1};
  hkt_elastic_replay(all, 6, left, 2, 6, 12, want, sizeof want);
  expect_finals(r[0].out, "host 0", left, left, 2, 2, want);
  assert_int_equal(hkt_count_lines(r[0].out, "final slot="), 2);
  for (int h = 0; h < 3; h++)
    hkt_result_free(&r[h]);
  expect_nothing_left();
}

static void test_device_link_cut(void **s) {
  (void)s;
  hkt_bed_need(&bed);
  char secret[80];
  make_secret(secret, sizeof secret);
  /* hierarchical: each host's ranks reduce through its device
   * communicator (the emulated device's) */
  char *env[] = {secret, "HK_DEVICE=emu", "HK_HIERARCHICAL_ALLREDUCE=1",
                 "HK_TIMEOUT_S=3", NULL};
  hkt_proc p0, p1;
  start_worker_of(0, "2", "2", "4", W_ELASTIC_DEV, "-1", "-1", NULL, NULL, env,
                  &p0);
  if (hkt_wait_line(&p0, "rendezvous listening on", JOB_S, NULL) != 0)
    fail_msg("host 0's agent did not listen");
  start_worker_of(1, "2", "2", "4", W_ELASTIC_DEV, "-2", "6", NULL, NULL, env,
                  &p1);
  if (hkt_wait_lines(&p1, "stopped at step 6", 2, JOB_S) != 0)
    fail_msg("host 1's workers did not reach step 6");
  assert_int_equal(hkt_bed_link(&bed, 1, 1), 0);
  hkt_result r0, r1;
  hkt_finish(&p0, JOB_S, &r0);
  hkt_finish(&p1, JOB_S, &r1);
  int up = hkt_bed_link(&bed, 1, 0);
  if (r0.exit_code != 0 || r1.exit_code != 1)
    fail_msg("agents exited %d and %d\nhost 0:\n%s\n%s\nhost 1:\n%s\n%s",
             r0.exit_code, r1.exit_code, r0.out, r0.err, r1.out, r1.err);
  char want[512];
  const int all[] = {0, 1, 2, 3}, left[] = {0, 1};
  hkt_elastic_replay(all, 4, left, 2, 4, 12, want, sizeof want);
  expect_finals(r0.out, "host 0", left, left, 2, 2, want);
  /* host 0's first rank made an id for each generation's communicator
   * (the first among host 0's ranks in the hierarchical allreduce, the
   * second among the 2 left); both ranks aborted the first one */
  const char *dev[] = {"[0] device slot=0 ids=2 aborted=1\n",
                       "[1] device slot=1 ids=0 aborted=1\n"};
  for (int k = 0; k < 2; k++)
    if (!strstr(r0.out, dev[k]))
      fail_msg("no '%s' in host 0's output:\n%s", dev[k], r0.out);
  assert_int_equal(hkt_count_lines(r1.out, "final slot="), 0);
  assert_int_equal(up, 0);
  hkt_result_free(&r0);
  hkt_result_free(&r1);
  expect_nothing_left();
}

/* Runs hkrun with argv and env; expects exit 2 and want on stderr. */
static void expect_refused(char *argv[], char *env[], const char *want) {
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 30, &r), 0);
  if (r.exit_code != 2 || !strstr(r.err, want))
    fail_msg("exit %d, expected 2 and '%s' in:\n%s", r.exit_code, want, r.err);
  hkt_result_free(&r);
}

static void test_bad_input(void **s) {
  (void)s;
  char *no_secret[] = {HKRUN_PATH,
                       "--rdzv-endpoint",
                       "127.0.0.1:" PORT,
                       "-np",
                       "1",
                       "--max-np",
                       "1",
                       "true",
                       NULL};
  expect_refused(no_secret, NULL,
                 "hkrun: --rdzv-endpoint: HK_SECRET is not set: every agent "
                 "of the job needs the same secret in HK_SECRET (64 hex "
                 "digits, e.g. from `openssl rand -hex 32`)\n");
  char secret[80];
  make_secret(secret, sizeof secret);
  char *env[] = {secret, NULL};
  char *no_port[] = {HKRUN_PATH, "--rdzv-endpoint", "10.0.0.1", "-np",
                     "1",        "--max-np",        "1",        "true",
                     NULL};
  expect_refused(no_port, env,
                 "hkrun: --rdzv-endpoint: '10.0.0.1' is not HOST:PORT (the "
                 "rendezvous agent's address and a port 1..65535)\n");
  char *no_max[] = {
      HKRUN_PATH, "--rdzv-endpoint", "127.0.0.1:" PORT, "-np", "1", "true",
      NULL};
  expect_refused(no_max, env,
                 "hkrun: --rdzv-endpoint: --max-np N is required (the job's "
                 "workers over every agent; it starts when N have joined)\n");
  /* the script is the endpoint's agent's: another agent refuses it */
  char *not_endpoint[] = {HKRUN_PATH,
                          "--rdzv-endpoint",
                          "10.255.255.1:" PORT,
                          "-np",
                          "1",
                          "--max-np",
                          "2",
                          "--host-discovery-script",
                          "/bin/true",
                          "true",
                          NULL};
  expect_refused(not_endpoint, env,
                 "hkrun: --host-discovery-script: only the agent holding "
                 "--rdzv-endpoint 10.255.255.1:" PORT " runs it (10.255.255.1 "
                 "is not this host's address)\n");
  /* the endpoint's agent whose script fails at the start */
  char *bad_script[] = {HKRUN_PATH,
                        "--rdzv-endpoint",
                        "127.0.0.1:" PORT,
                        "-np",
                        "1",
                        "--max-np",
                        "2",
                        "--host-discovery-script",
                        "exit 3",
                        "true",
                        NULL};
  expect_refused(bad_script, env,
                 "hkrun: --host-discovery-script exit 3 exited with status "
                 "3\n");
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static int bed_setup(void **s) {
  (void)s;
  return hkt_bed_up(&bed, NETBED_SH, 4, "none") == 0 ? 0 : -1;
}

static int bed_teardown(void **s) {
  (void)s;
  return hkt_bed_down(&bed, NETBED_SH) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  hkt_setup();
  if (argc > 1) /* a pattern of the tests to run (cmocka's filter) */
    cmocka_set_test_filter(argv[1]);
  unsetenv("HK_SECRET"); /* the tests give it where they mean to */
  const struct CMUnitTest plain[] = {cmocka_unit_test(test_bad_input)};
  const struct CMUnitTest on_bed[] = {
      cmocka_unit_test(test_worker_lost),
      cmocka_unit_test(test_host_lost),
      cmocka_unit_test(test_link_cut),
      cmocka_unit_test(test_endpoint_only),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_endpoint_lost),
      cmocka_unit_test(test_bind),
      cmocka_unit_test(test_link_cut_3),
      cmocka_unit_test(test_host_joins),
      cmocka_unit_test(test_joins_below_min_np),
      cmocka_unit_test(test_discovery),
      cmocka_unit_test(test_discovery_after_loss),
      cmocka_unit_test(test_two_hosts_lost),
      cmocka_unit_test(test_lost_while_reforming),
      cmocka_unit_test(test_lost_while_meshing),
      cmocka_unit_test(test_device_link_cut),
  };
  int failed = cmocka_run_group_tests_name("agents", plain, NULL, NULL);
  failed += cmocka_run_group_tests_name("agents_bed", on_bed, bed_setup,
                                        bed_teardown);
  return failed;
}
