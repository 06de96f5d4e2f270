/*
 * link_mpi.c - the MPI half of hk_link (link_mpi.h), forwarded to the
 * separately loaded MPI module (mpi_module.h), where the MPI calls are
 * (collectives/transport/mpi/link.c). An MPI link is only opened on a
 * communicator that the module gave (hk_mpi_comm_handle), so the module
 * is loaded by then.
 */
#include "collectives/transport/link_mpi.h"

#include <stdio.h>

#include "collectives/transport/mpi_module.h"
#include "common/status.h"

hk_status hk_link_mpi_open(struct hk_link_mpi **out, int peer, const void *comm,
                           size_t chunk) {
  *out = NULL;
  char why[64];
  snprintf(why, sizeof why, "an MPI link to rank %d", peer);
  const hk_mpi_module_ops *ops;
  hk_status st = hk_mpi_module_get(why, &ops);
  return st == HK_OK ? ops->link_open(out, peer, comm, chunk) : st;
}

/* Links exist only once the module is loaded; NULL means a caller bug. */
static hk_status unloaded(const char *name) {
  return hk_fail(HK_ERR_CONFIG, "MPI link to %s: the MPI module is not loaded",
                 name);
}

hk_status hk_link_mpi_send_some(struct hk_link_mpi *m, const void *p, size_t n,
                                size_t *done, const char *name) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  *done = 0;
  return ops ? ops->link_send_some(m, p, n, done, name) : unloaded(name);
}

hk_status hk_link_mpi_recv_some(struct hk_link_mpi *m, void *p, size_t n,
                                size_t *done, const char *name) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  *done = 0;
  return ops ? ops->link_recv_some(m, p, n, done, name) : unloaded(name);
}

hk_status hk_link_mpi_progress(struct hk_link_mpi *m, int want_recv,
                               int *can_send, int *can_recv, int *drained,
                               const char *name) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  if (!ops) {
    *can_send = *can_recv = 0;
    *drained = 1;
    return unloaded(name);
  }
  return ops->link_progress(m, want_recv, can_send, can_recv, drained, name);
}

void hk_link_mpi_close(struct hk_link_mpi *m) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  if (m && ops)
    ops->link_close(m);
}

uint64_t hk_link_mpi_released(const struct hk_link_mpi *m) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  return m && ops ? ops->link_released(m) : 0;
}

void hk_link_mpi_describe(const struct hk_link_mpi *m, char *buf, size_t cap) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  if (m && ops)
    ops->link_describe(m, buf, cap);
  else
    snprintf(buf, cap, "the MPI module is not loaded");
}
