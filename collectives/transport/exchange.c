/*
 * exchange.c - the send-while-receiving loop (see exchange.h).
 */
#include "collectives/transport/exchange.h"

#include <stdint.h>

hk_status hk_exchange_run(const hk_exchange_ops *ops, void *ctx, const void *sp,
                          size_t sn, void *rp, size_t rn) {
  const uint8_t *s = sp;
  uint8_t *r = rp;
  while (sn > 0 || rn > 0) {
    size_t ds = 0, dr = 0;
    hk_status st = HK_OK;
    if (sn > 0)
      st = ops->send_some(ctx, s, sn, &ds);
    if (st == HK_OK && rn > 0)
      st = ops->recv_some(ctx, r, rn, &dr);
    if (st != HK_OK)
      return st;
    s += ds;
    sn -= ds;
    r += dr;
    rn -= dr;
    if (ds == 0 && dr == 0 && (sn > 0 || rn > 0)) {
      st = ops->wait(ctx, sn > 0, rn > 0);
      if (st != HK_OK)
        return st;
    }
  }
  return HK_OK;
}
