/*
 * mpi_exchange.c - the MPI bootstrap (mpi_exchange.h), forwarded to the
 * separately loaded MPI module (collectives/transport/mpi_module.h): the
 * calls that need MPI load it on first use; the queries and the shutdown
 * answer "no MPI" without loading it.
 */
#include "worker/mpi_exchange.h"

#include "collectives/transport/mpi_module.h"
#include "common/status.h"

/* What needs MPI, for the message when it cannot be loaded. */
#define NEEDS "a job started by mpirun or srun"

int hk_mpi_built_in(void) {
  const hk_mpi_module_ops *ops;
  if (hk_mpi_module_get(NEEDS, &ops) != HK_OK) {
    hk_clear_error();
    return 0;
  }
  return 1;
}

hk_status hk_mpi_world(int *rank, int *size) {
  const hk_mpi_module_ops *ops;
  hk_status st = hk_mpi_module_get(NEEDS, &ops);
  return st == HK_OK ? ops->world(rank, size) : st;
}

hk_status hk_mpi_allgather(const void *mine, size_t bytes, void *all,
                           int size) {
  const hk_mpi_module_ops *ops;
  hk_status st = hk_mpi_module_get(NEEDS, &ops);
  return st == HK_OK ? ops->allgather(mine, bytes, all, size) : st;
}

hk_status hk_mpi_exchange(const hk_wire_peer *mine, int size,
                          hk_wire_peer *all) {
  return hk_mpi_allgather(mine, sizeof *mine, all, size);
}

int hk_mpi_thread_level(void) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  return ops ? ops->thread_level() : -1;
}

const void *hk_mpi_comm_handle(void) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  return ops ? ops->comm_handle() : NULL;
}

hk_status hk_mpi_check_threads(const char *what) {
  const hk_mpi_module_ops *ops;
  hk_status st = hk_mpi_module_get(what, &ops);
  return st == HK_OK ? ops->check_threads(what) : st;
}

int hk_mpi_owned(void) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  return ops ? ops->owned() : 0;
}

void hk_mpi_finalize_if_owned(void) {
  const hk_mpi_module_ops *ops = hk_mpi_module_loaded();
  if (ops)
    ops->finalize_if_owned();
}
