/*
 * remote.h - what hkrun does around mpirun for a job on other hosts:
 * checks that every host answers before anything starts there, and runs
 * mpirun as a child it supervises instead of exec'ing it, so that a signal,
 * a stuck host or hkrun's end leave nothing behind.
 *
 * Reaching the hosts (hk_remote_probe): Open MPI starts its daemons over
 * ssh (or the agent named by plm_rsh_agent); a host that is down, unknown
 * or silently drops packets makes mpirun wait for ssh's own timeouts (two
 * minutes and more), names the host without its domain, and an ssh without
 * BatchMode may prompt for a password. So before mpirun, hkrun runs the
 * same agent to every other host, all at once, with `true` as the command
 * (`ssh -o BatchMode=yes -o ConnectTimeout=T HOST true` for ssh, T the
 * start timeout), and fails naming each host as it was typed, with the
 * agent's last words, if one does not answer with status 0 within
 * HK_START_TIMEOUT_S. The probes run in process groups of their own,
 * SIGKILLed at the deadline, so no ssh outlives the check.
 *
 * Supervising mpirun (hk_remote_run): mpirun runs in a process group of
 * its own (its stdin is hkrun's unless that is a terminal, which a
 * background group may not read: then /dev/null). SIGINT, SIGTERM and
 * SIGHUP to hkrun are forwarded to that group (mpirun then stops the ranks
 * on every host); after the grace period the group gets SIGTERM, and
 * SIGKILL 0.5 s later; a second signal sends SIGKILL at once. When mpirun
 * has exited, what is left in its group (an agent it started) is
 * SIGKILLed; if hkrun is SIGKILLed, mpirun gets SIGKILL (PDEATHSIG).
 * Exit status: 128 + the signal when hkrun was signalled (130
 * for Ctrl-C, as locally), else mpirun's (128 + signal if it was killed).
 *
 * Not thread-safe (signal dispositions, fork).
 */
#ifndef HK_LAUNCHER_REMOTE_H
#define HK_LAUNCHER_REMOTE_H

#include "launcher/argv.h"
#include "launcher/hosts.h"

/** The agent mpirun will start its daemons with: from --mpi-args
 *  ("--mca plm_rsh_agent X") or OMPI_MCA_plm_rsh_agent, else NULL
 *  (ssh). Returns a malloc'ed string the caller frees, or NULL. */
char *hk_remote_agent(const char *mpi_args);

/** Whether Open MPI starts daemons itself over an rsh agent here: not
 *  inside a Slurm or PBS allocation (whose launchers it uses instead). */
int hk_remote_uses_rsh(void);

/**
 * Runs the probe on every host of `hosts` that is not this machine
 * (local_hostname, "localhost", "127.0.0.1"), in parallel, bounded by
 * timeout_s. agent: NULL for ssh, given ssh_args (split as sh would:
 * hk_remote_ssh_options' BatchMode and ConnectTimeout, and the port and
 * identity mpirun's ssh gets, hk_mpirun_rsh_args), or an agent command
 * line (split on blanks; the first of "a : b" alternatives; ssh_args
 * unused). Returns 0 when every host answered, else 1 after saying
 * on stderr, for each one that did not, the host as given, why (its exit
 * status and last stderr line, or that it did not answer in time) and what
 * was run.
 */
int hk_remote_probe(const hk_hostlist *hosts, const char *local_hostname,
                    const char *agent, const char *ssh_args, double timeout_s);

/** ssh options hkrun gives Open MPI (plm_rsh_args) and its probes: never
 *  prompt, and give up connecting after timeout_s. Written into buf. */
const char *hk_remote_ssh_options(double timeout_s, char *buf, size_t cap);

/** Runs cmd (cmd.v[0] searched in PATH) supervised as above, with the
 *  grace period in seconds. Returns hkrun's exit status (127 if it could
 *  not be started, after saying why). */
int hk_remote_run(const hk_argv *cmd, double grace_s);

#endif
