/*
 * link.c - hk_link (see link.h): the TCP kind (striped over k sockets),
 * the MPI kind's table (its calls are in link_mpi.c), and the waits that
 * mix kinds. The shm kind is in link_shm.c.
 */
#include "collectives/transport/link.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "collectives/transport/exchange.h"
#include "collectives/transport/link_mpi.h"
#include "collectives/transport/link_shm.h"
#include "collectives/transport/shm_wait.h"
#include "common/clock.h"
#include "common/status.h"

/* The fields that say which peer and which kind a link is. */
static void set_kind(hk_link *link, int peer, hk_link_kind kind,
                     const hk_link_ops *ops) {
  link->peer = peer;
  snprintf(link->name, sizeof link->name, "rank %d", peer);
  link->kind = kind;
  link->ops = ops;
}

/* Takes over a connected socket: non-blocking from now on. */
static int take_socket(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0 && !(fl & O_NONBLOCK))
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return fd;
}

/* ---- TCP ---- */

/* Moves up to n bytes of the stream in one direction (send: from sp;
 * else into rp), in stream order over the k sockets (link.h): the rest of
 * the current block on its socket, then the next socket, stopping at the
 * first socket that is full (sending) or has nothing yet (receiving), or
 * at an error once some bytes moved (handed over; the next call meets the
 * error again). With k = 1, the plain call on the one connection. */
static hk_status tcp_move_some(hk_link *link, int send, const void *sp,
                               void *rp, size_t n, size_t *done) {
  if (link->nfds == 1) /* the default: exactly today's one connection */
    return send ? hk_tcp_send_some(link->fds[0], sp, n, done, link->name)
                : hk_tcp_recv_some(link->fds[0], rp, n, done, link->name);
  int *sock = send ? &link->send_sock : &link->recv_sock;
  size_t *left = send ? &link->send_left : &link->recv_left;
  size_t total = 0;
  *done = 0;
  while (n > 0) {
    size_t want = n < *left ? n : *left, got;
    int fd = link->fds[*sock];
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
      *sock = (*sock + 1) % link->nfds;
      *left = link->block;
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

static int tcp_pollfd(const hk_link *link, int send_side, short *events) {
  *events = send_side ? POLLOUT : POLLIN;
  return send_side ? link->fds[link->send_sock] : link->fds[link->recv_sock];
}

static void tcp_close(hk_link *link) {
  for (int i = 0; i < link->nfds; i++)
    hk_tcp_close(&link->fds[i]);
}

uint64_t hk_link_all_sent(const hk_link *link) { return link->sent_total; }

static const hk_link_ops tcp_ops = {.name = "tcp",
                                    .wait_class = HK_LINK_WAIT_POLL,
                                    .needs_drain = 0,
                                    .send_some = tcp_send_some,
                                    .recv_some = tcp_recv_some,
                                    .test = tcp_test,
                                    .pollfd = tcp_pollfd,
                                    .released = hk_link_all_sent,
                                    .arm = NULL,
                                    .close = tcp_close};

/* ---- MPI (the calls are link_mpi.c's) ---- */

static hk_status mpi_send_some(hk_link *link, const void *p, size_t n,
                               size_t *done) {
  return hk_link_mpi_send_some(link->mpi, p, n, done, link->name);
}

static hk_status mpi_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  return hk_link_mpi_recv_some(link->mpi, p, n, done, link->name);
}

static hk_status mpi_test(hk_link *link, int want_send, int want_recv,
                          int drain, int *ready) {
  int cs, cr, dr;
  hk_status st =
      hk_link_mpi_progress(link->mpi, want_recv, &cs, &cr, &dr, link->name);
  *ready = (want_send && (drain ? dr : cs)) || (want_recv && cr);
  return st;
}

static int mpi_pollfd(const hk_link *link, int send_side, short *events) {
  (void)link;
  (void)send_side;
  *events = 0;
  return -1;
}

static uint64_t mpi_released(const hk_link *link) {
  return hk_link_mpi_released(link->mpi);
}

static void mpi_close(hk_link *link) { hk_link_mpi_close(link->mpi); }

static const hk_link_ops mpi_ops = {.name = "mpi",
                                    .wait_class = HK_LINK_WAIT_SPIN,
                                    .needs_drain = 1,
                                    .send_some = mpi_send_some,
                                    .recv_some = mpi_recv_some,
                                    .test = mpi_test,
                                    .pollfd = mpi_pollfd,
                                    .released = mpi_released,
                                    .arm = NULL,
                                    .close = mpi_close};

/* ---- set-up ---- */

static void clear(hk_link *link) {
  memset(link, 0, sizeof *link);
  for (int i = 0; i < HK_LINK_MAX_SOCKETS; i++)
    link->fds[i] = -1;
}

hk_status hk_link_init_tcp(hk_link *link, int peer, const int *fds, int k,
                           size_t block) {
  clear(link);
  if (k < 1 || k > HK_LINK_MAX_SOCKETS || (k > 1 && block == 0))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "a TCP link over %d sockets with %zu-byte blocks (1 to %d "
                   "sockets, blocks of at least 1 byte)",
                   k, block, HK_LINK_MAX_SOCKETS);
  set_kind(link, peer, HK_LINK_TCP, &tcp_ops);
  link->nfds = k;
  for (int i = 0; i < k; i++)
    link->fds[i] = take_socket(fds[i]);
  link->block = k > 1 ? block : SIZE_MAX;
  link->send_left = link->recv_left = link->block;
  return HK_OK;
}

