/* Unit tests of hk_link over TCP (collectives/transport/link.h): striping
 * over k = 1..4 socket pairs with random call sizes, partial sends and
 * receives, both directions at once from two threads; the documented
 * layout (block i on socket i mod k); a lost peer and a stuck one named in
 * the error; alltoall-style exchange; the link's sockets (hk_link_socket,
 * hk_link_take_socket). Runs under TSan too. */
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
#include "link_pump.h"

/* Two links over k socket pairs: a[i] end 0, b[i] end 1. sndbuf > 0 makes
 * the kernel buffers small (many partial sends). */
static void make_pair(hk_link *a, hk_link *b, int k, size_t block, int sndbuf) {
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
  assert_int_equal(hk_link_init_tcp(a, 1, fa, k, block), HK_OK);
  assert_int_equal(hk_link_init_tcp(b, 0, fb, k, block), HK_OK);
}

static void run_pair(int k, size_t block, size_t len_a, size_t len_b,
                     size_t max_call, int sndbuf, uint32_t seed) {
  hk_link la, lb;
  make_pair(&la, &lb, k, block, sndbuf);
  link_side a = {.tx = &la, .rx = &la}, b = {.tx = &lb, .rx = &lb};
  char what[64];
  snprintf(what, sizeof what, "k=%d block=%zu", k, block);
  link_pump_run(&a, &b, len_a, len_b, max_call, seed, what);
  hk_link_close(&la);
  hk_link_close(&lb);
}

/* k = 1..4, blocks that split calls anywhere, random sizes both ways. */
static void test_striping_random(void **state) {
  (void)state;
  uint32_t seed = 12345;
  for (int k = 1; k <= 4; k++) {
    const size_t blocks[] = {1, 4099, 65536, HK_LINK_BLOCK_BYTES};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
      size_t block = blocks[bi];
      size_t len_a = 1 + link_pump_rand(&seed) % (3u << 20);
      size_t len_b = link_pump_rand(&seed) % (2u << 20);
      size_t max_call =
          block == 1 ? 64 : 1 + link_pump_rand(&seed) % (1u << 20);
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
  hk_link a = {0}, b = {0};
  const int k = 3;
  const size_t block = 10, len = 95;
  make_pair(&a, &b, k, block, 0);
  uint8_t out[95];
  for (size_t i = 0; i < len; i++)
    out[i] = (uint8_t)i;
  size_t done = 0;
  assert_int_equal(hk_link_send_some(&a, out, len, &done), HK_OK);
  assert_int_equal(done, len);
  for (int sock = 0; sock < k; sock++) {
    uint8_t got[64];
    ssize_t n = read(hk_link_socket(&b, sock), got, sizeof got);
    size_t expect = 0;
    for (size_t o = 0; o < len; o++)
      if ((int)((o / block) % (size_t)k) == sock) {
        assert_true(expect < (size_t)n);
        assert_int_equal(got[expect++], o);
      }
    assert_int_equal(n, (ssize_t)expect);
  }
  hk_link_close(&a);
  hk_link_close(&b);
}

/* hk_link_set_streams: a link made over 4 sockets carries its stream
 * over 4, 1, 3, then 2 of them, both ends switching between two streams
 * that ran whole; every byte arrives, and after a switch block i of the
 * stream goes on socket i mod k afresh. Out-of-range counts are refused
 * naming the peer and leave the link as it was; other kinds ignore it. */
static void test_set_streams(void **state) {
  (void)state;
  hk_link la, lb;
  const size_t block = 4099;
  make_pair(&la, &lb, 4, block, 0);
  int open = 0;
  assert_int_equal(hk_link_streams(&la, &open), 4);
  assert_int_equal(open, 4);
  const int ks[] = {4, 1, 3, 2};
  uint32_t seed = 777;
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    assert_int_equal(hk_link_set_streams(&la, ks[i]), HK_OK);
    assert_int_equal(hk_link_set_streams(&lb, ks[i]), HK_OK);
    assert_int_equal(hk_link_streams(&lb, &open), ks[i]);
    assert_int_equal(open, 4);
    link_side a = {.tx = &la, .rx = &la}, b = {.tx = &lb, .rx = &lb};
    char what[64];
    snprintf(what, sizeof what, "streams %d of 4", ks[i]);
    size_t len_a = 100000 + link_pump_rand(&seed) % 300000;
    size_t len_b = 100000 + link_pump_rand(&seed) % 300000;
    link_pump_run(&a, &b, len_a, len_b, 1 + link_pump_rand(&seed) % 70000, seed,
                  what);
  }
  /* over 2 again: the next stream starts afresh on socket 0 */
  assert_int_equal(hk_link_set_streams(&la, 2), HK_OK);
  assert_int_equal(hk_link_set_streams(&lb, 2), HK_OK);
  uint8_t out[3 * 4099 + 5];
  for (size_t o = 0; o < sizeof out; o++)
    out[o] = (uint8_t)(o * 7);
  size_t done = 0;
  assert_int_equal(hk_link_send_some(&la, out, sizeof out, &done), HK_OK);
  assert_int_equal(done, sizeof out);
  for (int sock = 0; sock < 4; sock++) {
    uint8_t got[3 * 4099];
    ssize_t n = sock < 2 ? read(hk_link_socket(&lb, sock), got, sizeof got) : 0;
    size_t expect = 0;
    for (size_t o = 0; o < sizeof out; o++)
      if ((int)((o / block) % 2) == sock) {
        assert_true(expect < (size_t)n);
        assert_int_equal(got[expect++], (uint8_t)(o * 7));
      }
    assert_int_equal(n, (ssize_t)expect);
  }
  assert_int_equal(hk_link_set_streams(&la, 5), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "the link to rank 1 has 4 socket"));
  assert_non_null(strstr(hk_last_error(), "over 5"));
  assert_int_equal(hk_link_set_streams(&la, 0), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_link_streams(&la, &open), 2);
  hk_link_close(&la);
  hk_link_close(&lb);
  hk_link closed = {0};
  assert_int_equal(hk_link_set_streams(&closed, 3), HK_OK);
  assert_int_equal(hk_link_streams(&closed, &open), 0);
  assert_int_equal(open, 0);
}

