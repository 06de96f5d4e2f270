/*
 * harness.c - process control for integration tests (see harness.h).
 *
 * Every wait is a poll(2) with a deadline on the process's output pipes
 * and its pidfd; nothing sleeps.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int hkt_setup(void) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    perror("harness: prctl(PR_SET_CHILD_SUBREAPER)");
    return -1;
  }
  /* an interrupted test command (ctest or scripts/test.sh killed) ends
   * this test too, which ends what it started (child_exec) */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

const char *hkt_tmpdir(void) {
  const char *t = getenv("TMPDIR");
  return t && *t == '/' ? t : "/tmp";
}

int hkt_mkdtemp(const char *prefix, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%sXXXXXX", hkt_tmpdir(), prefix);
  if (n < 0 || (size_t)n >= cap || !mkdtemp(out)) {
    perror("harness: mkdtemp");
    return -1;
  }
  return 0;
}

static int remove_one(const char *path, const struct stat *sb, int type,
                      struct FTW *ftw) {
  (void)sb;
  (void)type;
  (void)ftw;
  if (remove(path) != 0 && errno != ENOENT) {
    fprintf(stderr, "harness: cannot remove %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

int hkt_flight_folder(const char *base, char *out, size_t cap) {
  DIR *d = opendir(base);
  if (!d)
    return -1;
  int found = -1;
  for (struct dirent *de; found && (de = readdir(d));)
    if (!strncmp(de->d_name, "hk-", 3) && strlen(de->d_name) == 19) {
      snprintf(out, cap, "%s/%s", base, de->d_name);
      found = 0;
    }
  closedir(d);
  return found;
}

int hkt_remove_tree(const char *dir) {
  /* depth first, without following links; a missing tree is removed */
  int rc = nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  return rc == 0 || errno == ENOENT ? 0 : -1;
}

int hkt_mkstemp(const char *prefix, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%sXXXXXX", hkt_tmpdir(), prefix);
  int fd = n < 0 || (size_t)n >= cap ? -1 : mkstemp(out);
  if (fd < 0) {
    perror("harness: mkstemp");
    return -1;
  }
  close(fd);
  return 0;
}

double hkt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- captured text ---- */

static int text_append(hkt_text *t, const char *p, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + n + 1)
      cap *= 2;
    char *d = realloc(t->data, cap);
    if (!d)
      return -1;
    t->data = d;
    t->cap = cap;
  }
  memcpy(t->data + t->len, p, n);
  t->len += n;
  t->data[t->len] = '\0';
  return 0;
}

/* Reads what fd has now into t. At EOF or on error closes *fd (-1). */
static void drain_fd(int *fd, hkt_text *t) {
  char buf[65536];
  while (*fd >= 0) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n > 0) {
      if (text_append(t, buf, (size_t)n) != 0) {
        fprintf(stderr, "harness: out of memory capturing output\n");
        close(*fd);
        *fd = -1;
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    close(*fd); /* EOF or a real error */
    *fd = -1;
  }
}

static void reap(hkt_proc *p, int options) {
  if (p->reaped)
    return;
  int status;
  pid_t w;
  do
    w = waitpid(p->pid, &status, options);
  while (w < 0 && errno == EINTR);
  if (w == p->pid) {
    p->reaped = 1;
    p->status = status;
    p->ended = hkt_now();
  }
}

/*
 * Waits until something happens (output, exit) or the deadline, then
 * captures output and reaps if the process exited. watch_exit: include the
 * pidfd. Returns 0, or -1 when the deadline has passed.
 */
static int pump(hkt_proc *p, double deadline, int watch_exit) {
  struct pollfd fds[3];
  int n = 0;
  if (p->out_fd >= 0)
    fds[n++] = (struct pollfd){.fd = p->out_fd, .events = POLLIN};
  if (p->err_fd >= 0)
    fds[n++] = (struct pollfd){.fd = p->err_fd, .events = POLLIN};
  if (watch_exit && !p->reaped)
    fds[n++] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
  double left = deadline - hkt_now();
  if (left <= 0)
    return -1;
  if (n == 0)
    return 0;
  int ms = (int)(left * 1000.0) + 1;
  int rc = poll(fds, (nfds_t)n, ms);
  if (rc < 0 && errno != EINTR) {
    perror("harness: poll");
    return -1;
  }
  drain_fd(&p->out_fd, &p->out);
  drain_fd(&p->err_fd, &p->err);
  if (watch_exit)
    reap(p, WNOHANG);
  return 0;
}

/* ---- starting ---- */

static void child_exec(char *const argv[], char *const extra_env[], int in,
                       int out, int err, pid_t parent) {
  setpgid(0, 0);
  /* dies with the test (hkrun then ends its workers, mpirun its daemons,
   * netbed.sh its bed) */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent)
    _exit(127); /* the test died before the line above */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (int s = 1; s < NSIG; s++)
    signal(s, SIG_DFL); /* fails harmlessly for SIGKILL/SIGSTOP */
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
    _exit(127);
  for (size_t i = 0; extra_env && extra_env[i]; i++)
    putenv(extra_env[i]); /* the child's copy of the strings */
  execvp(argv[0], argv);
  dprintf(2, "harness: cannot execute '%s': %s\n", argv[0], strerror(errno));
  _exit(127);
}

