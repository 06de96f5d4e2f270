/* Unit tests of hk_link over TCP (collectives/transport/link.h): striping
 * over k = 1..4 socket pairs with random call sizes, partial sends and
 * receives, both directions at once from two threads; the documented
 * layout (block i on socket i mod k); a lost peer and a stuck one named in
 * the error; alltoall-style exchange. Runs under TSan too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/transport/link.h"

/* The byte at stream offset o of side s's stream. */
static uint8_t byte_at(int side, size_t o) {
  uint64_t x =
      o * 0x9E3779B97F4A7C15ull + (uint64_t)side * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return (uint8_t)(x >> 56);
}

static uint32_t next_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

typedef struct side {
  hk_link link;
  int id;
  size_t send_len, recv_len; /* bytes this side sends / expects */
  size_t max_call;           /* largest send_some/recv_some */
  uint32_t seed;
  hk_status st;
  char err[512];
  size_t bad_at; /* first wrong byte received, or SIZE_MAX */
} side;

/* Sends its stream and receives the other's at once, in calls of random
 * sizes (1..max_call), waiting only when neither moved. */
static void *side_main(void *p) {
  side *s = p;
  uint8_t *out = malloc(s->send_len + 1), *in = malloc(s->recv_len + 1);
  for (size_t i = 0; i < s->send_len; i++)
    out[i] = byte_at(s->id, i);
  size_t sent = 0, got = 0;
  hk_io io = {-1, 10};
  s->st = HK_OK;
  while (s->st == HK_OK && (sent < s->send_len || got < s->recv_len)) {
    size_t ds = 0, dr = 0;
    if (sent < s->send_len) {
      size_t want = 1 + next_rand(&s->seed) % s->max_call;
      if (want > s->send_len - sent)
        want = s->send_len - sent;
      s->st = hk_link_send_some(&s->link, out + sent, want, &ds);
      sent += ds;
    }
    if (s->st == HK_OK && got < s->recv_len) {
      size_t want = 1 + next_rand(&s->seed) % s->max_call;
      if (want > s->recv_len - got)
        want = s->recv_len - got;
      s->st = hk_link_recv_some(&s->link, in + got, want, &dr);
      got += dr;
    }
    if (s->st == HK_OK && ds == 0 && dr == 0)
      s->st = hk_link_wait(&s->link, sent < s->send_len, &s->link,
                           got < s->recv_len, &io, "in the test");
  }
  if (s->st == HK_OK)
    s->st = hk_link_drain(&s->link, &io, "in the test");
  snprintf(s->err, sizeof s->err, "%s", hk_last_error());
  s->bad_at = SIZE_MAX;
  for (size_t i = 0; i < got; i++)
    if (in[i] != byte_at(1 - s->id, i)) {
      s->bad_at = i;
      break;
    }
  free(out);
  free(in);
  return NULL;
}

/* Two links over k socket pairs: a[i] end 0, b[i] end 1. sndbuf > 0 makes
 * the kernel buffers small (many partial sends). */
static void make_pair(side *a, side *b, int k, size_t block, int sndbuf) {
  int fa[HK_LINK_MAX_SOCKETS], fb[HK_LINK_MAX_SOCKETS];
  for (int i = 0; i < k; i++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    if (sndbuf > 0)
      for (int e = 0; e < 2; e++)
        setsockopt(sv[e], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    fa[i] = sv[0];
    fb[i] = sv[1];
  }
  assert_int_equal(hk_link_init_tcp(&a->link, 1, fa, k, block), HK_OK);
  assert_int_equal(hk_link_init_tcp(&b->link, 0, fb, k, block), HK_OK);
  a->id = 0;
  b->id = 1;
}

static void run_pair(int k, size_t block, size_t len_a, size_t len_b,
                     size_t max_call, int sndbuf, uint32_t seed) {
  side a = {0}, b = {0};
  make_pair(&a, &b, k, block, sndbuf);
  a.send_len = b.recv_len = len_a;
  b.send_len = a.recv_len = len_b;
  a.max_call = b.max_call = max_call;
  a.seed = seed;
  b.seed = seed * 7 + 1;
  pthread_t t;
  pthread_create(&t, NULL, side_main, &b);
  side_main(&a);
  pthread_join(t, NULL);
  side *s[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    if (s[i]->st != HK_OK)
      fail_msg("k=%d block=%zu side %d: %s", k, block, i, s[i]->err);
    if (s[i]->bad_at != SIZE_MAX)
      fail_msg("k=%d block=%zu side %d: byte %zu differs", k, block, i,
               s[i]->bad_at);
  }
  hk_link_close(&a.link);
  hk_link_close(&b.link);
}

/* k = 1..4, blocks that split calls anywhere, random sizes both ways. */
static void test_striping_random(void **state) {
  (void)state;
  uint32_t seed = 12345;
  for (int k = 1; k <= 4; k++) {
    const size_t blocks[] = {1, 4099, 65536, HK_LINK_BLOCK_BYTES};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
      size_t block = blocks[bi];
      size_t len_a = 1 + next_rand(&seed) % (3u << 20);
      size_t len_b = next_rand(&seed) % (2u << 20);
      size_t max_call = block == 1 ? 64 : 1 + next_rand(&seed) % (1u << 20);
      if (block == 1) /* byte-sized blocks: keep the stream short */
        len_a %= 20000, len_b %= 20000;
      run_pair(k, block, len_a, len_b, max_call, 0, seed);
    }
  }
}

