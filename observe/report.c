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
  if (t->samples) {
    double load = t->load_per_cpu / (double)t->samples;
    if (load >= HK_REPORT_HIGH_LOAD)
      add(out, cap, "%shigh host load %.1f per CPU (%u CPUs)",
          named++ ? "; " : "", load, (unsigned)t->last.ncpu);
  }
  double dt = t->last.t_s - t->first.t_s;
  if (t->samples > 1 && dt > 0) {
    double starved = (t->last.run_delay_s - t->first.run_delay_s) / dt;
    double cpu = (t->last.cpu_s - t->first.cpu_s) / dt;
    if (starved >= HK_REPORT_STARVED_S)
      add(out, cap,
          "%sCPU starvation: its threads waited %.2f s per s for a CPU "
          "(they ran %.2f s per s)",
          named++ ? "; " : "", starved, cpu);
  }
  if (!named)
    add(out, cap, "no cause visible in telemetry");
  return named;
}

/* Ranks ordered by lateness, slowest first (a small insertion sort). */
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
    strcat(line, "\n");
    st = hk_buf_append(out, line, strlen(line));
    named++;
  }
  if (!named && st == HK_OK) {
    if (v->rounds)
      snprintf(line, sizeof line,
               "hk monitor: no straggler: the latest rank (rank %d) was "
               "%.2f ms late per round\n",
               idx[0], 1e3 * hk_report_lateness(v, idx[0]));
    else
      snprintf(line, sizeof line, "hk monitor: no straggler: no round ran\n");
    st = hk_buf_append(out, line, strlen(line));
  }
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
  const double n = v->window_rounds ? (double)v->window_rounds : 1;
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
    char line[512];
    snprintf(line, sizeof line,
             "rank %d host %s %s late %.1fms wait %.1fms last %.0f%%\n", r,
             k->host, gpu, 1e3 * k->window.late_s / n,
             1e3 * k->window.wait_s / n, 100.0 * (double)k->window.last / n);
    st = hk_buf_append(out, line, strlen(line));
  }
  return st;
}
