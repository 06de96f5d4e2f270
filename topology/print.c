/* print.c - hktopo's report (print.h). */
#include "topology/print.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/cost.h"
#include "topology/ring.h"

static const char *dev_name(const hk_topo *t, int d) {
  return d < t->n_gpus ? t->node[t->gpu[d]].name
                       : t->node[t->nic[d - t->n_gpus]].name;
}

static void token(const hk_topo *t, int a, int b, char *buf, size_t cap) {
  int ng = t->n_gpus;
  if (a == b) {
    snprintf(buf, cap, "X");
  } else if (a < ng && b < ng) {
    const hk_topo_pathinfo *p = &t->gpu_path[a][b];
    hk_topo_path_token(p->cls, p->nvlinks, buf, cap);
  } else if (a < ng || b < ng) {
    int g = a < ng ? a : b, k = (a < ng ? b : a) - ng;
    hk_topo_path_token(t->nic_path[g][k].cls, 0, buf, cap);
  } else {
    snprintf(buf, cap, "-"); /* NIC pairs are not kept in an hk_topo */
  }
}

void hk_topo_print_matrix(FILE *f, const hk_topo *t) {
  int n = t->n_gpus + t->n_nics;
  fprintf(f, "%-10s", "");
  for (int d = 0; d < n; d++)
    fprintf(f, " %-8.8s", dev_name(t, d));
  fprintf(f, " %-16s %s\n", "CPU Affinity", "NUMA");
  for (int a = 0; a < n; a++) {
    fprintf(f, "%-10.10s", dev_name(t, a));
    for (int b = 0; b < n; b++) {
      char tok[16];
      token(t, a, b, tok, sizeof tok);
      fprintf(f, " %-8s", tok);
    }
    if (a < t->n_gpus) {
      const hk_topo_node *g = &t->node[t->gpu[a]];
      const hk_topo_node *c = g->cpu >= 0 ? &t->node[g->cpu] : NULL;
      const char *aff = g->affinity[0]        ? g->affinity
                        : c && c->affinity[0] ? c->affinity
                                              : "N/A";
      int numa = g->numa >= 0 ? g->numa : (c ? c->numa : -1);
      if (numa >= 0)
        fprintf(f, " %-16s %d", aff, numa);
      else
        fprintf(f, " %-16s %s", aff, "N/A");
    }
    fprintf(f, "\n");
  }
  fprintf(f, "Legend: X self, NV# # bonded NVLinks (direct or through "
             "NVSwitch), PIX one PCIe switch, PXB several, PHB host bridge, "
             "NODE between host bridges of a NUMA node, SYS across sockets.\n");
}

static void print_bandwidths(FILE *f, const hk_topo *t) {
  fprintf(f,
          "\nPath bandwidth between GPUs (GB/s per direction, the "
          "narrowest link on the path):\n%-10s",
          "");
  for (int b = 0; b < t->n_gpus; b++)
    fprintf(f, " %7.7s", t->node[t->gpu[b]].name);
  fprintf(f, "\n");
  for (int a = 0; a < t->n_gpus; a++) {
    fprintf(f, "%-10.10s", t->node[t->gpu[a]].name);
    for (int b = 0; b < t->n_gpus; b++)
      if (a == b)
        fprintf(f, " %7s", "-");
      else
        fprintf(f, " %7.1f", t->gpu_path[a][b].gbps);
    fprintf(f, "\n");
  }
}

static void print_rings(FILE *f, const hk_topo *t, const hk_topo_rings *rs) {
  fprintf(f,
          "\nRings over the %d GPUs (GB/s per direction; each ring gets "
          "what the rings before it left):\n",
          rs->ring[0].n);
  if (rs->ring[0].n == 1)
    fprintf(f, "  ring 0: %s alone: nothing moves inside the host\n",
            t->node[t->gpu[rs->ring[0].gpu[0]]].name);
  for (int r = 0; r < rs->n_rings && rs->ring[0].n > 1; r++) {
    const hk_topo_ring *g = &rs->ring[r];
    fprintf(f, "  ring %d: ", r);
    for (int i = 0; i < g->n; i++)
      fprintf(f, "%s -> ", t->node[t->gpu[g->gpu[i]]].name);
    fprintf(f, "%s   %.1f GB/s, %s, %d SYS hop%s\n",
            t->node[t->gpu[g->gpu[0]]].name, g->gbps,
            g->nvlink_only
                ? "NVLink only"
                : (g->worst == HK_PATH_SYS ? "worst hop SYS" : "PCIe"),
            g->sys_hops, g->sys_hops == 1 ? "" : "s");
  }
  fprintf(f, "  total %.1f GB/s over %d ring%s (%s search)\n", rs->total_gbps,
          rs->n_rings, rs->n_rings == 1 ? "" : "s",
          rs->exact ? "exact" : "budget-limited");
  fprintf(f, "\nLocal ranks (local rank r drives GPU r; ring 0 is the "
             "order hk_topo_ring_order gives):\n");
  const hk_topo_ring *g = &rs->ring[0];
  for (int i = 0; i < g->n; i++) {
    int gpu = g->gpu[i], nic = hk_topo_nearest_nic(t, gpu);
    fprintf(f, "  position %d: local rank %d on %s", i, gpu,
            t->node[t->gpu[gpu]].name);
    if (nic >= 0) {
      const hk_topo_node *nd = &t->node[t->nic[nic]];
      fprintf(f, ", nearest NIC %s%s%s%s (%s)", nd->name,
              nd->model[0] ? " (" : "", nd->model, nd->model[0] ? ")" : "",
              hk_topo_path_name(t->nic_path[gpu][nic].cls));
    }
    fprintf(f, "\n");
  }
}

