/*
 * rd.h - recursive-doubling allreduce: the latency-optimised algorithm for
 * small messages (Thakur, Rabenseifner & Gropp, "Optimization of
 * Collective Communication Operations in MPICH", IJHPCA 2005, section
 * 4.4; MPICH and Open MPI use it below a size threshold). With p the
 * largest power of two <= N and e = N - p: ranks 0..2e-1 first pair up
 * (even rank r hands its buffer to r+1 and sits out); the p remaining
 * ranks then take log2(p) steps, at step s exchanging the whole buffer
 * with the rank whose virtual index differs in bit s and both combining
 * the two; at the end rank r+1 hands the result back to each even
 * r < 2e. ceil(log2 N) (+2 when N is not a power of two) steps of the
 * whole buffer over the direct links of the full mesh, against the
 * ring's 2(N-1) steps of 1/N of it: fewer latencies, more bytes.
 *
 * Reduction order (the bits): both partners of a step compute
 * (lower rank's partial) op (higher rank's partial), so they hold the
 * same bits, and every element is combined along the same balanced
 * binary tree over the ranks (pairs (2i, 2i+1) of the first 2e ranks
 * first). The average's division and the postscale are then applied by
 * every rank to identical values. The order does not depend on the
 * element's position, so fusing small tensors into one buffer never
 * changes a bit. It differs from the ring's association, so floating-point
 * results can differ from hk_ring_allreduce's in the last bits.
 *
 * Memory: an exchange is pipelined through a work buffer of two chunks
 * of HK_RD_CHUNK_BYTES, whatever the buffer's size: each rank sends its
 * whole partial while it receives the peer's into the chunk free, and
 * folds a received byte into its buffer once it has sent its own copy of
 * that byte (so the peer still gets the partial from before the fold).
 * (A whole-buffer scratch, as before, made a 256 MiB allreduce peak at
 * 2x the buffer.) The receive window never waits for this rank's own
 * sends, so two ranks can always both move (no deadlock whatever the
 * transport buffers).
 *
 * Thread-safety: the background thread only (uses the peers' links).
 */
#ifndef HK_COLLECTIVES_RD_H
#define HK_COLLECTIVES_RD_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/ring.h"
#include "collectives/transport/link.h"
#include "hk/hk.h"

/* Bytes of one chunk of the pipelined exchange (the ring's chunk). */
#define HK_RD_CHUNK_BYTES ((size_t)1 << 20)

/**
 * Allreduce of count ELEMENTS (sendbuf == recvbuf allowed) among n ranks,
 * this one being `rank`; peers[j] is the link to rank j (n entries;
 * peers[rank] unused; collectives/transport/link.h): the job's ranks, or
 * a process set's (ranks within the set). fin may
 * be NULL (HK_AVERAGE divides by n). *scratch / *scratch_bytes is a work
 * buffer of at most 2 x HK_RD_CHUNK_BYTES (less for small buffers), grown
 * with realloc and kept by the caller.
 * Every rank must call it with the same count, dtype, op and fin.
 * Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT (naming the peer rank),
 * HK_ERR_NOMEM.
 */
hk_status hk_rd_allreduce(int rank, int n, hk_link *const *peers,
                          const hk_io *io, const void *sendbuf, void *recvbuf,
                          size_t count, hk_dtype dtype, hk_op op,
                          const hk_ring_finish *fin, uint8_t **scratch,
                          size_t *scratch_bytes);

#endif
