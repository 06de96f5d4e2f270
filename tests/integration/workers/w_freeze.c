/*
 * w_freeze - allreduces without end, for a driver that freezes one rank
 * (SIGSTOP) and watches the others notice (test_freeze.c).
 *
 *   w_freeze [HOLD]
 *
 * Prints "pid <pid>" after hk_init, "running" once its first allreduce
 * checked, then runs 8-element float32 sum allreduces (each checked
 * against the serial sum) until one fails: then prints
 * "failed <status name>: <hk's message>" and exits 3. A wrong result
 * exits 1. With HOLD (a rank), that rank's trainer prints "holding" after
 * its first allreduce and blocks in pause(2) (its background thread goes
 * on): the others wait for its next tensor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "wcommon.h"

int main(int argc, char **argv) {
  const int hold = argc > 1 ? atoi(argv[1]) : -1;
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  printf("pid %ld\n", (long)getpid());
  fflush(stdout);
  for (long i = 0;; i++) {
    float v[8];
    for (int k = 0; k < 8; k++)
      v[k] = (float)(rank + k + i % 1000);
    hk_status st = hk_allreduce("freeze.step", v, v, 8, HK_FLOAT32, HK_SUM);
    if (st != HK_OK) {
      printf("failed %s: %s\n", hk_strerror(st), hk_last_error());
      fflush(stdout);
      return 3;
    }
    for (int k = 0; k < 8; k++) {
      float want = (float)(np * (np - 1) / 2 + np * (k + i % 1000));
      HKT_CHECK(v[k] == want, "step %ld[%d]: %g, want %g", i, k, (double)v[k],
                (double)want);
    }
    if (i == 0) {
      printf("running\n");
      fflush(stdout);
    }
    if (rank == hold) {
      printf("holding\n");
      fflush(stdout);
      for (;;)
        pause();
    }
  }
}