int hkt_start(char *const argv[], char *const extra_env[], hkt_proc *proc) {
  memset(proc, 0, sizeof *proc);
  proc->in_fd = proc->out_fd = proc->err_fd = proc->pidfd = -1;
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0)
    return perror("harness: pipe2"), -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return perror("harness: pipe2"), -1;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    return perror("harness: pipe2"), -1;
  }
  proc->started = hkt_now();
  proc->own_flight = getenv("HK_FLIGHT_DIR") == NULL;
  for (size_t i = 0; extra_env && extra_env[i]; i++)
    if (!strncmp(extra_env[i], "HK_FLIGHT_DIR=", 14))
      proc->own_flight = 0;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("harness: fork");
    int fds[6] = {in[0], in[1], out[0], out[1], err[0], err[1]};
    for (int i = 0; i < 6; i++)
      close(fds[i]);
    return -1;
  }
  if (pid == 0)
    child_exec(argv, extra_env, in[0], out[1], err[1], parent);
  setpgid(pid, pid); /* also here, so it holds before we signal the group */
  close(in[0]);
  close(out[1]);
  close(err[1]);
  proc->pid = pid;
  proc->in_fd = in[1];
  proc->out_fd = out[0];
  proc->err_fd = err[0];
  fcntl(proc->out_fd, F_SETFL, O_NONBLOCK);
  fcntl(proc->err_fd, F_SETFL, O_NONBLOCK);
  proc->pidfd = pidfd_open(pid, 0);
  if (proc->pidfd < 0) {
    perror("harness: pidfd_open");
    kill(-pid, SIGKILL);
    reap(proc, 0);
    hkt_result r;
    hkt_finish(proc, 1, &r);
    hkt_result_free(&r);
    return -1;
  }
  return 0;
}

/* ---- waiting for output ---- */

/* Scans the complete lines of t from *pos on; advances *pos past them.
 * Returns the first line containing sub (and its length), or counts. */
static const char *scan_lines(const hkt_text *t, size_t *pos, const char *sub,
                              size_t *len_out, int *count) {
  while (*pos < t->len) {
    const char *start = t->data + *pos;
    const char *nl = memchr(start, '\n', t->len - *pos);
    if (!nl)
      return NULL; /* incomplete: look again when it is */
    size_t len = (size_t)(nl - start);
    *pos += len + 1;
    if (memmem(start, len, sub, strlen(sub))) {
      if (count) {
        (*count)++;
        continue;
      }
      *len_out = len;
      return start;
    }
  }
  return NULL;
}

