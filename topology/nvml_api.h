/*
 * nvml_api.h - the one NVML loader (issue 15: topology and telemetry share
 * it): dlopen of the library at run time, nvmlInit, and symbol look-up.
 * The CUDA toolkit here ships no NVML header; every caller declares the
 * few types it uses from NVIDIA's NVML API reference
 * (docs.nvidia.com/deploy/nvml-api).
 */
#ifndef HK_TOPOLOGY_NVML_API_H
#define HK_TOPOLOGY_NVML_API_H

#include "hk/hk.h"

#define HK_NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"
#define HK_NVML_SUCCESS 0

typedef struct nvml_device *hk_nvml_device; /* nvmlDevice_t */

/** An opened, initialised NVML. */
typedef struct hk_nvml {
  void *lib;                                         /* dlopen handle */
  const char *(*error_string)(int);                  /* nvmlErrorString */
  int (*get_count)(unsigned int *);                  /* nvmlDeviceGetCount_v2 */
  int (*get_handle)(unsigned int, hk_nvml_device *); /* ..ByIndex_v2 */
  int (*shutdown)(void);                             /* nvmlShutdown */
} hk_nvml;

/**
 * Loads `lib` (NULL or "": HK_NVML_DEFAULT_LIBRARY) with dlopen, resolves
 * nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2 and
 * nvmlDeviceGetHandleByIndex_v2, and calls nvmlInit_v2. *out is filled;
 * hk_nvml_close releases it.
 * Errors: HK_ERR_SYSTEM "cannot load NVML: <dlerror> (no NVIDIA driver on
 * this machine?)", "NVML (<lib>) lacks <symbol>: driver too old?", or
 * "nvmlInit: <NVML's reason>". Thread-safety: NVML's own (its calls are
 * thread-safe); one hk_nvml may be used by one thread at a time.
 */
hk_status hk_nvml_open(const char *lib, hk_nvml *out);

/** The entry point `name` of an opened NVML, or NULL if it lacks it. */
void *hk_nvml_sym(const hk_nvml *n, const char *name);

/** nvmlShutdown and dlclose. A zeroed (never opened) *n is fine. */
void hk_nvml_close(hk_nvml *n);

#endif
