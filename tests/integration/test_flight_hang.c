/*
 * test_flight_hang.c - the flight recorder over hkrun (issue 15, item 6): a
 * hang at np 4 (w_flight: rank 3 never submits "t7", which ranks 0-2 wait
 * for) is dumped by SIGUSR1 sent to the ranks, by `hkrun --dump PID`, and
 * by the stall path (HK_STALL_SHUTDOWN_TIME_S); each time `hkrun
 * --diagnose DIR` names t7 and rank 3. The tests wait for the record
 * files to appear (inotify on the folder), never for a time. Also: a
 * rank's record missing is reported as missing, garbage in a record is a
 * clear error, HK_FLIGHT_RECORDER=3 keeps the newest three in order (and
 * =1 lists one tensor in flight, counting the other), and
 * --dump refuses a process that is not a launcher.
 */
#include <dirent.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/flight_record.h"
#include "harness.h"

#define W_FLIGHT WORKER_DIR "/w_flight"

/* How many records (hk-flight.*.txt) the job's folder in base holds; the
 * name of the one whose name ends in `suffix` into found (if not NULL). */
static int count_records(const char *base, const char *suffix, char *found,
                         size_t cap) {
  char dir[4200];
  if (hkt_flight_folder(base, dir, sizeof dir) != 0)
    return 0;
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (strncmp(de->d_name, "hk-flight.", 10) || len < 5 ||
        strcmp(de->d_name + len - 4, ".txt"))
      continue;
    n++;
    if (suffix && found && len >= strlen(suffix) &&
        !strcmp(de->d_name + len - strlen(suffix), suffix))
      snprintf(found, cap, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return n;
}

/* Waits until the job's folder in base holds n records (each appears
 * whole, by link or rename), watching base and then the folder with
 * inotify; at most timeout_s. 0, or -1. */
static int wait_records(const char *base, int n, double timeout_s) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  assert_true(fd >= 0);
  const uint32_t ev = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE;
  assert_true(inotify_add_watch(fd, base, ev) >= 0);
  int watching = 0;
  double end = hkt_now() + timeout_s;
  int rc = -1;
  for (;;) {
    char dir[4200];
    if (!watching && hkt_flight_folder(base, dir, sizeof dir) == 0) {
      assert_true(inotify_add_watch(fd, dir, ev) >= 0);
      watching = 1;
    }
    if (count_records(base, NULL, NULL, 0) >= n) { /* after the watch */
      rc = 0;
      break;
    }
    double left = end - hkt_now();
    if (left <= 0)
      break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)(left * 1000) + 1) > 0) {
      char buf[4096];
      while (read(fd, buf, sizeof buf) > 0)
        ;
    }
  }
  close(fd);
  if (rc)
    fprintf(stderr, "only %d of %d records appeared in %s\n",
            count_records(base, NULL, NULL, 0), n, base);
  return rc;
}

/* Starts the hang (w_flight with its mode, NULL for the plain one) with
 * HK_FLIGHT_DIR=dir (plus extra, extra2 and extra3, each may be NULL) and
 * waits until every rank has reached it; pids[4] get the ranks' pids, in
 * the order they said it. */
static void start_hang(const char *dir, const char *extra, const char *extra2,
                       const char *extra3, const char *mode, hkt_proc *p,
                       int pids[4]) {
  char env_dir[4200];
  snprintf(env_dir, sizeof env_dir, "HK_FLIGHT_DIR=%s", dir);
  char *env[6] = {env_dir, "HK_STALL_CHECK_TIME_S=0"};
  int n_env = 2;
  const char *more[] = {extra, extra2, extra3};
  for (int i = 0; i < 3; i++) /* the settings given, none lost to a NULL */
    if (more[i])
      env[n_env++] = (char *)more[i];
  char *argv[] = {HKRUN_PATH, "-np", "4", W_FLIGHT, (char *)mode, NULL};
  assert_int_equal(hkt_start(argv, env, p), 0);
  assert_int_equal(hkt_wait_lines(p, "t7 pid=", 4, 120), 0);
  int n = 0;
  for (const char *s = p->out.data; (s = strstr(s, "t7 pid=")); s++) {
    assert_true(n < 4);
    pids[n++] = atoi(s + 7);
  }
  assert_int_equal(n, 4);
  assert_non_null(strstr(p->out.data, "[3] skipping t7 pid="));
}

/* Ends the hang (SIGTERM to hkrun, forwarded): nothing is left behind. */
static void end_hang(hkt_proc *p) {
  assert_int_equal(kill(p->pid, SIGTERM), 0);
  hkt_result r;
  hkt_finish(p, 30, &r);
  assert_int_equal(r.exit_code, 128 + SIGTERM);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* hkrun --diagnose on the job's folder in base: its result (free with
 * hkt_result_free). */
