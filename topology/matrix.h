/*
 * matrix.h - a layout given as a pairwise matrix (what `nvidia-smi topo -m`
 * prints and what NVML answers), and its conversion into an hk_topo.
 *
 * Devices are numbered GPUs first (0..n_gpus-1), then NICs. The matrix
 * gives each pair's class; nothing in it says which switch or socket a
 * device hangs from, so hk_topo_from_matrix builds a model graph:
 *  - every device gets a PCIe link (pcie_gbps) to a "PCIe domain" node;
 *    domains are the groups of devices joined by PIX/PXB/PHB/NODE pairs;
 *    with several, each domain hangs from one "SMP" node by a SYS link
 *    (sys_gbps), so the SYS hops out of (into) a domain share its link;
 *  - NV# pairs get a direct NVLink of # links (nvlink_gbps each), unless a
 *    GPU's NV# counts add up to more than 18 (the most NVLinks any GPU has:
 *    18 on H100, H100 datasheet): then the GPUs hang from one NVSwitch node
 *    by as many links as their largest NV# (how an all-NV12 or all-NV18
 *    matrix from an NVSwitch box arises);
 * and keeps the matrix's own classes for every pair.
 */
#ifndef HK_TOPOLOGY_MATRIX_H
#define HK_TOPOLOGY_MATRIX_H

#include "topology/graph.h"

#define HK_TOPO_MAX_DEVS (HK_TOPO_MAX_GPUS + HK_TOPO_MAX_NICS)
#define HK_TOPO_MAX_NV 64 /* largest NV# accepted */

typedef struct hk_topo_matrix {
  int n_gpus, n_nics;
  char name[HK_TOPO_MAX_DEVS][HK_TOPO_NAME_LEN]; /* "GPU0", "mlx5_0" */
  char model[HK_TOPO_MAX_DEVS]
            [HK_TOPO_NAME_LEN]; /* GPU model, NIC device, "" */
  char busid[HK_TOPO_MAX_GPUS][HK_TOPO_BUSID_LEN];
  int sm[HK_TOPO_MAX_GPUS];                          /* 0 unknown */
  char affinity[HK_TOPO_MAX_GPUS][HK_TOPO_NAME_LEN]; /* "0-23,48-71", "" */
  int numa[HK_TOPO_MAX_GPUS];                        /* -1 unknown */
  hk_topo_path cls[HK_TOPO_MAX_DEVS][HK_TOPO_MAX_DEVS];
  int nvl[HK_TOPO_MAX_DEVS][HK_TOPO_MAX_DEVS]; /* NV# count, 0 if not NV */
  double nvlink_gbps;                          /* per link, one direction */
  double pcie_gbps;                            /* a device's PCIe link */
  double sys_gbps;                             /* between two PCIe domains */
} hk_topo_matrix;

/**
 * Builds a topology from m (see above). source names the format ("nvidia-
 * smi", "nvml"). *out is owned by the caller (hk_topo_free).
 * Errors: HK_ERR_CONFIG for an inconsistent matrix (a class on the
 * diagonal other than X, X off it, NV# between a GPU and a NIC, or a
 * matrix that is not symmetric: the message names both devices),
 * HK_ERR_NOMEM.
 */
hk_status hk_topo_from_matrix(const hk_topo_matrix *m, const char *source,
                              hk_topo **out);

#endif
