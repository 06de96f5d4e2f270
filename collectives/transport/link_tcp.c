/*
 * link_tcp.c - the TCP kind of hk_link (link.h: striped over k sockets):
 * its state, its calls and its table.
 */
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>

#include "collectives/transport/link_impl.h"
#include "collectives/transport/tcp.h"
#include "common/status.h"

/* A TCP link's own state (hk_link.state). */
typedef struct tcp_link {
  int nfds;                     /* sockets open, 1..HK_LINK_MAX_SOCKETS */
  int k;                        /* the first k carry the stream, 1..nfds */
  int fds[HK_LINK_MAX_SOCKETS]; /* owned by the link; non-blocking */
  size_t stripe;                /* stripe block, bytes (0: one socket) */
  int send_sock, recv_sock;     /* socket of the next byte sent/received */
  size_t send_left, recv_left;  /* bytes of the current block left there */
} tcp_link;

/* Moves up to n bytes of the stream in one direction (send: from sp;
 * else into rp), in stream order over the k sockets (link.h): the rest of
 * the current block on its socket, then the next socket, stopping at the
 * first socket that is full (sending) or has nothing yet (receiving), or
 * at an error once some bytes moved (handed over; the next call meets the
 * error again). With k = 1, the plain call on the one connection. */
static hk_status tcp_move_some(hk_link *link, int send, const void *sp,
                               void *rp, size_t n, size_t *done) {
  tcp_link *t = link->state;
  if (t->k == 1) /* the default: exactly today's one connection */
    return send ? hk_tcp_send_some(t->fds[0], sp, n, done, link->name)
                : hk_tcp_recv_some(t->fds[0], rp, n, done, link->name);
  int *sock = send ? &t->send_sock : &t->recv_sock;
  size_t *left = send ? &t->send_left : &t->recv_left;
  size_t total = 0;
  *done = 0;
  while (n > 0) {
    size_t want = n < *left ? n : *left, got;
    int fd = t->fds[*sock];
    hk_status st = send ? hk_tcp_send_some(fd, (const uint8_t *)sp + total,
                                           want, &got, link->name)
                        : hk_tcp_recv_some(fd, (uint8_t *)rp + total, want,
                                           &got, link->name);
    if (st != HK_OK && total == 0)
      return st;
    if (st != HK_OK)
      break;
    n -= got;
    total += got;
    *left -= got;
    if (*left == 0) { /* block done: the next goes on the next socket */
      *sock = (*sock + 1) % t->k;
      *left = t->stripe;
    }
    if (got < want)
      break; /* later bytes must wait behind this socket's */
  }
  *done = total;
  return HK_OK;
}

static hk_status tcp_send_some(hk_link *link, const void *p, size_t n,
                               size_t *done) {
  return tcp_move_some(link, 1, p, NULL, n, done);
}

static hk_status tcp_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  return tcp_move_some(link, 0, NULL, p, n, done);
}

static hk_status tcp_test(hk_link *link, int want_send, int want_recv,
                          int drain, int *ready) {
  (void)link;
  (void)want_send;
  (void)want_recv;
  *ready = drain; /* the kernel has the bytes; else poll(2) tells */
  return HK_OK;
}

/* The socket of the side's next byte. */
static int tcp_pollfd(const hk_link *link, int send_side, short *events) {
  const tcp_link *t = link->state;
  *events = send_side ? POLLOUT : POLLIN;
  return send_side ? t->fds[t->send_sock] : t->fds[t->recv_sock];
}

static int tcp_socket(const hk_link *link, int i) {
  const tcp_link *t = link->state;
  return i >= 0 && i < t->nfds ? t->fds[i] : -1;
}

static int tcp_take_socket(hk_link *link) {
  tcp_link *t = link->state;
  int fd = t->fds[0];
  t->fds[0] = -1;
  return fd;
}

/* The next byte each way starts block 0 on socket 0 of the first k. */
static hk_status tcp_set_streams(hk_link *link, int k) {
  tcp_link *t = link->state;
  if (k < 1 || k > t->nfds) /* (nfds > 1 has a stripe block: init) */
    return hk_fail(HK_ERR_INVALID_ARG,
                   "the link to %s has %d socket(s): it cannot carry its "
                   "stream over %d",
                   link->name, t->nfds, k);
  t->k = k;
  t->send_sock = t->recv_sock = 0;
  t->send_left = t->recv_left = t->stripe; /* (unused while k = 1) */
  return HK_OK;
}

static int tcp_streams(const hk_link *link, int *open) {
  const tcp_link *t = link->state;
  *open = t->nfds;
  return t->k;
}

static void tcp_close(hk_link *link) {
  tcp_link *t = link->state;
  for (int i = 0; i < t->nfds; i++)
    hk_tcp_close(&t->fds[i]);
  free(t);
}

static const hk_link_ops tcp_ops = {.name = "tcp",
                                    .wait_class = HK_LINK_WAIT_POLL,
                                    .needs_drain = 0,
                                    .send_some = tcp_send_some,
                                    .recv_some = tcp_recv_some,
                                    .test = tcp_test,
                                    .pollfd = tcp_pollfd,
                                    .released = hk_link_all_sent,
                                    .arm = NULL,
                                    .bell = NULL,
                                    .describe = NULL,
                                    .socket = tcp_socket,
                                    .take_socket = tcp_take_socket,
                                    .set_streams = tcp_set_streams,
                                    .streams = tcp_streams,
                                    .close = tcp_close};

hk_status hk_link_init_tcp(hk_link *link, int peer, const int *fds, int k,
                           size_t block) {
  hk_link_set(link, peer, NULL, NULL);
  if (k < 1 || k > HK_LINK_MAX_SOCKETS || (k > 1 && block == 0))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "a TCP link over %d sockets with %zu-byte blocks (1 to %d "
                   "sockets, blocks of at least 1 byte)",
                   k, block, HK_LINK_MAX_SOCKETS);
  tcp_link *t = calloc(1, sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a TCP link");
  t->nfds = t->k = k;
  for (int i = 0; i < HK_LINK_MAX_SOCKETS; i++)
    t->fds[i] = i < k ? hk_link_own_socket(fds[i]) : -1;
  t->stripe = k > 1 ? block : 0;
  t->send_left = t->recv_left = t->stripe; /* (unused while k = 1) */
  hk_link_set(link, peer, &tcp_ops, t);
  return HK_OK;
}
