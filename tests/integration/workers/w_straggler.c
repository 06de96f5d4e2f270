/*
 * w_straggler - a training loop with one slow rank, for the monitor tests
 * (test_monitor): `w_straggler SLOW_RANK DELAY_MS STEPS [SECONDS]`. Every
 * step, rank SLOW_RANK (-1: none) sleeps DELAY_MS before it submits the
 * step's allreduce "grad" (16 floats, checked against the serial sum);
 * with SECONDS the loop runs at least that long (so telemetry sampled
 * every HK_TELEMETRY_INTERVAL_S reaches rank 0), else STEPS steps. Rank 0
 * decides when the time is up: element 16 of "grad" is its flag "one
 * more step" (the others add 0), so every rank runs the same steps.
 * The slow rank prints "slept X ms per step": the delay it really had
 * (the sleep plus the wait for a CPU when it woke, on a loaded host).
 */
#include <time.h>

#include "wcommon.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  HKT_CHECK(argc >= 4, "usage: w_straggler SLOW_RANK DELAY_MS STEPS [S]");
  const int slow = atoi(argv[1]), delay_ms = atoi(argv[2]);
  const int steps = atoi(argv[3]);
  const double seconds = argc > 4 ? atof(argv[4]) : 0;
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  const double t0 = now_s();
  int more = 1, done = 0;
  double slept = 0;
  for (int s = 0; more; s++, done++) {
    if (rank == slow) {
      struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      double t = now_s();
      nanosleep(&ts, NULL);
      slept += now_s() - t;
    }
    float x[17];
    for (int i = 0; i < 16; i++)
      x[i] = (float)(rank + i + s);
    x[16] = rank == 0 && (s + 1 < steps || now_s() - t0 < seconds);
    HKT_OK(hk_allreduce("grad", x, x, 17, HK_FLOAT32, HK_SUM));
    more = x[16] > 0.5f;
    for (int i = 0; i < 16; i++) {
      float want = (float)(np * (i + s) + np * (np - 1) / 2);
      HKT_CHECK(x[i] == want, "step %d: grad[%d] = %g, want %g", s, i,
                (double)x[i], (double)want);
    }
  }
  if (rank == slow)
    printf("slept %.3f ms per step\n", 1e3 * slept / (done ? done : 1));
  HKT_OK(hk_shutdown());
  return 0;
}
