/*
 * shm_ring.c - the ring collectives over the shm engine (see shm_ring.h).
 */
#include "collectives/shm_ring.h"

#include <string.h>

void hk_ring_use_shm(hk_ring *ring, hk_shm_group *g) {
  ring->ops = &hk_ring_shm_ops;
  ring->shm = g;
}

static hk_status shm_allreduce_part(hk_ring *ring, const void *sendbuf,
                                    void *recvbuf, const size_t *seg,
                                    hk_dtype dtype, hk_op op,
                                    const hk_ring_finish *fin,
                                    hk_ring_part part) {
  const int n = ring->size;
  hk_shm_group *g = ring->shm;
  if (n == 1 || seg[n] == 0)
    return hk_ring_link_ops.allreduce_part(ring, sendbuf, recvbuf, seg, dtype,
                                           op, fin, part);
  for (int j = 0; j < n; j++) { /* the ring's: from j, finished by j-1 */
    g->start[j] = j;
    g->owner[j] = (j + n - 1) % n;
  }
  unsigned mode = (part & HK_RING_REDUCE_SCATTER ? HK_SHM_REDUCE : 0) |
                  (part & HK_RING_ALLGATHER ? HK_SHM_GATHER : 0);
  hk_shm_job job = {.mode = mode,
                    .seg = seg,
                    .owner = g->owner,
                    .start = g->start,
                    .src = sendbuf,
                    .dst = recvbuf,
                    .own_out = NULL,
                    .dtype = dtype,
                    .op = op,
                    .fin = fin,
                    .finish = part == HK_RING_BOTH};
  return hk_shm_group_run(g, &job);
}

hk_status hk_ring_shm_allreduce_pieces(hk_ring *ring,
                                       const hk_shm_piece *pieces,
                                       size_t npieces, const size_t *seg,
                                       hk_dtype dtype, hk_op op,
                                       const hk_ring_finish *fin) {
  const int n = ring->size;
  hk_shm_group *g = ring->shm;
  for (int j = 0; j < n; j++) { /* as shm_allreduce_part */
    g->start[j] = j;
    g->owner[j] = (j + n - 1) % n;
  }
  hk_shm_job job = {.mode = HK_SHM_REDUCE | HK_SHM_GATHER,
                    .seg = seg,
                    .owner = g->owner,
                    .start = g->start,
                    .src = NULL,
                    .dst = NULL,
                    .own_out = NULL,
                    .dtype = dtype,
                    .op = op,
                    .fin = fin,
                    .finish = 1,
                    .pieces = pieces,
                    .npieces = npieces,
                    /* the pre-division a fusion buffer's copy-in does */
                    .in_scale = fin && fin->pre > 1.0 ? 1.0 / fin->pre : 1.0};
  return hk_shm_group_run(g, &job);
}

static hk_status shm_reducescatter(hk_ring *ring, const void *sendbuf,
                                   void *recvbuf, const size_t *seg,
                                   hk_dtype dtype, hk_op op,
                                   const hk_ring_finish *fin) {
  const int n = ring->size;
  hk_shm_group *g = ring->shm;
  if (n == 1)
    return hk_ring_link_ops.reducescatter(ring, sendbuf, recvbuf, seg, dtype,
                                          op, fin);
  for (int b = 0; b < n; b++) { /* blocks belong to ranks */
    g->owner[b] = ring->pos_of[b];
    g->start[b] = (ring->pos_of[b] + 1) % n;
  }
  hk_shm_job job = {.mode = HK_SHM_REDUCE,
                    .seg = seg,
                    .owner = g->owner,
                    .start = g->start,
                    .src = sendbuf,
                    .dst = NULL,
                    .own_out = recvbuf,
                    .dtype = dtype,
                    .op = op,
                    .fin = fin,
                    .finish = 1};
  return hk_shm_group_run(g, &job);
}

static hk_status shm_allgatherv(hk_ring *ring, const void *sendbuf,
                                void *recvbuf, const size_t *seg,
                                hk_dtype dtype) {
  const int n = ring->size, me = ring->order[ring->rank];
  hk_shm_group *g = ring->shm;
  if (n == 1)
    return hk_ring_link_ops.allgatherv(ring, sendbuf, recvbuf, seg, dtype);
  const size_t esz = hk_dtype_size(dtype);
  uint8_t *mine = (uint8_t *)recvbuf + seg[me] * esz;
  if (seg[me + 1] > seg[me] && mine != (const uint8_t *)sendbuf)
    memcpy(mine, sendbuf, (seg[me + 1] - seg[me]) * esz);
  for (int b = 0; b < n; b++)
    g->owner[b] = ring->pos_of[b];
  hk_shm_job job = {.mode = HK_SHM_GATHER,
                    .seg = seg,
                    .owner = g->owner,
                    .start = NULL,
                    .src = NULL,
                    .dst = recvbuf,
                    .own_out = NULL,
                    .dtype = dtype,
                    .op = HK_SUM,
                    .fin = NULL,
                    .finish = 0};
  return hk_shm_group_run(g, &job);
}

static hk_status shm_broadcast(hk_ring *ring, void *buf, size_t count,
                               hk_dtype dtype, int root) {
  const int n = ring->size;
  hk_shm_group *g = ring->shm;
  if (n == 1 || count == 0)
    return HK_OK;
  size_t seg[HK_SHM_MAX_RANKS + 1];
  hk_ring_default_segments(count, n, seg);
  for (int j = 0; j < n; j++)
    g->owner[j] = ring->pos_of[root];
  hk_shm_job job = {.mode = HK_SHM_GATHER,
                    .seg = seg,
                    .owner = g->owner,
                    .start = NULL,
                    .src = NULL,
                    .dst = buf,
                    .own_out = NULL,
                    .dtype = dtype,
                    .op = HK_SUM,
                    .fin = NULL,
                    .finish = 0};
  return hk_shm_group_run(g, &job);
}

const hk_ring_ops hk_ring_shm_ops = {"shm", shm_allreduce_part,
                                     shm_reducescatter, shm_allgatherv,
                                     shm_broadcast};
