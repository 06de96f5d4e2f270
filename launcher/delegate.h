/*
 * delegate.h - hkrun's path for jobs on several hosts: read -H or the
 * host file, check -np against the slots, and run Open MPI's mpirun
 * with the command launcher/mpirun.h builds. hk never starts processes on
 * other machines itself.
 *
 * Order (nothing is started before every check has passed):
 *   1. -H / --hostfile parsed (launcher/hosts.h); a bad list, an
 *      unreadable file, or np above the slot total ("17 processes
 *      requested but only 16 slots") ends hkrun with status 2.
 *   2. mpirun is used with --mpi, several hosts, or one host that is not
 *      this one (hk_mpirun_wanted); otherwise the job runs on this host
 *      through the local launcher, as without -H (np from the slots).
 *   3. For mpirun: a fresh secret goes into HK_SECRET, --network-interface
 *      into HK_SOCKET_IFNAME, the per-process HK_* variables of an
 *      enclosing job are removed from the environment; every other host
 *      must answer the agent Open MPI will use within HK_START_TIMEOUT_S
 *      (remote.h; else status 1, naming each host as given, nothing
 *      started); the command is printed with --verbose ("hkrun: exec:
 *      mpirun ...") and run as hkrun's supervised child (remote.h):
 *      mpirun's exit status is hkrun's, or 128 + the signal hkrun got. If
 *      mpirun cannot be executed, status 127.
 *
 * Not thread-safe: changes the process environment (setenv/unsetenv).
 */
#ifndef HK_LAUNCHER_DELEGATE_H
#define HK_LAUNCHER_DELEGATE_H

#include "launcher/args.h"

/** Returned by hkrun_delegate when the job runs on this host. */
#define HKRUN_RUN_LOCALLY (-1)

/**
 * Takes over the job when -H, --hostfile or --mpi was given. Returns
 * HKRUN_RUN_LOCALLY when hkrun should start the workers itself (args->np
 * is then set, also from the slots), or an exit status for hkrun after
 * saying why on stderr (2: bad hosts, np, or an option that needs mpirun;
 * 127: mpirun could not be executed; 1: out of memory or a host that
 * does not answer), or mpirun's exit status once it has ended.
 */
int hkrun_delegate(hkrun_args *args);

#endif
