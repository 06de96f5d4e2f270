/*
 * topo.h - what the rest of hk includes from topology/: a server's GPU/NIC
 * layout (graph.h), reading it from nvidia-smi text, NCCL XML, NVML or
 * HK_TOPO_FILE (parse.h), ring order (ring.h) and the allreduce cost
 * model's formulas (cost.h).
 *
 * How the runtime uses it (worker/rings.c, worker/algo.c):
 *   hk_topo *t;
 *   if (hk_topo_load_setting(cfg->topo_file, &t) == HK_OK) { // or NVML
 *     hk_topo_ring_order(t, local_size, order);   // ring of local ranks
 *     hk_host_model h; hk_host_model_from_topo(t, local_size, &h);
 *     hk_cost c; hk_cost_ring(&h, bytes, hosts, net_gbit, &c);
 *     hk_topo_free(t);
 *   } else { log hk_last_error(); keep rank order; }
 */
#ifndef HK_TOPOLOGY_TOPO_H
#define HK_TOPOLOGY_TOPO_H

#include "topology/cost.h"
#include "topology/graph.h"
#include "topology/parse.h"
#include "topology/ring.h"

#endif
