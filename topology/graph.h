/*
 * graph.h - one in-memory description of a server's GPU/NIC layout.
 *
 * Every source (nvidia-smi text, NCCL topology XML, NVML) is turned into the
 * same hk_topo: nodes (GPUs, CPU/NUMA domains, PCIe switches, NVSwitch, NICs)
 * joined by links, and for every pair of GPUs (and every GPU/NIC pair) the
 * path between them: its class, its bottleneck bandwidth and the links it
 * uses. Ring search (ring.h) and the cost model (cost.h) only read this.
 *
 * Units, everywhere in topology/: bandwidth in GB/s (10^9 bytes per second)
 * in ONE direction of a link (links are full duplex: each direction has the
 * whole figure), latency in microseconds, network rates in Gbit/s.
 * Where the figures come from: topology/figures.h.
 *
 * Ownership: an hk_topo is one heap block made by hk_topo_new() or a parser,
 * freed by hk_topo_free(). It holds no pointers. Thread-safety: none while
 * being built; once built, any number of threads may read it.
 */
#ifndef HK_TOPOLOGY_GRAPH_H
#define HK_TOPOLOGY_GRAPH_H

#include <stddef.h>

#include "hk/hk.h"

#define HK_TOPO_MAX_GPUS 32
#define HK_TOPO_MAX_NICS 64
#define HK_TOPO_MAX_NODES 256
#define HK_TOPO_MAX_LINKS 1024
#define HK_TOPO_MAX_HOPS 16 /* links on one path */
#define HK_TOPO_NAME_LEN 64 /* bytes incl. NUL */
#define HK_TOPO_BUSID_LEN 20
#define HK_TOPO_NOTE_LEN 2048

typedef enum hk_topo_node_kind {
  HK_NODE_GPU = 0,
  HK_NODE_CPU = 1,      /* a CPU socket / NUMA domain: root of a PCIe tree */
  HK_NODE_PCI = 2,      /* a PCIe switch or bridge */
  HK_NODE_NVSWITCH = 3, /* all NVSwitches of the box, merged (as NCCL does) */
  HK_NODE_NIC = 4,
} hk_topo_node_kind;

typedef enum hk_topo_link_kind {
  HK_LINK_NVL = 0, /* NVLink (nvlinks = number of bonded links) */
  HK_LINK_PCI = 1, /* a PCIe link from a device or switch to its parent */
  HK_LINK_SYS = 2, /* the SMP interconnect between two CPU sockets */
  HK_LINK_NET = 3, /* between hosts (not in a host's graph; cost model) */
} hk_topo_link_kind;

/*
 * Path classes, best first, with nvidia-smi's legend (`nvidia-smi topo -m`):
 * NVL = NV# (# bonded NVLinks, directly or through NVSwitch), PIX = at most
 * one PCIe bridge, PXB = several PCIe bridges without the host bridge, PHB =
 * through a PCIe host bridge (the CPU), NODE = between host bridges of one
 * NUMA node, SYS = across the SMP interconnect between NUMA nodes, NET =
 * between hosts. LOC is a device to itself (nvidia-smi's X).
 */
typedef enum hk_topo_path {
  HK_PATH_LOC = 0,
  HK_PATH_NVL = 1,
  HK_PATH_PIX = 2,
  HK_PATH_PXB = 3,
  HK_PATH_PHB = 4,
  HK_PATH_NODE = 5,
  HK_PATH_SYS = 6,
  HK_PATH_NET = 7,
} hk_topo_path;

typedef struct hk_topo_node {
  hk_topo_node_kind kind;
  int parent;                    /* node id of the PCIe parent, -1 at a root */
  int cpu;                       /* node id of the CPU root above, -1 none */
  int index;                     /* GPU/NIC index (0..n-1); CPU: numa id */
  char name[HK_TOPO_NAME_LEN];   /* "GPU3", "mlx5_0", "NUMA1", "switch" */
  char model[HK_TOPO_NAME_LEN];  /* GPU model or CPU vendor, "" unknown */
  char busid[HK_TOPO_BUSID_LEN]; /* "0000:0f:00.0", "" unknown */
  int sm;                        /* GPU compute capability x10, 0 unknown */
  double nic_gbit;               /* NIC port rate, Gbit/s, 0 unknown */
  char affinity[HK_TOPO_NAME_LEN]; /* CPU list as printed, "" unknown */
  int numa;                        /* NUMA node, -1 unknown */
} hk_topo_node;

typedef struct hk_topo_link {
  int a, b; /* node ids */
  hk_topo_link_kind kind;
  int nvlinks;   /* NVLink: bonded link count; else 0 */
  double gbps;   /* GB/s per direction */
  double lat_us; /* one hop, µs */
} hk_topo_link;

