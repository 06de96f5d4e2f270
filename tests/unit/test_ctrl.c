/* Unit tests of the control endpoints (collectives/transport/ctrl.h), the
 * shm kind over a segment's control rings of 4 KiB and a socket pair for
 * liveness and doorbells: two sides sending 1 MiB frames to each other at
 * once complete (each sender takes in what the other sends while it waits
 * for room); a reader about to sleep is woken by one doorbell byte, which
 * it discards; bytes written before the peer closed are read, then the
 * close is HK_ERR_PEER_LOST naming it; the tcp kind over the same calls.
 * Runs under TSan too (label threaded). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/transport/ctrl.h"
#include "common/status.h"

enum { BIG = 1 << 20 };

typedef struct pair {
  hk_shm_seg seg;
  int fds[2]; /* fds[0]: local rank 0's socket, fds[1]: rank 1's */
  hk_ctrl c[2];
} pair;

static void pair_open(pair *p, size_t ctrl_bytes) {
  hk_shm_layout lay = {2, 4096, 4096, ctrl_bytes};
  assert_int_equal(hk_shm_seg_create(&lay, &p->seg), HK_OK);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
  memset(p->c, 0, sizeof p->c);
  assert_int_equal(hk_ctrl_init_shm(&p->c[0], &p->seg, 1, 1, p->fds[0]), HK_OK);
  assert_int_equal(hk_ctrl_init_shm(&p->c[1], &p->seg, 1, 0, p->fds[1]), HK_OK);
  assert_string_equal(hk_ctrl_kind(&p->c[0]), "shm");
}

static void pair_close(pair *p) {
  for (int i = 0; i < 2; i++) {
    hk_ctrl_close(&p->c[i]);
    if (p->fds[i] >= 0)
      close(p->fds[i]);
  }
  hk_shm_seg_close(&p->seg);
}

static uint8_t byte_of(int side, size_t i) {
  return (uint8_t)(i * 7 + (size_t)side * 101 + (i >> 12));
}

typedef struct side {
  hk_ctrl *c;
  int me;
  hk_status sent, got;
  int ok;
  char error[256];
} side;

/* Sends BIG bytes to the other side, then receives its BIG bytes. */
static void *exchange(void *arg) {
  side *s = arg;
  hk_io io = {-1, 5.0};
  uint8_t *out = malloc(BIG), *in = malloc(BIG);
  for (size_t i = 0; i < BIG; i++)
    out[i] = byte_of(s->me, i);
  const char *who = s->me ? "rank 0" : "rank 1";
  s->sent = hk_ctrl_send(s->c, out, BIG, &io, who);
  if (s->sent != HK_OK)
    snprintf(s->error, sizeof s->error, "%s", hk_last_error());
  s->got = s->sent == HK_OK ? hk_ctrl_recv(s->c, in, BIG, &io, who) : s->sent;
  s->ok = s->got == HK_OK;
  for (size_t i = 0; s->ok && i < BIG; i++)
    s->ok = in[i] == byte_of(!s->me, i);
  free(out);
  free(in);
  return NULL;
}

/* Both sides send a frame 256 times the ring at once: neither blocks for
 * ever (each drains the other's ring into its stash while it waits). */
