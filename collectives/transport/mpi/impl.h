/*
 * impl.h - inside libhk_mpi.so only: the functions behind the module's
 * table (mpi_module.h). Each has the contract of the libhk function it
 * stands for: hk_mpim_X is worker/mpi_exchange.h's hk_mpi_X, and
 * hk_mpim_link_X is the table's link_X (collectives/transport/mpi_module.h).
 * Errors are reported through hk_fail, which in the module is libhk's
 * (module.c forwards it through hk_mpi_host). Hidden symbols.
 */
#ifndef HK_TRANSPORT_MPI_IMPL_H
#define HK_TRANSPORT_MPI_IMPL_H

#include <stddef.h>

#include "hk/hk.h"

struct hk_link_mpi;

hk_status hk_mpim_world(int *rank, int *size);
hk_status hk_mpim_allgather(const void *mine, size_t bytes, void *all,
                            int size);
int hk_mpim_thread_level(void);
const void *hk_mpim_comm_handle(void);
hk_status hk_mpim_check_threads(const char *what);
int hk_mpim_owned(void);
void hk_mpim_finalize_if_owned(void);

hk_status hk_mpim_link_open(struct hk_link_mpi **out, int peer,
                            const void *comm, size_t chunk);
hk_status hk_mpim_link_send_some(struct hk_link_mpi *m, const void *p, size_t n,
                                 size_t *done, const char *name);
hk_status hk_mpim_link_recv_some(struct hk_link_mpi *m, void *p, size_t n,
                                 size_t *done, const char *name);
hk_status hk_mpim_link_progress(struct hk_link_mpi *m, int want_recv,
                                int *can_send, int *can_recv, int *drained,
                                const char *name);
void hk_mpim_link_close(struct hk_link_mpi *m);
uint64_t hk_mpim_link_released(const struct hk_link_mpi *m);
void hk_mpim_link_describe(const struct hk_link_mpi *m, char *buf, size_t cap);

#endif
