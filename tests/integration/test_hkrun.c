/*
 * test_hkrun.c - hkrun end to end, with /bin/sh programs as workers (they
 * never call hk_init, which hkrun must cope with), and with the test
 * itself playing a worker against the rendezvous server.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>

#include <cmocka.h>

#include "common/auth.h"
#include "coordinator/wire.h"
#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif

/* Generous deadlines: a correct hkrun meets them with seconds to spare. */
#define FAST_S 10.0
#define SLOW_S 60.0

/* ---- helpers ---- */

/* Splits text into lines (without '\n'); frees with free_lines. */
static char **split_lines(const char *text, int *n) {
  int cap = 16, k = 0;
  char **v = malloc((size_t)cap * sizeof *v);
  while (text && *text) {
    const char *nl = strchr(text, '\n');
    size_t len = nl ? (size_t)(nl - text) : strlen(text);
    if (k == cap)
      v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
    v[k++] = strndup(text, len);
    text += len + (nl ? 1 : 0);
  }
  *n = k;
  return v;
}

static void free_lines(char **v, int n) {
  for (int i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Asserts that text consists of exactly the given lines, in any order. */
static void assert_lines_any_order(const char *text, const char **expect,
                                   int n_expect) {
  int n;
  char **got = split_lines(text, &n);
  if (n != n_expect)
    fail_msg("expected %d lines, got %d:\n%s", n_expect, n, text);
  const char **want = malloc((size_t)n_expect * sizeof *want);
  memcpy(want, expect, (size_t)n_expect * sizeof *want);
  qsort(got, (size_t)n, sizeof *got, cmp_str);
  qsort(want, (size_t)n_expect, sizeof *want, cmp_str);
  for (int i = 0; i < n; i++)
    assert_string_equal(got[i], want[i]);
  free(want);
  free_lines(got, n);
}

/* Finds "<key><int>" in the line of text containing `marker` and returns
 * the int, or -1. */
static long find_int_after(const char *text, const char *marker,
                           const char *key) {
  const char *line = strstr(text, marker);
  if (!line)
    return -1;
  const char *k = strstr(line, key);
  const char *eol = strchr(line, '\n');
  if (!k || (eol && k > eol))
    return -1;
  return strtol(k + strlen(key), NULL, 10);
}

/* Asserts that no process the job started is alive and none was left
 * behind (re-parented to the test). A process hkrun SIGKILLed may take a
 * moment to die (delivery is asynchronous), hence the deadline. */
static void assert_no_process_left(const long *pids, int n) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0 && hkt_wait_gone((pid_t)pids[i], 5.0) != 0) {
      kill((pid_t)pids[i], SIGKILL);
      hkt_kill_orphans(); /* so that later tests start clean */
      fail_msg("worker pid %ld is still alive", pids[i]);
    }
  pid_t left[16];
  int k = hkt_orphans(left, 16);
  for (int i = 0; i < k && i < 16; i++)
    if (hkt_wait_gone(left[i], 5.0) != 0) {
      hkt_kill_orphans();
      fail_msg("%d process(es) left behind, e.g. pid %d", k, (int)left[i]);
    }
}

static void dump(const hkt_result *r) {
  fprintf(stderr,
          "--- exit %d signal %d timed_out %d elapsed %.2f s\n--- stdout:\n"
          "%.4000s\n--- stderr:\n%.4000s\n",
          r->exit_code, r->signal, r->timed_out, r->elapsed_s, r->out, r->err);
}

static void assert_exit(const hkt_result *r, int code) {
  if (r->timed_out || !r->exited || r->exit_code != code) {
    dump(r);
    fail_msg("expected exit status %d", code);
  }
}

/* Asserts that the job's stderr contains expect (dumps the job if not). */
static void assert_err_has(const hkt_result *r, const char *expect) {
  if (!strstr(r->err, expect)) {
    dump(r);
    fail_msg("stderr lacks '%s'", expect);
  }
}

/* The command line "hkrun FLAGS sh -c SCRIPT": flags are split at spaces
 * into words (a copy in words[]); script is used as is, not copied. */
typedef struct {
  char *argv[16];
  char words[128];
} sh_job;

static char **sh_job_argv(sh_job *j, const char *flags, const char *script) {
  int k = 0;
  j->argv[k++] = HKRUN_PATH;
  snprintf(j->words, sizeof j->words, "%s", flags);
  char *save = NULL;
  for (char *w = strtok_r(j->words, " ", &save); w && k < 12;
       w = strtok_r(NULL, " ", &save))
    j->argv[k++] = w;
  j->argv[k++] = "sh";
  j->argv[k++] = "-c";
  j->argv[k++] = (char *)script;
  j->argv[k] = NULL;
  return j->argv;
}

/* Runs hkrun FLAGS sh -c SCRIPT to its end (FAST_S at most) into *r
 * (caller: hkt_result_free) and asserts that it exited 0. */
static void run_ok(const char *flags, const char *script, hkt_result *r) {
  sh_job job;
  hkt_run(sh_job_argv(&job, flags, script), NULL, FAST_S, r);
  assert_exit(r, 0);
}

/* ---- environment, output prefixing ---- */

