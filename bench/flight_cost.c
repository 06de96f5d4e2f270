/*
 * flight_cost.c - what the flight recorder adds to one collective: the
 * background thread's hooks (worker/flight.h) for one tensor taken from
 * the queue, negotiated in a round, started and completed, timed over
 * many tensors on a ring of HK_FLIGHT_RECORDER's default size, against
 * the same loop with the recorder off. Prints ns per collective.
 *
 *   build/flight_cost [tensors]        (default 2000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/strmap.h"
#include "coordinator/wire.h"
#include "worker/context.h"
#include "worker/flight.h"

/* ns per tensor of the hooks over n tensors with a ring of cap (0: off). */
static double cost(size_t cap, long n) {
  hk_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    exit(1);
  ctx->cfg.flight_recorder = cap;
  pthread_mutex_init(&ctx->mu, NULL);
  if (hk_strmap_create(&ctx->inflight) != HK_OK || hk_flight_open(ctx) != HK_OK)
    exit(1);
  struct hk_handle_s h;
  memset(&h, 0, sizeof h);
  snprintf(h.req.name, sizeof h.req.name, "layer4.2.conv3.weight.grad");
  h.req.coll = HK_COLL_ALLREDUCE;
  h.req.dtype = HK_FLOAT32;
  h.req.count = 1024;
  double t0 = hk_now();
  for (long i = 0; i < n; i++) {
    h.t_submit = t0;
    h.obs_slot = 0;
    hk_flight_taken(ctx, &h);
    if (i % 16 == 0) /* a round per 16 tensors */
      hk_flight_round(ctx, t0);
    hk_flight_negotiated(ctx, &h, t0);
    hk_flight_mark(ctx, &h, HK_FLIGHT_RUNNING, t0);
    hk_flight_mark(ctx, &h, HK_FLIGHT_DONE, t0);
  }
  double s = hk_now() - t0;
  hk_flight_close(ctx);
  hk_strmap_destroy(ctx->inflight);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
  return s * 1e9 / (double)n;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000000;
  if (n <= 0) {
    fprintf(stderr, "usage: flight_cost [tensors > 0]\n");
    return 2;
  }
  double off = cost(0, n), on = cost(2000, n);
  printf("flight recorder hooks per collective: %.1f ns on (2000 entries), "
         "%.1f ns off, over %ld tensors\n",
         on, off, n);
  return 0;
}
