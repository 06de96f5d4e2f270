#include "collectives/transport/tcp_gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ratelog.h"
#include "common/status.h"

/* How long a connection has to prove the secret (a peer that knows it
 * answers in one round trip). */
#define GATE_AUTH_S 2.0
/* After accept(2) failed for want of descriptors with nothing pending to
 * drop, the listening socket rests this long (else poll spins on it). */
#define GATE_REST_S 0.05

/* Why a connection was refused: one rate-limited log line each. */
enum cause { BAD_SECRET, CLOSED, TIMED_OUT, DROPPED, ACCEPT_FAILED, NCAUSES };

/* A handshake in progress: the nonce is sent, the proof being read. */
typedef struct pending {
  int fd;
  double until; /* hk_now() by which its proof must be in */
  size_t got;   /* bytes of msg read */
  uint8_t ns[HK_NONCE_LEN];
  uint8_t msg[HK_AUTH_CLIENT_MSG_LEN];
  char addr[INET_ADDRSTRLEN + 8];
} pending;

struct hk_tcp_gate {
  int listen_fd;
  hk_secret secret;
  pending p[HK_TCP_GATE_PENDING]; /* oldest first */
  int n;
  int ready[HK_TCP_GATE_PENDING]; /* authenticated, not handed out yet */
  int nready;
  double rest_until; /* accept nothing before (GATE_REST_S) */
  int refused;
  hk_ratelog log[NCAUSES];
};

hk_status hk_tcp_gate_open(int listen_fd, const hk_secret *secret,
                           hk_tcp_gate **out) {
  hk_tcp_gate *g = calloc(1, sizeof *g);
  if (!g)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the connection gate");
  g->listen_fd = listen_fd;
  g->secret = *secret;
  *out = g;
  return HK_OK;
}

int hk_tcp_gate_refused(const hk_tcp_gate *g) { return g->refused; }

/* Closes pending handshake i (refused for cause c, `why` logged) and
 * removes it, keeping the others in order. */
static void refuse(hk_tcp_gate *g, int i, enum cause c, const char *why) {
  hk_ratelog_say(&g->log[c], HK_LOG_WARNING, "refused a connection from %s: %s",
                 g->p[i].addr, why);
  close(g->p[i].fd);
  memmove(&g->p[i], &g->p[i + 1], (size_t)(g->n - i - 1) * sizeof g->p[0]);
  g->n--;
  g->refused++;
}

/* Closing fd will send a reset: the peer, if it is one of the job's,
 * connects again (hk_tcp_connect); a plain close reads as a refusal. */
static void reset_on_close(int fd) {
  struct linger reset = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

/* Makes room: drops pending handshake i (the oldest, 0) with a reset,
 * which tells a peer caught in a burst to connect again (hk_tcp_connect). */
static void drop(hk_tcp_gate *g, int i) {
  reset_on_close(g->p[i].fd);
  char why[96];
  snprintf(why, sizeof why, "dropped unauthenticated (%d pending, the most)",
           g->n);
  refuse(g, i, DROPPED, why);
}

/* Accepts what the listening socket has: each new connection gets its
 * nonce and joins the pending ones. HK_OK, or the error that stops
 * accepting for good. */
static hk_status accept_new(hk_tcp_gate *g) {
  for (;;) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int s = accept4(g->listen_fd, (struct sockaddr *)&sa, &len,
                    SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) {
      int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED)
        return HK_OK;
      if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        hk_ratelog_say(
            &g->log[ACCEPT_FAILED], HK_LOG_WARNING,
            "cannot accept a connection: %s (%s); %d unauthenticated "
            "pending%s",
            strerror(e),
            e == EMFILE    ? "EMFILE"
            : e == ENFILE  ? "ENFILE"
            : e == ENOBUFS ? "ENOBUFS"
                           : "ENOMEM",
            g->n, g->n ? ", dropping the oldest" : "");
        if (g->n)
          drop(g, 0);
        else
          g->rest_until = hk_now() + GATE_REST_S;
        return HK_OK;
      }
      return hk_fail_errno(HK_ERR_SYSTEM, e, "accepting peers stopped");
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pending *p = &g->p[g->n];
    memset(p, 0, sizeof *p);
    p->fd = s;
    p->until = hk_now() + GATE_AUTH_S;
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    snprintf(p->addr, sizeof p->addr, "%s:%u", ip, ntohs(sa.sin_port));
    if (++g->n == HK_TCP_GATE_PENDING) { /* full: the oldest goes */
      drop(g, 0);
      p = &g->p[g->n - 1];
    }
    /* 32 bytes into a fresh socket's empty buffer: all or an error */
    if (hk_random_bytes(p->ns, sizeof p->ns) != HK_OK ||
        send(s, p->ns, sizeof p->ns, MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof p->ns)
      refuse(g, g->n - 1, CLOSED, "closed before authenticating");
  }
}

