/* telemetry.c - this rank's GPU and host samples (telemetry.h). */
#include "observe/telemetry.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/status.h"
#include "topology/nvml_api.h"

const hk_throttle_name hk_throttle_names[] = {
    {HK_THROTTLE_GPU_IDLE, "gpu_idle"},
    {HK_THROTTLE_APP_CLOCKS, "applications_clocks_setting"},
    {HK_THROTTLE_SW_POWER_CAP, "sw_power_cap"},
    {HK_THROTTLE_HW_SLOWDOWN, "hw_slowdown"},
    {HK_THROTTLE_SYNC_BOOST, "sync_boost"},
    {HK_THROTTLE_SW_THERMAL, "sw_thermal_slowdown"},
    {HK_THROTTLE_HW_THERMAL, "hw_thermal_slowdown"},
    {HK_THROTTLE_HW_POWER_BRAKE, "hw_power_brake_slowdown"},
    {HK_THROTTLE_DISPLAY_CLOCKS, "display_clock_setting"},
};
const int hk_throttle_count =
    (int)(sizeof hk_throttle_names / sizeof hk_throttle_names[0]);

/* NVML's nvmlUtilization_t and nvmlMemory_t (v1). */
typedef struct nvml_util {
  unsigned int gpu, memory;
} nvml_util;
typedef struct nvml_memory {
  unsigned long long total, free, used;
} nvml_memory;
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1

struct hk_telemetry {
  hk_nvml nvml; /* lib NULL: no GPU telemetry */
  hk_nvml_device dev;
  int gpu;
  uint32_t seq;
  int (*util)(hk_nvml_device, nvml_util *);
  int (*memory)(hk_nvml_device, nvml_memory *);
  int (*temperature)(hk_nvml_device, int, unsigned int *);
  int (*clock)(hk_nvml_device, int, unsigned int *);
  int (*max_clock)(hk_nvml_device, int, unsigned int *);
  int (*power)(hk_nvml_device, unsigned int *);
  int (*power_limit)(hk_nvml_device, unsigned int *);
  int (*reasons)(hk_nvml_device, unsigned long long *);
};

/* Resolves the telemetry entry points; 0 if one is missing (named in
 * why). */
static int resolve(hk_telemetry *t, char *why, size_t cap) {
  static const struct {
    const char *name, *old_name;
    size_t off;
  } sym[] = {
      {"nvmlDeviceGetUtilizationRates", NULL, offsetof(hk_telemetry, util)},
      {"nvmlDeviceGetMemoryInfo", NULL, offsetof(hk_telemetry, memory)},
      {"nvmlDeviceGetTemperature", NULL, offsetof(hk_telemetry, temperature)},
      {"nvmlDeviceGetClockInfo", NULL, offsetof(hk_telemetry, clock)},
      {"nvmlDeviceGetMaxClockInfo", NULL, offsetof(hk_telemetry, max_clock)},
      {"nvmlDeviceGetPowerUsage", NULL, offsetof(hk_telemetry, power)},
      {"nvmlDeviceGetEnforcedPowerLimit", NULL,
       offsetof(hk_telemetry, power_limit)},
      {"nvmlDeviceGetCurrentClocksEventReasons",
       "nvmlDeviceGetCurrentClocksThrottleReasons",
       offsetof(hk_telemetry, reasons)},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    void *f = hk_nvml_sym(&t->nvml, sym[i].name);
    if (!f && sym[i].old_name)
      f = hk_nvml_sym(&t->nvml, sym[i].old_name);
    if (!f) {
      snprintf(why, cap, "NVML lacks %s", sym[i].name);
      return 0;
    }
    memcpy((char *)t + sym[i].off, &f, sizeof f);
  }
  return 1;
}

