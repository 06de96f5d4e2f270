/*
 * telemetry.h - one rank's own GPU and host figures (issue 15, item 2),
 * sampled by the monitor's thread (observe/monitor.h) every
 * HK_TELEMETRY_INTERVAL_S.
 *
 * GPU: through NVML (topology/nvml_api.h: the one loader), library
 * HK_NVML_LIBRARY or libnvidia-ml.so.1, for the GPU this rank uses
 * (HK_GPU, else its local rank): nvmlDeviceGetUtilizationRates (gpu %),
 * nvmlDeviceGetMemoryInfo (used bytes), nvmlDeviceGetTemperature (GPU
 * sensor), nvmlDeviceGetClockInfo / nvmlDeviceGetMaxClockInfo (SM clock),
 * nvmlDeviceGetPowerUsage / nvmlDeviceGetEnforcedPowerLimit (mW), and
 * nvmlDeviceGetCurrentClocksEventReasons (or, on drivers before R535, its
 * old name ...ClocksThrottleReasons). Without NVML, or without that GPU,
 * the GPU fields stay empty (gpu_ok 0) and nothing is reported as an
 * error: a CPU-only machine is normal.
 * Host: getrusage(RUSAGE_SELF) CPU time, the sum of every thread's run
 * delay from /proc/self/task/<tid>/schedstat (field 2, ns: time runnable
 * but not running), getloadavg(3) and the online CPU count.
 */
#ifndef HK_OBSERVE_TELEMETRY_H
#define HK_OBSERVE_TELEMETRY_H

#include "coordinator/wire.h"
#include "hk/hk.h"

/* NVML's clock event (throttle) reason bits (nvmlClocksEventReason*,
 * NVML API reference). */
#define HK_THROTTLE_GPU_IDLE 0x1ull
#define HK_THROTTLE_APP_CLOCKS 0x2ull
#define HK_THROTTLE_SW_POWER_CAP 0x4ull
#define HK_THROTTLE_HW_SLOWDOWN 0x8ull
#define HK_THROTTLE_SYNC_BOOST 0x10ull
#define HK_THROTTLE_SW_THERMAL 0x20ull
#define HK_THROTTLE_HW_THERMAL 0x40ull
#define HK_THROTTLE_HW_POWER_BRAKE 0x80ull
#define HK_THROTTLE_DISPLAY_CLOCKS 0x100ull

/** The reasons by name: the label values of hk_gpu_throttle_reason. */
typedef struct hk_throttle_name {
  unsigned long long bit;
  const char *name; /* "sw_thermal_slowdown", ... */
} hk_throttle_name;
extern const hk_throttle_name hk_throttle_names[];
extern const int hk_throttle_count;

typedef struct hk_telemetry hk_telemetry;

/**
 * Opens the sampler of this process for GPU `gpu` (NVML index). NVML
 * missing or failing is not an error: *out then samples the host only,
 * and *why (if not NULL, cap bytes) says why there is no GPU telemetry.
 * Errors: HK_ERR_NOMEM. Thread-safety: a telemetry object is used by one
 * thread at a time.
 */
hk_status hk_telemetry_open(const char *nvml_library, int gpu,
                            hk_telemetry **out, char *why, size_t cap);

/** Takes one sample into *s (seq numbered from 1, t_s = hk_now()). */
void hk_telemetry_sample(hk_telemetry *t, hk_wire_sample *s);

/** Closes NVML and frees. NULL is fine. */
void hk_telemetry_close(hk_telemetry *t);

#endif