int hkt_wait_line(hkt_proc *proc, const char *substring, double timeout_s,
                  char **line_out) {
  double deadline = hkt_now() + timeout_s;
  size_t pos[2] = {0, 0};
  if (line_out)
    *line_out = NULL;
  for (;;) {
    hkt_text *texts[2] = {&proc->out, &proc->err};
    for (int s = 0; s < 2; s++) {
      size_t len;
      const char *line = scan_lines(texts[s], &pos[s], substring, &len, NULL);
      if (line) {
        if (line_out)
          *line_out = strndup(line, len);
        return 0;
      }
    }
    if (proc->out_fd < 0 && proc->err_fd < 0) {
      fprintf(stderr,
              "harness: output ended without a line containing "
              "'%s'\n",
              substring);
      return -1;
    }
    if (pump(proc, deadline, 0) != 0) {
      fprintf(stderr, "harness: no line containing '%s' within %.1f s\n",
              substring, timeout_s);
      return -1;
    }
  }
}

int hkt_wait_lines(hkt_proc *proc, const char *substring, int n,
                   double timeout_s) {
  double deadline = hkt_now() + timeout_s;
  size_t pos[2] = {0, 0};
  int count = 0;
  for (;;) {
    size_t len;
    scan_lines(&proc->out, &pos[0], substring, &len, &count);
    scan_lines(&proc->err, &pos[1], substring, &len, &count);
    if (count >= n)
      return 0;
    if ((proc->out_fd < 0 && proc->err_fd < 0) ||
        pump(proc, deadline, 0) != 0) {
      fprintf(stderr, "harness: %d of %d lines containing '%s' within %.1f s\n",
              count, n, substring, timeout_s);
      return -1;
    }
  }
}

void hkt_close_stdin(hkt_proc *proc) {
  if (proc->in_fd >= 0) {
    close(proc->in_fd);
    proc->in_fd = -1;
  }
}

/* ---- finishing ---- */

/* The last `cap` bytes of text, from a line's start where one is near. */
static const char *tail_of(const char *text, size_t cap) {
  if (!text)
    return "";
  size_t n = strlen(text);
  if (n <= cap)
    return text;
  const char *t = text + n - cap, *nl = strchr(t, '\n');
  return nl ? nl + 1 : t;
}

/* Says what a process that did not end was doing, for the log of a test
 * that failed on it: its output so far, then every process of its group
 * and its children (state, name, kernel wait channel). */
static void show_stuck(const hkt_proc *proc) {
  fprintf(stderr, "harness: its stdout so far (tail):\n%s\n",
          tail_of(proc->out.data, 4096));
  fprintf(stderr, "harness: its stderr so far (tail):\n%s\n",
          tail_of(proc->err.data, 4096));
  DIR *d = opendir("/proc");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end, path[300], stat[512] = "", wchan[128] = "";
    long v = strtol(e->d_name, &end, 10);
    if (*end != '\0' || v <= 0)
      continue;
    snprintf(path, sizeof path, "/proc/%ld/stat", v);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    size_t got = fread(stat, 1, sizeof stat - 1, f);
    stat[got] = '\0';
    fclose(f);
    /* pid (comm) state ppid pgrp ...: comm may hold blanks; read after ')' */
    const char *rp = strrchr(stat, ')');
    char state = '?';
    long ppid = 0, pgrp = 0;
    if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3)
      continue;
    if (pgrp != proc->pid && ppid != proc->pid)
      continue;
    snprintf(path, sizeof path, "/proc/%ld/wchan", v);
    if ((f = fopen(path, "r")) != NULL) {
      got = fread(wchan, 1, sizeof wchan - 1, f);
      wchan[got] = '\0';
      fclose(f);
    }
    *strchr(stat, ' ') = '\0';
    fprintf(stderr, "harness: pid %ld ppid %ld state %c wchan %s: %.*s\n", v,
            ppid, state, wchan[0] ? wchan : "-",
            (int)(rp - stat - strlen(stat)), stat + strlen(stat) + 1);
  }
  closedir(d);
}

