/*
 * w_waitrace - the completion path under several waiting threads
 * (worker/queue.c polls a handle's `done` without the lock): 4 threads,
 * each with tensors of its own names, for STEPS steps:
 *  - one allreduce waited by polling hk_poll until it says done, then
 *    hk_wait; one waited with hk_wait at once (both threads of a pair
 *    meet in the same negotiation round, so pollers and waiters race the
 *    background thread's completions);
 *  - a grouped allreduce of 3 tensors, waited with hk_wait;
 *  - every 4th step, a tensor whose count differs on rank 1 (fails with
 *    HK_ERR_MISMATCH on every rank; hk_last_error on THIS thread names
 *    this thread's tensor, not another's), and a grouped allreduce with
 *    such a member (the group's one handle carries the member's reason).
 * Every sum is checked against the serial value. Prints "waitrace ok".
 * Run with HK_SPIN_US=0 too (every wait sleeps on the condition
 * variable at once).
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "wcommon.h"

#define THREADS 4
#define STEPS 24
#define GROUP 3

typedef struct job {
  int rank, np, th;
} job;

static size_t count_of(int th, int k, int step) {
  return 1 + (size_t)(hkt_mix((uint64_t)th << 16 ^ (uint64_t)k << 8 ^
                              (uint64_t)step) %
                      4000);
}

static int32_t value(int rank, int th, int k, int step, size_t i) {
  return (int32_t)(hkt_mix((uint64_t)rank << 40 ^ (uint64_t)th << 32 ^
                           (uint64_t)k << 24 ^ (uint64_t)step << 16 ^ i) %
                   1000);
}

static int32_t *filled(const job *j, int k, int step) {
  size_t n = count_of(j->th, k, step);
  int32_t *b = malloc(n * sizeof *b);
  for (size_t i = 0; i < n; i++)
    b[i] = value(j->rank, j->th, k, step, i);
  return b;
}

static void check(const job *j, int k, int step, const int32_t *b) {
  for (size_t i = 0; i < count_of(j->th, k, step); i++) {
    int32_t want = 0;
    for (int r = 0; r < j->np; r++)
      want += value(r, j->th, k, step, i);
    HKT_CHECK(b[i] == want,
              "thread %d step %d tensor %d element %zu: %d, serial %d", j->th,
              step, k, i, b[i], want);
  }
}

/* st must be a mismatch whose message (this thread's) names `name`. */
static void expect_mismatch(hk_status st, const char *name, int th) {
  HKT_CHECK(st == HK_ERR_MISMATCH, "thread %d, %s: %s (%s)", th, name,
            hk_strerror(st), hk_last_error());
  HKT_CHECK(strstr(hk_last_error(), name) != NULL,
            "thread %d: the error of %s says '%s'", th, name, hk_last_error());
}

static void *run(void *arg) {
  const job *j = arg;
  char name[64], gn[GROUP][64], bad[64], gbad[GROUP][64];
  for (int step = 0; step < STEPS; step++) {
    int32_t *polled = filled(j, 0, step), *waited = filled(j, 1, step);
    int32_t *g[GROUP];
    hk_handle hp, hw, hg, hb = NULL, hgb = NULL;
    snprintf(name, sizeof name, "th%d.polled", j->th);
    HKT_OK(hk_allreduce_async(name, polled, polled, count_of(j->th, 0, step),
                              HK_INT32, HK_SUM, &hp));
    snprintf(name, sizeof name, "th%d.waited", j->th);
    HKT_OK(hk_allreduce_async(name, waited, waited, count_of(j->th, 1, step),
                              HK_INT32, HK_SUM, &hw));
    const char *names[GROUP];
    size_t counts[GROUP];
    for (int m = 0; m < GROUP; m++) {
      g[m] = filled(j, 2 + m, step);
      counts[m] = count_of(j->th, 2 + m, step);
      snprintf(gn[m], sizeof gn[m], "th%d.group.%d", j->th, m);
      names[m] = gn[m];
    }
    HKT_OK(hk_grouped_allreduce_async(names, (const void *const *)g,
                                      (void *const *)g, counts, GROUP, HK_INT32,
                                      HK_SUM, &hg));
    const int errs = step % 4 == 3;
    int32_t e[16] = {0}, ge[GROUP][16];
    memset(ge, 0, sizeof ge);
    if (errs) { /* rank 1 has 12 elements where the others have 16 */
      const size_t n = j->rank == 1 ? 12 : 16;
      snprintf(bad, sizeof bad, "th%d.bad", j->th);
      HKT_OK(hk_allreduce_async(bad, e, e, n, HK_INT32, HK_SUM, &hb));
      const char *bn[GROUP];
      const void *gs[GROUP];
      void *gr[GROUP];
      size_t bc[GROUP] = {16, n, 16};
      for (int m = 0; m < GROUP; m++) {
        snprintf(gbad[m], sizeof gbad[m], "th%d.gbad.%d", j->th, m);
        bn[m] = gbad[m];
        gs[m] = gr[m] = ge[m];
      }
      HKT_OK(hk_grouped_allreduce_async(bn, gs, gr, bc, GROUP, HK_INT32, HK_SUM,
                                        &hgb));
    }
    for (int done = 0; !done;) {
      HKT_OK(hk_poll(hp, &done));
      if (!done)
        sched_yield();
    }
    HKT_OK(hk_wait(hp));
    HKT_OK(hk_wait(hw));
    HKT_OK(hk_wait(hg));
    if (errs) {
      expect_mismatch(hk_wait(hb), bad, j->th);
      expect_mismatch(hk_wait(hgb), gbad[1], j->th);
    }
    check(j, 0, step, polled);
    check(j, 1, step, waited);
    for (int m = 0; m < GROUP; m++) {
      check(j, 2 + m, step, g[m]);
      free(g[m]);
    }
    free(polled);
    free(waited);
  }
  return NULL;
}

int main(void) {
  HKT_OK(hk_init());
  HKT_CHECK(hk_size() >= 2, "w_waitrace needs 2 ranks or more");
  job jobs[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (job){hk_rank(), hk_size(), i};
    pthread_create(&t[i], NULL, run, &jobs[i]);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  HKT_OK(hk_shutdown());
  printf("waitrace ok: %d threads x %d steps\n", THREADS, STEPS);
  return 0;
}