hk_status hk_telemetry_open(const char *nvml_library, int gpu,
                            hk_telemetry **out, char *why, size_t cap) {
  char dummy[8];
  if (!why) {
    why = dummy;
    cap = sizeof dummy;
  }
  why[0] = '\0';
  hk_telemetry *t = calloc(1, sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the telemetry");
  t->gpu = gpu;
  char saved[HK_ERROR_MSG_CAP]; /* no GPU is not this call's error */
  snprintf(saved, sizeof saved, "%s", hk_last_error());
  if (hk_nvml_open(nvml_library, &t->nvml) != HK_OK) {
    snprintf(why, cap, "%s", hk_last_error());
  } else {
    unsigned int n = 0;
    int ok = resolve(t, why, cap);
    if (ok && (t->nvml.get_count(&n) != HK_NVML_SUCCESS || gpu < 0 ||
               (unsigned)gpu >= n ||
               t->nvml.get_handle((unsigned)gpu, &t->dev) != HK_NVML_SUCCESS)) {
      snprintf(why, cap, "NVML has no GPU %d (%u found)", gpu, n);
      ok = 0;
    }
    if (!ok)
      hk_nvml_close(&t->nvml);
  }
  hk_set_last_error(saved);
  *out = t;
  return HK_OK;
}

/* The sum over this process's threads of their run delay, s. */
static double run_delay_s(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return 0;
  double sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    unsigned long long on_cpu, waiting;
    if (fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2)
      sum += (double)waiting * 1e-9;
    fclose(f);
  }
  closedir(d);
  return sum;
}

static void sample_gpu(hk_telemetry *t, hk_wire_sample *s) {
  nvml_util u = {0, 0};
  nvml_memory m = {0, 0, 0};
  unsigned int temp = 0, sm = 0, sm_max = 0, mw = 0, limit = 0;
  unsigned long long reasons = 0;
  /* a figure NVML cannot give (not supported on this GPU) stays 0 */
  if (t->util(t->dev, &u) != HK_NVML_SUCCESS)
    u.gpu = 0;
  if (t->memory(t->dev, &m) != HK_NVML_SUCCESS)
    m.used = 0;
  if (t->temperature(t->dev, NVML_TEMPERATURE_GPU, &temp) != HK_NVML_SUCCESS)
    temp = 0;
  if (t->clock(t->dev, NVML_CLOCK_SM, &sm) != HK_NVML_SUCCESS)
    sm = 0;
  if (t->max_clock(t->dev, NVML_CLOCK_SM, &sm_max) != HK_NVML_SUCCESS)
    sm_max = 0;
  if (t->power(t->dev, &mw) != HK_NVML_SUCCESS)
    mw = 0;
  if (t->power_limit(t->dev, &limit) != HK_NVML_SUCCESS)
    limit = 0;
  if (t->reasons(t->dev, &reasons) != HK_NVML_SUCCESS)
    reasons = 0;
  s->gpu_ok = 1;
  s->gpu_index = (uint16_t)t->gpu;
  s->util_pct = (uint8_t)(u.gpu > 100 ? 100 : u.gpu);
  s->mem_used = m.used;
  s->temp_c = (uint16_t)(temp > 65535 ? 65535 : temp);
  s->sm_mhz = sm;
  s->sm_max_mhz = sm_max;
  s->power_mw = mw;
  s->power_limit_mw = limit;
  s->throttle = reasons;
}

void hk_telemetry_sample(hk_telemetry *t, hk_wire_sample *s) {
  memset(s, 0, sizeof *s);
  s->seq = ++t->seq;
  if (t->nvml.lib)
    sample_gpu(t, s);
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    s->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  s->run_delay_s = run_delay_s();
  double load[1];
  if (getloadavg(load, 1) == 1 && load[0] >= 0)
    s->load1 = load[0];
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  s->ncpu = (uint16_t)(ncpu > 0 && ncpu < 65536 ? ncpu : 0);
  s->t_s = hk_now();
}

void hk_telemetry_close(hk_telemetry *t) {
  if (!t)
    return;
  hk_nvml_close(&t->nvml);
  free(t);
}
