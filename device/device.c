/*
 * device.c - opening a device backend by name (device/device.h): emu is
 * linked into libhk; cuda is the module libhk_cuda.so, opened with dlopen
 * so that libhk and hkrun run on machines without CUDA, a driver or NCCL.
 */
#include "device/device.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "device/cuda/module.h"

#ifndef HK_CUDA_MODULE_DIRS /* set by CMake: build tree, install libdir */
#define HK_CUDA_MODULE_DIRS ""
#endif

#define HK_CUDA_MODULE "libhk_cuda.so"

/* Tries the folder of the object holding this code (libhk.so, or a
 * program linked with libhk.a), then CMake's folders, then the loader's
 * own search path. *why receives the last dlerror. */
static void *load_module(char *why, size_t cap) {
  char path[PATH_MAX];
  Dl_info info;
  void *h = NULL;
  snprintf(why, cap, "not found");
  if (dladdr((void *)hk_device_open, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash) {
      snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname),
               info.dli_fname, HK_CUDA_MODULE);
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!h)
        snprintf(why, cap, "%s", dlerror());
    }
  }
  const char *dirs = HK_CUDA_MODULE_DIRS; /* ':'-separated */
  while (!h && *dirs) {
    size_t n = strcspn(dirs, ":");
    snprintf(path, sizeof path, "%.*s/%s", (int)n, dirs, HK_CUDA_MODULE);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      if (e)
        snprintf(why, cap, "%s", e);
      else /* (a bounded path: gcc's -Wformat-truncation) */
        snprintf(why, cap, "%.256s: not loadable", path);
    }
    dirs += n + (dirs[n] == ':');
  }
  if (!h) {
    h = dlopen(HK_CUDA_MODULE, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      snprintf(why, cap, "%s", e ? e : "not found");
    }
  }
  return h;
}

static hk_status open_cuda(const hk_device_options *opts, int required,
                           hk_device **out) {
  char why[512];
  void *h = load_module(why, sizeof why);
  if (!h) {
    if (!required)
      return HK_OK;
    return hk_fail(HK_ERR_CONFIG,
                   "HK_DEVICE=cuda: cannot load %s (%s); hk was built "
                   "without CUDA, or the CUDA runtime, driver or NCCL is "
                   "missing",
                   HK_CUDA_MODULE, why);
  }
  const hk_device_ops *ops = dlsym(h, HK_CUDA_OPS_SYMBOL);
  if (!ops) {
    dlclose(h);
    return hk_fail(HK_ERR_CONFIG, "%s has no symbol %s", HK_CUDA_MODULE,
                   HK_CUDA_OPS_SYMBOL);
  }
  /* the module sets its messages through libhk's error buffer */
  hk_cuda_bind_fn bind = (hk_cuda_bind_fn)dlsym(h, HK_CUDA_BIND_SYMBOL);
  if (bind) {
    hk_cuda_host host = {sizeof host, hk_set_last_error};
    bind(&host);
  }
  hk_status st = ops->open(opts, out);
  /* the module stays loaded for the process's life: its ops table is
   * referenced by every device it opens */
  if (st != HK_OK && !required) {
    *out = NULL;
    return HK_OK; /* auto: no usable GPU here */
  }
  return st;
}

hk_status hk_device_open(const char *kind, const hk_device_options *opts,
                         hk_device **out) {
  *out = NULL;
  if (!strcmp(kind, "emu"))
    return hk_emu_device_ops.open(opts, out);
  if (!strcmp(kind, "cuda"))
    return open_cuda(opts, 1, out);
  if (!strcmp(kind, "auto"))
    return open_cuda(opts, 0, out);
  return hk_fail(HK_ERR_CONFIG, "unknown device backend '%s'", kind);
}

void hk_device_close(hk_device *dev) {
  if (dev)
    dev->ops->close(dev);
}
