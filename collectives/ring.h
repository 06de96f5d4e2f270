/*
 * ring.h - ring collectives over a pair of byte streams: the connection to
 * the right neighbour (rank+1) and the one from the left (rank-1).
 *
 * Allreduce is the bandwidth-optimal ring of Patarasuk & Yuan, "Bandwidth
 * optimal all-reduce algorithms for clusters of workstations" (JPDC 2009),
 * as used by Baidu's ring-allreduce, Horovod and NCCL: a reduce-scatter of
 * N-1 steps then an allgather of N-1 steps; each rank sends and receives
 * 2(N-1)/N of the buffer. The buffer is cut into N segments whose lengths
 * differ by at most one element (segment j starts at j*floor(count/N) +
 * min(j, count mod N)). At reduce-scatter step k rank r sends segment r-k
 * and reduces the incoming segment r-k-1 (mod N) into its buffer; the last
 * step leaves segment r+1 fully reduced at rank r, which then circulates
 * in the allgather. Every final value is computed by exactly one rank and
 * copied to the others, so results are bitwise identical on every rank.
 *
 * Pipelining: the 2(N-1) steps form one send stream and one receive
 * stream. Bytes of step k may be sent as soon as the same bytes of step k-1
 * have been received and reduced, so sending to the right, receiving from
 * the left and reducing overlap at the granularity of what the socket
 * delivers (at most HK_RING_CHUNK_BYTES per call). No per-call allocation:
 * the staging buffer belongs to the hk_ring.
 *
 * Thread-safety: an hk_ring is used by one thread (the background thread).
 */
#ifndef HK_COLLECTIVES_RING_H
#define HK_COLLECTIVES_RING_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/transport/tcp.h"
#include "hk/hk.h"

typedef struct hk_ring {
  int rank, size;
  int left_fd, right_fd;              /* -1 when size == 1 */
  char left_name[32], right_name[32]; /* "rank 3", for messages */
  hk_io io;
  uint8_t *stage;     /* receive staging buffer, stage_bytes long */
  size_t stage_bytes; /* HK_RING_CHUNK_BYTES */
} hk_ring;

/**
 * Sets up a ring (allocates the staging buffer, chunk_bytes bytes, pre-
 * faulted). The fds stay owned by the caller. Errors: HK_ERR_NOMEM.
 */
hk_status hk_ring_init(hk_ring *ring, int rank, int size, int left_fd,
                       int right_fd, const hk_io *io, size_t chunk_bytes);

/** Frees the staging buffer (not the fds). */
void hk_ring_destroy(hk_ring *ring);

/**
 * Allreduce of count ELEMENTS: recvbuf = op over all ranks' sendbuf.
 * sendbuf == recvbuf is in place; otherwise they must not overlap.
 * Every rank must call it with the same count, dtype and op, in the same
 * order relative to other ring calls (the coordinator guarantees this).
 * Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT (naming the neighbour); the
 * contents of recvbuf are then unspecified.
 */
hk_status hk_ring_allreduce(hk_ring *ring, const void *sendbuf, void *recvbuf,
                            size_t count, hk_dtype dtype, hk_op op);

/**
 * Broadcast of count ELEMENTS from `root`: a pipelined chain along the
 * ring (root -> root+1 -> ...), each rank forwarding what it has received
 * while more arrives. Errors as hk_ring_allreduce.
 */
hk_status hk_ring_broadcast(hk_ring *ring, void *buf, size_t count,
                            hk_dtype dtype, int root);

#endif
