/*
 * link.h - hk_link: one full-duplex byte stream to one peer rank, the
 * thing the rings (collectives/ring.h), recursive doubling and alltoall
 * send to their peers over. Three kinds, each one file with its own state
 * behind a table of operations (link_tcp.c, link_shm.c, link_mpi.c; the
 * table is link_impl.h's hk_link_ops; docs/design.md: variants are tables
 * of operations); link.c dispatches and waits through the table alone:
 *
 * TCP, striped over k sockets (k = HK_SOCKETS_PER_PEER, 1..8). With
 *   k = 1 the link is the one connection and every call is the plain
 *   hk_tcp_* call on it (no copy, no extra system call). With k > 1 the
 *   stream is cut into blocks of `block` bytes (HK_LINK_BLOCK_BYTES in
 *   the runtime): byte o of the stream travels on socket (o / block) mod
 *   k, in each direction independently, so both ends know where every
 *   byte is without any header. A call moves bytes in stream order: it
 *   writes (reads) the rest of the current block on its socket, moves to
 *   the next socket, and stops at the first socket that is full (empty).
 *   The kernel buffers of the k sockets keep k streams in flight.
 *
 * MPI, point-to-point with MPI_Isend/MPI_Irecv on hk's duplicate of
 *   MPI_COMM_WORLD (worker/mpi_exchange.h), tag HK_LINK_MPI_TAG; the MPI
 *   calls are in the MPI module (collectives/transport/mpi/link.c). Sends
 *   go straight from the caller's memory as messages of at most `chunk`
 *   bytes, up to HK_LINK_MPI_DEPTH in flight; a byte counts as sent
 *   ("done") once its MPI_Isend is posted, so the caller must leave it
 *   unchanged until hk_link_drain() has returned (the ring drains before
 *   it returns: buffers are the user's), or until hk_link_released()
 *   counts it. The receiver cannot know how large the sender's next
 *   message is (a send covers whatever the caller had ready), so it keeps
 *   HK_LINK_MPI_DEPTH receives of `chunk` bytes posted into buffers the
 *   link owns (allocated on first use), learns each message's length with
 *   MPI_Get_count, and copies out what the caller asks for; MPI's
 *   non-overtaking rule (same source, tag and communicator) keeps the
 *   stream in order. Both ends must use the same chunk (the runtime uses
 *   the constant HK_LINK_MPI_CHUNK_BYTES); a larger message than the
 *   receiver's chunk fails with HK_ERR_PROTOCOL. MPI only progresses
 *   inside MPI calls: waits on an MPI link spin (MPI_Test, and poll(2)
 *   with no timeout for the other sides and the abort fd), yielding the
 *   CPU between rounds, and test every MPI link they are given, whichever
 *   side they wait for (a rank waiting on its TCP side must still push
 *   out its MPI sends, or a ring that crosses hosts deadlocks).
 *   Acknowledgements: a completed MPI_Isend does not mean the bytes have
 *   left this process (Open MPI's TCP transport may still hold a queued
 *   fragment, or the FIN of a large message, and moves it only inside a
 *   later MPI call). So the receiver answers every message it receives
 *   with a 0-byte message (tag HK_LINK_MPI_ACK_TAG), and hk_link_drain
 *   returns only once every message sent was acknowledged and this
 *   link's own acknowledgements have completed: a rank that leaves a
 *   collective leaves nothing its peers still wait for.
 *
 * SHM, between two ranks of one host (collectives/transport/link_shm.c):
 *   each direction is a single-producer single-consumer byte ring in the
 *   host's shared segment (collectives/transport/shm_seg.h); a send
 *   copies into the ring, a receive copies out, no system call unless the
 *   other side sleeps. The pair's TCP connection stays open beside it:
 *   a hang-up there is how a waiter learns that the peer died, and mixed
 *   waits use it as a doorbell (below). A byte counts as sent once it is
 *   in the ring, so hk_link_drain has nothing to wait for.
 *
 * Waits (hk_link_wait) take the send side of one link and the receive
 * side of another, of any kinds. How they sleep depends on the mix:
 *   - any MPI link: the MPI spin described above (shm sides are tested
 *     in the same loop, their sockets polled for hang-ups);
 *   - TCP and shm: poll(2) on the TCP sockets and the shm pairs' sockets;
 *     the shm sides are armed with HK_SHM_SLEEP_SOCKET, so their writer
 *     wakes us with one byte on the pair's connection (discarded);
 *   - shm only: spin briefly, yield, then sleep on this rank's futex
 *     doorbell with liveness checks (collectives/transport/shm_wait.h).
 *
 * Every wait honours hk_io: abort_fd readable is HK_ERR_PEER_LOST (once
 * nothing the wait reads from has bytes waiting: what a peer sent before
 * it failed is read first), no
 * progress for io->timeout_s seconds is HK_ERR_TIMEOUT, and the message
 * names the peers waited for ("... no progress receiving from rank 3").
 * Lengths are in bytes. A link's `name` ("rank 3") appears in messages.
 *
 * Thread-safety: a link is used by one thread at a time (hk_init's
 * bootstrap, then the background thread). An MPI link needs MPI at
 * MPI_THREAD_SERIALIZED or better when that thread is not the one that
 * initialised MPI (the runtime checks; worker/bootstrap.c). A link may be
 * used as both the send and the receive side of one wait (2 ranks).
 */
