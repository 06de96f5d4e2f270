/*
 * batch.c - gather, augment and convert a batch (see batch.h).
 */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

int batch_init(batch *b, size_t cap) {
  memset(b, 0, sizeof *b);
  b->x = malloc(cap * DATA_PIXELS * sizeof *b->x);
  b->y = malloc(cap);
  if (!cap || !b->x || !b->y) {
    batch_free(b);
    return -1;
  }
  b->cap = cap;
  return 0;
}

void batch_free(batch *b) {
  free(b->x);
  free(b->y);
  memset(b, 0, sizeof *b);
}

static float convert(uint8_t p) {
  return ((float)p * (1.0f / 255.0f) - DATA_MEAN) * (1.0f / DATA_STD);
}

/* The shifted (dy, dx), optionally mirrored copy of image px into x. */
static void augment(const uint8_t *px, float *x, rng *aug) {
  int span = 2 * BATCH_CROP_PAD + 1;
  int dy = (int)rng_below(aug, (uint64_t)span) - BATCH_CROP_PAD;
  int dx = (int)rng_below(aug, (uint64_t)span) - BATCH_CROP_PAD;
  int flip = (int)rng_below(aug, 2);
  for (int r = 0; r < DATA_ROWS; r++) {
    int sr = r + dy;
    for (int c = 0; c < DATA_COLS; c++) {
      int sc = (flip ? DATA_COLS - 1 - c : c) + dx;
      uint8_t p = sr >= 0 && sr < DATA_ROWS && sc >= 0 && sc < DATA_COLS
                      ? px[sr * DATA_COLS + sc]
                      : 0;
      x[r * DATA_COLS + c] = convert(p);
    }
  }
}

void batch_fill(batch *b, const data_split *s, const uint32_t *idx,
                size_t first, size_t n, rng *aug) {
  for (size_t i = 0; i < n; i++) {
    size_t k = idx ? idx[i] : first + i;
    const uint8_t *px = s->images + k * DATA_PIXELS;
    float *x = b->x + i * DATA_PIXELS;
    if (aug)
      augment(px, x, aug);
    else
      for (int p = 0; p < DATA_PIXELS; p++)
        x[p] = convert(px[p]);
    b->y[i] = s->labels[k];
  }
  b->n = n;
}
