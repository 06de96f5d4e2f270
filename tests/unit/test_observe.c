/*
 * test_observe.c - the observers' dispatch (observe/observe.h): with
 * nothing attached no hook runs and no bit is set; each hook reaches
 * exactly the observers that take it, in attach order; detach runs last
 * attached first and empties the list; a second observer that keeps
 * state in the tensor's slot is refused; the polled fds map back to their
 * observers; the first observer with a sample wins; ready stops at the
 * first error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/status.h"
#include "observe/observe.h"

/* What a fake observer saw: a log of "<id><hook>" letters. */
static char log_[256];

static void note(const void *self, char hook) {
  size_t n = strlen(log_);
  if (n + 2 < sizeof log_) {
    log_[n] = *(const char *)self;
    log_[n + 1] = hook;
    log_[n + 2] = '\0';
  }
}

static void on_taken(void *self, const hk_obs_tensor *t) {
  (void)t;
  note(self, 't');
}
static void on_batch_done(void *self, const hk_obs_batch *b) {
  (void)b;
  note(self, 'b');
}
static void on_error(void *self, hk_status st, const char *reason) {
  (void)st;
  (void)reason;
  note(self, 'e');
}
static void on_detach(void *self, int final) { note(self, final ? 'D' : 'd'); }
static int no_sample(void *self, hk_wire_sample *out) {
  (void)out;
  note(self, 's');
  return 0;
}
static int a_sample(void *self, hk_wire_sample *out) {
  note(self, 's');
  out->seq = 7;
  return 1;
}
static hk_status ready_ok(void *self, const hk_obs_ready *e) {
  (void)e;
  note(self, 'r');
  return HK_OK;
}
static hk_status ready_fails(void *self, const hk_obs_ready *e) {
  (void)e;
  note(self, 'r');
  return hk_fail(HK_ERR_SYSTEM, "no thread");
}

static int pipe_fd[2] = {-1, -1};
static int on_poll_fd(void *self) {
  (void)self;
  return pipe_fd[0];
}
static void on_readable(void *self) { note(self, 'p'); }

static const hk_observer_ops taker = {.name = "taker",
                                      .detach = on_detach,
                                      .taken = on_taken,
                                      .error = on_error,
                                      .sample = no_sample,
                                      .ready = ready_ok};
static const hk_observer_ops batcher = {.name = "batcher",
                                        .uses_slot = 1,
                                        .wants_submit_time = 1,
                                        .detach = on_detach,
                                        .batch_done = on_batch_done,
                                        .error = on_error,
                                        .sample = a_sample,
                                        .ready = ready_fails,
                                        .poll_fd = on_poll_fd,
                                        .readable = on_readable};
static const hk_observer_ops slotter = {.name = "slotter", .uses_slot = 1};

static void test_nothing_attached(void **s) {
  (void)s;
  hk_observers o = {0};
  log_[0] = '\0';
  hk_wire_request req = {0};
  uint64_t slot = 0;
  hk_obs_tensor t = {.req = &req, .slot = &slot};
  hk_obs_batch b = {.tensors = &t, .n = 1};
  assert_false(hk_observe_on(&o, ~0u));
  assert_false(hk_observe_wants_submit_time(&o));
  hk_observe_taken(&o, &t);
  hk_observe_batch_done(&o, &b);
  hk_observe_error(&o, HK_ERR_TIMEOUT, "x");
  hk_wire_sample smp;
  assert_int_equal(hk_observe_sample(&o, &smp), 0);
  struct pollfd p[HK_OBSERVE_MAX];
  assert_int_equal(hk_observe_poll_fds(&o, p, HK_OBSERVE_MAX), 0);
  assert_int_equal(hk_observe_ready(&o, &(hk_obs_ready){0}), HK_OK);
  hk_observe_detach(&o, 1);
  assert_string_equal(log_, "");
}

