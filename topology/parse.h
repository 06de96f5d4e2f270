/*
 * parse.h - reading a layout: `nvidia-smi topo -m` text, NCCL topology XML
 * (NCCL_TOPO_FILE), NCCL graph XML (NCCL_GRAPH_FILE), NVML at run time.
 *
 * Every parser takes bytes (text need not be NUL-terminated), never reads
 * past len, and on success gives a new hk_topo the caller frees with
 * hk_topo_free(). On failure *out is NULL and the message (hk_last_error())
 * names the line (text) or the element and its line (XML) and what is
 * wrong. Thread-safety: parsers share no state; any number may run at once.
 */
#ifndef HK_TOPOLOGY_PARSE_H
#define HK_TOPOLOGY_PARSE_H

#include <stddef.h>

#include "topology/graph.h"

/** Largest layout file read, in bytes. */
#define HK_TOPO_MAX_FILE_BYTES (4u << 20)

/**
 * Parses the output of `nvidia-smi topo -m`: a header naming the device
 * columns (GPU0.., then NICs as NIC0.. or by device name, e.g. mlx5_0) and
 * any of "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"; one row per device
 * in header order with one legend token per device column (X, NV#, PIX,
 * PXB, PHB, NODE, SYS; SOC, the name older drivers printed for SYS, is
 * read as SYS), then the affinity values (NIC rows may omit them). Columns
 * are separated by spaces and/or tabs; ANSI escape sequences (colour,
 * underline) and '\r' are ignored. Blank lines before the header are
 * skipped; the matrix ends at its last row; after it, a "NIC Legend"
 * ("NIC0: mlx5_0") names the NICs, anything else is ignored.
 * Text names no GPU model nor PCIe generation: the figures assumed are in
 * topology/figures.h and are written to t->note.
 * Errors (HK_ERR_CONFIG, "line N: ..."): a missing or malformed header, a
 * row out of order or with the wrong number of columns, an unknown legend
 * token, X off the diagonal, an asymmetric pair, a malformed affinity, a
 * matrix cut short, a control character; HK_ERR_NOMEM.
 */
hk_status hk_topo_parse_smi(const char *text, size_t len, hk_topo **out);

/**
 * Parses an NCCL topology XML (the format of NCCL_TOPO_FILE, written by
 * NCCL_TOPO_DUMP_FILE), with expat, reading it as NCCL's topo.cc does:
 *   <system version="1"> <cpu numaid affinity arch vendor familyid modelid>
 *     <pci busid class link_speed link_width> (nested: switches)
 *       <gpu dev sm rank> <nvlink target count tclass/> </gpu>
 *       <nic> <net name dev speed/> </nic>
 * Required attributes: pci busid and class, gpu dev, nvlink target and
 * count, net name. A pci of class 0x0604xx is a switch; one holding <gpu> a
 * GPU, one holding <nic> a NIC (one NIC per <net>). Bus ids are hex
 * domain:bus:device.function, the domain 1 to 8 digits, either case.
 * NCCL's conventions, each read as NCCL reads it and said in t->note:
 *  - nvlink tclass 0x03xxxx is a GPU (named by target; a GPU missing from
 *    the file is skipped, one naming itself ignored), 0x068001 the CPU, any
 *    other class an NVSwitch (all merged into one node); a target of all
 *    f's ("fffffff:ff:ff.0", "fffffff:ffff:ff": a switch NVML cannot see
 *    from a VM or container) is an NVSwitch whatever tclass says, except a
 *    GPU class (an error);
 *  - several <gpu> in one <pci> (one per rank: ranks sharing a GPU, MLOPart
 *    halves) are one GPU;
 *  - a <net> listed again with the same dev and name (NCCL lists a NIC on
 *    no PCIe bus under every <cpu>) is one NIC, where first listed; a
 *    <net> without dev or with net="0" is not a network device: skipped;
 *  - link_speed empty or "Unknown" counts as gen3, link_width empty or 0
 *    as x16;
 *  - a fused multi-host file (<cpu> elements with different host_hash):
 *    the first host is read.
 * GPUs are numbered in order of their dev. Unknown elements (<c2c>,
 * <pcilink>, ...) are skipped with what they contain; comments are fine.
 * A "skeleton" file (cpu/pci only, as cloud vendors ship for NCCL to fill
 * in at run time) parses to 0 GPUs: its GPU- and NIC-class slots are
 * counted in t->gpu_slots / t->nic_slots.
 * Errors (HK_ERR_CONFIG, "line N: <element>: ..."): XML that is not well
 * formed (expat's reason and line), a root other than <system>, a version
 * other than 1, a graph file (root <graphs>: "this is an NCCL graph file
 * (NCCL_GRAPH_FILE), not a topology"; read it with hk_ncclgraph_parse), an
 * element in the wrong parent, a missing or malformed attribute, a GPU dev
 * on two PCI devices, a NIC dev with two names, a duplicate bus id, a GPU
 * and a NIC in one <pci>, an unknown PCIe link speed, nesting deeper than
 * 32; HK_ERR_NOMEM.
 */
