/*
 * background.h - the background thread of a worker: the only thread that
 * touches the network. It negotiates with rank 0, event-driven (the
 * protocol is written down in worker/background.c): a tensor a trainer
 * thread queues wakes it, goes to rank 0 as soon as this rank's previous
 * request has been answered, and runs, in the order rank 0 sends them, as
 * soon as every rank has submitted it: collectives on the ring,
 * mismatches completed as errors, a shutdown when any rank called
 * hk_shutdown. Tensors batch only while a request is in flight. A job of
 * one rank sends nothing. A launcher ABORT, a lost peer or a failed
 * transfer fails every pending handle and ends the loop. Idle, the thread
 * sleeps in poll(2) with no timeout (rank 0: until the stall inspector's
 * next check, or a held answer's HK_CYCLE_TIME_MS, when there is one).
 */
#ifndef HK_WORKER_BACKGROUND_H
#define HK_WORKER_BACKGROUND_H

#include "worker/context.h"

/** pthread entry point; arg is the hk_ctx. Returns NULL. */
void *hk_background_main(void *arg);

#endif
