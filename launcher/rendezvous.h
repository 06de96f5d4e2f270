/*
 * rendezvous.h - hkrun's rendezvous server: where workers learn each
 * other's addresses and hear about failures.
 *
 * A libuv TCP server on 127.0.0.1, ephemeral port. Per connection:
 *   1. the handshake of common/auth.h: we send nonce_s, read exactly
 *      HK_AUTH_CLIENT_MSG_LEN bytes (nothing more before the check), and
 *      answer proof_s, or log "refused a connection from <addr>: bad
 *      secret" and close. A connection that has not authenticated within
 *      HK_RDV_AUTH_TIMEOUT_MS is closed too.
 *   2. frames of coordinator/wire.h. The worker sends one HK_MSG_REGISTER
 *      {rank, size, pid, port, host}; rank must be in [0, size), size must
 *      be the job's size and the rank not yet registered, else a warning
 *      names the problem and the connection is closed.
 *   3. when every rank has registered, each gets one HK_MSG_PEERS frame
 *      with {host, port} of every rank (index = rank).
 *   4. the connection stays open for the whole job; hkrun sends
 *      HK_MSG_ABORT on it when the job fails (hk_rdv_abort). A worker that
 *      registers after the abort gets the abort frame at once.
 * A worker that never connects is fine: the rendezvous simply never
 * completes. A registered worker that disconnects before completion is
 * forgotten, so it may register again.
 *
 * Thread-safety: every function runs on the loop's thread.
 */
#ifndef HK_LAUNCHER_RENDEZVOUS_H
#define HK_LAUNCHER_RENDEZVOUS_H

#include <stdint.h>
#include <uv.h>

#include "common/auth.h"
#include "hk/hk.h"

/** How long a connection may take to authenticate, in milliseconds. */
#define HK_RDV_AUTH_TIMEOUT_MS 10000
/** Largest frame payload the rendezvous accepts, in bytes. */
#define HK_RDV_MAX_PAYLOAD (64u * 1024u)

typedef struct hk_rdv hk_rdv;

/**
 * Starts listening on 127.0.0.1 (ephemeral port) for a job of `size`
 * ranks. *secret is copied. On HK_OK *out is the server (closed and freed
 * by hk_rdv_close) and *port its port (host byte order).
 * Errors: HK_ERR_NOMEM, HK_ERR_SYSTEM (bind/listen failed; message names
 * the call and the libuv error).
 */
hk_status hk_rdv_start(uv_loop_t *loop, int size, const hk_secret *secret,
                       hk_rdv **out, uint16_t *port);

/**
 * Tells every registered worker except `failed_rank` that the job failed:
 * sends HK_MSG_ABORT {failed_rank, exit_code, signal, reason} (reason is
 * copied, truncated to HK_WIRE_MAX_REASON_LEN bytes). failed_rank -1 means
 * no rank (e.g. hkrun was signalled). Only the first call has an effect;
 * r NULL or closing is ignored.
 * Sending is asynchronous; failures are logged, not returned.
 */
void hk_rdv_abort(hk_rdv *r, int failed_rank, int exit_code, int signal,
                  const char *reason);

/**
 * Closes the server and every connection (pending writes are cancelled).
 * r is freed once libuv has closed its handles, during uv_run; do not use
 * it after this call. NULL is ignored.
 */
void hk_rdv_close(hk_rdv *r);

#endif
