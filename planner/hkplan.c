/*
 * hkplan.c - which servers to rent and how many, predicted before renting
 * (docs/plan.md). Reads a gradient set, a compute time per step, server
 * topologies, networks and a price table; prints a ranked table of
 * candidates (servers x count x network), or --csv; --deadline/--budget
 * pick the cheapest that meets them; --plot draws a PNG; --batches
 * compares the simulator's fusion with a recorded timeline's.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/status.h"
#include "planner/batches.h"
#include "planner/check.h"
#include "planner/gradset.h"
#include "planner/names.h"
#include "planner/netbench.h"
#include "planner/plan.h"
#include "planner/plot.h"
#include "planner/prices.h"
#include "planner/tlread.h"
#include "topology/figures.h"
#include "topology/parse.h"

#ifndef HKPLAN_DATA_DIR /* the source tree (CMake) */
#define HKPLAN_DATA_DIR "."
#endif
#ifndef HKPLAN_DATA_REL /* from an installed hkplan's folder (CMake) */
#define HKPLAN_DATA_REL "../share/hk"
#endif

#define MAX_SERVERS 16
#define MAX_NETS 16
#define MAX_COUNTS 32

typedef struct opts {
  const char *model, *model_dir, *config_dir, *timeline, *prices, *plot;
  const char *batches, *check, *measured_on, *server[MAX_SERVERS];
  const char *net_bench; /* --net-bench: a measured sweep */
  int eff_given;         /* --link-eff was given */
  int lat_given;         /* --latency-us was given */
  int nserver, counts[MAX_COUNTS], ncounts, csv, amp, batch, np;
  double nets[MAX_NETS];
  int nnets;
  double step_s, bwd_frac, link_eff, act_mib, deadline_h, budget, samples;
  double lat_us;
  int opt_bytes;
  hk_sim_job job;
  const char *compression;
} opts;

static int usage(FILE *f) {
  fprintf(f,
          "usage: hkplan --model NAME|FILE.tsv --step-s S --batch B "
          "--server TOPO[:GPU] ...\n"
          "  --model NAME|FILE.tsv  the gradient set (bench/models)\n"
          "  --step-s S             compute per step on one GPU, seconds\n"
          "  --batch B              samples per GPU per step\n"
          "  --measured-on GPU      the GPU S was measured on (default: each "
          "server's own)\n"
          "  --amp                  mixed precision (FP16 tensor rates)\n"
          "  --bwd-frac F           backward share of S (default 0.667)\n"
          "  --timeline FILE        per-tensor ready times from an hk "
          "timeline\n"
          "  --server TOPO[:GPU]    a topology (configs/ name or file); "
          "repeatable;\n"
          "                         cpu:N: a CPU host of N ranks (host "
          "tensors, hk's TCP figures)\n"
          "  --servers N,N,...      server counts (default 1,2,4,8)\n"
          "  --net G[,G...]         link rates, Gbit/s (default 10,25,100)\n"
          "  --latency-us U         one step across servers (default: the "
          "model's)\n"
          "  --link-eff E           share of the link rate the exchange gets "
          "(default 1)\n"
          "  --net-bench FILE.csv   the network measured: hkbench --csv "
          "between two candidate\n"
          "                         servers (one rank each) gives the rate "
          "and the latency\n"
          "  --prices FILE          price per server-hour "
          "(configs/prices.tsv)\n"
          "  --optimizer sgd|momentum|adam   (default adam)\n"
          "  --act-mib M            activation MiB per sample\n"
          "  --compression none|fp16|bf16  what hk sends (HK_COMPRESSION)\n"
          "  --fusion-threshold B --cycle-ms M --round-us U --inflight N\n"
          "  --no-hierarchical      as HK_HIERARCHICAL_ALLREDUCE=0 (flat "
          "ring across servers)\n"
          "  --collective hk|nccl|nccl-ring  who runs GPU batches across "
          "servers (default hk)\n"
          "  --samples N --deadline H --budget C   pick the cheapest meeting "
          "them\n"
          "  --csv                  CSV instead of the table\n"
          "  --plot FILE.png        throughput and cost against servers\n"
          "  --batches TIMELINE --np N   compare the simulated fusion with a "
          "recorded run's\n"
          "  --check TIMELINE       a finished run's measured step time "
          "against the\n"
          "                         prediction for it (one candidate)\n");
  return f == stderr ? 2 : 0;
}

