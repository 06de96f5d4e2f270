/*
 * dump.h - `hkrun --dump PID`: asks a running job to write its flight
 * records (observe/flight.h). PID is the process id of the job's hkrun
 * (printed by `hkrun -v`, or found with `pgrep hkrun`), which asks each
 * rank it started through that rank's dump pipe (no signal reaches a
 * rank); or of the mpirun that a multi-host hkrun became: Open MPI's
 * mpirun forwards SIGUSR1 to every rank, which ends a rank that was not
 * started with HK_FLIGHT_SIGNAL=1, so that is sent only when
 * HK_FLIGHT_SIGNAL=1 is set for hkrun --dump too (the user saying the job
 * has it).
 */
#ifndef HK_LAUNCHER_DUMP_H
#define HK_LAUNCHER_DUMP_H

#include <stdio.h>

/**
 * Checks that pid is a process named hkrun, mpirun, mpiexec, orterun or
 * prterun (/proc/PID/comm) and sends it SIGUSR1 (an mpirun only with
 * HK_FLIGHT_SIGNAL=1 in this environment). Says what it did on out, or
 * why not on err ("hkrun --dump: no process 1234", "process 1234 is
 * 'bash', not hkrun or mpirun", mpirun without HK_FLIGHT_SIGNAL=1, the
 * system's reason for a refused kill). Returns the exit status: 0 sent, 1
 * not. Thread-safety: reentrant.
 */
int hkrun_dump(long pid, FILE *out, FILE *err);

#endif
