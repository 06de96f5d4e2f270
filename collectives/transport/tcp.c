#include "collectives/transport/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/transport/exchange.h"
#include "collectives/transport/tcp_gate.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/waiter.h"

void hk_tcp_close(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

void hk_tcp_shutdown(int fd) {
  if (fd >= 0)
    shutdown(fd, SHUT_RDWR);
}

hk_status hk_tcp_set_liveness(int fd, double timeout_s) {
  if (timeout_s < 1)
    timeout_s = 1;
  if (timeout_s > 86400)
    timeout_s = 86400;
  int one = 1;
  int idle = (int)(timeout_s / 4), intvl = (int)(timeout_s / 8);
  if (idle < 1)
    idle = 1;
  if (intvl < 1)
    intvl = 1;
  int cnt = (int)((timeout_s - idle) / intvl) + 1; /* without USER_TIMEOUT */
  if (cnt > 127)
    cnt = 127;
  unsigned user_ms = (unsigned)(timeout_s * 1000);
  const struct {
    int level, name;
    const void *v;
    socklen_t len;
    const char *what;
  } opt[] = {
      {SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one, "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle, "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl, "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt, "TCP_KEEPCNT"},
      {IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms,
       "TCP_USER_TIMEOUT"},
  };
  for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
    if (setsockopt(fd, opt[i].level, opt[i].name, opt[i].v, opt[i].len) != 0)
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "setsockopt %s", opt[i].what);
  return HK_OK;
}

hk_status hk_tcp_set_send_buffer(int fd, size_t bytes, size_t *granted) {
  int v = bytes > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)bytes;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v) != 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "setsockopt SO_SNDBUF");
  socklen_t len = sizeof v;
  if (granted && getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len) == 0 &&
      v > 0 && (*granted == 0 || (size_t)v < *granted))
    *granted = (size_t)v;
  return HK_OK;
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static hk_status resolve(const char *host, uint16_t port,
                         struct sockaddr_in *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons(port);
  if (inet_pton(AF_INET, host, &sa->sin_addr) == 1)
    return HK_OK;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res)
    return hk_fail(HK_ERR_SYSTEM, "cannot resolve host '%s': %s", host,
                   gai_strerror(rc));
  sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return HK_OK;
}

hk_status hk_tcp_listen(const char *host, int *fd, uint16_t *port) {
  struct sockaddr_in sa;
  hk_status st = resolve(host, 0, &sa);
  if (st != HK_OK)
    return st;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "socket");
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, 128) < 0) {
    int e = errno;
    close(s);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "cannot listen on %s", host);
  }
  socklen_t len = sizeof sa;
  getsockname(s, (struct sockaddr *)&sa, &len);
  *port = ntohs(sa.sin_port);
  *fd = s;
  return HK_OK;
}

/* poll() on up to 3 fds plus the abort fd, with a timeout in seconds.
 * Bytes that have arrived are read before an abort is reported: a peer
 * that finished its part of a collective and then failed (or left) has
 * sent everything this rank needs, and this rank must not fail the step
 * it can complete (the abort then ends the next wait that has nothing
 * to read). */
static hk_status wait_fds(struct pollfd *p, int n, const hk_io *io,
                          double timeout_s, const char *what) {
  struct pollfd all[8];
  memcpy(all, p, (size_t)n * sizeof *p);
  int nall = n;
  if (io && io->abort_fd >= 0) {
    all[nall].fd = io->abort_fd;
    all[nall].events = POLLIN;
    nall++;
  }
  double end = hk_now() + timeout_s;
  hk_waiter w; /* poll without blocking first (common/waiter.h) */
  hk_waiter_begin(&w, HK_WAIT_PEER, 1);
  int spinning = 1;
  for (;;) {
    double left = end - hk_now();
    if (left <= 0)
      return hk_fail(HK_ERR_TIMEOUT, "timed out after %.1f s %s", timeout_s,
                     what);
    int ms = spinning ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    int rc = poll(all, (nfds_t)nall, ms);
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll %s", what);
    }
    if (rc == 0) {
      if (spinning)
        spinning = hk_waiter_spin(&w);
      continue;
    }
    hk_waiter_end(&w);
    int readable = 0;
    for (int i = 0; i < n; i++)
      readable |= (all[i].events & POLLIN) && all[i].revents;
    if (nall > n && all[n].revents && !readable)
      return hk_fail(HK_ERR_PEER_LOST,
                     "the launcher aborted the job (or died) %s", what);
    for (int i = 0; i < n; i++)
      p[i].revents = all[i].revents;
    return HK_OK;
  }
}

