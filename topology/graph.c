/* graph.c - building an hk_topo and computing the paths between devices. */
#include "topology/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

hk_status hk_topo_new(hk_topo **out) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return hk_fail(HK_ERR_NOMEM, "topology: out of memory (%zu bytes)",
                   sizeof **out);
  return HK_OK;
}

void hk_topo_free(hk_topo *t) { free(t); }

hk_status hk_topo_add_node(hk_topo *t, hk_topo_node_kind kind, const char *name,
                           int parent, int *id) {
  if (t->n_nodes >= HK_TOPO_MAX_NODES)
    return hk_fail(HK_ERR_CONFIG, "topology: more than %d nodes",
                   HK_TOPO_MAX_NODES);
  if (kind == HK_NODE_GPU && t->n_gpus >= HK_TOPO_MAX_GPUS)
    return hk_fail(HK_ERR_CONFIG, "topology: more than %d GPUs",
                   HK_TOPO_MAX_GPUS);
  if (kind == HK_NODE_NIC && t->n_nics >= HK_TOPO_MAX_NICS)
    return hk_fail(HK_ERR_CONFIG, "topology: more than %d NICs",
                   HK_TOPO_MAX_NICS);
  if (parent < -1 || parent >= t->n_nodes)
    return hk_fail(HK_ERR_INVALID_ARG, "topology: bad parent node %d", parent);
  int n = t->n_nodes++;
  hk_topo_node *nd = &t->node[n];
  memset(nd, 0, sizeof *nd);
  nd->kind = kind;
  nd->parent = parent;
  nd->numa = -1;
  nd->cpu = kind == HK_NODE_CPU ? n : (parent >= 0 ? t->node[parent].cpu : -1);
  snprintf(nd->name, sizeof nd->name, "%s", name ? name : "");
  if (kind == HK_NODE_GPU) {
    nd->index = t->n_gpus;
    t->gpu[t->n_gpus++] = n;
  } else if (kind == HK_NODE_NIC) {
    nd->index = t->n_nics;
    t->nic[t->n_nics++] = n;
  } else {
    nd->index = -1;
  }
  if (id)
    *id = n;
  return HK_OK;
}

hk_status hk_topo_add_link(hk_topo *t, int a, int b, hk_topo_link_kind kind,
                           int nvlinks, double gbps, double lat_us) {
  if (a < 0 || b < 0 || a >= t->n_nodes || b >= t->n_nodes || a == b)
    return hk_fail(HK_ERR_INVALID_ARG, "topology: bad link %d-%d", a, b);
  if (t->n_links >= HK_TOPO_MAX_LINKS)
    return hk_fail(HK_ERR_CONFIG, "topology: more than %d links",
                   HK_TOPO_MAX_LINKS);
  hk_topo_link *l = &t->link[t->n_links++];
  l->a = a;
  l->b = b;
  l->kind = kind;
  l->nvlinks = nvlinks;
  l->gbps = gbps;
  l->lat_us = lat_us;
  return HK_OK;
}

int hk_topo_find_link(const hk_topo *t, int a, int b, hk_topo_link_kind kind) {
  for (int l = 0; l < t->n_links; l++) {
    const hk_topo_link *k = &t->link[l];
    if (k->kind == kind &&
        ((k->a == a && k->b == b) || (k->a == b && k->b == a)))
      return l;
  }
  return -1;
}

void hk_topo_add_note(hk_topo *t, const char *fmt, ...) {
  size_t used = strlen(t->note);
  if (used + 2 >= sizeof t->note)
    return;
  if (used > 0)
    t->note[used++] = ' ';
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->note + used, sizeof t->note - used, fmt, ap);
  va_end(ap);
}

const char *hk_topo_path_name(hk_topo_path cls) {
  static const char *names[] = {"LOC", "NVL",  "PIX", "PXB",
                                "PHB", "NODE", "SYS", "NET"};
  return (unsigned)cls < sizeof names / sizeof names[0] ? names[cls] : "?";
}

