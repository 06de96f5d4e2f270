/* cost.c - the alpha-beta allreduce model (cost.h; figures and their
 * sources in figures.h). */
#include "topology/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/figures.h"
#include "topology/ring.h"

static int ceil_log2(int x) {
  int l = 0;
  while ((1 << l) < x)
    l++;
  return l;
}

/* One phase: time in µs of `bytes` at `gbps` busbw converted with ratio
 * (algbw = busbw * ratio), after `lat_us`. GB/s = 1e3 bytes per µs. */
static double phase_us(double lat_us, double bytes, double gbps, double ratio) {
  return lat_us + (bytes > 0 ? bytes / (gbps * ratio * 1e3) : 0.0);
}

static hk_fig_hw intra_hw(const hk_host_model *h) {
  return h->intra_nvlink ? HK_HW_NVLINK : HK_HW_PCI;
}

/* The protocols a host's transport has: NCCL's LL and Simple, or Simple
 * alone with the host's own figures. */
static int first_proto(const hk_host_model *h) {
  return h->fig ? HK_PROTO_SIMPLE : HK_PROTO_LL;
}

static double base_us(const hk_host_model *h, hk_fig_algo a, int p) {
  return h->fig ? h->fig->call_us : hk_fig_base_us(a, p);
}

static double step_us(const hk_host_model *h, hk_fig_algo a, int p,
                      hk_fig_hw hw) {
  if (h->fig)
    return hw == HK_HW_NET ? h->fig->net_step_us : h->fig->intra_step_us;
  return hk_fig_step_us(a, p, hw);
}

/* Ring allreduce over `hosts` hosts of `g` ranks each, with busbw `bw`.
 * Returns µs; *proto the faster protocol. */
static double ring_us(const hk_host_model *h, int g, int hosts, double bw,
                      double bytes, int *proto) {
  int n = g * hosts;
  if (n == 1) {
    *proto = HK_PROTO_SIMPLE;
    return 0.0;
  }
  int steps = 2 * (n - 1), inter = hosts > 1 ? 2 * (hosts - 1) : 0;
  double best = INFINITY;
  for (int p = first_proto(h); p <= HK_PROTO_SIMPLE; p++) {
    double lat = base_us(h, HK_FIG_RING, p) +
                 (steps - inter) * step_us(h, HK_FIG_RING, p, intra_hw(h)) +
                 inter * step_us(h, HK_FIG_RING, p, HK_HW_NET);
    double b = bw * hk_fig_proto_bw_factor(HK_FIG_RING, p);
    double us = phase_us(lat, bytes, b, (double)n / steps);
    if (us < best) {
      best = us;
      *proto = p;
    }
  }
  return best;
}

static double tree_us(const hk_host_model *h, int hosts, double bw,
                      double bytes, int *proto) {
  double best = INFINITY;
  for (int p = first_proto(h); p <= HK_PROTO_SIMPLE; p++) {
    double lat =
        base_us(h, HK_FIG_TREE, p) +
        2.0 * ((h->gpus - 1) * step_us(h, HK_FIG_TREE, p, intra_hw(h)) +
               ceil_log2(hosts) * step_us(h, HK_FIG_TREE, p, HK_HW_NET));
    double b =
        bw * HK_FIG_TREE_BW_FACTOR * hk_fig_proto_bw_factor(HK_FIG_TREE, p);
    double us = phase_us(lat, bytes, b, 0.5);
    if (us < best) {
      best = us;
      *proto = p;
    }
  }
  return best;
}

/* Reduce-scatter (or allgather) inside a host: g-1 steps, (g-1)/g of the
 * bytes through each rank. */
static double half_ring_us(const hk_host_model *h, double bytes, int *proto) {
  int g = h->gpus;
  if (g == 1)
    return 0.0;
  double best = INFINITY;
  for (int p = first_proto(h); p <= HK_PROTO_SIMPLE; p++) {
    double lat = base_us(h, HK_FIG_RING, p) +
                 (g - 1) * step_us(h, HK_FIG_RING, p, intra_hw(h));
    double b = h->intra_gbps * hk_fig_proto_bw_factor(HK_FIG_RING, p);
    double us = phase_us(lat, bytes, b, (double)g / (g - 1));
    if (us < best) {
      best = us;
      *proto = p;
    }
  }
  return best;
}

