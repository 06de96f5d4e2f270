/*
 * hierarchical.c - hierarchical allreduce from three ring phases (see
 * hierarchical.h for the segments and the reduction order).
 */
#include "collectives/hierarchical.h"

#include <stdint.h>

hk_status hk_hier_allreduce(hk_ring *local, hk_ring *cross, const void *sendbuf,
                            void *recvbuf, const size_t *seg, hk_dtype dtype,
                            hk_op op, const hk_ring_finish *fin) {
  const int L = local->size, H = cross->size;
  const size_t esz = hk_dtype_size(dtype);
  size_t *lseg = local->segs, *cseg = cross->segs;
  for (int b = 0; b <= L; b++) /* local block b = segments b*H .. b*H+H-1 */
    lseg[b] = seg[b * H];
  hk_status st = hk_ring_allreduce_part(local, sendbuf, recvbuf, lseg, dtype,
                                        op, NULL, HK_RING_REDUCE_SCATTER);
  if (st != HK_OK)
    return st;
  /* this rank now holds local block bo reduced over its host */
  const int bo = (local->rank + 1) % L;
  for (int c = 0; c <= H; c++)
    cseg[c] = seg[bo * H + c] - seg[bo * H];
  hk_ring_finish f = {L * H, 1.0, 1.0};
  if (fin) {
    f.postscale = fin->postscale;
    f.pre = fin->pre;
    if (fin->divisor > 0)
      f.divisor = fin->divisor;
  }
  uint8_t *block = (uint8_t *)recvbuf + lseg[bo] * esz;
  st = hk_ring_allreduce_segmented(cross, block, block, cseg, dtype, op, &f);
  if (st != HK_OK)
    return st;
  return hk_ring_allreduce_part(local, NULL, recvbuf, lseg, dtype, op, NULL,
                                HK_RING_ALLGATHER);
}
