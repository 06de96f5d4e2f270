/*
 * elastic_replay.c - w_elastic's training replayed serially (see
 * elastic_replay.h).
 */
#include "elastic_replay.h"

#include <stdio.h>

/* w_elastic's gradient, the same expression. */
static double grad(int slot, int step, int i) {
  return (double)(((slot + 1) * (i + 1) + step) % 7 - 3);
}

void hkt_elastic_replay(const int *a, int na, const int *b, int nb, int cut,
                        int steps, char *out, size_t cap) {
  hkt_elastic_replay3(a, na, b, nb, cut, b, nb, steps, steps, out, cap);
}

void hkt_elastic_replay3(const int *a, int na, const int *b, int nb, int cut,
                         const int *c, int nc, int cut2, int steps, char *out,
                         size_t cap) {
  double w[HKT_ELASTIC_D];
  for (int i = 0; i < HKT_ELASTIC_D; i++)
    w[i] = i / 8.0;
  for (int s = 0; s < steps; s++) {
    const int *world = s < cut ? a : s < cut2 ? b : c;
    const int n = s < cut ? na : s < cut2 ? nb : nc;
    for (int i = 0; i < HKT_ELASTIC_D; i++) {
      double sum = 0;
      for (int k = 0; k < n; k++)
        sum += grad(world[k], s, i);
      w[i] -= 0.125 * (sum / (double)n);
    }
  }
  size_t used = 0;
  for (int i = 0; i < HKT_ELASTIC_D && used < cap; i++)
    used +=
        (size_t)snprintf(out + used, cap - used, "%s%a", i ? "," : "", w[i]);
}
