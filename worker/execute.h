/*
 * execute.h - running what rank 0 scheduled: the responses of one round
 * (one RESPONSES message), identical on every rank. Failed negotiations
 * complete at once; the rest are grouped by the fusion plan
 * (coordinator/fusion.h) and run on the ring: a group of several allreduces is
 * packed into the fusion buffer (segment by segment, applying each tensor's
 * prescale), reduced once, and unpacked (applying each postscale); a lone
 * tensor, and any allreduce over HK_FUSION_DIRECT_BYTES, runs straight on its
 * own buffers. A group of device allreduces is enqueued on hk's stream
 * and left in flight (worker/devflight.h: it completes when its device
 * work has); anything else first waits for the device batches in flight,
 * so handles complete in the order they ran. Uncached tensors that ran OK
 * enter the response cache, in response order, as on every other rank.
 * The observers (observe/observe.h) are told of the round, each tensor and
 * each batch as it goes. Background thread only.
 */
#ifndef HK_WORKER_EXECUTE_H
#define HK_WORKER_EXECUTE_H

#include "worker/context.h"

/**
 * Runs rs[0..n), responses of process set S (this rank a member; the
 * world: ctx->sets[0]) over S's ring, links, allreduce environment and
 * response cache (t_ready: when rank 0 made them ready, for the
 * observers).
 * Errors: HK_ERR_PROTOCOL (a response names a tensor this rank does not
 * have in flight, or an unknown cache bit), and what the ring returns
 * (HK_ERR_PEER_LOST, HK_ERR_TIMEOUT, HK_ERR_NOMEM): the job then fails.
 */
hk_status hk_execute_responses(hk_ctx *ctx, hk_set *S,
                               const hk_wire_response *rs, uint32_t n,
                               double t_ready);

/** Unmaps the fusion buffer, if it was mapped, and frees the working
 *  arrays kept between rounds. */
void hk_execute_release(hk_ctx *ctx);

#endif
