/*
 * dump.c - `hkrun --dump PID` (dump.h).
 */
#include "launcher/dump.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>

/* Launchers whose SIGUSR1 reaches every rank: hkrun forwards it, and Open
 * MPI's mpirun (orterun, prterun in 5.x) propagates SIGUSR1/SIGUSR2 to the
 * processes it started (its manual page, "Signal Propagation"). */
static const char *const launchers[] = {"hkrun", "mpirun", "mpiexec", "orterun",
                                        "prterun"};

int hkrun_dump(long pid, FILE *out, FILE *err) {
  char path[64], comm[64] = "";
  snprintf(path, sizeof path, "/proc/%ld/comm", pid);
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(err, "hkrun --dump: no process %ld (%s)\n", pid, strerror(errno));
    return 1;
  }
  if (!fgets(comm, sizeof comm, f))
    comm[0] = '\0';
  fclose(f);
  comm[strcspn(comm, "\n")] = '\0';
  int known = 0;
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
    known |= !strcmp(comm, launchers[i]);
  if (!known) {
    fprintf(err,
            "hkrun --dump: process %ld is '%s', not hkrun or mpirun: give "
            "the pid of the hkrun that started the job\n",
            pid, comm);
    return 1;
  }
  if (kill((pid_t)pid, SIGUSR1) != 0) {
    fprintf(err, "hkrun --dump: cannot signal %s (pid %ld): %s\n", comm, pid,
            strerror(errno));
    return 1;
  }
  fprintf(out,
          "hkrun: asked the job of %s (pid %ld) to write its flight records: "
          "each rank writes hk-flight.JOB.RANK.txt into its HK_FLIGHT_DIR "
          "(default: beside HK_TIMELINE, else its working directory)\n",
          comm, pid);
  return 0;
}
