/*
 * test_mpi_absent.c - worker/mpi_exchange.c and the MPI half of hk_link
 * where the MPI module cannot be loaded (as on a machine without Open
 * MPI: the loader is built to look for a module file that does not
 * exist): every entry point that needs MPI says so with HK_ERR_CONFIG,
 * naming what needed it and why the module did not load; the queries and
 * shutting down are harmless and never try to load it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collectives/transport/link.h"
#include "common/status.h"
#include "worker/mpi_exchange.h"

#include "collectives/transport/mpi_module.h"

/* "<what> needs MPI, but libhk_mpi_absent.so cannot be loaded: ..." */
static void assert_needs(const char *what) {
  const char *e = hk_last_error();
  char want[128];
  snprintf(want, sizeof want,
           "%s needs MPI, but libhk_mpi_absent.so cannot "
           "be loaded: ",
           what);
  if (strncmp(e, want, strlen(want)) != 0 ||
      !strstr(e, "is Open MPI installed?"))
    fail_msg("unexpected message: %s", e);
}

static void test_without_mpi(void **state) {
  (void)state;
  /* queries never load it */
  assert_int_equal(hk_mpi_thread_level(), -1);
  assert_int_equal(hk_mpi_owned(), 0);
  assert_null(hk_mpi_comm_handle());
  hk_mpi_finalize_if_owned();
  assert_null(hk_mpi_module_loaded());
  assert_int_equal(hk_mpi_module_built(), 1);

  assert_int_equal(hk_mpi_built_in(), 0);
  hk_wire_peer mine = {.host = "10.0.0.2", .port = 4000}, all[2];
  assert_int_equal(hk_mpi_exchange(&mine, 2, all), HK_ERR_CONFIG);
  assert_needs("a job started by mpirun or srun");
  hk_clear_error();
  int rank = -1, size = -1;
  assert_int_equal(hk_mpi_world(&rank, &size), HK_ERR_CONFIG);
  assert_needs("a job started by mpirun or srun");
  assert_int_equal(rank, -1);
  char buf[8];
  assert_int_equal(hk_mpi_allgather("x", 1, buf, 1), HK_ERR_CONFIG);
  assert_int_equal(hk_mpi_thread_level(), -1);
  assert_int_equal(hk_mpi_owned(), 0);
  assert_null(hk_mpi_comm_handle());
  assert_int_equal(hk_mpi_check_threads("HK_CROSS_TRANSPORT=mpi"),
                   HK_ERR_CONFIG);
  assert_needs("HK_CROSS_TRANSPORT=mpi");
  hk_link link;
  int comm = 0;
  assert_int_equal(hk_link_init_mpi(&link, 3, &comm, 1 << 20), HK_ERR_CONFIG);
  assert_needs("an MPI link to rank 3");
  hk_link_close(&link);
  hk_mpi_finalize_if_owned();
  hk_mpi_finalize_if_owned();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_without_mpi),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