/* 1 if the failure just recorded (hk_tcp_recv_all's) was a reset. */
static int was_reset(void) {
  return strstr(hk_last_error(), strerror(ECONNRESET)) != NULL;
}

/* Client half of the handshake (common/auth.h). *reset: the server reset
 * the connection before its proof (a server flooded with connections that
 * never authenticate drops the oldest so, tcp_gate.h; a wrong secret is
 * closed, not reset). */
static hk_status auth_client(int fd, const hk_secret *secret, const hk_io *io,
                             const char *who, int *reset) {
  uint8_t ns[HK_NONCE_LEN], nc[HK_NONCE_LEN], msg[HK_AUTH_CLIENT_MSG_LEN],
      proof[HK_PROOF_LEN];
  hk_status st = hk_tcp_recv_all(fd, ns, sizeof ns, io, who);
  *reset = st == HK_ERR_PEER_LOST && was_reset();
  if (st == HK_OK)
    st = hk_random_bytes(nc, sizeof nc);
  if (st != HK_OK)
    return st;
  hk_auth_client_msg(secret, ns, nc, msg);
  st = hk_tcp_send_all(fd, msg, sizeof msg, io, who);
  if (st == HK_OK)
    st = hk_tcp_recv_all(fd, proof, sizeof proof, io, who);
  *reset = st == HK_ERR_PEER_LOST && was_reset();
  if (st == HK_ERR_PEER_LOST)
    return hk_fail(HK_ERR_AUTH,
                   "%s refused our proof of the job's secret "
                   "(is HK_SECRET the job's?)",
                   who);
  if (st != HK_OK)
    return st;
  if (!hk_auth_client_check(secret, ns, nc, proof))
    return hk_fail(HK_ERR_AUTH, "%s does not know the job's secret", who);
  return HK_OK;
}

hk_status hk_tcp_connect(const char *host, uint16_t port,
                         const hk_secret *secret, double deadline,
                         const hk_io *io, const char *who, int *fd) {
  struct sockaddr_in sa;
  hk_status st = resolve(host, port, &sa);
  if (st != HK_OK)
    return st;
  double backoff_s = 0.01; /* after a reset: grows, with jitter */
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "socket");
    int err = 0;
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
      err = errno;
      if (err == EINPROGRESS) {
        struct pollfd p = {.fd = s, .events = POLLOUT};
        double left = deadline - hk_now();
        st = wait_fds(&p, 1, io, left > 0 ? left : 0.001, "connecting");
        if (st != HK_OK) {
          close(s);
          return st == HK_ERR_TIMEOUT
                     ? hk_fail(HK_ERR_TIMEOUT,
                               "timed out connecting to %s at %s:%u", who, host,
                               port)
                     : st;
        }
        socklen_t len = sizeof err;
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      tune(s);
      hk_io hio = {io ? io->abort_fd : -1, deadline - hk_now()};
      if (hio.timeout_s < 1)
        hio.timeout_s = 1;
      int reset;
      st = auth_client(s, secret, &hio, who, &reset);
      if (st != HK_OK) {
        close(s);
        if (!reset || hk_now() >= deadline)
          return st;
        /* dropped to make room, or too slow under load (tcp_gate.h, the
         * rendezvous): again, after a pause that spreads a burst's
         * peers out (0.5 to 1.5 times a doubling step, at most 1 s) */
        uint32_t r;
        if (hk_random_bytes(&r, sizeof r) != HK_OK)
          r = (uint32_t)getpid();
        double pause = backoff_s * (0.5 + (double)r / 4294967296.0);
        backoff_s = backoff_s < 0.5 ? backoff_s * 2 : 1.0;
        struct pollfd none = {.fd = -1};
        st = wait_fds(&none, 1, io, pause, "connecting");
        if (st == HK_ERR_PEER_LOST)
          return st;
        continue;
      }
      *fd = s;
      return HK_OK;
    }
    close(s);
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH &&
        err != ENETUNREACH && err != ECONNRESET) /* reset: a full listener */
      return hk_fail_errno(HK_ERR_SYSTEM, err, "cannot connect to %s at %s:%u",
                           who, host, port);
    if (hk_now() >= deadline)
      return hk_fail_errno(HK_ERR_TIMEOUT, err,
                           "timed out connecting to %s at %s:%u", who, host,
                           port);
    /* Refused: the peer is not listening yet. Wait for the abort fd or a
     * short back-off, whichever comes first. */
    struct pollfd none = {.fd = -1};
    st = wait_fds(&none, 1, io, 0.01, "connecting");
    if (st == HK_ERR_PEER_LOST)
      return st;
  }
}

