/*
 * discover.c - running an elastic job's host discovery script (see
 * discover.h).
 */
#include "launcher/discover.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

#define OUTPUT_CAP 65536 /* the most of its stdout read; the rest dropped */

/* Starts script through /bin/sh -c in a process group of its own, its
 * stdout a pipe (*rfd). Returns its pid, or -1 (errno set). */
static pid_t start_script(const char *script, int *rfd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (dup2(p[1], STDOUT_FILENO) < 0)
      _exit(127);
    execl("/bin/sh", "sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  setpgid(pid, pid); /* (either side may run first) */
  close(p[1]);
  *rfd = p[0];
  return pid;
}

/* Reads the script's stdout into buf[cap] (NUL-terminated) until it
 * closes it and exits, or until deadline: then kills its process group.
 * Returns its wait status, or -1 when it ran out of time. */
static int collect(pid_t pid, int fd, double deadline, char *buf, size_t cap) {
  size_t len = 0;
  int open_fd = 1, status = 0;
  for (;;) {
    if (!open_fd && waitpid(pid, &status, WNOHANG) == pid)
      break;
    const double left = deadline - hk_now();
    if (left <= 0) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      status = -1;
      break;
    }
    /* after EOF only its exit is awaited: a short poll between looks */
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int ms = open_fd ? (int)(left * 1000.0) + 1 : 10;
    if (poll(open_fd ? &pf : NULL, open_fd ? 1 : 0, ms) <= 0 || !open_fd)
      continue;
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      open_fd = 0;
      continue;
    }
    size_t k = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
    memcpy(buf + len, tmp, k);
    len += k;
  }
  close(fd);
  buf[len] = '\0';
  return status;
}

int hkrun_discover(const char *script, int slots_per_host, double limit_s,
                   char *out, size_t cap) {
  int n = 0;
  return hkrun_discover_hosts(script, slots_per_host, limit_s, NULL, 0, &n, out,
                              cap);
}

int hkrun_discover_hosts(const char *script, int slots_per_host, double limit_s,
                         hkrun_listed *listed, int listed_cap, int *nlisted,
                         char *out, size_t cap) {
  *nlisted = 0;
  int fd = -1;
  pid_t pid = start_script(script, &fd);
  if (pid < 0) {
    snprintf(out, cap, "--host-discovery-script %s cannot be run: %s", script,
             strerror(errno));
    return -1;
  }
  char *text = malloc(OUTPUT_CAP);
  if (!text) {
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    snprintf(out, cap, "--host-discovery-script %s: out of memory", script);
    return -1;
  }
  int status = collect(pid, fd, hk_now() + limit_s, text, OUTPUT_CAP);
  if (status == -1) {
    free(text);
    snprintf(out, cap,
             "--host-discovery-script %s did not answer within %g s (it "
             "was killed)",
             script, limit_s);
    return -1;
  }
  char line[512], hosts[160] = "", bad[200] = "";
  int nhosts = 0, slots = 0;
  for (char *at = text, *nl; *at; at = nl ? nl + 1 : at + strlen(at)) {
    nl = strchr(at, '\n');
    size_t ll = nl ? (size_t)(nl - at) : strlen(at);
    snprintf(line, sizeof line, "%.*s", (int)ll, at);
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line + strspn(line, " \t");
    if (!*p)
      continue;
    char *colon = strrchr(p, ':');
    long k = slots_per_host > 0 ? slots_per_host : 1;
    if (colon) {
      char *end;
      k = strtol(colon + 1, &end, 10);
      if (colon[1] == '\0' || *end || k < 1 || k > 65536) {
        if (!*bad)
          snprintf(bad, sizeof bad,
                   "; its line '%.100s' has no slot count "
                   "(host:slots, slots 1..65536)",
                   p);
        continue;
      }
    }
    if (nhosts < listed_cap) {
      snprintf(listed[nhosts].host, sizeof listed[nhosts].host, "%.*s",
               colon ? (int)(colon - p) : 255, p);
      listed[nhosts].slots = (int)k;
    }
    size_t n = strlen(hosts);
    if (nhosts < 4)
      snprintf(hosts + n, sizeof hosts - n, "%s%.*s:%ld", nhosts ? ", " : "",
               colon ? (int)(colon - p) : 64, p, k);
    else if (nhosts == 4)
      snprintf(hosts + n, sizeof hosts - n, ", ...");
    nhosts++;
    slots += (int)k;
  }
  free(text);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(out, cap, "--host-discovery-script %s %s %d", script,
             WIFSIGNALED(status) ? "was killed by signal"
                                 : "exited with status",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return -1;
  }
  if (nhosts == 0) {
    snprintf(out, cap, "--host-discovery-script %s lists no host%s", script,
             bad);
    return 0;
  }
  *nlisted = nhosts;
  snprintf(out, cap,
           "--host-discovery-script %s lists %d slot%s on %d host%s "
           "(%s)%s",
           script, slots, slots == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s",
           hosts, bad);
  return slots;
}
