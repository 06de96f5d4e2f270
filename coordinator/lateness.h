/*
 * lateness.h - rank 0's straggler accounting (issue 15, item 1): for every
 * tensor, how long after its first rank each rank submitted it; for every
 * round, each rank's lateness (the largest over the round's tensors), its
 * wait for the others, and which rank was last; summed over a window of
 * rounds (HK_MONITOR_WINDOW) and over the whole job.
 *
 * Definitions (seconds of rank 0's clock, hk_now()):
 *   late_r(t)  = when rank r's request for tensor t reached rank 0 - when
 *                the first rank's did (0 for the first rank);
 *   late_r(R)  = max over the round's tensors t of late_r(t): how long
 *                rank r held the round back (tensors of one round overlap
 *                in time, so they are not summed);
 *   spread(R)  = max over r of late_r(R);
 *   wait_r(R)  = spread(R) - late_r(R): how long r's tensors sat ready
 *                waiting for the last rank;
 *   last(R)    = the rank with the largest late_r(R), if spread(R) > 0
 *                (ties: the lowest rank); a round with spread 0 has none.
 * A rank that joined (hk_join) and did not submit a tensor is not counted
 * for it.
 *
 * Pure logic: no I/O, no threads, no clock of its own. Thread-safety: one
 * writer (rank 0's background thread) for hk_lateness_arrival / _tensor
 * / _end_round; readers of hk_lateness_window / _total must hold the lock
 * the writer holds around hk_lateness_end_round (observe/monitor.c).
 */
#ifndef HK_COORDINATOR_LATENESS_H
#define HK_COORDINATOR_LATENESS_H

#include <stdint.h>

#include "hk/hk.h"

/** One rank's sums over some rounds. */
typedef struct hk_lateness_rank {
  uint64_t last;  /* rounds in which this rank was last */
  double late_s;  /* sum of late_r(R), seconds */
  double wait_s;  /* sum of wait_r(R), seconds */
  double worst_s; /* the largest late_r(R), seconds */
} hk_lateness_rank;

/** The sums over a set of rounds. */
typedef struct hk_lateness_sums {
  uint64_t rounds;         /* rounds counted */
  double first_s, last_s;  /* hk_now() at the end of the first and the last
                              of them (their span is the rounds' period) */
  hk_lateness_rank *ranks; /* size entries, index = rank */
} hk_lateness_sums;

typedef struct hk_lateness hk_lateness;

/** Creates the accounting for `size` ranks, closing a window every
 *  `window` (>= 1) rounds. Errors: HK_ERR_INVALID_ARG (size < 1 or
 *  window < 1), HK_ERR_NOMEM. */
hk_status hk_lateness_create(int size, uint32_t window, hk_lateness **out);

/** Frees it. NULL is fine. */
void hk_lateness_destroy(hk_lateness *L);

/** Rank `rank` (in range: the caller's negotiator checked it) submitted a
 *  tensor of this round late_s seconds after its first rank (>= 0). */
void hk_lateness_arrival(hk_lateness *L, int rank, double late_s);

/**
 * Ends the round (the caller's tensors since the last call): folds it into
 * the open window and the total, at time now_s. Returns 1 when this closed
 * a window (hk_lateness_window then returns it), else 0. A call with no
 * arrival since the last one is not a round (returns 0, counts nothing).
 */
int hk_lateness_end_round(hk_lateness *L, double now_s);

/** The last closed window (rounds 0 until one closes). Borrowed: valid
 *  until the next hk_lateness_end_round. */
const hk_lateness_sums *hk_lateness_window(const hk_lateness *L);

/** Every round since hk_lateness_create. Borrowed, as above. */
const hk_lateness_sums *hk_lateness_total(const hk_lateness *L);

/** The window length in rounds (as created). */
uint32_t hk_lateness_window_rounds(const hk_lateness *L);

#endif
