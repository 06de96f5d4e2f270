/*
 * wcommon.h - helpers shared by the integration-test worker programs (run
 * under hkrun by the cmocka drivers): failing loudly with hk's message, and
 * deterministic inputs every rank can regenerate for any other rank.
 */
#ifndef HK_TESTS_WCOMMON_H
#define HK_TESTS_WCOMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hk/hk.h"

/* Exits 1 with the status and hk's detailed message if st is not HK_OK. */
#define HKT_OK(expr)                                                           \
  do {                                                                         \
    hk_status st_ = (expr);                                                    \
    if (st_ != HK_OK) {                                                        \
      fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
              hk_strerror(st_), hk_last_error());                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Exits 1 with a message if cond is false. */
#define HKT_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* A well-mixed 64-bit hash (splitmix64's finaliser). */
static inline uint64_t hkt_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#endif