/* <prefix>/share/hk next to an installed hkplan, else the source tree. */
static const char *data_dir(void) {
  static char dir[PATH_MAX];
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(dir, sizeof dir, "%.*s/%s", PATH_MAX - 64, exe, HKPLAN_DATA_REL);
      char probe[PATH_MAX + 16];
      snprintf(probe, sizeof probe, "%.*s/configs", PATH_MAX - 16, dir);
      if (access(probe, R_OK) == 0)
        return dir;
    }
  }
  return HKPLAN_DATA_DIR;
}

static int bad(const char *what, const char *arg) {
  fprintf(stderr, "hkplan: %s: '%s'\n", what, arg);
  return 2;
}

/* A decimal number in [lo, hi] into *out; -1 otherwise (hex, inf, nan,
 * trailing text included). */
static int number(const char *s, double lo, double hi, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || strpbrk(s, "xXnN") || !(v >= lo && v <= hi))
    return -1;
  *out = v;
  return 0;
}

static int list_of(const char *s, double lo, double hi, double *out, int max,
                   int *n) {
  char buf[512];
  *n = 0;
  if (strlen(s) >= sizeof buf) /* not cut short in silence */
    return -1;
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    if (*n == max || number(t, lo, hi, &out[*n]) != 0)
      return -1;
    (*n)++;
  }
  return *n ? 0 : -1;
}

enum {
  O_MODEL = 256,
  O_MODEL_DIR,
  O_STEP,
  O_BATCH,
  O_ON,
  O_AMP,
  O_BWD,
  O_TL,
  O_SERVER,
  O_SERVERS,
  O_NET,
  O_LAT,
  O_EFF,
  O_NETBENCH,
  O_PRICES,
  O_OPT,
  O_ACT,
  O_COMP,
  O_THRESH,
  O_CYCLE,
  O_ROUND,
  O_INFL,
  O_SAMPLES,
  O_DEADLINE,
  O_BUDGET,
  O_CSV,
  O_PLOT,
  O_BATCHES,
  O_NP,
  O_NOHIER,
  O_COLL,
  O_CHECK,
  O_HELP
};

/* --samples, --deadline, --budget and --prices: only together as pick()
 * needs them; 0 or the usage error (2), saying what is missing. */
static int combinations(const opts *o) {
  const int limit = o->deadline_h > 0 || o->budget > 0;
  const char *missing = NULL;
  if (limit && !(o->samples > 0))
    missing = "--deadline and --budget need --samples (how many samples "
              "the training takes)";
  else if (o->samples > 0 && !limit)
    missing = "--samples is used only with --deadline or --budget";
  else if (limit && !o->prices)
    missing = "--deadline and --budget pick the cheapest candidate: they "
              "need --prices";
  if (!missing)
    return 0;
  fprintf(stderr, "hkplan: %s\n", missing);
  return 2;
}

