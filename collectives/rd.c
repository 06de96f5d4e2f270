/*
 * rd.c - recursive-doubling allreduce (see rd.h).
 */
#include "collectives/rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/reduce.h"
#include "common/status.h"

/* The real rank of virtual index v (e = ranks that sit out). */
static int real_rank(int v, int e) { return v < e ? 2 * v + 1 : v + e; }

/* dst = (lower rank's partial) op (higher rank's): `mine_is_lower` says
 * which of mine / theirs is the lower rank's. */
static void combine(void *mine, const void *theirs, size_t count,
                    hk_dtype dtype, hk_op op, int mine_is_lower) {
  if (mine_is_lower)
    hk_reduce(mine, mine, theirs, count, dtype, op);
  else
    hk_reduce(mine, theirs, mine, count, dtype, op);
}

/*
 * The p survivors' part for large buffers (rd.h): recursive halving, then
 * recursive doubling of the reduced pieces. At step `mask` (1, 2, 4, ...)
 * partners v and v ^ mask hold the same element range; the one without
 * the bit keeps the lower half. Each sends the half the other keeps and
 * combines the half it keeps with what it received, (lower) op (higher):
 * exactly the combinations of the whole-buffer exchange, on half the
 * bytes. Then the finish runs on this rank's piece and the pieces are
 * exchanged back in reverse order. tmp holds count / 2 + 1 elements.
 */
static hk_status halving_doubling(int rank, int v, int p, int e, hk_link *links,
                                  const hk_io *io, uint8_t *buf, size_t count,
                                  hk_dtype dtype, hk_op op,
                                  const hk_ring_finish *fin, int n,
                                  uint8_t *tmp, const char *what) {
  const size_t esz = hk_dtype_size(dtype);
  size_t lo_at[32], hi_at[32]; /* the range before each step */
  size_t lo = 0, hi = count;
  int steps = 0;
  hk_status st = HK_OK;
  for (int mask = 1; mask < p && st == HK_OK; mask <<= 1, steps++) {
    lo_at[steps] = lo;
    hi_at[steps] = hi;
    const int peer = real_rank(v ^ mask, e);
    const size_t mid = lo + (hi - lo) / 2;
    const int low_half = !(v & mask);
    size_t klo = low_half ? lo : mid, khi = low_half ? mid : hi;
    size_t slo = low_half ? mid : lo, shi = low_half ? hi : mid;
    st = hk_link_exchange(&links[peer], buf + slo * esz, (shi - slo) * esz,
                          &links[peer], tmp, (khi - klo) * esz, io, what);
    if (st == HK_OK)
      combine(buf + klo * esz, tmp, khi - klo, dtype, op, rank < peer);
    lo = klo;
    hi = khi;
  }
  if (st == HK_OK)
    hk_ring_finish_apply(buf + lo * esz, hi - lo, dtype, op, fin, n);
  for (int k = steps - 1; k >= 0 && st == HK_OK; k--) {
    const int peer = real_rank(v ^ (1 << k), e);
    /* the partner's piece is the rest of the range before step k */
    size_t plo = lo == lo_at[k] ? hi : lo_at[k];
    size_t phi = lo == lo_at[k] ? hi_at[k] : lo;
    st = hk_link_exchange(&links[peer], buf + lo * esz, (hi - lo) * esz,
                          &links[peer], buf + plo * esz, (phi - plo) * esz, io,
                          what);
    lo = lo_at[k];
    hi = hi_at[k];
  }
  return st;
}

hk_status hk_rd_allreduce(int rank, int n, hk_link *links, const hk_io *io,
                          const void *sendbuf, void *recvbuf, size_t count,
                          hk_dtype dtype, hk_op op, const hk_ring_finish *fin,
                          uint8_t **scratch, size_t *scratch_bytes) {
  const size_t bytes = count * hk_dtype_size(dtype);
  if (bytes && sendbuf != recvbuf)
    memcpy(recvbuf, sendbuf, bytes);
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  const int e = n - p;
  const int halve =
      p >= 4 && bytes >= HK_RD_HALVING_BYTES && count >= (size_t)p;
  /* the pair-up of the first 2e ranks receives a whole buffer */
  const size_t need =
      halve && rank >= 2 * e ? (count / 2 + 1) * hk_dtype_size(dtype) : bytes;
  if (n > 1 && need > *scratch_bytes) {
    uint8_t *p = realloc(*scratch, need);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a %zu-byte work buffer",
                     bytes);
    *scratch = p;
    *scratch_bytes = need;
  }
  uint8_t *tmp = *scratch;
  const char *what = "in recursive-doubling allreduce";
  hk_status st = HK_OK;
  if (n > 1 && bytes) {
    if (rank < 2 * e && rank % 2 == 0) { /* sits out: hand over, get back */
      hk_link *l = &links[rank + 1];
      st = hk_link_exchange(l, recvbuf, bytes, l, NULL, 0, io, what);
      if (st == HK_OK)
        st = hk_link_exchange(l, NULL, 0, l, recvbuf, bytes, io, what);
      return st; /* finished by rank+1, bits and all */
    }
    if (rank < 2 * e) { /* take rank-1's values: (lower) op (higher) */
      hk_link *l = &links[rank - 1];
      st = hk_link_exchange(l, NULL, 0, l, tmp, bytes, io, what);
      if (st != HK_OK)
        return st;
      hk_reduce(recvbuf, tmp, recvbuf, count, dtype, op);
    }
    const int v = rank < 2 * e ? rank / 2 : rank - e;
    if (halve) {
      st = halving_doubling(rank, v, p, e, links, io, recvbuf, count, dtype, op,
                            fin, n, tmp, what);
      if (st == HK_OK && rank < 2 * e) { /* odd: hand the result back */
        hk_link *l = &links[rank - 1];
        st = hk_link_exchange(l, recvbuf, bytes, l, NULL, 0, io, what);
      }
      return st;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      const int peer = real_rank(v ^ mask, e);
      st = hk_link_exchange(&links[peer], recvbuf, bytes, &links[peer], tmp,
                            bytes, io, what);
      if (st != HK_OK)
        return st;
      if (peer < rank)
        hk_reduce(recvbuf, tmp, recvbuf, count, dtype, op);
      else
        hk_reduce(recvbuf, recvbuf, tmp, count, dtype, op);
    }
  }
  if (bytes)
    hk_ring_finish_apply(recvbuf, count, dtype, op, fin, n);
  if (n > 1 && bytes && rank < 2 * e) { /* odd: hand the result back */
    hk_link *l = &links[rank - 1];
    st = hk_link_exchange(l, recvbuf, bytes, l, NULL, 0, io, what);
  }
  return st;
}
