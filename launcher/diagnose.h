/*
 * diagnose.h - `hkrun --diagnose DIR`: reads every flight record in DIR
 * (hk-flight.<job>.<rank>.txt, common/flight_record.h), merges them and
 * prints what a hang looks like from all ranks at once:
 *   - the job, the world size its records give, and the ranks whose record
 *     is missing;
 *   - one line per rank present (host, pid, rounds run, why it wrote);
 *   - the first divergence: either the first round some ranks ran and
 *     others never reached (its tensors, who ran it, who did not), or,
 *     when every rank stopped after the same round, the tensor pending on
 *     some ranks only that was submitted first (by CLOCK_REALTIME: the
 *     records of different hosts are merged on wall-clock time), naming
 *     the ranks that submitted it and those that never did; then the other
 *     tensors pending on some ranks only, and the collectives of the last
 *     round not finished everywhere;
 *   - or "no divergence" when the records agree.
 * DIR holding records of several jobs: the job of the newest record is
 * diagnosed, the others are named and ignored.
 */
#ifndef HK_LAUNCHER_DIAGNOSE_H
#define HK_LAUNCHER_DIAGNOSE_H

#include <stdio.h>

/**
 * Diagnoses the records in dir, printing the report on out and errors on
 * err. Returns the exit status: 0 when the records were read (whether a
 * divergence was found or they are consistent: the report says which); 1
 * when dir cannot be read, holds no record, or a record is not well formed
 * (the message names the file, line and fault) or records of one job
 * disagree on the world size. Thread-safety: reentrant.
 */
int hkrun_diagnose(const char *dir, FILE *out, FILE *err);

#endif
