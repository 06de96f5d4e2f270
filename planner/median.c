/*
 * median.c - the median of a set of values (see median.h).
 */
#include "planner/median.h"

#include <stdlib.h>

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double hk_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
