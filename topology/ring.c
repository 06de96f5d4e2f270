/* ring.c - exact ring search with branch-and-bound, and several rings on
 * what each leaves (ring.h). */
#include "topology/ring.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

#define NRES (2 * HK_TOPO_MAX_LINKS)
#define EPS 1e-9 /* GB/s below which a resource is spent */

typedef struct search {
  const hk_topo *t;
  int n;
  const int *g; /* GPU index at search position i */
  double *res;  /* per resource: GB/s left */
  int *uses;    /* per resource: uses by the partial ring */
  int comp[HK_TOPO_MAX_GPUS];
  int min_rank;
  hk_topo_path max_cls;       /* hops of a worse class are not used */
  int path[HK_TOPO_MAX_GPUS]; /* positions on the partial ring */
  int on[HK_TOPO_MAX_GPUS];
  long steps;
  int exhausted;
  int found;
  int best[HK_TOPO_MAX_GPUS];
  double best_bw;
  int best_sys, best_rank;
} search;

static int class_rank(hk_topo_path c) {
  return c == HK_PATH_NVL ? 0 : (int)c - 1; /* PIX 1 ... SYS 5 */
}

static const hk_topo_pathinfo *hop(const search *s, int a, int b) {
  return &s->t->gpu_path[s->g[a]][s->g[b]];
}

/* Adds the resources of hop a->b; returns the ring's new bandwidth. */
static double take(search *s, int a, int b, double bw) {
  const hk_topo_pathinfo *p = hop(s, a, b);
  for (int i = 0; i < p->nhops; i++) {
    int r = p->hop[i];
    s->uses[r]++;
    double share = s->res[r] > EPS ? s->res[r] / s->uses[r] : 0.0;
    if (share < bw)
      bw = share;
  }
  return bw;
}

static void give(search *s, int a, int b) {
  const hk_topo_pathinfo *p = hop(s, a, b);
  for (int i = 0; i < p->nhops; i++)
    s->uses[p->hop[i]]--;
}

/* Least number of SYS hops still needed to go from position cur through
 * every position not on the ring back to position 0. */
static int sys_bound(const search *s, int cur) {
  int seen[HK_TOPO_MAX_GPUS] = {0}, k = 0;
  for (int i = 0; i < s->n; i++)
    if ((!s->on[i] || i == cur || i == 0) && !seen[s->comp[i]]) {
      seen[s->comp[i]] = 1;
      k++;
    }
  if (k <= 1)
    return 0;
  return s->comp[cur] == s->comp[0] ? k : k - 1;
}

/* -1 if (bw, sys, rank) is worse than the best, 0 if tied, 1 if better. */
static int compare(const search *s, double bw, int sys, int rank) {
  if (!s->found)
    return 1;
  double tol = 1e-9 * (s->best_bw > 1.0 ? s->best_bw : 1.0);
  if (bw > s->best_bw + tol)
    return 1;
  if (bw < s->best_bw - tol)
    return -1;
  if (sys != s->best_sys)
    return sys < s->best_sys ? 1 : -1;
  if (rank != s->best_rank)
    return rank < s->best_rank ? 1 : -1;
  return 0;
}

static void dfs(search *s, int depth, int cur, double bw, int sys, int rank) {
  if (++s->steps > HK_TOPO_SEARCH_BUDGET) {
    s->exhausted = 1;
    return;
  }
  if (depth == s->n) { /* close the ring */
    const hk_topo_pathinfo *p = hop(s, cur, 0);
    if (s->n > 1 && (p->nhops == 0 || p->cls > s->max_cls))
      return;
    double nb = s->n > 1 ? take(s, cur, 0, bw) : bw;
    int nsys = sys + (s->n > 1 && p->cls == HK_PATH_SYS);
    int nrank = rank + (s->n > 1 ? class_rank(p->cls) : 0);
    if (nb > EPS && compare(s, nb, nsys, nrank) > 0) {
      s->found = 1;
      s->best_bw = nb;
      s->best_sys = nsys;
      s->best_rank = nrank;
      memcpy(s->best, s->path, sizeof s->best);
    }
    if (s->n > 1)
      give(s, cur, 0);
    return;
  }
  for (int v = 1; v < s->n && !s->exhausted; v++) {
    if (s->on[v])
      continue;
    const hk_topo_pathinfo *p = hop(s, cur, v);
    if (p->nhops == 0 || p->cls > s->max_cls)
      continue;
    double nb = take(s, cur, v, bw);
    int nsys = sys + (p->cls == HK_PATH_SYS);
    int nrank = rank + class_rank(p->cls);
    s->on[v] = 1;
    int prune = nb <= EPS;
    if (!prune && s->found) {
      int remaining = s->n - depth; /* hops after this one, closing incl. */
      int c = compare(s, nb, nsys + sys_bound(s, v),
                      nrank + remaining * s->min_rank);
      prune = c < 0 || (c == 0); /* ties go to the ring found first */
    }
    if (!prune) {
      s->path[depth] = v;
      dfs(s, depth + 1, v, nb, nsys, nrank);
    }
    s->on[v] = 0;
    give(s, cur, v);
  }
}

static int find(int *up, int x) {
  while (up[x] != x)
    x = up[x] = up[up[x]];
  return x;
}

