/*
 * faultw.c - hkfaultw, the program bench/fault_matrix.sh runs under hkrun
 * and kills with SIGKILL in one phase of its life (issue 13's fault
 * matrix). It asserts nothing; it says where it is and what it got.
 *
 *   hkrun -np 4 sh -c 'exec hkfaultw PHASE VICTIM "$HK_RANK"'
 *
 * (the third argument, the rank hkrun gave this process, says who the
 * victim is before hk_init can tell; fault_matrix.sh passes it)
 * Every rank prints "phase PHASE rank R pid P t T" (T: CLOCK_REALTIME
 * seconds) when it enters PHASE, and the killer kills rank VICTIM then.
 * What each phase does, so that the kill lands inside it:
 *   startup      the line comes before hk_init; VICTIM sleeps 2 s before
 *                calling it, the others are inside it (the rendezvous)
 *   negotiation  after hk_init; the others submit "t" and wait on it,
 *                VICTIM sleeps 2 s before submitting: they wait in the
 *                negotiation (its request never comes)
 *   ring         16 MiB float32 allreduces in a loop, the line after the
 *                first: the kill lands inside a ring
 *   fusion       200 tensors of 16 KiB submitted at once, waited on, in a
 *                loop, the line after the first round: the kill lands in
 *                the fused path (copies into and out of the fusion buffer
 *                and the ring between them)
 *   shutdown     one allreduce, then the others call hk_shutdown, VICTIM
 *                sleeps 2 s before calling it
 * A survivor whose call fails prints "rank R error t T: STATUS: message"
 * and exits 1; one whose calls all succeed prints "rank R done t T".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hk/hk.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rank_ = -1;

static void say_phase(const char *phase) {
  printf("phase %s rank %d pid %d t %.6f\n", phase, rank_, (int)getpid(),
         now());
  fflush(stdout);
}

static int failed(hk_status st) {
  printf("rank %d error t %.6f: %s: %s\n", rank_, now(), hk_strerror(st),
         hk_last_error());
  fflush(stdout);
  return 1;
}

static int done(void) {
  printf("rank %d done t %.6f\n", rank_, now());
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: hkfaultw startup|negotiation|ring|fusion|"
                    "shutdown VICTIM RANK\n");
    return 2;
  }
  const char *phase = argv[1];
  int victim = atoi(argv[2]);
  rank_ = atoi(argv[3]);
  int me = rank_ == victim;
  if (strcmp(phase, "startup") == 0) {
    say_phase(phase);
    if (me)
      sleep(2);
  }
  hk_status st = hk_init();
  if (st != HK_OK)
    return failed(st);
  rank_ = hk_rank();
  if (strcmp(phase, "negotiation") == 0) {
    say_phase(phase);
    if (me)
      sleep(2);
    float x[16] = {0};
    st = hk_allreduce("t", x, x, 16, HK_FLOAT32, HK_SUM);
  } else if (strcmp(phase, "ring") == 0) {
    size_t n = 4u << 20;
    float *g = calloc(n, sizeof *g);
    for (int it = 0; st == HK_OK && it < 1000; it++) {
      st = hk_allreduce("big", g, g, n, HK_FLOAT32, HK_SUM);
      if (it == 0 && st == HK_OK)
        say_phase(phase);
    }
    free(g);
  } else if (strcmp(phase, "fusion") == 0) {
    enum { K = 200, N = 4096 };
    float *g = calloc((size_t)K * N, sizeof *g);
    hk_handle h[K];
    char name[K][16];
    for (int i = 0; i < K; i++)
      snprintf(name[i], sizeof name[i], "g%d", i);
    for (int it = 0; st == HK_OK && it < 1000; it++) {
      int posted = 0;
      for (int i = 0; st == HK_OK && i < K; i++) {
        st = hk_allreduce_async(name[i], g + (size_t)i * N, g + (size_t)i * N,
                                N, HK_FLOAT32, HK_AVERAGE, &h[i]);
        posted += st == HK_OK;
      }
      for (int i = 0; i < posted; i++) {
        hk_status w = hk_wait(h[i]);
        if (st == HK_OK)
          st = w;
      }
      if (it == 0 && st == HK_OK)
        say_phase(phase);
    }
    free(g);
  } else if (strcmp(phase, "shutdown") == 0) {
    float x[16] = {0};
    st = hk_allreduce("t", x, x, 16, HK_FLOAT32, HK_SUM);
    if (st == HK_OK) {
      say_phase(phase);
      if (me)
        sleep(2);
      st = hk_shutdown();
    }
    return st == HK_OK ? done() : failed(st);
  }
  if (st != HK_OK)
    return failed(st);
  st = hk_shutdown();
  return st == HK_OK ? done() : failed(st);
}
