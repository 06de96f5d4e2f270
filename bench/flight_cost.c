/*
 * flight_cost.c - what the flight recorder adds to one collective: the
 * background thread's hooks (observe/observe.h, dispatched to the flight
 * recorder, observe/flight.h) for one tensor taken from the queue,
 * negotiated in a round, started and completed, timed over many tensors
 * on a ring of HK_FLIGHT_RECORDER's default size, against the same loop
 * with no observer attached (each hook one bit test). Prints ns per
 * collective.
 *
 *   build/flight_cost [tensors]        (default 2000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/config.h"
#include "coordinator/wire.h"
#include "observe/flight.h"

/* The engine's tensors in flight: none (nothing dumps here). */
static void no_pending(void *engine, hk_obs_visit visit, void *arg) {
  (void)engine;
  (void)visit;
  (void)arg;
}

/* ns per tensor of the hooks over n tensors with a ring of cap (0: off). */
static double cost(size_t cap, long n) {
  hk_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg)
    exit(1);
  cfg->flight_recorder = cap;
  hk_observers o = {0};
  hk_obs_setup s = {
      .cfg = cfg, .rank = 0, .size = 1, .pending = {no_pending, NULL}};
  if (hk_flight_attach(&o, &s) != HK_OK)
    exit(1);
  hk_wire_request req;
  memset(&req, 0, sizeof req);
  snprintf(req.name, sizeof req.name, "layer4.2.conv3.weight.grad");
  req.coll = HK_COLL_ALLREDUCE;
  req.dtype = HK_FLOAT32;
  req.count = 1024;
  hk_wire_response resp;
  memset(&resp, 0, sizeof resp);
  uint64_t slot = 0;
  double t0 = hk_now();
  hk_obs_tensor t = {.req = &req, .t_submit = t0, .slot = &slot};
  hk_obs_round r = {.n = 16, .t_ready = t0};
  hk_obs_batch b = {.tensors = &t, .n = 1, .t_start = t0, .t_end = t0};
  for (long i = 0; i < n; i++) {
    slot = 0;
    t.resp = NULL;
    hk_observe_taken(&o, &t);
    if (i % 16 == 0) /* a round per 16 tensors */
      hk_observe_round_started(&o, &r);
    t.resp = &resp;
    t.t_ready = t0;
    hk_observe_negotiated(&o, &t);
    hk_observe_batch_started(&o, &b);
    hk_observe_batch_done(&o, &b);
  }
  double sec = hk_now() - t0;
  hk_observe_detach(&o, 0);
  free(cfg);
  return sec * 1e9 / (double)n;
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
