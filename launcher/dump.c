/*
 * dump.c - `hkrun --dump PID` (dump.h).
 */
#include "launcher/dump.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>

#include "common/config.h"

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
  /* mpirun forwards the signal itself to every rank, where it ends a rank
   * that did not opt in (HK_FLIGHT_SIGNAL=1): the user says the job did by
   * setting it here too */
  hk_config cfg;
  int is_hkrun = !strcmp(comm, "hkrun");
  if (!is_hkrun && (hk_config_load_var(&cfg, "HK_FLIGHT_SIGNAL") != HK_OK ||
                    !cfg.flight_signal)) {
    fprintf(err,
            "hkrun --dump: %s (pid %ld) would forward SIGUSR1 to every rank, "
            "which ends a rank that was not started with "
            "HK_FLIGHT_SIGNAL=1; if the job was (hkrun -x "
            "HK_FLIGHT_SIGNAL=1, or mpirun -x), say so here too: "
            "HK_FLIGHT_SIGNAL=1 hkrun --dump %ld\n",
            comm, pid, pid);
    return 1;
  }
  if (kill((pid_t)pid, SIGUSR1) != 0) {
    fprintf(err, "hkrun --dump: cannot signal %s (pid %ld): %s\n", comm, pid,
            strerror(errno));
    return 1;
  }
  if (is_hkrun)
    fprintf(out,
            "hkrun: asked the job of hkrun (pid %ld) to write its flight "
            "records: each rank writes hk-flight.JOB.RANK.txt into the job's "
            "folder hk-JOB in HK_FLIGHT_DIR (default: $TMPDIR, else /tmp); "
            "that hkrun names the folder when the job ends\n",
            pid);
  else
    fprintf(out,
            "hkrun: asked the job of %s (pid %ld) to write its flight "
            "records: each rank writes hk-flight.JOB.RANK.txt into the job's "
            "folder hk-JOB in its HK_FLIGHT_DIR (default: $TMPDIR, else "
            "/tmp)\n",
            comm, pid);
  return 0;
}
