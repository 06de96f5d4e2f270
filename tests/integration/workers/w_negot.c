/*
 * w_negot - the event-driven negotiation (worker/background.c), seen from
 * a worker. Modes:
 *   seq N          N sequential 8-byte float32 sum allreduces (submit,
 *                  wait, check), one name reused: with a negotiation timer
 *                  each would wait for it;
 *   burst N STEPS  STEPS times: N 1 KiB allreduces submitted at once, then
 *                  all waited and checked (fusion under load);
 *   idle [S]       every rank r blocks in hk_wait on 'idle.<r>', which
 *                  only the other ranks' helper threads submit, and only
 *                  after every helper measured its own process's CPU time
 *                  (utime + stime, /proc/self/stat) over about S seconds
 *                  (default 1; bench/RESULTS.md measures 10): prints
 *                  "idle cpu <fraction of a core>";
 *   hold KIND      the submit queue's hold (worker/queue.h), after a
 *                  barrier, with HK_BURST_GAP_US / HK_BURST_MAX_US as the
 *                  test sets them; prints "hold KIND <seconds>":
 *                  burst: one tensor submitted, then 50 ms of looking
 *                    at the counters (no round may start: the burst goes
 *                    on), then 99 more and hk_wait: all in one round;
 *                  gap: one tensor, then the counters looked at until a
 *                    round ran: the seconds from the submit (>= the gap);
 *                  most: a tensor every millisecond until a round ran
 *                    (one must, within 1000 of them): the seconds from
 *                    the first (>= the most a burst is held);
 *                  poll: one tensor, hk_poll until done: the seconds;
 *                  set: with one tensor queued, a process set added and
 *                    removed (blocking calls): the seconds they took.
 * Every mode then prints this rank's negotiation counters
 * (worker/internal.h) as "counts requests=R rounds=D answers=A
 * fused_batches=B fused_tensors=T" and "negot ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wcommon.h"
#include "worker/internal.h"

static void seq(int n) {
  const int rank = hk_rank(), np = hk_size();
  for (int i = 0; i < n; i++) {
    float v[2] = {(float)(rank + i), 1.0f};
    HKT_OK(hk_allreduce("seq", v, v, 2, HK_FLOAT32, HK_SUM));
    float want = (float)(np * (np - 1) / 2 + np * i);
    HKT_CHECK(v[0] == want && v[1] == (float)np, "seq %d: got %g %g", i,
              (double)v[0], (double)v[1]);
  }
}

static void burst(int n, int steps) {
  const int rank = hk_rank(), np = hk_size();
  enum { COUNT = 256 }; /* 1 KiB of float32 */
  float(*buf)[COUNT] = malloc((size_t)n * sizeof *buf);
  hk_handle *h = malloc((size_t)n * sizeof *h);
  HKT_CHECK(buf && h, "out of memory");
  for (int s = 0; s < steps; s++) {
    for (int t = 0; t < n; t++) {
      for (int k = 0; k < COUNT; k++)
        buf[t][k] = (float)(rank + t + k + s);
      char name[32];
      snprintf(name, sizeof name, "burst.%d", t);
      HKT_OK(hk_allreduce_async(name, buf[t], buf[t], COUNT, HK_FLOAT32, HK_SUM,
                                &h[t]));
    }
    for (int t = 0; t < n; t++) {
      HKT_OK(hk_wait(h[t]));
      for (int k = 0; k < COUNT; k++) {
        float want = (float)(np * (np - 1) / 2 + np * (t + k + s));
        HKT_CHECK(buf[t][k] == want, "burst %d.%d[%d]: got %g, want %g", s, t,
                  k, (double)buf[t][k], (double)want);
      }
    }
  }
  free(buf);
  free(h);
}

