/*
 * rng.h - the trainer's seeded pseudo-random numbers: SplitMix64.
 *
 * SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014; constants from Vigna's public-domain reference
 * splitmix64.c) passes BigCrush, has a 64-bit state and period 2^64, and
 * gives the same sequence on every machine: every rank that seeds it with
 * the same value draws the same numbers, which is how all ranks shuffle
 * the training set identically without communicating.
 *
 * All functions are pure functions of *r (no globals); a rng is owned by
 * its caller and must not be shared between threads without a lock.
 */
#ifndef HK_TRAIN_RNG_H
#define HK_TRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct rng {
  uint64_t state;
} rng;

/** Seeds the generator. Any seed (0 included) is valid. */
void rng_seed(rng *r, uint64_t seed);

/** The next 64 uniformly distributed bits. */
uint64_t rng_u64(rng *r);

/** Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(rng *r);

/** Uniform integer in [0, n) without modulo bias (Lemire, "Fast random
 *  integer generation in an interval", ACM TOMACS 2019). n must be > 0. */
uint64_t rng_below(rng *r, uint64_t n);

/** Standard normal deviate (Box-Muller transform, one value per call). */
double rng_normal(rng *r);

/** Fisher-Yates (Knuth's Algorithm P) shuffle of v[0..n) in place. */
void rng_shuffle(rng *r, uint32_t *v, size_t n);

#endif