static void test_dispatch_order_and_detach(void **s) {
  (void)s;
  hk_observers o = {0};
  log_[0] = '\0';
  char a = 'A', b = 'B';
  assert_int_equal(hk_observe_attach(&o, &taker, &a), HK_OK);
  assert_int_equal(hk_observe_attach(&o, &batcher, &b), HK_OK);
  assert_true(hk_observe_on(&o, HK_OBS_BIT(HK_OBS_TAKEN)));
  assert_true(hk_observe_on(&o, HK_OBS_BIT(HK_OBS_BATCH_DONE)));
  assert_true(hk_observe_on(&o, HK_OBS_BIT(HK_OBS_POLL)));
  assert_false(hk_observe_on(&o, HK_OBS_BIT(HK_OBS_NEGOTIATED) |
                                     HK_OBS_BIT(HK_OBS_TENSOR_DONE)));
  assert_true(hk_observe_wants_submit_time(&o));
  assert_ptr_equal(hk_observe_find(&o, &batcher), &b);
  assert_null(hk_observe_find(&o, &slotter));
  hk_wire_request req = {0};
  uint64_t slot = 0;
  hk_obs_tensor t = {.req = &req, .slot = &slot};
  hk_obs_batch bt = {.tensors = &t, .n = 1};
  hk_observe_taken(&o, &t);
  hk_observe_batch_done(&o, &bt);
  hk_observe_negotiated(&o, &t); /* nobody takes it */
  hk_observe_error(&o, HK_ERR_TIMEOUT, "x");
  assert_string_equal(log_, "AtBbAeBe");
  /* the first sample wins: A has none, B has one */
  log_[0] = '\0';
  hk_wire_sample smp = {0};
  assert_int_equal(hk_observe_sample(&o, &smp), 1);
  assert_int_equal(smp.seq, 7);
  assert_string_equal(log_, "AsBs");
  /* ready stops at B's error */
  log_[0] = '\0';
  assert_int_equal(hk_observe_ready(&o, &(hk_obs_ready){0}), HK_ERR_SYSTEM);
  assert_string_equal(log_, "ArBr");
  /* a second slot keeper is refused, and the list stays as it was */
  char c = 'C';
  assert_int_equal(hk_observe_attach(&o, &slotter, &c), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "slotter"));
  assert_int_equal(o.n, 2);
  /* detach: the last attached first, then nothing is left */
  log_[0] = '\0';
  hk_observe_detach(&o, 1);
  assert_string_equal(log_, "BDAD");
  assert_int_equal(o.n, 0);
  assert_false(hk_observe_on(&o, ~0u));
  hk_observe_detach(&o, 0);
  assert_string_equal(log_, "BDAD");
}

static void test_polled_fds_map_back(void **s) {
  (void)s;
  assert_int_equal(pipe(pipe_fd), 0);
  hk_observers o = {0};
  char a = 'A', b = 'B';
  assert_int_equal(hk_observe_attach(&o, &taker, &a), HK_OK);
  assert_int_equal(hk_observe_attach(&o, &batcher, &b), HK_OK);
  struct pollfd p[HK_OBSERVE_MAX + 1];
  p[0] = (struct pollfd){.fd = -1}; /* the engine's own fds come first */
  int n = hk_observe_poll_fds(&o, p + 1, HK_OBSERVE_MAX);
  assert_int_equal(n, 1); /* only B polls */
  assert_int_equal(p[1].fd, pipe_fd[0]);
  log_[0] = '\0';
  p[1].revents = 0;
  hk_observe_polled(&o, p + 1);
  assert_string_equal(log_, "");
  p[1].revents = POLLIN;
  hk_observe_polled(&o, p + 1);
  assert_string_equal(log_, "Bp");
  hk_observe_detach(&o, 0);
  close(pipe_fd[0]);
  close(pipe_fd[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nothing_attached),
      cmocka_unit_test(test_dispatch_order_and_detach),
      cmocka_unit_test(test_polled_fds_map_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