const char *hk_topo_path_token(hk_topo_path cls, int nvlinks, char *buf,
                               size_t cap) {
  if (cls == HK_PATH_LOC)
    snprintf(buf, cap, "X");
  else if (cls == HK_PATH_NVL)
    snprintf(buf, cap, "NV%d", nvlinks);
  else
    snprintf(buf, cap, "%s", hk_topo_path_name(cls));
  return buf;
}

/* --- routes ------------------------------------------------------------ */

typedef struct route {
  int n;
  int hop[HK_TOPO_MAX_HOPS];
} route;

static hk_status push_hop(const hk_topo *t, route *r, int link, int from) {
  if (r->n >= HK_TOPO_MAX_HOPS)
    return hk_fail(HK_ERR_CONFIG,
                   "topology: a path from %s is longer than %d links",
                   t->node[from].name, HK_TOPO_MAX_HOPS);
  r->hop[r->n++] = 2 * link + (t->link[link].a == from ? 0 : 1);
  return HK_OK;
}

/* The link from node x up to its parent (PCIe, or SYS from a socket to an
 * SMP hub), -1 if none. */
static int parent_link(const hk_topo *t, int x) {
  int p = t->node[x].parent;
  if (p < 0)
    return -1;
  int l = hk_topo_find_link(t, x, p, HK_LINK_PCI);
  return l >= 0 ? l : hk_topo_find_link(t, x, p, HK_LINK_SYS);
}

/* Ancestors of x, x first, root last. */
static hk_status ancestors(const hk_topo *t, int x, int *up, int *n) {
  *n = 0;
  for (int v = x; v >= 0; v = t->node[v].parent) {
    if (*n >= HK_TOPO_MAX_HOPS)
      return hk_fail(HK_ERR_CONFIG,
                     "topology: %s is nested deeper than %d levels (or its "
                     "parents form a cycle)",
                     t->node[x].name, HK_TOPO_MAX_HOPS);
    up[(*n)++] = v;
  }
  return HK_OK;
}

/* The route from x to y; *cls gets the class the route implies. r->n == 0
 * and *cls == SYS when there is none. */
static hk_status find_route(const hk_topo *t, int x, int y, route *r,
                            hk_topo_path *cls) {
  r->n = 0;
  if (x == y) {
    *cls = HK_PATH_LOC;
    return HK_OK;
  }
  const hk_topo_node *nx = &t->node[x], *ny = &t->node[y];
  if (nx->kind == HK_NODE_GPU && ny->kind == HK_NODE_GPU) {
    int l = hk_topo_find_link(t, x, y, HK_LINK_NVL);
    if (l >= 0) {
      *cls = HK_PATH_NVL;
      return push_hop(t, r, l, x);
    }
    for (int s = 0; s < t->n_nodes; s++) {
      if (t->node[s].kind != HK_NODE_NVSWITCH)
        continue;
      int lx = hk_topo_find_link(t, x, s, HK_LINK_NVL);
      int ly = hk_topo_find_link(t, s, y, HK_LINK_NVL);
      if (lx >= 0 && ly >= 0) {
        *cls = HK_PATH_NVL;
        hk_status st = push_hop(t, r, lx, x);
        return st == HK_OK ? push_hop(t, r, ly, s) : st;
      }
    }
  }
  int ux[HK_TOPO_MAX_HOPS], uy[HK_TOPO_MAX_HOPS], nux, nuy;
  hk_status st = ancestors(t, x, ux, &nux);
  if (st == HK_OK)
    st = ancestors(t, y, uy, &nuy);
  if (st != HK_OK)
    return st;
  int ix = -1, iy = -1; /* positions of the common ancestor */
  for (int i = 0; i < nux && ix < 0; i++)
    for (int j = 0; j < nuy; j++)
      if (ux[i] == uy[j]) {
        ix = i;
        iy = j;
        break;
      }
  int sys = -1;
  if (ix < 0) {
    sys = hk_topo_find_link(t, ux[nux - 1], uy[nuy - 1], HK_LINK_SYS);
    if (sys < 0) { /* no route at all */
      *cls = HK_PATH_SYS;
      return HK_OK;
    }
  }
  int top_x = ix < 0 ? nux - 1 : ix, top_y = ix < 0 ? nuy - 1 : iy;
  for (int i = 0; i < top_x; i++) {
    int l = parent_link(t, ux[i]);
    if (l < 0 || (st = push_hop(t, r, l, ux[i])) != HK_OK) {
      r->n = 0;
      *cls = HK_PATH_SYS;
      return l < 0 ? HK_OK : st;
    }
  }
  if (sys >= 0 && (st = push_hop(t, r, sys, ux[nux - 1])) != HK_OK)
    return st;
  for (int j = top_y; j > 0; j--) {
    int l = parent_link(t, uy[j - 1]);
    if (l < 0 || (st = push_hop(t, r, l, uy[j])) != HK_OK) {
      r->n = 0;
      *cls = HK_PATH_SYS;
      return l < 0 ? HK_OK : st;
    }
  }
  if (ix < 0) {
    *cls = HK_PATH_SYS;
  } else {
    const hk_topo_node *lca = &t->node[ux[ix]];
    if (lca->kind == HK_NODE_CPU)
      *cls = HK_PATH_PHB;
    else if (ix <= 1 && iy <= 1)
      *cls = HK_PATH_PIX;
    else
      *cls = HK_PATH_PXB;
  }
  return HK_OK;
}

