/*
 * mpi_exchange.h - bootstrapping over MPI when the job was started by
 * mpirun (also through `hkrun -H`) or srun instead of hkrun: every rank
 * learns every other rank's fixed-size record (its address, its host
 * name...) with one MPI_Allgather, instead of through hkrun's rendezvous.
 *
 * MPI is initialised on first use if the application has not done it
 * (MPI_Init_thread asking for MPI_THREAD_MULTIPLE); hk then owns it and
 * hk_mpi_finalize_if_owned() finalises it. If the application initialised
 * MPI, hk never finalises it. hk works on its own duplicate of
 * MPI_COMM_WORLD (errors returned, not fatal), so its traffic never meets
 * the application's.
 *
 * MPI is process-global, so the little state kept here (whether hk
 * initialised MPI, its communicator) is too: guarded by a mutex, the one
 * exception to "no mutable globals" that MPI forces. Open MPI cannot be
 * initialised again after MPI_Finalize: once hk has finalised MPI, a later
 * hk_init in the same process gets HK_ERR_CONFIG from these functions.
 *
 * The MPI calls are in the separately loaded module libhk_mpi.so
 * (collectives/transport/mpi_module.h): the functions that need MPI load
 * it on first use, so a process that never calls them (every job hkrun
 * starts on one host) never loads libmpi. Where the module cannot be
 * loaded (hk built without MPI, or Open MPI missing on this machine)
 * they return HK_ERR_CONFIG naming what needed MPI and why it did not
 * load; hk_mpi_thread_level, hk_mpi_comm_handle, hk_mpi_owned and
 * hk_mpi_finalize_if_owned never load it and answer "no MPI".
 *
 * Thread-safety: MPI calls are made from the calling thread; with the
 * provided level below MPI_THREAD_MULTIPLE the caller must not let
 * another thread use MPI concurrently (hk_mpi_thread_level tells).
 */
#ifndef HK_WORKER_MPI_EXCHANGE_H
#define HK_WORKER_MPI_EXCHANGE_H

#include <stddef.h>

#include "coordinator/wire.h"
#include "hk/hk.h"

/** 1 if the MPI module loads here (loading it), else 0. */
int hk_mpi_built_in(void);

/**
 * Initialises MPI if needed and gives this process's rank and the size of
 * MPI_COMM_WORLD. Errors: HK_ERR_CONFIG (built without MPI; MPI already
 * finalised), HK_ERR_SYSTEM (an MPI call failed; the message names it and
 * MPI's error string).
 */
hk_status hk_mpi_world(int *rank, int *size);

/**
 * Every rank contributes `bytes` bytes at `mine`; on return all[r*bytes ..
 * (r+1)*bytes) holds rank r's (all has size*bytes bytes, rank = MPI rank
 * in MPI_COMM_WORLD). Collective: every rank must call it, with the same
 * bytes. size must equal MPI's world size. Initialises MPI if needed.
 * Errors: HK_ERR_CONFIG (without MPI; size differs from MPI's: "the
 * launcher says 4 ranks but MPI_COMM_WORLD has 3"), HK_ERR_INVALID_ARG
 * (bytes 0 or size*bytes over INT_MAX), HK_ERR_SYSTEM (MPI failed).
 */
hk_status hk_mpi_allgather(const void *mine, size_t bytes, void *all, int size);

/**
 * hk_mpi_allgather of one hk_wire_peer per rank: all[r] is rank r's.
 * Same errors.
 */
hk_status hk_mpi_exchange(const hk_wire_peer *mine, int size,
                          hk_wire_peer *all);

/**
 * The thread level MPI provided (MPI_THREAD_SINGLE..MULTIPLE values), or
 * -1 when MPI is not initialised or not built in.
 */
int hk_mpi_thread_level(void);

/**
 * hk's duplicate of MPI_COMM_WORLD for MPI links
 * (collectives/transport/link.h's hk_link_init_mpi): a pointer to the
 * MPI_Comm, valid until hk_mpi_finalize_if_owned; NULL when MPI is not
 * initialised by these functions or not built in.
 */
const void *hk_mpi_comm_handle(void);

/**
 * Checks that MPI links may be used from hk's background thread, a thread
 * other than the one that initialised MPI: MPI must provide
 * MPI_THREAD_SERIALIZED or better. `what` names the feature in messages
 * ("HK_CROSS_TRANSPORT=mpi"). When the program initialised MPI below
 * MPI_THREAD_MULTIPLE it logs a warning that the program must not call
 * MPI while hk's collectives run.
 * Errors: HK_ERR_CONFIG ("HK_CROSS_TRANSPORT=mpi needs
 * MPI_THREAD_SERIALIZED or better ... MPI provides MPI_THREAD_FUNNELED";
 * without MPI; MPI not initialised).
 */
hk_status hk_mpi_check_threads(const char *what);

/**
 * 1 if hk initialised MPI (and will finalise it), 0 if not.
 */
int hk_mpi_owned(void);

/**
 * At shutdown: frees hk's communicator, and calls MPI_Finalize if hk
 * initialised MPI (not if the application did). Safe to call when MPI was
 * never used, and more than once. Collective when it finalises: every
 * rank must call it.
 */
void hk_mpi_finalize_if_owned(void);

#endif
