/*
 * test_shmctl - the negotiation's control messages between rank 0 and
 * the ranks of its host go through the host's shared-memory segment
 * (collectives/transport/ctrl.h), the ranks of other hosts and
 * HK_INTRA_TRANSPORT=tcp keep TCP (worker program: workers/w_shmctl.c):
 *  - np 1, 2, 3, 4 and 8 on one host: many tensors fused and alone and a
 *    process set, every result against the serial sum; every control
 *    frame of every rank went through a ring, none over the socket;
 *  - the same at np 4 with HK_INTRA_TRANSPORT=tcp: every frame over TCP;
 *  - np 4 on two pseudo-hosts of 2 (hkt_hosts_cmd): rank 1 on rings,
 *    ranks 2 and 3 over TCP, rank 0 both;
 *  - kill -9 of rank 1 (on rings with rank 0) while the ranks negotiate
 *    round after round: every survivor fails naming it within
 *    HK_TIMEOUT_S, and nothing new is in /dev/shm;
 *  - kill -9 of rank 1 while the others wait in the negotiation for a
 *    tensor it never submitted, with hkrun stopped (SIGSTOP) meanwhile so
 *    that no abort of hkrun's tells them: rank 0 learns it from the
 *    control socket kept beside the rings (no collective runs) and tells
 *    the others; all exit within HK_TIMEOUT_S naming rank 1.
 */
#include <dirent.h>
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

#define W_SHMCTL WORKER_DIR "/w_shmctl"

/* What w_shmctl printed about rank r's control frames: 0 when found. */
static int counts_of(const char *out, int r, unsigned long long c[4]) {
  char key[32];
  snprintf(key, sizeof key, "ctrl rank %d shm ", r);
  const char *p = strstr(out, key);
  return p && sscanf(p + strlen(key), "%llu %llu tcp %llu %llu", &c[0], &c[1],
                     &c[2], &c[3]) == 4
             ? 0
             : -1;
}

/* Runs w_shmctl run ITERS at np (hosts of `local` ranks, 0: one host)
 * with env; checks every rank said ok. The output is the caller's. */
