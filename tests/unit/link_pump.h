/*
 * link_pump.h - the two-sided stream test test_link.c (TCP links) and
 * test_shm_link.c (shm links, and shm mixed with TCP) share: each side
 * sends a known byte stream and receives the other's at once, in calls of
 * random sizes, from its own thread, and checks every byte it received.
 * Test code only (cmocka's fail_msg reports a failed pair).
 */
#ifndef HK_TESTS_LINK_PUMP_H
#define HK_TESTS_LINK_PUMP_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/transport/link.h"

/* Byte o of side `side`'s stream (a fixed mix of both; no state). */
uint8_t link_pump_byte(int side, size_t o);

/* xorshift32 step on *s (nonzero): the next pseudo-random number. */
uint32_t link_pump_rand(uint32_t *s);

/* One side of a pair: it sends send_len bytes on tx and receives
 * recv_len on rx (tx == rx for one link), in calls of 1..max_call bytes
 * drawn from seed. After link_pump_run: st (HK_OK or the first error),
 * err (hk_last_error then), bad_at (first wrong byte received, or
 * SIZE_MAX). The links stay the caller's. */
typedef struct link_side {
  hk_link *tx, *rx;
  int id; /* 0 or 1: whose stream it sends */
  size_t send_len, recv_len, max_call;
  uint32_t seed;
  hk_status st;
  char err[512];
  size_t bad_at;
} link_side;

/* Side a (id 0) sends len_a bytes to side b (id 1), which sends len_b
 * back, both at once (b on a second thread), in calls of 1..max_call
 * bytes (seeds: seed for a, seed * 7 + 1 for b); then fails the test,
 * naming `what` and the side, if either side got an error or a wrong
 * byte. a->tx, a->rx, b->tx, b->rx must be set. */
void link_pump_run(link_side *a, link_side *b, size_t len_a, size_t len_b,
                   size_t max_call, uint32_t seed, const char *what);

/* Receives on l until it fails (waiting up to io->timeout_s each time
 * nothing came): returns that status and the bytes received in *got. */
hk_status link_pump_recv_until_error(hk_link *l, hk_io *io, size_t *got);

#endif
