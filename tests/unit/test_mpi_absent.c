/*
 * test_mpi_absent.c - worker/mpi_exchange.c and the MPI half of hk_link
 * compiled without HK_HAVE_MPI (as in a libhk built where Open MPI's
 * headers are missing): every entry point says so with HK_ERR_CONFIG, and
 * shutting down is harmless.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "collectives/transport/link.h"
#include "common/status.h"
#include "worker/mpi_exchange.h"

#ifdef HK_HAVE_MPI
#error "this test must be compiled without HK_HAVE_MPI"
#endif

static void test_without_mpi(void **state) {
  (void)state;
  assert_int_equal(hk_mpi_built_in(), 0);
  hk_wire_peer mine = {.host = "10.0.0.2", .port = 4000}, all[2];
  assert_int_equal(hk_mpi_exchange(&mine, 2, all), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "this libhk was built without MPI"));
  hk_clear_error();
  int rank = -1, size = -1;
  assert_int_equal(hk_mpi_world(&rank, &size), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "this libhk was built without MPI"));
  assert_int_equal(rank, -1);
  char buf[8];
  assert_int_equal(hk_mpi_allgather("x", 1, buf, 1), HK_ERR_CONFIG);
  assert_int_equal(hk_mpi_thread_level(), -1);
  assert_int_equal(hk_mpi_owned(), 0);
  assert_null(hk_mpi_comm_handle());
  assert_int_equal(hk_mpi_check_threads("HK_CROSS_TRANSPORT=mpi"),
                   HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "this libhk was built without MPI"));
  hk_link link;
  int comm = 0;
  assert_int_equal(hk_link_init_mpi(&link, 3, &comm, 1 << 20), HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "an MPI link to rank 3: this libhk was built without "
                      "MPI (install libopenmpi-dev and rebuild)");
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
