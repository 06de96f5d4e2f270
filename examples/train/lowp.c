/*
 * lowp.c - float32 <-> bfloat16 / binary16 (see lowp.h).
 */
#include "lowp.h"

#include <string.h>

static const char *const names[] = {"fp32", "bf16", "fp16"};

const char *lowp_name(lowp_kind k) { return names[k]; }

int lowp_parse(const char *s, lowp_kind *out) {
  for (int k = 0; k < 3; k++)
    if (!strcmp(s, names[k])) {
      *out = (lowp_kind)k;
      return 0;
    }
  return -1;
}

static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it NaN (quiet) */
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f16_bits(float f) {
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

static float f16_value(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}

void lowp_round(float *v, size_t n, lowp_kind k) {
  if (k == LOWP_BF16)
    for (size_t i = 0; i < n; i++)
      v[i] = bf16_value(bf16_bits(v[i]));
  else if (k == LOWP_FP16)
    for (size_t i = 0; i < n; i++)
      v[i] = (float)(_Float16)v[i];
}

void lowp_copy(float *dst, const float *v, size_t n, lowp_kind k) {
  memcpy(dst, v, n * sizeof *v);
  lowp_round(dst, n, k);
}

void lowp_pack(uint16_t *dst, const float *v, size_t n, lowp_kind k) {
  for (size_t i = 0; i < n; i++)
    dst[i] = k == LOWP_BF16 ? bf16_bits(v[i]) : f16_bits(v[i]);
}

void lowp_unpack(float *dst, const uint16_t *src, size_t n, lowp_kind k) {
  for (size_t i = 0; i < n; i++)
    dst[i] = k == LOWP_BF16 ? bf16_value(src[i]) : f16_value(src[i]);
}
