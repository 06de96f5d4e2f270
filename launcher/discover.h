/*
 * discover.h - an elastic job's host discovery script (hkrun
 * --host-discovery-script, Horovod's): a program that prints the hosts
 * the job may use, one "host" or "host:slots" line each.
 */
#ifndef HK_LAUNCHER_DISCOVER_H
#define HK_LAUNCHER_DISCOVER_H

#include <stddef.h>

/* The longest a discovery script may take (less when --elastic-timeout
 * is shorter): it is killed after that. */
#define HKRUN_DISCOVER_MAX_S 5.0

/**
 * Runs script (through /bin/sh -c, as Horovod does, in a process group of
 * its own; its stdout is read, at most 64 KiB of it, its stderr goes to
 * hkrun's) and writes into out[cap] one line that says what it lists:
 * "--host-discovery-script S lists 4 slots on 1 host (localhost:4)", or
 * why it could not tell ("... cannot be run: ...", "... exited with
 * status 3", "... lists no host", "... did not answer within 5 s (it was
 * killed)"). A line without ":slots" counts slots_per_host slots (1 when
 * 0); a bad slot count is named. Returns the slots listed, or -1 when
 * the script failed. Blocks until the script exits, for at most limit_s
 * seconds: then its whole process group is killed (SIGKILL) and reaped,
 * nothing of it left. Thread-safety: any thread (fork; it reaps only its
 * own child).
 */
int hkrun_discover(const char *script, int slots_per_host, double limit_s,
                   char *out, size_t cap);

/** A host a discovery script listed. */
typedef struct hkrun_listed {
  char host[256]; /* as listed (without ":slots") */
  int slots;      /* 1..65536 */
} hkrun_listed;

/**
 * hkrun_discover, also giving the hosts listed: the first cap of them in
 * hosts[] (in the script's order), how many were listed in *n (0 when the
 * script failed).
 */
int hkrun_discover_hosts(const char *script, int slots_per_host, double limit_s,
                         hkrun_listed *hosts, int cap, int *n, char *out,
                         size_t outcap);

#endif
