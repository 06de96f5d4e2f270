/*
 * scaler.c - dynamic loss scaling (see scaler.h).
 */
#include "scaler.h"

#include <math.h>

#define SCALER_MIN 5.9604645e-8f /* 2^-24 */
#define SCALER_MAX 16777216.0f   /* 2^24 */

void scaler_init(loss_scaler *s, int enabled) {
  s->enabled = enabled;
  s->scale = enabled ? SCALER_INIT : 1.0f;
  s->good = 0;
  s->skipped = 0;
}

int scaler_all_finite(const float *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(g[i]))
      return 0;
  return 1;
}

int scaler_update(loss_scaler *s, int finite) {
  if (!s->enabled)
    return 1;
  if (!finite) {
    if (s->scale > SCALER_MIN)
      s->scale *= 0.5f;
    s->good = 0;
    s->skipped++;
    return 0;
  }
  if (++s->good >= SCALER_GROWTH_INTERVAL) {
    if (s->scale < SCALER_MAX)
      s->scale *= 2.0f;
    s->good = 0;
  }
  return 1;
}
