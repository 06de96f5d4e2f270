/*
 * link_impl.h - inside collectives/transport only: what a kind of hk_link
 * (link.h) gives link.c, and the helpers the kinds share. A kind is one
 * file (link_tcp.c, link_shm.c, link_mpi.c) that holds its state (behind
 * hk_link.state), its table and its constructor; link.c dispatches and
 * waits through the table alone and names no kind.
 *
 * Every operation takes the link it belongs to and is called by the
 * link's thread (link.h). Lengths are in bytes.
 */
#ifndef HK_TRANSPORT_LINK_IMPL_H
#define HK_TRANSPORT_LINK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/transport/link.h"
#include "collectives/transport/shm_seg.h"

/** How a kind's waits sleep; a wait over several kinds uses the largest
 *  among the sides that take part (link.c). */
typedef enum hk_link_wait_class {
  /* shm: spin, yield, then sleep on this rank's futex doorbell
   * (shm_wait.h), which the kind gives (bell) */
  HK_LINK_WAIT_FUTEX = 0,
  /* tcp: poll(2) on the kind's pollfd */
  HK_LINK_WAIT_POLL = 1,
  /* mpi: the kind moves bytes only inside its own calls (MPI progresses
   * only inside MPI calls): waits test it in a loop, poll(2) the other
   * sides with no timeout and yield between rounds; and they test such a
   * link even when they do not wait for it (its posted sends may need
   * this rank's progress: link.h) */
  HK_LINK_WAIT_SPIN = 2,
} hk_link_wait_class;

/** A kind of link: what link.c calls. */
typedef struct hk_link_ops {
  const char *name; /* "tcp", "mpi", "shm" (timeline, messages) */
  hk_link_wait_class wait_class;
  int needs_drain; /* sends may still read the caller's memory */
  /* hk_link_send_some / hk_link_recv_some (sent_total is link.c's) */
  hk_status (*send_some)(struct hk_link *, const void *, size_t, size_t *);
  hk_status (*recv_some)(struct hk_link *, void *, size_t, size_t *);
  /* Without blocking: sets *ready if a wanted side can move now (for
   * drain, if nothing sent is pending). MPI progresses here; TCP always
   * says 0 (poll(2) tells). */
  hk_status (*test)(struct hk_link *, int want_send, int want_recv, int drain,
                    int *ready);
  /* The fd poll(2) watches for one side and its events, or -1 (mpi). */
  int (*pollfd)(const struct hk_link *, int send_side, short *events);
  /* Stream bytes sent whose memory the caller may reuse (MPI: sends
   * completed as of the last test; others: everything sent). */
  uint64_t (*released)(const struct hk_link *);
  /* Kinds whose writer itself wakes a reader that sleeps (shm): sets
   * (mode HK_SHM_SLEEP_*) or clears (HK_SHM_AWAKE) the waiter flags of
   * the wanted sides. Such a kind's pollfd is its doorbell: readable when
   * the writer rang (HK_SHM_SLEEP_SOCKET) or the peer hung up, which means
   * "test again", not "ready" (link.c discards the bytes and reports a
   * hang-up). NULL for kinds whose pollfd says readiness (tcp) or that
   * have none (mpi). */
  void (*arm)(struct hk_link *, int want_send, int want_recv, uint32_t mode);
  /* HK_LINK_WAIT_FUTEX kinds: this rank's doorbell that the wait sleeps
   * on. NULL for the others. */
  hk_shm_doorbell *(*bell)(const struct hk_link *);
  /* For a timeout's message: what follows the peer's name, " (MPI: 2 of
   * 4 sends pending, ...)", into buf (cap bytes, terminated, cut to fit);
   * NULL when the kind has nothing to add. */
  void (*describe)(const struct hk_link *, char *buf, size_t cap);
  /* hk_link_socket's i-th socket (i >= 0), or -1; NULL: none (mpi). */
  int (*socket)(const struct hk_link *, int i);
  /* Lets go of socket 0 and returns it (close then leaves it open);
   * NULL when socket is. */
  int (*take_socket)(struct hk_link *);
  /* Kinds that stripe over several sockets (tcp): hk_link_set_streams
   * and hk_link_streams; NULL for the others (one stream, nothing to
   * choose). */
  hk_status (*set_streams)(struct hk_link *, int k);
  int (*streams)(const struct hk_link *, int *open);
  /* Closes what the link owns and frees its state. */
  void (*close)(struct hk_link *);
} hk_link_ops;

/** Sets the fields every kind has: a closed link when ops is NULL (all
 *  zero), else one to `peer` ("rank 3") of kind ops with state `state`
 *  (taken over; ops->close frees it), nothing sent yet. Constructors call
 *  it with NULL first, so that a failed one leaves a closed link. */
void hk_link_set(hk_link *link, int peer, const hk_link_ops *ops, void *state);

/** Takes over a connected socket: makes it non-blocking (if it is not)
 *  and returns it. */
int hk_link_own_socket(int fd);

/** The ops' `released` of the kinds whose sent bytes are out of the
 *  caller's memory at once (tcp: in the kernel; shm: in the ring): every
 *  byte hk_link_send_some took (link->sent_total). */
uint64_t hk_link_all_sent(const hk_link *link);

#endif
