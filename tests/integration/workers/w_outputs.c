/*
 * w_outputs - a job for the output files' tests (test_outputs.c):
 *
 *   w_outputs FILL MODE [SECONDS]
 *
 * hk_init; then, when FILL is not "-", rank 0 fills the file system of the
 * folder FILL: it writes FILL/fill until the disk is full (ENOSPC) and
 * prints "filled N bytes"; every rank waits for that (an allreduce). Then
 *   steps:  every rank allreduces four small tensors per step, each
 *           checked against the serial sum, for SECONDS seconds (rank 0
 *           decides when to stop: broadcast), prints "ran K steps",
 *           hk_shutdown, exit 0;
 *   lines:  every rank prints 200 lines of 100 characters, "rank R line
 *           L" padded with '.', then shuts down;
 *   hang:   every rank prints "full pid=<pid> ppid=<hkrun's pid>" and
 *           waits to be killed;
 *   env:    (FILL "-") every rank prints which of HK_SECRET and HK_DUMP_FD
 *           it had before hk_init ("before: HK_SECRET set, HK_DUMP_FD
 *           set"), which it has after ("after: ...") and which a program it
 *           starts sees ("child: ..."), then shuts down.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wcommon.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes dir/fill until the file system is full. */
static void fill(const char *dir) {
  char path[4200], block[4096];
  snprintf(path, sizeof path, "%s/fill", dir);
  memset(block, 'f', sizeof block);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  HKT_CHECK(fd >= 0, "cannot create %s: %s", path, strerror(errno));
  size_t total = 0;
  for (;;) {
    ssize_t w = write(fd, block, sizeof block);
    if (w <= 0) {
      HKT_CHECK(w == 0 || errno == ENOSPC, "writing %s: %s", path,
                strerror(errno));
      break;
    }
    total += (size_t)w;
  }
  close(fd);
  printf("filled %zu bytes\n", total);
}

/* "HK_SECRET set, HK_DUMP_FD unset" of this process's environment. */
static void say_env(const char *when) {
  printf("%s: HK_SECRET %s, HK_DUMP_FD %s\n", when,
         getenv("HK_SECRET") ? "set" : "unset",
         getenv("HK_DUMP_FD") ? "set" : "unset");
}

int main(int argc, char **argv) {
  HKT_CHECK(argc >= 3,
            "usage: w_outputs FILL|- steps|lines|hang|env [SECONDS]");
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int env = !strcmp(argv[2], "env");
  if (env)
    say_env("before");
  HKT_OK(hk_init());
  if (env) {
    say_env("after");
    fflush(stdout);
    HKT_CHECK(system("echo \"child: HK_SECRET ${HK_SECRET:+set}${HK_SECRET:-"
                     "unset}, HK_DUMP_FD ${HK_DUMP_FD:+set}${HK_DUMP_FD:-"
                     "unset}\"") == 0,
              "cannot run a child");
    HKT_OK(hk_shutdown());
    return 0;
  }
  const int rank = hk_rank(), size = hk_size();
  const char *mode = argv[2];
  if (strcmp(argv[1], "-") != 0 && rank == 0)
    fill(argv[1]);
  float one = 1;
  HKT_OK(hk_allreduce("filled", &one, &one, 1, HK_FLOAT32, HK_SUM));
  if (!strcmp(mode, "hang")) {
    printf("full pid=%d ppid=%d\n", (int)getpid(), (int)getppid());
    for (;;)
      pause();
  }
  if (!strcmp(mode, "lines")) {
    for (int l = 0; l < 200; l++) {
      char line[101];
      int n = snprintf(line, sizeof line, "rank %d line %d ", rank, l);
      memset(line + n, '.', sizeof line - 1 - (size_t)n);
      line[100] = '\0';
      printf("%s\n", line);
    }
    HKT_OK(hk_shutdown());
    return 0;
  }
  HKT_CHECK(!strcmp(mode, "steps") && argc > 3, "unknown mode %s", mode);
  const double seconds = atof(argv[3]), end = now_s() + seconds;
  int steps = 0;
  for (int go = 1; go; steps++) {
    for (int t = 0; t < 4; t++) {
      float x[4], want = 0;
      char name[16];
      snprintf(name, sizeof name, "grad.%d", t);
      for (int k = 0; k < 4; k++)
        x[k] = (float)(rank + t);
      for (int r = 0; r < size; r++)
        want += (float)(r + t);
      HKT_OK(hk_allreduce(name, x, x, 4, HK_FLOAT32, HK_SUM));
      HKT_CHECK(x[0] == want, "%s = %g, expected %g", name, x[0], want);
    }
    int more = rank == 0 && now_s() < end;
    HKT_OK(hk_broadcast("go", &more, 1, HK_INT32, 0));
    go = more;
  }
  if (rank == 0)
    printf("ran %d steps\n", steps);
  HKT_OK(hk_shutdown());
  return 0;
}
