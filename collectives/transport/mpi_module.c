/*
 * mpi_module.c - loading libhk_mpi.so on first need (mpi_module.h).
 */
#include "collectives/transport/mpi_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/module.h"
#include "common/status.h"

#ifndef HK_MPI_MODULE_DIRS /* set by CMake: build tree, install libdir */
#define HK_MPI_MODULE_DIRS ""
#endif
#ifndef HK_MPI_MODULE_NAME /* tests load a module that is not there */
#define HK_MPI_MODULE_NAME HK_MPI_MODULE_FILE
#endif

/* MPI is process-global, and so is its module: loaded once, guarded by
 * mu, never unloaded. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const hk_mpi_module_ops *loaded;
static char load_error[2048]; /* why the last attempt failed */

static void host_vlog(int level, const char *fmt, va_list ap) {
  hk_vlog((hk_log_level)level, fmt, ap);
}

static const hk_mpi_host host = {hk_vfail, host_vlog, hk_now};

int hk_mpi_module_built(void) {
#ifdef HK_MPI_MODULE_BUILT
  return 1;
#else
  return 0;
#endif
}

/* Loads the module; call with mu held. */
static void load_locked(void) {
  char why[512], where[512];
  void *h = hk_module_open(HK_MPI_MODULE_NAME, NULL, HK_MPI_MODULE_DIRS,
                           RTLD_NOW | RTLD_GLOBAL, why, sizeof why, where,
                           sizeof where);
  if (!h) {
    snprintf(load_error, sizeof load_error, "%s cannot be loaded: %s",
             HK_MPI_MODULE_NAME, why);
    return;
  }
  const hk_mpi_module_ops *ops = dlsym(h, HK_MPI_MODULE_SYMBOL);
  if (!ops || ops->abi != HK_MPI_MODULE_ABI ||
      ops->size != sizeof(hk_mpi_module_ops)) {
    snprintf(load_error, sizeof load_error,
             "%s (%s) is not this hk's MPI module (%s): install libhk and "
             "libhk_mpi.so from the same build",
             HK_MPI_MODULE_NAME, where,
             ops ? "another version" : "no " HK_MPI_MODULE_SYMBOL);
    return;
  }
  ops->attach(&host);
  hk_log(HK_LOG_DEBUG, "loaded the MPI module %s", where);
  loaded = ops;
}

hk_status hk_mpi_module_get(const char *why, const hk_mpi_module_ops **out) {
  pthread_mutex_lock(&mu);
  if (!loaded)
    load_locked();
  const hk_mpi_module_ops *ops = loaded;
  char err[sizeof load_error];
  snprintf(err, sizeof err, "%s", load_error);
  pthread_mutex_unlock(&mu);
  *out = ops;
  if (ops)
    return HK_OK;
  if (!hk_mpi_module_built())
    return hk_fail(HK_ERR_CONFIG,
                   "%s needs MPI, but this hk was built without MPI "
                   "(install libopenmpi-dev and rebuild; %s)",
                   why, err);
  return hk_fail(HK_ERR_CONFIG,
                 "%s needs MPI, but %s (is Open MPI installed? Debian: "
                 "openmpi-bin)",
                 why, err);
}

const hk_mpi_module_ops *hk_mpi_module_loaded(void) {
  pthread_mutex_lock(&mu);
  const hk_mpi_module_ops *ops = loaded;
  pthread_mutex_unlock(&mu);
  return ops;
}
