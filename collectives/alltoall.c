#include "collectives/alltoall.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

hk_status hk_alltoall_pairwise(int rank, int n, hk_link *const *peers,
                               const hk_io *io, const void *sendbuf,
                               const size_t *send_rows, size_t row_bytes,
                               void **out, size_t *recv_rows) {
  *out = NULL;
  recv_rows[rank] = send_rows[rank];
  /* 1. block sizes */
  for (int k = 1; k < n; k++) {
    int dst = (rank + k) % n, src = (rank - k + n) % n;
    uint64_t mine = send_rows[dst], theirs = 0;
    hk_status st = hk_link_exchange(peers[dst], &mine, sizeof mine, peers[src],
                                    &theirs, sizeof theirs, io, "in alltoall");
    if (st != HK_OK)
      return st;
    if (row_bytes && theirs > SIZE_MAX / row_bytes / (size_t)n)
      return hk_fail(HK_ERR_PROTOCOL, "rank %d announced %llu rows", src,
                     (unsigned long long)theirs);
    recv_rows[src] = (size_t)theirs;
  }
  size_t total = 0;
  for (int j = 0; j < n; j++)
    total += recv_rows[j];
  if (total * row_bytes == 0)
    return HK_OK;
  uint8_t *dst_buf = malloc(total * row_bytes);
  if (!dst_buf)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %zu bytes for alltoall",
                   total * row_bytes);
  /* 2. the blocks; own block copied */
  const uint8_t *src_buf = sendbuf;
  size_t soff_mine = 0, roff_mine = 0;
  for (int j = 0; j < rank; j++) {
    soff_mine += send_rows[j];
    roff_mine += recv_rows[j];
  }
  if (send_rows[rank])
    memcpy(dst_buf + roff_mine * row_bytes, src_buf + soff_mine * row_bytes,
           send_rows[rank] * row_bytes);
  for (int k = 1; k < n; k++) {
    int dst = (rank + k) % n, src = (rank - k + n) % n;
    size_t soff = 0, roff = 0;
    for (int j = 0; j < dst; j++)
      soff += send_rows[j];
    for (int j = 0; j < src; j++)
      roff += recv_rows[j];
    hk_status st = hk_link_exchange(
        peers[dst], src_buf + soff * row_bytes, send_rows[dst] * row_bytes,
        peers[src], dst_buf + roff * row_bytes, recv_rows[src] * row_bytes, io,
        "in alltoall");
    if (st != HK_OK) {
      free(dst_buf);
      return st;
    }
  }
  *out = dst_buf;
  return HK_OK;
}
