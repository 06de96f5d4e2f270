/*
 * harness.h - running real processes (hkrun and the programs it starts)
 * from integration tests, with deadlines instead of sleeps.
 *
 * Typical use:
 *
 *   int main(void) { hkt_setup(); ...cmocka tests... }
 *
 *   char *argv[] = {HKRUN_PATH, "-np", "2", "--", "sh", "-c", "...", NULL};
 *   hkt_proc p;
 *   assert_int_equal(hkt_start(argv, NULL, &p), 0);
 *   char *line;
 *   assert_int_equal(hkt_wait_line(&p, "ready", 10, &line), 0);
 *   ...
 *   hkt_result r;
 *   hkt_finish(&p, 10, &r);          // always call: it reaps and frees
 *   assert_int_equal(r.exit_code, 0);
 *   hkt_result_free(&r);
 *
 * The process started by hkt_start leads its own process group; its stdin
 * is a pipe (write end in proc.in_fd), its stdout and stderr are captured
 * separately. Because hkt_setup makes the test process a child subreaper,
 * every process the tested program leaves behind is re-parented to the
 * test, where hkt_orphans() finds it and hkt_pid_alive() reaps it.
 *
 * Nothing is left behind when a test is interrupted: a test that called
 * hkt_setup gets SIGTERM when its parent (ctest) dies, and every process
 * hkt_start starts gets SIGTERM when the test dies (PR_SET_PDEATHSIG), so
 * hkrun ends its workers, mpirun its daemons and netbed.sh its bed.
 * Temporary files go under $TMPDIR (scripts/test.sh gives each run one
 * and removes it however the run ends), else /tmp. Flight records that
 * hkrun says a job left (a stall warning writes them) are removed when
 * hkt_finish reaps it, unless the test chose HK_FLIGHT_DIR (extra_env or
 * its own environment) to read them.
 *
 * Times are in seconds (double). Functions returning int return 0 on
 * success and -1 on failure unless said otherwise; failures print a
 * diagnostic to stderr. Thread-safety: none (one test thread).
 */
#ifndef HK_TESTS_HARNESS_H
#define HK_TESTS_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

/** Captured bytes of one stream; data is always NUL-terminated. */
typedef struct hkt_text {
  char *data;
  size_t len, cap;
} hkt_text;

/** A process started by hkt_start. Owned by the caller; released by
 *  hkt_finish. */
typedef struct hkt_proc {
  pid_t pid;          /* also its process group id */
  int pidfd;          /* from pidfd_open; readable once it exits */
  int in_fd;          /* write end of its stdin, -1 once closed */
  int out_fd, err_fd; /* read ends of its stdout/stderr, -1 at EOF */
  hkt_text out, err;  /* captured so far */
  double started;     /* hkt_now() at start */
  int reaped;         /* 1 once waitpid returned it */
  int status;         /* waitpid status once reaped */
  double ended;       /* hkt_now() when it was reaped */
  int own_flight;     /* 1: the test chose no HK_FLIGHT_DIR (see below) */
} hkt_proc;

/** How a process ended, and everything it wrote. */
typedef struct hkt_result {
  int exited;       /* 1: it exited; exit_code is valid */
  int exit_code;    /* its exit status, or -1 */
  int signal;       /* the signal that killed it, or 0 */
  int timed_out;    /* 1: the deadline passed and hkt_finish SIGKILLed its
                       process group */
  double elapsed_s; /* from hkt_start until it was reaped */
  char *out, *err;  /* NUL-terminated; owned, see hkt_result_free */
  size_t out_len, err_len;
} hkt_result;

/**
 * Call once at the start of main(): makes this process a child subreaper
 * (prctl PR_SET_CHILD_SUBREAPER), asks for SIGTERM when its parent dies,
 * and ignores SIGPIPE (writes to a dead child's stdin then fail with
 * EPIPE instead of killing the test).
 */
int hkt_setup(void);

/** $TMPDIR if it is an absolute path, else "/tmp". Static storage. */
const char *hkt_tmpdir(void);

/** Makes a directory <tmpdir>/<prefix>XXXXXX; its path into out[cap]. */
int hkt_mkdtemp(const char *prefix, char *out, size_t cap);

/** Removes dir and everything below it (links are removed, not
 *  followed); 0, also when dir does not exist; -1 (said on stderr) when
 *  something could not be removed. */
int hkt_remove_tree(const char *dir);

/** The folder of one job's flight records in base (hk-JOB, the name
 *  common/flight_record.h gives it: "hk-" and a 16-character job id)
 *  into out[cap]; 0, or -1 while there is none. */
int hkt_flight_folder(const char *base, char *out, size_t cap);

