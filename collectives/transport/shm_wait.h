/*
 * shm_wait.h - how a rank waits for another rank's write to shared memory
 * (collectives/transport/shm_seg.h): poll, yield, then sleep on a
 * futex, waking to check that the peers it waits for are alive.
 *
 * Protocol (no lost wake-ups): the waiter ARMS (stores a flag saying it is
 * about to sleep, seq_cst), reads its doorbell word, re-tests its
 * condition, and only then calls FUTEX_WAIT on the word with the value it
 * read. A writer publishes its data (release), then (seq_cst fence) reads
 * the flag; if set, it clears it and rings the doorbell: increments the
 * word and FUTEX_WAKEs. Either the waiter's re-test sees the data, or the
 * writer sees the flag; a ring between the waiter's read of the word and
 * its FUTEX_WAIT makes FUTEX_WAIT return at once (the word changed).
 *
 * Before it sleeps, a waiter polls its condition as hk's one wait policy
 * says (common/waiter.h: pause-polls while the host's busy threads fit
 * its cores, yields when they do not, for a budget learned from recent
 * waits and capped by HK_SPIN_US), then sleeps on the futex in slices of
 * at most HK_SHM_SLICE_S.
 *
 * Liveness: after every slice the waiter polls, without blocking, the
 * launcher connection (io->abort_fd: HK_ERR_PEER_LOST) and a TCP socket
 * to each peer it waits for (the pair's data connection, kept open beside
 * the shm link for this): a hang-up or EOF there means the peer died
 * (the kernel closes a killed process's sockets), HK_ERR_PEER_LOST naming
 * it. No condition for io->timeout_s seconds is HK_ERR_TIMEOUT, naming the
 * peers still waited for. Bytes found waiting on those sockets are
 * doorbells of the mixed waits (link.h) and are discarded.
 *
 * Thread-safety: a wait runs on one thread; the doorbell functions may be
 * called by any process mapping the segment.
 */
#ifndef HK_TRANSPORT_SHM_WAIT_H
#define HK_TRANSPORT_SHM_WAIT_H

#include <stdint.h>

#include "collectives/transport/shm_seg.h"
#include "collectives/transport/tcp.h"
#include "hk/hk.h"

#define HK_SHM_SLICE_S 0.02 /* longest futex sleep between liveness checks */

/** A peer whose liveness a wait watches. */
typedef struct hk_shm_peer {
  int fd;           /* a connected TCP socket to it, or -1 (no check) */
  const char *name; /* "rank 3", for messages */
} hk_shm_peer;

/** What a wait waits for (callbacks on the caller's state `arg`). */
typedef struct hk_shm_cond {
  /* 1 when the condition holds (must be cheap; called in the spin) */
  int (*ready)(void *arg);
  /* sets (on = 1) or clears (on = 0) the caller's waiter flags so that
   * the writers it waits for will ring `bell`; may be NULL when the
   * writers always ring */
  void (*arm)(void *arg, int on);
  /* fills peers[] with those still waited for (at most max); returns
   * how many (for liveness checks and the timeout's message) */
  int (*waiting_for)(void *arg, hk_shm_peer *peers, int max);
  void *arg;
  hk_shm_doorbell *bell; /* this rank's doorbell */
} hk_shm_cond;

/**
 * Waits until c->ready(c->arg). Errors: HK_ERR_TIMEOUT ("timed out after
 * 60.0 s in shm allreduce: no progress from rank 2, rank 3"),
 * HK_ERR_PEER_LOST ("rank 2 closed the connection (it died?) in shm
 * allreduce"; or the launcher aborted), HK_ERR_SYSTEM (futex, poll).
 */
hk_status hk_shm_wait(const hk_shm_cond *c, const hk_io *io, const char *what);

/** Rings the doorbell: bumps its word and wakes every sleeper on it.
 *  Any process, any thread. */
void hk_shm_ring_bell(hk_shm_doorbell *bell);

/**
 * Writer side of the protocol for one waiter flag: after the caller has
 * published its write (release), a seq_cst fence, then if *flag is
 * HK_SHM_SLEEP_FUTEX, clears it and rings `bell`; if HK_SHM_SLEEP_SOCKET,
 * clears it and writes one byte to fd (non-blocking; a full socket
 * already holds a wake-up). Cheap when nobody sleeps (one load).
 */
void hk_shm_wake_flag(_Atomic uint32_t *flag, hk_shm_doorbell *bell, int fd);

/**
 * Polls peers[0..n) and abort_fd once without blocking; discards doorbell
 * bytes. Errors: HK_ERR_PEER_LOST naming the first peer whose socket hung
 * up or reached EOF (`what` says where), or the launcher's abort.
 */
hk_status hk_shm_check_peers(const hk_shm_peer *peers, int n, int abort_fd,
                             const char *what);

/**
 * FUTEX_WAIT on *word while it holds `expect`, for at most timeout_s
 * seconds (process-shared). Returns 0 when woken, the value differed or
 * a signal interrupted, ETIMEDOUT when the time ran out.
 */
int hk_futex_wait(_Atomic uint32_t *word, uint32_t expect, double timeout_s);

/** FUTEX_WAKE of every waiter on *word (process-shared). */
void hk_futex_wake(_Atomic uint32_t *word);

#endif
