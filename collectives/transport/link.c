/*
 * link.c - hk_link (see link.h), whatever the kind: the calls through the
 * kind's table (link_impl.h), the waits that mix kinds, the exchange and
 * drain loops. The kinds are link_tcp.c, link_shm.c and link_mpi.c.
 */
#include "collectives/transport/link.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "collectives/transport/exchange.h"
#include "collectives/transport/link_impl.h"
#include "collectives/transport/shm_wait.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/waiter.h"

/* ---- what the kinds share (link_impl.h) ---- */

void hk_link_set(hk_link *link, int peer, const hk_link_ops *ops, void *state) {
  memset(link, 0, sizeof *link);
  if (!ops)
    return;
  link->peer = peer;
  snprintf(link->name, sizeof link->name, "rank %d", peer);
  link->ops = ops;
  link->state = state;
}

int hk_link_own_socket(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0 && !(fl & O_NONBLOCK))
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return fd;
}

uint64_t hk_link_all_sent(const hk_link *link) { return link->sent_total; }

/* ---- calls ---- */

const char *hk_link_kind_name(const hk_link *link) {
  return link && link->ops ? link->ops->name : "none";
}

int hk_link_socket(const hk_link *link, int i) {
  return link->ops && link->ops->socket ? link->ops->socket(link, i) : -1;
}

hk_status hk_link_set_streams(hk_link *link, int k) {
  return link->ops && link->ops->set_streams ? link->ops->set_streams(link, k)
                                             : HK_OK;
}

int hk_link_streams(const hk_link *link, int *open) {
  *open = 0;
  return link->ops && link->ops->streams ? link->ops->streams(link, open) : 0;
}

int hk_link_take_socket(hk_link *link) {
  int fd =
      link->ops && link->ops->take_socket ? link->ops->take_socket(link) : -1;
  hk_link_close(link);
  return fd;
}