/** Makes an empty file <tmpdir>/<prefix>XXXXXX (closed); path in out. */
int hkt_mkstemp(const char *prefix, char *out, size_t cap);

/** Monotonic clock, in seconds. */
double hkt_now(void);

/**
 * Starts argv[0] (searched in PATH) with argv, in a new process group,
 * with this process's environment plus extra_env ("NAME=value" strings,
 * NULL-terminated, may be NULL; they override). Signal dispositions and
 * mask are reset to defaults in the child. Non-blocking: returns once the
 * process exists. A program that cannot be executed exits 127 with a
 * message on its stderr. On success *proc must be passed to hkt_finish.
 */
int hkt_start(char *const argv[], char *const extra_env[], hkt_proc *proc);

/**
 * Reads the process's output until a complete line on stdout or stderr
 * contains `substring` (searching all output captured so far, stdout
 * first), or until timeout_s passes or both streams reach EOF. On success
 * *line_out (if not NULL) is a malloc'ed copy of the line without its
 * newline; the caller frees it.
 */
int hkt_wait_line(hkt_proc *proc, const char *substring, double timeout_s,
                  char **line_out);

/** As hkt_wait_line, until at least n complete lines (both streams
 *  together) contain substring. */
int hkt_wait_lines(hkt_proc *proc, const char *substring, int n,
                   double timeout_s);

/** Closes the process's stdin (it reads EOF). Idempotent. */
void hkt_close_stdin(hkt_proc *proc);

/**
 * Closes its stdin, waits until the process exits (polling its pidfd and
 * capturing output meanwhile) and reads the rest of its output, all
 * within timeout_s. If the deadline passes first, SIGKILLs its process
 * group, reaps it and sets r->timed_out. Fills *r (free with
 * hkt_result_free) and releases everything *proc holds. Returns 0 if the
 * process exited in time, -1 if it had to be killed.
 */
int hkt_finish(hkt_proc *proc, double timeout_s, hkt_result *r);

/** hkt_start + hkt_finish. Returns -1 if it could not start (r is then
 *  zeroed) or was killed at the deadline. */
int hkt_run(char *const argv[], char *const extra_env[], double timeout_s,
            hkt_result *r);

/** Frees the captured output in *r. */
void hkt_result_free(hkt_result *r);

/** The parent of pid (from /proc/<pid>/stat), or -1 if it is gone. */
pid_t hkt_parent(pid_t pid);

/**
 * 1 if pid is a live process, 0 if it does not exist or is a zombie (a
 * zombie that is our child, e.g. re-parented to us, is reaped).
 */
int hkt_pid_alive(pid_t pid);

/**
 * Waits until pid has exited (polling a pidfd, so SIGKILL's asynchronous
 * delivery is allowed for), at most timeout_s; reaps it if it is our
 * child. Returns 0 once it is gone, -1 if it is still alive at the
 * deadline.
 */
int hkt_wait_gone(pid_t pid, double timeout_s);

/** Sends sig to process group pgid. Returns 0, or -1 (errno set; ESRCH
 *  when the group is empty). */
int hkt_kill_group(pid_t pgid, int sig);

/**
 * Lists this process's live children (zombies among them are reaped, not
 * listed; so are processes already SIGKILLed and dying) into pids[0..max),
 * returning how many there are (possibly more than max). Call it when no
 * hkt_proc is running: every child found is then a process that some
 * tested program left behind.
 */
int hkt_orphans(pid_t *pids, int max);

/** SIGKILLs the process group of every child hkt_orphans finds, and
 *  reaps them. Returns how many there were. */
int hkt_kill_orphans(void);

/** Counts the lines of text (last one may lack '\n') containing
 *  substring. */
int hkt_count_lines(const char *text, const char *substring);

/**
 * Writes into out (cap bytes) the sh -c command that runs "prog args" as a
 * rank of hkrun's job; with local > 0 the rank is told it is on a host of
 * `local` ranks (HK_LOCAL_RANK = rank % local, HK_LOCAL_SIZE = local): how
 * one machine runs several hosts' ranks, for the hierarchical schedules.
 */
void hkt_hosts_cmd(char *out, size_t cap, int local, const char *prog,
                   const char *args);

/**
 * A cmocka test (struct CMUnitTest) named TEST that runs FN with *state
 * pointing to a TYPE initialised with the rest ({...}): one test function
 * serves several named cases. The TYPE is a compound literal, alive while
 * the block that holds the tests array runs (main's).
 */
#define HKT_CASE_TEST(test, fn, type, ...)                                     \
  {                                                                            \
    .name = #test, .test_func = fn, .initial_state = &(type) { __VA_ARGS__ }   \
  }

#endif