static void run_job(int np, int local, const char *transport, int iters,
                    hkt_result *r) {
  char nps[16], args[32], cmd[1024], tr[64];
  snprintf(nps, sizeof nps, "%d", np);
  snprintf(args, sizeof args, "run %d", iters);
  snprintf(tr, sizeof tr, "HK_INTRA_TRANSPORT=%s", transport);
  hkt_hosts_cmd(cmd, sizeof cmd, local, W_SHMCTL, args);
  char *env[] = {tr, "HK_TIMEOUT_S=20", NULL};
  char *argv[] = {HKRUN_PATH, "-np", nps, "sh", "-c", cmd, NULL};
  int rc = hkt_run(argv, env, 240, r);
  if (rc != 0 || r->exit_code != 0 ||
      hkt_count_lines(r->out, "shmctl ok") != np)
    fail_msg("np %d (hosts of %d) over %s: rc=%d exit=%d\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             np, local, transport, rc, r->exit_code, r->out, r->err);
}

/* Rank r's frames: on rings only (want_shm 1, want_tcp 0), over TCP only,
 * or both (rank 0 with ranks on another host); none at np 1. */
static void expect(const hkt_result *res, int r, int want_shm, int want_tcp) {
  unsigned long long c[4];
  if (counts_of(res->out, r, c) != 0)
    fail_msg("rank %d printed no counts:\n%s", r, res->out);
  int shm = c[0] > 0 && c[1] > 0, tcp = c[2] > 0 && c[3] > 0;
  int no_shm = !c[0] && !c[1], no_tcp = !c[2] && !c[3];
  if ((want_shm ? !shm : !no_shm) || (want_tcp ? !tcp : !no_tcp))
    fail_msg("rank %d: %llu frames sent and %llu received through shared "
             "memory, %llu and %llu over TCP; expected %s through shared "
             "memory, %s over TCP",
             r, c[0], c[1], c[2], c[3], want_shm ? "some" : "none",
             want_tcp ? "some" : "none");
}

typedef struct one_host {
  int np;
} one_host;

/* One host: every frame through the rings (none at np 1). */
static void test_one_host(void **state) {
  const one_host *c = *state;
  hkt_result r;
  run_job(c->np, 0, "auto", 6, &r);
  for (int i = 0; i < c->np; i++)
    expect(&r, i, c->np > 1, 0);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* HK_INTRA_TRANSPORT=tcp: every frame over the sockets. */
static void test_tcp_setting(void **state) {
  (void)state;
  hkt_result r;
  run_job(4, 0, "tcp", 3, &r);
  for (int i = 0; i < 4; i++)
    expect(&r, i, 0, 1);
  hkt_result_free(&r);
}

/* Two pseudo-hosts of two: rank 0's host-mate on rings, the others TCP. */
static void test_mixed_hosts(void **state) {
  (void)state;
  hkt_result r;
  run_job(4, 2, "auto", 4, &r);
  expect(&r, 0, 1, 1);
  expect(&r, 1, 1, 0);
  expect(&r, 2, 0, 1);
  expect(&r, 3, 0, 1);
  hkt_result_free(&r);
}

/* /dev/shm's entries, one per line, into out. */
static void list_dev_shm(char *out, size_t cap) {
  out[0] = '\0';
  DIR *d = opendir("/dev/shm");
  if (!d)
    return;
  struct dirent *e;
  size_t at = 0;
  while ((e = readdir(d)) && at + 2 < cap) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    int w = snprintf(out + at, cap - at, "%s\n", e->d_name);
    at += w > 0 ? (size_t)w : 0;
  }
  closedir(d);
}

/* kill -9 of rank 1 mid-round: the survivors fail naming it. */
static void test_kill9_mid_round(void **state) {
  (void)state;
  static char before[16384], after[16384];
  list_dev_shm(before, sizeof before);
  char *env[] = {"HK_INTRA_TRANSPORT=auto", "HK_TIMEOUT_S=8", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", W_SHMCTL, "kill", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  assert_int_equal(hkt_wait_lines(&p, "ready pid=", 4, 120), 0);
  long pid1 = 0;
  const char *at = p.out.data;
  for (int i = 0; i < 4 && at; i++) {
    at = strstr(at, "[1] ready pid=");
    if (at) {
      pid1 = atol(at + strlen("[1] ready pid="));
      break;
    }
  }
  if (pid1 <= 0)
    fail_msg("no pid of rank 1 in:\n%s", p.out.data);
  assert_int_equal(kill((pid_t)pid1, SIGKILL), 0);
  double killed = hkt_now();
  hkt_result r;
  assert_int_equal(hkt_finish(&p, 30, &r), 0);
  double took = hkt_now() - killed;
  if (!r.exited || r.exit_code != 128 + 9 || took >= 8)
    fail_msg("hkrun: exit=%d signal=%d after %.1f s\nstdout:\n%s\nstderr:\n%s",
             r.exit_code, r.signal, took, r.out, r.err);
  char who[64];
  snprintf(who, sizeof who, "rank 1 (pid %ld) was killed by signal 9", pid1);
  for (int s = 0; s < 4; s++) {
    if (s == 1)
      continue;
    char line[64];
    snprintf(line, sizeof line, "rank %d failed: peer lost: ", s);
    const char *l = strstr(r.out, line);
    const char *eol = l ? strchr(l, '\n') : NULL;
    if (!l || !strstr(l, who) || (eol && strstr(l, who) > eol))
      fail_msg("rank %d did not fail naming rank 1 (%s):\nstdout:\n%s\n"
               "stderr:\n%s",
               s, who, r.out, r.err);
  }
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  list_dev_shm(after, sizeof after);
  for (char *line = strtok(after, "\n"); line; line = strtok(NULL, "\n")) {
    char key[300];
    snprintf(key, sizeof key, "%s\n", line);
    if (!strstr(before, key))
      fail_msg("left in /dev/shm after the job: %s", line);
  }
}

/* The pid rank r printed as "[r] ready pid=", or -1. */
static long ready_pid(const char *out, int r) {
  char key[32];
  snprintf(key, sizeof key, "[%d] ready pid=", r);
  const char *at = strstr(out, key);
  return at ? atol(at + strlen(key)) : -1;
}

/* hkrun stopped, then kill -9 of rank 1, which the others wait for in the
 * negotiation: the survivors end by themselves, within HK_TIMEOUT_S,
 * naming it. */
static void test_kill9_hkrun_stopped(void **state) {
  (void)state;
  char *env[] = {"HK_INTRA_TRANSPORT=auto", "HK_TIMEOUT_S=8", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", W_SHMCTL, "hold", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  assert_int_equal(hkt_wait_lines(&p, "ready pid=", 4, 120), 0);
  long pid[4];
  for (int r = 0; r < 4; r++)
    if ((pid[r] = ready_pid(p.out.data, r)) <= 0)
      fail_msg("no pid of rank %d in:\n%s", r, p.out.data);
  assert_int_equal(kill(p.pid, SIGSTOP), 0); /* hkrun tells nobody */
  assert_int_equal(kill((pid_t)pid[1], SIGKILL), 0);
  double killed = hkt_now();
  int late = -1;
  for (int r = 0; r < 4; r++)
    if (r != 1 && hkt_wait_gone((pid_t)pid[r], killed + 8 - hkt_now()) != 0 &&
        late < 0)
      late = r;
  double took = hkt_now() - killed;
  assert_int_equal(kill(p.pid, SIGCONT), 0);
  hkt_result r;
  assert_int_equal(hkt_finish(&p, 30, &r), 0);
  if (late >= 0)
    fail_msg("rank %d still ran %.1f s after rank 1 was killed (HK_TIMEOUT_S "
             "8)\nstdout:\n%s\nstderr:\n%s",
             late, took, r.out, r.err);
  for (int s = 0; s < 4; s++) {
    if (s == 1)
      continue;
    char line[64];
    snprintf(line, sizeof line, "rank %d failed: peer lost: ", s);
    const char *l = strstr(r.out, line);
    const char *eol = l ? strchr(l, '\n') : NULL;
    const char *named = l ? strstr(l, "rank 1 ") : NULL;
    if (!l || !named || (eol && named > eol))
      fail_msg("rank %d did not fail naming rank 1:\nstdout:\n%s\n"
               "stderr:\n%s",
               s, r.out, r.err);
    print_message("%.*s\n", eol ? (int)(eol - l) : 200, l);
  }
  print_message("survivors gone %.1f s after the kill\n", took);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      HKT_CASE_TEST(np1, test_one_host, one_host, 1),
      HKT_CASE_TEST(np2, test_one_host, one_host, 2),
      HKT_CASE_TEST(np3, test_one_host, one_host, 3),
      HKT_CASE_TEST(np4, test_one_host, one_host, 4),
      HKT_CASE_TEST(np8, test_one_host, one_host, 8),
      cmocka_unit_test(test_tcp_setting),
      cmocka_unit_test(test_mixed_hosts),
      cmocka_unit_test(test_kill9_mid_round),
      cmocka_unit_test(test_kill9_hkrun_stopped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
