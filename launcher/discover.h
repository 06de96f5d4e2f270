/*
 * discover.h - an elastic job's host discovery script (hkrun
 * --host-discovery-script, Horovod's): a program that prints the hosts
 * the job may use, one "host" or "host:slots" line each.
 */
#ifndef HK_LAUNCHER_DISCOVER_H
#define HK_LAUNCHER_DISCOVER_H

#include <stddef.h>

/**
 * Runs script (through /bin/sh -c, as Horovod does; its stdout is read,
 * its stderr goes to hkrun's) and writes into out[cap] one line that says
 * what it lists: "--host-discovery-script S lists 4 slots on 1 host
 * (localhost:4)", or why it could not tell ("... cannot be run: ...",
 * "... exited with status 3", "... lists no host"). A line without
 * ":slots" counts slots_per_host slots (1 when 0); a bad slot count is
 * named. Returns the slots listed, or -1 when the script failed.
 * Blocks until the script exits. Thread-safety: any thread (popen).
 */
int hkrun_discover(const char *script, int slots_per_host, char *out,
                   size_t cap);

#endif