hk_status hk_topo_parse_ncclxml(const char *text, size_t len, hk_topo **out);

#define HK_NCCLGRAPH_MAX_CHANNELS 64

/** The rings of an NCCL graph file (pattern 4 = NCCL's ring pattern). */
typedef struct hk_ncclgraph {
  int n_channels; /* ring channels found */
  int n_gpus[HK_NCCLGRAPH_MAX_CHANNELS];
  int gpu[HK_NCCLGRAPH_MAX_CHANNELS][HK_TOPO_MAX_GPUS]; /* GPU dev, in order */
  double speed_intra; /* the graph's speedintra, GB/s */
  char type_intra[8]; /* the graph's typeintra, e.g. "SYS", "NVL" */
} hk_ncclgraph;

/**
 * Reads the ring channels of an NCCL graph XML (NCCL_GRAPH_FILE /
 * NCCL_GRAPH_DUMP_FILE: <graphs><graph pattern=..><channel><net/><gpu dev/>
 * ...). Only graphs with pattern="4" (ring) are read; <net> entries are
 * skipped. Errors: HK_ERR_CONFIG (not a graph file, malformed XML or
 * attributes, more than HK_NCCLGRAPH_MAX_CHANNELS channels or
 * HK_TOPO_MAX_GPUS GPUs in one), HK_ERR_NOMEM.
 */
hk_status hk_ncclgraph_parse(const char *text, size_t len, hk_ncclgraph *out);

/** What a layout text is, judged by its content. */
typedef enum hk_topo_format {
  HK_TOPO_FMT_SMI = 0,       /* not XML: nvidia-smi text */
  HK_TOPO_FMT_NCCLXML = 1,   /* XML whose root is <system> */
  HK_TOPO_FMT_NCCLGRAPH = 2, /* XML whose root is <graphs> */
} hk_topo_format;

/** Sniffs text: XML if the first non-blank byte (after a UTF-8 BOM) is
 * '<'; then the first element name (skipping <?xml?>, comments and
 * <!DOCTYPE>) tells <graphs> from anything else. Pure. */
hk_topo_format hk_topo_sniff(const char *text, size_t len);

/** Parses text of either layout format, chosen by hk_topo_sniff(). A graph
 * file is rejected as hk_topo_parse_ncclxml says. */
hk_status hk_topo_parse(const char *text, size_t len, hk_topo **out);

/**
 * Reads a file (at most HK_TOPO_MAX_FILE_BYTES) into *text (malloc'ed, NUL
 * terminated, caller frees) and *len. Errors: HK_ERR_SYSTEM naming the path
 * and errno, HK_ERR_CONFIG if too large, HK_ERR_NOMEM.
 */
hk_status hk_topo_read_file(const char *path, char **text, size_t *len);

/** hk_topo_read_file + hk_topo_parse; messages are prefixed with path. */
hk_status hk_topo_load_file(const char *path, hk_topo **out);

/**
 * Reads this machine's layout through NVML, loaded at run time with
 * dlopen(lib) (NULL: "libnvidia-ml.so.1"): GPUs, names, bus ids, compute
 * capability, CPU affinity, NVLinks (nvmlDeviceGetNvLinkState /
 * RemotePciInfo: to another GPU, or to an NVSwitch) and each pair's common
 * PCIe ancestor (nvmlDeviceGetTopologyCommonAncestor). No NICs (NVML does
 * not know them).
 * Errors: HK_ERR_SYSTEM with the reason when the library cannot be loaded
 * (no driver: dlerror()'s text), lacks an entry point, or nvmlInit fails,
 * or there is no GPU ("NVML found no GPU"); HK_ERR_CONFIG for more than
 * HK_TOPO_MAX_GPUS GPUs; HK_ERR_NOMEM. Thread-safety: NVML is initialised
 * and shut down within the call.
 */
hk_status hk_topo_load_nvml(const char *lib, hk_topo **out);

/**
 * The layout this process should use, as NCCL uses NCCL_TOPO_FILE, given
 * the HK_TOPO_FILE setting (common/config.h's topo_file; NULL as ""):
 *  1. topo_file not empty: that file (either format). Any error is
 *     returned, its message prefixed "HK_TOPO_FILE=": a layout asked for
 *     by name never falls back silently.
 *  2. else NVML (hk_topo_load_nvml(NULL)).
 * Errors: as hk_topo_load_file for 1; for 2, HK_ERR_SYSTEM with "no layout:
 * HK_TOPO_FILE is not set and NVML is unavailable: <why>". A caller that
 * can run without a layout (the CPU runtime) logs that message and keeps
 * its ring in rank order.
 */
hk_status hk_topo_load_setting(const char *topo_file, hk_topo **out);

#endif
