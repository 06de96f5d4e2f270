/*
 * test_waiter - the wait policy (common/waiter.h), by what it decides
 * (polls, yields, sleeps counted per thread), not by how long it takes:
 *  - nothing in flight: no poll, no yield, a sleep at once;
 *  - busy threads fit the cores: pause-polls until the budget, no yield;
 *  - only the ranks fit: at most HK_WAITER_POLLS polls before the first
 *    yield, then yields until the budget, then a sleep; a caller whose
 *    polls are slow (system calls) yields after HK_WAITER_POLL_S;
 *  - oversubscribed (more ranks than cores): no pause-poll, at most
 *    HK_WAITER_YIELDS yields, then a sleep, whatever the budget;
 *  - a caller's earlier end (hk_waiter_until) stops the polling, a later
 *    one (hk_waiter_extend) prolongs it, never past the cap;
 *  - the budget learned: short waits give a budget of 3 x their mean plus
 *    the margin; waits past the cap give only the floor; a cap of 0 never
 *    polls; hits are judged against the cap, so a floor budget recovers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/waiter.h"

#define CAP 200e-6

/* Spins a wait of kind to its end (the condition never holds). */
static unsigned spin_out(hk_wait_kind kind, int in_flight) {
  hk_waiter w;
  hk_waiter_begin(&w, kind, in_flight);
  unsigned steps = 0;
  while (hk_waiter_spin(&w))
    steps++;
  assert_int_equal(hk_waiter_spin(&w), 0); /* spent stays spent */
  return steps;
}

static int setup(void **s) {
  (void)s;
  hk_waiter_reset_thread();
  return 0;
}

static void idle_never_polls(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 1, 8);
  assert_int_equal(spin_out(HK_WAIT_EVENTS, 0), 0);
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_int_equal(c.waits, 1);
  assert_int_equal(c.polls, 0);
  assert_int_equal(c.yields, 0);
  assert_int_equal(c.sleeps, 1);
}

static void fitting_polls_without_yield(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 2, 4); /* 2 ranks x 2 threads on 4 cores */
  assert_int_equal(hk_waiter_fits(), HK_WAITER_FIT_THREADS);
  unsigned steps = spin_out(HK_WAIT_PEER, 1);
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_true(steps > HK_WAITER_POLLS); /* 200 us of pauses */
  assert_int_equal(c.polls, steps);
  assert_int_equal(c.yields, 0);
  assert_int_equal(c.sleeps, 1);
}

static void ranks_fit_poll_then_yield(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 2, 2); /* 4 threads, 2 ranks on 2 cores */
  assert_int_equal(hk_waiter_fits(), HK_WAITER_FIT_RANKS);
  const double t0 = hk_now();
  unsigned steps = spin_out(HK_WAIT_PEER, 1);
  const double took = hk_now() - t0;
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_true(c.polls >= 1 && c.polls <= HK_WAITER_POLLS);
  assert_true(c.yields >= 1);
  assert_true(took >= CAP); /* yields for the whole budget, not a few */
  assert_int_equal(c.polls + c.yields, steps);
  assert_int_equal(c.sleeps, 1);
}

/* A caller whose condition test costs 5 us (a poll(2) of its sockets):
 * HK_WAITER_POLLS of them would hold the core 320 us from the thread
 * awaited; the pause-polls end after HK_WAITER_POLL_S instead. */
static void slow_polls_yield_soon(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 2, 2);
  hk_waiter w;
  hk_waiter_begin(&w, HK_WAIT_PEER, 1);
  while (hk_waiter_spin(&w)) {
    const double until = hk_now() + 5e-6;
    while (hk_now() < until) {
    }
  }
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_true(c.polls >= 1 && c.polls <= 2);
  assert_true(c.yields >= 1);
  assert_int_equal(c.sleeps, 1);
}

static void oversubscribed_sleeps_early(void **s) {
  (void)s;
  hk_waiter_configure(1.0, 4, 2); /* 4 ranks on 2 cores; a 1 s cap */
  assert_int_equal(hk_waiter_fits(), HK_WAITER_OVERSUBSCRIBED);
  unsigned steps = spin_out(HK_WAIT_PEER, 1);
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_int_equal(c.polls, 0);
  assert_int_equal(c.yields, HK_WAITER_YIELDS);
  assert_int_equal(steps, HK_WAITER_YIELDS);
  assert_int_equal(c.sleeps, 1);
}

