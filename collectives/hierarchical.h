/*
 * hierarchical.h - hierarchical allreduce (HK_HIERARCHICAL_ALLREDUCE, as
 * Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE and NCCL's "tree across nodes,
 * ring inside" idea): a ring reduce-scatter among the L ranks of each
 * host, a ring allreduce of each shard among the H ranks (one per host)
 * that hold it, then a ring allgather inside each host. Every rank sends
 * 2(L-1)/L of the buffer inside its host and 2(H-1)/(HL) across hosts, so
 * all L ranks of a host use the network at once, each with 1/L of the
 * bytes, instead of one ring edge per host carrying everything.
 *
 * Segments: the buffer is split exactly as the flat ring splits it, into
 * N = L*H segments (hk_ring_default_segments, or a fusion buffer's
 * segment-major layout, coordinator/fusion.h). Segment j = b*H + c belongs
 * to local block b (segments b*H .. b*H+H-1, contiguous) and is cross
 * sub-segment c of that block.
 *
 * Reduction order (what the bits are): for an element of segment j =
 * b*H + c, first each host folds its L values in local ring order
 * starting at local position b: v = x[b]; v = x[b+1] op v; ...; up to
 * x[b-1] (positions mod L); then the H host partials are folded in the
 * same way in cross ring order (host positions) starting at host c. The
 * average's division and the postscale are applied once, by the rank that
 * completes the element, and the result is copied to every rank, so all
 * ranks hold the same bits. The order depends only on the element's
 * segment index, so fusion (segment-major) never changes a bit here
 * either. With L == 1 or H == 1 this is exactly the flat ring's order
 * (segment j folded from ring position j); in general it is a different
 * association of the same values, so floating-point results may differ
 * from the flat ring in the last bits (integers, and floats whose partial
 * sums are exact, agree exactly). tests/unit/test_hierarchical.c checks
 * the bits against a serial computation in this order.
 *
 * Thread-safety: as hk_ring (one thread uses both rings).
 */
#ifndef HK_COLLECTIVES_HIERARCHICAL_H
#define HK_COLLECTIVES_HIERARCHICAL_H

#include "collectives/ring.h"

/**
 * Allreduce of seg[L*H] ELEMENTS with the segments seg[0..L*H] (L =
 * local->size, H = cross->size), sendbuf == recvbuf allowed (in place),
 * otherwise not overlapping. `local` is the ring of this host's ranks
 * (positions 0..L-1), `cross` the ring of the ranks at the same local
 * position on every host (position = host index in ring order). fin may
 * be NULL (HK_AVERAGE divides by L*H; fin->divisor 0 also means L*H).
 * Uses local->segs and cross->segs as scratch, so seg must be neither.
 * Every rank of the job must call it with the same seg, dtype, op, fin.
 * Errors: as hk_ring_allreduce (HK_ERR_PEER_LOST, HK_ERR_TIMEOUT naming
 * the neighbour, HK_ERR_NOMEM); recvbuf is then unspecified.
 */
hk_status hk_hier_allreduce(hk_ring *local, hk_ring *cross, const void *sendbuf,
                            void *recvbuf, const size_t *seg, hk_dtype dtype,
                            hk_op op, const hk_ring_finish *fin);

#endif