static void setup(search *s) {
  int up[HK_TOPO_MAX_GPUS];
  for (int i = 0; i < s->n; i++)
    up[i] = i;
  s->min_rank = 1 << 20;
  for (int i = 0; i < s->n; i++)
    for (int j = 0; j < s->n; j++) {
      if (i == j)
        continue;
      const hk_topo_pathinfo *p = hop(s, i, j);
      if (p->cls != HK_PATH_SYS)
        up[find(up, i)] = find(up, j);
      if (class_rank(p->cls) < s->min_rank)
        s->min_rank = class_rank(p->cls);
    }
  if (s->n < 2)
    s->min_rank = 0;
  int id[HK_TOPO_MAX_GPUS], k = 0;
  for (int i = 0; i < s->n; i++)
    id[i] = -1;
  for (int i = 0; i < s->n; i++) {
    int r = find(up, i);
    if (id[r] < 0)
      id[r] = k++;
    s->comp[i] = id[r];
  }
}

static void describe(const search *s, hk_topo_ring *r) {
  r->n = s->n;
  r->gbps = s->n > 1 ? s->best_bw : 0.0;
  r->sys_hops = s->best_sys;
  r->worst = HK_PATH_LOC;
  r->nvlink_only = s->n > 1;
  for (int i = 0; i < s->n; i++) {
    r->gpu[i] = s->g[s->best[i]];
    if (s->n < 2)
      continue;
    const hk_topo_pathinfo *p = hop(s, s->best[i], s->best[(i + 1) % s->n]);
    if (p->cls > r->worst)
      r->worst = p->cls;
    if (p->cls != HK_PATH_NVL)
      r->nvlink_only = 0;
  }
}

/* Takes the ring's bandwidth off every resource it uses, once per use. */
static void spend(search *s, double bw) {
  for (int i = 0; i < s->n; i++) {
    const hk_topo_pathinfo *p = hop(s, s->best[i], s->best[(i + 1) % s->n]);
    for (int h = 0; h < p->nhops; h++) {
      int r = p->hop[h];
      s->res[r] -= bw;
      if (s->res[r] < EPS)
        s->res[r] = 0.0;
    }
  }
}

hk_status hk_topo_find_rings(const hk_topo *t, const int *gpus, int n,
                             hk_topo_rings *out) {
  memset(out, 0, sizeof *out);
  if (!t || !gpus || n < 1 || n > t->n_gpus || n > HK_TOPO_MAX_GPUS)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "ring search: %d GPUs asked, the layout has %d", n,
                   t ? t->n_gpus : 0);
  for (int i = 0; i < n; i++) {
    if (gpus[i] < 0 || gpus[i] >= t->n_gpus)
      return hk_fail(HK_ERR_INVALID_ARG, "ring search: no GPU %d", gpus[i]);
    for (int j = 0; j < i; j++)
      if (gpus[j] == gpus[i])
        return hk_fail(HK_ERR_INVALID_ARG, "ring search: GPU %d twice",
                       gpus[i]);
  }
  search *s = calloc(1, sizeof *s);
  double *res = malloc(NRES * sizeof *res);
  int *uses = calloc(NRES, sizeof *uses);
  if (!s || !res || !uses) {
    free(s);
    free(res);
    free(uses);
    return hk_fail(HK_ERR_NOMEM, "ring search: out of memory");
  }
  for (int l = 0; l < t->n_links; l++)
    res[2 * l] = res[2 * l + 1] = t->link[l].gbps;
  s->t = t;
  s->n = n;
  s->g = gpus;
  s->res = res;
  s->uses = uses;
  setup(s);
  out->exact = 1;
  s->max_cls = HK_PATH_NET;
  hk_status st = HK_OK;
  while (out->n_rings < HK_TOPO_MAX_RINGS) {
    s->found = 0;
    s->steps = 0;
    s->exhausted = 0;
    memset(s->on, 0, sizeof s->on);
    s->on[0] = 1;
    s->path[0] = 0;
    dfs(s, 1, 0, 1e300, 0, 0);
    if (s->exhausted)
      out->exact = 0;
    if (!s->found)
      break;
    hk_topo_ring *r = &out->ring[out->n_rings++];
    describe(s, r);
    out->total_gbps += r->gbps;
    if (n < 2)
      break;
    spend(s, s->best_bw);
    s->max_cls = out->ring[0].worst; /* no PCIe ring beside NVLink ones */
  }
  if (out->n_rings == 0)
    st = hk_fail(HK_ERR_CONFIG,
                 "ring search: no ring joins these %d GPUs (some pair has no "
                 "path)",
                 n);
  free(s);
  free(res);
  free(uses);
  return st;
}

hk_status hk_topo_ring_order(const hk_topo *t, int local_size, int *order) {
  if (!t || !order || local_size < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "ring order: local_size %d", local_size);
  if (t->n_gpus == 0)
    return hk_fail(HK_ERR_CONFIG,
                   "ring order: the layout describes no GPU (a skeleton "
                   "file?)");
  if (local_size > t->n_gpus)
    return hk_fail(HK_ERR_CONFIG,
                   "ring order: %d local ranks but the layout has %d GPUs",
                   local_size, t->n_gpus);
  int gpus[HK_TOPO_MAX_GPUS];
  for (int i = 0; i < local_size; i++)
    gpus[i] = i;
  hk_topo_rings *rs = malloc(sizeof *rs);
  if (!rs)
    return hk_fail(HK_ERR_NOMEM, "ring order: out of memory");
  hk_status st = hk_topo_find_rings(t, gpus, local_size, rs);
  if (st == HK_OK)
    memcpy(order, rs->ring[0].gpu, (size_t)local_size * sizeof *order);
  free(rs);
  return st;
}