#ifndef HK_TRANSPORT_LINK_H
#define HK_TRANSPORT_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/transport/shm_seg.h"
#include "collectives/transport/tcp.h"
#include "hk/hk.h"

#define HK_LINK_MAX_SOCKETS 8 /* HK_SOCKETS_PER_PEER's upper bound */

/* The runtime's stripe block. Large enough that a block costs one
 * send(2)/recv(2) of a size where loopback TCP is at its peak (the ring
 * hands the link HK_RING_CHUNK_BYTES = 1 MiB at a time; 256 KiB keeps the
 * extra system calls to 4 per MiB), small enough that one ring chunk is
 * spread over 4 sockets, and over all 8 from 2 MiB. */
#define HK_LINK_BLOCK_BYTES ((size_t)256 << 10)

/* The runtime's MPI message size: hk's ring chunk default (1 MiB). */
#define HK_LINK_MPI_CHUNK_BYTES ((size_t)1 << 20)
#define HK_LINK_MPI_DEPTH 4        /* messages in flight per direction */
#define HK_LINK_MPI_TAG 0x484b     /* "HK": the stream's messages */
#define HK_LINK_MPI_ACK_TAG 0x484c /* "HL": their acknowledgements */

struct hk_link_ops; /* a kind's operations (link_impl.h) */

/** What every kind of link has; the kind's own state is behind `state`.
 *  A zeroed link is closed. */
typedef struct hk_link {
  const struct hk_link_ops *ops; /* the kind; NULL when closed (or this
                                    rank's own entry) */
  void *state;                   /* the kind's (owned by the link) */
  int peer;                      /* the peer's rank */
  char name[32];                 /* "rank 3", for messages */
  uint64_t sent_total; /* stream bytes hk_link_send_some took so far */
} hk_link;

/**
 * A link over k connected stream sockets to rank `peer` (fds[0..k), taken
 * over by the link: hk_link_close closes them; they are made
 * non-blocking). The other end must pass its ends in the same order and
 * the same block. block is ignored when k == 1.
 * Errors: HK_ERR_INVALID_ARG (k outside 1..HK_LINK_MAX_SOCKETS, block 0),
 * HK_ERR_NOMEM. Like every constructor here, a failed call leaves the
 * link closed (hk_link_close is safe on it) and takes nothing over.
 */
hk_status hk_link_init_tcp(hk_link *link, int peer, const int *fds, int k,
                           size_t block);

/**
 * An MPI link to `peer` (its rank in the communicator) on the MPI_Comm at
 * `comm` (a pointer to it: worker/mpi_exchange.h's hk_mpi_comm_handle();
 * copied). Messages of at most chunk bytes (1..INT_MAX). MPI must be
 * initialised. Errors: HK_ERR_CONFIG (libhk built without MPI: "this libhk
 * was built without MPI"), HK_ERR_INVALID_ARG, HK_ERR_NOMEM.
 */
hk_status hk_link_init_mpi(hk_link *link, int peer, const void *comm,
                           size_t chunk);

/**
 * A shared-memory link between local ranks `me` and `them` of the mapped
 * segment seg (collectives/transport/shm_seg.h; it must outlive the
 * link), to job rank `peer`; fd is a connected TCP socket to the same
 * peer, taken over by the link (closed by hk_link_close): its hang-up is
 * how waits learn that the peer died. Both ends must use the same segment.
 * Errors: HK_ERR_INVALID_ARG (me/them out of range or equal), HK_ERR_NOMEM.
 */
hk_status hk_link_init_shm(hk_link *link, int peer, const hk_shm_seg *seg,
                           int me, int them, int fd);

/** The kind's name ("tcp", "mpi", "shm"; "none" for a closed link). */
const char *hk_link_kind_name(const hk_link *link);

/** 1 if the link is set up (a constructor succeeded and it is not
 *  closed), else 0. */
static inline int hk_link_is_open(const hk_link *link) {
  return link->ops != NULL;
}

/**
 * The link's i-th socket (i from 0), or -1 past the last: a TCP link's k
 * sockets in the order given, an shm link's pair connection; an MPI link
 * and a closed one have none. Socket 0 is a connection to the peer on
 * which its death shows (a hang-up); it is the link's: the caller may set
 * options on it or send on it while the link carries nothing, not close
 * it. Never fails.
 */
int hk_link_socket(const hk_link *link, int i);