static void test_env_and_tags(void **state) {
  (void)state;
  sh_job job;
  char **argv = sh_job_argv(&job, "-np 3 --",
                            "echo rank=$HK_RANK size=$HK_SIZE "
                            "local=$HK_LOCAL_RANK/$HK_LOCAL_SIZE; "
                            "echo \"secret=$HK_SECRET rdv=$HK_RENDEZVOUS "
                            "launcher=$HK_LAUNCHER_PID\" >&2");
  /* Inherited values of hkrun's own variables must not leak through. */
  char *env[] = {"HK_RANK=99", "HK_SECRET=nope", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  pid_t hkrun_pid = p.pid;
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 0);
  const char *expect[] = {"[0] rank=0 size=3 local=0/3",
                          "[1] rank=1 size=3 local=1/3",
                          "[2] rank=2 size=3 local=2/3"};
  assert_lines_any_order(r.out, expect, 3);

  int n;
  char **lines = split_lines(r.err, &n);
  assert_int_equal(n, 3);
  char first_secret[65] = "", first_port[16] = "";
  for (int i = 0; i < n; i++) {
    int rank, pid;
    char secret[80], port[16];
    assert_int_equal(sscanf(lines[i],
                            "[%d] secret=%79s rdv=127.0.0.1:%15[0-9] "
                            "launcher=%d",
                            &rank, secret, port, &pid),
                     4);
    assert_int_equal(strlen(secret), 64);
    assert_int_equal(strspn(secret, "0123456789abcdef"), 64);
    assert_true(atoi(port) > 0 && atoi(port) < 65536);
    assert_int_equal(pid, hkrun_pid);
    if (i == 0) { /* every rank gets the same secret and address */
      strcpy(first_secret, secret);
      strcpy(first_port, port);
    }
    assert_string_equal(secret, first_secret);
    assert_string_equal(port, first_port);
  }
  free_lines(lines, n);
  hkt_result_free(&r);
  assert_no_process_left(NULL, 0);
}

static void test_no_tag_output(void **state) {
  (void)state;
  hkt_result r;
  run_ok("-np 2 --no-tag-output", "echo line-$HK_RANK", &r);
  const char *expect[] = {"line-0", "line-1"};
  assert_lines_any_order(r.out, expect, 2);
  hkt_result_free(&r);
}

/* 4 workers x 2000 lines of 110 chars, each line written in two pieces:
 * every captured line is whole, prefixed with its writer's rank, and each
 * rank's lines arrive complete and in order. */
static void test_interleaving(void **state) {
  (void)state;
  enum { RANKS = 4, LINES = 2000 };
  char pad[101];
  memset(pad, 'x', 100);
  pad[100] = '\0';
  char script[512];
  snprintf(script, sizeof script,
           "i=0; while [ $i -lt %d ]; do printf '%%s:%%05d:' $HK_RANK $i; "
           "printf '%%s\\n' %s; i=$((i+1)); done",
           LINES, pad);
  sh_job job;
  hkt_result r;
  hkt_run(sh_job_argv(&job, "-np 4", script), NULL, SLOW_S, &r);
  assert_exit(&r, 0);
  int n;
  char **lines = split_lines(r.out, &n);
  assert_int_equal(n, RANKS * LINES);
  int next[RANKS] = {0};
  for (int i = 0; i < n; i++) {
    int prefix_rank, rank, seq, used = 0;
    if (sscanf(lines[i], "[%d] %d:%d:%n", &prefix_rank, &rank, &seq, &used) !=
            3 ||
        used == 0)
      fail_msg("malformed line %d: '%s'", i, lines[i]);
    assert_int_equal(prefix_rank, rank);
    assert_true(rank >= 0 && rank < RANKS);
    assert_int_equal(seq, next[rank]);
    next[rank]++;
    assert_string_equal(lines[i] + used, pad);
  }
  for (int k = 0; k < RANKS; k++)
    assert_int_equal(next[k], LINES);
  free_lines(lines, n);
  hkt_result_free(&r);
}

static void test_partial_last_line(void **state) {
  (void)state;
  hkt_result r;
  run_ok("-np 2",
         "printf 'first\\nno newline %s' $HK_RANK; printf 'err tail' >&2", &r);
  const char *expect[] = {"[0] first", "[0] no newline 0", "[1] first",
                          "[1] no newline 1"};
  assert_lines_any_order(r.out, expect, 4);
  const char *expect_err[] = {"[0] err tail", "[1] err tail"};
  assert_lines_any_order(r.err, expect_err, 2);
  assert_int_equal(r.out[r.out_len - 1], '\n');
  hkt_result_free(&r);
}

/* 150000 bytes without a newline come out as 65536 + 65536 + 18928, each
 * piece prefixed. */
static void test_long_line(void **state) {
  (void)state;
  hkt_result r;
  run_ok("-np 1", "head -c 150000 /dev/zero | tr '\\0' a", &r);
  int n;
  char **lines = split_lines(r.out, &n);
  assert_int_equal(n, 3);
  size_t sizes[3] = {65536, 65536, 150000 - 2 * 65536};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(strncmp(lines[i], "[0] ", 4), 0);
    assert_int_equal(strlen(lines[i]) - 4, sizes[i]);
    assert_int_equal(strspn(lines[i] + 4, "a"), sizes[i]);
  }
  free_lines(lines, n);
  hkt_result_free(&r);
}

