/* matrix.c - a pairwise class matrix into an hk_topo (see matrix.h). */
#include "topology/matrix.h"

#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "topology/figures.h"

/* The most NVLinks one GPU has (H100 and B200: 18). More in a row of the
 * matrix means the pairs share links through an NVSwitch. */
#define MAX_DIRECT_NVLINKS 18

static int find(int *up, int x) {
  while (up[x] != x)
    x = up[x] = up[up[x]];
  return x;
}

static int is_pcie_class(hk_topo_path c) {
  return c == HK_PATH_PIX || c == HK_PATH_PXB || c == HK_PATH_PHB ||
         c == HK_PATH_NODE;
}

static hk_status validate(const hk_topo_matrix *m) {
  int n = m->n_gpus + m->n_nics;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      hk_topo_path c = m->cls[i][j];
      if ((i == j) != (c == HK_PATH_LOC))
        return hk_fail(HK_ERR_CONFIG, "%s/%s: %s", m->name[i], m->name[j],
                       i == j ? "a device's own entry must be X"
                              : "X between two different devices");
      if (c > HK_PATH_SYS)
        return hk_fail(HK_ERR_CONFIG, "%s/%s: class %s inside one host",
                       m->name[i], m->name[j], hk_topo_path_name(c));
      if (c == HK_PATH_NVL && (i >= m->n_gpus || j >= m->n_gpus))
        return hk_fail(HK_ERR_CONFIG, "%s/%s: NVLink to a NIC", m->name[i],
                       m->name[j]);
      if (c == HK_PATH_NVL &&
          (m->nvl[i][j] < 1 || m->nvl[i][j] > HK_TOPO_MAX_NV))
        return hk_fail(HK_ERR_CONFIG, "%s/%s: NV%d out of range 1..%d",
                       m->name[i], m->name[j], m->nvl[i][j], HK_TOPO_MAX_NV);
      if (c != m->cls[j][i] || m->nvl[i][j] != m->nvl[j][i]) {
        char a[16], b[16];
        return hk_fail(
            HK_ERR_CONFIG,
            "matrix is not symmetric: %s/%s is %s but %s/%s is %s", m->name[i],
            m->name[j], hk_topo_path_token(c, m->nvl[i][j], a, sizeof a),
            m->name[j], m->name[i],
            hk_topo_path_token(m->cls[j][i], m->nvl[j][i], b, sizeof b));
      }
    }
  return HK_OK;
}