hk_status hk_link_init_mpi(hk_link *link, int peer, const void *comm,
                           size_t chunk) {
  clear(link);
  hk_status st = hk_link_mpi_open(&link->mpi, peer, comm, chunk);
  if (st != HK_OK)
    return st;
  set_kind(link, peer, HK_LINK_MPI, &mpi_ops);
  return HK_OK;
}

void hk_link_init_shm_fields(hk_link *link, int peer, int fd) {
  clear(link);
  set_kind(link, peer, HK_LINK_SHM, &hk_link_shm_ops);
  link->nfds = 1;
  link->fds[0] = take_socket(fd);
  link->block = SIZE_MAX;
}

const char *hk_link_kind_name(const hk_link *link) {
  return link && link->ops ? link->ops->name : "none";
}

hk_status hk_link_send_some(hk_link *link, const void *p, size_t n,
                            size_t *done) {
  hk_status st = link->ops->send_some(link, p, n, done);
  link->sent_total += *done;
  return st;
}

hk_status hk_link_released(hk_link *link, uint64_t *bytes) {
  hk_status st = HK_OK;
  if (link->ops->needs_drain) {
    int ready;
    st = link->ops->test(link, 0, 0, 0, &ready);
  }
  *bytes = link->ops->released(link);
  return st;
}

hk_status hk_link_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  return link->ops->recv_some(link, p, n, done);
}

/* ---- waits ---- */

/* The two sides of a wait. */
typedef struct sides {
  hk_link *send, *recv;
  int want_send, want_recv, drain;
  uint64_t release; /* also ready once send's released() reaches it */
} sides;

/* The state of an MPI link in words, " (MPI: ...)", or "" for others. */
static void mpi_state(const hk_link *link, char *buf, size_t cap) {
  buf[0] = '\0';
  if (link->kind != HK_LINK_MPI)
    return;
  char st[224];
  hk_link_mpi_describe(link->mpi, st, sizeof st);
  snprintf(buf, cap, " (MPI: %s)", st);
}

/* Replaces a timeout's message by one that names whom it waited for. */
static hk_status timed_out(const hk_io *io, const char *what, const sides *w) {
  char s[320] = "", r[320] = "", ms[240], mr[240];
  if (w->want_send || w->release) {
    mpi_state(w->send, ms, sizeof ms);
    snprintf(s, sizeof s, "%s %s%s",
             w->drain || !w->want_send ? "completing sends to" : "sending to",
             w->send->name, ms);
  }
  if (w->want_recv) {
    mpi_state(w->recv, mr, sizeof mr);
    snprintf(r, sizeof r, "receiving from %s%s", w->recv->name, mr);
  }
  return hk_fail(HK_ERR_TIMEOUT,
                 "timed out after %.1f s %s: no progress %s%s%s", io->timeout_s,
                 what, s, *s && *r ? " or " : "", r);
}

