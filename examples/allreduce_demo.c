/*
 * allreduce_demo - the smallest hk program: every rank contributes a
 * vector filled with (rank + 1), averages it across ranks, broadcasts a
 * value from rank 0, and checks what came back.
 *
 *   hkrun -np 4 ./allreduce_demo [count]
 */
#include <stdio.h>
#include <stdlib.h>

#include "hk/hk.h"

static int check(hk_status st, const char *what) {
  if (st != HK_OK) {
    fprintf(stderr, "%s failed: %s: %s\n", what, hk_strerror(st),
            hk_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 1 << 20;
  if (check(hk_init(), "hk_init"))
    return 1;
  int rank = hk_rank(), size = hk_size();
  float *grad = malloc(count * sizeof *grad);
  if (!grad)
    return 1;
  for (size_t i = 0; i < count; i++)
    grad[i] = (float)(rank + 1);
  hk_handle h;
  if (check(hk_allreduce_async("grad", grad, grad, count, HK_FLOAT32,
                               HK_AVERAGE, &h),
            "hk_allreduce_async") ||
      check(hk_wait(h), "allreduce"))
    return 1;
  float expect = (float)(size + 1) / 2.0f; /* mean of 1..size */
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += grad[i] != expect;
  int seed = rank == 0 ? 1234 : -1;
  if (check(hk_broadcast("seed", &seed, 1, HK_INT32, 0), "broadcast"))
    return 1;
  printf("rank %d of %d: average of %zu floats = %g (expected %g, %zu "
         "wrong), seed from rank 0 = %d\n",
         rank, size, count, count ? grad[0] : expect, expect, wrong, seed);
  free(grad);
  if (check(hk_shutdown(), "hk_shutdown"))
    return 1;
  return wrong == 0 && seed == 1234 ? 0 : 1;
}
