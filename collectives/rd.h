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
 * Large buffers (at least HK_RD_HALVING_BYTES, p >= 4): the p survivors
 * run the same combinations on pieces instead (Rabenseifner's recursive
 * halving, then recursive doubling of the reduced pieces; Thakur et al.
 * section 4.5): at step s partners split the range they share, each
 * keeps one half and combines it, (lower) op (higher), with the partner's
 * copy of it; then every rank finishes its piece and the pieces are
 * exchanged back, in reverse order. Each element meets exactly the
 * combinations above, so the bits are the same (a fused batch of small
 * recursive-doubling tensors keeps them), while each rank moves
 * 2(p-1)/p of the buffer, as the ring does, in 2 log2(p) steps.
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

/* Buffers from this many bytes use recursive halving and doubling (above)
 * when the survivors number 4 or more: where a whole-buffer exchange per
 * step starts to cost more than the extra log2(p) latencies (about
 * 4 alpha / beta at p = 4 with hk's TCP figures, worker/algo.c). */
#define HK_RD_HALVING_BYTES (256u << 10)

/**
 * Allreduce of count ELEMENTS (sendbuf == recvbuf allowed) among n ranks,
 * this one being `rank`; links[j] is the link to rank j (n entries;
 * links[rank] unused; collectives/transport/link.h). fin may
 * be NULL (HK_AVERAGE divides by n). *scratch / *scratch_bytes is a work
 * buffer of count elements (half that with halving, on a rank that does
 * not pair up), grown with realloc and kept by the caller.
 * Every rank must call it with the same count, dtype, op and fin.
 * Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT (naming the peer rank),
 * HK_ERR_NOMEM.
 */
hk_status hk_rd_allreduce(int rank, int n, hk_link *links, const hk_io *io,
                          const void *sendbuf, void *recvbuf, size_t count,
                          hk_dtype dtype, hk_op op, const hk_ring_finish *fin,
                          uint8_t **scratch, size_t *scratch_bytes);

#endif
