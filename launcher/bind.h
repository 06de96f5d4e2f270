/*
 * bind.h - hkrun --bind-to on one host: which CPUs each local rank may
 * run on (sched_setaffinity, inherited by everything the worker starts).
 *
 * The policy is mpirun's (--map-by slot, one host), made exact:
 * - the CPUs considered are those hkrun itself may run on (its affinity
 *   mask: a cgroup's or taskset's limit is kept), ordered by socket
 *   (package), then core, then CPU number;
 * - core: local rank r gets the (r mod C)-th core of them (all its
 *   hardware threads), C = the number of such cores;
 * - hwthread: the (r mod T)-th CPU, T = the number of CPUs;
 * - socket / numa: every considered CPU of the socket / NUMA node that
 *   holds rank r's core;
 * - none: no binding at all (the worker keeps hkrun's mask).
 * So ranks fill the first socket's cores before the second's. With more
 * ranks than cores (threads) they wrap around and share: hkrun warns
 * (mpirun refuses unless told :overload-allowed).
 * The topology comes from /sys/devices/system/cpu/cpuN/topology
 * (physical_package_id, core_id) and /sys/devices/system/node/nodeN/
 * cpulist; where these are missing every CPU is its own core, on socket
 * and node 0.
 * Thread-safety: none needed (hkrun's one thread).
 */
#ifndef HK_LAUNCHER_BIND_H
#define HK_LAUNCHER_BIND_H

#include "hk/hk.h"
#include "launcher/args.h"

/** One CPU hkrun may use, with where it sits. */
typedef struct hk_cpu {
  int cpu;     /* the kernel's CPU number */
  int package; /* physical_package_id (socket) */
  int core;    /* core_id, unique within its package */
  int node;    /* NUMA node */
} hk_cpu;

/**
 * Pure: the CPUs local rank `rank` is bound to under `policy`, given the
 * considered CPUs v[0..n) (any order; sorted here by package, core,
 * cpu), written to out[0..cap) as CPU numbers in increasing order.
 * Returns how many (0 for HKRUN_BIND_NONE or n == 0). *shared (if not
 * NULL) is set to 1 when rank wraps around (shares its object with a
 * lower rank). v is reordered.
 */
int hk_bind_cpus(hk_cpu *v, int n, hkrun_bind policy, int rank, int *out,
                 int cap, int *shared);

/**
 * Reads the CPUs this process may run on, and their topology, into
 * *out (malloc'ed; the caller frees) and *n.
 * Errors: HK_ERR_SYSTEM (sched_getaffinity), HK_ERR_NOMEM.
 */
hk_status hk_bind_read_cpus(hk_cpu **out, int *n);

/** Distinct cores (packages, nodes) among v[0..n): for messages. */
int hk_bind_count(const hk_cpu *v, int n, hkrun_bind policy);

/** "0-3,8" for the CPU list cpus[0..n) (increasing) into buf[cap]. */
void hk_bind_format(const int *cpus, int n, char *buf, size_t cap);

#endif
