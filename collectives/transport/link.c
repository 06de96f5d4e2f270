/*
 * link.c - hk_link (see link.h): TCP striped over k sockets, and the
 * waits that mix TCP and MPI links. The MPI calls are in link_mpi.c.
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

#include "collectives/transport/link_mpi.h"
#include "common/status.h"

static void set_name(hk_link *link, int peer) {
  link->peer = peer;
  snprintf(link->name, sizeof link->name, "rank %d", peer);
}

hk_status hk_link_init_tcp(hk_link *link, int peer, const int *fds, int k,
                           size_t block) {
  memset(link, 0, sizeof *link);
  for (int i = 0; i < HK_LINK_MAX_SOCKETS; i++)
    link->fds[i] = -1;
  if (k < 1 || k > HK_LINK_MAX_SOCKETS || (k > 1 && block == 0))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "a TCP link over %d sockets with %zu-byte blocks (1 to %d "
                   "sockets, blocks of at least 1 byte)",
                   k, block, HK_LINK_MAX_SOCKETS);
  set_name(link, peer);
  link->kind = HK_LINK_TCP;
  link->nfds = k;
  for (int i = 0; i < k; i++) {
    link->fds[i] = fds[i];
    int fl = fcntl(fds[i], F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
      fcntl(fds[i], F_SETFL, fl | O_NONBLOCK);
  }
  link->block = k > 1 ? block : SIZE_MAX;
  link->send_left = link->recv_left = link->block;
  return HK_OK;
}

hk_status hk_link_init_mpi(hk_link *link, int peer, const void *comm,
                           size_t chunk) {
  memset(link, 0, sizeof *link);
  for (int i = 0; i < HK_LINK_MAX_SOCKETS; i++)
    link->fds[i] = -1;
  hk_status st = hk_link_mpi_open(&link->mpi, peer, comm, chunk);
  if (st != HK_OK)
    return st;
  set_name(link, peer);
  link->kind = HK_LINK_MPI;
  return HK_OK;
}

hk_status hk_link_send_some(hk_link *link, const void *p, size_t n,
                            size_t *done) {
  if (link->kind == HK_LINK_MPI)
    return hk_link_mpi_send_some(link->mpi, p, n, done, link->name);
  if (link->nfds == 1) /* the default: exactly today's one connection */
    return hk_tcp_send_some(link->fds[0], p, n, done, link->name);
  const uint8_t *src = p;
  size_t total = 0;
  *done = 0;
  while (n > 0) {
    size_t want = n < link->send_left ? n : link->send_left, got;
    hk_status st = hk_tcp_send_some(link->fds[link->send_sock], src, want, &got,
                                    link->name);
    if (st != HK_OK && total == 0)
      return st;
    if (st != HK_OK)
      break; /* hand over what moved; the next call meets the error again */
    src += got;
    n -= got;
    total += got;
    link->send_left -= got;
    if (link->send_left == 0) { /* block done: the next goes on the next */
      link->send_sock = (link->send_sock + 1) % link->nfds;
      link->send_left = link->block;
    }
    if (got < want)
      break; /* this socket is full; later bytes must wait behind it */
  }
  *done = total;
  return HK_OK;
}

hk_status hk_link_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  if (link->kind == HK_LINK_MPI)
    return hk_link_mpi_recv_some(link->mpi, p, n, done, link->name);
  if (link->nfds == 1)
    return hk_tcp_recv_some(link->fds[0], p, n, done, link->name);
  uint8_t *dst = p;
  size_t total = 0;
  *done = 0;
  while (n > 0) {
    size_t want = n < link->recv_left ? n : link->recv_left, got;
    hk_status st = hk_tcp_recv_some(link->fds[link->recv_sock], dst, want, &got,
                                    link->name);
    if (st != HK_OK && total == 0)
      return st;
    if (st != HK_OK)
      break; /* hand over what moved; the next call meets the error again */
    dst += got;
    n -= got;
    total += got;
    link->recv_left -= got;
    if (link->recv_left == 0) {
      link->recv_sock = (link->recv_sock + 1) % link->nfds;
      link->recv_left = link->block;
    }
    if (got < want)
      break; /* the next bytes have not arrived on this socket yet */
  }
  *done = total;
  return HK_OK;
}

/* Replaces a timeout's message by one that names whom it waited for. */
static hk_status timed_out(const hk_io *io, const char *what,
                           const hk_link *send, int want_send,
                           const hk_link *recv, int want_recv, int drain) {
  char s[320] = "", r[320] = "", ms[224] = "", mr[224] = "";
  if (want_send && send->kind == HK_LINK_MPI)
    hk_link_mpi_describe(send->mpi, ms, sizeof ms);
  if (want_recv && recv->kind == HK_LINK_MPI)
    hk_link_mpi_describe(recv->mpi, mr, sizeof mr);
  if (want_send)
    snprintf(s, sizeof s, "%s %s%s%s%s",
             drain ? "completing sends to" : "sending to", send->name,
             send->kind == HK_LINK_MPI ? " (MPI" : "", ms[0] ? ": " : "",
             send->kind == HK_LINK_MPI ? ms : "");
  if (want_send && send->kind == HK_LINK_MPI)
    snprintf(s + strlen(s), sizeof s - strlen(s), ")");
  if (want_recv)
    snprintf(r, sizeof r, "receiving from %s%s%s%s", recv->name,
             recv->kind == HK_LINK_MPI ? " (MPI: " : "",
             recv->kind == HK_LINK_MPI ? mr : "",
             recv->kind == HK_LINK_MPI ? ")" : "");
  return hk_fail(HK_ERR_TIMEOUT,
                 "timed out after %.1f s %s: no progress %s%s%s", io->timeout_s,
                 what, s, *s && *r ? " or " : "", r);
}

