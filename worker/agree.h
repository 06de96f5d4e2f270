/*
 * agree.h - the settings every rank must share, checked at hk_init.
 *
 * Each rank plans fusion, fills its response cache and picks every
 * allreduce's algorithm by itself, from its own settings and the same
 * responses; ranks that disagree would run different collectives on the
 * same tensor (wrong sums or a hang, not an error). So once the ring is
 * up, every rank allgathers a record of what it decided (the allreduce
 * algorithm settings and model, the fusion threshold and direct size, the
 * cache capacity, the transport inside hosts (HK_INTRA_TRANSPORT,
 * HK_SHM_SLOT_BYTES), the flat ring's order) and compares each
 * field with rank 0's; any difference fails hk_init on EVERY rank with the same
 * message naming the setting, both values and the first rank that differs.
 */
#ifndef HK_WORKER_AGREE_H
#define HK_WORKER_AGREE_H

#include "worker/context.h"

/**
 * Collective over ctx->ring (every rank calls it in hk_init, after
 * hk_algo_setup and before the background thread starts).
 * Errors: HK_ERR_CONFIG ("HK_ALLREDUCE_ALGO differs between ranks: rank 0
 * has 'auto', rank 1 has 'ring': every rank must use the same value"),
 * and the ring's errors (HK_ERR_PEER_LOST, HK_ERR_TIMEOUT, HK_ERR_NOMEM).
 */
hk_status hk_agree_settings(hk_ctx *ctx);

#endif
