/*
 * flight.h - the flight recorder: every rank keeps its last
 * HK_FLIGHT_RECORDER collectives (0: off) in a fixed ring
 * (common/flight_record.h) and writes them, with the tensors still in
 * flight, to <base>/hk-<job>/hk-flight.<job>.<rank>.txt (base:
 * HK_FLIGHT_DIR, else $TMPDIR, else /tmp; the job's folder is made
 * privately by the first record, common/outfile.h) when
 *   - the job fails on this rank for any reason but hk_shutdown (a stall
 *     shutdown, HK_TIMEOUT_S, a lost peer, hkrun's abort, any error of
 *     the background thread): the error hook;
 *   - rank 0's stall inspector warns (the stall hook): rank 0 sends
 *     SIGUSR1 to hkrun, its parent, which asks every rank (as for `hkrun
 *     --dump`), and its own record gives the warning as the reason;
 *     without hkrun as its parent (mpirun, srun) rank 0 writes only its
 *     own;
 *   - hkrun asks (`hkrun --dump PID` sends hkrun SIGUSR1): hkrun writes a
 *     byte into the pipe it gave each rank it started (HK_DUMP_FD). No
 *     signal reaches the rank, so the trainer's blocking calls (sleep,
 *     poll, a read) are never interrupted. Not hkrun's connection to the
 *     rank: that one becoming readable aborts every blocking wait of hk
 *     (common/io.h), so a request on it would fail a collective in flight;
 *   - with HK_FLIGHT_SIGNAL=1 only (ranks hkrun did not start: mpirun,
 *     srun), the process gets SIGUSR1: the handler only writes a byte to a
 *     pipe. Off, hk leaves SIGUSR1 to the program.
 * The background thread polls one epoll set of those pipes (the poll_fd
 * hook) and writes the file (readable).
 * A record that cannot be written (a full disk, the folder) is said in a
 * warning naming the file and the reason; the job goes on.
 *
 * It is an observer (observe/observe.h): an entry is made when the
 * background thread takes a tensor from the queue (taken; the submit time
 * was stamped by the engine under the lock it takes anyway:
 * wants_submit_time), and updated at negotiated, batch_started and
 * batch_done; round_started counts the rounds. A tensor's entry is found
 * again by its sequence number, kept in the tensor's slot (uses_slot).
 * A dump lists the tensors in flight through the engine's
 * hk_obs_setup.pending.
 *
 * Thread-safety: the ring is the background thread's alone (every hook
 * runs there), so recording takes no lock and allocates nothing; the dump
 * reads the engine's queue and in-flight table under the engine's lock
 * (hk_obs_pending).
 * Cost per collective: one ring slot and four time stamps, from readings
 * the background thread makes anyway (hk_now()) but one per batch for its
 * start; the realtime clock is the monotonic one plus an offset read once
 * per round.
 * bench/flight_cost.c measures it (README, "Flight recorder").
 */
#ifndef HK_OBSERVE_FLIGHT_H
#define HK_OBSERVE_FLIGHT_H

#include "common/flight_record.h"
#include "observe/observe.h"

/**
 * hk_init: with s->cfg->flight_recorder > 0, checks the records' base
 * folder (HK_FLIGHT_DIR set but no folder this process can write into
 * fails; the default only warns), allocates the ring, takes hkrun's pipe
 * (HK_DUMP_FD, when it holds a pipe open for reading: close-on-exec from
 * now on), with HK_FLIGHT_SIGNAL=1 makes the SIGUSR1 pipe and installs
 * the handler (replacing the program's own), and attaches the recorder;
 * with 0 does nothing. Detach (after the background thread stopped)
 * restores the old SIGUSR1 disposition (the default, "terminate", becomes
 * "ignore": a request still on its way must not kill a process that has
 * left the job), closes the pipes and frees. Only one hk context exists
 * per process, so the handler's pipe is the one process-wide variable of
 * this module. Errors: HK_ERR_CONFIG (HK_FLIGHT_DIR), HK_ERR_NOMEM,
 * HK_ERR_SYSTEM, or hk_observe_attach's (nothing is left installed then).
 */
hk_status hk_flight_attach(hk_observers *o, const hk_obs_setup *s);

#endif
