/*
 * module.c (libhk_mpi.so) - the module's one exported symbol, its table
 * of operations (mpi_module.h), and the few libhk functions the moved code
 * calls (hk_fail, hk_fail_errno, hk_log, hk_now), forwarded to the host
 * table libhk gives attach(). Compiled with hidden visibility: these
 * definitions never clash with libhk's.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "collectives/transport/mpi/impl.h"
#include "collectives/transport/mpi_module.h"
#include "collectives/transport/tcp.h"
#include "common/log.h"
#include "common/status.h"

/* Set once by attach (libhk's loader calls it before anything else,
 * under its mutex); read-only afterwards. */
static const hk_mpi_host *host;

hk_status hk_fail(hk_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hk_status st = host ? host->vfail(status, fmt, ap) : status;
  va_end(ap);
  return st;
}

hk_status hk_fail_errno(hk_status status, int errno_value, const char *fmt,
                        ...) {
  char msg[HK_ERROR_MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hk_fail(status, "%s: %s", msg, strerror(errno_value));
}

void hk_log(hk_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (host)
    host->vlog((int)level, fmt, ap);
  va_end(ap);
}

double hk_now(void) { return host ? host->now() : 0.0; }

static void attach(const hk_mpi_host *h) { host = h; }

static void library_version(char *buf, size_t cap) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (cap == 0)
    return;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS || len <= 0) {
    snprintf(buf, cap, "an MPI %d.%d library", MPI_VERSION, MPI_SUBVERSION);
    return;
  }
  v[len < (int)sizeof v ? len : (int)sizeof v - 1] = '\0';
  size_t line = strcspn(v, "\n,"); /* "Open MPI v4.1.4, package: ..." */
  while (line > 0 && (v[line - 1] == ',' || v[line - 1] == ' '))
    line--;
  snprintf(buf, cap, "%.*s", (int)line, v);
}

__attribute__((
    visibility("default"))) extern const hk_mpi_module_ops hk_mpi_module;

const hk_mpi_module_ops hk_mpi_module = {
    .abi = HK_MPI_MODULE_ABI,
    .size = sizeof(hk_mpi_module_ops),
    .attach = attach,
    .library_version = library_version,
    .world = hk_mpim_world,
    .allgather = hk_mpim_allgather,
    .thread_level = hk_mpim_thread_level,
    .comm_handle = hk_mpim_comm_handle,
    .check_threads = hk_mpim_check_threads,
    .owned = hk_mpim_owned,
    .finalize_if_owned = hk_mpim_finalize_if_owned,
    .link_open = hk_mpim_link_open,
    .link_send_some = hk_mpim_link_send_some,
    .link_recv_some = hk_mpim_link_recv_some,
    .link_progress = hk_mpim_link_progress,
    .link_close = hk_mpim_link_close,
    .link_released = hk_mpim_link_released,
    .link_describe = hk_mpim_link_describe,
};
