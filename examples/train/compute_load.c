/*
 * compute_load.c - opening a row of the compute table by its --device
 * name (compute.h): the CPU row is linked in; the CUDA row is the module
 * libhk_train_cuda.so, found beside the running executable and opened
 * with dlopen, so that `train` links no CUDA library.
 */
#include "compute.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef const compute_ops *(*entry_fn)(void);

/* The CUDA row's table, or NULL with why[cap] saying what failed. Once
 * loaded, the module stays (no dlclose: the CUDA runtime it carries
 * registers exit handlers). */
static const compute_ops *load_cuda(char *why, size_t cap) {
  static const compute_ops *loaded;
  if (loaded)
    return loaded;
  char self[PATH_MAX], path[PATH_MAX + sizeof COMPUTE_CUDA_MODULE];
  const char *env = getenv(COMPUTE_CUDA_MODULE_ENV);
  void *h = NULL;
  char first[512] = "", opened[PATH_MAX + 64] = COMPUTE_CUDA_MODULE;
  if (env && *env) { /* this file and no other */
    if (!(h = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
      snprintf(why, cap, "%s=%s: %s", COMPUTE_CUDA_MODULE_ENV, env, dlerror());
      return NULL;
    }
    snprintf(opened, sizeof opened, "%s=%s", COMPUTE_CUDA_MODULE_ENV, env);
  }
  ssize_t n = h ? 0 : readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      slash[1] = '\0';
      snprintf(path, sizeof path, "%s%s", self, COMPUTE_CUDA_MODULE);
      if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) &&
          access(path, F_OK) == 0) /* there but unusable: say so */
        snprintf(first, sizeof first, "%s", dlerror());
      else if (h)
        snprintf(opened, sizeof opened, "%s", path);
    }
  }
  if (!h && !first[0] &&
      !(h = dlopen(COMPUTE_CUDA_MODULE, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(why, cap,
             "%s (this build has no CUDA row: it is built where CMake "
             "finds CUDA, HK_CUDA=AUTO|ON)",
             dlerror());
    return NULL;
  }
  if (!h) {
    snprintf(why, cap, "%s", first);
    return NULL;
  }
  entry_fn entry = (entry_fn)(void (*)(void))dlsym(h, COMPUTE_CUDA_SYMBOL);
  if (!entry) {
    snprintf(why, cap, "%s: no symbol %s", opened, COMPUTE_CUDA_SYMBOL);
    dlclose(h);
    return NULL;
  }
  return loaded = entry();
}

/* Opens row ops into c; 0, or -1 with c->err (the row closed again). */
static int open_row(compute *c, const compute_ops *ops, int device_index) {
  memset(c, 0, sizeof *c);
  c->ops = ops;
  c->device_index = device_index;
  if (ops->open(c) == 0)
    return 0;
  char keep[COMPUTE_ERR_CAP];
  snprintf(keep, sizeof keep, "%s", c->err);
  ops->close(c);
  memset(c, 0, sizeof *c);
  snprintf(c->err, sizeof c->err, "%s", keep);
  return -1;
}

int compute_open(compute *c, const char *device, int device_index, char *err,
                 size_t cap) {
  memset(c, 0, sizeof *c);
  if (cap)
    err[0] = '\0';
  int cuda = !strcmp(device, "cuda"), autosel = !strcmp(device, "auto");
  if (!cuda && !autosel) {
    if (strcmp(device, "cpu") != 0) {
      snprintf(err, cap, "--device: '%s' is not cpu, cuda or auto", device);
      return -1;
    }
    return open_row(c, &compute_cpu_ops, 0);
  }
  char why[COMPUTE_ERR_CAP + 64];
  const compute_ops *ops = load_cuda(why, sizeof why);
  if (ops && open_row(c, ops, device_index) == 0)
    return 0;
  if (ops)
    snprintf(why, sizeof why, "%s", c->err);
  snprintf(err, cap, "--device %s: %s", cuda ? "cuda" : "auto (cuda)", why);
  if (cuda)
    return -1;
  return open_row(c, &compute_cpu_ops, 0); /* auto: the CPU row */
}

void compute_close(compute *c) {
  if (c->ops)
    c->ops->close(c);
  memset(c, 0, sizeof *c);
}
