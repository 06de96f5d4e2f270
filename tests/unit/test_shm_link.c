/* Unit tests of the shared-memory primitives: the segment
 * (collectives/transport/shm_seg.h: never named, mode 0600, opened
 * through the creator's descriptor), the futex doorbell (shm_wait.h), and the
 * shm link (link_shm.c): random call sizes both ways through a 4 KiB ring from
 * two threads (futex waits), a stream mixed with a TCP link in one wait (socket
 * doorbells), a peer that dies and one that is stuck, named in the errors; the
 * name of a set of links' kinds (hk_link_kinds). Runs under TSan too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/transport/link.h"
#include "collectives/transport/shm_wait.h"
#include "common/clock.h"
#include "link_pump.h"

/* The object never has a name (no link count at any moment), is the
 * user's alone, opens through the creator's descriptor (/proc), and both
 * mappings see the same memory, the opener's after the creator closed;
 * once sealed it cannot be opened. */
static void test_segment_lifecycle(void **state) {
  (void)state;
  hk_shm_layout lay = {3, 8192, 4096, 0};
  hk_shm_seg x, y, z;
  assert_int_equal(hk_shm_seg_create(&lay, &x), HK_OK);
  assert_true(x.fd >= 0);
  struct stat sb;
  assert_int_equal(fstat(x.fd, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(sb.st_nlink, 0); /* no name */
  assert_int_equal(hk_shm_seg_open((long)getpid(), x.fd, &y), HK_OK);
  assert_int_equal(y.bytes, hk_shm_seg_bytes(&lay));
  assert_int_equal(y.fd, -1); /* an opener keeps only the mapping */
  /* both mappings still see the same memory */
  uint8_t *p = hk_shm_seg_slot(&x, 2, 1), *q = hk_shm_seg_slot(&y, 2, 1);
  p[8191] = 42;
  assert_int_equal(q[8191], 42);
  assert_ptr_not_equal(hk_shm_seg_ring(&x, 0, 1), hk_shm_seg_ring(&x, 1, 0));
  int fd = x.fd;
  hk_shm_seg_seal(&x); /* every rank has it: no one opens it any more */
  assert_int_equal(x.fd, -1);
  assert_int_equal(hk_shm_seg_open((long)getpid(), fd, &z), HK_ERR_SYSTEM);
  assert_non_null(strstr(hk_last_error(), "/proc/"));
  p[8190] = 7; /* the mappings stay */
  assert_int_equal(q[8190], 7);
  hk_shm_seg_close(&x);
  assert_int_equal(q[8191], 42); /* the opener's mapping outlives it */
  hk_shm_seg_close(&y);
  hk_shm_seg_close(&y); /* twice is fine */
  hk_shm_layout bad = {3, 100, 4096, 0};
  assert_int_equal(hk_shm_seg_create(&bad, &x), HK_ERR_INVALID_ARG);
  assert_int_equal(x.fd, -1);
}

/* FUTEX_WAIT times out, sees a changed word at once, and is woken. */
typedef struct bell_arg {
  hk_shm_doorbell *bell;
  _Atomic int flag;
} bell_arg;

static void *ringer(void *p) {
  bell_arg *a = p;
  usleep(20000);
  atomic_store(&a->flag, 1);
  hk_shm_ring_bell(a->bell);
  return NULL;
}

static int flag_set(void *p) { return atomic_load(&((bell_arg *)p)->flag); }

static void test_doorbell(void **state) {
  (void)state;
  hk_shm_doorbell bell = {0, 0};
  assert_int_equal(hk_futex_wait(&bell.word, 0, 0.01), ETIMEDOUT);
  assert_int_equal(hk_futex_wait(&bell.word, 7, 5.0), 0); /* differs */
  bell_arg a = {&bell, 0};
  pthread_t t;
  pthread_create(&t, NULL, ringer, &a);
  hk_shm_cond c = {flag_set, NULL, NULL, &a, &bell};
  hk_io io = {-1, 5};
  double t0 = hk_now();
  assert_int_equal(hk_shm_wait(&c, &io, "in the test"), HK_OK);
  assert_true(hk_now() - t0 < 2.0);
  pthread_join(t, NULL);
}

/* Two shm links between local ranks 0 (a) and 1 (b) of a fresh 4 KiB-ring
 * segment, each with its end of a socket pair; mixed: also a TCP link
 * pair (a_tcp, b_tcp; else zeroed, which hk_link_close allows). */
typedef struct pair {
  hk_link a, b, a_tcp, b_tcp;
  hk_shm_seg seg;
} pair;

static void make_pair(pair *p, int mixed) {
  memset(p, 0, sizeof *p);
  hk_shm_layout lay = {2, 4096, 4096, 0};
  assert_int_equal(hk_shm_seg_create(&lay, &p->seg), HK_OK);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(hk_link_init_shm(&p->a, 1, &p->seg, 0, 1, sv[0]), HK_OK);
  assert_int_equal(hk_link_init_shm(&p->b, 0, &p->seg, 1, 0, sv[1]), HK_OK);
  assert_string_equal(hk_link_kind_name(&p->a), "shm");
  if (mixed) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(hk_link_init_tcp(&p->a_tcp, 1, &sv[0], 1, 0), HK_OK);
    assert_int_equal(hk_link_init_tcp(&p->b_tcp, 0, &sv[1], 1, 0), HK_OK);
  }
}

/* Both streams at once (link_pump_run). Mixed: side 0 sends over shm and
 * receives over TCP, side 1 the opposite. */
static void run_pair(size_t len_a, size_t len_b, size_t max_call, int mixed,
                     uint32_t seed) {
  pair p;
  make_pair(&p, mixed);
  link_side a = {.tx = &p.a, .rx = mixed ? &p.a_tcp : &p.a};
  link_side b = {.tx = mixed ? &p.b_tcp : &p.b, .rx = &p.b};
  char what[32];
  snprintf(what, sizeof what, "mixed=%d", mixed);
  link_pump_run(&a, &b, len_a, len_b, max_call, seed, what);
  hk_link_close(&p.a);
  hk_link_close(&p.a_tcp);
  hk_link_close(&p.b);
  hk_link_close(&p.b_tcp);
  hk_shm_seg_close(&p.seg);
}

/* The kinds of a set of links, each once, shm before tcp whatever the
 * order (the timeline's transport name), cut to fit; an shm link's socket
 * is its pair's connection. */
static void test_kinds(void **state) {
  (void)state;
  pair p;
  make_pair(&p, 1);
  char buf[32];
  hk_link closed = {0};
  hk_link *l[5] = {&p.a_tcp, &closed, &p.a, &p.b_tcp, NULL};
  assert_string_equal(hk_link_kinds(l, 4, buf, sizeof buf), "shm+tcp");
  assert_string_equal(hk_link_kinds(l, 2, buf, sizeof buf), "tcp");
  assert_string_equal(hk_link_kinds(l + 1, 2, buf, sizeof buf), "shm");
  assert_string_equal(hk_link_kinds(l + 1, 1, buf, sizeof buf), "none");
  assert_string_equal(hk_link_kinds(l + 4, 1, buf, sizeof buf), "none");
  assert_string_equal(hk_link_kinds(l, 0, buf, sizeof buf), "none");
  assert_string_equal(hk_link_kinds(l, 4, buf, 6), "shm+t");
  assert_true(hk_link_socket(&p.a, 0) >= 0);
  assert_int_equal(hk_link_socket(&p.a, 1), -1);
  hk_link_close(&p.a);
  hk_link_close(&p.a_tcp);
  hk_link_close(&p.b);
  hk_link_close(&p.b_tcp);
  hk_shm_seg_close(&p.seg);
}

/* Calls smaller and larger than the ring, wrapping anywhere. */
static void test_stream_random(void **state) {
  (void)state;
  uint32_t seed = 4242;
  for (int i = 0; i < 6; i++) {
    size_t la = 1 + link_pump_rand(&seed) % (1u << 20);
    size_t lb = link_pump_rand(&seed) % (1u << 19);
    size_t max_call = i < 2 ? 7 : 1 + link_pump_rand(&seed) % 20000;
    if (i < 2)
      la %= 50000, lb %= 50000;
    run_pair(la, lb, max_call, 0, seed);
  }
}

/* One wait over an shm side and a TCP side (poll with socket doorbells). */
static void test_stream_mixed(void **state) {
  (void)state;
  run_pair(1 << 20, 1 << 20, 10000, 1, 77);
  run_pair(300000, 5, 100000, 1, 78);
}

/* The peer sends 15 bytes and dies (its socket closes): the 15 bytes are
 * read, then the wait fails naming it. */
static void test_lost_peer(void **state) {
  (void)state;
  pair p;
  make_pair(&p, 0);
  uint8_t buf[100];
  memset(buf, 1, sizeof buf);
  size_t done = 0;
  assert_int_equal(hk_link_send_some(&p.b, buf, 15, &done), HK_OK);
  assert_int_equal(done, 15);
  hk_link_close(&p.b);
  hk_io io = {-1, 5};
  size_t got = 0;
  double t0 = hk_now();
  hk_status st = link_pump_recv_until_error(&p.a, &io, &got);
  assert_int_equal(got, 15);
  assert_int_equal(st, HK_ERR_PEER_LOST);
  assert_non_null(strstr(hk_last_error(), "rank 1 closed the connection"));
  assert_true(hk_now() - t0 < 1.0);
  hk_link_close(&p.a);
  hk_shm_seg_close(&p.seg);
}

/* A peer that never sends: the timeout names it and what was waited on;
 * a full ring the same on the send side. */
static void test_stuck_peer(void **state) {
  (void)state;
  pair p;
  make_pair(&p, 0);
  hk_io io = {-1, 0.2};
  uint8_t buf[8192] = {0};
  hk_status st = hk_link_exchange(&p.a, buf, 0, &p.a, buf, 16, &io, "in x");
  assert_int_equal(st, HK_ERR_TIMEOUT);
  assert_string_equal(hk_last_error(), "timed out after 0.2 s in x: no "
                                       "progress receiving from rank 1");
  st = hk_link_exchange(&p.a, buf, sizeof buf, &p.a, NULL, 0, &io, "in y");
  assert_int_equal(st, HK_ERR_TIMEOUT);
  assert_string_equal(hk_last_error(), "timed out after 0.2 s in y: no "
                                       "progress sending to rank 1");
  hk_link_close(&p.a);
  hk_link_close(&p.b);
  hk_shm_seg_close(&p.seg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_segment_lifecycle),
      cmocka_unit_test(test_doorbell),
      cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_stream_random),
      cmocka_unit_test(test_stream_mixed),
      cmocka_unit_test(test_lost_peer),
      cmocka_unit_test(test_stuck_peer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
