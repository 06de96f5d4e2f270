/*
 * ctrl.h - a control endpoint: the byte stream between rank 0 and one
 * other rank that carries the negotiation's framed messages
 * (coordinator/channel.h frames them; this layer moves bytes only). Two
 * kinds, each one file behind one table of operations:
 *
 *  - tcp (ctrl_tcp.c): the control socket itself (worker/bootstrap.c):
 *    bytes, liveness (EOF or a reset: the peer died; TCP keepalive) and
 *    readiness all come from poll(2) on it;
 *  - shm (ctrl_shm.c): between rank 0 and a rank of rank 0's host, one
 *    single-producer single-consumer byte ring per direction in the
 *    host's segment (shm_seg.h: hk_shm_seg_ctrl_ring), the same ring
 *    protocol as the shm link (link_shm.c). The socket stays for
 *    liveness (EOF/HUP, keepalive) and as the doorbell: a reader about
 *    to sleep in poll(2) sets its ring's reader flag (hk_ctrl_arm); a
 *    writer that published bytes and finds the flag set clears it and
 *    writes one byte to the socket (shm_wait.h's hk_shm_wake_flag with
 *    HK_SHM_SLEEP_SOCKET); the reader discards such bytes
 *    (hk_ctrl_polled). A reader that polls (the wait policy's budget,
 *    common/waiter.h) sees ring bytes directly (hk_ctrl_pending). A
 *    sender whose frame is larger than the ring's free space writes what
 *    fits and waits for room while it moves what its peer sends it into
 *    a private stash (read first by its next receive), so two ranks that
 *    send to each other at once cannot deadlock.
 *
 * A waiting loop over several endpoints (worker/background.c) uses them
 * alike: hk_ctrl_pending before it sleeps; hk_ctrl_arm(1), pending again,
 * poll(2) on hk_ctrl's fd, hk_ctrl_arm(0); then hk_ctrl_polled on each
 * endpoint's revents says whether a frame's bytes can be read.
 *
 * Lengths are bytes. Thread-safety: an endpoint is used by one thread at
 * a time (hk_init's, then the background thread's); the frame counters
 * may be read by any thread. The two ends of an shm endpoint are
 * different processes (or threads, in the unit tests).
 */
#ifndef HK_TRANSPORT_CTRL_H
#define HK_TRANSPORT_CTRL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/transport/shm_seg.h"
#include "common/io.h"
#include "hk/hk.h"

typedef struct hk_ctrl hk_ctrl;

/** A kind of control endpoint (ctrl_tcp.c, ctrl_shm.c). */
typedef struct hk_ctrl_ops {
  const char *name; /* "tcp", "shm" */
  /* sends n bytes whole (blocking, honouring io) */
  hk_status (*send)(hk_ctrl *c, const void *p, size_t n, const hk_io *io,
                    const char *who);
  /* receives n bytes whole (blocking, honouring io) */
  hk_status (*recv)(hk_ctrl *c, void *p, size_t n, const hk_io *io,
                    const char *who);
  /* 1 when bytes can be read now without asking the kernel */
  int (*pending)(hk_ctrl *c);
  /* on = 1: about to sleep in poll(2) on fd; 0: awake again */
  void (*arm)(hk_ctrl *c, int on);
  /* poll(2) gave revents on fd: *readable = a frame can be read */
  hk_status (*polled)(hk_ctrl *c, short revents, int *readable,
                      const char *who);
  /* the most bytes this side can have in flight unread without blocking */
  size_t (*room)(hk_ctrl *c, size_t want);
  void (*free_state)(hk_ctrl *c);
} hk_ctrl_ops;

/** One control endpoint (the caller's; hk_ctrl_init_* / hk_ctrl_close). */
struct hk_ctrl {
  const hk_ctrl_ops *ops; /* NULL: none */
  int fd;      /* the control socket (borrowed: its owner closes it) */
  void *state; /* the kind's */
  _Atomic uint64_t frames_sent, frames_received; /* coordinator/channel.c */
};

/** Makes *c (zeroed, or closed) a tcp endpoint over socket fd
 *  (borrowed). Never fails. */
void hk_ctrl_init_tcp(hk_ctrl *c, int fd);

/**
 * Makes *c an shm endpoint between local rank 0 and local rank j of seg
 * (1 <= j < n; me_zero: this side is local rank 0), over the segment's
 * control rings (hk_shm_seg_ctrl_ring), with socket fd (borrowed) for
 * liveness and doorbells; the frame counters are kept. Call when nothing
 * is in flight on the socket, on both sides (worker/intra.c). Errors:
 * HK_ERR_INVALID_ARG (the segment has no control rings, j out of range),
 * HK_ERR_NOMEM; *c is then unchanged.
 */
hk_status hk_ctrl_init_shm(hk_ctrl *c, const hk_shm_seg *seg, int j,
                           int me_zero, int fd);

/** Frees the kind's state (not the socket); safe twice and on a zeroed
 *  endpoint. */
void hk_ctrl_close(hk_ctrl *c);

/** "tcp", "shm" or "none". */
const char *hk_ctrl_kind(const hk_ctrl *c);

/** Sends n bytes whole. Errors: HK_ERR_PEER_LOST ("rank 3 closed the
 *  connection", or the launcher's abort), HK_ERR_TIMEOUT (io->timeout_s
 *  without progress), HK_ERR_SYSTEM (poll). */
hk_status hk_ctrl_send(hk_ctrl *c, const void *p, size_t n, const hk_io *io,
                       const char *who);

/** Receives n bytes whole. Errors: as hk_ctrl_send. */
hk_status hk_ctrl_recv(hk_ctrl *c, void *p, size_t n, const hk_io *io,
                       const char *who);

/** 1 when bytes can be read now without poll(2) (shm: the ring or the
 *  stash holds some; tcp: never, poll says). */
int hk_ctrl_pending(hk_ctrl *c);

/** Before (on = 1) and after (0) sleeping in poll(2) on c->fd: shm sets
 *  and clears its ring's reader flag (seq_cst), so that a writer rings
 *  the socket; tcp does nothing. Test hk_ctrl_pending after arming. */
void hk_ctrl_arm(hk_ctrl *c, int on);

/**
 * After poll(2) on c->fd gave `revents` (0 too, for a pending shm ring):
 * *readable = 1 when a frame's bytes can be read. tcp: whenever revents
 * is not 0 (a receive reports EOF or a reset itself). shm: discards the
 * doorbell bytes; then the ring's bytes; the socket's EOF or error with
 * nothing left in the ring is HK_ERR_PEER_LOST ("rank 2 closed the
 * connection").
 */
hk_status hk_ctrl_polled(hk_ctrl *c, short revents, int *readable,
                         const char *who);

/**
 * Waits up to timeout_s for bytes to read (the late-stop wait of
 * worker/background.c). Returns 1 when there are, 0 on timeout, EOF or
 * any failure (nothing is reported).
 */
int hk_ctrl_wait_readable(hk_ctrl *c, double timeout_s);

/** The most bytes this side may have in flight, unread by the peer,
 *  before a send blocks: tcp: asks the kernel for a send buffer of `want`
 *  and returns what it granted (0: unknown; the failure is logged at
 *  debug level); shm: the outgoing ring's size. */
size_t hk_ctrl_room(hk_ctrl *c, size_t want);

#endif
