/*
 * loss.c - softmax cross-entropy (see loss.h).
 */
#include "loss.h"

#include <math.h>
#include <stddef.h>

int loss_argmax(const float *v, int n) {
  int best = 0;
  for (int k = 1; k < n; k++)
    if (v[k] > v[best])
      best = k;
  return best;
}

double softmax_xent(const float *z0, const uint8_t *y, int B, int C, float *d,
                    long *correct) {
  double total = 0.0;
  for (int i = 0; i < B; i++) {
    const float *z = z0 + (size_t)i * (size_t)C;
    float *g = d + (size_t)i * (size_t)C;
    int top = loss_argmax(z, C);
    if (correct && top == y[i])
      (*correct)++;
    /* Stable softmax: shift by the max so that exp never overflows. */
    double sum = 0.0;
    for (int k = 0; k < C; k++) {
      g[k] = expf(z[k] - z[top]);
      sum += g[k];
    }
    /* -log softmax(z)_y = log(sum exp(z - max)) - (z_y - max) */
    total += log(sum) - (double)(z[y[i]] - z[top]);
    float scale = (float)(1.0 / (sum * (double)B));
    for (int k = 0; k < C; k++)
      g[k] = g[k] * scale - (k == y[i] ? 1.0f / (float)B : 0.0f);
  }
  return total / (double)B;
}