/* collectives/rd.c's pairing of n ranks: with p the largest power of two
 * <= n and e = n - p, each even rank 2i < 2e hands its buffer to 2i + 1
 * and sits out (and gets the result back); the p others take virtual
 * indices v (2i + 1 -> i, r >= 2e -> r - e) and exchange with v ^ mask
 * for each mask < p. */
static int pow2_floor(int n) {
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

/* The first virtual index whose rank is >= r (virtual indices grow with
 * their ranks, so a host's are one interval). */
static long first_virtual(long r, long e) { return r <= 2 * e ? r / 2 : r - e; }

/* Indices in [0, x) whose bit m (a power of two) is clear. */
static long clear_below(long x, long m) {
  return x / (2 * m) * m + (x % (2 * m) < m ? x % (2 * m) : m);
}

/* Indices v of [lo, hi) whose partner v ^ m lies outside [lo, hi). */
static long leaving(long lo, long hi, long m) {
  long in = 0;
  if (hi - m > lo) /* bit clear: partner v + m */
    in += clear_below(hi - m, m) - clear_below(lo, m);
  if (hi > lo + m) /* bit set: partner v - m */
    in += (hi - clear_below(hi, m)) - (lo + m - clear_below(lo + m, m));
  return hi - lo - in;
}

/* The most ranks of one host whose partner at mask m is on another host
 * (hosts of g contiguous ranks, n = g * hosts). */
static long most_crossing(int g, int hosts, long m) {
  const long n = (long)g * hosts, e = n - pow2_floor((int)n);
  long most = 0;
  for (long j = 0; j < hosts; j++) {
    long c = leaving(first_virtual(j * g, e), first_virtual((j + 1) * g, e), m);
    most = c > most ? c : most;
  }
  return most;
}

/* Recursive doubling over hosts*g ranks, hosts' ranks contiguous, step by
 * step as collectives/rd.c pairs them: a step where no rank's partner is
 * on another host runs at the in-host rate and step latency; otherwise
 * the whole buffer crosses the network once for each of a host's ranks
 * whose partner is elsewhere (they share the host's rate; the most of any
 * host). When n is not a power of two, handing over and back are two
 * steps more, which cross only where a host of odd g ends on an even
 * rank below 2e (one rank of that host). Simple protocol (whole buffers,
 * no LL). */
static double rd_us(const hk_host_model *h, int hosts, double intra, double net,
                    double bytes) {
  const int g = h->gpus, n = g * hosts, p = pow2_floor(n), e = n - p;
  const int s = HK_PROTO_SIMPLE;
  const double in_step =
      phase_us(step_us(h, HK_FIG_RING, s, intra_hw(h)), bytes, intra, 1.0);
  const double net_lat = step_us(h, HK_FIG_RING, s, HK_HW_NET);
  double us = base_us(h, HK_FIG_RING, s);
  if (e > 0)
    us +=
        2 * (g % 2 && g < 2 * e ? phase_us(net_lat, bytes, net, 1.0) : in_step);
  for (long m = 1; m < p; m *= 2) {
    const long c = most_crossing(g, hosts, m);
    us += c ? phase_us(net_lat, bytes * (double)c, net, 1.0) : in_step;
  }
  return us;
}

/* The model's formulas: what predict() computes for each. */
typedef enum formula { RING, TREE, HIERARCHICAL, RD } formula;
static const char *const formula_names[] = {"ring", "tree", "hierarchical",
                                            "rd"};

static hk_status predict(const hk_host_model *h, formula algo, size_t bytes,
                         int hosts, double net_gbit, hk_cost *out) {
  memset(out, 0, sizeof *out);
  if (!h || h->gpus < 1 || hosts < 1 ||
      (double)h->gpus * hosts > (double)(1 << 24) ||
      (h->gpus > 1 && !(h->intra_gbps > 0)) || (hosts > 1 && !(net_gbit > 0)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "cost model: %d GPUs/host, %.3g GB/s in host, %d hosts, "
                   "%.3g Gbit/s, algorithm %s",
                   h ? h->gpus : 0, h ? h->intra_gbps : 0.0, hosts, net_gbit,
                   formula_names[algo]);
  int n = h->gpus * hosts;
  double s = (double)bytes;
  double net = net_gbit / 8.0; /* GB/s */
  double intra = h->gpus > 1 ? h->intra_gbps : INFINITY;
  double flat = hosts > 1 ? fmin(intra, net) : intra;
  int proto = HK_PROTO_SIMPLE;
  double us = 0.0;
  if (n == 1) {
    us = 0.0;
  } else if (algo == TREE) {
    us = tree_us(h, hosts, flat, s, &proto);
  } else if (algo == RD) {
    us = rd_us(h, hosts, intra, net, s);
  } else if (algo == RING || hosts == 1) {
    us = ring_us(h, h->gpus, hosts, flat, s, &proto);
  } else {
    /* hierarchical: each of the g cross-host rings carries bytes/g and
     * gets net/g of the host's network. */
    int p1 = HK_PROTO_SIMPLE, p2 = HK_PROTO_SIMPLE;
    hk_host_model one = {1, INFINITY, 0, h->fig};
    double rs = half_ring_us(h, s, &p1);
    double cross = ring_us(&one, 1, hosts, net / h->gpus, s / h->gpus, &p2);
    us = 2.0 * rs + cross;
    proto = p2;
  }
  out->algo = formula_names[algo];
  out->proto = proto;
  out->time_us = us;
  if (us > 0 && bytes > 0) {
    out->algbw_gbps = s / (us * 1e3);
    out->busbw_gbps = out->algbw_gbps * 2.0 * (n - 1) / n;
  }
  return HK_OK;
}

/* The public formulas: predict() with one formula each. */
#define FORMULA(fn, f)                                                         \
  hk_status fn(const hk_host_model *h, size_t bytes, int hosts,                \
               double net_gbit, hk_cost *out) {                                \
    return predict(h, f, bytes, hosts, net_gbit, out);                         \
  }
FORMULA(hk_cost_ring, RING)
FORMULA(hk_cost_tree, TREE)
FORMULA(hk_cost_hierarchical, HIERARCHICAL)
FORMULA(hk_cost_rd, RD)
#undef FORMULA

hk_status hk_cost_nccl(const hk_host_model *h, size_t bytes, int hosts,
                       double net_gbit, hk_cost *out) {
  /* NCCL's menu, simpler first (ties keep the earlier) */
  static const formula menu[] = {RING, HIERARCHICAL, TREE};
  hk_cost best = {0};
  for (size_t i = 0; i < sizeof menu / sizeof menu[0]; i++) {
    if (menu[i] == HIERARCHICAL && hosts == 1)
      continue; /* the same as the ring there */
    hk_cost c;
    hk_status st = predict(h, menu[i], bytes, hosts, net_gbit, &c);
    if (st != HK_OK)
      return st;
    if (i == 0 || c.time_us < best.time_us * (1.0 - 1e-12))
      best = c;
  }
  *out = best;
  return HK_OK;
}

hk_status hk_host_model_from_topo(const hk_topo *t, int local_size,
                                  hk_host_model *out) {
  memset(out, 0, sizeof *out);
  if (!t || local_size < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "host model: local_size %d", local_size);
  if (t->n_gpus == 0)
    return hk_fail(HK_ERR_CONFIG,
                   "host model: the layout describes no GPU (a skeleton "
                   "file?)");
  if (local_size > t->n_gpus)
    return hk_fail(HK_ERR_CONFIG,
                   "host model: %d local ranks but the layout has %d GPUs",
                   local_size, t->n_gpus);
  out->gpus = local_size;
  if (local_size == 1)
    return HK_OK;
  int gpus[HK_TOPO_MAX_GPUS];
  for (int i = 0; i < local_size; i++)
    gpus[i] = i;
  hk_topo_rings *rs = malloc(sizeof *rs);
  if (!rs)
    return hk_fail(HK_ERR_NOMEM, "host model: out of memory");
  hk_status st = hk_topo_find_rings(t, gpus, local_size, rs);
  if (st == HK_OK) {
    out->intra_gbps = rs->total_gbps;
    out->intra_nvlink = 1;
    for (int r = 0; r < rs->n_rings; r++)
      if (!rs->ring[r].nvlink_only)
        out->intra_nvlink = 0;
  }
  free(rs);
  return st;
}