static void diagnose(const char *base, hkt_result *r) {
  char dir[4200];
  assert_int_equal(hkt_flight_folder(base, dir, sizeof dir), 0);
  char *argv[] = {HKRUN_PATH, "--diagnose", dir, NULL};
  assert_int_equal(hkt_run(argv, NULL, 30, r), 0);
}

static void expect(const char *text, const char *want) {
  if (!strstr(text, want))
    fail_msg("'%s' not in:\n%s", want, text);
}

/* The diagnosis of the hang names t7 and rank 3; `nwhy` ranks wrote
 * because of `why`. */
static void expect_t7(const char *dir, const char *why, int nwhy) {
  hkt_result r;
  diagnose(dir, &r);
  assert_int_equal(r.exit_code, 0);
  expect(r.out, "world size 4, 4 of 4 ranks present");
  expect(r.out, "missing: none");
  expect(r.out, "first divergence: tensor 't7' (allreduce, float32, 32 "
                "bytes), after round 7 (the last round every rank ran): "
                "submitted by ranks 0-2; never submitted by rank 3");
  if (hkt_count_lines(r.out, why) != nwhy)
    fail_msg("not %d lines with '%s' in:\n%s", nwhy, why, r.out);
  hkt_result_free(&r);
}

/* After each test: a test that failed half-way leaves its hang running;
 * it must not fail the next ones (their checks that nothing is left). */
static int end_leftovers(void **s) {
  (void)s;
  hkt_kill_orphans();
  return 0;
}

static void remove_dir(const char *dir) {
  assert_int_equal(hkt_remove_tree(dir), 0); /* with the job's folder */
}

static void test_sigusr1_to_ranks(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  hkt_proc p;
  int pids[4];
  /* ranks hkrun did not start would get SIGUSR1 from their launcher: it
   * asks for a record where they opted in */
  start_hang(dir, "HK_FLIGHT_SIGNAL=1", NULL, NULL, NULL, &p, pids);
  for (int i = 0; i < 4; i++)
    assert_int_equal(kill(pids[i], SIGUSR1), 0);
  assert_int_equal(wait_records(dir, 4, 60), 0);
  expect_t7(dir, "written on: SIGUSR1 (a dump was asked for)", 4);
  assert_int_equal(hkt_pid_alive(p.pid), 1); /* the job goes on */
  end_hang(&p);
  /* one rank's record missing: named; the others still diagnose */
  char two[4200];
  assert_int_equal(count_records(dir, ".2.txt", two, sizeof two), 4);
  assert_int_equal(unlink(two), 0);
  hkt_result r;
  diagnose(dir, &r);
  assert_int_equal(r.exit_code, 0);
  expect(r.out, "3 of 4 ranks present");
  expect(r.out, "missing: rank 2 (no hk-flight.");
  expect(r.out, "'t7'");
  expect(r.out, "submitted by ranks 0, 1; never submitted by rank 3");
  hkt_result_free(&r);
  /* garbage in a record: a clear error naming the file and line */
  char one[4200];
  count_records(dir, ".1.txt", one, sizeof one);
  FILE *f = fopen(one, "w");
  assert_non_null(f);
  fputs("{\"not\": \"a record\"}\n", f);
  fclose(f);
  diagnose(dir, &r);
  assert_int_equal(r.exit_code, 1);
  expect(r.err, one);
  expect(r.err, "line 1: expected 'hk-flight<TAB>value' (this is not an hk "
                "flight record)");
  assert_string_equal(r.out, "");
  hkt_result_free(&r);
  remove_dir(dir);
}

/* hkrun --dump of the hang's hkrun p: it says it asked, and the job's
 * folder in dir gets every rank's record. */
static void dump_hang(const char *dir, hkt_proc *p) {
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)p->pid);
  char *argv[] = {HKRUN_PATH, "--dump", pid, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 30, &r), 0);
  assert_int_equal(r.exit_code, 0);
  expect(r.out, "asked the job of hkrun (pid ");
  hkt_result_free(&r);
  assert_int_equal(wait_records(dir, 4, 60), 0);
}

