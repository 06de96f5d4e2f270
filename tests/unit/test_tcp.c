/* Unit tests of the TCP transport's handshake: a connection without the
 * secret is refused and accepting continues; a server without the secret
 * is detected by the client; framed messages round-trip. Liveness: the
 * keepalive and user-timeout options follow HK_TIMEOUT_S (that a cut link
 * then fails the job is tested across netns hosts, test_netbed_multihost). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "collectives/transport/tcp_gate.h"
#include "common/clock.h"
#include "coordinator/channel.h"

typedef struct client {
  uint16_t port;
  hk_secret secret;
  hk_status st;
  int fd;
  char err[512];
} client;

static void *client_main(void *p) {
  client *c = p;
  hk_io io = {-1, 5};
  c->st = hk_tcp_connect("127.0.0.1", c->port, &c->secret, hk_now() + 5, &io,
                         "the server", &c->fd);
  snprintf(c->err, sizeof c->err, "%s", hk_last_error());
  if (c->st == HK_OK) {
    hk_msg hello = {.type = HK_MSG_HELLO};
    hello.u.hello.rank = 7;
    hello.u.hello.channel = HK_CHANNEL_DATA;
    hello.u.hello.streams = 1;
    hello.u.hello.stripes = 1;
    hk_buf scratch = {0};
    c->st = hk_channel_send(c->fd, &hello, &scratch, &io, "the server");
    hk_buf_free(&scratch);
  }
  return NULL;
}

typedef struct acceptor {
  int lfd, fd, refused;
  hk_secret secret;
  hk_status st;
} acceptor;

static void *accept_main(void *p) {
  acceptor *a = p;
  hk_io io = {-1, 5};
  a->st =
      hk_tcp_accept(a->lfd, &a->secret, hk_now() + 5, &io, &a->fd, &a->refused);
  return NULL;
}

static void test_bad_secret_refused_good_accepted(void **state) {
  (void)state;
  acceptor acc = {.fd = -1};
  hk_secret bad;
  assert_int_equal(hk_secret_generate(&acc.secret), HK_OK);
  assert_int_equal(hk_secret_generate(&bad), HK_OK);
  uint16_t port;
  assert_int_equal(hk_tcp_listen("127.0.0.1", &acc.lfd, &port), HK_OK);
  pthread_t ta;
  pthread_create(&ta, NULL, accept_main, &acc);
  /* the intruder is refused, and accepting goes on */
  client intruder = {.port = port, .secret = bad, .fd = -1};
  client_main(&intruder);
  assert_int_equal(intruder.st, HK_ERR_AUTH);
  assert_non_null(strstr(intruder.err, "refused our proof"));
  client friend = {.port = port, .secret = acc.secret, .fd = -1};
  client_main(&friend);
  pthread_join(ta, NULL);
  assert_int_equal(friend.st, HK_OK);
  assert_int_equal(acc.st, HK_OK);
  assert_int_equal(acc.refused, 1);
  hk_io io = {-1, 5};
  hk_msg m;
  hk_buf scratch = {0};
  assert_int_equal(hk_channel_recv(acc.fd, &m, &scratch, &io, "friend"), HK_OK);
  assert_int_equal(m.type, HK_MSG_HELLO);
  assert_int_equal(m.u.hello.rank, 7);
  hk_msg_free(&m);
  hk_buf_free(&scratch);
  close(acc.fd);
  close(friend.fd);
  if (intruder.fd >= 0)
    close(intruder.fd);
  close(acc.lfd);
}

/* A "server" that sends a nonce and then answers with garbage. */
typedef struct fake_server {
  int lfd;
} fake_server;

static void *fake_main(void *p) {
  fake_server *f = p;
  hk_io io = {-1, 5};
  int fd = -1;
  /* accept without the handshake: poll via hk_tcp_wait_any */
  int ready;
  if (hk_tcp_wait_any(&f->lfd, 1, &io, "fake accept", &ready) == HK_OK)
    fd = accept(f->lfd, NULL, NULL);
  if (fd < 0)
    return NULL;
  uint8_t nonce[HK_NONCE_LEN] = {1}, msg[HK_AUTH_CLIENT_MSG_LEN],
          proof[HK_PROOF_LEN] = {2};
  hk_tcp_send_all(fd, nonce, sizeof nonce, &io, "client");
  hk_tcp_recv_all(fd, msg, sizeof msg, &io, "client");
  hk_tcp_send_all(fd, proof, sizeof proof, &io, "client");
  close(fd);
  return NULL;
}

static void test_server_without_secret_detected(void **state) {
  (void)state;
  fake_server f;
  uint16_t port;
  assert_int_equal(hk_tcp_listen("127.0.0.1", &f.lfd, &port), HK_OK);
  pthread_t t;
  pthread_create(&t, NULL, fake_main, &f);
  client c = {.port = port, .fd = -1};
  assert_int_equal(hk_secret_generate(&c.secret), HK_OK);
  client_main(&c);
  pthread_join(t, NULL);
  assert_int_equal(c.st, HK_ERR_AUTH);
  assert_non_null(strstr(c.err, "does not know the job's secret"));
  close(f.lfd);
}

