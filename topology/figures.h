/*
 * figures.h - every bandwidth and latency figure topology/ uses, in one
 * place, each with its public source. GB/s are per direction of a link.
 *
 * hk uses the EFFECTIVE figures NCCL's topology search uses (what a ring
 * actually sustains), not the signalling rates of the datasheets; both are
 * listed so the difference is visible. NCCL sources read: NVIDIA/nccl
 * src/graph/topo.h (per-link-type bandwidth constants: SMxx_NVLINK_BW,
 * PCI_BW, *_QPI_BW, AMD_*_BW, NET_BW), src/graph/topo.cc (kvDictPciGen: PCIe
 * rate per lane by link speed; CPU model -> inter-socket figure), and
 * src/graph/tuning.cc of NCCL 2.8 (commit 01afd20a, hwLat/baseLat: per-hop
 * and per-call latencies). No NCCL code is used, only these numbers.
 *
 * NVLink per link, one direction (datasheet -> used):
 *   sm60 P100, NVLink 1:           20 GB/s (P100 whitepaper)  -> 18.0
 *   sm70 V100, NVLink 2:           25 GB/s (V100 datasheet: 300 GB/s over
 *                                  6 links, both directions)  -> 20.0
 *   sm80 A100, NVLink 3:           25 GB/s (A100 datasheet: 600 GB/s over
 *                                  12 links)                  -> 20.0
 *   sm86 RTX 3090/A6000 (GA102):   14.06 GB/s (112.5 GB/s over 4 links,
 *                                  RTX A6000 datasheet)       -> 12.0
 *   sm90 H100, NVLink 4:           25 GB/s (H100 datasheet: 900 GB/s over
 *                                  18 links)                  -> 20.6
 *   sm100 B200, NVLink 5:          50 GB/s (1.8 TB/s over 18) -> 40.1
 *   unknown (nvidia-smi text names no GPU model): 20.0 (NCCL's sm70/sm80).
 *   sm75 (T4) and sm89 (RTX 4090, L40S) have no NVLink.
 *
 * PCIe, per lane, one direction (PCI-SIG: gen1 2.5 GT/s and gen2 5 GT/s use
 * 8b/10b, gen3+ 128b/130b; raw x16 = 4, 8, 15.75, 31.5, 63, 121 GB/s) ->
 * NCCL's effective per-lane figure (kvDictPciGen, 100 Mbit/s units):
 *   2.5 GT/s 0.1875, 5 GT/s 0.375, 8 GT/s 0.75, 16 GT/s 1.5, 32 GT/s 3.0,
 *   64 GT/s 6.0 GB/s; so x16 gen3 = 12 GB/s (NCCL's PCI_BW), gen4 = 24.
 *   Width 0 (virtual machines) counts as x16, as NCCL does. nvidia-smi text
 *   gives no PCIe generation: gen3 x16 (12 GB/s) is assumed and noted.
 *
 * SMP interconnect between sockets (NCCL topo.h): Intel before Skylake
 * (QPI) 6, Skylake..Ice Lake (UPI, family 6 model >= 0x55) 10, Sapphire
 * Rapids (model >= 0x8F) 22, Emerald Rapids (>= 0xCF) 40; AMD Zen 1/2 16,
 * Zen 3/4 24, Zen 5 32; POWER9 32; ARM 6. Unknown CPU (nvidia-smi text): 10.
 *
 * Latency (µs; NCCL 2.8 tuning.cc, "Simple" and "LL" protocols): per ring
 * step NVLink 3.4/0.47, PCIe 5.7/1.0, network 9.6/2.7; per tree hop NVLink
 * 28/0.52, PCIe 28/1.0, network 50/5.0; per call ring 8.4/3.6, tree 0/4.4.
 * LL moves 8 bytes of data per 16-byte line with flags: NCCL counts ring LL
 * at 1/4 and tree LL at 1/3.8 of the Simple bandwidth, and tree at 0.9.
 */
#ifndef HK_TOPOLOGY_FIGURES_H
#define HK_TOPOLOGY_FIGURES_H

/** GB/s of one NVLink, one direction, for compute capability sm (x10:
 * 70, 80, 86, 90, ...); 0 (unknown) gives 20.0. Thread-safe, pure. */
double hk_fig_nvlink_gbps(int sm);

/** GB/s per direction of a PCIe link: gt_s is the lane rate (2.5, 5, 8,
 * 16, 32, 64 GT/s), width the lane count (0 counts as 16). Returns 0 for a
 * rate not in the table (caller reports it). Thread-safe, pure. */
double hk_fig_pcie_gbps(double gt_s, int width);

/** PCIe gen3 x16 (12 GB/s): what nvidia-smi text and NVML paths assume. */
#define HK_FIG_PCIE_DEFAULT_GBPS 12.0

/** GB/s per direction between two sockets for a CPU described as NCCL's
 * XML does (arch "x86_64"/"ppc64"/"arm64", vendor "GenuineIntel"/
 * "AuthenticAMD", cpuid family and model); NULLs and -1 for unknown give
 * HK_FIG_SYS_DEFAULT_GBPS. Thread-safe, pure. */
double hk_fig_sys_gbps(const char *arch, const char *vendor, int family,
                       int model);

/** Unknown CPU (Skylake-class UPI, NCCL's SKL_QPI_BW). */
#define HK_FIG_SYS_DEFAULT_GBPS 10.0

/* Per-hop latency of a link (µs), LL protocol figure of its class, used in
 * the graph's lat_us (printed; the cost model uses hk_fig_step_us). */
#define HK_FIG_NVL_HOP_US 0.47
#define HK_FIG_PCI_HOP_US 1.0
#define HK_FIG_SYS_HOP_US 1.0

/* hk's TCP collectives, measured on the reference machine
 * (bench/peers/results/limits.txt): a step between two ranks of one
 * host costs a loopback half round trip, 16.3 us; loopback TCP moves
 * 3.6 GB/s one way. A step across hosts: the half round trip measured on
 * the namespace bed (bench/netbed_bench.sh), 30 us, close to what kernel
 * TCP over 10 GbE gives. hk's collectives start when negotiation ends,
 * which costs every algorithm the same: no per-call term. */
#define HK_TCP_INTRA_STEP_US 16.3
#define HK_TCP_NET_STEP_US 30.0
#define HK_TCP_INTRA_GBPS 3.6

typedef enum hk_fig_proto { HK_PROTO_LL = 0, HK_PROTO_SIMPLE = 1 } hk_fig_proto;
typedef enum hk_fig_hw {
  HK_HW_NVLINK = 0,
  HK_HW_PCI = 1,
  HK_HW_NET = 2
} hk_fig_hw;
typedef enum hk_fig_algo { HK_FIG_TREE = 0, HK_FIG_RING = 1 } hk_fig_algo;

/** Latency of one step (ring) or one hop (tree), µs (table above). */
double hk_fig_step_us(hk_fig_algo a, hk_fig_proto p, hk_fig_hw hw);

/** Fixed latency of one collective call, µs (table above). */
double hk_fig_base_us(hk_fig_algo a, hk_fig_proto p);

/** Fraction of the Simple bandwidth a protocol reaches (table above). */
double hk_fig_proto_bw_factor(hk_fig_algo a, hk_fig_proto p);

/** NCCL's tree efficiency factor relative to the ring's bus bandwidth. */
#define HK_FIG_TREE_BW_FACTOR 0.9

#endif
