/*
 * link_shm.c - the shm kind of hk_link (link.h): a byte stream per
 * direction through a single-producer single-consumer ring in the host's
 * segment (shm_seg.h: ring i -> j of link_bytes bytes, a power of two).
 *
 * The producer copies into the ring at head mod link_bytes (two memcpy
 * when it wraps) and publishes the new head (release); the consumer
 * reads head (acquire), copies out, publishes tail (release). Free space
 * is link_bytes - (head - tail). After publishing, each side wakes the
 * other if its waiter flag says it sleeps (shm_wait.h's protocol):
 * reader_wait on the ring it wrote, writer_wait on the ring it read.
 * No locks and no system call while nobody sleeps.
 *
 * Thread-safety: as hk_link; the two ends are different processes (or
 * threads, in the unit tests).
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/transport/link_impl.h"
#include "collectives/transport/shm_wait.h"
#include "common/status.h"

/* An shm link's own state (hk_link.state). */
typedef struct shm_link {
  hk_shm_ring *out, *in; /* me -> peer, peer -> me */
  size_t cap;            /* link_bytes, a power of two */
  hk_shm_doorbell *mine, *theirs;
  int fd; /* the pair's TCP connection: liveness, socket doorbells */
} shm_link;

static hk_status shm_send_some(hk_link *link, const void *p, size_t n,
                               size_t *done) {
  shm_link *s = link->state;
  hk_shm_ring *r = s->out;
  uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
  size_t room = s->cap - (size_t)(h - t), m = n < room ? n : room;
  *done = m;
  if (m == 0)
    return HK_OK;
  size_t at = (size_t)h & (s->cap - 1), first = s->cap - at;
  if (first > m)
    first = m;
  memcpy(r->data + at, p, first);
  if (m > first)
    memcpy(r->data, (const uint8_t *)p + first, m - first);
  atomic_store_explicit(&r->head, h + m, memory_order_release);
  hk_shm_wake_flag(&r->reader_wait, s->theirs, s->fd);
  return HK_OK;
}

static hk_status shm_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  shm_link *s = link->state;
  hk_shm_ring *r = s->in;
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
  size_t avail = (size_t)(h - t), m = n < avail ? n : avail;
  *done = m;
  if (m == 0)
    return HK_OK;
  size_t at = (size_t)t & (s->cap - 1), first = s->cap - at;
  if (first > m)
    first = m;
  memcpy(p, r->data + at, first);
  if (m > first)
    memcpy((uint8_t *)p + first, r->data, m - first);
  atomic_store_explicit(&r->tail, t + m, memory_order_release);
  hk_shm_wake_flag(&r->writer_wait, s->theirs, s->fd);
  return HK_OK;
}

static hk_status shm_test(hk_link *link, int want_send, int want_recv,
                          int drain, int *ready) {
  shm_link *s = link->state;
  int r = drain;
  if (want_send && !drain) {
    uint64_t h = atomic_load_explicit(&s->out->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&s->out->tail, memory_order_acquire);
    r |= h - t < s->cap;
  }
  if (want_recv) {
    uint64_t t = atomic_load_explicit(&s->in->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&s->in->head, memory_order_acquire);
    r |= h != t;
  }
  *ready = r;
  return HK_OK;
}

/* Both sides: the pair's socket, the doorbell of mixed waits. */
static int shm_pollfd(const hk_link *link, int send_side, short *events) {
  (void)send_side;
  *events = POLLIN | POLLRDHUP;
  return ((const shm_link *)link->state)->fd;
}

static void shm_arm(hk_link *link, int want_send, int want_recv,
                    uint32_t mode) {
  shm_link *s = link->state;
  if (want_send)
    atomic_store_explicit(&s->out->writer_wait, mode, memory_order_seq_cst);
  if (want_recv)
    atomic_store_explicit(&s->in->reader_wait, mode, memory_order_seq_cst);
}

static hk_shm_doorbell *shm_bell(const hk_link *link) {
  const shm_link *s = link->state;
  return s->mine;
}

static int shm_socket(const hk_link *link, int i) {
  return i == 0 ? ((const shm_link *)link->state)->fd : -1;
}

static int shm_take_socket(hk_link *link) {
  shm_link *s = link->state;
  int fd = s->fd;
  s->fd = -1;
  return fd;
}

static void shm_close(hk_link *link) {
  shm_link *s = link->state;
  hk_tcp_close(&s->fd);
  free(s);
}

static const hk_link_ops shm_ops = {.name = "shm",
                                    .wait_class = HK_LINK_WAIT_FUTEX,
                                    .needs_drain = 0,
                                    .send_some = shm_send_some,
                                    .recv_some = shm_recv_some,
                                    .test = shm_test,
                                    .pollfd = shm_pollfd,
                                    .released = hk_link_all_sent,
                                    .arm = shm_arm,
                                    .bell = shm_bell,
                                    .describe = NULL,
                                    .socket = shm_socket,
                                    .take_socket = shm_take_socket,
                                    .close = shm_close};

hk_status hk_link_init_shm(hk_link *link, int peer, const hk_shm_seg *seg,
                           int me, int them, int fd) {
  hk_link_set(link, peer, NULL, NULL);
  const int n = seg->hdr->layout.n;
  if (me < 0 || them < 0 || me >= n || them >= n || me == them)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "an shm link from local rank %d to %d of %d", me, them, n);
  shm_link *s = calloc(1, sizeof *s);
  if (!s)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate an shm link");
  s->out = hk_shm_seg_ring(seg, me, them);
  s->in = hk_shm_seg_ring(seg, them, me);
  s->cap = seg->hdr->layout.link_bytes;
  s->mine = &hk_shm_seg_ctl(seg, me)->bell;
  s->theirs = &hk_shm_seg_ctl(seg, them)->bell;
  s->fd = hk_link_own_socket(fd);
  hk_link_set(link, peer, &shm_ops, s);
  return HK_OK;
}