const char *hk_link_kinds(hk_link *const *links, int n, char *buf, size_t cap) {
  const hk_link_ops *seen[8];
  int m = 0;
  for (int r = 0; r < n; r++) {
    const hk_link_ops *o = links[r] ? links[r]->ops : NULL;
    int i = 0;
    while (o && i < m && seen[i] != o)
      i++;
    if (!o || i < m || m == 8)
      continue;
    while (i > 0 && seen[i - 1]->wait_class > o->wait_class) {
      seen[i] = seen[i - 1]; /* kept in order of wait class */
      i--;
    }
    seen[i] = o;
    m++;
  }
  size_t at = 0;
  snprintf(buf, cap, "none");
  for (int i = 0; i < m && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? "+" : "",
                           seen[i]->name);
  return buf;
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

/* What the kind says of the link's state (" (MPI: ...)"), or "". */
static void describe(const hk_link *link, char *buf, size_t cap) {
  buf[0] = '\0';
  if (link->ops && link->ops->describe)
    link->ops->describe(link, buf, cap);
}

/* Replaces a timeout's message by one that names whom it waited for. */
static hk_status timed_out(const hk_io *io, const char *what, const sides *w) {
  char s[320] = "", r[320] = "", ms[240], mr[240];
  if (w->want_send || w->release) {
    describe(w->send, ms, sizeof ms);
    snprintf(s, sizeof s, "%s %s%s",
             w->drain || !w->want_send ? "completing sends to" : "sending to",
             w->send->name, ms);
  }
  if (w->want_recv) {
    describe(w->recv, mr, sizeof mr);
    snprintf(r, sizeof r, "receiving from %s%s", w->recv->name, mr);
  }
  return hk_fail(HK_ERR_TIMEOUT,
                 "timed out after %.1f s %s: no progress %s%s%s", io->timeout_s,
                 what, s, *s && *r ? " or " : "", r);
}

/* Whether a side takes part in a wait: when wanted, and always when its
 * kind moves bytes only inside its calls (HK_LINK_WAIT_SPIN: an MPI link's
 * posted sends may need this rank's progress; link.h). */
static int takes_part(const hk_link *l, int wanted) {
  return l && (wanted || (l->ops && l->ops->wait_class == HK_LINK_WAIT_SPIN));
}

/* Whether the link's writer wakes a sleeping reader itself (shm): its
 * pollfd is then a doorbell, not readiness (link_impl.h). */
static int rings(const hk_link *l) { return l->ops->arm != NULL; }

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

/* The peers of the wanted sides that ring (shm): their doorbell sockets,
 * where a hang-up shows. */
static int bell_peers(const sides *w, hk_shm_peer *p) {
  int n = 0;
  short ev;
  if (w->want_send && rings(w->send))
    p[n++] =
        (hk_shm_peer){w->send->ops->pollfd(w->send, 1, &ev), w->send->name};
  if (w->want_recv && rings(w->recv) && !(n && w->recv == w->send))
    p[n++] =
        (hk_shm_peer){w->recv->ops->pollfd(w->recv, 0, &ev), w->recv->name};
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

/* Adds the poll(2) entries of the wanted sides (their kinds' pollfd:
 * TCP sides for their direction, shm sides their pair's socket, a
 * doorbell); bell[i] says which entries are doorbells. */
static int add_pollfds(const sides *w, struct pollfd *p, int *bell) {
  int n = 0;
  for (int s = 0; s < 2; s++) {
    hk_link *l = s == 0 ? w->send : w->recv;
    if (!(s == 0 ? w->want_send : w->want_recv))
      continue;
    short ev;
    int fd = l->ops->pollfd(l, !s, &ev);
    if (fd < 0 || (n > 0 && p[n - 1].fd == fd && p[n - 1].events == ev))
      continue; /* none (MPI), or one link's doorbell for both sides */
    bell[n] = rings(l);
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
    int bell[4], n = add_pollfds(w, p, bell), abort_at = -1;
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
        if (i != abort_at && p[i].revents && !bell[i])
          return HK_OK; /* a TCP side is ready (or failed: its call says) */
      if (rc > 0) {     /* a doorbell socket: a hang-up, or stray bytes */
        hk_shm_peer pe[2];
        st = hk_shm_check_peers(pe, bell_peers(w, pe), -1, what);
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
  hk_waiter wt; /* poll without blocking first (common/waiter.h) */
  hk_waiter_begin(&wt, HK_WAIT_PEER, 1);
  int spinning = 1;
  for (;;) {
    int ready;
    if (!spinning) /* about to sleep: the shm writers ring the socket */
      arm_sides(w, HK_SHM_SLEEP_SOCKET);
    hk_status st = test_sides(w, &ready);
    if (st != HK_OK || ready) {
      arm_sides(w, HK_SHM_AWAKE);
      hk_waiter_end(&wt);
      return st;
    }
    struct pollfd p[4];
    int bell[4], n = add_pollfds(w, p, bell), abort_at = -1;
    if (io->abort_fd >= 0) {
      abort_at = n;
      p[n++] = (struct pollfd){.fd = io->abort_fd, .events = POLLIN};
    }
    double left = io->timeout_s - (hk_now() - start);
    int ms = spinning || left <= 0 ? 0
             : left > 1e6          ? 1000000000
                                   : (int)(left * 1000) + 1;
    int rc = poll(p, (nfds_t)n, ms);
    if (!spinning)
      arm_sides(w, HK_SHM_AWAKE);
    if (rc == 0 && spinning)
      spinning = hk_waiter_spin(&wt);
    if (rc < 0 && errno != EINTR)
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll %s", what);
    if (rc > 0 && abort_at >= 0 && p[abort_at].revents)
      return hk_fail(HK_ERR_PEER_LOST,
                     "the launcher aborted the job (or died) %s", what);
    int shm_bell = 0;
    for (int i = 0; rc > 0 && i < n; i++) {
      if (i == abort_at || !p[i].revents)
        continue;
      if (!bell[i])
        return HK_OK; /* a TCP side is ready (or failed: its call says) */
      shm_bell = 1;
    }
    if (shm_bell) { /* discard the doorbell bytes; a hang-up is an error */
      hk_shm_peer pe[2];
      st = hk_shm_check_peers(pe, bell_peers(w, pe), -1, what);
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
  return bell_peers(arg, peers);
}

static hk_status futex_wait(sides *w, const hk_io *io, const char *what) {
  hk_link *any = w->want_send ? w->send : w->recv;
  hk_shm_doorbell *bell = any->ops->bell(any);
  hk_shm_cond c = {cond_ready, cond_arm, cond_waiting_for, w, bell};
  hk_status st = hk_shm_wait(&c, io, what);
  if (st == HK_ERR_TIMEOUT)
    return timed_out(io, what, w);
  return st;
}

static hk_status wait_sides(sides *w, const hk_io *io, const char *what) {
  const int c = wait_class(w);
  if (!(w->want_send || w->want_recv) && c != HK_LINK_WAIT_SPIN)
    return hk_tcp_wait(-1, 0, -1, 0, io, what); /* the abort fd, or time */
  switch (c) {
  case HK_LINK_WAIT_SPIN:
    return spin(w, io, what);
  case HK_LINK_WAIT_POLL:
    if (!(w->want_send && rings(w->send)) &&
        !(w->want_recv && rings(w->recv))) { /* no doorbell: TCP only */
      short ev;
      hk_status st =
          hk_tcp_wait(w->want_send ? w->send->ops->pollfd(w->send, 1, &ev) : -1,
                      w->want_send,
                      w->want_recv ? w->recv->ops->pollfd(w->recv, 0, &ev) : -1,
                      w->want_recv, io, what);
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
  link->ops = NULL;
  link->state = NULL;
}
