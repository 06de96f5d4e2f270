/*
 * ring.h - ordering the GPUs of one host into rings.
 *
 * A ring sends around a cycle of GPUs in one direction; every hop is the
 * path hk_topo computed between two GPUs, and every path uses directed
 * link resources (a link's two directions are separate). A ring's
 * bandwidth is the least, over the resources it uses, of what is left of
 * the resource divided by how many of its hops use it (a ring crossing the
 * SMP link twice the same way gets half of it each time).
 *
 * The best ring maximises, in this order: (1) its bandwidth, (2) then
 * fewest SYS hops (hops whose class is SYS: crossings of the socket
 * boundary), (3) then the smallest sum of hop classes (PIX before PHB...),
 * (4) then the first in lexicographic order of GPU index, starting at the
 * lowest GPU. It is found by exhaustive depth-first search with
 * branch-and-bound (a ring's bandwidth can only fall as hops are added;
 * SYS hops still to come are bounded below by the number of groups of GPUs
 * joined by non-SYS paths that remain to be visited): exact for the 8-16
 * GPUs of a host, within a budget of HK_TOPO_SEARCH_BUDGET steps per ring
 * past which the best ring found so far is used and `exact` says so.
 *
 * Several rings (NCCL's channels): after each ring, the bandwidth it uses
 * is taken off every resource it crosses and the search runs again on what
 * is left, over hops no worse in class than the first ring's worst (as
 * NCCL, no PCIe ring beside NVLink rings), until no ring with bandwidth is
 * left or HK_TOPO_MAX_RINGS are found. On an NVLink mesh this uses every NVLink
 * (DGX-1 V100: two rings each way); on an NVSwitch one ring takes every GPU's
 * links; on PCIe the first ring fills the GPUs' PCIe links.
 */
#ifndef HK_TOPOLOGY_RING_H
#define HK_TOPOLOGY_RING_H

#include "topology/graph.h"

#define HK_TOPO_MAX_RINGS 16
#define HK_TOPO_SEARCH_BUDGET 2000000L

typedef struct hk_topo_ring {
  int n;                     /* GPUs on the ring */
  int gpu[HK_TOPO_MAX_GPUS]; /* GPU indices in ring order; gpu[n-1] sends
                                to gpu[0] */
  double gbps;               /* GB/s per direction this ring gets (after the
                                rings found before it); 0 for a single GPU */
  int sys_hops;              /* hops whose path class is SYS */
  hk_topo_path worst;        /* worst path class on the ring */
  int nvlink_only;           /* every hop is an NVLink path */
} hk_topo_ring;

typedef struct hk_topo_rings {
  int n_rings;
  hk_topo_ring ring[HK_TOPO_MAX_RINGS];
  double total_gbps; /* sum over the rings, GB/s per direction */
  int exact;         /* 1 if every search finished within its budget */
} hk_topo_rings;

/**
 * Finds rings over the n GPUs listed in gpus (GPU indices of t, distinct,
 * 1 <= n <= HK_TOPO_MAX_GPUS) as described above; ring[0] is the best.
 * A single GPU gives one ring of one GPU and 0 GB/s.
 * Errors: HK_ERR_INVALID_ARG (n out of range, an index out of range or
 * repeated), HK_ERR_CONFIG (no ring exists: some pair of these GPUs has no
 * path), HK_ERR_NOMEM. Thread-safety: reads t only.
 */
hk_status hk_topo_find_rings(const hk_topo *t, const int *gpus, int n,
                             hk_topo_rings *out);

/**
 * The ring order for a job with local_size ranks on a host of layout t.
 * Convention: local rank r drives GPU r (CUDA device r), so the job uses
 * GPUs 0..local_size-1 of t; the best ring over them (hk_topo_find_rings,
 * ring[0]) is written to order[0..local_size-1]: order[p] is the GPU, and
 * so the local rank, at ring position p; local rank order[p] sends to
 * order[(p+1) % local_size]. A runtime that instead binds GPUs to ranks
 * binds local rank p to GPU order[p] and keeps its ring in rank order: the
 * same ring. order is caller-owned, local_size ints.
 * Errors: HK_ERR_INVALID_ARG (local_size < 1, NULL), HK_ERR_CONFIG (t has
 * no GPU, e.g. a skeleton, or fewer GPUs than local_size; the message gives
 * both counts), as hk_topo_find_rings.
 */
hk_status hk_topo_ring_order(const hk_topo *t, int local_size, int *order);

#endif
