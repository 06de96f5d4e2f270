/*
 * fuzz_topo_xml - libFuzzer target for the NCCL XML readers: the topology
 * (hk_topo_parse_ncclxml, NCCL_TOPO_FILE) and the graph file
 * (hk_ncclgraph_parse, NCCL_GRAPH_FILE), both through expat, and the
 * content sniffer that tells them apart. Any input must either parse into
 * a consistent layout or be rejected with HK_ERR_CONFIG and a message;
 * never crash, leak or read out of bounds (built with ASan+UBSan).
 *
 *   cmake -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang ... && ./fuzz_topo_xml dir/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/parse.h"
#include "topology/ring.h"

static void check(const hk_topo *t) {
  if (t->n_gpus < 0 || t->n_gpus > HK_TOPO_MAX_GPUS || t->n_nics < 0 ||
      t->n_nics > HK_TOPO_MAX_NICS || t->n_nodes > HK_TOPO_MAX_NODES)
    abort();
  for (int a = 0; a < t->n_gpus; a++) {
    if (t->node[t->gpu[a]].kind != HK_NODE_GPU || t->node[t->gpu[a]].index != a)
      abort();
    for (int b = 0; b < t->n_gpus; b++)
      if (t->gpu_path[a][b].cls != t->gpu_path[b][a].cls ||
          t->gpu_path[a][b].nhops > HK_TOPO_MAX_HOPS)
        abort();
  }
  if (t->n_gpus >= 1 && t->n_gpus <= 6) {
    int order[6];
    /* every GPU hangs from a CPU and every two CPUs are joined: a ring
     * always exists */
    if (hk_topo_ring_order(t, t->n_gpus, order) != HK_OK)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  hk_topo_format fmt = hk_topo_sniff(text, size);
  hk_topo *t = NULL;
  hk_status st = hk_topo_parse_ncclxml(text, size, &t);
  if (st == HK_OK) {
    if (fmt == HK_TOPO_FMT_NCCLGRAPH)
      abort(); /* <graphs> is never a topology */
    check(t);
    hk_topo_free(t);
  } else if (t != NULL || (st != HK_ERR_CONFIG && st != HK_ERR_NOMEM) ||
             hk_last_error()[0] == '\0') {
    abort();
  }
  hk_ncclgraph *g = malloc(sizeof *g);
  if (!g)
    return 0;
  st = hk_ncclgraph_parse(text, size, g);
  if (st == HK_OK) {
    if (g->n_channels > HK_NCCLGRAPH_MAX_CHANNELS)
      abort();
    for (int c = 0; c < g->n_channels; c++)
      if (g->n_gpus[c] < 0 || g->n_gpus[c] > HK_TOPO_MAX_GPUS)
        abort();
  } else if (st != HK_ERR_CONFIG && st != HK_ERR_NOMEM) {
    abort();
  }
  free(g);
  return 0;
}