static hk_status print_costs(FILE *f, const hk_host_model *h) {
  static const size_t sizes[] = {1u << 20, 64u << 20, 1u << 30};
  static const char *size_name[] = {"1 MiB", "64 MiB", "1 GiB"};
  static const int hosts[] = {1, 2, 4, 16};
  static const double rates[] = {10, 25, 100};
  fprintf(f,
          "\nPredicted allreduce busbw, GB/s (alpha-beta model, "
          "topology/cost.h; %d GPUs per host, %.1f GB/s in host%s):\n",
          h->gpus, h->intra_gbps, h->intra_nvlink ? ", NVLink" : "");
  fprintf(f, "  %5s %7s %7s %9s %9s %9s  %s\n", "hosts", "Gbit/s", "size",
          "ring", "tree", "hier", "chosen (time)");
  for (size_t hi = 0; hi < sizeof hosts / sizeof hosts[0]; hi++)
    for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
      if (hosts[hi] == 1 && ri > 0)
        break;
      for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        hk_cost c[3], best;
        hk_status st = hk_cost_ring(h, sizes[si], hosts[hi], rates[ri], &c[0]);
        if (st == HK_OK)
          st = hk_cost_tree(h, sizes[si], hosts[hi], rates[ri], &c[1]);
        if (st == HK_OK)
          st = hk_cost_hierarchical(h, sizes[si], hosts[hi], rates[ri], &c[2]);
        if (st == HK_OK)
          st = hk_cost_nccl(h, sizes[si], hosts[hi], rates[ri], &best);
        if (st != HK_OK)
          return st;
        char rate[16];
        if (hosts[hi] == 1)
          snprintf(rate, sizeof rate, "-");
        else
          snprintf(rate, sizeof rate, "%.0f", rates[ri]);
        fprintf(f, "  %5d %7s %7s %9.2f %9.2f %9.2f  %s (%.0f us)\n", hosts[hi],
                rate, size_name[si], c[0].busbw_gbps, c[1].busbw_gbps,
                c[2].busbw_gbps, best.algo, best.time_us);
      }
    }
  return HK_OK;
}

hk_status hk_topo_print_report(FILE *f, const hk_topo *t, const char *what) {
  fprintf(f, "Layout %s (%s): %d GPU%s, %d NIC%s\n", what, t->source, t->n_gpus,
          t->n_gpus == 1 ? "" : "s", t->n_nics, t->n_nics == 1 ? "" : "s");
  if (t->note[0])
    fprintf(f, "Note: %s\n", t->note);
  if (t->n_gpus == 0) {
    fprintf(f,
            "No GPU to order: a skeleton with %d GPU-class and %d "
            "NIC-class PCIe slots.\n",
            t->gpu_slots, t->nic_slots);
    return HK_OK;
  }
  fprintf(f, "\n");
  hk_topo_print_matrix(f, t);
  print_bandwidths(f, t);
  int gpus[HK_TOPO_MAX_GPUS];
  for (int i = 0; i < t->n_gpus; i++)
    gpus[i] = i;
  hk_topo_rings *rs = malloc(sizeof *rs);
  if (!rs)
    return hk_fail(HK_ERR_NOMEM, "hktopo: out of memory");
  hk_status st = hk_topo_find_rings(t, gpus, t->n_gpus, rs);
  if (st == HK_OK)
    print_rings(f, t, rs);
  free(rs);
  hk_host_model h;
  if (st == HK_OK)
    st = hk_host_model_from_topo(t, t->n_gpus, &h);
  if (st == HK_OK)
    st = print_costs(f, &h);
  return st;
}

void hk_ncclgraph_print(FILE *f, const hk_ncclgraph *g, const char *what) {
  fprintf(f,
          "%s is an NCCL graph file (NCCL_GRAPH_FILE), not a topology: it "
          "lists the channels NCCL chose, not the links.\n",
          what);
  fprintf(f,
          "Ring channels (pattern 4): %d, speedintra %.1f GB/s, typeintra "
          "%s\n",
          g->n_channels, g->speed_intra,
          g->type_intra[0] ? g->type_intra : "?");
  for (int c = 0; c < g->n_channels; c++) {
    fprintf(f, "  channel %d: ", c);
    for (int i = 0; i < g->n_gpus[c]; i++)
      fprintf(f, "GPU%d -> ", g->gpu[c][i]);
    if (g->n_gpus[c] > 0)
      fprintf(f, "GPU%d", g->gpu[c][0]);
    fprintf(f, "\n");
  }
}