/* Rank 0 gets hkrun's stdin; the others read /dev/null. */
static void test_stdin_goes_to_rank0(void **state) {
  (void)state;
  sh_job job;
  hkt_proc p;
  assert_int_equal(
      hkt_start(sh_job_argv(&job, "-np 2", "read x; echo \"got=$x\""), NULL,
                &p),
      0);
  assert_int_equal(write(p.in_fd, "hello\n", 6), 6);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 0);
  const char *expect[] = {"[0] got=hello", "[1] got="};
  assert_lines_any_order(r.out, expect, 2);
  hkt_result_free(&r);
}

/* hkrun's stdout is a pipe whose reader quits: hkrun must neither die of
 * SIGPIPE nor block; the job still succeeds. */
static void test_stdout_closed(void **state) {
  (void)state;
  char script[512];
  snprintf(script, sizeof script,
           "{ %s -np 2 -- sh -c 'i=0; while [ $i -lt 3000 ]; do "
           "echo line $i; i=$((i+1)); done'; echo hkrun-status=$? >&2; } "
           "| head -n 1",
           HKRUN_PATH);
  char *argv[] = {"sh", "-c", script, NULL};
  hkt_result r;
  hkt_run(argv, NULL, SLOW_S, &r);
  assert_exit(&r, 0);
  assert_int_equal(hkt_count_lines(r.out, "line"), 1);
  if (!strstr(r.err, "hkrun-status=0")) {
    dump(&r);
    fail_msg("hkrun did not exit 0 with its stdout closed");
  }
  hkt_result_free(&r);
}

/* ---- exit statuses and failures ---- */

static void test_rank1_exits_3(void **state) {
  (void)state;
  sh_job job;
  hkt_result r;
  hkt_run(
      sh_job_argv(&job, "-np 3", "echo pid=$$; [ $HK_RANK != 1 ] || exit 3"),
      NULL, FAST_S, &r);
  assert_exit(&r, 3);
  long pid1 = find_int_after(r.out, "[1] pid=", "pid=");
  assert_true(pid1 > 0);
  char expect[128];
  snprintf(expect, sizeof expect,
           "hkrun: rank 1 (pid %ld) exited with status 3\n", pid1);
  assert_err_has(&r, expect);
  hkt_result_free(&r);
}

/* Reads the worker pids from hkrun -v's "started rank R as pid P" lines. */
static void pids_from_verbose(const char *err, long *pids, int n) {
  for (int k = 0; k < n; k++) {
    char marker[64];
    snprintf(marker, sizeof marker, "hkrun: started rank %d as pid ", k);
    pids[k] = find_int_after(err, marker, "pid ");
    if (pids[k] <= 0)
      fail_msg("no pid for rank %d in:\n%s", k, err);
  }
}

/* C6: rank 0 exits 3 at once, ranks 1..3 wait forever. hkrun names rank 0,
 * waits the default 2 s grace period, terminates the others and exits 3. */
static void test_first_failure_terminates_others(void **state) {
  (void)state;
  sh_job job;
  hkt_result r;
  hkt_run(sh_job_argv(&job, "-np 4 -v",
                      "[ $HK_RANK != 0 ] || exit 3; exec sleep 1000"),
          NULL, FAST_S, &r);
  assert_exit(&r, 3);
  assert_true(r.elapsed_s < 10.0);
  assert_true(r.elapsed_s > 1.8); /* the grace period was honoured */
  long pids[4];
  pids_from_verbose(r.err, pids, 4);
  char expect[128];
  snprintf(expect, sizeof expect,
           "hkrun: rank 0 (pid %ld) exited with status 3\n", pids[0]);
  assert_err_has(&r, expect);
  /* The survivors were terminated, and hkrun said so. */
  assert_int_equal(hkt_count_lines(r.err, "was killed by signal 15"), 3);
  assert_non_null(strstr(r.err, "hkrun: sent SIGTERM to 3 worker(s)"));
  assert_no_process_left(pids, 4);
  hkt_result_free(&r);
}

/* Starts argv, whose ranks first..first+n-1 each print "ready pid=P";
 * waits for those n lines and reads their pids into pids[0..n-1]. */
static void start_ready_job(char *const *argv, hkt_proc *p, int first, int n,
                            long *pids) {
  assert_int_equal(hkt_start(argv, NULL, p), 0);
  assert_int_equal(hkt_wait_lines(p, "ready pid=", n, FAST_S), 0);
  for (int k = 0; k < n; k++) {
    char marker[32];
    snprintf(marker, sizeof marker, "[%d] ready pid=", first + k);
    pids[k] = find_int_after(p->out.data, marker, "pid=");
    assert_true(pids[k] > 0);
  }
}

/* Workers that ignore SIGTERM are SIGKILLed 2 s after it. Rank 0 fails
 * only once the others ignore SIGTERM (the test tells it via stdin). */
