/*
 * exchange.h - the loop that sends one buffer while receiving another over
 * two non-blocking byte streams, both in flight together: the one body of
 * hk_tcp_exchange (two sockets, tcp.h) and hk_link_exchange (two links,
 * link.h), which differ only in how a side moves bytes and how they wait.
 */
#ifndef HK_TRANSPORT_EXCHANGE_H
#define HK_TRANSPORT_EXCHANGE_H

#include <stddef.h>

#include "hk/hk.h"

/** How one kind of stream moves bytes; every call gets the caller's ctx. */
typedef struct hk_exchange_ops {
  /* Without blocking: moves up to n bytes, *done of them (0: none can
   * move now). An error stops the exchange. */
  hk_status (*send_some)(void *ctx, const void *p, size_t n, size_t *done);
  hk_status (*recv_some)(void *ctx, void *p, size_t n, size_t *done);
  /* Blocks until a wanted side may move, or fails (its own message:
   * HK_ERR_TIMEOUT, HK_ERR_PEER_LOST, ...). At least one side is wanted. */
  hk_status (*wait)(void *ctx, int want_send, int want_recv);
} hk_exchange_ops;

/**
 * Sends sn bytes from sp while receiving rn bytes into rp (either may be
 * 0, its pointer then unused): each round offers each unfinished side what
 * is left, and waits only when neither moved a byte. Returns HK_OK once
 * both are done, or the first error of an ops call (as it set it). Runs on
 * the caller's thread; the streams are the caller's.
 */
hk_status hk_exchange_run(const hk_exchange_ops *ops, void *ctx, const void *sp,
                          size_t sn, void *rp, size_t rn);

#endif