/* Small kernel buffers: sends stop part-way through blocks and calls. */
static void test_striping_partial(void **state) {
  (void)state;
  for (int k = 1; k <= 4; k++) {
    run_pair(k, 4099, 1000003, 999983, 300000, 4096, 99u + (uint32_t)k);
    run_pair(k, 64 << 10, 2 << 20, 1, 1 << 20, 8192, 7u * (uint32_t)k);
  }
}

/* Byte o travels on socket (o / block) mod k: read the raw sockets. */
static void test_layout(void **state) {
  (void)state;
  side a = {0}, b = {0};
  const int k = 3;
  const size_t block = 10, len = 95;
  make_pair(&a, &b, k, block, 0);
  uint8_t out[95];
  for (size_t i = 0; i < len; i++)
    out[i] = (uint8_t)i;
  size_t done = 0;
  assert_int_equal(hk_link_send_some(&a.link, out, len, &done), HK_OK);
  assert_int_equal(done, len);
  for (int sock = 0; sock < k; sock++) {
    uint8_t got[64];
    ssize_t n = read(b.link.fds[sock], got, sizeof got);
    size_t expect = 0;
    for (size_t o = 0; o < len; o++)
      if ((int)((o / block) % (size_t)k) == sock) {
        assert_true(expect < (size_t)n);
        assert_int_equal(got[expect++], o);
      }
    assert_int_equal(n, (ssize_t)expect);
  }
  hk_link_close(&a.link);
  hk_link_close(&b.link);
}

/* The peer closes: PEER_LOST naming it, whichever socket it was on. */
static void test_lost_peer(void **state) {
  (void)state;
  side a = {0}, b = {0};
  make_pair(&a, &b, 3, 7, 0);
  uint8_t buf[100];
  size_t done = 0;
  /* 15 bytes arrive: blocks on sockets 0, 1 and 1 byte of socket 2 */
  memset(buf, 1, sizeof buf);
  assert_int_equal(hk_link_send_some(&b.link, buf, 15, &done), HK_OK);
  hk_link_close(&b.link);
  hk_io io = {-1, 5};
  size_t got = 0;
  hk_status st = HK_OK;
  while (st == HK_OK) {
    st = hk_link_recv_some(&a.link, buf, sizeof buf, &done);
    got += done;
    if (st == HK_OK && done == 0)
      st = hk_link_wait(&a.link, 0, &a.link, 1, &io, "in the test");
  }
  assert_int_equal(got, 15);
  assert_int_equal(st, HK_ERR_PEER_LOST);
  assert_non_null(strstr(hk_last_error(), "rank 1 closed the connection"));
  hk_link_close(&a.link);
}

/* A peer that never sends: the timeout names it and what was waited on. */
static void test_stuck_peer(void **state) {
  (void)state;
  side a = {0}, b = {0};
  make_pair(&a, &b, 2, 4096, 0);
  hk_io io = {-1, 0.2};
  uint8_t buf[16];
  hk_status st =
      hk_link_exchange(&a.link, buf, 0, &a.link, buf, sizeof buf, &io, "in x");
  assert_int_equal(st, HK_ERR_TIMEOUT);
  assert_string_equal(hk_last_error(), "timed out after 0.2 s in x: no "
                                       "progress receiving from rank 1");
  hk_link_close(&a.link);
  hk_link_close(&b.link);
}

/* init checks its arguments; close is safe on a zeroed or closed link. */
static void test_init_and_close(void **state) {
  (void)state;
  hk_link l;
  memset(&l, 0, sizeof l);
  hk_link_close(&l); /* zeroed: must not close fd 0 */
  assert_int_not_equal(fcntl(0, F_GETFD), -1);
  int fds[9] = {0};
  assert_int_equal(hk_link_init_tcp(&l, 1, fds, 0, 10), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_link_init_tcp(&l, 1, fds, 9, 10), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_link_init_tcp(&l, 1, fds, 2, 0), HK_ERR_INVALID_ARG);
  hk_link_close(&l);
  assert_int_not_equal(fcntl(0, F_GETFD), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_striping_random),
      cmocka_unit_test(test_striping_partial),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_lost_peer),
      cmocka_unit_test(test_stuck_peer),
      cmocka_unit_test(test_init_and_close),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
