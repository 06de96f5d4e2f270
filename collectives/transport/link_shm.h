/*
 * link_shm.h - the shm kind of hk_link (link.h), internal to
 * collectives/transport: a byte stream per direction through a
 * single-producer single-consumer ring in the host's segment
 * (shm_seg.h: ring i -> j of link_bytes bytes, a power of two).
 *
 * The producer copies into the ring at head mod link_bytes (two memcpy
 * when it wraps) and publishes the new head (release); the consumer
 * reads head (acquire), copies out, publishes tail (release). Free space
 * is link_bytes - (head - tail). After publishing, each side wakes the
 * other if its waiter flag says it sleeps (shm_wait.h's protocol):
 * reader_wait on the ring it wrote, writer_wait on the ring it read.
 * No locks and no system call while nobody sleeps.
 *
 * hk_link_init_shm is declared in link.h (with the other kinds).
 * Thread-safety: as hk_link; the two ends are different processes (or
 * threads, in the unit tests).
 */
#ifndef HK_TRANSPORT_LINK_SHM_H
#define HK_TRANSPORT_LINK_SHM_H

#include "collectives/transport/link.h"

/** This rank's doorbell (the one its shm waits sleep on). */
hk_shm_doorbell *hk_link_shm_bell(const hk_link *link);

/** The segment's polling budget, seconds (shm_seg.h's spin_s). */
double hk_link_shm_spin(const hk_link *link);

/** The shm kind's ops table (link.c sets it). */
extern const hk_link_ops hk_link_shm_ops;

/** link.c: fills the fields every kind has for an shm link to `peer`
 *  over the pair's socket fd (taken over, made non-blocking). */
void hk_link_init_shm_fields(hk_link *link, int peer, int fd);

/** link.c: the ops' `released` of the kinds whose sent bytes are out of
 *  the caller's memory at once (tcp: in the kernel; shm: in the ring):
 *  every byte hk_link_send_some took (link->sent_total). Reads the link
 *  only; the link's thread. */
uint64_t hk_link_all_sent(const hk_link *link);

#endif