static void test_sigkill_after_sigterm(void **state) {
  (void)state;
  sh_job job;
  hkt_proc p;
  long pids[2];
  start_ready_job(
      sh_job_argv(&job, "-np 3 -v --grace-period 0",
                  "if [ $HK_RANK = 0 ]; then read x; exit 5; fi; "
                  "trap '' TERM; echo \"ready pid=$$\"; exec sleep 1000"),
      &p, 1, 2, pids);
  double t0 = hkt_now();
  assert_int_equal(write(p.in_fd, "go\n", 3), 3);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  double took = hkt_now() - t0;
  assert_exit(&r, 5);
  assert_true(took > 1.8 && took < 10.0);
  assert_int_equal(hkt_count_lines(r.err, "was killed by signal 9"), 2);
  assert_no_process_left(pids, 2);
  hkt_result_free(&r);
}

/* C5: kill -9 of one worker. */
static void test_kill9_one_worker(void **state) {
  (void)state;
  sh_job job;
  hkt_proc p;
  long pids[4];
  start_ready_job(sh_job_argv(&job, "-np 4 --grace-period 1",
                              "echo \"ready pid=$$\"; exec sleep 1000"),
                  &p, 0, 4, pids);
  double killed_at = hkt_now();
  assert_int_equal(kill((pid_t)pids[2], SIGKILL), 0);

  char expect[128];
  snprintf(expect, sizeof expect,
           "hkrun: rank 2 (pid %ld) was killed by signal 9 (Killed)", pids[2]);
  char *line = NULL;
  /* Reported promptly: before the grace period ends. */
  assert_int_equal(hkt_wait_line(&p, expect, 5.0, &line), 0);
  assert_string_equal(line, expect);
  free(line);

  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 128 + SIGKILL);
  assert_true(hkt_now() - killed_at < 10.0);
  assert_no_process_left(pids, 4);
  hkt_result_free(&r);
}

/* A signal to hkrun reaches every worker; hkrun exits 128+sig. *state
 * points to the signal (SIGTERM, SIGINT, or SIGHUP: a closed terminal
 * must not leave the workers, in their own sessions, running). */
static void test_signal_forwarded(void **state) {
  int sig = *(const int *)*state;
  sh_job job;
  hkt_proc p;
  long pids[3];
  start_ready_job(
      sh_job_argv(&job, "-np 3", "echo \"ready pid=$$\"; exec sleep 1000"), &p,
      0, 3, pids);
  assert_int_equal(kill(p.pid, sig), 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 128 + sig);
  assert_true(r.elapsed_s < 10.0);
  assert_no_process_left(pids, 3);
  hkt_result_free(&r);
}

/* Ctrl-C while the workers ignore SIGINT (busy in their own code): SIGINT
 * is forwarded, SIGTERM follows after the grace period and SIGKILL
 * shortly after, so every worker is gone within grace + 1 s, and hkrun
 * exits 130 as mpirun and horovodrun do. */