/* Whether a side takes part in a wait: when wanted, and always when it is
 * an MPI link (its posted sends may need this rank's progress; link.h). */
static int takes_part(const hk_link *l, int wanted) {
  return l && (wanted || l->kind == HK_LINK_MPI);
}

/* Tests both sides once, each that takes part. When the two sides are
 * one link, one call. */
static hk_status test_sides(const sides *w, int *ready) {
  int r = 0, r2 = 0;
  hk_status st = HK_OK;
  *ready = 0;
  if (w->send == w->recv) {
    if (takes_part(w->send, w->want_send || w->want_recv))
      st =
          w->send->ops->test(w->send, w->want_send, w->want_recv, w->drain, &r);
    *ready = r || (w->release && w->send->ops->released(w->send) >= w->release);
    return st;
  }
  if (takes_part(w->send, w->want_send))
    st = w->send->ops->test(w->send, w->want_send, 0, w->drain, &r);
  if (st == HK_OK && takes_part(w->recv, w->want_recv))
    st = w->recv->ops->test(w->recv, 0, w->want_recv, 0, &r2);
  *ready =
      r || r2 || (w->release && w->send->ops->released(w->send) >= w->release);
  return st;
}

static void arm_sides(const sides *w, uint32_t mode) {
  if (w->send == w->recv) {
    if (w->send->ops->arm)
      w->send->ops->arm(w->send, w->want_send, w->want_recv, mode);
    return;
  }
  if (w->want_send && w->send->ops->arm)
    w->send->ops->arm(w->send, 1, 0, mode);
  if (w->want_recv && w->recv->ops->arm)
    w->recv->ops->arm(w->recv, 0, 1, mode);
}

/* The peers of the shm sides (their liveness sockets). */
static int shm_peers(const sides *w, hk_shm_peer *p) {
  int n = 0;
  if (w->want_send && w->send->kind == HK_LINK_SHM)
    p[n++] = (hk_shm_peer){w->send->fds[0], w->send->name};
  if (w->want_recv && w->recv->kind == HK_LINK_SHM &&
      !(n && w->recv == w->send))
    p[n++] = (hk_shm_peer){w->recv->fds[0], w->recv->name};
  return n;
}

static int wait_class(const sides *w) {
  int c = HK_LINK_WAIT_FUTEX;
  if (takes_part(w->send, w->want_send) && (int)w->send->ops->wait_class > c)
    c = (int)w->send->ops->wait_class;
  if (takes_part(w->recv, w->want_recv) && (int)w->recv->ops->wait_class > c)
    c = (int)w->recv->ops->wait_class;
  return c;
}

/* Adds the poll(2) entries of the wanted sides: TCP sides for their
 * direction, shm sides their pair's socket (doorbell, hang-up). */
static int add_pollfds(const sides *w, struct pollfd *p, int *is_shm) {
  int n = 0;
  for (int s = 0; s < 2; s++) {
    hk_link *l = s == 0 ? w->send : w->recv;
    int want = s == 0 ? w->want_send : w->want_recv;
    if (!want ||
        (s == 1 && l == w->send && w->want_send && l->kind == HK_LINK_SHM))
      continue;
    short ev;
    int fd = l->kind == HK_LINK_SHM ? l->fds[0] : l->ops->pollfd(l, !s, &ev);
    if (l->kind == HK_LINK_SHM)
      ev = POLLIN | POLLRDHUP;
    if (fd < 0)
      continue;
    is_shm[n] = l->kind == HK_LINK_SHM;
    p[n++] = (struct pollfd){.fd = fd, .events = ev};
  }
  return n;
}

/*
 * The wait when an MPI link takes part: MPI only progresses inside MPI
 * calls, so test the MPI side (and shm sides), poll(2) the TCP side, shm
 * pairs' sockets and the abort fd without blocking, and yield the CPU
 * between rounds. An MPI link is tested even when this wait is not for
 * it: its posted sends may need this rank's progress to leave (the rest
 * of a large message once the peer's socket drains; the reply to the
 * peer's rendezvous), and the peer's progress may wait on that, while
 * this rank waits on the TCP side (a ring that crosses hosts: TCP on one
 * side, MPI on the other). With drain, the send side is ready once it
 * has no send pending.
 */
