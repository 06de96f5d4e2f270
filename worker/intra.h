/*
 * intra.h - shared memory among the ranks of one host
 * (HK_INTRA_TRANSPORT=auto|shm|tcp), set up at hk_init once the TCP mesh
 * is up:
 *
 *  1. every rank tells each other rank of its host its HK_INTRA_TRANSPORT
 *     over their TCP link; a difference fails hk_init on both, naming the
 *     setting and the two values (ranks that disagree would otherwise
 *     wait on different transports for ever);
 *  2. shm or auto: the host's first rank (its lowest rank, the "leader")
 *     creates the segment (collectives/transport/shm_seg.h) without a
 *     name (O_TMPFILE in /dev/shm), mode 0600, sized for the host's ranks
 *     (HK_SHM_SLOT_BYTES slots, HK_SHM_LINK_BYTES rings) and sends its
 *     pid and descriptor; the others open it through
 *     /proc/<pid>/fd/<fd>, map it and answer; once all have, the leader
 *     tells everyone to go. The segment never has a name, so nothing of
 *     the job is in /dev/shm at any moment of the set-up or after,
 *     whatever happens to any process (kill -9 of a rank or of hkrun
 *     included). If any step fails, auto falls back to TCP on the whole
 *     host (said at info level), shm fails hk_init saying why (ranks of
 *     one host in different PID namespaces cannot open the leader's
 *     descriptor: they stay on TCP);
 *  3. go: the TCP link to each rank of the host becomes an shm link
 *     (collectives/transport/link.h), keeping its first socket open for
 *     liveness; rd and alltoall use them as they are, and so does a
 *     ring with members on other hosts;
 *     On rank 0's host, the control endpoints between rank 0 and the
 *     others move onto the segment's control rings (ctrl.h), keeping
 *     their sockets for liveness and doorbells;
 *  4. hk_intra_attach_ring: a ring whose members are all on this host
 *     (the flat ring of a one-host job, hierarchical's local ring) runs
 *     through the single-copy engine (collectives/shm_ring.h).
 *
 * Thread-safety: hk_init's thread (setup), then the background thread.
 */
#ifndef HK_WORKER_INTRA_H
#define HK_WORKER_INTRA_H

#include "worker/context.h"

/* Bytes of one shm link's ring per direction: 4 of the ring's default
 * 1 MiB chunk cut in sixteenths, so a rank writes while its peer reads
 * without the pair waiting on each other at every call. */
#define HK_SHM_LINK_BYTES ((size_t)256 << 10)

/**
 * Steps 1-3 above (ctx->mesh and ctx->layout built). Sets ctx->intra
 * (NULL when this rank uses no shared memory). Errors: HK_ERR_CONFIG
 * (HK_INTRA_TRANSPORT differs between ranks of a host; shm impossible
 * with HK_INTRA_TRANSPORT=shm: the message says why), HK_ERR_PEER_LOST,
 * HK_ERR_TIMEOUT (a rank of the host vanished during the set-up),
 * HK_ERR_NOMEM.
 */
hk_status hk_intra_setup(hk_ctx *ctx);

/**
 * If shared memory is in use and every member of `ring` is on this host
 * (members[p]: the job rank at ring position p, ring->size entries),
 * makes the ring run through it (step 4). At most one ring per host
 * (the members' progress counters are shared): a second is left on its
 * links. Errors: HK_ERR_NOMEM.
 */
hk_status hk_intra_attach_ring(hk_ctx *ctx, hk_ring *ring, const int *members);

/** Frees the group and unmaps the segment (after the links are closed;
 *  safe when nothing was set up). */
void hk_intra_destroy(hk_ctx *ctx);

#endif
