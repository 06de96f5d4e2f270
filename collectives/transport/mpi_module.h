/*
 * mpi_module.h - MPI lives in a separately loaded module, libhk_mpi.so
 * (collectives/transport/mpi/), so that libhk.so does not depend on
 * libmpi: a one-host job (hkrun -np N, or a program started alone) never
 * loads MPI and runs on a machine without Open MPI; a job started by
 * mpirun or srun (hkrun -H ..., --mpi) loads the module at hk_init, and
 * the module pulls in libmpi.
 *
 * The module exports one symbol, HK_MPI_MODULE_SYMBOL, a table of
 * operations (hk_mpi_module_ops). Everything else in it is hidden. It
 * does not call into libhk: libhk hands it a table of its own functions
 * (hk_mpi_host: error messages, logging, the clock) in attach(), so an
 * error found inside the module lands in libhk's hk_last_error().
 * worker/mpi_exchange.c and collectives/transport/link_mpi.c forward to
 * these operations; worker/mpi_exchange.h documents the first ones, the
 * table below the link ones.
 *
 * Loading (hk_mpi_module_get): common/module.h's search, with
 * RTLD_NOW | RTLD_GLOBAL (Open MPI loads its own components with dlopen
 * and those expect libmpi's symbols to be global). The module stays
 * loaded for the process's life. The module and libhk must come from the
 * same build: a module whose abi or size differs is refused.
 *
 * Thread-safety: hk_mpi_module_get and hk_mpi_module_loaded may be called
 * from any thread (the first load is serialised by a mutex).
 */
#ifndef HK_TRANSPORT_MPI_MODULE_H
#define HK_TRANSPORT_MPI_MODULE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** The module's file name. */
#define HK_MPI_MODULE_FILE "libhk_mpi.so"
/** The one symbol the module exports: a const hk_mpi_module_ops. */
#define HK_MPI_MODULE_SYMBOL "hk_mpi_module"
/** Bumped whenever hk_mpi_host or hk_mpi_module_ops change. */
#define HK_MPI_MODULE_ABI 2u

struct hk_link_mpi;

/** libhk's functions the module uses (it has no copy of its own). */
typedef struct hk_mpi_host {
  /* hk_fail: formats the thread's last-error message, returns status */
  hk_status (*vfail)(hk_status status, const char *fmt, va_list ap);
  /* hk_log at an hk_log_level */
  void (*vlog)(int level, const char *fmt, va_list ap);
  /* hk_now: monotonic seconds */
  double (*now)(void);
} hk_mpi_host;

typedef struct hk_mpi_module_ops {
  uint32_t abi;  /* HK_MPI_MODULE_ABI */
  uint32_t size; /* sizeof(hk_mpi_module_ops) */
  /* Called once, right after loading, before any other operation. */
  void (*attach)(const hk_mpi_host *host);
  /* MPI_Get_library_version's first line into buf[cap] ("Open MPI
   * v4.1.4, ..."); works before MPI is initialised. */
  void (*library_version)(char *buf, size_t cap);
  /* worker/mpi_exchange.h */
  hk_status (*world)(int *rank, int *size);
  hk_status (*allgather)(const void *mine, size_t bytes, void *all, int size);
  int (*thread_level)(void);
  const void *(*comm_handle)(void);
  hk_status (*check_threads)(const char *what);
  int (*owned)(void);
  void (*finalize_if_owned)(void);
  /* The MPI kind of hk_link (collectives/transport/link_mpi.c; the
   * protocol is link.h's). `name` is the peer's name for messages; every
   * call but link_open needs a link it opened. Thread-safety: as hk_link. */
  /* hk_link_init_mpi's: *out gets the new link (NULL on failure) */
  hk_status (*link_open)(struct hk_link_mpi **out, int peer, const void *comm,
                         size_t chunk);
  /* hk_link_send_some / hk_link_recv_some */
  hk_status (*link_send_some)(struct hk_link_mpi *m, const void *p, size_t n,
                              size_t *done, const char *name);
  hk_status (*link_recv_some)(struct hk_link_mpi *m, void *p, size_t n,
                              size_t *done, const char *name);
  /* Tests the link's requests once (this is what makes MPI progress),
   * posting its receives first if want_recv and they are not yet. Sets
   * *can_send (a send slot is free), *can_recv (a message is waiting) and
   * *drained (no send pending). Errors: HK_ERR_PEER_LOST (an MPI call
   * failed), HK_ERR_PROTOCOL, HK_ERR_NOMEM. */
  hk_status (*link_progress)(struct hk_link_mpi *m, int want_recv,
                             int *can_send, int *can_recv, int *drained,
                             const char *name);
  /* Cancels the posted receives, releases pending sends, frees m. */
  void (*link_close)(struct hk_link_mpi *m);
  /* Stream bytes whose MPI_Isend has completed, so their memory may be
   * reused: everything posted before the oldest send still pending (as of
   * the last test). */
  uint64_t (*link_released)(const struct hk_link_mpi *m);
  /* The link's state in words, for a timeout's message: "3 of 4 sends
   * pending, 17 of 19 messages acknowledged, 0 acknowledgements leaving,
   * receives posted, none arrived" into buf (cap bytes, always
   * terminated, cut to fit). Never fails. */
  void (*link_describe)(const struct hk_link_mpi *m, char *buf, size_t cap);
} hk_mpi_module_ops;

/**
 * The module's operations, loading it on the first call. `why` names,
 * in the message, what needs MPI ("this job was started by mpirun").
 * Errors: HK_ERR_CONFIG: "<why> needs MPI, but libhk_mpi.so cannot be
 * loaded: <the loader's reason> (...)" or "this hk was built without
 * MPI", or a module from another build.
 */
hk_status hk_mpi_module_get(const char *why, const hk_mpi_module_ops **out);

/** The operations if the module was loaded already, else NULL (never
 *  loads it: for shutdown paths and queries). */
const hk_mpi_module_ops *hk_mpi_module_loaded(void);

/** 1 if this libhk was built with an MPI module (it may still fail to
 *  load where Open MPI is missing), else 0. */
int hk_mpi_module_built(void);

#endif