static void sigint_to_busy_workers(const char *traps, const char *last_sent) {
  char script[160];
  snprintf(script, sizeof script,
           "trap '' %s; echo \"ready pid=$$\"; exec sleep 1000", traps);
  sh_job job;
  hkt_proc p;
  long pids[3];
  start_ready_job(sh_job_argv(&job, "-np 3 -v --grace-period 1", script), &p, 0,
                  3, pids);
  double t0 = hkt_now();
  assert_int_equal(kill(p.pid, SIGINT), 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  double took = hkt_now() - t0;
  assert_exit(&r, 130);
  if (took < 0.9 || took > 1.0 + 1.0 + 0.5 || !strstr(r.err, last_sent)) {
    dump(&r);
    fail_msg("took %.2f s (grace 1 s)", took);
  }
  assert_no_process_left(pids, 3);
  hkt_result_free(&r);
}

static void test_sigint_then_sigterm_then_sigkill(void **state) {
  (void)state;
  sigint_to_busy_workers("INT", "hkrun: sent SIGTERM to 3 worker(s)");
  sigint_to_busy_workers("INT TERM", "hkrun: sent SIGKILL to 3 worker(s)");
}

/* What a worker leaves in its process group does not outlive the job. */
static void test_background_child_is_cleaned_up(void **state) {
  (void)state;
  hkt_result r;
  run_ok("-np 1", "sleep 1000 & echo bg=$!; exit 0", &r);
  assert_true(r.elapsed_s < 5.0);
  long bg = find_int_after(r.out, "bg=", "bg=");
  assert_true(bg > 0);
  assert_no_process_left(&bg, 1);
  hkt_result_free(&r);
}

/* ---- the command line ---- */

static void test_bad_command_lines(void **state) {
  (void)state;
  static const struct {
    char *args[6];
    const char *expect; /* in stderr */
    int status;
  } cases[] = {
      {{"--frobnicate", "-np", "2", "true"}, "'--frobnicate'", 2},
      {{"-np", "0", "true"}, "-np: '0' is not a positive integer", 2},
      {{"-np", "abc", "true"}, "-np: 'abc' is not a positive integer", 2},
      {{"-n", "2"}, "no program", 2},
      {{"-np", "2", "--"}, "no program", 2},
      {{"-np"}, "-np: missing value", 2},
      {{"--grace-period", "x", "-np", "1", "true"}, "'x'", 2},
      {{"-np", "2", "/nonexistent/prog"},
       "hkrun: cannot start '/nonexistent/prog': No such file or directory",
       127},
      {{"-np", "2", "/etc/passwd"},
       "hkrun: cannot start '/etc/passwd': Permission denied",
       127},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[8] = {HKRUN_PATH};
    for (int k = 0; cases[i].args[k]; k++)
      argv[k + 1] = cases[i].args[k];
    hkt_result r;
    hkt_run(argv, NULL, FAST_S, &r);
    assert_exit(&r, cases[i].status);
    if (!strstr(r.err, cases[i].expect)) {
      dump(&r);
      fail_msg("case %zu: stderr lacks '%s'", i, cases[i].expect);
    }
    if (cases[i].status == 2)
      assert_non_null(strstr(r.err, "usage: hkrun"));
    assert_int_equal(r.out_len, 0);
    hkt_result_free(&r);
  }
  assert_no_process_left(NULL, 0);
}

static void test_help_and_version(void **state) {
  (void)state;
  char *help[] = {HKRUN_PATH, "--help", NULL};
  hkt_result r;
  hkt_run(help, NULL, FAST_S, &r);
  assert_exit(&r, 0);
  assert_non_null(strstr(r.out, "usage: hkrun -np N"));
  assert_non_null(strstr(r.out, "--grace-period"));
  hkt_result_free(&r);
  char *version[] = {HKRUN_PATH, "--version", NULL};
  hkt_run(version, NULL, FAST_S, &r);
  assert_exit(&r, 0);
  /* the version, then one line per optional part */
  assert_true(strncmp(r.out, "hkrun (hk) 0.1.0\nMPI: ", 22) == 0);
  assert_non_null(strstr(r.out, "\nCUDA: "));
  assert_non_null(strstr(r.out, "\nNCCL: "));
  hkt_result_free(&r);
}

/* ---- the rendezvous, with the test as the worker ---- */

static int connect_to(const char *hostport) {
  char host[64];
  int port;
  assert_int_equal(sscanf(hostport, "%63[^:]:%d", host, &port), 2);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  assert_int_equal(inet_pton(AF_INET, host, &a.sin_addr), 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* Reads exactly len bytes within timeout_s. Returns len, 0 on EOF,
 * -errno on error, -ETIMEDOUT at the deadline. */
static ssize_t read_exact(int fd, void *buf, size_t len, double timeout_s) {
  double deadline = hkt_now() + timeout_s;
  size_t got = 0;
  while (got < len) {
    double left = deadline - hkt_now();
    if (left <= 0)
      return -ETIMEDOUT;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
      return -errno;
    if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n == 0)
      return 0;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    got += (size_t)n;
  }
  return (ssize_t)len;
}

static void write_exact(int fd, const void *buf, size_t len) {
  assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

/* Runs the client side of the auth handshake; asserts the server's proof. */
static void handshake(int fd, const hk_secret *secret) {
  uint8_t nonce_s[HK_NONCE_LEN], nonce_c[HK_NONCE_LEN];
  uint8_t msg[HK_AUTH_CLIENT_MSG_LEN], proof_s[HK_PROOF_LEN];
  assert_int_equal(read_exact(fd, nonce_s, sizeof nonce_s, FAST_S),
                   HK_NONCE_LEN);
  assert_int_equal(hk_random_bytes(nonce_c, sizeof nonce_c), HK_OK);
  hk_auth_client_msg(secret, nonce_s, nonce_c, msg);
  write_exact(fd, msg, sizeof msg);
  assert_int_equal(read_exact(fd, proof_s, sizeof proof_s, FAST_S),
                   HK_PROOF_LEN);
  assert_true(hk_auth_client_check(secret, nonce_s, nonce_c, proof_s));
}

static void send_register(int fd, int rank, int size, uint16_t port) {
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_REGISTER;
  m.u.reg.rank = rank;
  m.u.reg.size = size;
  m.u.reg.pid = (int32_t)getpid();
  m.u.reg.port = port;
  strcpy(m.u.reg.host, "127.0.0.1");
  hk_buf b = {0};
  assert_int_equal(hk_wire_encode(&m, &b), HK_OK);
  write_exact(fd, b.data, b.len);
  hk_buf_free(&b);
}

static void send_goodbye(int fd, int rank) {
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_GOODBYE;
  m.u.goodbye.rank = rank;
  hk_buf b = {0};
  assert_int_equal(hk_wire_encode(&m, &b), HK_OK);
  write_exact(fd, b.data, b.len);
  hk_buf_free(&b);
}

/* Reads one frame and decodes it into *m (caller: hk_msg_free). */
static void recv_msg(int fd, hk_msg *m) {
  uint8_t frame[HK_WIRE_HEADER_LEN + 4096];
  assert_int_equal(read_exact(fd, frame, HK_WIRE_HEADER_LEN, FAST_S),
                   HK_WIRE_HEADER_LEN);
  uint8_t type;
  uint32_t len;
  assert_int_equal(hk_wire_header(frame, &type, &len), HK_OK);
  assert_true(len <= 4096);
  if (len > 0)
    assert_int_equal(read_exact(fd, frame + HK_WIRE_HEADER_LEN, len, FAST_S),
                     len);
  assert_int_equal(hk_wire_decode(frame, HK_WIRE_HEADER_LEN + len, m), HK_OK);
}

/* Asserts that the server closes fd (EOF or reset) within timeout_s. */
static void assert_closed_by_server(int fd, double timeout_s) {
  uint8_t byte;
  ssize_t n = read_exact(fd, &byte, 1, timeout_s);
  if (!(n == 0 || n == -ECONNRESET))
    fail_msg("expected the server to close the connection, got %zd", n);
}

static void local_addr(int fd, char *out, size_t cap) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  snprintf(out, cap, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
}

/* Closes fd, then waits for hkrun's warning about it, "hkrun warning:
 * WHAT ADDR: ..." (ADDR: fd's local address), and asserts that the line
 * contains why, or with whole, that it is exactly "...: WHY". */
static void close_expect_warning(hkt_proc *p, int fd, const char *what,
                                 const char *why, int whole) {
  char me[64], prefix[160], expect[320];
  local_addr(fd, me, sizeof me);
  close(fd);
  snprintf(prefix, sizeof prefix, "hkrun warning: %s %s: ", what, me);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(p, prefix, FAST_S, &line), 0);
  snprintf(expect, sizeof expect, "%s%s", prefix, why);
  if (whole)
    assert_string_equal(line, expect);
  else if (!strstr(line, why))
    fail_msg("'%s' does not say '%s'", line, why);
  free(line);
}

/* Where a job's rendezvous listens, and its secret. */
typedef struct {
  char addr[64];
  hk_secret secret;
} rdv_info;

/* Starts a 1-rank job (hkrun FLAGS) whose worker prints its rendezvous
 * address and secret (read into *rdv), then runs tail (it waits for its
 * stdin to close). */
static void start_listening_job(hkt_proc *p, const char *flags,
                                const char *tail, rdv_info *rdv) {
  char script[256];
  snprintf(script, sizeof script,
           "echo \"rdv=$HK_RENDEZVOUS secret=$HK_SECRET\"; %s", tail);
  sh_job job;
  assert_int_equal(hkt_start(sh_job_argv(&job, flags, script), NULL, p), 0);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(p, "rdv=", FAST_S, &line), 0);
  char hex[80];
  assert_int_equal(sscanf(line, "[%*d] rdv=%63s secret=%79s", rdv->addr, hex),
                   2);
  free(line);
  assert_int_equal(hk_secret_parse(hex, &rdv->secret), HK_OK);
}

static void test_rendezvous_handshake(void **state) {
  (void)state;
  hkt_proc p;
  rdv_info rdv;
  start_listening_job(&p, "-np 1", "read x; echo stdin closed", &rdv);

  /* 1. Without the secret: refused, closed, logged. */
  int fd = connect_to(rdv.addr);
  uint8_t nonce_s[HK_NONCE_LEN], wrong[HK_AUTH_CLIENT_MSG_LEN];
  assert_int_equal(read_exact(fd, nonce_s, sizeof nonce_s, FAST_S),
                   HK_NONCE_LEN);
  memset(wrong, 0x5a, sizeof wrong);
  write_exact(fd, wrong, sizeof wrong);
  assert_closed_by_server(fd, FAST_S);
  close_expect_warning(&p, fd, "refused a connection from", "bad secret", 1);

  /* 2. With it: REGISTER as rank 0 of 1 completes the rendezvous. */
  fd = connect_to(rdv.addr);
  handshake(fd, &rdv.secret);
  send_register(fd, 0, 1, 4242);
  hk_msg m;
  recv_msg(fd, &m);
  assert_int_equal(m.type, HK_MSG_PEERS);
  assert_int_equal(m.u.peers.n, 1);
  assert_string_equal(m.u.peers.peers[0].host, "127.0.0.1");
  assert_int_equal(m.u.peers.peers[0].port, 4242);
  hk_msg_free(&m);

  /* 3. Bad registrations are refused and named: by the rendezvous, or
   * already by the wire decoder (rank outside [0, size)). */
  static const struct {
    int rank, size;
    const char *what, *why;
  } bad[] = {
      {0, 1, "refused a registration from", "rank 0 is already registered"},
      {0, 2, "refused a registration from", "size 2, but the job has 1 ranks"},
      {1, 2, "refused a registration from", "size 2, but the job has 1 ranks"},
      {7, 1, "closing the connection from", "rank 7 out of range"},
      {-1, 1, "closing the connection from", "rank -1 out of range"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int fd2 = connect_to(rdv.addr);
    handshake(fd2, &rdv.secret);
    send_register(fd2, bad[i].rank, bad[i].size, 1);
    assert_closed_by_server(fd2, FAST_S);
    close_expect_warning(&p, fd2, bad[i].what, bad[i].why, 0);
  }

  /* 4. GOODBYE on a connection that never registered: refused. */
  int fd3 = connect_to(rdv.addr);
  handshake(fd3, &rdv.secret);
  send_goodbye(fd3, 0);
  assert_closed_by_server(fd3, FAST_S);
  close_expect_warning(&p, fd3, "refused a goodbye from",
                       "the connection never registered", 0);

  /* The registered connection stays open while the job runs. */
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&pfd, 1, 0), 0);

  /* Rank 0 (the test) leaves through the API before the worker exits 0. */
  send_goodbye(fd, 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r); /* closes the worker's stdin */
  assert_exit(&r, 0);
  assert_non_null(strstr(r.out, "[0] stdin closed\n"));
  assert_closed_by_server(fd, FAST_S); /* hkrun closed it when done */
  close(fd);
  hkt_result_free(&r);
  assert_no_process_left(NULL, 0);
}

