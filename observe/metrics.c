/* metrics.c - the Prometheus text file (metrics.h). */
#include "observe/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/outfile.h"
#include "common/status.h"
#include "observe/report.h"
#include "observe/telemetry.h"

/* How a metric gets its value from one rank (NULL: not per rank). */
typedef double (*rank_value)(const hk_monitor_view *v, int r);

typedef struct metric {
  const char *name, *type, *help;
  rank_value value;
  int gpu; /* 1: only for ranks with GPU telemetry */
} metric;

static double window_n(const hk_monitor_view *v) {
  return v->window_rounds ? (double)v->window_rounds : 1;
}
static double v_late(const hk_monitor_view *v, int r) {
  return v->ranks[r].window.late_s / window_n(v);
}
static double v_late_total(const hk_monitor_view *v, int r) {
  return v->ranks[r].total.late_s;
}
static double v_wait(const hk_monitor_view *v, int r) {
  return v->ranks[r].window.wait_s / window_n(v);
}
static double v_wait_total(const hk_monitor_view *v, int r) {
  return v->ranks[r].total.wait_s;
}
static double v_last_total(const hk_monitor_view *v, int r) {
  return (double)v->ranks[r].total.last;
}
static double v_last_ratio(const hk_monitor_view *v, int r) {
  return (double)v->ranks[r].window.last / window_n(v);
}
static double v_straggler(const hk_monitor_view *v, int r) {
  return hk_report_is_straggler(v, r);
}
static double v_samples(const hk_monitor_view *v, int r) {
  return (double)v->ranks[r].tel.samples;
}
static double v_cpu(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.cpu_s;
}
static double v_delay(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.run_delay_s;
}
static double v_load(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.load1;
}
static double v_cpus(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.ncpu;
}
static double v_util(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.util_pct / 100.0;
}
static double v_mem(const hk_monitor_view *v, int r) {
  return (double)v->ranks[r].tel.last.mem_used;
}
static double v_temp(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.temp_c;
}
static double v_sm(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.sm_mhz * 1e6;
}
static double v_sm_max(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.sm_max_mhz * 1e6;
}
static double v_power(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.power_mw / 1000.0;
}
static double v_limit(const hk_monitor_view *v, int r) {
  return v->ranks[r].tel.last.power_limit_mw / 1000.0;
}

static const metric metrics[] = {
    {"hk_rank_lateness_seconds", "gauge",
     "Mean time per round by which this rank's request came after the "
     "first rank's, over the last window of HK_MONITOR_WINDOW rounds",
     v_late, 0},
    {"hk_rank_lateness_seconds_total", "counter",
     "Sum over every round of this rank's lateness", v_late_total, 0},
    {"hk_rank_wait_seconds", "gauge",
     "Mean time per round this rank's tensors waited for the last rank, "
     "over the last window",
     v_wait, 0},
    {"hk_rank_wait_seconds_total", "counter",
     "Sum over every round of this rank's wait for the last rank", v_wait_total,
     0},
    {"hk_rank_last_total", "counter", "Rounds in which this rank was last",
     v_last_total, 0},
    {"hk_rank_last_ratio", "gauge",
     "Share of the last window's rounds in which this rank was last",
     v_last_ratio, 0},
    {"hk_rank_straggler", "gauge",
     "1 if the report names this rank as a straggler (docs/monitoring.md)",
     v_straggler, 0},
    {"hk_telemetry_samples_total", "counter",
     "Telemetry samples rank 0 received from this rank", v_samples, 0},
    {"hk_process_cpu_seconds_total", "counter",
     "CPU time (user + system) of this rank's process", v_cpu, 0},
    {"hk_process_run_delay_seconds_total", "counter",
     "Time this rank's threads were runnable but waiting for a CPU "
     "(/proc schedstat; 0 where the kernel does not keep it)",
     v_delay, 0},
    {"hk_host_load1", "gauge", "1-minute load average of this rank's host",
     v_load, 0},
    {"hk_host_cpus", "gauge", "Online CPUs of this rank's host", v_cpus, 0},
    {"hk_gpu_utilization_ratio", "gauge", "GPU utilisation (NVML), 0 to 1",
     v_util, 1},
    {"hk_gpu_memory_used_bytes", "gauge", "GPU memory used (NVML)", v_mem, 1},
    {"hk_gpu_temperature_celsius", "gauge", "GPU temperature (NVML)", v_temp,
     1},
    {"hk_gpu_sm_clock_hertz", "gauge", "GPU SM clock now (NVML)", v_sm, 1},
    {"hk_gpu_sm_clock_max_hertz", "gauge", "GPU SM clock maximum (NVML)",
     v_sm_max, 1},
    {"hk_gpu_power_watts", "gauge", "GPU power draw (NVML)", v_power, 1},
    {"hk_gpu_power_limit_watts", "gauge", "GPU enforced power limit (NVML)",
     v_limit, 1},
};