/* Reads what pending handshake i has; on a whole proof checks it. 1 if i
 * left the pending list (refused or ready). */
static int progress(hk_tcp_gate *g, int i) {
  pending *p = &g->p[i];
  ssize_t r =
      recv(p->fd, p->msg + p->got, sizeof p->msg - p->got, MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  if (r <= 0) {
    refuse(g, i, CLOSED, "closed before authenticating");
    return 1;
  }
  p->got += (size_t)r;
  if (p->got < sizeof p->msg)
    return 0;
  uint8_t proof[HK_PROOF_LEN];
  if (!hk_auth_server_check(&g->secret, p->ns, p->msg, proof)) {
    refuse(g, i, BAD_SECRET, "bad secret");
    return 1;
  }
  if (send(p->fd, proof, sizeof proof, MSG_NOSIGNAL | MSG_DONTWAIT) !=
      (ssize_t)sizeof proof) {
    refuse(g, i, CLOSED, "closed before authenticating");
    return 1;
  }
  g->ready[g->nready++] = p->fd;
  memmove(&g->p[i], &g->p[i + 1], (size_t)(g->n - i - 1) * sizeof g->p[0]);
  g->n--;
  return 1;
}

hk_status hk_tcp_gate_accept(hk_tcp_gate *g, double deadline, const hk_io *io,
                             int *fd) {
  struct pollfd pf[HK_TCP_GATE_PENDING + 2];
  for (;;) {
    if (g->nready) {
      *fd = g->ready[0];
      memmove(g->ready, g->ready + 1, (size_t)--g->nready * sizeof g->ready[0]);
      return HK_OK;
    }
    double now = hk_now();
    if (now >= deadline)
      return g->refused
                 ? hk_fail(HK_ERR_TIMEOUT,
                           "timed out waiting for peers to connect (%d "
                           "connections that did not prove the job's secret "
                           "were refused)",
                           g->refused)
                 : hk_fail(HK_ERR_TIMEOUT,
                           "timed out waiting for peers to connect");
    for (int i = 0; i < g->n;)    /* handshakes past their time */
      if (g->p[i].until <= now) { /* (a peer slowed by load may retry) */
        reset_on_close(g->p[i].fd);
        refuse(g, i, TIMED_OUT, "timed out authenticating");
      } else
        i++;
    double until = deadline;
    int n = 0, listening = now >= g->rest_until;
    if (listening)
      pf[n++] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
    else
      until = g->rest_until < until ? g->rest_until : until;
    const int first = n;
    for (int i = 0; i < g->n; i++) {
      pf[n++] = (struct pollfd){.fd = g->p[i].fd, .events = POLLIN};
      until = g->p[i].until < until ? g->p[i].until : until;
    }
    const int abort_at = io && io->abort_fd >= 0 ? n : -1;
    if (abort_at >= 0)
      pf[n++] = (struct pollfd){.fd = io->abort_fd, .events = POLLIN};
    double left = until - now;
    int rc =
        poll(pf, (nfds_t)n, left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1);
    if (rc < 0 && errno != EINTR)
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll waiting for peers");
    if (rc <= 0)
      continue;
    if (abort_at >= 0 && pf[abort_at].revents)
      return hk_fail(HK_ERR_PEER_LOST, "the launcher aborted the job (or "
                                       "died) waiting for peers to connect");
    /* pending ones first (their indices move as they leave), newest last */
    for (int k = n - (abort_at >= 0) - 1, i = g->n - 1; k >= first; k--, i--)
      if (pf[k].revents)
        progress(g, i);
    if (listening && pf[0].revents) {
      hk_status st = accept_new(g);
      if (st != HK_OK)
        return st;
    }
  }
}

void hk_tcp_gate_close(hk_tcp_gate *g) {
  if (!g)
    return;
  for (int i = 0; i < g->n; i++)
    close(g->p[i].fd);
  for (int i = 0; i < g->nready; i++)
    close(g->ready[i]);
  static const char *const what[NCAUSES] = {
      "refused connections (bad secret)",
      "refused connections (closed before authenticating)",
      "refused connections (timed out authenticating)",
      "refused connections (dropped unauthenticated)", "failed accepts"};
  for (int c = 0; c < NCAUSES; c++)
    hk_ratelog_flush(&g->log[c], HK_LOG_WARNING, what[c]);
  free(g);
}
