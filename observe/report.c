/* report.c - the attribution report and the live table (report.h). */
#include "observe/report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "observe/telemetry.h"

/* Appends formatted text to a NUL-terminated buffer, cutting at cap. */
static void add(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add(char *out, size_t cap, const char *fmt, ...) {
  size_t len = strlen(out);
  if (len + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + len, cap - len, fmt, ap);
  va_end(ap);
}

double hk_report_lateness(const hk_monitor_view *v, int r) {
  return v->rounds ? v->ranks[r].total.late_s / (double)v->rounds : 0;
}

/* The lateness a rank must reach to be named, s. */
static double threshold(const hk_monitor_view *v) {
  double rel = HK_REPORT_REL_LATE * v->period_s;
  return rel > HK_REPORT_MIN_LATE_S ? rel : HK_REPORT_MIN_LATE_S;
}

double hk_report_excess(const hk_monitor_view *v, int r) {
  const int n = v->size - 1;
  if (n < 1)
    return 0;
  double *o = malloc((size_t)n * sizeof *o);
  if (!o)
    return 0;
  int k = 0;
  for (int q = 0; q < v->size; q++) /* the others, sorted (insertion) */
    if (q != r) {
      double x = hk_report_lateness(v, q);
      int i = k++;
      for (; i > 0 && o[i - 1] > x; i--)
        o[i] = o[i - 1];
      o[i] = x;
    }
  double median = n % 2 ? o[n / 2] : (o[n / 2 - 1] + o[n / 2]) / 2;
  free(o);
  return hk_report_lateness(v, r) - median;
}

int hk_report_is_straggler(const hk_monitor_view *v, int r) {
  return v->rounds > 0 && hk_report_excess(v, r) >= threshold(v);
}

/* The GPU causes' words, by hk_gpu_cause. */
static const char *const cause_words[HK_CAUSE_COUNT] = {
    "thermal slowdown", "power cap", "hardware slowdown"};

/* Rank r's threads' run delay per second of wall time over its samples
 * (s/s), or -1 with fewer than two samples; *cpu: its CPU time per s. */
static double starvation(const hk_monitor_view *v, int r, double *cpu) {
  const hk_rank_telemetry *t = &v->ranks[r].tel;
  double dt = t->last.t_s - t->first.t_s;
  if (t->samples < 2 || dt <= 0)
    return -1;
  if (cpu)
    *cpu = (t->last.cpu_s - t->first.cpu_s) / dt;
  return (t->last.run_delay_s - t->first.run_delay_s) / dt;
}

/* What rank r's host shows, over the ranks of that host (by name). */
typedef struct host_figures {
  int nranks;     /* ranks on the host */
  int nload;      /* of them with samples */
  double load;    /* mean 1-minute load per CPU */
  unsigned ncpu;  /* online CPUs (the last sample of its last rank) */
  int nstarved;   /* ranks with a starvation figure */
  double starved; /* their median starvation, s/s */
  double others;  /* the median of the others' than r, s/s (0: none) */
} host_figures;

static double median(double *x, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: a host has few ranks */
    for (int k = i; k > 0 && x[k - 1] > x[k]; k--) {
      double t = x[k];
      x[k] = x[k - 1];
      x[k - 1] = t;
    }
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

static void host_of(const hk_monitor_view *v, int r, host_figures *h) {
  memset(h, 0, sizeof *h);
  double *all = malloc((size_t)v->size * 2 * sizeof *all);
  if (!all)
    return;
  double *others = all + v->size;
  int nothers = 0;
  for (int q = 0; q < v->size; q++) {
    if (strcmp(v->ranks[q].host, v->ranks[r].host) != 0)
      continue;
    const hk_rank_telemetry *t = &v->ranks[q].tel;
    h->nranks++;
    if (t->samples) {
      h->load += t->load_per_cpu / (double)t->samples;
      h->nload++;
      h->ncpu = t->last.ncpu;
    }
    double st = starvation(v, q, NULL);
    if (st >= 0) {
      all[h->nstarved++] = st;
      if (q != r)
        others[nothers++] = st;
    }
  }
  if (h->nload)
    h->load /= h->nload;
  h->others = nothers ? median(others, nothers) : 0;
  h->starved = h->nstarved ? median(all, h->nstarved) : 0;
  free(all);
}

/* Host-wide starvation: at least half of the host's ranks starve (a rank
 * alone on its host: its own figure is its host's). */
static int host_starved(const host_figures *h) {
  return h->nstarved && h->starved >= HK_REPORT_STARVED_S;
}

int hk_report_causes(const hk_monitor_view *v, int r, char *out, size_t cap) {
  const hk_rank_telemetry *t = &v->ranks[r].tel;
  int named = 0;
  for (int c = 0; c < HK_CAUSE_COUNT && t->gpu_samples; c++) {
    const hk_tel_sums *s = &t->cause[c];
    double share = (double)s->n / (double)t->gpu_samples;
    if (share < HK_REPORT_MIN_SHARE)
      continue;
    double n = (double)s->n;
    add(out, cap,
        "%s%s %.0f%% of the time at %.0f \u00b0C, SM clock %.0f of "
        "%.0f MHz, power %.0f of %.0f W",
        named++ ? "; " : "", cause_words[c], 100 * share, s->temp_c / n,
        s->sm_mhz / n, s->sm_max_mhz / n, s->power_w / n, s->limit_w / n);
  }
  if (!named && t->busy.n && t->busy.sm_max_mhz > 0) {
    double sm = t->busy.sm_mhz / (double)t->busy.n;
    double max = t->busy.sm_max_mhz / (double)t->busy.n;
    if (sm < HK_REPORT_LOW_CLOCK * max)
      add(out, cap,
          "%slow SM clock %.0f of %.0f MHz at %.0f%% utilisation, no "
          "throttle reason reported",
          named++ ? "; " : "", sm, max, t->busy.util_pct / (double)t->busy.n);
  }
  /* its own starvation: its threads waited where most of its host's did
   * not (else the host's: hk_report_host_causes) */
  host_figures h;
  host_of(v, r, &h);
  double cpu = 0, starved = starvation(v, r, &cpu);
  if (starved >= HK_REPORT_STARVED_S && !host_starved(&h) &&
      starved - h.others >= HK_REPORT_STARVED_S)
    add(out, cap,
        "%sCPU starvation: its threads waited %.2f s per s for a CPU "
        "(they ran %.2f s per s)",
        named++ ? "; " : "", starved, cpu);
  if (!named)
    add(out, cap, "no cause of its own visible in telemetry");
  return named;
}

int hk_report_host_causes(const hk_monitor_view *v, int r, char *out,
                          size_t cap) {
  host_figures h;
  host_of(v, r, &h);
  int named = 0;
  if (h.nload && h.load >= HK_REPORT_HIGH_LOAD)
    add(out, cap, "%shigh load %.1f per CPU (%u CPUs)", named++ ? "; " : "",
        h.load, h.ncpu);
  if (host_starved(&h))
    add(out, cap,
        "%sCPU starvation: its ranks' threads waited %.2f s per s for a "
        "CPU (the median of %d rank%s)",
        named++ ? "; " : "", h.starved, h.nstarved, h.nstarved > 1 ? "s" : "");
  return named;
}

/* Ranks ordered by lateness over every round, slowest first (ties: the
 * lower rank first; a small insertion sort). */
static void order(const hk_monitor_view *v, int *idx) {
  for (int r = 0; r < v->size; r++) {
    int k = r;
    for (;
         k > 0 && hk_report_lateness(v, idx[k - 1]) < hk_report_lateness(v, r);
         k--)
      idx[k] = idx[k - 1];
    idx[k] = r;
  }
}

int hk_report_latest(const hk_monitor_view *v) {
  if (!v->rounds || v->size < 1)
    return -1;
  int latest = 0;
  for (int r = 1; r < v->size; r++)
    if (hk_report_lateness(v, r) > hk_report_lateness(v, latest))
      latest = r;
  return latest;
}

/* "0-3", "0, 2, 5-7": the ranks on rank r's host, into out[cap]. */
static void host_ranks(const hk_monitor_view *v, int r, char *out, size_t cap) {
  out[0] = '\0';
  for (int q = 0; q < v->size; q++) {
    if (strcmp(v->ranks[q].host, v->ranks[r].host) != 0)
      continue;
    int e = q;
    while (e + 1 < v->size && !strcmp(v->ranks[e + 1].host, v->ranks[r].host))
      e++;
    if (e > q)
      add(out, cap, "%s%d-%d", out[0] ? ", " : "", q, e);
    else
      add(out, cap, "%s%d", out[0] ? ", " : "", q);
    q = e;
  }
}

/* The first rank of each host whose figures show host-wide causes: one
 * line per such host, in rank order. */
static hk_status host_lines(const hk_monitor_view *v, hk_buf *out) {
  hk_status st = HK_OK;
  for (int r = 0; r < v->size && st == HK_OK; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++)
      first = strcmp(v->ranks[q].host, v->ranks[r].host) != 0;
    char causes[512] = "", ranks[256], line[1024];
    if (!first || !hk_report_host_causes(v, r, causes, sizeof causes))
      continue;
    host_ranks(v, r, ranks, sizeof ranks);
    snprintf(line, sizeof line, "hk monitor: host %s (rank%s %s): %s\n",
             v->ranks[r].host, strpbrk(ranks, ",-") ? "s" : "", ranks, causes);
    st = hk_buf_append(out, line, strlen(line));
  }
  return st;
}

/* ", GPU 3", or "" without GPU telemetry (no GPU line then) */
static void gpu_words(const hk_monitor_rank *k, char *out, size_t cap) {
  out[0] = '\0';
  if (k->tel.gpu_samples)
    snprintf(out, cap, ", GPU %u", (unsigned)k->tel.last.gpu_index);
}

hk_status hk_report_format(const hk_monitor_view *v, hk_buf *out) {
  int *idx = malloc((size_t)v->size * sizeof *idx);
  if (!idx)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the report");
  order(v, idx);
  char line[2048];
  snprintf(line, sizeof line,
           "hk monitor: %llu rounds in %.1f s (one every %.1f ms); a rank "
           "is named when it is at least %.1f ms per round later than the "
           "median of the others (max(%.0f ms, %.0f%% of a round))\n",
           (unsigned long long)v->rounds, v->elapsed_s, 1e3 * v->period_s,
           1e3 * threshold(v), 1e3 * HK_REPORT_MIN_LATE_S,
           100 * HK_REPORT_REL_LATE);
  hk_status st = hk_buf_append(out, line, strlen(line));
  int named = 0;
  for (int i = 0; i < v->size && named < HK_REPORT_MAX_NAMED && st == HK_OK;
       i++) {
    int r = idx[i];
    if (!hk_report_is_straggler(v, r))
      break;
    const hk_monitor_rank *k = &v->ranks[r];
    char gpu[32];
    gpu_words(k, gpu, sizeof gpu);
    snprintf(line, sizeof line,
             "hk monitor: rank %d on %s%s: last in %.0f%% of %llu rounds, "
             "%.1f ms late per round; ",
             r, k->host, gpu, 100.0 * (double)k->total.last / (double)v->rounds,
             (unsigned long long)v->rounds, 1e3 * hk_report_lateness(v, r));
    hk_report_causes(v, r, line, sizeof line - 1);
    char host[8];
    if (hk_report_host_causes(v, r, host, sizeof host))
      add(line, sizeof line - 1,
          "; its host %s shows host-wide causes (its line below)", k->host);
    strcat(line, "\n");
    st = hk_buf_append(out, line, strlen(line));
    named++;
  }
  if (!named && st == HK_OK) {
    int latest = hk_report_latest(v);
    if (latest >= 0)
      snprintf(line, sizeof line,
               "hk monitor: no straggler: the latest rank (rank %d) was "
               "%.2f ms late per round\n",
               latest, 1e3 * hk_report_lateness(v, latest));
    else
      snprintf(line, sizeof line, "hk monitor: no straggler: no round ran\n");
    st = hk_buf_append(out, line, strlen(line));
  }
  if (st == HK_OK)
    st = host_lines(v, out);
  free(idx);
  return st;
}

/* The names of the reason bits set in bits ("-" if none). */
static void reason_list(uint64_t bits, char *out, size_t cap) {
  out[0] = '\0';
  for (int i = 0; i < hk_throttle_count; i++)
    if (bits & hk_throttle_names[i].bit)
      add(out, cap, "%s%s", out[0] ? "," : "", hk_throttle_names[i].name);
  if (!out[0])
    snprintf(out, cap, "-");
}

hk_status hk_report_table(const hk_monitor_view *v, hk_buf *out) {
  hk_status st = HK_OK;
  const double rounds = v->rounds ? (double)v->rounds : 1;
  const double n = v->window_rounds ? (double)v->window_rounds : 1;
  const int latest = hk_report_latest(v);
  for (int r = 0; r < v->size && st == HK_OK; r++) {
    const hk_monitor_rank *k = &v->ranks[r];
    const hk_wire_sample *s = &k->tel.last;
    char gpu[160];
    if (k->tel.gpu_samples) {
      char reasons[128];
      reason_list(s->throttle, reasons, sizeof reasons);
      snprintf(
          gpu, sizeof gpu, "gpu %u util %u%% temp %uC sm %u/%uMHz throttle %s",
          (unsigned)s->gpu_index, (unsigned)s->util_pct, (unsigned)s->temp_c,
          (unsigned)s->sm_mhz, (unsigned)s->sm_max_mhz, reasons);
    } else {
      snprintf(gpu, sizeof gpu, "gpu - util - temp - sm - throttle -");
    }
    /* the report's figures (every round), then the last window's */
    char line[640];
    snprintf(line, sizeof line,
             "rank %d host %s %s late %.1fms wait %.1fms last %.0f%% "
             "(last %llu rounds: late %.1fms)%s\n",
             r, k->host, gpu, 1e3 * hk_report_lateness(v, r),
             1e3 * k->total.wait_s / rounds,
             100.0 * (double)k->total.last / rounds,
             (unsigned long long)v->window_rounds, 1e3 * k->window.late_s / n,
             r == latest ? " latest" : "");
    st = hk_buf_append(out, line, strlen(line));
  }
  return st;
}