/**
 * Carries a TCP link's stream over its first k sockets (1 to the sockets
 * it was made with) from the next byte on, in each direction: block i of
 * what follows travels on socket i mod k, block 0 starting afresh, as if
 * the link had just been made over those k (the rest stay open, idle).
 * Both ends must call it with the same k at the same point of the
 * stream: where every byte each side sent before has been received
 * (between two collectives that ran whole on both); elsewhere the stream
 * is garbled. How `hkrun --autotune` tries the sockets per peer on links
 * opened with more (worker/tune.h). Other kinds have one stream: a no-op.
 * Errors: HK_ERR_INVALID_ARG (k outside 1..the link's sockets, naming
 * the peer; the link is unchanged).
 */
hk_status hk_link_set_streams(hk_link *link, int k);

/**
 * The sockets a TCP link carries its stream over now (init's k, or
 * hk_link_set_streams's), and in *open the sockets it has; 0 and 0 for
 * other kinds and a closed link. Never fails.
 */
int hk_link_streams(const hk_link *link, int *open);

/**
 * Closes the link but keeps its socket 0 (hk_link_socket), which the
 * caller now owns: how a TCP link to a rank of this host becomes an shm
 * link over its first connection (worker/intra.c). Returns the socket, or
 * -1 when the link has none (it is closed all the same). Never fails.
 */
int hk_link_take_socket(hk_link *link);

/**
 * The kinds of the open links among *links[0..n) (NULL entries are
 * none), each once, "+"-joined in
 * the order of how their waits sleep (shm's futex, tcp's poll, mpi's
 * spin: "tcp", "shm+tcp", "tcp+mpi", "shm+tcp+mpi", ...), into buf (cap
 * bytes, always terminated, cut to fit); "none" when none is open.
 * Returns buf. Reads the links only.
 */
const char *hk_link_kinds(hk_link *const *links, int n, char *buf, size_t cap);

/**
 * Non-blocking send of up to n bytes of the stream; *done gets how many
 * were taken (0 when the link cannot take more now). TCP: copied to the
 * kernel; MPI: posted, see above. Errors: HK_ERR_PEER_LOST naming the
 * peer (reset/closed connection, a failed MPI call).
 */
hk_status hk_link_send_some(hk_link *link, const void *p, size_t n,
                            size_t *done);

/**
 * Non-blocking receive of up to n bytes of the stream into p; *done gets
 * how many arrived (0 when none is waiting). Errors: HK_ERR_PEER_LOST
 * ("rank 3 closed the connection"; a failed MPI call), HK_ERR_PROTOCOL
 * (an MPI message larger than the chunk), HK_ERR_NOMEM (first use of an
 * MPI link).
 */
hk_status hk_link_recv_some(hk_link *link, void *p, size_t n, size_t *done);

/**
 * Waits until `send` can take more bytes (if want_send) or `recv` has
 * bytes (if want_recv); send and recv may be the same link, of either
 * kind. `what` says where ("in ring allreduce"). Errors: HK_ERR_TIMEOUT
 * ("timed out after 60.0 s in ring allreduce: no progress receiving from
 * rank 3"), HK_ERR_PEER_LOST (abort fd; a failed MPI call),
 * HK_ERR_SYSTEM.
 */
hk_status hk_link_wait(hk_link *send, int want_send, hk_link *recv,
                       int want_recv, const hk_io *io, const char *what);

/**
 * Returns once every byte hk_link_send_some took has really left the
 * caller's memory: TCP at once (the kernel has them); MPI once every
 * MPI_Isend has completed and every message has been acknowledged by the
 * peer (and this side's acknowledgements have completed). Errors as
 * hk_link_wait ("... no progress completing sends to rank 3 (MPI: 2 of 4
 * sends pending, 5 of 9 messages acknowledged, ...)").
 */
hk_status hk_link_drain(hk_link *link, const hk_io *io, const char *what);

/**
 * Of the stream bytes sent so far (counted from the link's start), how
 * many have left the caller's memory, which it may now change: all of
 * them for TCP and shm; for MPI those before the oldest send still in
 * flight (this call tests them). Errors: as hk_link_wait (a failed MPI
 * call).
 */
hk_status hk_link_released(hk_link *link, uint64_t *bytes);

/**
 * hk_link_wait on one link (send and receive side), that also returns once
 * hk_link_released would reach `released` (0: not waited for): what a
 * caller that folds into bytes it has sent waits on (collectives/rd.c).
 * Errors as hk_link_wait.
 */
hk_status hk_link_wait_released(hk_link *link, int want_send, int want_recv,
                                uint64_t released, const hk_io *io,
                                const char *what);

/**
 * Sends sn bytes while receiving rn bytes (send and recv may be the same
 * link), then drains the send side. Errors as hk_link_wait.
 */
hk_status hk_link_exchange(hk_link *send, const void *sp, size_t sn,
                           hk_link *recv, void *rp, size_t rn, const hk_io *io,
                           const char *what);

/**
 * Closes the sockets, frees the shm state (the segment stays mapped), or
 * frees the MPI state (pending receives cancelled,
 * pending sends released to MPI). Leaves the link closed
 * (hk_link_is_open 0); safe on a zeroed or closed link, and more than
 * once.
 */
void hk_link_close(hk_link *link);

#endif
