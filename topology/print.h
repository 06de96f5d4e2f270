/*
 * print.h - the human-readable report of a layout that `hktopo` prints:
 * the device matrix (as `nvidia-smi topo -m`), path bandwidths, the rings
 * with their bandwidth, the local-rank -> GPU -> NIC mapping, and the
 * predicted allreduce busbw for 1 MiB, 64 MiB and 1 GiB inside the host and
 * across 2, 4 and 16 such hosts at 10, 25 and 100 Gbit/s.
 * Thread-safety: each call writes only to its FILE.
 */
#ifndef HK_TOPOLOGY_PRINT_H
#define HK_TOPOLOGY_PRINT_H

#include <stdio.h>

#include "topology/graph.h"
#include "topology/parse.h"

/** The whole report for t; `what` names it (a path, "NVML"). Errors: as
 * hk_topo_find_rings / hk_cost_allreduce (the report stops there). */
hk_status hk_topo_print_report(FILE *f, const hk_topo *t, const char *what);

/** The class matrix only (GPUs and NICs, with CPU affinity and NUMA). */
void hk_topo_print_matrix(FILE *f, const hk_topo *t);

/** The rings of an NCCL graph file. */
void hk_ncclgraph_print(FILE *f, const hk_ncclgraph *g, const char *what);

#endif