/* When rank 1 fails, the registered rank 0 (the test) gets HK_MSG_ABORT
 * naming rank 1 and its status; so does a rank registering later. */
static void test_rendezvous_abort(void **state) {
  (void)state;
  char dir[96];
  assert_int_equal(hkt_mkdtemp("hkt-abort-", dir, sizeof dir), 0);
  char fifo[128], fifo_env[160];
  snprintf(fifo, sizeof fifo, "%s/go", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  snprintf(fifo_env, sizeof fifo_env, "HKT_FIFO=%s", fifo);
  char *env[] = {fifo_env, NULL};
  /* A long grace period: rank 0 ends when the test closes its stdin. */
  sh_job job;
  char **argv =
      sh_job_argv(&job, "-np 2 --grace-period 60",
                  "if [ $HK_RANK = 1 ]; then echo pid=$$; read x < $HKT_FIFO; "
                  "exit 4; fi; "
                  "echo \"rdv=$HK_RENDEZVOUS secret=$HK_SECRET\"; read x");
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(&p, "rdv=", FAST_S, &line), 0);
  char rdv[64], hex[80];
  assert_int_equal(sscanf(line, "[0] rdv=%63s secret=%79s", rdv, hex), 2);
  free(line);
  hk_secret secret;
  assert_int_equal(hk_secret_parse(hex, &secret), HK_OK);
  assert_int_equal(hkt_wait_line(&p, "[1] pid=", FAST_S, &line), 0);
  long pid1 = strtol(line + strlen("[1] pid="), NULL, 10);
  free(line);

  int fd = connect_to(rdv);
  handshake(fd, &secret);
  send_register(fd, 0, 2, 5000);
  /* Rank 1 never registers, so no PEERS: release it to fail. */
  FILE *f = fopen(fifo, "w");
  assert_non_null(f);
  fputs("go\n", f);
  fclose(f);

  char reason[128];
  snprintf(reason, sizeof reason, "rank 1 (pid %ld) exited with status 4",
           pid1);
  hk_msg m;
  recv_msg(fd, &m);
  assert_int_equal(m.type, HK_MSG_ABORT);
  assert_int_equal(m.u.abort.rank, 1);
  assert_int_equal(m.u.abort.exit_code, 4);
  assert_int_equal(m.u.abort.signal, 0);
  assert_string_equal(m.u.abort.reason, reason);
  hk_msg_free(&m);

  /* A late registrant hears about the failure at once. */
  int fd2 = connect_to(rdv);
  handshake(fd2, &secret);
  send_register(fd2, 1, 2, 5001);
  recv_msg(fd2, &m);
  assert_int_equal(m.type, HK_MSG_ABORT);
  assert_string_equal(m.u.abort.reason, reason);
  hk_msg_free(&m);

  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 4);
  close(fd);
  close(fd2);
  unlink(fifo);
  rmdir(dir);
  hkt_result_free(&r);
  assert_no_process_left(NULL, 0);
}