static hk_status spin(const sides *w, const hk_io *io, const char *what) {
  const double start = hk_now();
  for (;;) {
    int ready;
    hk_status st = test_sides(w, &ready);
    if (st != HK_OK || ready)
      return st;
    struct pollfd p[4];
    int is_shm[4], n = add_pollfds(w, p, is_shm), abort_at = -1;
    if (io->abort_fd >= 0) {
      abort_at = n;
      p[n++] = (struct pollfd){.fd = io->abort_fd, .events = POLLIN};
    }
    if (n > 0) {
      int rc = poll(p, (nfds_t)n, 0);
      if (rc < 0 && errno != EINTR)
        return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll %s", what);
      int readable = 0; /* arrived bytes before an abort (tcp.c's rule) */
      for (int i = 0; i < n; i++)
        readable |= i != abort_at && (p[i].events & POLLIN) && p[i].revents;
      if (rc > 0 && abort_at >= 0 && p[abort_at].revents && !readable)
        return hk_fail(HK_ERR_PEER_LOST,
                       "the launcher aborted the job (or died) %s", what);
      for (int i = 0; rc > 0 && i < n; i++)
        if (i != abort_at && p[i].revents && !is_shm[i])
          return HK_OK; /* a TCP side is ready (or failed: its call says) */
      if (rc > 0) {     /* an shm pair's socket: a hang-up, or stray bytes */
        hk_shm_peer pe[2];
        st = hk_shm_check_peers(pe, shm_peers(w, pe), -1, what);
        if (st != HK_OK)
          return st;
      }
    }
    if (hk_now() - start >= io->timeout_s)
      return timed_out(io, what, w);
    sched_yield();
  }
}

/* TCP and shm sides: poll(2), the shm writers ring the pair's socket. */
static hk_status poll_wait(const sides *w, const hk_io *io, const char *what) {
  const double start = hk_now();
  for (;;) {
    int ready;
    arm_sides(w, HK_SHM_SLEEP_SOCKET);
    hk_status st = test_sides(w, &ready);
    if (st != HK_OK || ready) {
      arm_sides(w, HK_SHM_AWAKE);
      return st;
    }
    struct pollfd p[4];
    int is_shm[4], n = add_pollfds(w, p, is_shm), abort_at = -1;
    if (io->abort_fd >= 0) {
      abort_at = n;
      p[n++] = (struct pollfd){.fd = io->abort_fd, .events = POLLIN};
    }
    double left = io->timeout_s - (hk_now() - start);
    int ms = left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    int rc = poll(p, (nfds_t)n, ms);
    arm_sides(w, HK_SHM_AWAKE);
    if (rc < 0 && errno != EINTR)
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll %s", what);
    if (rc > 0 && abort_at >= 0 && p[abort_at].revents)
      return hk_fail(HK_ERR_PEER_LOST,
                     "the launcher aborted the job (or died) %s", what);
    int shm_bell = 0;
    for (int i = 0; rc > 0 && i < n; i++) {
      if (i == abort_at || !p[i].revents)
        continue;
      if (!is_shm[i])
        return HK_OK; /* a TCP side is ready (or failed: its call says) */
      shm_bell = 1;
    }
    if (shm_bell) { /* discard the doorbell bytes; a hang-up is an error */
      hk_shm_peer pe[2];
      st = hk_shm_check_peers(pe, shm_peers(w, pe), -1, what);
      if (st != HK_OK)
        return st;
    }
    if (hk_now() - start >= io->timeout_s) /* even with stray doorbells */
      return timed_out(io, what, w);
  }
}

/* shm only: the futex doorbell (shm_wait.h). */
static int cond_ready(void *arg) {
  int ready;
  return test_sides(arg, &ready) == HK_OK && ready;
}

static void cond_arm(void *arg, int on) {
  arm_sides(arg, on ? HK_SHM_SLEEP_FUTEX : HK_SHM_AWAKE);
}

static int cond_waiting_for(void *arg, hk_shm_peer *peers, int max) {
  (void)max; /* at most 2 */
  return shm_peers(arg, peers);
}

