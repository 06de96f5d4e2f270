/*
 * rings.h - the rings of a job, built at hk_init from the mesh and the
 * host layout:
 *  - the flat ring over every rank: each host's ranks together (hosts in
 *    cross_rank order, ranks of a host by local rank), so the ring crosses
 *    each host boundary once; with HK_TOPO_FILE (like NCCL_TOPO_FILE) the
 *    ranks of every host follow the ring topology/ring.c finds over that
 *    server's GPUs, local rank r driving GPU r (hosts must then hold the
 *    same number of ranks; otherwise rank order is kept, with a warning);
 *  - for hierarchical allreduce, when there are several hosts of the same
 *    number (> 1) of ranks: the local ring (this host's ranks, in their
 *    flat-ring order) and the cross ring (the ranks at the same local
 *    position on every host, in host order).
 * Error messages name neighbours by their rank in the job.
 */
#ifndef HK_WORKER_RINGS_H
#define HK_WORKER_RINGS_H

#include "worker/context.h"

/**
 * Sets up ctx->ring, and ctx->local_ring/cross_ring with ctx->have_hier.
 * Needs ctx->layout and ctx->mesh. Errors: HK_ERR_CONFIG (HK_TOPO_FILE
 * unusable; the message names the file and line), HK_ERR_NOMEM.
 */
hk_status hk_rings_setup(hk_ctx *ctx);

/**
 * Sets up s->own_ring, process set s's ring (this rank a member): its
 * members in the flat ring's order, so it keeps the flat ring's host
 * boundaries and topology order, over the mesh's links to them (shared
 * memory links inside a host, TCP across: the host's single-copy engine
 * belongs to the flat or local ring, worker/intra.h). Its ranks are set
 * ranks (a broadcast's root, an allgather's blocks); messages name
 * neighbours by their rank in the job. Errors: HK_ERR_NOMEM.
 */
hk_status hk_rings_set(hk_ctx *ctx, hk_set *s);

/** Frees what hk_rings_setup set up (safe on a partly set up ctx). */
void hk_rings_destroy(hk_ctx *ctx);

#endif
