/*
 * shm_ring.h - the ring collectives through shared memory: an hk_ring_ops
 * table (collectives/ring.h) that runs a ring whose members are all on
 * this host through the single-copy engine of collectives/shm_group.h
 * instead of its links. Everything above the ring (the flat allreduce,
 * hierarchical's in-host phases, fusion, broadcast, allgather(v),
 * reduce-scatter) uses it unchanged, with the ring's results bit for bit:
 *   - allreduce (and its halves): segment j folded from ring position j,
 *     owned (finished, then copied to the others) by position j-1;
 *   - reduce-scatter: rank b's block folded from position pos(b)+1,
 *     owned by pos(b), written to its recvbuf;
 *   - allgatherv: rank b's block copied out of its slot by the others;
 *   - broadcast: the root copies the buffer in, in N pieces per round,
 *     the others copy it out.
 * A ring of one rank, and empty buffers, take the links' paths (which
 * move nothing).
 * Thread-safety: as hk_ring.
 */
#ifndef HK_COLLECTIVES_SHM_RING_H
#define HK_COLLECTIVES_SHM_RING_H

#include "collectives/ring.h"
#include "collectives/shm_group.h"

/** The shm table. */
extern const hk_ring_ops hk_ring_shm_ops;

/**
 * Makes `ring` run through group g (which must outlive the ring's use
 * and have the ring's members at the ring's positions: g->n ==
 * ring->size, g->me == ring->rank). The links stay set (rd and alltoall
 * use them). Every member must switch before its next ring collective.
 */
void hk_ring_use_shm(hk_ring *ring, hk_shm_group *g);

/**
 * The allreduce of a fused batch in place, without a fusion buffer: the
 * logical buffer (segment offsets seg[0..n], elements) is made of the
 * npieces runs `pieces` (collectives/shm_group.h: sorted, none empty,
 * covering [0, seg[n]) exactly), each the part of one tensor's sendbuf
 * and recvbuf that the fusion layout (coordinator/fusion.h) puts there.
 * The engine reads and writes the tensors where they are, so a batch
 * costs what one tensor of its size costs, and the bits are those of the
 * same batch through a fusion buffer. Only for a ring switched to shm
 * (hk_ring_use_shm) of more than one rank. Errors: as hk_shm_group_run.
 */
hk_status hk_ring_shm_allreduce_pieces(hk_ring *ring,
                                       const hk_shm_piece *pieces,
                                       size_t npieces, const size_t *seg,
                                       hk_dtype dtype, hk_op op,
                                       const hk_ring_finish *fin);

#endif