static int parse(int argc, char **argv, opts *o) {
  static const struct option lo[] = {{"model", 1, 0, O_MODEL},
                                     {"model-dir", 1, 0, O_MODEL_DIR},
                                     {"step-s", 1, 0, O_STEP},
                                     {"batch", 1, 0, O_BATCH},
                                     {"measured-on", 1, 0, O_ON},
                                     {"amp", 0, 0, O_AMP},
                                     {"bwd-frac", 1, 0, O_BWD},
                                     {"timeline", 1, 0, O_TL},
                                     {"server", 1, 0, O_SERVER},
                                     {"servers", 1, 0, O_SERVERS},
                                     {"net", 1, 0, O_NET},
                                     {"latency-us", 1, 0, O_LAT},
                                     {"link-eff", 1, 0, O_EFF},
                                     {"net-bench", 1, 0, O_NETBENCH},
                                     {"prices", 1, 0, O_PRICES},
                                     {"optimizer", 1, 0, O_OPT},
                                     {"act-mib", 1, 0, O_ACT},
                                     {"compression", 1, 0, O_COMP},
                                     {"fusion-threshold", 1, 0, O_THRESH},
                                     {"cycle-ms", 1, 0, O_CYCLE},
                                     {"round-us", 1, 0, O_ROUND},
                                     {"inflight", 1, 0, O_INFL},
                                     {"samples", 1, 0, O_SAMPLES},
                                     {"deadline", 1, 0, O_DEADLINE},
                                     {"budget", 1, 0, O_BUDGET},
                                     {"csv", 0, 0, O_CSV},
                                     {"plot", 1, 0, O_PLOT},
                                     {"batches", 1, 0, O_BATCHES},
                                     {"no-hierarchical", 0, 0, O_NOHIER},
                                     {"check", 1, 0, O_CHECK},
                                     {"np", 1, 0, O_NP},
                                     {"collective", 1, 0, O_COLL},
                                     {"help", 0, 0, O_HELP},
                                     {0, 0, 0, 0}};
  double v, counts[MAX_COUNTS];
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    const char *a = optarg;
    switch (c) {
    case O_MODEL:
      o->model = a;
      break;
    case O_MODEL_DIR:
      o->model_dir = a;
      break;
    case O_STEP:
      if (number(a, 1e-9, 3600, &o->step_s))
        return bad("--step-s wants seconds in 1e-9 .. 3600", a);
      break;
    case O_BATCH:
      if (number(a, 1, 1048576, &v) || v != floor(v))
        return bad("--batch wants a whole number in 1 .. 1048576", a);
      o->batch = (int)v;
      break;
    case O_ON:
      o->measured_on = a;
      break;
    case O_AMP:
      o->amp = 1;
      break;
    case O_BWD:
      if (number(a, 1e-6, 1, &o->bwd_frac))
        return bad("--bwd-frac wants a fraction in (0, 1]", a);
      break;
    case O_TL:
      o->timeline = a;
      break;
    case O_SERVER:
      if (o->nserver == MAX_SERVERS)
        return bad("too many --server", a);
      o->server[o->nserver++] = a;
      break;
    case O_SERVERS:
      if (list_of(a, 1, 4096, counts, MAX_COUNTS, &o->ncounts))
        return bad("--servers wants up to 32 counts in 1 .. 4096 joined by ','",
                   a);
      for (int i = 0; i < o->ncounts; i++) {
        if (counts[i] != floor(counts[i]) || counts[i] > 4096)
          return bad("--servers wants whole counts in 1 .. 4096", a);
        o->counts[i] = (int)counts[i];
      }
      break;
    case O_NET:
      if (list_of(a, 1e-3, 1e5, o->nets, MAX_NETS, &o->nnets))
        return bad(
            "--net wants up to 16 rates in 0.001 .. 1e5 Gbit/s joined by ','",
            a);
      break;
    case O_LAT:
      if (number(a, 0, 1e6, &o->lat_us))
        return bad("--latency-us wants µs in 0 .. 1e6", a);
      o->lat_given = 1;
      break;
    case O_EFF:
      if (number(a, 1e-3, 1, &o->link_eff))
        return bad("--link-eff wants a fraction in (0, 1]", a);
      o->eff_given = 1;
      break;
    case O_NETBENCH:
      o->net_bench = a;
      break;
    case O_PRICES:
      o->prices = a;
      break;
    case O_OPT:
      if (!strcmp(a, "sgd"))
        o->opt_bytes = 0;
      else if (!strcmp(a, "momentum"))
        o->opt_bytes = 4;
      else if (!strcmp(a, "adam"))
        o->opt_bytes = 8;
      else
        return bad("--optimizer wants sgd, momentum or adam", a);
      break;
    case O_ACT:
      if (number(a, 0, 1048576, &o->act_mib))
        return bad("--act-mib wants MiB in 0 .. 1048576", a);
      break;
    case O_COMP:
      if (strcmp(a, "none") && strcmp(a, "fp16") && strcmp(a, "bf16"))
        return bad("--compression wants none, fp16 or bf16", a);
      o->compression = a;
      break;
    case O_THRESH:
      if (number(a, 0, 68719476736.0, &v))
        return bad("--fusion-threshold wants bytes (0 .. 64 GiB)", a);
      o->job.threshold = (size_t)v;
      break;
    case O_CYCLE:
      if (number(a, 0, 10000, &v))
        return bad("--cycle-ms wants ms in 0 .. 10000", a);
      o->job.cycle_s = v / 1000.0;
      break;
    case O_ROUND:
      if (number(a, 0, 1e6, &o->job.round_us))
        return bad("--round-us wants µs in 0 .. 1e6", a);
      break;
    case O_INFL:
      if (number(a, 1, 64, &v) || v != floor(v))
        return bad("--inflight wants 1..64", a);
      o->job.inflight = (int)v;
      break;
    case O_SAMPLES:
      if (number(a, 1, 1e12, &o->samples))
        return bad("--samples wants a count in 1 .. 1e12", a);
      break;
    case O_DEADLINE:
      if (number(a, 1e-3, 1e6, &o->deadline_h))
        return bad("--deadline wants hours in 0.001 .. 1e6", a);
      break;
    case O_BUDGET:
      if (number(a, 0.01, 1e9, &o->budget))
        return bad("--budget wants a price in 0.01 .. 1e9", a);
      break;
    case O_CSV:
      o->csv = 1;
      break;
    case O_PLOT:
      o->plot = a;
      break;
    case O_BATCHES:
      o->batches = a;
      break;
    case O_NOHIER:
      o->job.no_hierarchical = 1;
      break;
    case O_COLL:
      if (!strcmp(a, "hk"))
        o->job.collective = HK_SIM_HK;
      else if (!strcmp(a, "nccl"))
        o->job.collective = HK_SIM_NCCL;
      else if (!strcmp(a, "nccl-ring"))
        o->job.collective = HK_SIM_NCCL_RING;
      else
        return bad("--collective wants hk, nccl or nccl-ring", a);
      break;
    case O_CHECK:
      o->check = a;
      break;
    case O_NP:
      if (number(a, 1, 65536, &v) || v != floor(v))
        return bad("--np wants a rank count in 1 .. 65536", a);
      o->np = (int)v;
      break;
    case O_HELP:
      return usage(stdout) == 0 ? 1 : 2;
    default:
      fprintf(stderr, "hkplan: unknown or incomplete option '%s'\n",
              argv[optind - 1]);
      return usage(stderr);
    }
  }
  if (optind < argc)
    return bad("unexpected argument", argv[optind]);
  return combinations(o);
}

