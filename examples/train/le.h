/*
 * le.h - little-endian encoding of the trainer's file formats (save.h's
 * HKMLP1, ckpt.h's HKCKPT): values are converted byte by byte, so a file
 * is the same on any host. Pure functions; thread-safe.
 */
#ifndef HK_TRAIN_LE_H
#define HK_TRAIN_LE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void le_put_u32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t le_get_u32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
         (uint32_t)b[3] << 24;
}

static inline void le_put_u64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t le_get_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | b[i];
  return v;
}

/** n IEEE 754 binary32 values into 4 n bytes at b. */
static inline void le_put_f32s(uint8_t *b, const float *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &v[i], 4);
    le_put_u32(b + 4 * i, bits);
  }
}

/** The inverse of le_put_f32s. */
static inline void le_get_f32s(const uint8_t *b, float *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = le_get_u32(b + 4 * i);
    memcpy(&v[i], &bits, 4);
  }
}

static inline void le_put_f64(uint8_t *b, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  le_put_u64(b, bits);
}

static inline double le_get_f64(const uint8_t *b) {
  uint64_t bits = le_get_u64(b);
  double v;
  memcpy(&v, &bits, 8);
  return v;
}

#endif
