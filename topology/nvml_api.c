/* nvml_api.c - the one NVML loader (nvml_api.h). */
#include "topology/nvml_api.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "common/status.h"

hk_status hk_nvml_open(const char *lib, hk_nvml *out) {
  memset(out, 0, sizeof *out);
  if (!lib || !*lib)
    lib = HK_NVML_DEFAULT_LIBRARY;
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return hk_fail(HK_ERR_SYSTEM,
                   "cannot load NVML: %s (no NVIDIA driver on this machine?)",
                   why ? why : lib);
  }
  int (*init)(void) = NULL;
  static const struct {
    const char *name;
    size_t off; /* in hk_nvml; SIZE_MAX: nvmlInit_v2 */
  } sym[] = {
      {"nvmlInit_v2", (size_t)-1},
      {"nvmlShutdown", offsetof(hk_nvml, shutdown)},
      {"nvmlErrorString", offsetof(hk_nvml, error_string)},
      {"nvmlDeviceGetCount_v2", offsetof(hk_nvml, get_count)},
      {"nvmlDeviceGetHandleByIndex_v2", offsetof(hk_nvml, get_handle)},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    void *f = dlsym(h, sym[i].name);
    if (!f) {
      dlclose(h);
      memset(out, 0, sizeof *out);
      return hk_fail(HK_ERR_SYSTEM, "NVML (%s) lacks %s: driver too old?", lib,
                     sym[i].name);
    }
    if (sym[i].off == (size_t)-1)
      memcpy(&init, &f, sizeof f);
    else
      memcpy((char *)out + sym[i].off, &f, sizeof f);
  }
  int rc = init();
  if (rc != HK_NVML_SUCCESS) {
    hk_status st =
        hk_fail(HK_ERR_SYSTEM, "nvmlInit: %s", out->error_string(rc));
    dlclose(h);
    memset(out, 0, sizeof *out);
    return st;
  }
  out->lib = h;
  return HK_OK;
}

void *hk_nvml_sym(const hk_nvml *n, const char *name) {
  return n->lib ? dlsym(n->lib, name) : NULL;
}

void hk_nvml_close(hk_nvml *n) {
  if (!n->lib)
    return;
  n->shutdown();
  dlclose(n->lib);
  memset(n, 0, sizeof *n);
}
