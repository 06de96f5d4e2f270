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

hk_status hk_rd_allreduce(int rank, int n, hk_link *links, const hk_io *io,
                          const void *sendbuf, void *recvbuf, size_t count,
                          hk_dtype dtype, hk_op op, const hk_ring_finish *fin,
                          uint8_t **scratch, size_t *scratch_bytes) {
  const size_t bytes = count * hk_dtype_size(dtype);
  if (bytes && sendbuf != recvbuf)
    memcpy(recvbuf, sendbuf, bytes);
  if (n > 1 && bytes > *scratch_bytes) {
    uint8_t *p = realloc(*scratch, bytes);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a %zu-byte work buffer",
                     bytes);
    *scratch = p;
    *scratch_bytes = bytes;
  }
  uint8_t *tmp = *scratch;
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  const int e = n - p;
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