/*
 * A worker registered as rank 0 (the test plays it) and the program hkrun
 * started as rank 0 exits with status 0; the test decides how rank 0's
 * rendezvous connection ends, and in which order with that exit:
 *   BYE_AFTER_EXIT   GOODBYE read only after hkrun saw the exit: status 0
 *                    (the exit must not be judged before the connection)
 *   EOF_AFTER_EXIT   closed without GOODBYE after the exit: a failure
 *   EOF_BEFORE_EXIT  closed without GOODBYE, then the exit: a failure
 *   HELD_OPEN        left open and idle (as if another process held it):
 *                    a failure, GOODBYE_WAIT_MS (2 s) after the exit
 *   WRONG_RANK       GOODBYE naming rank 3: refused, closed: a failure
 *   SIGNALLED        hkrun gets SIGTERM while it waits: the signal decides
 *                    (exit 128+15), the wait ends
 * A failure is reported as "rank 0 (pid P) exited with status 0 without
 * calling hk_shutdown", and hkrun exits 1.
 */
enum goodbye_case {
  BYE_AFTER_EXIT,
  EOF_AFTER_EXIT,
  EOF_BEFORE_EXIT,
  HELD_OPEN,
  WRONG_RANK,
  SIGNALLED
};

/* *state points to the case. */
static void test_goodbye_case(void **state) {
  enum goodbye_case how = *(const enum goodbye_case *)*state;
  hkt_proc p;
  rdv_info rdv;
  start_listening_job(&p, "-np 1 -v", "read x; exit 0", &rdv);
  long pid =
      find_int_after(p.err.data, "hkrun: started rank 0 as pid ", "pid ");
  assert_true(pid > 0);
  int fd = connect_to(rdv.addr);
  handshake(fd, &rdv.secret);
  send_register(fd, 0, 1, 4242);
  hk_msg m;
  recv_msg(fd, &m);
  assert_int_equal(m.type, HK_MSG_PEERS);
  hk_msg_free(&m);

  if (how == EOF_BEFORE_EXIT || how == WRONG_RANK) {
    if (how == WRONG_RANK)
      send_goodbye(fd, 3);
    else
      close(fd);
    assert_int_equal(hkt_wait_line(&p,
                                   how == WRONG_RANK
                                       ? "refused a goodbye from"
                                       : "rank 0 closed its rendezvous "
                                         "connection",
                                   FAST_S, NULL),
                     0);
  }
  hkt_close_stdin(&p); /* the worker exits 0 */
  if (how == BYE_AFTER_EXIT || how == EOF_AFTER_EXIT || how == HELD_OPEN ||
      how == SIGNALLED)
    assert_int_equal(hkt_wait_line(&p,
                                   "exited with status 0; waiting for its "
                                   "rendezvous connection to end",
                                   FAST_S, NULL),
                     0);
  double exit_seen = hkt_now();
  if (how == BYE_AFTER_EXIT)
    send_goodbye(fd, 0);
  else if (how == EOF_AFTER_EXIT)
    close(fd);
  else if (how == SIGNALLED)
    assert_int_equal(kill(p.pid, SIGTERM), 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  char expect[160];
  snprintf(expect, sizeof expect,
           "hkrun: rank 0 (pid %ld) exited with status 0 without calling "
           "hk_shutdown\n",
           pid);
  if (how == BYE_AFTER_EXIT || how == SIGNALLED) {
    assert_exit(&r, how == SIGNALLED ? 128 + SIGTERM : 0);
    assert_null(strstr(r.err, "without calling hk_shutdown"));
  } else {
    assert_exit(&r, 1);
    assert_err_has(&r, expect);
  }
  if (how == HELD_OPEN)
    assert_true(hkt_now() - exit_seen > 1.5);
  if (how == SIGNALLED) { /* told, as every registered rank is */
    recv_msg(fd, &m);
    assert_int_equal(m.type, HK_MSG_ABORT);
    assert_int_equal(m.u.abort.signal, SIGTERM);
    hk_msg_free(&m);
  }
  if (how == BYE_AFTER_EXIT || how == HELD_OPEN || how == WRONG_RANK ||
      how == SIGNALLED)
    assert_closed_by_server(fd, FAST_S);
  if (how != EOF_BEFORE_EXIT && how != EOF_AFTER_EXIT)
    close(fd);
  hkt_result_free(&r);
  assert_no_process_left(NULL, 0);
}

/* A connection that never authenticates is closed after 10 s. */
static void test_rendezvous_auth_timeout(void **state) {
  (void)state;
  hkt_proc p;
  rdv_info rdv;
  start_listening_job(&p, "-np 1", "read x; exit 0", &rdv);
  int fd = connect_to(rdv.addr);
  double t0 = hkt_now();
  uint8_t nonce_s[HK_NONCE_LEN];
  assert_int_equal(read_exact(fd, nonce_s, sizeof nonce_s, FAST_S),
                   HK_NONCE_LEN);
  write_exact(fd, nonce_s, 10); /* a start, but not the whole message */
  assert_closed_by_server(fd, 30.0);
  double waited = hkt_now() - t0;
  assert_true(waited > 9.5 && waited < 30.0);
  close_expect_warning(&p, fd, "refused a connection from",
                       "no authentication within 10 s", 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  assert_exit(&r, 0);
  hkt_result_free(&r);
}

/* A goodbye case: test_goodbye_case with the case HOW (HKT_CASE_TEST). */
#define GOODBYE_TEST(name, how)                                                \
  HKT_CASE_TEST(name, test_goodbye_case, enum goodbye_case, how)

int main(void) {
  if (hkt_setup() != 0)
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_env_and_tags),
      cmocka_unit_test(test_no_tag_output),
      cmocka_unit_test(test_interleaving),
      cmocka_unit_test(test_partial_last_line),
      cmocka_unit_test(test_long_line),
      cmocka_unit_test(test_stdin_goes_to_rank0),
      cmocka_unit_test(test_stdout_closed),
      cmocka_unit_test(test_rank1_exits_3),
      cmocka_unit_test(test_first_failure_terminates_others),
      cmocka_unit_test(test_sigkill_after_sigterm),
      cmocka_unit_test(test_kill9_one_worker),
      HKT_CASE_TEST(test_sigterm_forwarded, test_signal_forwarded, int,
                    SIGTERM),
      HKT_CASE_TEST(test_sigint_forwarded, test_signal_forwarded, int, SIGINT),
      HKT_CASE_TEST(test_sighup_forwarded, test_signal_forwarded, int, SIGHUP),
      cmocka_unit_test(test_sigint_then_sigterm_then_sigkill),
      cmocka_unit_test(test_background_child_is_cleaned_up),
      cmocka_unit_test(test_bad_command_lines),
      cmocka_unit_test(test_help_and_version),
      cmocka_unit_test(test_rendezvous_handshake),
      cmocka_unit_test(test_rendezvous_abort),
      cmocka_unit_test(test_rendezvous_auth_timeout),
      GOODBYE_TEST(test_goodbye_after_exit, BYE_AFTER_EXIT),
      GOODBYE_TEST(test_eof_after_exit, EOF_AFTER_EXIT),
      GOODBYE_TEST(test_eof_before_exit, EOF_BEFORE_EXIT),
      GOODBYE_TEST(test_connection_held_open, HELD_OPEN),
      GOODBYE_TEST(test_goodbye_wrong_rank, WRONG_RANK),
      GOODBYE_TEST(test_signal_while_waiting, SIGNALLED),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hkt_kill_orphans(); /* after a failed test: leave nothing running */
  return failed;
}
