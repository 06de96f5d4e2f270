/*
 * remote.c - probing the hosts and supervising mpirun (see remote.h).
 */
#include "launcher/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/status.h"
#include "launcher/output.h"

/* Probes run at once at most; the rest wait for a free place. */
#define PROBES_AT_ONCE 64
/* Bytes of a probe's stderr kept (its last words). */
#define TAIL_BYTES 512
/* From SIGTERM to SIGKILL once hkrun was signalled, s. */
#define KILL_AFTER_TERM_S 0.5

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *hk_remote_agent(const char *mpi_args) {
  char *agent = NULL;
  hk_argv w = {0};
  if (mpi_args && hk_argv_split(&w, mpi_args, "--mpi-args") == HK_OK)
    for (int i = 0; i + 2 < w.n; i++)
      if ((!strcmp(w.v[i], "--mca") || !strcmp(w.v[i], "-mca") ||
           !strcmp(w.v[i], "--gmca") || !strcmp(w.v[i], "-gmca")) &&
          !strcmp(w.v[i + 1], "plm_rsh_agent")) {
        free(agent);
        agent = strdup(w.v[i + 2]);
      }
  hk_argv_free(&w);
  if (!agent && getenv("OMPI_MCA_plm_rsh_agent") &&
      *getenv("OMPI_MCA_plm_rsh_agent"))
    agent = strdup(getenv("OMPI_MCA_plm_rsh_agent"));
  return agent;
}

int hk_remote_uses_rsh(void) {
  static const char *const managed[] = {"SLURM_JOB_ID", "PBS_JOBID",
                                        "LSB_JOBID", NULL};
  for (int i = 0; managed[i]; i++)
    if (getenv(managed[i]) && *getenv(managed[i]))
      return 0;
  return 1;
}

const char *hk_remote_ssh_options(double timeout_s, char *buf, size_t cap) {
  int t = (int)(timeout_s + 0.999);
  snprintf(buf, cap, "-o BatchMode=yes -o ConnectTimeout=%d", t < 1 ? 1 : t);
  return buf;
}

/* ---- probing ---- */

typedef struct probe {
  const char *host;
  pid_t pid; /* 0: not started, -1: done */
  int err_fd;
  int status; /* waitpid's */
  int timed_out, exec_failed;
  char tail[TAIL_BYTES + 1];
  size_t tail_len;
} probe;

static int is_local(const char *h, const char *me) {
  if (!strcmp(h, "localhost") || !strcmp(h, "127.0.0.1"))
    return 1;
  if (!me || !*me)
    return 0;
  if (!strcmp(h, me))
    return 1;
  size_t label = strcspn(me, ".");
  return strlen(h) == label && !strncmp(h, me, label);
}

/* The probe's command for host: agent words (ssh and ssh_args when
 * agent is NULL), host, true. */
static hk_status probe_argv(const char *agent, const char *ssh_args,
                            const char *host, hk_argv *out) {
  hk_status st = HK_OK;
  if (!agent) {
    st = hk_argv_push(out, "ssh");
    if (st == HK_OK && ssh_args)
      st = hk_argv_split(out, ssh_args, "ssh options");
  } else {
    /* Open MPI's "ssh : rsh" lists alternatives: the first is tried */
    char *first = strdup(agent);
    if (!first)
      return hk_fail(HK_ERR_NOMEM, "cannot copy the agent");
    char *colon = strstr(first, " : ");
    if (colon)
      *colon = '\0';
    st = hk_argv_split(out, first, "plm_rsh_agent");
    free(first);
    if (st == HK_OK && out->n == 0)
      st = hk_fail(HK_ERR_INVALID_ARG, "plm_rsh_agent is empty");
  }
  if (st == HK_OK)
    st = hk_argv_push(out, host);
  if (st == HK_OK)
    st = hk_argv_push(out, "true");
  return st;
}