static hk_status fill_path(const hk_topo *t, int x, int y, hk_topo_pathinfo *p,
                           int keep_class) {
  route r;
  hk_topo_path cls;
  hk_status st = find_route(t, x, y, &r, &cls);
  if (st != HK_OK)
    return st;
  if (!keep_class)
    p->cls = cls;
  p->nhops = r.n;
  memcpy(p->hop, r.hop, sizeof r.hop);
  p->gbps = r.n > 0 ? 1e300 : 0.0;
  p->lat_us = 0.0;
  p->nvlinks = 0;
  for (int i = 0; i < r.n; i++) {
    const hk_topo_link *l = &t->link[r.hop[i] / 2];
    if (l->gbps < p->gbps)
      p->gbps = l->gbps;
    p->lat_us += l->lat_us;
    if (l->kind == HK_LINK_NVL && (p->nvlinks == 0 || l->nvlinks < p->nvlinks))
      p->nvlinks = l->nvlinks;
  }
  if (cls != HK_PATH_NVL && !keep_class)
    p->nvlinks = 0;
  return HK_OK;
}

hk_status hk_topo_compute_paths(hk_topo *t, int keep_classes) {
  for (int i = 0; i < t->n_gpus; i++) {
    for (int j = 0; j < t->n_gpus; j++) {
      hk_status st =
          fill_path(t, t->gpu[i], t->gpu[j], &t->gpu_path[i][j], keep_classes);
      if (st != HK_OK)
        return st;
    }
    for (int k = 0; k < t->n_nics; k++) {
      hk_status st =
          fill_path(t, t->gpu[i], t->nic[k], &t->nic_path[i][k], keep_classes);
      if (st != HK_OK)
        return st;
    }
  }
  return HK_OK;
}

int hk_topo_nearest_nic(const hk_topo *t, int g) {
  if (g < 0 || g >= t->n_gpus)
    return -1;
  int best = -1;
  for (int k = 0; k < t->n_nics; k++) {
    const hk_topo_pathinfo *p = &t->nic_path[g][k];
    if (best < 0) {
      best = k;
      continue;
    }
    const hk_topo_pathinfo *b = &t->nic_path[g][best];
    if (p->cls < b->cls || (p->cls == b->cls && p->gbps > b->gbps))
      best = k;
  }
  return best;
}
