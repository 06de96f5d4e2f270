/*
 * w_tune STEPS - a training-like loop for --autotune's tests: a one-off
 * broadcast, then every step one grouped allreduce of 32 float tensors of
 * 16384 elements (64 KiB each, 2 MiB a step), whose values are small
 * integers so that every sum is exact: each result is checked against the
 * serial sum, whatever the fusion threshold the autotuner is trying. Each
 * rank folds every result into a hash (FNV-1a) and prints "hash H" at the
 * end: the driver compares the ranks'.
 *
 *   w_tune STEPS KILL_SLOT KILL_STEP   (an elastic job: hkrun --min-np)
 *
 * also makes the worker started as rank KILL_SLOT kill itself (SIGKILL)
 * at the start of step KILL_STEP; the others re-form (hk_elastic_reset,
 * saying "reset: rank R of N") and go on from the step that failed.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "wcommon.h"

#define NT 32
#define ELEMS 16384

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  const int kill_slot = argc > 3 ? atoi(argv[2]) : -1;
  const int kill_step = argc > 3 ? atoi(argv[3]) : -1;
  HKT_OK(hk_init());
  const int slot = hk_rank();
  int rank = hk_rank(), np = hk_size();
  float init[4] = {(float)rank, 0, 0, 0};
  HKT_OK(hk_broadcast("init", init, 4, HK_FLOAT32, 0));
  HKT_CHECK(init[0] == 0, "broadcast gave %g", init[0]);
  static float in[NT][ELEMS], out[NT][ELEMS];
  char names[NT][16];
  const char *nm[NT];
  const void *src[NT];
  void *dst[NT];
  size_t counts[NT];
  for (int t = 0; t < NT; t++) {
    snprintf(names[t], sizeof names[t], "grad.%02d", t);
    nm[t] = names[t];
    src[t] = in[t];
    dst[t] = out[t];
    counts[t] = ELEMS;
  }
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int step = 0; step < steps; step++) {
    if (slot == kill_slot && step == kill_step) {
      printf("dying at step %d\n", step);
      fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    for (int t = 0; t < NT; t++)
      for (int i = 0; i < ELEMS; i++)
        in[t][i] = (float)((rank + 1) * ((i + t + step) % 7));
    hk_status st =
        hk_grouped_allreduce(nm, src, dst, counts, NT, HK_FLOAT32, HK_SUM);
    if (st == HK_ERR_RANKS_CHANGED) { /* this step again, by the others */
      HKT_OK(hk_elastic_reset());
      rank = hk_rank();
      np = hk_size();
      printf("reset: rank %d of %d\n", rank, np);
      step--;
      continue;
    }
    HKT_OK(st);
    for (int t = 0; t < NT; t++)
      for (int i = 0; i < ELEMS; i++) {
        const float want = (float)(np * (np + 1) / 2 * ((i + t + step) % 7));
        HKT_CHECK(out[t][i] == want, "step %d %s[%d]: %g, expected %g", step,
                  names[t], i, out[t][i], want);
      }
    const unsigned char *b = (const unsigned char *)out;
    for (size_t k = 0; k < sizeof out; k += 64)
      hash = (hash ^ b[k]) * 0x100000001b3ull;
  }
  printf("hash %016llx\n", (unsigned long long)hash);
  HKT_OK(hk_shutdown());
  return 0;
}