static void test_connect_timeout_when_nobody_listens(void **state) {
  (void)state;
  int lfd;
  uint16_t port;
  assert_int_equal(hk_tcp_listen("127.0.0.1", &lfd, &port), HK_OK);
  close(lfd); /* the port is now (almost certainly) refused */
  hk_secret s;
  assert_int_equal(hk_secret_generate(&s), HK_OK);
  hk_io io = {-1, 1};
  int fd;
  assert_int_equal(
      hk_tcp_connect("127.0.0.1", port, &s, hk_now() + 0.3, &io, "rank 5", &fd),
      HK_ERR_TIMEOUT);
  assert_non_null(strstr(hk_last_error(), "connecting to rank 5"));
}

static int opt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
  return v;
}

static void test_liveness_follows_the_timeout(void **state) {
  (void)state;
  static const struct {
    double timeout_s;
    int idle, intvl, user_ms;
  } cases[] = {
      {5, 1, 1, 5000},               /* the fault tests' HK_TIMEOUT_S */
      {60, 15, 7, 60000},            /* the default */
      {0.1, 1, 1, 1000},             /* clamped to 1 s */
      {1e9, 21600, 10800, 86400000}, /* clamped to a day */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(hk_tcp_set_liveness(fd, cases[i].timeout_s), HK_OK);
    assert_int_equal(opt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPIDLE), cases[i].idle);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPINTVL), cases[i].intvl);
    assert_in_range(opt(fd, IPPROTO_TCP, TCP_KEEPCNT), 1, 127);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), cases[i].user_ms);
    close(fd);
  }
  /* not a socket: the option is named */
  assert_int_equal(hk_tcp_set_liveness(999, 5), HK_ERR_SYSTEM);
  assert_non_null(strstr(hk_last_error(), "SO_KEEPALIVE"));
}

/* The launcher's abort does not hide bytes that already arrived: a wait
 * that can read returns them; the next one, with nothing to read, fails
 * with HK_ERR_PEER_LOST. A send is not let through an abort. */
static void test_arrived_bytes_before_abort(void **state) {
  (void)state;
  int sv[2], ab[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(pipe(ab), 0);
  assert_int_equal(write(sv[1], "abcd", 4), 4);
  assert_int_equal(write(ab[1], "x", 1), 1); /* hkrun aborted meanwhile */
  hk_io io = {ab[0], 2};
  char got[4];
  assert_int_equal(hk_tcp_recv_all(sv[0], got, 4, &io, "rank 1"), HK_OK);
  assert_memory_equal(got, "abcd", 4);
  assert_int_equal(hk_tcp_recv_all(sv[0], got, 1, &io, "rank 1"),
                   HK_ERR_PEER_LOST);
  assert_non_null(strstr(hk_last_error(), "the launcher aborted the job"));
  assert_int_equal(hk_tcp_wait(sv[0], 1, -1, 0, &io, "sending"),
                   HK_ERR_PEER_LOST);
  close(sv[0]);
  close(sv[1]);
  close(ab[0]);
  close(ab[1]);
}

/* A connection that never says a word holds up nobody: the gate serves
 * the good client that came after it at once, then refuses the idle one
 * after its 2 s, logging "timed out authenticating" (stderr captured). */
static void test_gate_idle_connection_holds_up_nobody(void **state) {
  (void)state;
  acceptor acc = {.fd = -1};
  assert_int_equal(hk_secret_generate(&acc.secret), HK_OK);
  uint16_t port;
  assert_int_equal(hk_tcp_listen("127.0.0.1", &acc.lfd, &port), HK_OK);
  int idle = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(idle, (struct sockaddr *)&sa, sizeof sa), 0);
  char log[] = "/tmp/hk-test-gate.XXXXXX";
  int logfd = mkstemp(log), saved = dup(2);
  assert_true(logfd >= 0 && saved >= 0);
  dup2(logfd, 2);
  hk_tcp_gate *g;
  assert_int_equal(hk_tcp_gate_open(acc.lfd, &acc.secret, &g), HK_OK);
  client friend = {.port = port, .secret = acc.secret, .fd = -1};
  pthread_t tc;
  pthread_create(&tc, NULL, client_main, &friend);
  hk_io io = {-1, 5};
  const double t0 = hk_now();
  hk_status st = hk_tcp_gate_accept(g, t0 + 5, &io, &acc.fd);
  const double served = hk_now() - t0;
  pthread_join(tc, NULL);
  hk_status late = hk_tcp_gate_accept(g, hk_now() + 3, &io, &acc.fd);
  int refused = hk_tcp_gate_refused(g);
  char err[512];
  snprintf(err, sizeof err, "%s", hk_last_error());
  hk_tcp_gate_close(g);
  dup2(saved, 2);
  close(saved);
  char text[2048] = "";
  ssize_t n = pread(logfd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  close(logfd);
  unlink(log);
  assert_int_equal(st, HK_OK);
  assert_int_equal(friend.st, HK_OK);
  assert_true(served < 1.0);
  assert_int_equal(late, HK_ERR_TIMEOUT);
  assert_int_equal(refused, 1);
  assert_non_null(strstr(err, "1 connections that did not prove"));
  assert_non_null(strstr(text, "timed out authenticating"));
  assert_null(strstr(text, "bad secret"));
  close(acc.fd);
  close(friend.fd);
  close(idle);
  close(acc.lfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_liveness_follows_the_timeout),
      cmocka_unit_test(test_arrived_bytes_before_abort),
      cmocka_unit_test(test_bad_secret_refused_good_accepted),
      cmocka_unit_test(test_gate_idle_connection_holds_up_nobody),
      cmocka_unit_test(test_server_without_secret_detected),
      cmocka_unit_test(test_connect_timeout_when_nobody_listens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