/* Removes the folder of flight records that hkrun's last words name
 * ("N flight records of this job in DIR; read them with: ..."): its
 * hk-flight.* files, then the folder, which holds nothing else. */
static void remove_flight_records(const char *err) {
  const char *key = " of this job in ";
  const char *at = strstr(err, key);
  if (!at)
    return;
  at += strlen(key);
  const char *end = strstr(at, "; read them with");
  char dir[4096];
  if (!end || (size_t)(end - at) >= sizeof dir)
    return;
  memcpy(dir, at, (size_t)(end - at));
  dir[end - at] = '\0';
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, "hk-flight.", 10)) {
      char path[4400];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
  rmdir(dir);
}

int hkt_finish(hkt_proc *proc, double timeout_s, hkt_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_code = -1;
  hkt_close_stdin(proc);
  double deadline = hkt_now() + timeout_s;
  while (!proc->reaped && pump(proc, deadline, 1) == 0) {
  }
  if (!proc->reaped) {
    r->timed_out = 1;
    fprintf(stderr,
            "harness: pid %d still running after %.1f s; killing "
            "its process group\n",
            (int)proc->pid, timeout_s);
    show_stuck(proc);
    kill(-proc->pid, SIGKILL);
    reap(proc, 0);
  }
  /* The rest of its output: whoever still holds the pipes gets until the
   * deadline (at least 1 s) to close them. */
  double out_deadline = deadline > hkt_now() + 1 ? deadline : hkt_now() + 1;
  while ((proc->out_fd >= 0 || proc->err_fd >= 0) &&
         pump(proc, out_deadline, 0) == 0) {
  }
  if (proc->out_fd >= 0 || proc->err_fd >= 0)
    fprintf(stderr,
            "harness: pid %d's output was still open at the "
            "deadline\n",
            (int)proc->pid);

  if (WIFEXITED(proc->status)) {
    r->exited = 1;
    r->exit_code = WEXITSTATUS(proc->status);
  } else if (WIFSIGNALED(proc->status)) {
    r->signal = WTERMSIG(proc->status);
  }
  r->elapsed_s = proc->ended - proc->started;
  /* Hand the captured text over (always allocated, even if empty). */
  text_append(&proc->out, "", 0);
  text_append(&proc->err, "", 0);
  r->out = proc->out.data;
  r->out_len = proc->out.len;
  r->err = proc->err.data;
  r->err_len = proc->err.len;
  if (proc->own_flight)
    remove_flight_records(r->err);
  int fds[4] = {proc->out_fd, proc->err_fd, proc->pidfd, proc->in_fd};
  for (int i = 0; i < 4; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  memset(proc, 0, sizeof *proc);
  proc->in_fd = proc->out_fd = proc->err_fd = proc->pidfd = -1;
  return r->timed_out ? -1 : 0;
}

int hkt_run(char *const argv[], char *const extra_env[], double timeout_s,
            hkt_result *r) {
  hkt_proc p;
  if (hkt_start(argv, extra_env, &p) != 0) {
    memset(r, 0, sizeof *r);
    r->exit_code = -1;
    return -1;
  }
  return hkt_finish(&p, timeout_s, r);
}

void hkt_result_free(hkt_result *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

/* ---- processes ---- */

/* Reads state and parent of pid from /proc/<pid>/stat. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* comm may hold spaces */
  int pp;
  if (!paren || sscanf(paren + 1, " %c %d", state, &pp) != 2)
    return -1;
  *ppid = pp;
  return 0;
}

pid_t hkt_parent(pid_t pid) {
  char state;
  pid_t ppid;
  return proc_stat(pid, &state, &ppid) == 0 ? ppid : -1;
}

int hkt_pid_alive(pid_t pid) {
  if (pid <= 0)
    return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 0;
  char state;
  pid_t ppid;
  if (proc_stat(pid, &state, &ppid) != 0)
    return 0; /* gone between the two checks */
  if (state == 'Z' || state == 'X') {
    if (ppid == getpid())
      waitpid(pid, NULL, WNOHANG);
    return 0;
  }
  return 1;
}

int hkt_wait_gone(pid_t pid, double timeout_s) {
  if (!hkt_pid_alive(pid))
    return 0;
  int fd = pidfd_open(pid, 0);
  if (fd < 0)
    return errno == ESRCH ? 0 : -1;
  double deadline = hkt_now() + timeout_s;
  int gone = 0;
  while (!gone) {
    double left = deadline - hkt_now();
    if (left <= 0)
      break;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)(left * 1000.0) + 1);
    if (rc < 0 && errno != EINTR)
      break;
    gone = rc > 0 || !hkt_pid_alive(pid);
  }
  close(fd);
  if (gone)
    hkt_pid_alive(pid); /* reaps it if it is our zombie */
  return gone ? 0 : -1;
}

