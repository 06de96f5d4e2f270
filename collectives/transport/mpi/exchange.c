/*
 * exchange.c (libhk_mpi.so) - MPI_Init_thread on demand, hk's duplicate
 * of MPI_COMM_WORLD, and one MPI_Allgather of fixed-size records (the
 * contract is worker/mpi_exchange.h's; libhk reaches these through the
 * module's table, mpi_module.h).
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "collectives/transport/mpi/impl.h"
#include "common/log.h"
#include "common/status.h"

/* MPI is process-global; so is this (guarded by mu). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int owned;                     /* hk called MPI_Init_thread */
static int provided = -1;             /* the thread level MPI gave */
static MPI_Comm comm = MPI_COMM_NULL; /* hk's duplicate of WORLD */

/* Fails with the name of the MPI call and MPI's own words for rc. */
static hk_status mpi_fail(const char *call, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "error %d", rc);
  return hk_fail(HK_ERR_SYSTEM, "%s failed: %s", call, text);
}

/* Initialises MPI if needed and duplicates WORLD. Call with mu held. */
static hk_status ensure_locked(void) {
  if (comm != MPI_COMM_NULL)
    return HK_OK;
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return hk_fail(HK_ERR_CONFIG,
                   "MPI was already finalised in this process, and cannot be "
                   "initialised again (hk_init after hk_shutdown under "
                   "mpirun is not possible)");
  MPI_Initialized(&initialized);
  if (!initialized) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return mpi_fail("MPI_Init_thread", rc);
    owned = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) {
    comm = MPI_COMM_NULL;
    return mpi_fail("MPI_Comm_dup", rc);
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return HK_OK;
}

hk_status hk_mpim_world(int *rank, int *size) {
  pthread_mutex_lock(&mu);
  hk_status st = ensure_locked();
  if (st == HK_OK) {
    MPI_Comm_rank(comm, rank);
    MPI_Comm_size(comm, size);
  }
  pthread_mutex_unlock(&mu);
  return st;
}

hk_status hk_mpim_allgather(const void *mine, size_t bytes, void *all,
                            int size) {
  if (bytes == 0 || size < 1 || bytes > (size_t)INT_MAX / (size_t)size)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "MPI exchange: %zu bytes from each of %d ranks is not a "
                   "size MPI_Allgather takes",
                   bytes, size);
  pthread_mutex_lock(&mu);
  hk_status st = ensure_locked();
  int world = 0;
  if (st == HK_OK) {
    MPI_Comm_size(comm, &world);
    if (world != size)
      st = hk_fail(HK_ERR_CONFIG,
                   "the launcher says %d ranks but MPI_COMM_WORLD has %d", size,
                   world);
  }
  if (st == HK_OK) {
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes,
                           MPI_BYTE, comm);
    if (rc != MPI_SUCCESS)
      st = mpi_fail("MPI_Allgather", rc);
  }
  pthread_mutex_unlock(&mu);
  return st;
}

int hk_mpim_thread_level(void) {
  pthread_mutex_lock(&mu);
  int level = comm != MPI_COMM_NULL ? provided : -1;
  pthread_mutex_unlock(&mu);
  return level;
}

const void *hk_mpim_comm_handle(void) {
  pthread_mutex_lock(&mu);
  const void *h = comm != MPI_COMM_NULL ? (const void *)&comm : NULL;
  pthread_mutex_unlock(&mu);
  return h;
}

static const char *level_name(int level) {
  return level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
         : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
         : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
         : level == MPI_THREAD_MULTIPLE   ? "MPI_THREAD_MULTIPLE"
                                          : "an unknown thread level";
}

hk_status hk_mpim_check_threads(const char *what) {
  pthread_mutex_lock(&mu);
  int level = comm != MPI_COMM_NULL ? provided : -1, mine = owned;
  pthread_mutex_unlock(&mu);
  if (level < 0)
    return hk_fail(HK_ERR_CONFIG, "%s: MPI is not initialised", what);
  if (level < MPI_THREAD_SERIALIZED)
    return hk_fail(
        HK_ERR_CONFIG,
        "%s needs MPI_THREAD_SERIALIZED or better (hk's background thread "
        "makes the MPI calls, not the thread that initialised MPI), but MPI "
        "provides %s: %s",
        what, level_name(level),
        mine ? "this MPI library cannot do better"
             : "initialise MPI with MPI_Init_thread(..., "
               "MPI_THREAD_MULTIPLE, ...) or let hk_init do it");
  if (!mine && level < MPI_THREAD_MULTIPLE)
    hk_log(HK_LOG_WARNING,
           "%s: the program initialised MPI at %s: it must not call MPI "
           "while hk's collectives run (MPI_THREAD_MULTIPLE lifts this)",
           what, level_name(level));
  return HK_OK;
}

int hk_mpim_owned(void) {
  pthread_mutex_lock(&mu);
  int o = owned;
  pthread_mutex_unlock(&mu);
  return o;
}

void hk_mpim_finalize_if_owned(void) {
  pthread_mutex_lock(&mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    if (owned)
      MPI_Finalize();
  }
  comm = MPI_COMM_NULL;
  owned = 0;
  provided = -1;
  pthread_mutex_unlock(&mu);
}