static int is_mpi(const hk_link *link) {
  return link && link->kind == HK_LINK_MPI;
}

/*
 * The wait when an MPI link takes part: MPI only progresses inside MPI
 * calls, so test the MPI side, poll(2) the TCP side and the abort fd
 * without blocking, and yield the CPU between rounds. An MPI link is
 * tested even when this wait is not for it: its posted sends may need
 * this rank's progress to leave (the rest of a large message once the
 * peer's socket drains; the reply to the peer's rendezvous), and the
 * peer's progress may wait on that, while this rank waits on the TCP
 * side (a ring that crosses hosts: TCP on one side, MPI on the other).
 * With drain, the send side is ready once it has no send pending.
 */
static hk_status spin(hk_link *send, int want_send, hk_link *recv,
                      int want_recv, int drain, const hk_io *io,
                      const char *what) {
  const double start = hk_now();
  for (;;) {
    struct pollfd p[3];
    int n = 0, ready = 0, cs, cr, dr;
    hk_status st;
    if (is_mpi(send)) {
      st = hk_link_mpi_progress(send->mpi, want_recv && recv == send, &cs, &cr,
                                &dr, send->name);
      if (st != HK_OK)
        return st;
      ready |= want_send && (drain ? dr : cs);
      ready |= want_recv && recv == send && cr;
    } else if (want_send) {
      p[n++] =
          (struct pollfd){.fd = send->fds[send->send_sock], .events = POLLOUT};
    }
    if (is_mpi(recv) && recv != send) {
      st =
          hk_link_mpi_progress(recv->mpi, want_recv, &cs, &cr, &dr, recv->name);
      if (st != HK_OK)
        return st;
      ready |= want_recv && cr;
    } else if (want_recv && !is_mpi(recv)) {
      p[n++] =
          (struct pollfd){.fd = recv->fds[recv->recv_sock], .events = POLLIN};
    }
    if (ready)
      return HK_OK;
    int abort_at = -1;
    if (io->abort_fd >= 0) {
      abort_at = n;
      p[n++] = (struct pollfd){.fd = io->abort_fd, .events = POLLIN};
    }
    if (n > 0) {
      int rc = poll(p, (nfds_t)n, 0);
      if (rc < 0 && errno != EINTR)
        return hk_fail_errno(HK_ERR_SYSTEM, errno, "poll %s", what);
      if (rc > 0 && abort_at >= 0 && p[abort_at].revents)
        return hk_fail(HK_ERR_PEER_LOST,
                       "the launcher aborted the job (or died) %s", what);
      if (rc > 0)
        return HK_OK; /* a TCP side is ready (or failed: its call says) */
    }
    if (hk_now() - start >= io->timeout_s)
      return timed_out(io, what, send, want_send, recv, want_recv, drain);
    sched_yield();
  }
}

hk_status hk_link_wait(hk_link *send, int want_send, hk_link *recv,
                       int want_recv, const hk_io *io, const char *what) {
  if (is_mpi(send) || is_mpi(recv))
    return spin(send, want_send, recv, want_recv, 0, io, what);
  hk_status st = hk_tcp_wait(
      want_send ? send->fds[send->send_sock] : -1, want_send,
      want_recv ? recv->fds[recv->recv_sock] : -1, want_recv, io, what);
  if (st == HK_ERR_TIMEOUT)
    return timed_out(io, what, send, want_send, recv, want_recv, 0);
  return st;
}

hk_status hk_link_drain(hk_link *link, const hk_io *io, const char *what) {
  if (!link || link->kind != HK_LINK_MPI)
    return HK_OK; /* TCP: the kernel has the bytes already */
  return spin(link, 1, link, 0, 1, io, what);
}

hk_status hk_link_exchange(hk_link *send, const void *sp, size_t sn,
                           hk_link *recv, void *rp, size_t rn, const hk_io *io,
                           const char *what) {
  const uint8_t *s = sp;
  uint8_t *r = rp;
  while (sn > 0 || rn > 0) {
    size_t ds = 0, dr = 0;
    hk_status st = HK_OK;
    if (sn > 0)
      st = hk_link_send_some(send, s, sn, &ds);
    if (st == HK_OK && rn > 0)
      st = hk_link_recv_some(recv, r, rn, &dr);
    if (st != HK_OK)
      return st;
    s += ds;
    sn -= ds;
    r += dr;
    rn -= dr;
    if (ds == 0 && dr == 0 && (sn > 0 || rn > 0)) {
      st = hk_link_wait(send, sn > 0, recv, rn > 0, io, what);
      if (st != HK_OK)
        return st;
    }
  }
  return hk_link_drain(send, io, what);
}

void hk_link_close(hk_link *link) {
  if (link->kind == HK_LINK_TCP)
    for (int i = 0; i < link->nfds; i++)
      hk_tcp_close(&link->fds[i]);
  if (link->kind == HK_LINK_MPI)
    hk_link_mpi_close(link->mpi);
  link->mpi = NULL;
  link->nfds = 0;
  link->kind = HK_LINK_NONE;
}
