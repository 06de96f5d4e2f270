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

#include "collectives/transport/link.h"
#include "hk/hk.h"

struct hk_ring_ops;
struct hk_shm_group;

typedef struct hk_ring {
  const struct hk_ring_ops *ops; /* hk_ring_link_ops unless replaced */
  struct hk_shm_group *shm;      /* the shm ops' group, or NULL */
  int rank, size;        /* rank = this process's POSITION in the ring */
  int *order;            /* order[pos] = the rank at ring position pos */
  int *pos_of;           /* pos_of[rank] = its position (order's inverse) */
  hk_link *left, *right; /* NULL when size == 1; may be equal */
  char left_name[32], right_name[32]; /* "rank 3", for messages */
  hk_io io;
  uint8_t *stage;     /* receive staging buffer, stage_bytes long */
  size_t stage_bytes; /* HK_RING_CHUNK_BYTES */
  uint8_t *scratch;   /* reduce-scatter work buffer, grown on demand */
  size_t scratch_bytes;
  struct hk_ring_step *steps; /* the schedule of the call in progress */
  size_t *segs;               /* n+1 segment offsets for the default split */
} hk_ring;

/** How the values a reduction finishes are adjusted, once, by the rank
 *  that finishes them (so every rank gets the same bits). */
typedef struct hk_ring_finish {
  int divisor;      /* HK_AVERAGE divides by this; 0 means the ring size */
  double postscale; /* then multiply by this (floating dtypes); 1: none */
  double pre;       /* HK_AVERAGE's inputs were divided by this power of two
                       (hk_average_pre_divisor); 0 or 1: they were not */
} hk_ring_finish;

/**
 * Finishes ne ELEMENTS at p that a reduction has just completed: HK_AVERAGE
 * divides by fin->divisor (by `size` when fin is NULL or its divisor 0),
 * multiplying back the power of two fin->pre the inputs were divided by,
 * then a postscale other than 1 multiplies. Every algorithm applies it
 * once, on the rank that completes the values, so all ranks get the
 * same bits.
 */
void hk_ring_finish_apply(void *p, size_t ne, hk_dtype dtype, hk_op op,
                          const hk_ring_finish *fin, int size);

/**
 * Sets up a ring (allocates the staging buffer, chunk_bytes bytes, pre-
 * faulted). The links (collectives/transport/link.h: TCP over one or
 * more sockets, or MPI) stay owned by the caller and must outlive the
 * ring; left == right is fine (2 ranks over one full-duplex link). Every
 * collective drains the right link before it returns, so no MPI send
 * still reads the caller's buffer afterwards. `order` (size entries, may
 * be NULL for rank order) gives the rank at each ring position, e.g. the
 * order topology/ring.h finds for the GPUs; left/right must lead to the
 * ranks before and after this one in it. Results do not depend on the
 * order: block and root arguments are ranks. Errors: HK_ERR_NOMEM.
 */
hk_status hk_ring_init(hk_ring *ring, int rank, int size, hk_link *left,
                       hk_link *right, const hk_io *io, size_t chunk_bytes,
                       const int *order);

/** Frees the ring's buffers (not the links). */
void hk_ring_destroy(hk_ring *ring);

/** The default split of count elements into n segments: seg[j] =
 *  j*floor(count/n) + min(j, count mod n), seg[n] = count. */
void hk_ring_default_segments(size_t count, int n, size_t *seg);

/**
 * Allreduce of count ELEMENTS: recvbuf = op over all ranks' sendbuf, with
 * the default segments. sendbuf == recvbuf is in place; otherwise they must
 * not overlap. fin may be NULL (divide by the ring size for HK_AVERAGE, no
 * postscale). Every rank must call it with the same count, dtype, op and
 * fin, in the same order relative to other ring calls (the coordinator
 * guarantees this). Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT, naming the
 * neighbour; HK_ERR_NOMEM. recvbuf is then unspecified.
 */
hk_status hk_ring_allreduce(hk_ring *ring, const void *sendbuf, void *recvbuf,
                            size_t count, hk_dtype dtype, hk_op op,
                            const hk_ring_finish *fin);

/**
 * Allreduce with explicit segments: segment j is elements
 * [seg[j], seg[j+1]) (n+1 offsets, seg[0] = 0, non-decreasing). Each
 * element's reduction order depends only on its segment index, so a
 * fusion buffer laid out segment by segment (segment j of the buffer =
 * segment j of every tensor in it) reduces every element exactly as the
 * tensor alone would: fusion never changes a bit. Errors as above.
 */
hk_status hk_ring_allreduce_segmented(hk_ring *ring, const void *sendbuf,
                                      void *recvbuf, const size_t *seg,
                                      hk_dtype dtype, hk_op op,
                                      const hk_ring_finish *fin);

