/*
 * data.h - the inputs every rank feeds an allreduce, and the exact result
 * it must produce, for any dtype and op.
 *
 * Inputs are small integers, so every order of reduction gives the same,
 * exactly representable value and #wrong is an exact comparison (the
 * method of nccl-tests' -c and of bench/peers):
 * - sum, average on float32, float64, int16, int32, int64: x = (rank+1) *
 *   (i%13+1), the peers' inputs (sums stay below 2^24 up to 1600 ranks;
 *   int16 sums wrap, exactly, past 70 ranks);
 * - sum, average on float16, bfloat16, int8, uint8: x = (rank%2+1) *
 *   (i%3+1), in 1..6, so sums stay exact in bfloat16's 8 significant bits
 *   (256) up to 42 ranks; 8-bit integer sums wrap, exactly, as documented;
 * - min, max: x = 1 + (rank+i) % 13 (% 3 for the narrow types above), so
 *   no one rank holds every extreme and a rank's own input fails -c;
 * - prod: x = 1 + (rank+i)%2, products are powers of two (exact, or
 *   infinity/wrapped to 0 past the type's range on every path alike).
 * The expected value follows hk.h's arithmetic: integers wrap, average
 * divides the (wrapped) sum once at the end (in binary32 for 16-bit
 * floats, then rounded to nearest even; integers truncate).
 *
 * Both patterns repeat every HKB_PERIOD elements, so filling and checking
 * copy and compare whole periods.
 */
#ifndef HKB_DATA_H
#define HKB_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** Elements after which inputs and results repeat: lcm(13, 3, 2). */
#define HKB_PERIOD 78

typedef struct hkb_pattern {
  hk_dtype dtype;
  size_t esize;                      /* bytes per element */
  unsigned char in[HKB_PERIOD * 8];  /* this rank's input, one period */
  unsigned char ref[HKB_PERIOD * 8]; /* expected result, one period */
} hkb_pattern;

/** Computes rank's inputs and the serial result over `size` ranks. */
void hkb_pattern_init(hkb_pattern *p, hk_dtype dtype, hk_op op, int rank,
                      int size);

/** Writes the input pattern to buf[0..count) (count in elements). */
void hkb_fill(const hkb_pattern *p, void *buf, size_t count);

/** Number of elements of buf[0..count) that differ, bitwise, from the
 *  expected result. */
size_t hkb_check(const hkb_pattern *p, const void *buf, size_t count);

/**
 * A buffer for bytes bytes, page-aligned, asked for transparent huge pages
 * (MADV_HUGEPAGE) and pre-faulted, so that no page fault lands in a timed
 * region (page faults cost ~11 us per 4 KiB page on the reference VM:
 * bench/peers/results/RESULTS.md). NULL if it cannot be mapped.
 */
void *hkb_buffer_alloc(size_t bytes);

/** Unmaps a buffer from hkb_buffer_alloc(bytes). NULL is ignored. */
void hkb_buffer_free(void *buf, size_t bytes);

#endif