/* A path between two endpoints. Hops are DIRECTED resources: link l
 * traversed from its a to its b is resource 2*l, from b to a is 2*l+1. */
typedef struct hk_topo_pathinfo {
  hk_topo_path cls;
  int nvlinks;   /* NVL: bonded links on the narrowest hop; else 0 */
  double gbps;   /* bottleneck GB/s (min over hops); 0 if no route */
  double lat_us; /* sum over hops, µs */
  int nhops;
  int hop[HK_TOPO_MAX_HOPS];
} hk_topo_pathinfo;

typedef struct hk_topo {
  char source[HK_TOPO_NAME_LEN]; /* "nvidia-smi", "ncclxml", "nvml", ... */
  char note[HK_TOPO_NOTE_LEN];   /* assumptions made, "" if none */
  int n_nodes, n_links;
  hk_topo_node node[HK_TOPO_MAX_NODES];
  hk_topo_link link[HK_TOPO_MAX_LINKS];
  int n_gpus, n_nics;
  int gpu[HK_TOPO_MAX_GPUS]; /* node id of GPU i */
  int nic[HK_TOPO_MAX_NICS]; /* node id of NIC i */
  int gpu_slots, nic_slots;  /* skeleton XML: PCIe slots of GPU/NIC class
                                that name no device (NCCL fills them in) */
  hk_topo_pathinfo gpu_path[HK_TOPO_MAX_GPUS][HK_TOPO_MAX_GPUS];
  hk_topo_pathinfo nic_path[HK_TOPO_MAX_GPUS][HK_TOPO_MAX_NICS];
} hk_topo;

/** Allocates an empty topology (zeroed). Errors: HK_ERR_NOMEM. */
hk_status hk_topo_new(hk_topo **out);

/** Frees a topology made by any hk_topo function. NULL is fine. */
void hk_topo_free(hk_topo *t);

/**
 * Appends a node; *id receives its node id. For GPU and NIC kinds, index is
 * set to the next GPU/NIC number. name is copied (truncated to fit).
 * Errors: HK_ERR_CONFIG when HK_TOPO_MAX_NODES / _GPUS / _NICS is reached
 * (the message names the limit).
 */
hk_status hk_topo_add_node(hk_topo *t, hk_topo_node_kind kind, const char *name,
                           int parent, int *id);

/**
 * Appends a link between nodes a and b (gbps per direction, µs per hop);
 * for NVLink nvlinks is the bonded count. Errors: HK_ERR_CONFIG when
 * HK_TOPO_MAX_LINKS is reached, HK_ERR_INVALID_ARG for a bad node id.
 */
hk_status hk_topo_add_link(hk_topo *t, int a, int b, hk_topo_link_kind kind,
                           int nvlinks, double gbps, double lat_us);

/** Link id between a and b of the given kind, or -1. */
int hk_topo_find_link(const hk_topo *t, int a, int b, hk_topo_link_kind kind);

/**
 * Fills t->gpu_path and t->nic_path from the links: NVLink first (a direct
 * link, else both GPUs' links to the NVSwitch node), else up the PCIe tree
 * to the common ancestor and down, crossing the SYS link between CPU roots
 * when they differ. The class is derived from the route (PIX: the common
 * ancestor is a switch both hang from directly; PXB: a switch further up;
 * PHB: the common CPU; SYS: different CPUs; NVL: NVLink) unless
 * keep_classes is set, in which case only route, bandwidth and latency are
 * computed and the classes already stored (from a matrix) are kept.
 * Errors: HK_ERR_CONFIG if a route is longer than HK_TOPO_MAX_HOPS or the
 * PCIe parents form a cycle (message names the node).
 */
hk_status hk_topo_compute_paths(hk_topo *t, int keep_classes);

/** nvidia-smi's token for a path class: "X", "NV12", "PIX", ... into buf
 * (at least 8 bytes). Returns buf. */
const char *hk_topo_path_token(hk_topo_path cls, int nvlinks, char *buf,
                               size_t cap);

/** Short name of a class ("NVL", "PIX", ..). Never NULL. */
const char *hk_topo_path_name(hk_topo_path cls);

/** Appends a sentence to t->note (separated by a space), truncating. */
void hk_topo_add_note(hk_topo *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * The NIC nearest GPU g: best path class (PIX < PXB < PHB < NODE < SYS),
 * then highest path bandwidth, then lowest NIC index. -1 when the layout
 * names no NIC or g is out of range.
 */
int hk_topo_nearest_nic(const hk_topo *t, int g);

#endif
