/*
 * cost.h - an alpha-beta model of allreduce on one or many hosts: one
 * formula per algorithm, the one copy of them that hk's choice of
 * allreduce implementation (collectives/allreduce.h: each entry's cost)
 * and hktopo's prediction of NCCL's choice (hk_cost_nccl) use. Which
 * algorithm runs is not decided here.
 *
 * Model (NCCL's tuning model, with the figures of topology/figures.h):
 * time(algorithm, protocol) = latency + bytes / algbw, where
 *  - ring (one ring over all N = hosts*gpus ranks): latency = call latency
 *    + (2(N-1) - 2(hosts-1)) steps at the in-host step latency + 2(hosts-1)
 *    steps at the network's; algbw = busbw * N / (2(N-1)) with busbw =
 *    min(in-host ring bandwidth, the host's network bandwidth);
 *  - tree (NCCL's: a chain inside each host, a double binary tree across
 *    hosts): latency = call latency + 2((gpus-1) in-host hops + ceil(log2
 *    hosts) network hops); algbw = busbw / 2 with busbw = 0.9 * min(in-
 *    host, network);
 *  - rd (recursive doubling, hk's latency-optimised algorithm, not
 *    NCCL's): floor(log2 N) steps (+2 when N is not a power of two: the
 *    ranks that sit out hand their buffer over and get it back), each
 *    moving the whole buffer, paired as collectives/rd.c pairs them; a
 *    step where every rank's partner is on its own host runs at the
 *    in-host ring bandwidth and step latency, any other crosses the
 *    network, where the ranks of a host whose partners are elsewhere (the
 *    most of any host) share its rate. For gpus and hosts powers of two
 *    that is log2(gpus) steps inside and the rest across with all `gpus`
 *    ranks sharing; for 3 ranks a host on 2 hosts all four steps cross;
 *  - hierarchical: reduce-scatter inside each host (ring of gpus), then
 *    `gpus` concurrent ring allreduces of bytes/gpus across hosts sharing
 *    the host's network bandwidth, then allgather inside each host; its
 *    time is the sum of the three phases;
 * each taking the faster of NCCL's two protocols for the size: LL (low
 * latency, 1/4 of the bandwidth for ring, 1/3.8 for tree) and Simple.
 * busbw reported = algbw * 2(N-1)/N (nccl-tests' definition).
 * In-host bandwidth is the sum of the host's rings (ring.h); the network
 * bandwidth of a host is its rate in Gbit/s / 8 (all its NICs together).
 * A host of one GPU has no in-host phase.
 *
 * Thread-safety: all functions are pure.
 */
#ifndef HK_TOPOLOGY_COST_H
#define HK_TOPOLOGY_COST_H

#include <stddef.h>

#include "hk/hk.h"
#include "topology/graph.h"

/** Per-step figures of a transport other than NCCL's (hk's own TCP
 *  collectives): Simple protocol only, µs. */
typedef struct hk_step_figures {
  double call_us;       /* fixed cost of one collective call */
  double intra_step_us; /* one step between two ranks of a host */
  double net_step_us;   /* one step between two hosts */
} hk_step_figures;

/** What the model needs of one host. */
typedef struct hk_host_model {
  int gpus;          /* ranks per host, >= 1 */
  double intra_gbps; /* in-host ring bandwidth, GB/s per direction (sum
                        over rings); ignored when gpus == 1 */
  int intra_nvlink;  /* 1: the rings are NVLink only (NVLink latencies) */
  const hk_step_figures *fig; /* NULL: NCCL's figures (LL and Simple);
                                 else these, Simple only */
} hk_host_model;

typedef struct hk_cost {
  const char *algo;  /* the formula's name: "ring", "tree", "hierarchical",
                        "rd" (static) */
  int proto;         /* hk_fig_proto of the (last) phase: 0 LL, 1 Simple */
  double time_us;    /* predicted time of one allreduce, µs */
  double algbw_gbps; /* bytes / time, GB/s */
  double busbw_gbps; /* algbw * 2(N-1)/N, GB/s; 0 when N == 1 */
} hk_cost;

/**
 * Predicts an allreduce of `bytes` bytes over `hosts` hosts shaped like h,
 * linked at net_gbit Gbit/s per host, by one formula each: the ring, NCCL's
 * tree, hierarchical (on one host: the ring's formula), recursive doubling.
 * bytes == 0 gives the latency alone. *out is zeroed on error.
 * Errors: HK_ERR_INVALID_ARG (h NULL, gpus < 1, hosts < 1, hosts*gpus >
 * 1 << 24, intra_gbps <= 0 with gpus > 1, net_gbit <= 0 with hosts > 1).
 */
hk_status hk_cost_ring(const hk_host_model *h, size_t bytes, int hosts,
                       double net_gbit, hk_cost *out);
hk_status hk_cost_tree(const hk_host_model *h, size_t bytes, int hosts,
                       double net_gbit, hk_cost *out);
hk_status hk_cost_hierarchical(const hk_host_model *h, size_t bytes, int hosts,
                               double net_gbit, hk_cost *out);
hk_status hk_cost_rd(const hk_host_model *h, size_t bytes, int hosts,
                     double net_gbit, hk_cost *out);

/**
 * What NCCL would choose for a GPU job (hktopo's prediction): the fastest
 * of the ring, hierarchical (with hosts > 1) and the tree, ties going to
 * the earlier of those. *out gets its prediction. Errors: as hk_cost_ring.
 */
hk_status hk_cost_nccl(const hk_host_model *h, size_t bytes, int hosts,
                       double net_gbit, hk_cost *out);

/**
 * The host model of layout t for a job of local_size ranks (GPUs
 * 0..local_size-1, as hk_topo_ring_order): intra_gbps is the sum of the
 * rings hk_topo_find_rings finds. Errors: as hk_topo_ring_order.
 */
hk_status hk_host_model_from_topo(const hk_topo *t, int local_size,
                                  hk_host_model *out);

#endif