/** The halves of a ring allreduce (hk_ring_allreduce_part). */
typedef enum hk_ring_part {
  HK_RING_REDUCE_SCATTER = 1, /* the first N-1 steps */
  HK_RING_ALLGATHER = 2,      /* the last N-1 steps */
  HK_RING_BOTH = 3,           /* hk_ring_allreduce_segmented */
} hk_ring_part;

/**
 * How a ring runs its collectives (docs/design.md: variants are ops tables):
 * over the links to its neighbours (hk_ring_link_ops, this file's
 * schedules; the default), or through the host's shared memory when every
 * member is on this host (collectives/shm_ring.h). Every table gives the
 * same results bit for bit; the functions below document the contract.
 */
typedef struct hk_ring_ops {
  const char *name; /* "links", "shm": for logs and the timeline */
  hk_status (*allreduce_part)(struct hk_ring *ring, const void *sendbuf,
                              void *recvbuf, const size_t *seg, hk_dtype dtype,
                              hk_op op, const hk_ring_finish *fin,
                              hk_ring_part part);
  hk_status (*reducescatter)(struct hk_ring *ring, const void *sendbuf,
                             void *recvbuf, const size_t *seg, hk_dtype dtype,
                             hk_op op, const hk_ring_finish *fin);
  hk_status (*allgatherv)(struct hk_ring *ring, const void *sendbuf,
                          void *recvbuf, const size_t *seg, hk_dtype dtype);
  hk_status (*broadcast)(struct hk_ring *ring, void *buf, size_t count,
                         hk_dtype dtype, int root);
} hk_ring_ops;

/** The schedules over links (this file). */
extern const hk_ring_ops hk_ring_link_ops;

/**
 * One or both halves of hk_ring_allreduce_segmented, for algorithms built
 * of rings (collectives/hierarchical.h). HK_RING_REDUCE_SCATTER leaves
 * segment (p+1) mod N (p = this rank's ring position, ring->rank) of
 * recvbuf reduced over the ring, left unfinished (no average division, no
 * postscale: fin is ignored; the caller finishes it); the rest of recvbuf
 * is unspecified (partial sums over links, untouched over shm).
 * HK_RING_ALLGATHER starts from that state (segment (p+1) mod N final at
 * position p; sendbuf is ignored) and leaves every segment of recvbuf final on
 * every rank. Run in that order, the two give exactly
 * hk_ring_allreduce_segmented's bits, less the finish. Same arguments and
 * errors as hk_ring_allreduce_segmented.
 */
hk_status hk_ring_allreduce_part(hk_ring *ring, const void *sendbuf,
                                 void *recvbuf, const size_t *seg,
                                 hk_dtype dtype, hk_op op,
                                 const hk_ring_finish *fin, hk_ring_part part);

/**
 * Reduce-scatter: every rank passes the whole input (seg[n] elements,
 * split by seg, segment j for rank j); rank r's recvbuf receives the
 * reduction of segment r
 * (seg[r+1]-seg[r] elements). N-1 steps for every column chunk of
 * HK_RING_CHUNK_BYTES of the blocks, through a work buffer of N chunks
 * owned by the ring (not of the whole input). Errors as hk_ring_allreduce.
 */
hk_status hk_ring_reducescatter(hk_ring *ring, const void *sendbuf,
                                void *recvbuf, const size_t *seg,
                                hk_dtype dtype, hk_op op,
                                const hk_ring_finish *fin);

/**
 * Allgather with a block per rank of any size (allgatherv): rank r
 * contributes seg[r+1]-seg[r] elements from sendbuf; recvbuf (seg[n]
 * elements) receives every block at its offset. N-1 steps, each block
 * forwarded around the ring, pipelined. Errors as hk_ring_allreduce.
 */
hk_status hk_ring_allgatherv(hk_ring *ring, const void *sendbuf, void *recvbuf,
                             const size_t *seg, hk_dtype dtype);

/**
 * Allgather of one fixed-size record per rank (set-up exchanges: settings,
 * communicator ids): all (size * bytes bytes) receives rank r's record at
 * r * bytes; mine (bytes) may not overlap all. Errors as
 * hk_ring_allgatherv, HK_ERR_NOMEM.
 */
hk_status hk_ring_allgather_records(hk_ring *ring, const void *mine,
                                    size_t bytes, void *all);

/**
 * Broadcast of count ELEMENTS from `root`: a pipelined chain along the
 * ring (root -> root+1 -> ...), each rank forwarding what it has received
 * while more arrives. Errors as hk_ring_allreduce.
 */
hk_status hk_ring_broadcast(hk_ring *ring, void *buf, size_t count,
                            hk_dtype dtype, int root);

#endif