static hk_status futex_wait(sides *w, const hk_io *io, const char *what) {
  hk_link *any = w->want_send ? w->send : w->recv;
  hk_shm_cond c = {cond_ready,
                   cond_arm,
                   cond_waiting_for,
                   w,
                   hk_link_shm_bell(any),
                   hk_link_shm_spin(any)};
  hk_status st = hk_shm_wait(&c, io, what);
  if (st == HK_ERR_TIMEOUT)
    return timed_out(io, what, w);
  return st;
}

static hk_status wait_sides(sides *w, const hk_io *io, const char *what) {
  if (!(w->want_send || w->want_recv) && wait_class(w) != HK_LINK_WAIT_SPIN)
    return hk_tcp_wait(-1, 0, -1, 0, io, what); /* the abort fd, or time */
  switch (wait_class(w)) {
  case HK_LINK_WAIT_SPIN:
    return spin(w, io, what);
  case HK_LINK_WAIT_POLL:
    if (!(w->want_send && w->send->kind == HK_LINK_SHM) &&
        !(w->want_recv && w->recv->kind == HK_LINK_SHM)) { /* TCP only */
      hk_status st = hk_tcp_wait(
          w->want_send ? w->send->fds[w->send->send_sock] : -1, w->want_send,
          w->want_recv ? w->recv->fds[w->recv->recv_sock] : -1, w->want_recv,
          io, what);
      return st == HK_ERR_TIMEOUT ? timed_out(io, what, w) : st;
    }
    return poll_wait(w, io, what);
  default:
    return futex_wait(w, io, what);
  }
}

hk_status hk_link_wait(hk_link *send, int want_send, hk_link *recv,
                       int want_recv, const hk_io *io, const char *what) {
  sides w = {send, recv, want_send, want_recv, 0, 0};
  return wait_sides(&w, io, what);
}

hk_status hk_link_wait_released(hk_link *link, int want_send, int want_recv,
                                uint64_t released, const hk_io *io,
                                const char *what) {
  sides w = {link, link, want_send, want_recv, 0, released};
  if (released && link->ops->released(link) >= released)
    return HK_OK;
  if (released && link->ops->needs_drain) /* only MPI holds sent bytes */
    return spin(&w, io, what);
  w.release = 0;
  return wait_sides(&w, io, what);
}

hk_status hk_link_drain(hk_link *link, const hk_io *io, const char *what) {
  if (!link || !link->ops || !link->ops->needs_drain)
    return HK_OK; /* TCP: the kernel has the bytes; shm: the ring has */
  sides w = {link, link, 1, 0, 1, 0};
  return spin(&w, io, what);
}

/* hk_link_exchange's two links, for hk_exchange_run. */
typedef struct link_pair {
  hk_link *send, *recv;
  const hk_io *io;
  const char *what;
} link_pair;

static hk_status pair_send(void *ctx, const void *p, size_t n, size_t *done) {
  return hk_link_send_some(((link_pair *)ctx)->send, p, n, done);
}

static hk_status pair_recv(void *ctx, void *p, size_t n, size_t *done) {
  return hk_link_recv_some(((link_pair *)ctx)->recv, p, n, done);
}

static hk_status pair_wait(void *ctx, int want_send, int want_recv) {
  const link_pair *x = ctx;
  return hk_link_wait(x->send, want_send, x->recv, want_recv, x->io, x->what);
}

static const hk_exchange_ops link_pair_ops = {pair_send, pair_recv, pair_wait};

hk_status hk_link_exchange(hk_link *send, const void *sp, size_t sn,
                           hk_link *recv, void *rp, size_t rn, const hk_io *io,
                           const char *what) {
  link_pair x = {send, recv, io, what};
  hk_status st = hk_exchange_run(&link_pair_ops, &x, sp, sn, rp, rn);
  return st != HK_OK ? st : hk_link_drain(send, io, what);
}

void hk_link_close(hk_link *link) {
  if (link->ops)
    link->ops->close(link);
  link->mpi = NULL;
  link->shm = NULL;
  link->ops = NULL;
  link->nfds = 0;
  link->kind = HK_LINK_NONE;
}