/* utime + stime of this process, seconds (/proc/self/stat fields 14, 15). */
static double cpu_seconds(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  HKT_CHECK(f, "cannot open /proc/self/stat");
  char line[1024];
  HKT_CHECK(fgets(line, sizeof line, f), "cannot read /proc/self/stat");
  fclose(f);
  const char *p = strrchr(line, ')'); /* the command may hold spaces */
  HKT_CHECK(p, "malformed /proc/self/stat");
  unsigned long long ut = 0, st = 0;
  /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt
   * majflt cmajflt utime(14) stime(15) */
  int got =
      sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &ut, &st);
  HKT_CHECK(got == 2, "malformed /proc/self/stat");
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double wall_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *idle_helper(void *arg) {
  const double seconds = *(const double *)arg;
  const int rank = hk_rank(), np = hk_size();
  double c0 = cpu_seconds(), w0 = wall_seconds();
  /* the one bounded wait: it measures idleness, it synchronises nothing */
  struct timespec span = {(time_t)seconds,
                          (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&span, NULL);
  double c1 = cpu_seconds(), w1 = wall_seconds();
  printf("idle cpu %.4f of a core over %.2f s\n", (c1 - c0) / (w1 - w0),
         w1 - w0);
  fflush(stdout);
  float x = 1.0f;
  HKT_OK(hk_allreduce("idle.measured", &x, &x, 1, HK_FLOAT32, HK_SUM));
  hk_handle *h = malloc((size_t)np * sizeof *h);
  HKT_CHECK(h, "out of memory");
  float *v = calloc((size_t)np, sizeof *v);
  HKT_CHECK(v, "out of memory");
  for (int r = 0; r < np; r++) {
    char name[32];
    snprintf(name, sizeof name, "idle.%d", r);
    if (r != rank)
      HKT_OK(
          hk_allreduce_async(name, &v[r], &v[r], 1, HK_FLOAT32, HK_SUM, &h[r]));
  }
  for (int r = 0; r < np; r++)
    if (r != rank)
      HKT_OK(hk_wait(h[r]));
  free(h);
  free(v);
  return NULL;
}

static uint64_t rounds_now(void) {
  hk_negotiation_counts c;
  HKT_OK(hk_internal_negotiation_counts(&c));
  return c.rounds;
}

/* hold KIND (above); every tensor's sum is checked. */
static void hold(const char *kind) {
  enum { N = 1000 };
  const int rank = hk_rank(), np = hk_size();
  float v[N];
  hk_handle h[N];
  int n = 0;
  HKT_OK(hk_barrier());
  const uint64_t r0 = rounds_now();
  const double t0 = wall_seconds();
  double took = 0;
#define SUBMIT()                                                               \
  do {                                                                         \
    char name_[32];                                                            \
    snprintf(name_, sizeof name_, "hold.%d", n);                               \
    v[n] = (float)(rank + n);                                                  \
    HKT_OK(hk_allreduce_async(name_, &v[n], &v[n], 1, HK_FLOAT32, HK_SUM,      \
                              &h[n]));                                         \
    n++;                                                                       \
  } while (0)
  SUBMIT();
  if (!strcmp(kind, "burst")) {
    while (wall_seconds() - t0 < 0.05)
      HKT_CHECK(rounds_now() == r0, "a round ran while the burst went on");
    while (n < 100)
      SUBMIT();
  } else if (!strcmp(kind, "gap")) {
    while (rounds_now() == r0 && wall_seconds() - t0 < 10)
      ;
    took = wall_seconds() - t0;
  } else if (!strcmp(kind, "most")) {
    double next = t0 + 1e-3;
    while (rounds_now() == r0 && n < N && wall_seconds() - t0 < 3) {
      if (wall_seconds() >= next) {
        SUBMIT();
        next += 1e-3;
      }
    }
    took = wall_seconds() - t0;
    HKT_CHECK(rounds_now() != r0, "no round in %.3f s of %d submits", took, n);
    float most = (float)n; /* every rank submits as many */
    HKT_OK(hk_allreduce("hold.n", &most, &most, 1, HK_FLOAT32, HK_MAX));
    while (n < (int)most)
      SUBMIT();
  } else if (!strcmp(kind, "set")) { /* blocking, not through hk_wait */
    int ranks[] = {0, 1};
    hk_process_set id;
    HKT_OK(hk_process_set_add(ranks, 2, &id));
    HKT_OK(hk_process_set_remove(id));
    took = wall_seconds() - t0;
  } else if (!strcmp(kind, "poll")) {
    int done = 0;
    while (!done)
      HKT_OK(hk_poll(h[0], &done));
    took = wall_seconds() - t0;
  } else {
    HKT_CHECK(0, "unknown hold '%s'", kind);
  }
#undef SUBMIT
  for (int i = 0; i < n; i++) {
    HKT_OK(hk_wait(h[i]));
    HKT_CHECK(v[i] == (float)(np * (np - 1) / 2 + np * i), "hold.%d: got %g", i,
              (double)v[i]);
  }
  /* read before a barrier, which no rank passes (to shut down: its own
   * round, counted here) until this one has read */
  const uint64_t r1 = rounds_now();
  HKT_OK(hk_barrier());
  if (!strcmp(kind, "burst"))
    HKT_CHECK(r1 == r0 + 1, "%d tensors took %llu rounds", n,
              (unsigned long long)(r1 - r0));
  printf("hold %s %.6f\n", kind, took);
}

static void idle(double seconds) {
  char name[32];
  snprintf(name, sizeof name, "idle.%d", hk_rank());
  HKT_OK(hk_barrier());
  float x = 0.0f;
  hk_handle h;
  HKT_OK(hk_allreduce_async(name, &x, &x, 1, HK_FLOAT32, HK_SUM, &h));
  pthread_t t;
  HKT_CHECK(pthread_create(&t, NULL, idle_helper, &seconds) == 0,
            "pthread_create");
  HKT_OK(hk_wait(h)); /* blocked until the others' helpers measured */
  pthread_join(t, NULL);
}

int main(int argc, char **argv) {
  HKT_CHECK(argc >= 2,
            "usage: w_negot seq N | burst N STEPS | idle [S] | hold KIND");
  HKT_OK(hk_init());
  if (!strcmp(argv[1], "seq") && argc == 3)
    seq(atoi(argv[2]));
  else if (!strcmp(argv[1], "burst") && argc == 4)
    burst(atoi(argv[2]), atoi(argv[3]));
  else if (!strcmp(argv[1], "idle") && argc <= 3)
    idle(argc == 3 ? atof(argv[2]) : 1.0);
  else if (!strcmp(argv[1], "hold") && argc == 3)
    hold(argv[2]);
  else
    HKT_CHECK(0, "unknown mode '%s'", argv[1]);
  hk_negotiation_counts c;
  HKT_OK(hk_internal_negotiation_counts(&c));
  printf("counts requests=%llu rounds=%llu answers=%llu fused_batches=%llu "
         "fused_tensors=%llu\n",
         (unsigned long long)c.requests, (unsigned long long)c.rounds,
         (unsigned long long)c.answers, (unsigned long long)c.fused_batches,
         (unsigned long long)c.fused_tensors);
  printf("negot ok\n");
  fflush(stdout);
  HKT_OK(hk_shutdown());
  return 0;
}
