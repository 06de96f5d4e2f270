/*
 * link_mpi.h - the MPI half of hk_link (link.h), internal to link.c and
 * link_mpi.c, which forwards to the MPI module (mpi_module.h; the MPI
 * calls are in collectives/transport/mpi/link.c). hk_link_mpi_open loads
 * the module if needed and returns HK_ERR_CONFIG where it cannot be
 * loaded; the others need a link it opened. `name` is the peer's name
 * for messages.
 * Thread-safety: as hk_link.
 */
#ifndef HK_TRANSPORT_LINK_MPI_H
#define HK_TRANSPORT_LINK_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

struct hk_link_mpi;

/** See hk_link_init_mpi. */
hk_status hk_link_mpi_open(struct hk_link_mpi **out, int peer, const void *comm,
                           size_t chunk);

/** See hk_link_send_some / hk_link_recv_some. */
hk_status hk_link_mpi_send_some(struct hk_link_mpi *m, const void *p, size_t n,
                                size_t *done, const char *name);
hk_status hk_link_mpi_recv_some(struct hk_link_mpi *m, void *p, size_t n,
                                size_t *done, const char *name);

/**
 * Tests the link's requests once (this is what makes MPI progress),
 * posting its receives first if want_recv and they are not yet. Sets
 * *can_send (a send slot is free), *can_recv (a message is waiting) and
 * *drained (no send pending). Errors: HK_ERR_PEER_LOST (an MPI call
 * failed), HK_ERR_PROTOCOL, HK_ERR_NOMEM.
 */
hk_status hk_link_mpi_progress(struct hk_link_mpi *m, int want_recv,
                               int *can_send, int *can_recv, int *drained,
                               const char *name);

/** Stream bytes whose MPI_Isend has completed, so their memory may be
 *  reused: everything posted before the oldest send still pending (as of
 *  the last test). */
uint64_t hk_link_mpi_released(const struct hk_link_mpi *m);

/** The link's state in words, for a timeout's message: "3 of 4 sends
 *  pending, 17 of 19 messages acknowledged, 0 acknowledgements leaving,
 *  receives posted, none arrived" into buf (cap bytes, always
 *  terminated, cut to fit). Never fails ("the MPI module is not loaded"
 *  without it). Called by the thread that drives the link. */
void hk_link_mpi_describe(const struct hk_link_mpi *m, char *buf, size_t cap);

/** Cancels the posted receives, releases pending sends, frees m. */
void hk_link_mpi_close(struct hk_link_mpi *m);

#endif
