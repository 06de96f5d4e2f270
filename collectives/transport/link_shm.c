/*
 * link_shm.c - the shm kind of hk_link (see link_shm.h).
 */
#include "collectives/transport/link_shm.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/transport/shm_wait.h"
#include "common/status.h"

struct hk_link_shm {
  hk_shm_ring *out, *in; /* me -> peer, peer -> me */
  size_t cap;            /* link_bytes, a power of two */
  hk_shm_doorbell *mine, *theirs;
  double spin_s;
};

hk_shm_doorbell *hk_link_shm_bell(const hk_link *link) {
  return link->shm->mine;
}

double hk_link_shm_spin(const hk_link *link) { return link->shm->spin_s; }

static hk_status shm_send_some(hk_link *link, const void *p, size_t n,
                               size_t *done) {
  struct hk_link_shm *s = link->shm;
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
  hk_shm_wake_flag(&r->reader_wait, s->theirs, link->fds[0]);
  return HK_OK;
}

static hk_status shm_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  struct hk_link_shm *s = link->shm;
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
  hk_shm_wake_flag(&r->writer_wait, s->theirs, link->fds[0]);
  return HK_OK;
}

static hk_status shm_test(hk_link *link, int want_send, int want_recv,
                          int drain, int *ready) {
  struct hk_link_shm *s = link->shm;
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

static int shm_pollfd(const hk_link *link, int send_side, short *events) {
  (void)send_side;
  *events = POLLIN | POLLRDHUP;
  return link->fds[0];
}

static void shm_arm(hk_link *link, int want_send, int want_recv,
                    uint32_t mode) {
  struct hk_link_shm *s = link->shm;
  if (want_send)
    atomic_store_explicit(&s->out->writer_wait, mode, memory_order_seq_cst);
  if (want_recv)
    atomic_store_explicit(&s->in->reader_wait, mode, memory_order_seq_cst);
}

static void shm_close(hk_link *link) {
  free(link->shm);
  hk_tcp_close(&link->fds[0]);
}

const hk_link_ops hk_link_shm_ops = {.name = "shm",
                                     .wait_class = HK_LINK_WAIT_FUTEX,
                                     .needs_drain = 0,
                                     .send_some = shm_send_some,
                                     .recv_some = shm_recv_some,
                                     .test = shm_test,
                                     .pollfd = shm_pollfd,
                                     .released = hk_link_all_sent,
                                     .arm = shm_arm,
                                     .close = shm_close};

hk_status hk_link_init_shm(hk_link *link, int peer, const hk_shm_seg *seg,
                           int me, int them, int fd) {
  const int n = seg->hdr->layout.n;
  if (me < 0 || them < 0 || me >= n || them >= n || me == them)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "an shm link from local rank %d to %d of %d", me, them, n);
  struct hk_link_shm *s = calloc(1, sizeof *s);
  if (!s)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate an shm link");
  hk_link_init_shm_fields(link, peer, fd);
  s->out = hk_shm_seg_ring(seg, me, them);
  s->in = hk_shm_seg_ring(seg, them, me);
  s->cap = seg->hdr->layout.link_bytes;
  s->mine = &hk_shm_seg_ctl(seg, me)->bell;
  s->theirs = &hk_shm_seg_ctl(seg, them)->bell;
  s->spin_s = seg->spin_s;
  link->shm = s;
  return HK_OK;
}