static void test_hkrun_dump(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  hkt_proc p;
  int pids[4];
  start_hang(dir, "HK_FLIGHT_RECORDER=3", NULL, NULL, NULL, &p, pids);
  dump_hang(dir, &p);
  assert_int_equal(
      hkt_wait_line(&p,
                    "asked 4 rank(s) to write their flight records (SIGUSR1",
                    30, NULL),
      0);
  expect_t7(dir, "written on: asked through hkrun", 4);
  /* the ring of 3 kept the newest three of rank 0's 8, oldest first */
  char zero[4200] = "";
  count_records(dir, ".0.txt", zero, sizeof zero);
  hk_flight_file f;
  assert_int_equal(hk_flight_read(zero, &f), HK_OK);
  assert_int_equal(f.h.capacity, 3);
  assert_int_equal(f.h.recorded, 8);
  assert_int_equal(f.nentries, 3);
  assert_string_equal(f.entries[0].name, "t5");
  assert_string_equal(f.entries[1].name, "t6");
  assert_string_equal(f.entries[2].name, "t7");
  assert_int_equal(f.entries[1].state, HK_FLIGHT_DONE);
  assert_int_equal(f.entries[1].round, 7);
  assert_int_equal(f.entries[2].state, HK_FLIGHT_SUBMITTED);
  assert_int_equal(f.npending, 1);
  assert_string_equal(f.pending[0].name, "t7");
  hk_flight_file_free(&f);
  end_hang(&p);
  /* a process that is not a launcher is refused */
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  char *argv[] = {HKRUN_PATH, "--dump", pid, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 30, &r), 0);
  assert_int_equal(r.exit_code, 1);
  expect(r.err, "not hkrun or mpirun: give the pid of the hkrun");
  hkt_result_free(&r);
  remove_dir(dir);
}

/* Rank 1's record while rank 0 holds its answer to rank 1's request for
 * t7 (HK_CYCLE_TIME_MS; `extra`: one more setting), written on SIGUSR1,
 * read into *f (free with hk_flight_file_free); the hang then ends. */
static void queued_record(const char *extra, hk_flight_file *f) {
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  hkt_proc p;
  int pids[4];
  start_hang(dir, "HK_CYCLE_TIME_MS=60000", "HK_FLIGHT_SIGNAL=1", extra,
             "queued", &p, pids);
  const char *one = strstr(p.out.data, "[1] waiting for t7 pid=");
  assert_non_null(one);
  assert_int_equal(kill(atoi(one + strlen("[1] waiting for t7 pid=")), SIGUSR1),
                   0);
  assert_int_equal(wait_records(dir, 1, 60), 0);
  char rec[4200] = "";
  assert_int_equal(count_records(dir, ".1.txt", rec, sizeof rec), 1);
  assert_int_equal(hk_flight_read(rec, f), HK_OK);
  end_hang(&p);
  remove_dir(dir);
}

/* A record holds what still waits in the rank's queue: rank 1's t8,
 * submitted after its request for t7 left, is not taken by its background
 * thread when SIGUSR1 asks for the record. */
static void test_dump_records_queued(void **s) {
  (void)s;
  hk_flight_file f;
  queued_record(NULL, &f);
  assert_int_equal(f.h.rank, 1);
  assert_int_equal(f.h.recorded, 9); /* t0..t8 */
  assert_true(f.nentries >= 2);
  const hk_flight_entry *t7 = &f.entries[f.nentries - 2],
                        *t8 = &f.entries[f.nentries - 1];
  assert_string_equal(t7->name, "t7");
  assert_int_equal(t7->state, HK_FLIGHT_SUBMITTED);
  assert_string_equal(t8->name, "t8");
  assert_int_equal(t8->state, HK_FLIGHT_SUBMITTED);
  assert_int_equal(f.npending, 2);
  assert_int_equal(f.h.pending_left_out, 0);
  hk_flight_file_free(&f);
}

/* A record lists as many tensors in flight as the ring holds at most,
 * and counts the others: with HK_FLIGHT_RECORDER=1, rank 1 has t7 and t8
 * in flight (test_dump_records_queued) and lists one. */
static void test_dump_bounded(void **s) {
  (void)s;
  hk_flight_file f;
  queued_record("HK_FLIGHT_RECORDER=1", &f);
  assert_int_equal(f.h.capacity, 1);
  assert_int_equal(f.nentries, 1);
  assert_int_equal(f.npending, 1);
  assert_int_equal(f.h.pending_left_out, 1);
  hk_flight_file_free(&f);
}