static int fail(hk_status st) {
  (void)st;
  fprintf(stderr, "hkplan: %s\n", hk_last_error());
  return 1;
}

/* --net-bench: the measured sweep's rate and latency become the one
 * network (--net) and its step (--latency-us); 0, 1 (it does not load) or
 * 2 (combined with what it replaces). */
static int net_bench(opts *o) {
  if (!o->net_bench)
    return 0;
  if (o->nnets || o->lat_given || o->eff_given) {
    fprintf(stderr, "hkplan: --net-bench gives the network's rate and "
                    "latency: not with --net, --latency-us or --link-eff\n");
    return 2;
  }
  hk_netbench nb;
  hk_status st = hk_netbench_load(o->net_bench, &nb);
  if (st != HK_OK)
    return fail(st);
  if (!(nb.gbit >= 1e-3 && nb.gbit <= 1e5)) { /* --net's range */
    fprintf(stderr,
            "hkplan: %s: the sweep's largest sizes give %g Gbit/s, outside "
            "0.001 .. 1e5: not a network to plan with\n",
            o->net_bench, nb.gbit);
    return 1;
  }
  o->nets[0] = nb.gbit;
  o->nnets = 1;
  o->lat_us = nb.step_us > 1e-3 ? nb.step_us : 1e-3;
  fprintf(stderr,
          "hkplan: %s: %d ranks, %d sizes (%s): %.3f Gbit/s, %.2f us a "
          "step\n",
          o->net_bench, nb.nranks, nb.rows,
          nb.raw ? "the collective alone" : "the public call", nb.gbit,
          nb.step_us);
  return 0;
}

/* Loads "TOPO[:GPU]" into s: a configs/ name (NAME.xml there) or a path. */
/* A CPU host of `ranks` ranks as hk models one without a topology
 * (worker/algo.c): hk's TCP figures (topology/figures.h). */
static void cpu_host(int ranks, hk_plan_server *s) {
  s->fig = (hk_step_figures){0.0, HK_TCP_INTRA_STEP_US, HK_TCP_NET_STEP_US};
  s->host = (hk_host_model){ranks, HK_TCP_INTRA_GBPS, 0, &s->fig};
  snprintf(s->name, sizeof s->name, "cpu%d", ranks);
  s->gpu = NULL;
  s->price = -1.0;
}

