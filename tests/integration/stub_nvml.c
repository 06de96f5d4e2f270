/*
 * stub_nvml.c - a stand-in NVML for the monitor tests (test_monitor): the
 * entry points observe/telemetry.c loads, with the signatures of NVIDIA's
 * NVML API reference, returning scripted figures. Four GPUs; the one
 * whose index is STUB_NVML_HOT_GPU (unset: none) runs hot: 87 C, SM clock
 * 1410 of 1980 MHz, thermal slowdown (nvmlClocksEventReasonSwThermalSlowdown
 * | HwThermalSlowdown); the others: 55 C, 1980 of 1980 MHz, no reason.
 * Every GPU: 95% busy, 40 GiB used, 300 of 700 W.
 * Selected with HK_NVML_LIBRARY=<path of this .so>.
 */
#include <stdint.h>
#include <stdlib.h>

typedef struct stub_device *device; /* index + 1 as a pointer */
typedef struct {
  unsigned int gpu, memory;
} utilization;
typedef struct {
  unsigned long long total, free, used;
} memory;

#define OK 0
#define INVALID_ARGUMENT 2
#define GPUS 4

static int hot(device d) {
  const char *s = getenv("STUB_NVML_HOT_GPU");
  return s && *s && atoi(s) == (int)((uintptr_t)d - 1);
}

int nvmlInit_v2(void) { return OK; }
int nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(int rc) {
  return rc == OK ? "success" : "stub error";
}
int nvmlDeviceGetCount_v2(unsigned int *n) {
  *n = GPUS;
  return OK;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, device *d) {
  if (i >= GPUS)
    return INVALID_ARGUMENT;
  *d = (device)(uintptr_t)(i + 1);
  return OK;
}
int nvmlDeviceGetUtilizationRates(device d, utilization *u) {
  (void)d;
  u->gpu = 95;
  u->memory = 40;
  return OK;
}
int nvmlDeviceGetMemoryInfo(device d, memory *m) {
  (void)d;
  m->total = 80ull << 30;
  m->used = 40ull << 30;
  m->free = m->total - m->used;
  return OK;
}
int nvmlDeviceGetTemperature(device d, int sensor, unsigned int *t) {
  (void)sensor;
  *t = hot(d) ? 87 : 55;
  return OK;
}
int nvmlDeviceGetClockInfo(device d, int type, unsigned int *mhz) {
  (void)type;
  *mhz = hot(d) ? 1410 : 1980;
  return OK;
}
int nvmlDeviceGetMaxClockInfo(device d, int type, unsigned int *mhz) {
  (void)d;
  (void)type;
  *mhz = 1980;
  return OK;
}
int nvmlDeviceGetPowerUsage(device d, unsigned int *mw) {
  (void)d;
  *mw = 300000;
  return OK;
}
int nvmlDeviceGetEnforcedPowerLimit(device d, unsigned int *mw) {
  (void)d;
  *mw = 700000;
  return OK;
}
int nvmlDeviceGetCurrentClocksEventReasons(device d,
                                           unsigned long long *reasons) {
  *reasons = hot(d) ? 0x20ull | 0x40ull : 0;
  return OK;
}
