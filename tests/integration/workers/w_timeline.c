/*
 * w_timeline - one of each collective under its own name, for the
 * timeline test (test_coordination): allreduce "t.allreduce", broadcast
 * "t.broadcast", allgather "t.allgather", reducescatter
 * "t.reducescatter", alltoall "t.alltoall", a barrier, and an allreduce
 * "t.late" that rank 1 submits LATE_MS after the others (a straggler the
 * timeline's WAIT_FOR_DATA must show); then every rank joins.
 */
#include <time.h>

#include "wcommon.h"

#define LATE_MS 400

int main(void) {
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  float x[16];
  for (int i = 0; i < 16; i++)
    x[i] = (float)(rank + i);
  HKT_OK(hk_allreduce("t.allreduce", x, x, 16, HK_FLOAT32, HK_SUM));
  HKT_OK(hk_broadcast("t.broadcast", x, 16, HK_FLOAT32, 0));
  void *all = NULL;
  HKT_OK(hk_allgather("t.allgather", x, 2, 4, HK_FLOAT32, &all, NULL));
  free(all);
  float part[16];
  HKT_OK(hk_reducescatter("t.reducescatter", x, 4, 4, HK_FLOAT32, HK_SUM, part,
                          NULL));
  size_t *splits = calloc((size_t)np, sizeof *splits);
  for (int r = 0; r < np; r++)
    splits[r] = 1;
  HKT_OK(hk_alltoall("t.alltoall", x, splits, 2, HK_FLOAT32, &all, NULL));
  free(all);
  free(splits);
  HKT_OK(hk_barrier());
  if (rank == 1) {
    struct timespec ts = {0, LATE_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  HKT_OK(hk_allreduce("t.late", x, x, 16, HK_FLOAT32, HK_SUM));
  int last = -1;
  HKT_OK(hk_join(&last));
  HKT_OK(hk_shutdown());
  return 0;
}
