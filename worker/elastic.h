/*
 * elastic.h - a worker's side of an elastic job (hkrun --min-np;
 * docs/elastic.md): hkrun's word on the rendezvous connection, and
 * registering again for the next generation (launcher/rendezvous.h says
 * how generations form). The model is Horovod Elastic's: a lost worker
 * ends the generation, the survivors roll back to their commit and
 * re-form without restarting (horovod/common/elastic.py,
 * horovod/runner/elastic/driver.py).
 */
#ifndef HK_WORKER_ELASTIC_H
#define HK_WORKER_ELASTIC_H

#include "worker/context.h"

/**
 * Waits up to wait_s seconds for a message from hkrun on
 * ctx->mesh.launcher_fd and reads it: HK_MSG_RESET gives
 * *st = HK_ERR_RANKS_CHANGED and reason "rank R ... : the elastic job
 * re-forms without it (restore the last commit and call
 * hk_elastic_reset)"; HK_MSG_ABORT gives HK_ERR_PEER_LOST and hkrun's
 * reason. Returns 1 when one of those was read (*st and reason[cap] set),
 * 0 otherwise (nothing came, hkrun closed the connection, or another
 * message; *st and reason untouched). Background thread, or the one
 * thread left after it stopped.
 */
int hk_elastic_hkrun_word(hk_ctx *ctx, double wait_s, hk_status *st,
                          char *reason, size_t cap);

/**
 * Elastic jobs (ctx->cfg.elastic): st is how connecting or starting the
 * job failed; when it is one a lost peer causes (HK_ERR_PEER_LOST,
 * HK_ERR_TIMEOUT, or HK_ERR_AUTH: a peer that moves to the next
 * generation closes the connections it was accepting mid-handshake, which
 * reads as a refused proof), hkrun's word (hk_elastic_hkrun_word, waited
 * for up to HK_TIMEOUT_S) says more: returns its status, the word set as
 * the last error. Otherwise (a static job, another status, or no word)
 * returns st unchanged, the last error kept. Thread-safety: as
 * hk_elastic_hkrun_word.
 */
hk_status hk_elastic_explain(hk_ctx *ctx, hk_status st);

/**
 * This worker's place in a generation's peer list (an HK_MSG_PEERS):
 * ctx->rank = the index of my_host:my_port in it, ctx->size = its length.
 * peers is borrowed. Thread-safety: as hk_elastic_register.
 * Errors: HK_ERR_PROTOCOL (the address is not in the list).
 */
hk_status hk_elastic_place(hk_ctx *ctx, const hk_msg *peers,
                           const char *my_host, uint16_t my_port);

/**
 * Registers this worker again with hkrun (REGISTER {slot, slots, pid,
 * my_port, my_host} on ctx->mesh.launcher_fd) and waits, until deadline
 * (hk_now() seconds), for the next generation's peer list; a RESET read
 * meanwhile (a loss before it formed) makes it register again. On HK_OK
 * *peers (caller frees with hk_msg_free) is the list, and ctx->rank and
 * ctx->size are this worker's new rank (the index of my_host:my_port in
 * it) and the list's length.
 * Thread-safety: the one thread of a worker with no background thread
 * running (hk_init, hk_elastic_reset).
 * Errors: HK_ERR_PEER_LOST (hkrun aborted the job, with its reason; or
 * closed the connection), HK_ERR_TIMEOUT, HK_ERR_PROTOCOL (an unexpected
 * message, or our address missing from the list), HK_ERR_SYSTEM.
 */
hk_status hk_elastic_register(hk_ctx *ctx, const char *my_host,
                              uint16_t my_port, double deadline, hk_msg *peers);

#endif
