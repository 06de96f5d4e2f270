/*
 * rng.c - SplitMix64 and what the trainer draws from it (see rng.h).
 */
#include "rng.h"

#include <math.h>

void rng_seed(rng *r, uint64_t seed) { r->state = seed; }

uint64_t rng_u64(rng *r) {
  /* Vigna's splitmix64.c: golden-ratio increment, then Stafford's "Mix13"
   * finaliser. */
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double rng_uniform(rng *r) {
  return (double)(rng_u64(r) >> 11) * 0x1.0p-53; /* 53 bits / 2^53 */
}

uint64_t rng_below(rng *r, uint64_t n) {
  /* Lemire 2019: the high word of a 64x64->128 product is uniform in [0, n)
   * once products whose low word falls under 2^64 mod n are rejected. */
  unsigned __int128 m = (unsigned __int128)rng_u64(r) * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    while (low < threshold) {
      m = (unsigned __int128)rng_u64(r) * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

double rng_normal(rng *r) {
  /* Box-Muller with u1 in (0, 1] so that log(u1) is finite. */
  double u1 = 1.0 - rng_uniform(r);
  double u2 = rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void rng_shuffle(rng *r, uint32_t *v, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)rng_below(r, i);
    uint32_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}
