/*
 * background.h - the background thread of a worker: the only thread that
 * touches the network. Each cycle it sends the tensors trainer threads
 * queued since the last cycle to rank 0 (rank 0 feeds its negotiator
 * directly), and runs, in the order rank 0 sends them, the responses:
 * collectives on the ring, mismatches completed as errors, and a shutdown
 * when any rank called hk_shutdown. A launcher ABORT, a lost peer or a
 * failed transfer fails every pending handle and ends the loop.
 */
#ifndef HK_WORKER_BACKGROUND_H
#define HK_WORKER_BACKGROUND_H

#include "worker/context.h"

/** pthread entry point; arg is the hk_ctx. Returns NULL. */
void *hk_background_main(void *arg);

#endif
