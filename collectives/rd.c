/*
 * rd.c - recursive-doubling allreduce (see rd.h).
 */
#include "collectives/rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "device/host/reduce.h"

/* The real rank of virtual index v (e = ranks that sit out). */
static int real_rank(int v, int e) { return v < e ? 2 * v + 1 : v + e; }

/* One pipelined step over `link`: sends buf (unless !send) while
 * receiving the peer's bytes into the work buffer's two chunks, folding
 * them into buf: buf = peer op buf if peer_first, else buf op peer. A
 * byte is folded once it has arrived and (when sending) left this rank's
 * memory: sent over TCP or shm, its MPI_Isend completed over MPI
 * (hk_link_released). */
typedef struct xchg {
  hk_link *link;
  uint8_t *buf;
  size_t bytes, chunk, esz;
  uint8_t *tmp; /* 2 * chunk bytes */
  int send, peer_first;
} xchg;

static hk_status step(const xchg *x, hk_dtype dtype, hk_op op, const hk_io *io,
                      const char *what) {
  size_t sent = x->send ? 0 : x->bytes, got = 0, red = 0;
  const size_t C = x->chunk;
  uint64_t base, rel; /* released bytes of the link at the start, now */
  hk_status st = hk_link_released(x->link, &base);
  if (st != HK_OK)
    return st;
  while (red < x->bytes) {
    size_t d = 0, progress = 0;
    if (sent < x->bytes) {
      st = hk_link_send_some(x->link, x->buf + sent, x->bytes - sent, &d);
      if (st != HK_OK)
        return st;
      sent += d;
      progress |= d;
    }
    /* receive into chunk got / C (slot (got / C) % 2), once the chunk
     * two before it is folded */
    size_t window = (red / C + 2) * C;
    size_t limit = window < x->bytes ? window : x->bytes;
    if (got < limit) {
      size_t in_chunk = C - got % C, want = limit - got;
      if (want > in_chunk)
        want = in_chunk;
      st = hk_link_recv_some(x->link, x->tmp + ((got / C) % 2) * C + got % C,
                             want, &d);
      if (st != HK_OK)
        return st;
      got += d;
      progress |= d;
    }
    /* fold what has arrived and been released, within red's chunk */
    if ((st = hk_link_released(x->link, &rel)) != HK_OK)
      return st;
    size_t freed = x->send ? (size_t)(rel - base) : x->bytes;
    size_t upto = got < freed ? got : freed;
    size_t chunk_end = (red / C + 1) * C;
    if (upto > chunk_end)
      upto = chunk_end;
    upto -= (upto - red) % x->esz;
    if (upto > red) {
      uint8_t *dst = x->buf + red;
      const uint8_t *theirs = x->tmp + ((red / C) % 2) * C + red % C;
      size_t ne = (upto - red) / x->esz;
      if (x->peer_first)
        hk_reduce(dst, theirs, dst, ne, dtype, op);
      else
        hk_reduce(dst, dst, theirs, ne, dtype, op);
      red = upto;
      progress = 1;
    }
    if (!progress) { /* also wake when more of what we sent is freed */
      uint64_t want_rel = freed < got && freed < x->bytes ? rel + 1 : 0;
      st = hk_link_wait_released(x->link, sent < x->bytes, got < limit,
                                 want_rel, io, what);
      if (st != HK_OK)
        return st;
    }
  }
  /* red <= released <= sent: everything has been sent */
  return hk_link_drain(x->link, io, what);
}

hk_status hk_rd_allreduce(int rank, int n, hk_link *const *peers,
                          const hk_io *io, const void *sendbuf, void *recvbuf,
                          size_t count, hk_dtype dtype, hk_op op,
                          const hk_ring_finish *fin, uint8_t **scratch,
                          size_t *scratch_bytes) {
  const size_t esz = hk_dtype_size(dtype), bytes = count * esz;
  if (bytes && sendbuf != recvbuf)
    memcpy(recvbuf, sendbuf, bytes);
  /* two chunks of whole elements, no more than the buffer needs */
  size_t chunk = HK_RD_CHUNK_BYTES - HK_RD_CHUNK_BYTES % esz;
  if (chunk > bytes)
    chunk = bytes;
  if (n > 1 && 2 * chunk > *scratch_bytes) {
    uint8_t *p = realloc(*scratch, 2 * chunk);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a %zu-byte work buffer",
                     2 * chunk);
    *scratch = p;
    *scratch_bytes = 2 * chunk;
  }
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  const int e = n - p;
  const char *what = "in recursive-doubling allreduce";
  hk_status st = HK_OK;
  xchg x = {NULL, recvbuf, bytes, chunk, esz, *scratch, 1, 0};
  if (n > 1 && bytes) {
    if (rank < 2 * e && rank % 2 == 0) { /* sits out: hand over, get back */
      hk_link *l = peers[rank + 1];
      st = hk_link_exchange(l, recvbuf, bytes, l, NULL, 0, io, what);
      if (st == HK_OK)
        st = hk_link_exchange(l, NULL, 0, l, recvbuf, bytes, io, what);
      return st; /* finished by rank+1, bits and all */
    }
    if (rank < 2 * e) { /* take rank-1's values: (lower) op (higher) */
      x.link = peers[rank - 1];
      x.send = 0;
      x.peer_first = 1;
      st = step(&x, dtype, op, io, what);
      if (st != HK_OK)
        return st;
    }
    const int v = rank < 2 * e ? rank / 2 : rank - e;
    for (int mask = 1; mask < p; mask <<= 1) {
      const int peer = real_rank(v ^ mask, e);
      x.link = peers[peer];
      x.send = 1;
      x.peer_first = peer < rank;
      st = step(&x, dtype, op, io, what);
      if (st != HK_OK)
        return st;
    }
  }
  if (bytes)
    hk_ring_finish_apply(recvbuf, count, dtype, op, fin, n);
  if (n > 1 && bytes && rank < 2 * e) { /* odd: hand the result back */
    hk_link *l = peers[rank - 1];
    st = hk_link_exchange(l, recvbuf, bytes, l, NULL, 0, io, what);
  }
  return st;
}
