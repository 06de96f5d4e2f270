/*
 * flight.h - the flight recorder (issue 15, item 6): every rank keeps its
 * last HK_FLIGHT_RECORDER collectives (0: off) in a fixed ring
 * (common/flight_record.h) and writes them, with the tensors still in
 * flight, to HK_FLIGHT_DIR/hk-flight.<job>.<rank>.txt when
 *   - the job fails on this rank for any reason but hk_shutdown (a stall
 *     shutdown, HK_TIMEOUT_S, a lost peer, hkrun's abort, any error of
 *     the background thread): worker/background.c's fail_job;
 *   - rank 0's stall inspector warns: rank 0 sends SIGUSR1 to hkrun, its
 *     parent, which forwards it to every rank (as for `hkrun --dump`), and
 *     its own record gives the warning as the reason; without hkrun as
 *     its parent (mpirun, srun) rank 0 writes only its own;
 *   - the process gets SIGUSR1 (`hkrun --dump PID` forwards one to every
 *     rank): the handler only writes a byte to a pipe that the background
 *     thread polls, and the background thread writes the file.
 * HK_FLIGHT_DIR defaults to the folder of HK_TIMELINE when that is set,
 * else the current directory.
 *
 * Thread-safety: the ring is the background thread's alone: entries are
 * made when it takes handles from the queue (the submit time was stamped
 * by hk_queue_submit under the lock it takes anyway), and updated as it
 * negotiates and runs them, so recording takes no lock and allocates
 * nothing; the dump reads the in-flight table under ctx->mu, as the queue
 * does. Every function here but open/close is the background thread's;
 * each does nothing when the recorder is off (ctx->flight NULL).
 * Cost per collective: one ring slot and four time stamps, from readings
 * the background thread makes anyway (hk_now()) but one per batch for its
 * start; the realtime clock is the monotonic one plus an offset read once
 * per round.
 * bench/flight_cost.c measures it (README, "Flight recorder").
 */
#ifndef HK_WORKER_FLIGHT_H
#define HK_WORKER_FLIGHT_H

#include "common/flight_record.h"
#include "worker/context.h"

/**
 * hk_init: allocates the ring (ctx->cfg.flight_recorder entries; 0 leaves
 * ctx->flight NULL), makes the wake-up pipe and installs the SIGUSR1
 * handler (replacing the program's own, which hk_flight_close restores).
 * Only one hk context exists per process, so the handler's pipe is the one
 * process-wide variable of this module. Errors: HK_ERR_NOMEM, HK_ERR_SYSTEM.
 */
hk_status hk_flight_open(hk_ctx *ctx);

/** hk_shutdown (after the background thread stopped): restores the old
 *  SIGUSR1 disposition (the default, "terminate", becomes "ignore": a
 *  request still on its way from hkrun must not kill a process that has
 *  left the job), closes the pipe, frees. NULL flight is fine. */
void hk_flight_close(hk_ctx *ctx);

/** The pipe's read end the background thread polls, or -1 when off. */
int hk_flight_fd(const hk_ctx *ctx);

/** The pipe was readable: drains it and writes the record ("SIGUSR1"). */
void hk_flight_signalled(hk_ctx *ctx);

/** Records the handles (a list linked by next) just taken from the queue:
 *  one entry each, state submitted, with their submit times (a handle a
 *  dump recorded while it was queued keeps that entry). */
void hk_flight_taken(hk_ctx *ctx, hk_handle list);

/** A RESPONSES with n > 0 responses is being applied: the next round
 *  (counted the same on every rank), negotiated at t_ready (hk_now()). */
void hk_flight_round(hk_ctx *ctx, double t_ready);

/** h (or a handle made up for a joined rank, given an entry here) was
 *  scheduled in the current round at t_ready. */
void hk_flight_negotiated(hk_ctx *ctx, hk_handle h, double t_ready);

/** h's collective started (HK_FLIGHT_RUNNING, start time t), completed
 *  (HK_FLIGHT_DONE) or failed (HK_FLIGHT_FAILED; end time t). t: hk_now(). */
void hk_flight_mark(hk_ctx *ctx, hk_handle h, hk_flight_state state, double t);

/** Rank 0's stall inspector warned (`what`: its message): every rank
 *  writes its record through hkrun (see above), or rank 0 alone. */
void hk_flight_stall(hk_ctx *ctx, const char *what);

/** Writes this rank's record now, with `reason` on its reason line; the
 *  tensors still waiting in the queue get their entries first, so the
 *  record holds every submit. Failures are logged (a warning naming the
 *  file), never returned: the job's own error matters more. Background
 *  thread only. */
void hk_flight_dump(hk_ctx *ctx, const char *reason);

#endif