static void test_stall_path(void **s) {
  (void)s;
  char dir[4096], env_dir[4200];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  snprintf(env_dir, sizeof env_dir, "HK_FLIGHT_DIR=%s", dir);
  char *env[] = {env_dir, "HK_STALL_CHECK_TIME_S=1",
                 "HK_STALL_SHUTDOWN_TIME_S=2", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", W_FLIGHT, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_int_equal(hkt_count_lines(r.err, "t7 gave stalled"), 3);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  /* every rank wrote before it stopped (the files are whole: renamed) */
  assert_int_equal(count_records(dir, NULL, NULL, 0), 4);
  expect_t7(dir,
            "written on: stalled for more than "
            "HK_STALL_SHUTDOWN_TIME_S=2 s: tensor 't7'",
            4);
  /* hkrun says where they are, and how to read them */
  char job[4200], said[8800];
  assert_int_equal(hkt_flight_folder(dir, job, sizeof job), 0);
  snprintf(said, sizeof said,
           "hkrun: 4 flight records of this job in %s; read them with: "
           "hkrun --diagnose %s\n",
           job, job);
  expect(r.err, said);
  hkt_result_free(&r);
  remove_dir(dir);
}

/* Without HK_FLIGHT_DIR the records go into a folder of the job's own in
 * $TMPDIR, made privately, never into the working directory; hkrun names
 * it at exit. */
static void test_default_folder(void **s) {
  (void)s;
  char tmp[4096], cwd[4096], env_tmp[4200];
  assert_int_equal(hkt_mkdtemp("hk-flight-tmp.", tmp, sizeof tmp), 0);
  assert_int_equal(hkt_mkdtemp("hk-flight-cwd.", cwd, sizeof cwd), 0);
  snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", tmp);
  char *env[] = {env_tmp, "HK_FLIGHT_DIR=", "HK_STALL_CHECK_TIME_S=1",
                 "HK_STALL_SHUTDOWN_TIME_S=2", NULL};
  char *argv[] = {"sh", "-c",       "cd \"$0\" && exec \"$@\"",
                  cwd,  HKRUN_PATH, "-np",
                  "4",  W_FLIGHT,   NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  DIR *d = opendir(cwd);
  assert_non_null(d);
  for (struct dirent *de; (de = readdir(d));)
    if (de->d_name[0] != '.')
      fail_msg("left in the working directory: %s", de->d_name);
  closedir(d);
  assert_int_equal(count_records(tmp, NULL, NULL, 0), 4);
  char job[4200], one[4400] = "";
  assert_int_equal(hkt_flight_folder(tmp, job, sizeof job), 0);
  expect(r.err, job);
  expect(r.err, "read them with: hkrun --diagnose ");
  struct stat sb;
  assert_int_equal(lstat(job, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 07777, 0700);
  count_records(tmp, ".0.txt", one, sizeof one);
  assert_int_equal(lstat(one, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0600);
  hkt_result_free(&r);
  remove_dir(tmp);
  remove_dir(cwd);
}

/* hkrun --dump reaches the ranks without a signal: rank 0, blocked in
 * poll(2) (which a signal handler would cut short, EINTR, as it would
 * sleep or a blocking read), is not woken by the request, and the records
 * still come. */
static void test_dump_is_no_signal(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  hkt_proc p;
  int pids[4];
  start_hang(dir, NULL, NULL, NULL, "poll", &p, pids);
  dump_hang(dir, &p);
  expect_t7(dir, "written on: asked through hkrun", 4);
  /* only now does rank 0's stdin get a line: its poll must say so */
  assert_int_equal(write(p.in_fd, "x\n", 2), 2);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(&p, "poll returned", 30, &line), 0);
  if (!strstr(line, "poll returned 1 (ready)"))
    fail_msg("rank 0's poll was cut short: %s", line);
  free(line);
  end_hang(&p);
  remove_dir(dir);
}

/* A stall warning alone: rank 0 asks hkrun to have every rank write. */
static void test_stall_warning(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-flight.", dir, sizeof dir), 0);
  hkt_proc p;
  int pids[4];
  start_hang(dir, "HK_STALL_CHECK_TIME_S=1", NULL, NULL, NULL, &p, pids);
  assert_int_equal(wait_records(dir, 4, 60), 0);
  assert_int_equal(hkt_wait_line(&p, "warning: stall:", 30, NULL), 0);
  expect_t7(dir, "written on: asked through hkrun", 3);
  /* rank 0's reason is the warning (its text grows "waiting N s") */
  expect_t7(dir, "(every rank was asked to write through hkrun)", 1);
  end_hang(&p);
  remove_dir(dir);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_sigusr1_to_ranks, end_leftovers),
      cmocka_unit_test_teardown(test_hkrun_dump, end_leftovers),
      cmocka_unit_test_teardown(test_dump_records_queued, end_leftovers),
      cmocka_unit_test_teardown(test_dump_bounded, end_leftovers),
      cmocka_unit_test_teardown(test_stall_path, end_leftovers),
      cmocka_unit_test_teardown(test_default_folder, end_leftovers),
      cmocka_unit_test_teardown(test_dump_is_no_signal, end_leftovers),
      cmocka_unit_test_teardown(test_stall_warning, end_leftovers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