static int load_server(const char *spec, const char *config_dir,
                       hk_plan_server *s) {
  if (!strncmp(spec, "cpu:", 4)) {
    char *end;
    long n = strtol(spec + 4, &end, 10);
    if (end == spec + 4 || *end || n < 1 || n > 4096) {
      fprintf(stderr, "hkplan: server '%s': cpu:N wants 1..4096 ranks\n", spec);
      return 1;
    }
    cpu_host((int)n, s);
    return 0;
  }
  char file[PATH_MAX], gpu[64] = "";
  snprintf(file, sizeof file, "%s", spec);
  char *colon = strrchr(file, ':');
  if (colon) {
    snprintf(gpu, sizeof gpu, "%s", colon + 1);
    *colon = '\0';
  }
  char path[PATH_MAX + 8];
  if (strchr(file, '/') || access(file, R_OK) == 0) {
    snprintf(path, sizeof path, "%s", file);
  } else {
    snprintf(path, sizeof path, "%.*s/%.*s%s", PATH_MAX / 2, config_dir,
             PATH_MAX / 4, file, strstr(file, ".xml") ? "" : ".xml");
    if (access(path, F_OK) != 0) { /* a name configs/ does not have */
      char known[1024], near[256];
      hk_names_in(config_dir, ".xml", file, known, sizeof known, near,
                  sizeof near);
      fprintf(stderr,
              "hkplan: server '%s': no topology '%s' in %s%s%s%s (known: "
              "%s; cpu:N; or a topology file's path)\n",
              spec, file, config_dir, near[0] ? ": did you mean " : "", near,
              near[0] ? "?" : "", known);
      return 1;
    }
  }
  hk_topo *t = NULL;
  hk_status st = hk_topo_load_file(path, &t);
  if (st == HK_OK)
    st = t->n_gpus ? hk_host_model_from_topo(t, t->n_gpus, &s->host)
                   : hk_fail(HK_ERR_CONFIG, "%s describes no GPU", path);
  int sm = st == HK_OK ? t->node[t->gpu[0]].sm : 0;
  hk_topo_free(t);
  if (st != HK_OK) {
    fprintf(stderr, "hkplan: server '%s': %s\n", spec, hk_last_error());
    return 1;
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  snprintf(s->name, sizeof s->name, "%.*s", (int)strcspn(base, "."), base);
  s->gpu = *gpu ? hk_gpu_find(gpu) : hk_gpu_by_sm(sm);
  if (!s->gpu) {
    char known[512];
    hk_gpu_names(known, sizeof known);
    fprintf(stderr,
            "hkplan: server '%s': %s GPU %s%s (known: %s; name one with "
            "--server %s:GPU)\n",
            spec, *gpu ? "unknown" : "cannot tell the", *gpu ? gpu : "of",
            *gpu ? "" : " its compute capability", known, file);
    return 1;
  }
  s->price = -1.0;
  return 0;
}

/* Ready fractions: from the timeline (each tensor's last WAIT_FOR_DATA end,
 * over the span of them), else by parameters (tensor k of the backward
 * order is ready when the backward pass has covered the parameters up to
 * and including it). */
static int ready_fracs(const opts *o, const hk_gradset *m, double *frac) {
  size_t n = m->ntensors, acc = 0;
  for (size_t k = 0; k < n; k++) { /* submission k = file n-1-k */
    acc += m->tensors[n - 1 - k].count;
    frac[k] = (double)acc / (double)m->total;
  }
  if (!o->timeline)
    return 0;
  hk_tl tl;
  hk_status st = hk_tl_read(o->timeline, &tl);
  if (st != HK_OK)
    return fail(st);
  double *end = calloc(n, sizeof *end), lo = INFINITY, hi = -INFINITY;
  size_t found = 0;
  for (size_t s = 0; end && s < tl.n; s++) {
    if (strcmp(tl.span[s].phase, "WAIT_FOR_DATA"))
      continue;
    for (size_t i = 0; i < n; i++)
      if (!strcmp(m->tensors[i].name, tl.span[s].tensor)) {
        found += end[n - 1 - i] == 0;
        end[n - 1 - i] = tl.span[s].ts_us + tl.span[s].dur_us;
        break;
      }
  }
  hk_tl_free(&tl);
  if (!end || found != n) {
    fprintf(stderr,
            "hkplan: %s: the timeline names %zu of the %zu tensors of %s\n",
            o->timeline, found, n, m->label);
    free(end);
    return 1;
  }
  for (size_t k = 0; k < n; k++) {
    lo = fmin(lo, end[k]);
    hi = fmax(hi, end[k]);
  }
  for (size_t k = 0; k < n; k++)
    frac[k] = hi > lo ? (end[k] - lo) / (hi - lo) : 1.0;
  free(end);
  return 0;
}

static int by_cost(const void *a, const void *b) {
  const hk_plan_row *x = a, *y = b;
  double cx = x->cost_per_m < 0 ? INFINITY : x->cost_per_m;
  double cy = y->cost_per_m < 0 ? INFINITY : y->cost_per_m;
  if (x->fits != y->fits)
    return y->fits - x->fits;
  if (cx != cy)
    return cx < cy ? -1 : 1;
  return (y->samples_s > x->samples_s) - (y->samples_s < x->samples_s);
}

static void money(char *buf, size_t cap, double v) {
  if (v < 0)
    snprintf(buf, cap, "-");
  else
    snprintf(buf, cap, "%.2f", v);
}

static void print_table(const hk_plan_row *r, size_t n, const opts *o) {
  if (o->csv) {
    printf("server,gpu,servers,gpus,net_gbit,step_ms,band_ms,exposed_ms,"
           "efficiency_pct,samples_s,cost_per_msample,mem_gib,fits,"
           "gpu_efficiency_pct\n");
    for (size_t i = 0; i < n; i++) {
      char cost[32] = "", gpus[16] = ""; /* empty: no price, no GPU */
      if (r[i].cost_per_m >= 0)
        snprintf(cost, sizeof cost, "%.4f", r[i].cost_per_m);
      if (r[i].server->gpu)
        snprintf(gpus, sizeof gpus, "%d", r[i].hosts * r[i].server->host.gpus);
      printf("%s,%s,%d,%s,%g,%.3f,%.3f,%.3f,%.1f,%.1f,%s,%.2f,%s,%.1f\n",
             r[i].server->name,
             r[i].server->gpu ? r[i].server->gpu->name : "CPU", r[i].hosts,
             gpus, r[i].net_gbit, r[i].step_s * 1e3, r[i].band_s * 1e3,
             r[i].exposed_s * 1e3, r[i].efficiency * 100, r[i].samples_s, cost,
             r[i].mem_gib, r[i].fits ? "yes" : "no", r[i].gpu_efficiency * 100);
    }
    return;
  }
  printf("# %-26s %3s %4s %6s %10s %8s %9s %6s %10s %9s %9s\n", "server", "n",
         "gpus", "Gbit/s", "step ms", "+-ms", "exposed", "eff %", "samples/s",
         "$/Msampl", "mem GiB");
  for (size_t i = 0; i < n; i++) {
    char c[32];
    money(c, sizeof c, r[i].cost_per_m);
    char net[16] = "-"; /* one server uses no network */
    if (r[i].hosts > 1)
      snprintf(net, sizeof net, "%g", r[i].net_gbit);
    char gpus[16] = "-"; /* a CPU host's ranks are in its name */
    if (r[i].server->gpu)
      snprintf(gpus, sizeof gpus, "%d", r[i].hosts * r[i].server->host.gpus);
    printf("%3zu %-26.26s %3d %4s %6s %10.2f %8.2f %9.2f %6.1f %10.1f %9s "
           "%6.1f%s\n",
           i + 1, r[i].server->name, r[i].hosts, gpus, net, r[i].step_s * 1e3,
           r[i].band_s * 1e3, r[i].exposed_s * 1e3, r[i].efficiency * 100,
           r[i].samples_s, c, r[i].mem_gib, r[i].fits ? "" : " (does not fit)");
  }
}

/* --deadline / --budget: the cheapest row meeting them (rows sorted). */
static void pick(const hk_plan_row *r, size_t n, const opts *o) {
  if (!(o->deadline_h > 0) && !(o->budget > 0))
    return;
  for (size_t i = 0; i < n; i++) {
    double hours = o->samples / r[i].samples_s / 3600.0;
    double spend =
        r[i].cost_per_m < 0 ? -1 : r[i].cost_per_m * o->samples / 1e6;
    if (!r[i].fits || (o->deadline_h > 0 && hours > o->deadline_h) ||
        (o->budget > 0 && (spend < 0 || spend > o->budget)))
      continue;
    char net[32] = ""; /* one server uses no network */
    if (r[i].hosts > 1)
      snprintf(net, sizeof net, " on %g Gbit/s", r[i].net_gbit);
    printf("pick: %d x %s%s: %.2f h for %.0f samples, cost %.2f\n", r[i].hosts,
           r[i].server->name, net, hours, o->samples, spend);
    return;
  }
  printf("pick: no candidate meets%s%s%s (and fits in memory)\n",
         o->deadline_h > 0 ? " the deadline" : "",
         o->deadline_h > 0 && o->budget > 0 ? " and" : "",
         o->budget > 0 ? " the budget" : "");
}

static int compare_batches(const opts *o, const hk_gradset *m) {
  hk_tl tl;
  hk_status st = hk_tl_read(o->batches, &tl);
  if (st != HK_OK)
    return fail(st);
  hk_sim_job j = o->job;
  hk_plan_server cpu;
  cpu_host(o->np, &cpu);
  j.host = cpu.host;
  j.hosts = 1;
  j.device = 0;
  hk_batch_cmp c;
  st = hk_batches_compare(&tl, m, &j, stdout, &c);
  hk_tl_free(&tl);
  if (st != HK_OK)
    return fail(st);
  printf("batches: %u rounds, %u recorded, %u simulated the same\n", c.rounds,
         c.recorded, c.same);
  return c.same == c.recorded ? 0 : 1;
}

/* --check TIMELINE: the run's measured step against the one candidate
 * that describes it. Exit 0 (the comparison is the output); 1 when the
 * timeline holds no measurable step (hk_check_step's errors). */
static int check_run(const opts *o, const hk_gradset *m,
                     const hk_plan_row *rows, size_t nr) {
  if (nr != 1) {
    fprintf(stderr,
            "hkplan: --check compares one run: give one --server, one "
            "--servers count and one --net (%zu candidates)\n",
            nr);
    return 2;
  }
  hk_tl tl;
  hk_status st = hk_tl_read(o->check, &tl);
  if (st != HK_OK)
    return fail(st);
  double measured, span;
  unsigned steps;
  st = hk_check_step(&tl, m, &measured, &span, &steps);
  hk_tl_free(&tl);
  if (st != HK_OK)
    return fail(st);
  const hk_plan_row *r = &rows[0];
  double err = (r->step_s - measured) / measured * 100.0;
  printf("check: %s: measured step %.3f ms (median of %u), predicted %.3f "
         "+- %.3f ms for %d x %s at %g Gbit/s: error %+.1f %% (%s the "
         "band)\n",
         o->check, measured * 1e3, steps, r->step_s * 1e3, r->band_s * 1e3,
         r->hosts, r->server->name, r->net_gbit, err,
         fabs(r->step_s - measured) <= r->band_s ? "inside" : "outside");
  printf("check: exchange span (first request -> last allreduce done): "
         "measured %.3f ms, predicted %.3f ms: error %+.1f %%\n",
         span * 1e3, r->span_s * 1e3, (r->span_s - span) / span * 100.0);
  return 0;
}

int main(int argc, char **argv) {
  opts o = {.bwd_frac = 2.0 / 3.0,
            .link_eff = 1.0,
            .opt_bytes = 8,
            .batch = 0,
            .np = 2,
            .job = {.threshold = (size_t)128 << 20,
                    .inflight = 4,
                    .round_us = -1,
                    .pack_gbps = 0,
                    .pcie_gbps = 24.0,
                    .dtype = HK_FLOAT32}};
  int rc = parse(argc, argv, &o);
  if (rc)
    return rc == 1 ? 0 : rc;
  if ((rc = net_bench(&o)) != 0)
    return rc;
  char models[PATH_MAX], configs[PATH_MAX];
  const char *dd = data_dir();
  if (!strcmp(dd, HKPLAN_DATA_DIR)) {
    snprintf(models, sizeof models, "%.*s/bench/models", PATH_MAX - 16, dd);
    snprintf(configs, sizeof configs, "%.*s/configs", PATH_MAX - 16, dd);
  } else {
    snprintf(models, sizeof models, "%.*s/models", PATH_MAX - 16, dd);
    snprintf(configs, sizeof configs, "%.*s/configs", PATH_MAX - 16, dd);
  }
  if (!o.model)
    return fprintf(stderr, "hkplan: --model is required\n"), usage(stderr);
  hk_gradset m;
  if (hk_gradset_load("hkplan", o.model, o.model_dir ? o.model_dir : models,
                      &m) != 0)
    return 1;
  if (o.compression && strcmp(o.compression, "none"))
    o.job.wire_ratio = 0.5; /* float32 gradients sent in 16 bits */
  if (o.batches) {
    if (o.job.round_us < 0)
      o.job.round_us = 0;
    rc = compare_batches(&o, &m);
    hk_gradset_free(&m);
    return rc;
  }
  if (!(o.step_s > 0) || o.batch < 1 || o.nserver == 0) {
    fprintf(stderr, "hkplan: --step-s, --batch and at least one --server "
                    "are required\n");
    hk_gradset_free(&m);
    return usage(stderr);
  }
  rc = 1;
  const hk_gpu_spec *on = NULL;
  hk_plan_server *sv = calloc((size_t)o.nserver, sizeof *sv);
  size_t n = m.ntensors;
  size_t *bytes = malloc(n * sizeof *bytes);
  double *frac = malloc(n * sizeof *frac);
  hk_plan_row *rows = NULL;
  hk_prices prices = {0};
  if (!sv || !bytes || !frac) {
    fprintf(stderr, "hkplan: out of memory\n");
    goto out;
  }
  if (o.measured_on && !(on = hk_gpu_find(o.measured_on))) {
    char known[512];
    hk_gpu_names(known, sizeof known);
    fprintf(stderr, "hkplan: --measured-on: unknown GPU '%s' (known: %s)\n",
            o.measured_on, known);
    goto out;
  }
  if (o.prices) {
    hk_status st = hk_prices_load(o.prices, &prices);
    if (st != HK_OK) {
      fail(st);
      goto out;
    }
  }
  for (int i = 0; i < o.nserver; i++) {
    if (load_server(o.server[i], configs, &sv[i]))
      goto out;
    if (o.prices) {
      hk_status st = hk_prices_get(&prices, sv[i].name, &sv[i].price);
      if (st != HK_OK) {
        fail(st);
        goto out;
      }
    }
    if (o.lat_us > 0 && !sv[i].gpu) {
      sv[i].fig.net_step_us = o.lat_us;
    } else if (o.lat_us > 0) { /* NCCL's Simple figures inside, the given
                                  across */
      sv[i].fig = (hk_step_figures){
          hk_fig_base_us(HK_FIG_RING, HK_PROTO_SIMPLE),
          hk_fig_step_us(HK_FIG_RING, HK_PROTO_SIMPLE,
                         sv[i].host.intra_nvlink ? HK_HW_NVLINK : HK_HW_PCI),
          o.lat_us};
      sv[i].host.fig = &sv[i].fig;
    }
  }
  for (size_t k = 0; k < n; k++)
    bytes[k] = m.tensors[n - 1 - k].count * 4; /* float32 */
  if (ready_fracs(&o, &m, frac))
    goto out;
  if (o.ncounts == 0) {
    int d[] = {1, 2, 4, 8};
    memcpy(o.counts, d, sizeof d);
    o.ncounts = 4;
  }
  if (o.nnets == 0) {
    double d[] = {10, 25, 100};
    memcpy(o.nets, d, sizeof d);
    o.nnets = 3;
  }
  hk_plan_input in = {.bytes = bytes,
                      .ready_frac = frac,
                      .n = (unsigned)n,
                      .params = m.total,
                      .step_s = o.step_s,
                      .measured_on = on,
                      .amp = o.amp,
                      .bwd_frac = o.bwd_frac,
                      .batch = o.batch,
                      .opt_bytes = o.opt_bytes,
                      .act_mib = o.act_mib,
                      .job = o.job};
  size_t cap = (size_t)o.nserver * o.ncounts * o.nnets, nr = 0;
  rows = calloc(cap, sizeof *rows);
  if (!rows) {
    fprintf(stderr, "hkplan: out of memory\n");
    goto out;
  }
  for (int s = 0; s < o.nserver; s++)
    for (int net = 0; net < o.nnets; net++)
      for (int c = 0; c < o.ncounts; c++) {
        if (o.counts[c] == 1 && net > 0)
          continue; /* one server uses no network */
        hk_status st = hk_plan_eval(&in, &sv[s], o.counts[c], o.nets[net],
                                    o.link_eff, &rows[nr]);
        if (st != HK_OK) {
          fail(st);
          goto out;
        }
        nr++;
      }
  if (o.check) {
    rc = check_run(&o, &m, rows, nr);
    goto out;
  }
  if (o.plot) { /* without gnuplot, the table all the same */
    hk_status st = hk_plan_plot(rows, nr, o.plot);
    if (st != HK_OK && st != HK_ERR_CONFIG) {
      fail(st);
      goto out;
    }
    if (st != HK_OK)
      fprintf(stderr, "hkplan: %s\n", hk_last_error());
  }
  qsort(rows, nr, sizeof *rows, by_cost);
  if (!o.csv)
    printf("# %s: %zu tensors, %zu parameters, %s; %.4g s per step "
           "at batch %d%s%s%s\n",
           m.label, n, m.total,
           o.job.wire_ratio > 0 ? "fp32 gradients sent as 16-bit"
                                : "fp32 gradients",
           o.step_s, o.batch, on ? " on " : "", on ? on->name : "",
           o.amp ? ", mixed precision" : "");
  print_table(rows, nr, &o);
  pick(rows, nr, &o);
  rc = 0;
out:
  free(rows);
  free(sv);
  free(bytes);
  free(frac);
  hk_prices_free(&prices);
  hk_gradset_free(&m);
  return rc;
}
