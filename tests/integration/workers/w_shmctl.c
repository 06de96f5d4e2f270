/*
 * w_shmctl MODE - the control path between rank 0 and the ranks of its
 * host through shared memory (collectives/transport/ctrl.h), driven by
 * test_shmctl:
 *   run ITERS : each iteration, 64 small allreduces submitted at once
 *               (fused), then one of 256 Ki floats alone (not fused), then
 *               with np >= 2 an allreduce in the process set of the even
 *               ranks; every result checked against the serial sum. Then
 *               prints "ctrl rank R shm S G tcp T U" (the control frames
 *               this rank sent and received by kind, worker/internal.h)
 *               and "shmctl ok".
 *   kill      : rounds of 8 small allreduces in a loop, "ready pid=<pid>"
 *               after the first; the test kills a rank with SIGKILL. A
 *               survivor prints "rank R failed: <status>: <message>" and
 *               exits 1.
 *   hold      : one allreduce, "ready pid=<pid>"; then rank 1 waits in
 *               pause() (the test kills it) while the others wait in the
 *               negotiation for a tensor it never submits; they print as
 *               in kill mode and exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wcommon.h"
#include "worker/internal.h"

/* What rank r contributes to element i of tensor k of iteration it. */
static int32_t value(int r, int it, int k, size_t i) {
  return (int32_t)(hkt_mix(((uint64_t)it << 40) ^ ((uint64_t)k << 24) ^
                           (i * 131 + (uint64_t)r)) %
                   100003);
}

static void check(const int32_t *got, size_t n, int it, int k, const int *ranks,
                  int nr, int rank) {
  for (size_t i = 0; i < n; i++) {
    int64_t want = 0;
    for (int j = 0; j < nr; j++)
      want += value(ranks[j], it, k, i);
    HKT_CHECK(got[i] == (int32_t)want,
              "rank %d: iteration %d tensor %d [%zu] is %d, the serial sum "
              "%lld",
              rank, it, k, i, (int)got[i], (long long)want);
  }
}

static int mode_run(int iters) {
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  int all[256], even[256], ne = 0;
  for (int r = 0; r < np; r++) {
    all[r] = r;
    if (r % 2 == 0)
      even[ne++] = r;
  }
  hk_process_set evens = 0;
  if (np >= 2)
    HKT_OK(hk_process_set_add(even, ne, &evens));
  enum { SMALL = 64, SMALL_N = 16 };
  const size_t big_n = 256u << 10;
  int32_t *small = malloc(SMALL * SMALL_N * sizeof *small);
  int32_t *big = malloc(big_n * sizeof *big);
  HKT_CHECK(small && big, "out of memory");
  for (int it = 0; it < iters; it++) {
    hk_handle h[SMALL];
    char name[64];
    for (int k = 0; k < SMALL; k++) {
      for (size_t i = 0; i < SMALL_N; i++)
        small[k * SMALL_N + i] = value(rank, it, k, i);
      snprintf(name, sizeof name, "small.%d", k);
      HKT_OK(hk_allreduce_async(name, small + k * SMALL_N, small + k * SMALL_N,
                                SMALL_N, HK_INT32, HK_SUM, &h[k]));
    }
    for (int k = 0; k < SMALL; k++) {
      HKT_OK(hk_wait(h[k]));
      check(small + k * SMALL_N, SMALL_N, it, k, all, np, rank);
    }
    for (size_t i = 0; i < big_n; i++)
      big[i] = value(rank, it, SMALL, i);
    HKT_OK(hk_allreduce("big", big, big, big_n, HK_INT32, HK_SUM));
    check(big, big_n, it, SMALL, all, np, rank);
    if (np >= 2 && rank % 2 == 0) {
      hk_collective c = {.kind = HK_ALLREDUCE,
                         .name = "even",
                         .set = evens,
                         .dtype = HK_INT32,
                         .op = HK_SUM,
                         .sendbuf = small,
                         .recvbuf = small,
                         .count = SMALL_N};
      for (size_t i = 0; i < SMALL_N; i++)
        small[i] = value(rank, it, SMALL + 1, i);
      hk_handle hs;
      HKT_OK(hk_submit(&c, &hs));
      HKT_OK(hk_wait(hs));
      check(small, SMALL_N, it, SMALL + 1, even, ne, rank);
    }
  }
  int32_t end = 1; /* the set's members are done before anyone shuts down */
  HKT_OK(hk_allreduce("end", &end, &end, 1, HK_INT32, HK_SUM));
  HKT_CHECK(end == np, "rank %d: 'end' is %d, want %d", rank, (int)end, np);
  hk_control_counts cc;
  HKT_OK(hk_internal_control_counts(&cc));
  printf("ctrl rank %d shm %llu %llu tcp %llu %llu\n", rank,
         (unsigned long long)cc.shm_sent, (unsigned long long)cc.shm_received,
         (unsigned long long)cc.tcp_sent, (unsigned long long)cc.tcp_received);
  printf("shmctl ok\n");
  fflush(stdout);
  free(small);
  free(big);
  HKT_OK(hk_shutdown());
  return 0;
}

static int mode_kill(void) {
  HKT_OK(hk_init());
  const int rank = hk_rank();
  float v[8][4];
  for (long it = 0;; it++) {
    hk_handle h[8];
    hk_status st = HK_OK;
    char name[32];
    for (int k = 0; k < 8 && st == HK_OK; k++) {
      snprintf(name, sizeof name, "t.%d", k);
      for (int i = 0; i < 4; i++)
        v[k][i] = 1.0f;
      st = hk_allreduce_async(name, v[k], v[k], 4, HK_FLOAT32, HK_SUM, &h[k]);
      if (st != HK_OK)
        break;
    }
    for (int k = 0; k < 8 && st == HK_OK; k++)
      st = hk_wait(h[k]);
    if (st != HK_OK) {
      printf("rank %d failed: %s: %s\n", rank, hk_strerror(st),
             hk_last_error());
      fflush(stdout);
      return 1;
    }
    if (it == 0) {
      printf("ready pid=%d\n", (int)getpid());
      fflush(stdout);
    }
  }
}

static int mode_hold(void) {
  HKT_OK(hk_init());
  const int rank = hk_rank();
  float v = 1.0f;
  HKT_OK(hk_allreduce("first", &v, &v, 1, HK_FLOAT32, HK_SUM));
  printf("ready pid=%d\n", (int)getpid());
  fflush(stdout);
  if (rank == 1)
    for (;;)
      pause();
  hk_status st = hk_allreduce("held", &v, &v, 1, HK_FLOAT32, HK_SUM);
  printf("rank %d failed: %s: %s\n", rank, hk_strerror(st), hk_last_error());
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "run"))
    return mode_run(atoi(argv[2]));
  if (argc == 2 && !strcmp(argv[1], "kill"))
    return mode_kill();
  if (argc == 2 && !strcmp(argv[1], "hold"))
    return mode_hold();
  fprintf(stderr, "usage: w_shmctl run ITERS | kill | hold\n");
  return 2;
}