hk_status hk_tcp_accept(int listen_fd, const hk_secret *secret, double deadline,
                        const hk_io *io, int *fd, int *refused) {
  hk_tcp_gate *g;
  hk_status st = hk_tcp_gate_open(listen_fd, secret, &g);
  if (st != HK_OK)
    return st;
  st = hk_tcp_gate_accept(g, deadline, io, fd);
  if (refused)
    *refused += hk_tcp_gate_refused(g);
  hk_tcp_gate_close(g);
  return st;
}

hk_status hk_tcp_send_some(int fd, const void *p, size_t n, size_t *done,
                           const char *who) {
  *done = 0;
  for (;;) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) {
      *done = (size_t)w;
      return HK_OK;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return HK_OK;
    return hk_fail_errno(HK_ERR_PEER_LOST, errno, "lost connection to %s", who);
  }
}

hk_status hk_tcp_recv_some(int fd, void *p, size_t n, size_t *done,
                           const char *who) {
  *done = 0;
  for (;;) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      *done = (size_t)r;
      return HK_OK;
    }
    if (r == 0)
      return hk_fail(HK_ERR_PEER_LOST, "%s closed the connection", who);
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return HK_OK;
    return hk_fail_errno(HK_ERR_PEER_LOST, errno, "lost connection to %s", who);
  }
}

hk_status hk_tcp_wait(int send_fd, int want_send, int recv_fd, int want_recv,
                      const hk_io *io, const char *what) {
  struct pollfd p[2];
  int n = 0;
  if (want_send)
    p[n++] = (struct pollfd){.fd = send_fd, .events = POLLOUT};
  if (want_recv)
    p[n++] = (struct pollfd){.fd = recv_fd, .events = POLLIN};
  return wait_fds(p, n, io, io->timeout_s, what);
}

hk_status hk_tcp_wait_any(const int *fds, int n, const hk_io *io,
                          const char *what, int *ready) {
  struct pollfd stack[8], *p = stack;
  if (n > 7)
    return hk_fail(HK_ERR_INVALID_ARG, "hk_tcp_wait_any: %d fds", n);
  for (int i = 0; i < n; i++)
    p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
  hk_status st = wait_fds(p, n, io, io->timeout_s, what);
  if (st != HK_OK)
    return st;
  for (int i = 0; i < n; i++)
    if (p[i].revents) {
      *ready = i;
      return HK_OK;
    }
  *ready = -1;
  return HK_OK;
}

/* send_all and recv_all are the one-sided cases of hk_tcp_exchange. */
hk_status hk_tcp_send_all(int fd, const void *p, size_t n, const hk_io *io,
                          const char *who) {
  return hk_tcp_exchange(fd, p, n, -1, NULL, 0, io, who, who);
}

hk_status hk_tcp_recv_all(int fd, void *p, size_t n, const hk_io *io,
                          const char *who) {
  return hk_tcp_exchange(-1, NULL, 0, fd, p, n, io, who, who);
}

/* hk_tcp_exchange's two sockets, for hk_exchange_run. */
typedef struct fd_pair {
  int send_fd, recv_fd;
  const hk_io *io;
  const char *send_who, *recv_who;
} fd_pair;

static hk_status pair_send(void *ctx, const void *p, size_t n, size_t *done) {
  const fd_pair *x = ctx;
  return hk_tcp_send_some(x->send_fd, p, n, done, x->send_who);
}

static hk_status pair_recv(void *ctx, void *p, size_t n, size_t *done) {
  const fd_pair *x = ctx;
  return hk_tcp_recv_some(x->recv_fd, p, n, done, x->recv_who);
}

static hk_status pair_wait(void *ctx, int want_send, int want_recv) {
  const fd_pair *x = ctx;
  char what[160];
  if (want_send && want_recv)
    snprintf(what, sizeof what, "sending to %s and receiving from %s",
             x->send_who, x->recv_who);
  else
    snprintf(what, sizeof what, "%s %s",
             want_send ? "sending to" : "receiving from",
             want_send ? x->send_who : x->recv_who);
  return hk_tcp_wait(x->send_fd, want_send, x->recv_fd, want_recv, x->io, what);
}

static const hk_exchange_ops fd_pair_ops = {pair_send, pair_recv, pair_wait};

hk_status hk_tcp_exchange(int send_fd, const void *sp, size_t sn, int recv_fd,
                          void *rp, size_t rn, const hk_io *io,
                          const char *send_who, const char *recv_who) {
  fd_pair x = {send_fd, recv_fd, io, send_who, recv_who};
  return hk_exchange_run(&fd_pair_ops, &x, sp, sn, rp, rn);
}
