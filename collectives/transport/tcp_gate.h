/*
 * tcp_gate.h - the accepting side of hk's TCP connections: every
 * connection proves it knows the job's secret (common/auth.h) before it
 * is handed out, and nobody without it can keep the job from starting.
 *
 * Handshakes run concurrently: one poll(2) watches the listening socket
 * and every pending handshake, so a connection that says nothing (anyone
 * on the host can see a listening port in /proc/net/tcp and connect)
 * holds up nobody. Each has GATE_AUTH_S (2 s) to send its proof, at most
 * HK_TCP_GATE_PENDING - 1 are pending (a new one drops the oldest, with a
 * reset: a peer caught in a burst connects again, hk_tcp_connect), and a
 * failed accept(2) (EMFILE: the descriptor limit) is logged naming the
 * error, drops the oldest pending one to free a descriptor and accepting
 * goes on. Every refusal says why: "bad secret", "closed before
 * authenticating", "timed out authenticating", "dropped unauthenticated
 * (N pending, the most)"; the lines are rate-limited per cause
 * (common/ratelog.h). Refusals never end the wait: only the caller's
 * deadline or the abort fd do.
 * Thread-safety: a gate is used by one thread at a time.
 */
#ifndef HK_TRANSPORT_TCP_GATE_H
#define HK_TRANSPORT_TCP_GATE_H

#include "common/auth.h"
#include "common/io.h"
#include "hk/hk.h"

/* Handshakes pending at once, at most. */
#define HK_TCP_GATE_PENDING 32

typedef struct hk_tcp_gate hk_tcp_gate;

/**
 * A gate over listen_fd (non-blocking, listening; still the caller's,
 * not closed by the gate). The secret is copied. Errors: HK_ERR_NOMEM.
 */
hk_status hk_tcp_gate_open(int listen_fd, const hk_secret *secret,
                           hk_tcp_gate **out);

/**
 * The next connection that proved the secret, before `deadline` (hk_now()
 * seconds): *fd is non-blocking, close-on-exec, TCP_NODELAY, the
 * handshake done; the caller owns it. Handshakes still pending stay in
 * the gate for the next call. Errors: HK_ERR_TIMEOUT ("timed out waiting
 * for peers to connect", saying how many were refused), HK_ERR_PEER_LOST
 * (io->abort_fd became readable), HK_ERR_SYSTEM (accept or poll failed
 * for another reason than a full descriptor table or an aborted
 * connection, e.g. the listening socket was shut down).
 */
hk_status hk_tcp_gate_accept(hk_tcp_gate *g, double deadline, const hk_io *io,
                             int *fd);

/** Connections the gate refused so far (any cause). */
int hk_tcp_gate_refused(const hk_tcp_gate *g);

/**
 * Closes the pending handshakes and any authenticated connection not
 * handed out, writes the counts of suppressed log lines, frees g. NULL is
 * a no-op.
 */
void hk_tcp_gate_close(hk_tcp_gate *g);

#endif
