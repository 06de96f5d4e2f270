/*
 * ctrl_shm.c - the shm kind of control endpoint (ctrl.h): one byte ring
 * per direction in the host's segment (hk_shm_seg_ctrl_ring), with the
 * control socket kept for liveness and as the doorbell.
 *
 * The rings are link_shm.c's: the producer copies at head mod cap and
 * publishes head (release), the consumer copies out and publishes tail
 * (release); after publishing each wakes the other through the waiter
 * flag of the ring it touched (shm_wait.h: hk_shm_wake_flag), here always
 * HK_SHM_SLEEP_SOCKET: one byte on the socket, which the sleeper's
 * poll(2) sees. A side that must wait inside a send or a receive (the
 * ring full, or a frame not yet whole) arms both flags it may be woken
 * by, re-tests, and sleeps in poll(2) on the socket and the launcher's
 * connection with the wait policy's polling first (tcp.h: hk_tcp_wait).
 * A sender waiting for room moves what its peer sent it into the stash,
 * so the peer's sends complete too.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "collectives/transport/ctrl.h"
#include "collectives/transport/shm_wait.h"
#include "collectives/transport/tcp.h"
#include "common/buf.h"
#include "common/status.h"

/* An shm endpoint's own state (hk_ctrl.state). */
typedef struct shm_ctrl {
  hk_shm_ring *out, *in; /* me -> peer, peer -> me */
  size_t cap;            /* ctrl_bytes, a power of two */
  hk_buf stash;          /* bytes taken from `in` while a send waited */
  size_t stash_at;       /* the stash's first unread byte */
  int eof;               /* the socket reached EOF or failed */
} shm_ctrl;

/* Copies up to n bytes into the outgoing ring; returns how many. */
static size_t put_some(shm_ctrl *s, int fd, const uint8_t *p, size_t n) {
  hk_shm_ring *r = s->out;
  uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
  size_t room = s->cap - (size_t)(h - t), m = n < room ? n : room;
  if (m == 0)
    return 0;
  size_t at = (size_t)h & (s->cap - 1), first = s->cap - at;
  if (first > m)
    first = m;
  memcpy(r->data + at, p, first);
  if (m > first)
    memcpy(r->data, p + first, m - first);
  atomic_store_explicit(&r->head, h + m, memory_order_release);
  hk_shm_wake_flag(&r->reader_wait, NULL, fd);
  return m;
}

/* Bytes waiting in the incoming ring (head read seq_cst: after a seq_cst
 * store of a waiter flag it is the other half of shm_wait.h's protocol;
 * on x86 and arm64 as cheap as acquire). */
static size_t ring_avail(const shm_ctrl *s) {
  uint64_t t = atomic_load_explicit(&s->in->tail, memory_order_relaxed);
  uint64_t h = atomic_load(&s->in->head);
  return (size_t)(h - t);
}

/* Copies up to n bytes out of the incoming ring (p NULL: into the stash). */
static hk_status take_some(shm_ctrl *s, int fd, uint8_t *p, size_t n,
                           size_t *done) {
  hk_shm_ring *r = s->in;
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  size_t avail = ring_avail(s), m = n < avail ? n : avail;
  *done = 0;
  if (m == 0)
    return HK_OK;
  size_t at = (size_t)t & (s->cap - 1), first = s->cap - at;
  if (first > m)
    first = m;
  if (!p) {
    hk_status st = hk_buf_append(&s->stash, r->data + at, first);
    if (st == HK_OK && m > first)
      st = hk_buf_append(&s->stash, r->data, m - first);
    if (st != HK_OK)
      return st;
  } else {
    memcpy(p, r->data + at, first);
    if (m > first)
      memcpy(p + first, r->data, m - first);
  }
  atomic_store_explicit(&r->tail, t + m, memory_order_release);
  hk_shm_wake_flag(&r->writer_wait, NULL, fd);
  *done = m;
  return HK_OK;
}

/* Reads and discards the doorbell bytes on the socket, without
 * blocking; notes EOF or a failure (the peer died, or keepalive gave up). */
static void drain_doorbells(shm_ctrl *s, int fd) {
  char sink[256];
  for (;;) {
    ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (r > 0)
      continue;
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      s->eof = 1;
    return;
  }
}

/* Sleeps until the socket rings (or hangs up), after arming the flags of
 * what this side waits for: room in `out` (want_room), bytes in `in`
 * (always: a sender drains meanwhile). ready() is tested after arming. */
