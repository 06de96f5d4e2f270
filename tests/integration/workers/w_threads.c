/*
 * w_threads - 200 named tensors per step, submitted from two threads in an
 * order that differs on every rank (a shuffle seeded by the rank), for
 * several steps. Each tensor's int32 sum and float32 average are checked
 * exactly against the serial value.
 */
#include <pthread.h>
#include <string.h>

#include "wcommon.h"

#define NTENSORS 200
#define STEPS 3

typedef struct job {
  int rank, np, step, first, n;
  int order[NTENSORS];
} job;

static size_t tensor_count(int t) { return 1 + (size_t)(hkt_mix(t) % 3000); }
static int32_t value(int rank, int t, size_t i, int step) {
  return (int32_t)(hkt_mix(((uint64_t)rank << 32) ^ ((uint64_t)t << 20) ^
                           (i << 4) ^ (uint64_t)step) %
                   1000);
}

static void *run(void *arg) {
  job *j = arg;
  hk_handle h[NTENSORS];
  int32_t *buf[NTENSORS];
  for (int k = 0; k < j->n; k++) {
    int t = j->order[j->first + k];
    size_t n = tensor_count(t);
    buf[k] = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++)
      buf[k][i] = value(j->rank, t, i, j->step);
    char name[32];
    snprintf(name, sizeof name, "layer%03d.grad", t);
    HKT_OK(
        hk_allreduce_async(name, buf[k], buf[k], n, HK_INT32, HK_SUM, &h[k]));
  }
  for (int k = 0; k < j->n; k++) {
    int t = j->order[j->first + k];
    HKT_OK(hk_wait(h[k]));
    for (size_t i = 0; i < tensor_count(t); i++) {
      int32_t expect = 0;
      for (int r = 0; r < j->np; r++)
        expect += value(r, t, i, j->step);
      HKT_CHECK(buf[k][i] == expect,
                "step %d tensor %d element %zu: got %d, serial sum %d", j->step,
                t, i, buf[k][i], expect);
    }
    free(buf[k]);
  }
  return NULL;
}

int main(void) {
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  for (int step = 0; step < STEPS; step++) {
    job a = {rank, np, step, 0, NTENSORS / 2, {0}};
    for (int t = 0; t < NTENSORS; t++)
      a.order[t] = t;
    uint64_t seed = (uint64_t)rank * 7919 + (uint64_t)step;
    for (int t = NTENSORS - 1; t > 0; t--) { /* Fisher-Yates */
      seed = hkt_mix(seed);
      int u = (int)(seed % (uint64_t)(t + 1));
      int tmp = a.order[t];
      a.order[t] = a.order[u];
      a.order[u] = tmp;
    }
    job b = a;
    b.first = NTENSORS / 2;
    b.n = NTENSORS - NTENSORS / 2;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run, &a);
    pthread_create(&tb, NULL, run, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
  }
  HKT_OK(hk_barrier());
  HKT_OK(hk_shutdown());
  printf("threads ok: %d tensors x %d steps from 2 threads\n", NTENSORS, STEPS);
  return 0;
}