static void start_probe(probe *p, const hk_argv *cmd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    p->exec_failed = 1;
    snprintf(p->tail, sizeof p->tail, "pipe: %s", strerror(errno));
    p->pid = -1;
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, STDIN_FILENO);
      dup2(nul, STDOUT_FILENO);
    }
    dup2(fds[1], STDERR_FILENO);
    execvp(cmd->v[0], cmd->v);
    dprintf(STDERR_FILENO, "cannot run '%s': %s", cmd->v[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  if (pid < 0) {
    close(fds[0]);
    p->exec_failed = 1;
    snprintf(p->tail, sizeof p->tail, "fork: %s", strerror(errno));
    p->pid = -1;
    return;
  }
  setpgid(pid, pid);
  p->pid = pid;
  p->err_fd = fds[0];
}

/* Reads what is there of p's stderr (non-blocking), keeping the last
 * TAIL_BYTES. Returns 1 after reading, 0 once it is closed, -1 when
 * nothing is there now. */
static int read_tail(probe *p) {
  char buf[1024];
  ssize_t n = read(p->err_fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return -1;
  if (n <= 0) {
    close(p->err_fd);
    p->err_fd = -1;
    return 0;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (p->tail_len == TAIL_BYTES) {
      memmove(p->tail, p->tail + 1, TAIL_BYTES - 1);
      p->tail_len--;
    }
    p->tail[p->tail_len++] = buf[i];
  }
  p->tail[p->tail_len] = '\0';
  return 1;
}

/* The last non-empty line of p's stderr, into out. */
static void last_line(const probe *p, char *out, size_t cap) {
  size_t end = p->tail_len;
  while (end > 0 && (p->tail[end - 1] == '\n' || p->tail[end - 1] == '\r'))
    end--;
  size_t start = end;
  while (start > 0 && p->tail[start - 1] != '\n')
    start--;
  snprintf(out, cap, "%.*s", (int)(end - start), p->tail + start);
}

/* Runs probes ps[0..n) (at most PROBES_AT_ONCE at a time) until each ended
 * or the deadline passed. */
static void run_probes(probe *ps, int n, hk_argv *cmds, double deadline) {
  int next = 0, running = 0;
  struct pollfd pf[PROBES_AT_ONCE];
  int who[PROBES_AT_ONCE];
  for (;;) {
    while (running < PROBES_AT_ONCE && next < n) {
      start_probe(&ps[next], &cmds[next]);
      running += ps[next].pid > 0;
      next++;
    }
    if (running == 0 && next == n)
      return;
    int np = 0;
    for (int i = 0; i < next; i++)
      if (ps[i].pid > 0 && ps[i].err_fd >= 0) {
        pf[np] = (struct pollfd){.fd = ps[i].err_fd, .events = POLLIN};
        who[np++] = i;
      }
    double left = deadline - now_s();
    if (left <= 0) { /* no answer in time: end them, and what they began */
      for (int i = 0; i < n; i++) {
        if (ps[i].pid == 0) /* never started: the time was up */
          ps[i].timed_out = 1, ps[i].pid = -1;
        if (ps[i].pid <= 0)
          continue;
        kill(-ps[i].pid, SIGKILL);
        waitpid(ps[i].pid, &ps[i].status, 0);
        if (ps[i].err_fd >= 0)
          close(ps[i].err_fd);
        ps[i].err_fd = -1;
        ps[i].timed_out = 1;
        ps[i].pid = -1;
      }
      return;
    }
    /* stderr closed (or none left open): poll briefly for the exit */
    int ms = np ? (int)(left * 1000) + 1 : 20;
    if (ms > 100)
      ms = 100;
    if (poll(pf, (nfds_t)np, ms) > 0)
      for (int k = 0; k < np; k++)
        if (pf[k].revents)
          read_tail(&ps[who[k]]);
    for (int i = 0; i < next; i++) {
      if (ps[i].pid <= 0)
        continue;
      if (waitpid(ps[i].pid, &ps[i].status, WNOHANG) == ps[i].pid) {
        kill(-ps[i].pid, SIGKILL); /* what it left in its group */
        while (ps[i].err_fd >= 0 && read_tail(&ps[i]) > 0)
          ;
        if (ps[i].err_fd >= 0) /* held open by something it began */
          close(ps[i].err_fd);
        ps[i].err_fd = -1;
        ps[i].pid = -1;
        running--;
      }
    }
  }
}

int hk_remote_probe(const hk_hostlist *hosts, const char *local_hostname,
                    const char *agent, const char *ssh_args, double timeout_s) {
  if (!hosts || hosts->n == 0)
    return 0;
  probe *ps = calloc((size_t)hosts->n, sizeof *ps);
  hk_argv *cmds = calloc((size_t)hosts->n, sizeof *cmds);
  if (!ps || !cmds) {
    free(ps);
    free(cmds);
    hk_out_say("out of memory probing %d hosts", hosts->n);
    return 1;
  }
  int n = 0, rc = 0;
  for (int i = 0; i < hosts->n; i++) {
    if (is_local(hosts->v[i].name, local_hostname))
      continue;
    if (probe_argv(agent, ssh_args, hosts->v[i].name, &cmds[n]) != HK_OK) {
      hk_out_say("%s", hk_last_error());
      rc = 1;
      break;
    }
    ps[n].host = hosts->v[i].name;
    ps[n].err_fd = -1;
    n++;
  }
  if (rc == 0 && n > 0)
    run_probes(ps, n, cmds, now_s() + timeout_s);
  for (int i = 0; i < n && rc == 0; i++) {
    const probe *p = &ps[i];
    int ok = !p->timed_out && !p->exec_failed && WIFEXITED(p->status) &&
             WEXITSTATUS(p->status) == 0;
    if (ok)
      continue;
    char line[TAIL_BYTES + 1], why[TAIL_BYTES + 96];
    last_line(p, line, sizeof line);
    if (p->timed_out)
      snprintf(why, sizeof why,
               "no answer within HK_START_TIMEOUT_S=%g s (is it down, or "
               "dropping packets?)",
               timeout_s);
    else if (p->exec_failed || !WIFEXITED(p->status))
      snprintf(why, sizeof why, "%s", line[0] ? line : "the agent failed");
    else
      snprintf(why, sizeof why, "%s exited with status %d%s%s", cmds[i].v[0],
               WEXITSTATUS(p->status), line[0] ? ": " : "", line);
    char *what = hk_argv_format(&cmds[i]);
    hk_out_say(
        "cannot reach host '%s': %s (checked with: %s); nothing was started",
        p->host, why, what ? what : cmds[i].v[0]);
    free(what);
  }
  for (int i = 0; i < n; i++) {
    const probe *p = &ps[i];
    if (p->timed_out || p->exec_failed || !WIFEXITED(p->status) ||
        WEXITSTATUS(p->status) != 0)
      rc = 1;
  }
  for (int i = 0; i < hosts->n; i++)
    hk_argv_free(&cmds[i]);
  free(cmds);
  free(ps);
  return rc;
}

/* ---- supervising mpirun ---- */

int hk_remote_run(const hk_argv *cmd, double grace_s) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t hkrun = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    /* hkrun SIGKILLed: mpirun goes too, as when it was exec'd and got
     * that SIGKILL itself (each daemon loses its link to it and kills its
     * ranks; a host cut off meanwhile loses its agent, and with it its
     * session). SIGTERM would let mpirun wait on daemons it cannot reach,
     * with no one left to SIGKILL it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != hkrun)
      _exit(1);
    if (isatty(STDIN_FILENO)) { /* a background group must not read it */
      int nul = open("/dev/null", O_RDONLY);
      if (nul >= 0)
        dup2(nul, STDIN_FILENO);
    }
    execvp(cmd->v[0], cmd->v);
    int e = errno;
    hk_out_say(
        "cannot run '%s': %s (hk starts jobs on several hosts through Open "
        "MPI: install openmpi-bin)",
        cmd->v[0], strerror(e));
    _exit(127);
  }
  if (pid < 0) {
    hk_out_say("fork: %s", strerror(errno));
    sigprocmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  setpgid(pid, pid);
  int signalled = 0, status = 0;
  double term_at = -1, kill_at = -1;
  for (;;) {
    double t = now_s(), next = -1;
    if (term_at >= 0 && t >= term_at) {
      kill(-pid, SIGTERM);
      term_at = -1;
      kill_at = t + KILL_AFTER_TERM_S;
    }
    if (kill_at >= 0 && t >= kill_at) {
      kill(-pid, SIGKILL);
      kill_at = -1;
    }
    next = term_at >= 0 ? term_at : kill_at;
    siginfo_t info;
    int sig;
    if (next >= 0) {
      double left = next - now_s();
      if (left < 0)
        left = 0;
      struct timespec ts = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
      sig = sigtimedwait(&set, &info, &ts);
    } else {
      sig = sigwaitinfo(&set, &info);
    }
    if (sig < 0)
      continue; /* EAGAIN (a timer is due) or EINTR */
    if (sig == SIGCHLD) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        break;
      continue;
    }
    if (signalled) { /* a second signal: at once */
      hk_out_say("received %s again; killing mpirun", strsignal(sig));
      kill(-pid, SIGKILL);
      continue;
    }
    signalled = sig;
    hk_out_say("received signal %d (%s); forwarding it to mpirun", sig,
               strsignal(sig));
    kill(-pid, sig);
    term_at = now_s() + grace_s;
  }
  kill(-pid, SIGKILL); /* what mpirun left in its group */
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (signalled)
    return 128 + signalled;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}