static void test_cross_sends(void **state) {
  (void)state;
  pair p;
  pair_open(&p, 4096);
  side s[2] = {{.c = &p.c[0], .me = 0}, {.c = &p.c[1], .me = 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, exchange, &s[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    if (!s[i].ok)
      fail_msg("side %d: send %d, receive %d, %s", i, s[i].sent, s[i].got,
               s[i].error);
  assert_true(atomic_load(&p.c[0].frames_sent) == 0); /* channel.c counts */
  pair_close(&p);
}

/* A reader that armed and sleeps in poll is woken by one byte on its
 * socket; polled discards it and finds the ring's bytes. */
static void test_doorbell(void **state) {
  (void)state;
  pair p;
  pair_open(&p, 4096);
  hk_io io = {-1, 5.0};
  assert_int_equal(hk_ctrl_pending(&p.c[1]), 0);
  hk_ctrl_arm(&p.c[1], 1);
  assert_int_equal(hk_ctrl_send(&p.c[0], "hello", 5, &io, "rank 1"), HK_OK);
  struct pollfd q = {.fd = p.fds[1], .events = POLLIN};
  assert_int_equal(poll(&q, 1, 5000), 1); /* the doorbell rang */
  hk_ctrl_arm(&p.c[1], 0);
  int readable = 0;
  assert_int_equal(hk_ctrl_polled(&p.c[1], q.revents, &readable, "rank 0"),
                   HK_OK);
  assert_int_equal(readable, 1);
  char got[5];
  assert_int_equal(hk_ctrl_recv(&p.c[1], got, 5, &io, "rank 0"), HK_OK);
  assert_memory_equal(got, "hello", 5);
  assert_int_equal(poll(&q, 1, 0), 0); /* the doorbell byte was discarded */
  /* not armed: no byte on the socket, the bytes show as pending */
  assert_int_equal(hk_ctrl_send(&p.c[0], "x", 1, &io, "rank 1"), HK_OK);
  assert_int_equal(poll(&q, 1, 0), 0);
  assert_int_equal(hk_ctrl_pending(&p.c[1]), 1);
  assert_int_equal(hk_ctrl_wait_readable(&p.c[1], 1.0), 1);
  pair_close(&p);
}

/* Bytes written before the peer died are read; then its close is
 * HK_ERR_PEER_LOST naming it. */
static void test_peer_closed(void **state) {
  (void)state;
  pair p;
  pair_open(&p, 4096);
  hk_io io = {-1, 5.0};
  assert_int_equal(hk_ctrl_send(&p.c[0], "last", 4, &io, "rank 1"), HK_OK);
  close(p.fds[0]);
  p.fds[0] = -1;
  struct pollfd q = {.fd = p.fds[1], .events = POLLIN};
  assert_int_equal(poll(&q, 1, 5000), 1);
  int readable = 0;
  assert_int_equal(hk_ctrl_polled(&p.c[1], q.revents, &readable, "rank 0"),
                   HK_OK);
  assert_int_equal(readable, 1);
  char got[4];
  assert_int_equal(hk_ctrl_recv(&p.c[1], got, 4, &io, "rank 0"), HK_OK);
  assert_memory_equal(got, "last", 4);
  assert_int_equal(poll(&q, 1, 5000), 1);
  assert_int_equal(hk_ctrl_polled(&p.c[1], q.revents, &readable, "rank 0"),
                   HK_ERR_PEER_LOST);
  assert_string_equal(hk_last_error(), "rank 0 closed the connection");
  assert_int_equal(hk_ctrl_recv(&p.c[1], got, 1, &io, "rank 0"),
                   HK_ERR_PEER_LOST);
  pair_close(&p);
}

/* A segment without control rings gives no shm endpoint. */
static void test_no_rings(void **state) {
  (void)state;
  pair p;
  hk_shm_layout lay = {2, 4096, 4096, 0};
  assert_int_equal(hk_shm_seg_create(&lay, &p.seg), HK_OK);
  hk_ctrl c = {0};
  assert_int_equal(hk_ctrl_init_shm(&c, &p.seg, 1, 1, -1), HK_ERR_INVALID_ARG);
  assert_string_equal(hk_ctrl_kind(&c), "none");
  hk_shm_seg_close(&p.seg);
}

/* The tcp kind: the socket carries the bytes; poll says readable. */
static void test_tcp_kind(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  hk_ctrl a = {0}, b = {0};
  hk_ctrl_init_tcp(&a, fds[0]);
  hk_ctrl_init_tcp(&b, fds[1]);
  assert_string_equal(hk_ctrl_kind(&a), "tcp");
  hk_io io = {-1, 5.0};
  assert_int_equal(hk_ctrl_send(&a, "abc", 3, &io, "b"), HK_OK);
  assert_int_equal(hk_ctrl_pending(&b), 0);
  assert_int_equal(hk_ctrl_wait_readable(&b, 5.0), 1);
  char got[3];
  assert_int_equal(hk_ctrl_recv(&b, got, 3, &io, "a"), HK_OK);
  assert_memory_equal(got, "abc", 3);
  close(fds[0]);
  close(fds[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cross_sends), cmocka_unit_test(test_doorbell),
      cmocka_unit_test(test_peer_closed), cmocka_unit_test(test_no_rings),
      cmocka_unit_test(test_tcp_kind),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
