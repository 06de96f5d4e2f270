/*
 * dev_allreduce.c - the GPU allreduce schedules (see dev_allreduce.h).
 */
#include "collectives/dev_allreduce.h"

#include <stdlib.h>

#include "common/status.h"

static hk_status need_comm(const hk_dev_sched *s, const char *what) {
  return s->comm ? HK_OK
                 : hk_fail(HK_ERR_DEVICE,
                           "%s needs the device communicator, which was "
                           "aborted after an earlier failure",
                           what);
}

hk_status hk_dev_run_comm(hk_dev_sched *s, hk_ring *ring, void *buf,
                          size_t nseg, size_t seglen, hk_dtype dtype,
                          hk_op op) {
  (void)ring;
  hk_status st = need_comm(s, "the in-host allreduce");
  if (st != HK_OK)
    return st;
  return s->dev->ops->comm_allreduce(s->comm, buf, buf, nseg * seglen, dtype,
                                     op, s->stream);
}

/* Queues the copies of chunk k (q elements of each segment from k*q, the
 * last chunk shorter) between the device buffer and slot `sl`. */
static hk_status copy_chunk(hk_dev_sched *s, uint8_t *dbuf, size_t nseg,
                            size_t seglen, size_t q, size_t k, int sl,
                            size_t esz, int to_host) {
  const hk_device_ops *o = s->dev->ops;
  size_t qc = seglen - k * q < q ? seglen - k * q : q;
  for (size_t j = 0; j < nseg; j++) {
    uint8_t *d = dbuf + (j * seglen + k * q) * esz;
    uint8_t *h = s->slot[sl] + j * qc * esz;
    hk_status st = to_host ? o->memcpy_async(s->dev, h, d, qc * esz, s->d2h)
                           : o->memcpy_async(s->dev, d, h, qc * esz, s->h2d);
    if (st != HK_OK)
      return st;
  }
  return to_host ? o->event_record(s->dev, s->ev_d2h[sl], s->d2h)
                 : o->event_record(s->dev, s->ev_h2d[sl], s->h2d);
}

static hk_status grow_segs(hk_dev_sched *s, size_t nseg) {
  if (s->segs_cap > nseg)
    return HK_OK;
  size_t *p = realloc(s->segs, (nseg + 1) * sizeof *p);
  if (!p)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %zu segment offsets",
                   nseg + 1);
  s->segs = p;
  s->segs_cap = nseg + 1;
  return HK_OK;
}

hk_status hk_dev_run_staged(hk_dev_sched *s, hk_ring *ring, void *buf,
                            size_t nseg, size_t seglen, hk_dtype dtype,
                            hk_op op) {
  const hk_device_ops *o = s->dev->ops;
  const size_t esz = hk_dtype_size(dtype);
  if (nseg != (size_t)ring->size)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "staged allreduce: %zu segments for a ring of %d", nseg,
                   ring->size);
  hk_status st = grow_segs(s, nseg);
  if (st != HK_OK)
    return st;
  const size_t chunk = s->chunk_bytes && s->chunk_bytes < HK_DEV_SLOT_BYTES
                           ? s->chunk_bytes
                           : HK_DEV_SLOT_BYTES;
  size_t q = chunk / (nseg * esz);
  q = q == 0 ? 1 : q > seglen ? seglen : q;
  const size_t nchunks = (seglen + q - 1) / q;
  uint8_t *dbuf = buf;
  /* the copies start once the packing queued on the stream is done */
  st = o->event_record(s->dev, s->ev_ready, s->stream);
  if (st == HK_OK)
    st = o->stream_wait_event(s->dev, s->d2h, s->ev_ready);
  for (size_t k = 0; k < nchunks && k < HK_DEV_SLOTS && st == HK_OK; k++)
    st = copy_chunk(s, dbuf, nseg, seglen, q, k, (int)k, esz, 1);
  for (size_t k = 0; k < nchunks && st == HK_OK; k++) {
    const int sl = (int)(k % HK_DEV_SLOTS);
    size_t qc = seglen - k * q < q ? seglen - k * q : q;
    st = s->wait(s->wait_arg, s->ev_d2h[sl], "the copy to pinned memory");
    if (st != HK_OK)
      break;
    for (size_t j = 0; j <= nseg; j++)
      s->segs[j] = j * qc;
    st = hk_ring_allreduce_segmented(ring, s->slot[sl], s->slot[sl], s->segs,
                                     dtype, op, NULL);
    if (st == HK_OK)
      st = copy_chunk(s, dbuf, nseg, seglen, q, k, sl, esz, 0);
    if (st == HK_OK && k + HK_DEV_SLOTS < nchunks) {
      /* the slot is refilled once its copy back has left it */
      st = o->stream_wait_event(s->dev, s->d2h, s->ev_h2d[sl]);
      if (st == HK_OK)
        st = copy_chunk(s, dbuf, nseg, seglen, q, k + HK_DEV_SLOTS, sl, esz, 1);
    }
  }
  if (st != HK_OK)
    return st;
  /* what the stream queues next (allgather, unpack) sees the copies back */
  st = o->event_record(s->dev, s->ev_ready, s->h2d);
  if (st == HK_OK)
    st = o->stream_wait_event(s->dev, s->stream, s->ev_ready);
  return st;
}

hk_status hk_dev_run_hier(hk_dev_sched *s, hk_ring *ring, void *buf,
                          size_t nseg, size_t seglen, hk_dtype dtype,
                          hk_op op) {
  const hk_device_ops *o = s->dev->ops;
  const size_t L = (size_t)s->local_size, esz = hk_dtype_size(dtype);
  if (nseg % L != 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hierarchical allreduce: %zu segments for %zu local ranks",
                   nseg, L);
  const size_t H = nseg / L, block = H * seglen;
  uint8_t *mine = (uint8_t *)buf + (size_t)s->local_rank * block * esz;
  hk_status st = HK_OK;
  if (L > 1) {
    st = need_comm(s, "the in-host reduce-scatter");
    if (st == HK_OK)
      st = o->comm_reducescatter(s->comm, buf, mine, block, dtype, op,
                                 s->stream);
  }
  if (st == HK_OK && H > 1)
    st = hk_dev_run_staged(s, ring, mine, H, seglen, dtype, op);
  if (st == HK_OK && L > 1) {
    st = need_comm(s, "the in-host allgather");
    if (st == HK_OK)
      st = o->comm_allgather(s->comm, mine, buf, block, dtype, s->stream);
  }
  return st;
}
