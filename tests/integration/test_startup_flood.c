/*
 * Start-up cannot be denied by anyone on the host: while a job of 3 ranks
 * starts, this test holds connections to every port the job listens on,
 * found as anyone can find them (/proc/net/tcp: hkrun's rendezvous and
 * rank 0's listening socket, which waits for its peers): idle ones that
 * never say a word, ones that send 64 bytes of garbage, and ones that
 * close at once. The job must complete with the right result within a
 * bound far below its start timeout, logging why it refused them ("bad
 * secret", "closed before authenticating", "dropped unauthenticated") in
 * a bounded number of lines. Then the same with hkrun's descriptor limit
 * lowered to 128 and 300 idle connections to its rendezvous.
 * (w_flood holds ranks 1 and 2 back until the connections are open.)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define W_FLOOD WORKER_DIR "/w_flood"
#define W_ALLREDUCE WORKER_DIR "/w_allreduce"
#define MAX_FDS 1024

/* Adds the socket inodes of pid's descriptors to inodes[*n] (max). */
static void socket_inodes(long pid, unsigned long *inodes, int *n, int max) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd", pid);
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) && *n < max) {
    char link[320], target[128];
    snprintf(link, sizeof link, "%s/%s", path, e->d_name);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len <= 0)
      continue;
    target[len] = '\0';
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1)
      inodes[(*n)++] = ino;
  }
  closedir(d);
}

/* The ports that hkrun (pid) and its workers listen on, from
 * /proc/net/tcp, into ports[max], hkrun's first; *from_workers counts the
 * workers'. */
static int job_ports(long hkrun, int *ports, int max, int *from_workers) {
  unsigned long ino[256];
  int nino = 0, nhkrun = 0;
  socket_inodes(hkrun, ino, &nino, 256);
  nhkrun = nino;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
        hkt_parent((pid_t)atol(e->d_name)) == hkrun)
      socket_inodes(atol(e->d_name), ino, &nino, 256);
  if (d)
    closedir(d);
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  int n = 0;
  *from_workers = 0;
  while (f && fgets(line, sizeof line, f) && n < max) {
    unsigned port, st;
    unsigned long inode;
    if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*d %lu",
               &port, &st, &inode) != 3 ||
        st != 0x0A)
      continue;
    for (int i = 0; i < nino; i++)
      if (ino[i] == inode) {
        if (i < nhkrun) { /* hkrun's first */
          memmove(ports + 1, ports, (size_t)n * sizeof *ports);
          ports[0] = (int)port;
        } else {
          ports[n] = (int)port;
        }
        n++;
        *from_workers += i >= nhkrun;
        break;
      }
  }
  if (f)
    fclose(f);
  return n;
}

/* A connection to 127.0.0.1:port (blocking connect: the listener's
 * backlog takes it), or -1. */
static int connect_port(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

typedef struct flood_case {
  const char *limit; /* "ulimit -n" for hkrun, or NULL */
  int idle, garbage, closers;
  int rendezvous_only; /* flood hkrun's port only */
  const char *words[4];
} flood_case;

static void run_flood(void **state) {
  const flood_case *fc = *state;
  char dir[256], fifo[300], cmd[1024];
  assert_int_equal(hkt_mkdtemp("hk-flood.", dir, sizeof dir), 0);
  snprintf(fifo, sizeof fifo, "%s/go", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  snprintf(cmd, sizeof cmd, "%s%s%sexec %s -np 3 %s %s",
           fc->limit ? "ulimit -n " : "", fc->limit ? fc->limit : "",
           fc->limit ? " && " : "", HKRUN_PATH, W_FLOOD, fifo);
  char *argv[] = {"sh", "-c", cmd, NULL};
  char *env[] = {"HK_START_TIMEOUT_S=30", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  /* hkrun's rendezvous and rank 0's listening socket */
  int ports[8], n = 0, workers = 0;
  const double t0 = hkt_now();
  while ((n = job_ports(p.pid, ports, 8, &workers)) < 2 || !workers) {
    if (hkt_now() - t0 > 60)
      fail_msg("the job's listening ports did not appear (%d)", n);
    nanosleep(&(struct timespec){0, 5000000}, NULL); /* polling /proc */
  }
  static int fds[MAX_FDS];
  int nfds = 0;
  for (int i = 0; i < n; i++) {
    if (fc->rendezvous_only && i > 0)
      break; /* hkrun's port comes first */
    for (int k = 0; k < fc->idle + fc->garbage + fc->closers; k++) {
      int fd = connect_port(ports[i]);
      if (fd < 0 || nfds >= MAX_FDS)
        fail_msg("connection %d to port %d: %s", k, ports[i], strerror(errno));
      if (k >= fc->idle + fc->garbage) {
        close(fd);
        continue;
      }
      if (k >= fc->idle) {
        char junk[64];
        memset(junk, 0x5a, sizeof junk);
        assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
      }
      fds[nfds++] = fd;
    }
  }
  const double released = hkt_now();
  int go = open(fifo, O_WRONLY); /* ranks 1 and 2 read a byte each */
  assert_true(go >= 0);
  assert_int_equal(write(go, "gg", 2), 2);
  hkt_result r;
  int rc = hkt_finish(&p, 60, &r);
  const double took = hkt_now() - released;
  close(go);
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
  if (rc != 0 || r.exit_code != 0 || hkt_count_lines(r.out, "flood ok") != 3 ||
      took > 20)
    fail_msg("exit %d after %.1f s (bound 20 s)\nstdout:\n%s\nstderr:\n%s",
             r.exit_code, took, r.out, r.err);
  int lines = hkt_count_lines(r.err, "refused a connection") +
              hkt_count_lines(r.err, "more like it");
  for (int i = 0; fc->words[i]; i++)
    if (!strstr(r.err, fc->words[i]))
      fail_msg("stderr lacks '%s':\n%s", fc->words[i], r.err);
  if (lines > 24)
    fail_msg("%d lines about refused connections (at most 24):\n%s", lines,
             r.err);
  printf("started and completed in %.1f s after %d connections; %d log "
         "lines\n",
         took, nfds, lines);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* The job's own ranks all connecting at once at a low descriptor limit
 * (hkrun's room for strangers is then one connection): none is dropped
 * for good, since every rank not yet registered may hold one and a reset
 * one connects again after a pause. Three jobs of 8 ranks at ulimit -n 80
 * (each failed 'Connection reset by peer' before). */
static void test_own_burst_low_limit(void **state) {
  (void)state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "ulimit -n 80 && exec %s -np 8 %s 1", HKRUN_PATH,
           W_ALLREDUCE);
  char *argv[] = {"sh", "-c", cmd, NULL};
  for (int i = 0; i < 3; i++) {
    hkt_result r;
    assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
    if (r.exit_code != 0 || hkt_count_lines(r.out, "allreduce ok") != 8)
      fail_msg("job %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, r.exit_code,
               r.out, r.err);
    hkt_result_free(&r);
  }
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      HKT_CASE_TEST(test_flood_ports, run_flood, flood_case, NULL, 40, 4, 4, 0,
                    {"bad secret", "closed before authenticating",
                     "dropped unauthenticated", NULL}),
      HKT_CASE_TEST(test_flood_hkrun_fd_limit, run_flood, flood_case, "128",
                    300, 0, 0, 1, {"dropped unauthenticated", NULL}),
      cmocka_unit_test(test_own_burst_low_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
