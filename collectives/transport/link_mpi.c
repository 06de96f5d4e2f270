/*
 * link_mpi.c - the MPI kind of hk_link (link.h): its table, forwarded to
 * the separately loaded MPI module (mpi_module.h), where the MPI calls
 * and the link's state are (collectives/transport/mpi/link.c: struct
 * hk_link_mpi, behind hk_link.state). hk_link_init_mpi loads the module
 * if needed; an MPI link is only opened on a communicator that the module
 * gave (hk_mpi_comm_handle), so it is loaded by then.
 */
#include <stdio.h>

#include "collectives/transport/link_impl.h"
#include "collectives/transport/mpi_module.h"
#include "common/status.h"

/* Links exist only once the module is loaded; NULL means a caller bug. */
static hk_status unloaded(const char *name) {
  return hk_fail(HK_ERR_CONFIG, "MPI link to %s: the MPI module is not loaded",
                 name);
}

static hk_status mpi_send_some(hk_link *link, const void *p, size_t n,
                               size_t *done) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  *done = 0;
  return m ? m->link_send_some(link->state, p, n, done, link->name)
           : unloaded(link->name);
}

static hk_status mpi_recv_some(hk_link *link, void *p, size_t n, size_t *done) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  *done = 0;
  return m ? m->link_recv_some(link->state, p, n, done, link->name)
           : unloaded(link->name);
}

static hk_status mpi_test(hk_link *link, int want_send, int want_recv,
                          int drain, int *ready) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  int cs = 0, cr = 0, dr = 1;
  hk_status st =
      m ? m->link_progress(link->state, want_recv, &cs, &cr, &dr, link->name)
        : unloaded(link->name);
  *ready = (want_send && (drain ? dr : cs)) || (want_recv && cr);
  return st;
}

static int mpi_pollfd(const hk_link *link, int send_side, short *events) {
  (void)link;
  (void)send_side;
  *events = 0;
  return -1;
}

static uint64_t mpi_released(const hk_link *link) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  return link->state && m ? m->link_released(link->state) : 0;
}

static void mpi_describe(const hk_link *link, char *buf, size_t cap) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  char st[224];
  if (link->state && m)
    m->link_describe(link->state, st, sizeof st);
  else
    snprintf(st, sizeof st, "the MPI module is not loaded");
  snprintf(buf, cap, " (MPI: %s)", st);
}

static void mpi_close(hk_link *link) {
  const hk_mpi_module_ops *m = hk_mpi_module_loaded();
  if (link->state && m)
    m->link_close(link->state);
}

static const hk_link_ops mpi_ops = {.name = "mpi",
                                    .wait_class = HK_LINK_WAIT_SPIN,
                                    .needs_drain = 1,
                                    .send_some = mpi_send_some,
                                    .recv_some = mpi_recv_some,
                                    .test = mpi_test,
                                    .pollfd = mpi_pollfd,
                                    .released = mpi_released,
                                    .arm = NULL,
                                    .bell = NULL,
                                    .describe = mpi_describe,
                                    .socket = NULL,
                                    .take_socket = NULL,
                                    .close = mpi_close};

hk_status hk_link_init_mpi(hk_link *link, int peer, const void *comm,
                           size_t chunk) {
  hk_link_set(link, peer, NULL, NULL);
  char why[64];
  snprintf(why, sizeof why, "an MPI link to rank %d", peer);
  const hk_mpi_module_ops *m;
  struct hk_link_mpi *state = NULL;
  hk_status st = hk_mpi_module_get(why, &m);
  if (st == HK_OK)
    st = m->link_open(&state, peer, comm, chunk);
  if (st == HK_OK)
    hk_link_set(link, peer, &mpi_ops, state);
  return st;
}
