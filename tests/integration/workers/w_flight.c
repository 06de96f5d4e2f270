/*
 * w_flight.c - a hang for the flight recorder's tests (test_flight_hang.c):
 * every rank allreduces t0..t6 (8 floats of rank + i, checked against the
 * serial sum), then every rank but the last submits "t7" and waits for it,
 * printing "waiting for t7 pid=<pid>"; the last rank never submits t7: it
 * prints "skipping t7 pid=<pid>" and waits for signals until it is killed
 * (SIGUSR1, the flight recorder's, only wakes it). A rank whose wait on t7
 * ends prints what it returned and exits 1 on an error.
 *
 * w_flight queued: as above, but a rank other than 0 and the last one
 * submits "t8" too once its request for t7 has gone to rank 0 (its
 * REQUESTS count moved: worker/internal.h), before it prints "waiting
 * for t7": with the job's HK_CYCLE_TIME_MS holding rank 0's answer, t8
 * then waits in the rank's queue, not yet taken by its background thread.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "wcommon.h"
#include "worker/internal.h"

static uint64_t requests_sent(void) {
  hk_negotiation_counts c;
  HKT_OK(hk_internal_negotiation_counts(&c));
  return c.requests;
}

int main(int argc, char **argv) {
  const int queued = argc > 1 && !strcmp(argv[1], "queued");
  const int polls = argc > 1 && !strcmp(argv[1], "poll");
  setvbuf(stdout, NULL, _IOLBF, 0);
  HKT_OK(hk_init());
  const int rank = hk_rank(), size = hk_size();
  for (int i = 0; i < 7; i++) {
    float x[8], want = 0;
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    for (int k = 0; k < 8; k++)
      x[k] = (float)(rank + i);
    for (int r = 0; r < size; r++)
      want += (float)(r + i);
    HKT_OK(hk_allreduce(name, x, x, 8, HK_FLOAT32, HK_SUM));
    for (int k = 0; k < 8; k++)
      HKT_CHECK(x[k] == want, "%s[%d] = %g, expected %g", name, k, x[k], want);
  }
  if (rank == size - 1) {
    printf("skipping t7 pid=%d\n", (int)getpid());
    for (;;)
      pause();
  }
  float y[8] = {0}, z[8] = {0};
  hk_handle h, h8;
  const uint64_t sent = requests_sent();
  HKT_OK(hk_allreduce_async("t7", y, y, 8, HK_FLOAT32, HK_SUM, &h));
  if (queued && rank > 0) {
    while (requests_sent() == sent) /* bounded by the test's deadline */
      sched_yield();
    HKT_OK(hk_allreduce_async("t8", z, z, 8, HK_FLOAT32, HK_SUM, &h8));
  }
  printf("waiting for t7 pid=%d\n", (int)getpid());
  if (polls && rank == 0) {
    struct pollfd in = {.fd = 0, .events = POLLIN};
    int rc = poll(&in, 1, -1);
    printf("poll returned %d (%s)\n", rc, rc < 0 ? strerror(errno) : "ready");
  }
  hk_status st = hk_wait(h);
  fprintf(stderr, "rank %d: t7 gave %s: %s\n", rank, hk_strerror(st),
          hk_last_error());
  return st == HK_OK ? 0 : 1;
}