/* Writes s as a label value: backslash, quote and newline escaped. */
static void escaped(char *out, size_t cap, const char *s) {
  size_t k = 0;
  for (; *s && k + 3 < cap; s++) {
    if (*s == '\\' || *s == '"') {
      out[k++] = '\\';
      out[k++] = *s;
    } else if (*s == '\n') {
      out[k++] = '\\';
      out[k++] = 'n';
    } else {
      out[k++] = *s;
    }
  }
  out[k] = '\0';
}

/* rank="3",host="node1",local_rank="3",gpu="3" */
static void labels(const hk_monitor_view *v, int r, char *out, size_t cap) {
  const hk_monitor_rank *k = &v->ranks[r];
  char host[2 * HK_MONITOR_HOST_CAP + 1], gpu[16] = "";
  escaped(host, sizeof host, k->host);
  if (k->tel.gpu_samples)
    snprintf(gpu, sizeof gpu, "%u", (unsigned)k->tel.last.gpu_index);
  snprintf(out, cap, "rank=\"%d\",host=\"%s\",local_rank=\"%d\",gpu=\"%s\"", r,
           host, k->local_rank, gpu);
}

static hk_status line(hk_buf *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static hk_status line(hk_buf *out, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof text)
    return hk_fail(HK_ERR_SYSTEM, "a metrics line is over %zu bytes",
                   sizeof text);
  return hk_buf_append(out, text, (size_t)n);
}

/* The throttle reasons: one gauge (set in the newest sample) and one
 * counter (samples with it set) per rank and reason. */
static hk_status throttle_metrics(const hk_monitor_view *v, hk_buf *out) {
  hk_status st =
      line(out, "# HELP hk_gpu_throttle_reason 1 if NVML reported this "
                "clock throttle reason in the newest sample\n"
                "# TYPE hk_gpu_throttle_reason gauge\n");
  for (int pass = 0; pass < 2 && st == HK_OK; pass++) {
    if (pass == 1)
      st = line(out, "# HELP hk_gpu_throttle_samples_total Telemetry samples "
                     "in which NVML reported this clock throttle reason\n"
                     "# TYPE hk_gpu_throttle_samples_total counter\n");
    for (int r = 0; r < v->size && st == HK_OK; r++) {
      const hk_rank_telemetry *t = &v->ranks[r].tel;
      if (!t->gpu_samples)
        continue;
      char lab[512];
      labels(v, r, lab, sizeof lab);
      for (int i = 0; i < hk_throttle_count && st == HK_OK; i++)
        st = pass == 0
                 ? line(out, "hk_gpu_throttle_reason{%s,reason=\"%s\"} %d\n",
                        lab, hk_throttle_names[i].name,
                        (t->last.throttle & hk_throttle_names[i].bit) != 0)
                 : line(out,
                        "hk_gpu_throttle_samples_total{%s,reason=\"%s\"} "
                        "%llu\n",
                        lab, hk_throttle_names[i].name,
                        (unsigned long long)t->reason_samples[i]);
    }
  }
  return st;
}

hk_status hk_metrics_format(const hk_monitor_view *v, hk_buf *out) {
  hk_status st = line(out,
                      "# HELP hk_rounds_total Negotiation rounds that ran "
                      "work, counted by rank 0\n"
                      "# TYPE hk_rounds_total counter\n"
                      "hk_rounds_total %llu\n",
                      (unsigned long long)v->rounds);
  int any_gpu = 0;
  for (int r = 0; r < v->size; r++)
    any_gpu |= v->ranks[r].tel.gpu_samples > 0;
  for (size_t i = 0; i < sizeof metrics / sizeof metrics[0] && st == HK_OK;
       i++) {
    const metric *m = &metrics[i];
    if (m->gpu && !any_gpu)
      continue; /* no GPU lines without GPU telemetry */
    st = line(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
              m->type);
    for (int r = 0; r < v->size && st == HK_OK; r++) {
      if (m->gpu && !v->ranks[r].tel.gpu_samples)
        continue;
      char lab[512];
      labels(v, r, lab, sizeof lab);
      st = line(out, "%s{%s} %.17g\n", m->name, lab, m->value(v, r));
    }
  }
  if (st == HK_OK && any_gpu)
    st = throttle_metrics(v, out);
  return st;
}

hk_status hk_metrics_write(const char *path, unsigned mode, const char *text,
                           size_t len) {
  return hk_outfile_replace(path, mode, text, len, HK_OUT_ATOMIC,
                            "HK_METRICS_FILE");
}