static hk_status build(const hk_topo_matrix *m, hk_topo *t) {
  int n = m->n_gpus + m->n_nics;
  int up[HK_TOPO_MAX_DEVS];
  for (int i = 0; i < n; i++)
    up[i] = i;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (is_pcie_class(m->cls[i][j]))
        up[find(up, i)] = find(up, j);

  /* One domain node per group, in order of the group's first device; with
   * several, each hangs from one "SMP" node by a SYS link: a SYS hop uses
   * its source domain's link up and its destination's link down. */
  int n_groups = 0;
  for (int i = 0; i < n; i++)
    n_groups += find(up, i) == i;
  hk_status st;
  int smp = -1;
  if (n_groups > 1 &&
      (st = hk_topo_add_node(t, HK_NODE_CPU, "SMP", -1, &smp)) != HK_OK)
    return st;
  int domain_of_root[HK_TOPO_MAX_DEVS], dom[HK_TOPO_MAX_DEVS], n_dom = 0;
  for (int i = 0; i < n; i++)
    domain_of_root[i] = -1;
  for (int i = 0; i < n; i++) {
    int r = find(up, i);
    if (domain_of_root[r] < 0) {
      char name[32];
      snprintf(name, sizeof name, "domain%d", n_dom);
      int id;
      if ((st = hk_topo_add_node(t, HK_NODE_CPU, name, smp, &id)) != HK_OK)
        return st;
      t->node[id].index = n_dom++;
      if (smp >= 0 &&
          (st = hk_topo_add_link(t, id, smp, HK_LINK_SYS, 0, m->sys_gbps,
                                 HK_FIG_SYS_HOP_US)) != HK_OK)
        return st;
      domain_of_root[r] = id;
    }
    dom[i] = domain_of_root[r];
  }

  for (int i = 0; i < n; i++) {
    int is_gpu = i < m->n_gpus, id;
    st = hk_topo_add_node(t, is_gpu ? HK_NODE_GPU : HK_NODE_NIC, m->name[i],
                          dom[i], &id);
    if (st != HK_OK)
      return st;
    hk_topo_node *nd = &t->node[id];
    snprintf(nd->model, sizeof nd->model, "%s", m->model[i]);
    if (is_gpu) {
      snprintf(nd->busid, sizeof nd->busid, "%s", m->busid[i]);
      snprintf(nd->affinity, sizeof nd->affinity, "%s", m->affinity[i]);
      nd->sm = m->sm[i];
      nd->numa = m->numa[i];
    }
    if ((st = hk_topo_add_link(t, id, dom[i], HK_LINK_PCI, 0, m->pcie_gbps,
                               HK_FIG_PCI_HOP_US)) != HK_OK)
      return st;
  }

  int via_switch = 0, row_max[HK_TOPO_MAX_GPUS] = {0};
  for (int i = 0; i < m->n_gpus; i++) {
    int sum = 0;
    for (int j = 0; j < m->n_gpus; j++) {
      sum += m->nvl[i][j];
      if (m->nvl[i][j] > row_max[i])
        row_max[i] = m->nvl[i][j];
    }
    if (sum > MAX_DIRECT_NVLINKS)
      via_switch = 1;
  }
  if (via_switch) {
    int sw;
    if ((st = hk_topo_add_node(t, HK_NODE_NVSWITCH, "NVSwitch", -1, &sw)) !=
        HK_OK)
      return st;
    for (int i = 0; i < m->n_gpus; i++)
      if (row_max[i] > 0 &&
          (st = hk_topo_add_link(t, t->gpu[i], sw, HK_LINK_NVL, row_max[i],
                                 row_max[i] * m->nvlink_gbps,
                                 HK_FIG_NVL_HOP_US)) != HK_OK)
        return st;
    hk_topo_add_note(t,
                     "NV# counts add up to more than %d links on one GPU: "
                     "modelled as GPUs on an NVSwitch.",
                     MAX_DIRECT_NVLINKS);
  } else {
    for (int i = 0; i < m->n_gpus; i++)
      for (int j = i + 1; j < m->n_gpus; j++)
        if (m->nvl[i][j] > 0 &&
            (st = hk_topo_add_link(t, t->gpu[i], t->gpu[j], HK_LINK_NVL,
                                   m->nvl[i][j], m->nvl[i][j] * m->nvlink_gbps,
                                   HK_FIG_NVL_HOP_US)) != HK_OK)
          return st;
  }

  for (int i = 0; i < m->n_gpus; i++) {
    for (int j = 0; j < m->n_gpus; j++)
      t->gpu_path[i][j].cls = m->cls[i][j];
    for (int k = 0; k < m->n_nics; k++)
      t->nic_path[i][k].cls = m->cls[i][m->n_gpus + k];
  }
  if ((st = hk_topo_compute_paths(t, 1)) != HK_OK)
    return st;
  for (int i = 0; i < m->n_gpus; i++)
    for (int j = 0; j < m->n_gpus; j++)
      t->gpu_path[i][j].nvlinks = m->nvl[i][j];
  return HK_OK;
}

hk_status hk_topo_from_matrix(const hk_topo_matrix *m, const char *source,
                              hk_topo **out) {
  *out = NULL;
  if (m->n_gpus < 0 || m->n_nics < 0 || m->n_gpus > HK_TOPO_MAX_GPUS ||
      m->n_nics > HK_TOPO_MAX_NICS)
    return hk_fail(HK_ERR_CONFIG,
                   "matrix: %d GPUs and %d NICs (at most %d "
                   "and %d)",
                   m->n_gpus, m->n_nics, HK_TOPO_MAX_GPUS, HK_TOPO_MAX_NICS);
  hk_status st = validate(m);
  if (st != HK_OK)
    return st;
  hk_topo *t;
  if ((st = hk_topo_new(&t)) != HK_OK)
    return st;
  snprintf(t->source, sizeof t->source, "%s", source);
  if ((st = build(m, t)) != HK_OK) {
    hk_topo_free(t);
    return st;
  }
  *out = t;
  return HK_OK;
}