/* The peer closes: PEER_LOST naming it, whichever socket it was on. */
static void test_lost_peer(void **state) {
  (void)state;
  hk_link a = {0}, b = {0};
  make_pair(&a, &b, 3, 7, 0);
  uint8_t buf[100];
  size_t done = 0;
  /* 15 bytes arrive: blocks on sockets 0, 1 and 1 byte of socket 2 */
  memset(buf, 1, sizeof buf);
  assert_int_equal(hk_link_send_some(&b, buf, 15, &done), HK_OK);
  hk_link_close(&b);
  hk_io io = {-1, 5};
  size_t got = 0;
  hk_status st = link_pump_recv_until_error(&a, &io, &got);
  assert_int_equal(got, 15);
  assert_int_equal(st, HK_ERR_PEER_LOST);
  assert_non_null(strstr(hk_last_error(), "rank 1 closed the connection"));
  hk_link_close(&a);
}

/* A peer that never sends: the timeout names it and what was waited on. */
static void test_stuck_peer(void **state) {
  (void)state;
  hk_link a = {0}, b = {0};
  make_pair(&a, &b, 2, 4096, 0);
  hk_io io = {-1, 0.2};
  uint8_t buf[16];
  hk_status st = hk_link_exchange(&a, buf, 0, &a, buf, sizeof buf, &io, "in x");
  assert_int_equal(st, HK_ERR_TIMEOUT);
  assert_string_equal(hk_last_error(), "timed out after 0.2 s in x: no "
                                       "progress receiving from rank 1");
  hk_link_close(&a);
  hk_link_close(&b);
}

/* init checks its arguments; close is safe on a zeroed or closed link. */
/* hk_link_socket gives the k sockets in order (-1 outside); taking socket
 * 0 closes the link and the others but leaves that one open, the
 * caller's (worker/intra.c's TCP -> shm conversion). */
static void test_sockets(void **state) {
  (void)state;
  hk_link a, b;
  make_pair(&a, &b, 3, 10, 0);
  int s[3];
  for (int i = 0; i < 3; i++) {
    s[i] = hk_link_socket(&a, i);
    assert_true(s[i] >= 0);
    for (int j = 0; j < i; j++)
      assert_int_not_equal(s[i], s[j]);
  }
  assert_int_equal(hk_link_socket(&a, 3), -1);
  assert_int_equal(hk_link_socket(&a, -1), -1);
  int fd = hk_link_take_socket(&a);
  assert_int_equal(fd, s[0]);
  assert_false(hk_link_is_open(&a));
  assert_int_equal(hk_link_socket(&a, 0), -1);
  char c = 'x';
  assert_int_equal(write(fd, &c, 1), 1); /* still open: b's socket 0 */
  c = 0;
  assert_int_equal(read(hk_link_socket(&b, 0), &c, 1), 1);
  assert_int_equal(c, 'x');
  assert_int_equal(read(hk_link_socket(&b, 1), &c, 1), 0); /* closed: EOF */
  close(fd);
  hk_link_close(&b);
  assert_int_equal(hk_link_take_socket(&b), -1); /* closed: none */
}

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
      cmocka_unit_test(test_set_streams),
      cmocka_unit_test(test_lost_peer),
      cmocka_unit_test(test_stuck_peer),
      cmocka_unit_test(test_sockets),
      cmocka_unit_test(test_init_and_close),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