static hk_status sleep_on_socket(hk_ctrl *c, int want_room, const hk_io *io,
                                 const char *who) {
  shm_ctrl *s = c->state;
  /* seq_cst stores, then seq_cst loads: either this side sees the
   * peer's bytes (or room), or the peer (fence, then the flag) sees the
   * flag and rings */
  if (want_room)
    atomic_store(&s->out->writer_wait, HK_SHM_SLEEP_SOCKET);
  atomic_store(&s->in->reader_wait, HK_SHM_SLEEP_SOCKET);
  uint64_t h = atomic_load_explicit(&s->out->head, memory_order_relaxed);
  uint64_t t = atomic_load(&s->out->tail);
  int ready = ring_avail(s) > 0 || (want_room && h - t < s->cap);
  hk_status st = HK_OK;
  if (!ready) {
    char what[96];
    snprintf(what, sizeof what, "waiting for %s on the control path", who);
    st = hk_tcp_wait(-1, 0, c->fd, 1, io, what);
  }
  atomic_store(&s->out->writer_wait, HK_SHM_AWAKE);
  atomic_store(&s->in->reader_wait, HK_SHM_AWAKE);
  if (st != HK_OK)
    return st;
  drain_doorbells(s, c->fd);
  return HK_OK;
}

static hk_status lost(const char *who) {
  return hk_fail(HK_ERR_PEER_LOST, "%s closed the connection", who);
}

static hk_status shm_send(hk_ctrl *c, const void *p, size_t n, const hk_io *io,
                          const char *who) {
  shm_ctrl *s = c->state;
  const uint8_t *q = p;
  while (n > 0) {
    size_t m = put_some(s, c->fd, q, n);
    q += m;
    n -= m;
    if (n == 0)
      break;
    size_t got; /* the peer may be sending to us meanwhile */
    hk_status st = take_some(s, c->fd, NULL, SIZE_MAX, &got);
    if (st == HK_OK && m == 0 && got == 0)
      st = sleep_on_socket(c, 1, io, who);
    if (st == HK_OK && s->eof) {
      uint64_t h = atomic_load_explicit(&s->out->head, memory_order_relaxed);
      uint64_t t = atomic_load_explicit(&s->out->tail, memory_order_acquire);
      if (h - t >= s->cap)
        st = lost(who);
    }
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}

static hk_status shm_recv(hk_ctrl *c, void *p, size_t n, const hk_io *io,
                          const char *who) {
  shm_ctrl *s = c->state;
  uint8_t *q = p;
  size_t from_stash = s->stash.len - s->stash_at;
  if (from_stash > n)
    from_stash = n;
  if (from_stash) { /* (an empty stash may have no memory yet) */
    memcpy(q, s->stash.data + s->stash_at, from_stash);
    s->stash_at += from_stash;
    if (s->stash_at == s->stash.len) {
      hk_buf_clear(&s->stash);
      s->stash_at = 0;
    }
    q += from_stash;
    n -= from_stash;
  }
  while (n > 0) {
    size_t got;
    hk_status st = take_some(s, c->fd, q, n, &got);
    q += got;
    n -= got;
    if (st == HK_OK && n > 0 && got == 0) {
      if (s->eof)
        return lost(who);
      st = sleep_on_socket(c, 0, io, who);
    }
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}

static int shm_pending(hk_ctrl *c) {
  shm_ctrl *s = c->state;
  return s->stash.len > s->stash_at || ring_avail(s) > 0;
}

/* The flag is a seq_cst store and the pending test that follows reads
 * head seq_cst (ring_avail): either the reader sees the bytes or the
 * writer (hk_shm_wake_flag: fence, then the flag) rings. */
static void shm_arm(hk_ctrl *c, int on) {
  shm_ctrl *s = c->state;
  atomic_store(&s->in->reader_wait, on ? HK_SHM_SLEEP_SOCKET : HK_SHM_AWAKE);
}

static hk_status shm_polled(hk_ctrl *c, short revents, int *readable,
                            const char *who) {
  shm_ctrl *s = c->state;
  if (revents)
    drain_doorbells(s, c->fd);
  *readable = shm_pending(c);
  if (!*readable && s->eof) /* the ring's last bytes came before the EOF */
    return lost(who);
  return HK_OK;
}

static size_t shm_room(hk_ctrl *c, size_t want) {
  (void)want;
  return ((shm_ctrl *)c->state)->cap;
}

static void shm_free(hk_ctrl *c) {
  shm_ctrl *s = c->state;
  if (!s)
    return;
  hk_buf_free(&s->stash);
  free(s);
}

static const hk_ctrl_ops shm_ops = {"shm",   shm_send,   shm_recv, shm_pending,
                                    shm_arm, shm_polled, shm_room, shm_free};

hk_status hk_ctrl_init_shm(hk_ctrl *c, const hk_shm_seg *seg, int j,
                           int me_zero, int fd) {
  hk_shm_ring *to_zero = hk_shm_seg_ctrl_ring(seg, j, 1);
  hk_shm_ring *from_zero = hk_shm_seg_ctrl_ring(seg, j, 0);
  if (!to_zero || !from_zero)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "no shared-memory control ring between local ranks 0 "
                   "and %d",
                   j);
  shm_ctrl *s = calloc(1, sizeof *s);
  if (!s)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a control endpoint");
  s->out = me_zero ? from_zero : to_zero;
  s->in = me_zero ? to_zero : from_zero;
  s->cap = seg->hdr->layout.ctrl_bytes;
  hk_ctrl_close(c);
  c->ops = &shm_ops;
  c->fd = fd;
  c->state = s;
  return HK_OK;
}
