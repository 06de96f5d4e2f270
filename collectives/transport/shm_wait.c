/*
 * shm_wait.c - spin, yield, futex sleep with liveness checks (see
 * shm_wait.h).
 */
#include "collectives/transport/shm_wait.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/status.h"
#include "common/waiter.h"

#define MAX_PEERS 16 /* peers named in one liveness check / message */

int hk_futex_wait(_Atomic uint32_t *word, uint32_t expect, double timeout_s) {
  struct timespec ts;
  ts.tv_sec = (time_t)timeout_s;
  ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
  long rc =
      syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expect, &ts, NULL, 0);
  if (rc != 0 && errno == ETIMEDOUT)
    return ETIMEDOUT;
  return 0; /* woken, EAGAIN (the value changed) or EINTR */
}

void hk_futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void hk_shm_ring_bell(hk_shm_doorbell *bell) {
  atomic_fetch_add_explicit(&bell->word, 1, memory_order_seq_cst);
  hk_futex_wake(&bell->word);
}

void hk_shm_wake_flag(_Atomic uint32_t *flag, hk_shm_doorbell *bell, int fd) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(flag, memory_order_relaxed) == HK_SHM_AWAKE)
    return;
  uint32_t mode =
      atomic_exchange_explicit(flag, HK_SHM_AWAKE, memory_order_seq_cst);
  if (mode == HK_SHM_SLEEP_FUTEX) {
    hk_shm_ring_bell(bell);
  } else if (mode == HK_SHM_SLEEP_SOCKET && fd >= 0) {
    char b = 1;
    ssize_t w = send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w; /* EAGAIN: the socket holds wake-ups already */
  }
}

hk_status hk_shm_check_peers(const hk_shm_peer *peers, int n, int abort_fd,
                             const char *what) {
  struct pollfd p[MAX_PEERS + 1];
  int np = 0, idx[MAX_PEERS + 1];
  for (int i = 0; i < n && np < MAX_PEERS; i++)
    if (peers[i].fd >= 0) {
      idx[np] = i;
      p[np++] =
          (struct pollfd){.fd = peers[i].fd, .events = POLLIN | POLLRDHUP};
    }
  int abort_at = -1;
  if (abort_fd >= 0) {
    abort_at = np;
    p[np++] = (struct pollfd){.fd = abort_fd, .events = POLLIN};
  }
  if (np == 0)
    return HK_OK;
  int rc = poll(p, (nfds_t)np, 0);
  if (rc <= 0)
    return HK_OK; /* nothing to see (EINTR: the next check will) */
  if (abort_at >= 0 && p[abort_at].revents)
    return hk_fail(HK_ERR_PEER_LOST,
                   "the launcher aborted the job (or died) %s", what);
  for (int k = 0; k < np; k++) {
    if (k == abort_at || !p[k].revents)
      continue;
    const hk_shm_peer *pe = &peers[idx[k]];
    if (p[k].revents & (POLLHUP | POLLERR | POLLRDHUP))
      return hk_fail(HK_ERR_PEER_LOST, "%s closed the connection (it died?) %s",
                     pe->name, what);
    char buf[64]; /* doorbells of mixed waits: discard */
    ssize_t r = recv(pe->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0)
      return hk_fail(HK_ERR_PEER_LOST, "%s closed the connection (it died?) %s",
                     pe->name, what);
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return hk_fail_errno(HK_ERR_PEER_LOST, errno, "lost connection to %s %s",
                           pe->name, what);
  }
  return HK_OK;
}

static hk_status timed_out(const hk_shm_cond *c, const hk_io *io,
                           const char *what) {
  hk_shm_peer peers[MAX_PEERS];
  int n = c->waiting_for ? c->waiting_for(c->arg, peers, MAX_PEERS) : 0;
  char list[512] = "";
  for (int i = 0; i < n && strlen(list) < sizeof list - 40; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i ? ", " : "", peers[i].name);
  return hk_fail(HK_ERR_TIMEOUT, "timed out after %.1f s %s: no progress%s%s",
                 io->timeout_s, what, n ? " from " : "", list);
}

static hk_status sleep_wait(const hk_shm_cond *c, const hk_io *io,
                            const char *what) {
  const double start = hk_now();
  double checked = start;
  hk_shm_peer peers[MAX_PEERS];
  for (;;) {
    if (c->arm)
      c->arm(c->arg, 1);
    uint32_t v = atomic_load_explicit(&c->bell->word, memory_order_seq_cst);
    int ok = c->ready(c->arg);
    if (!ok)
      hk_futex_wait(&c->bell->word, v, HK_SHM_SLICE_S);
    if (c->arm)
      c->arm(c->arg, 0);
    if (ok || c->ready(c->arg))
      return HK_OK;
    /* woken for another condition, or a slice ran out: every slice,
     * check that the peers still live and the time left */
    const double now = hk_now();
    if (now - checked < HK_SHM_SLICE_S)
      continue;
    checked = now;
    int n = c->waiting_for ? c->waiting_for(c->arg, peers, MAX_PEERS) : 0;
    hk_status st = hk_shm_check_peers(peers, n, io->abort_fd, what);
    if (st != HK_OK)
      return st;
    if (now - start >= io->timeout_s)
      return timed_out(c, io, what);
  }
}

hk_status hk_shm_wait(const hk_shm_cond *c, const hk_io *io, const char *what) {
  if (c->ready(c->arg))
    return HK_OK;
  hk_waiter w; /* poll, yield, then sleep: the policy of common/waiter.h */
  hk_waiter_begin(&w, HK_WAIT_PEER, 1);
  while (hk_waiter_spin(&w))
    if (c->ready(c->arg)) {
      hk_waiter_end(&w);
      return HK_OK;
    }
  hk_status st = sleep_wait(c, io, what);
  hk_waiter_end(&w);
  return st;
}
