#include "collectives/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "collectives/reduce.h"
#include "common/status.h"

hk_status hk_ring_init(hk_ring *ring, int rank, int size, int left_fd,
                       int right_fd, const hk_io *io, size_t chunk_bytes) {
  memset(ring, 0, sizeof *ring);
  ring->rank = rank;
  ring->size = size;
  ring->left_fd = left_fd;
  ring->right_fd = right_fd;
  ring->io = *io;
  snprintf(ring->left_name, sizeof ring->left_name, "rank %d",
           (rank + size - 1) % size);
  snprintf(ring->right_name, sizeof ring->right_name, "rank %d",
           (rank + 1) % size);
  ring->stage_bytes = chunk_bytes;
  if (size > 1) {
    ring->stage = malloc(chunk_bytes);
    if (!ring->stage)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a %zu-byte ring stage",
                     chunk_bytes);
    memset(ring->stage, 0, chunk_bytes); /* fault it in now, not per call */
  }
  return HK_OK;
}

void hk_ring_destroy(hk_ring *ring) {
  free(ring->stage);
  ring->stage = NULL;
}

/* Segment j of N over count elements: [seg_off, seg_off + seg_len). */
static size_t seg_off(size_t count, int n, int j) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return (size_t)j * base + ((size_t)j < rem ? (size_t)j : rem);
}
static size_t seg_len(size_t count, int n, int j) {
  return count / (size_t)n + ((size_t)j < count % (size_t)n ? 1 : 0);
}
static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Which segment step k sends / receives (see ring.h). */
static int send_seg(int r, int n, int k) {
  return k < n - 1 ? mod(r - k, n) : mod(r + 1 - (k - (n - 1)), n);
}
static int recv_seg(int r, int n, int k) {
  return k < n - 1 ? mod(r - k - 1, n) : mod(r - (k - (n - 1)), n);
}

hk_status hk_ring_allreduce(hk_ring *ring, const void *sendbuf, void *recvbuf,
                            size_t count, hk_dtype dtype, hk_op op) {
  const int n = ring->size, r = ring->rank;
  const size_t esz = hk_dtype_size(dtype);
  const uint8_t *src = sendbuf;
  uint8_t *dst = recvbuf;
  if (n == 1 || count == 0) {
    if (count && src != dst)
      memcpy(dst, src, count * esz);
    return HK_OK;
  }
  const int steps = 2 * (n - 1), rs_steps = n - 1;
  int ks = 0, kr = 0; /* current send / receive step */
  size_t soff = 0;    /* bytes of step ks sent */
  size_t roff = 0;    /* bytes of step kr received */
  size_t rdone = 0;   /* bytes of step kr reduced/landed (<= roff) */
  size_t fill = 0;    /* bytes waiting in the stage (reduce-scatter) */
  const size_t cap = ring->stage_bytes - ring->stage_bytes % esz;
  hk_status st = HK_OK;

  while (ks < steps || kr < steps) {
    int progress = 0;
    /* ---- send side ---- */
    size_t savail = 0, slen = 0;
    if (ks < steps) {
      int j = send_seg(r, n, ks);
      slen = seg_len(count, n, j) * esz;
      if (ks == 0 || kr > ks - 1)
        savail = slen;
      else if (kr == ks - 1)
        savail = rdone;
      if (soff < savail) {
        const uint8_t *base =
            (ks == 0 ? src : dst) + seg_off(count, n, j) * esz;
        size_t want = savail - soff, done;
        if (want > ring->stage_bytes)
          want = ring->stage_bytes;
        st = hk_tcp_send_some(ring->right_fd, base + soff, want, &done,
                              ring->right_name);
        if (st != HK_OK)
          return st;
        soff += done;
        progress |= done > 0;
      }
      if (soff == slen) {
        ks++;
        soff = 0;
        progress = 1;
      }
    }
    /* ---- receive side ---- */
    if (kr < steps) {
      int j = recv_seg(r, n, kr);
      size_t rlen = seg_len(count, n, j) * esz;
      uint8_t *seg = dst + seg_off(count, n, j) * esz;
      size_t done = 0;
      if (roff < rlen && kr < rs_steps) {
        size_t want = rlen - roff;
        if (want > cap - fill)
          want = cap - fill;
        st = hk_tcp_recv_some(ring->left_fd, ring->stage + fill, want, &done,
                              ring->left_name);
        if (st != HK_OK)
          return st;
        roff += done;
        fill += done;
        size_t whole = fill - fill % esz;
        if (whole) {
          size_t e0 = rdone / esz, ne = whole / esz;
          const uint8_t *mine = src + seg_off(count, n, j) * esz;
          hk_reduce(seg + rdone, mine + rdone, ring->stage, ne, dtype, op);
          if (op == HK_AVERAGE && kr == rs_steps - 1)
            hk_reduce_finish_average(seg + e0 * esz, ne, dtype, n);
          rdone += whole;
          fill -= whole;
          if (fill)
            memmove(ring->stage, ring->stage + whole, fill);
        }
      } else if (roff < rlen) {
        st = hk_tcp_recv_some(ring->left_fd, seg + roff, rlen - roff, &done,
                              ring->left_name);
        if (st != HK_OK)
          return st;
        roff += done;
        rdone = roff;
      }
      progress |= done > 0;
      if (rdone == rlen) {
        kr++;
        roff = rdone = 0;
        progress = 1;
      }
    }
    if (!progress) {
      int want_send = ks < steps && soff < savail;
      int want_recv = kr < steps;
      st = hk_tcp_wait(ring->right_fd, want_send, ring->left_fd, want_recv,
                       &ring->io, "in ring allreduce");
      if (st != HK_OK)
        return st;
    }
  }
  return HK_OK;
}

hk_status hk_ring_broadcast(hk_ring *ring, void *buf, size_t count,
                            hk_dtype dtype, int root) {
  const int n = ring->size;
  const size_t len = count * hk_dtype_size(dtype);
  if (n == 1 || len == 0)
    return HK_OK;
  const int pos = mod(ring->rank - root, n); /* distance from root */
  const int sends = pos<n - 1, recvs = pos> 0;
  uint8_t *p = buf;
  size_t sent = sends ? 0 : len, got = recvs ? 0 : len;
  while (sent < len || got < len) {
    int progress = 0;
    hk_status st;
    size_t done;
    if (got < len) {
      st = hk_tcp_recv_some(ring->left_fd, p + got, len - got, &done,
                            ring->left_name);
      if (st != HK_OK)
        return st;
      got += done;
      progress |= done > 0;
    }
    if (sent < got) {
      size_t want = got - sent;
      if (want > ring->stage_bytes)
        want = ring->stage_bytes;
      st = hk_tcp_send_some(ring->right_fd, p + sent, want, &done,
                            ring->right_name);
      if (st != HK_OK)
        return st;
      sent += done;
      progress |= done > 0;
    }
    if (!progress) {
      st = hk_tcp_wait(ring->right_fd, sent < got, ring->left_fd, got < len,
                       &ring->io, "in ring broadcast");
      if (st != HK_OK)
        return st;
    }
  }
  return HK_OK;
}