int hkt_kill_group(pid_t pgid, int sig) {
  if (pgid <= 0) {
    errno = EINVAL;
    return -1;
  }
  return kill(-pgid, sig);
}

/* 1 if pid has been SIGKILLed and can never run its own code again:
 * SIGKILL pending (/proc/PID/status SigPnd or ShdPnd, bit 8) or the
 * kernel tearing it down (PF_EXITING, 0x4, in /proc/PID/stat's flags).
 * hkrun SIGKILLs what a job left in its process groups just before it
 * exits; on a loaded machine such a process can still be there, dying,
 * when the test looks: killed is not left behind. */
static int proc_dying(pid_t pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 1; /* gone */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  unsigned long flags = 0;
  if (paren && sscanf(paren + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1 &&
      (flags & 0x4))
    return 1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  if (!(f = fopen(path, "r")))
    return 1;
  int dying = 0;
  while (!dying && fgets(buf, sizeof buf, f)) {
    unsigned long long mask;
    if ((sscanf(buf, "SigPnd: %llx", &mask) == 1 ||
         sscanf(buf, "ShdPnd: %llx", &mask) == 1) &&
        (mask & (1ull << (SIGKILL - 1))))
      dying = 1;
  }
  fclose(f);
  return dying;
}

int hkt_orphans(pid_t *pids, int max) {
  DIR *d = opendir("/proc");
  if (!d)
    return perror("harness: /proc"), 0;
  int n = 0;
  pid_t self = getpid();
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    if (*end != '\0' || v <= 0)
      continue;
    char state;
    pid_t ppid;
    if (proc_stat((pid_t)v, &state, &ppid) != 0 || ppid != self)
      continue;
    if (!hkt_pid_alive((pid_t)v) || proc_dying((pid_t)v)) /* reaps zombies */
      continue;
    if (n < max)
      pids[n] = (pid_t)v;
    n++;
  }
  closedir(d);
  return n;
}

int hkt_kill_orphans(void) {
  pid_t pids[256];
  int n = hkt_orphans(pids, 256);
  for (int i = 0; i < n && i < 256; i++) {
    kill(-pids[i], SIGKILL);
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
  }
  return n;
}

void hkt_hosts_cmd(char *out, size_t cap, int local, const char *prog,
                   const char *args) {
  if (local > 0)
    snprintf(out, cap,
             "HK_LOCAL_RANK=$((HK_RANK %% %d)) HK_LOCAL_SIZE=%d exec %s %s",
             local, local, prog, args);
  else
    snprintf(out, cap, "exec %s %s", prog, args);
}

int hkt_count_lines(const char *text, const char *substring) {
  int n = 0;
  size_t sublen = strlen(substring);
  while (text && *text) {
    const char *nl = strchr(text, '\n');
    size_t len = nl ? (size_t)(nl - text) : strlen(text);
    if (memmem(text, len, substring, sublen))
      n++;
    text += len + (nl ? 1 : 0);
  }
  return n;
}
