/*
 * tcp.h - hk's TCP transport: listening, connecting with the secret
 * handshake (common/auth.h), blocking byte I/O (what the control channel,
 * coordinator/channel.h, frames its messages over), and the non-blocking
 * primitives the ring uses to keep a send to the right neighbour and a
 * receive from the left neighbour in flight together.
 *
 * Every wait here also watches the launcher connection (hk_io.abort_fd):
 * when it becomes readable (hkrun sent ABORT, or hkrun died) the wait
 * returns HK_ERR_PEER_LOST, so no rank blocks on a dead job: at once,
 * unless a connection the wait reads from has bytes waiting, which are
 * read first (a peer that finished its part of a step, then failed or
 * left, has sent what this rank needs to complete that step).
 * Timeouts count from the last progress, in seconds (HK_TIMEOUT_S).
 * Thread-safety: a file descriptor is used by one thread at a time (the
 * background thread, or hk_init's bootstrap before it starts).
 */
#ifndef HK_TRANSPORT_TCP_H
#define HK_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"
#include "common/io.h"
#include "hk/hk.h"

/**
 * Listens on host (numeric IPv4, e.g. "127.0.0.1") at an ephemeral port.
 * *fd is non-blocking and close-on-exec; *port is in host order.
 * Errors: HK_ERR_SYSTEM naming the call.
 */
hk_status hk_tcp_listen(const char *host, int *fd, uint16_t *port);

/**
 * Connects to host:port, retrying refused connections until `deadline`
 * (hk_now() seconds, common/clock.h), then runs the client half of the
 * secret handshake, again (until the deadline) when the server resets the
 * connection during it (a server flooded with connections that never
 * authenticate drops the oldest so: tcp_gate.h).
 * `who` names the peer in messages ("rank 0", "hkrun").
 * Errors: HK_ERR_TIMEOUT, HK_ERR_AUTH (the peer failed to prove the
 * secret), HK_ERR_SYSTEM, HK_ERR_PEER_LOST.
 */
hk_status hk_tcp_connect(const char *host, uint16_t port,
                         const hk_secret *secret, double deadline,
                         const hk_io *io, const char *who, int *fd);

/**
 * Accepts one connection on listen_fd before `deadline` and runs the server
 * half of the handshake. A connection that fails the handshake is closed
 * (counted in *refused if not NULL, logged) and accepting continues.
 * Errors: HK_ERR_TIMEOUT, HK_ERR_SYSTEM, HK_ERR_PEER_LOST.
 */
hk_status hk_tcp_accept(int listen_fd, const hk_secret *secret, double deadline,
                        const hk_io *io, int *fd, int *refused);

/**
 * Makes the kernel notice a peer that stopped answering (its host died,
 * its link was cut) within about timeout_s seconds (clamped to [1, 86400]),
 * also on a connection that is idle because this rank waits for the peer
 * to have something to say: TCP keepalive probes after timeout_s/4 of
 * silence, every timeout_s/8 (both at least 1 s), and TCP_USER_TIMEOUT so
 * that probes or data unacknowledged for timeout_s end the connection. A
 * wait on it then wakes and the read fails with ETIMEDOUT
 * (HK_ERR_PEER_LOST, "lost connection to rank 4: Connection timed out").
 * A live peer's kernel answers the probes however busy its process is, so
 * a slow rank is never mistaken for a dead one.
 * Errors: HK_ERR_SYSTEM naming the socket option.
 */
hk_status hk_tcp_set_liveness(int fd, double timeout_s);

/**
 * Asks for a send buffer of `bytes` (SO_SNDBUF; the kernel caps it at
 * net.core.wmem_max and doubles it). A connection that carries short
 * request/answer exchanges keeps the small buffer it started with (16 KiB
 * on Linux), and a larger message then waits for the peer's delayed ACKs,
 * milliseconds each; negotiation messages of thousands of tensors need
 * room for a whole message. `granted`, if not NULL, is lowered to the
 * send buffer the kernel gave (SO_SNDBUF read back, bytes, its doubled
 * figure) when that is smaller or *granted is 0: over several sockets it
 * ends as the smallest. Errors: HK_ERR_SYSTEM.
 */
hk_status hk_tcp_set_send_buffer(int fd, size_t bytes, size_t *granted);

/** Sends all n bytes. Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT. */
hk_status hk_tcp_send_all(int fd, const void *p, size_t n, const hk_io *io,
                          const char *who);

/** Receives exactly n bytes. Errors as hk_tcp_send_all. */
hk_status hk_tcp_recv_all(int fd, void *p, size_t n, const hk_io *io,
                          const char *who);

/**
 * Sends sn bytes on send_fd while receiving rn bytes on recv_fd, both in
 * flight together (the fds may be equal). Errors: HK_ERR_PEER_LOST,
 * HK_ERR_TIMEOUT naming the peer (send_who / recv_who).
 */
hk_status hk_tcp_exchange(int send_fd, const void *sp, size_t sn, int recv_fd,
                          void *rp, size_t rn, const hk_io *io,
                          const char *send_who, const char *recv_who);

/**
 * Non-blocking send of up to n bytes; *done gets the count (0 if the
 * socket is full). Errors: HK_ERR_PEER_LOST (reset/closed).
 */
hk_status hk_tcp_send_some(int fd, const void *p, size_t n, size_t *done,
                           const char *who);

/**
 * Non-blocking receive of up to n bytes; *done gets the count (0 if none
 * is waiting). EOF is HK_ERR_PEER_LOST ("<who> closed the connection").
 */
hk_status hk_tcp_recv_some(int fd, void *p, size_t n, size_t *done,
                           const char *who);

/**
 * Waits until send_fd is writable (if want_send) or recv_fd is readable
 * (if want_recv), or abort_fd fires, or io->timeout_s passes.
 * Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT, HK_ERR_SYSTEM.
 */
hk_status hk_tcp_wait(int send_fd, int want_send, int recv_fd, int want_recv,
                      const hk_io *io, const char *what);

/** Waits for any of fds[0..n) to be readable; *ready gets its index.
 *  Errors as hk_tcp_wait. */
hk_status hk_tcp_wait_any(const int *fds, int n, const hk_io *io,
                          const char *what, int *ready);

/** shutdown(2) both directions: a blocked peer read sees EOF, a thread
 *  waiting to accept on a listening fd wakes with an error. */
void hk_tcp_shutdown(int fd);

/** Closes *fd if >= 0 and sets it to -1. */
void hk_tcp_close(int *fd);

#endif
