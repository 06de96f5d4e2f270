/*
 * sweep.h - the allreduce size sweep in nccl-tests' all_reduce_perf
 * columns, with the method of bench/peers (so hk's numbers sit next to
 * Open MPI's MPI_Allreduce measured there):
 *
 * - in place; before every iteration, untimed, the buffer is re-filled
 *   (data.h) and all ranks meet in hk_barrier; timed: one hk_allreduce
 *   through the public API (enqueue, negotiation, ring, completion);
 * - raw(us): the same call's ring collective alone, as the background
 *   thread timed it (worker/internal.h);
 * - one iteration's time = max over ranks; reported = median over
 *   iterations; iterations = min(-n 50, -B 1 GiB / size), at least
 *   min(-n, 5); warm-up = min(-w 5, iterations/5 + 1);
 * - algbw = size / time, busbw = algbw * 2(n-1)/n, GB = 1e9 bytes;
 * - #wrong = elements differing from the exact serial result after the
 *   last iteration, summed over ranks (-c 1).
 * Sizes go from -b to -e (bytes, rounded down to whole elements) times -f,
 * for every -d type and -o op, types outermost (as nccl-tests).
 */
#ifndef HKB_SWEEP_H
#define HKB_SWEEP_H

#include "options.h"

/** Runs the sweep between hk_init and hk_shutdown; prints on rank 0 (and
 *  writes --csv there). Exits with a message on any failure. */
void hkb_sweep(const hkb_opts *o);

#endif