static void caller_ends_polling(void **s) {
  (void)s;
  hk_waiter_configure(1.0, 1, 8); /* a 1 s cap, pause-polls */
  hk_waiter w;
  hk_waiter_begin(&w, HK_WAIT_EVENTS, 1);
  hk_waiter_until(&w, w.start); /* no time left: sleep at once */
  assert_int_equal(hk_waiter_spin(&w), 0);
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_int_equal(c.polls + c.yields, 0);
  assert_int_equal(c.sleeps, 1);
}

static void caller_extends_polling(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 1, 8);
  for (int i = 0; i < 200; i++) /* learned: waits outlast the cap */
    hk_waiter_record(HK_WAIT_EVENTS, 0.05);
  hk_waiter w;
  hk_waiter_begin(&w, HK_WAIT_EVENTS, 1);
  assert_true(w.until - w.start < HK_WAITER_FLOOR_S + 1e-9);
  hk_waiter_extend(&w, w.start + 100e-6); /* more is due within 100 us */
  assert_true(w.until == w.start + 100e-6);
  hk_waiter_extend(&w, w.start + 50e-6); /* never shortens */
  assert_true(w.until == w.start + 100e-6);
  hk_waiter_extend(&w, w.start + 1.0); /* never past the cap */
  assert_true(w.until == w.start + CAP);
}

static void budget_learned(void **s) {
  (void)s;
  hk_waiter_configure(CAP, 1, 8);
  assert_true(hk_waiter_budget(HK_WAIT_HANDLE) == CAP); /* nothing learned */
  for (int i = 0; i < 200; i++)
    hk_waiter_record(HK_WAIT_HANDLE, 30e-6);
  double b = hk_waiter_budget(HK_WAIT_HANDLE);
  assert_true(b > 3 * 30e-6 + HK_WAITER_MARGIN_S - 1e-9);
  assert_true(b < 3 * 30e-6 + HK_WAITER_MARGIN_S + 1e-9);
  /* the other kinds learn apart */
  assert_true(hk_waiter_budget(HK_WAIT_PEER) == CAP);
  /* waits far past the cap: polling would be in vain, only the floor */
  for (int i = 0; i < 200; i++)
    hk_waiter_record(HK_WAIT_HANDLE, 0.05);
  assert_true(hk_waiter_budget(HK_WAIT_HANDLE) == HK_WAITER_FLOOR_S);
  /* short waits again: the budget comes back (hits judged by the cap) */
  for (int i = 0; i < 200; i++)
    hk_waiter_record(HK_WAIT_HANDLE, 2e-6);
  assert_true(hk_waiter_budget(HK_WAIT_HANDLE) == HK_WAITER_FLOOR_S);
  for (int i = 0; i < 200; i++)
    hk_waiter_record(HK_WAIT_HANDLE, 150e-6);
  assert_true(hk_waiter_budget(HK_WAIT_HANDLE) == CAP); /* 3 x 150 us */
}

static void cap_zero_never_polls(void **s) {
  (void)s;
  hk_waiter_configure(0, 1, 8);
  assert_int_equal(spin_out(HK_WAIT_PEER, 1), 0);
  hk_waiter_counts c;
  hk_waiter_counts_get(&c);
  assert_int_equal(c.polls + c.yields, 0);
  assert_int_equal(c.sleeps, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(idle_never_polls, setup),
      cmocka_unit_test_setup(fitting_polls_without_yield, setup),
      cmocka_unit_test_setup(ranks_fit_poll_then_yield, setup),
      cmocka_unit_test_setup(slow_polls_yield_soon, setup),
      cmocka_unit_test_setup(oversubscribed_sleeps_early, setup),
      cmocka_unit_test_setup(caller_ends_polling, setup),
      cmocka_unit_test_setup(caller_extends_polling, setup),
      cmocka_unit_test_setup(budget_learned, setup),
      cmocka_unit_test_setup(cap_zero_never_polls, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
