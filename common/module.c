/*
 * module.c - the search of module.h: the folder of this code, its
 * ../<libdir>, CMake's folders, then the dynamic loader's path.
 */
#include "common/module.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tries one path; on failure keeps dlerror's words in why, but only if
 * the file exists (a missing file says less than a failing one). */
static void *try_path(const char *path, int flags, char *why, size_t cap,
                      int *found_any) {
  void *h = dlopen(path, flags);
  if (h)
    return h;
  const char *e = dlerror();
  if (access(path, F_OK) == 0 || !*found_any) {
    if (access(path, F_OK) == 0)
      *found_any = 1;
    snprintf(why, cap, "%s", e ? e : path);
  }
  return NULL;
}

static void copy_where(char *where, size_t cap, const char *path) {
  char real[PATH_MAX];
  if (where && cap)
    snprintf(where, cap, "%s", realpath(path, real) ? real : path);
}

void *hk_module_open(const char *file, const char *rel_libdir, const char *dirs,
                     int flags, char *why, size_t why_cap, char *where,
                     size_t where_cap) {
  char path[PATH_MAX + 64], self_dir[PATH_MAX];
  int found_any = 0;
  void *h = NULL;
  snprintf(why, why_cap, "%s not found", file);
  self_dir[0] = '\0';
  Dl_info info;
  if (dladdr((void *)hk_module_open, &info) && info.dli_fname &&
      strchr(info.dli_fname, '/')) {
    /* libhk.so's path as the loader opened it, or the program's argv[0]
     * (made absolute: it may be relative to the starting folder) */
    char real[PATH_MAX];
    const char *name = realpath(info.dli_fname, real) ? real : info.dli_fname;
    const char *slash = strrchr(name, '/');
    if (slash && (size_t)(slash - name) < sizeof self_dir)
      snprintf(self_dir, sizeof self_dir, "%.*s", (int)(slash - name), name);
  } else {
    /* the main program, started through PATH: /proc/self/exe is exact */
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) {
      path[n] = '\0';
      char *slash = strrchr(path, '/');
      if (slash && (size_t)(slash - path) < sizeof self_dir)
        snprintf(self_dir, sizeof self_dir, "%.*s", (int)(slash - path), path);
    }
  }
  if (self_dir[0]) {
    snprintf(path, sizeof path, "%s/%s", self_dir, file);
    h = try_path(path, flags, why, why_cap, &found_any);
    if (!h && rel_libdir && *rel_libdir) {
      snprintf(path, sizeof path, "%s/%s/%s", self_dir, rel_libdir, file);
      h = try_path(path, flags, why, why_cap, &found_any);
    }
  }
  while (!h && dirs && *dirs) {
    size_t n = strcspn(dirs, ":");
    if (n > 0) {
      snprintf(path, sizeof path, "%.*s/%s", (int)n, dirs, file);
      h = try_path(path, flags, why, why_cap, &found_any);
    }
    dirs += n + (dirs[n] == ':');
  }
  if (!h) {
    snprintf(path, sizeof path, "%s", file);
    void *g = dlopen(file, flags);
    if (g)
      h = g;
    else if (!found_any) {
      const char *e = dlerror();
      snprintf(why, why_cap, "%s", e ? e : "not found");
    } else {
      (void)dlerror();
    }
  }
  if (h) { /* the path the loader really opened */
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name &&
        lm->l_name[0])
      copy_where(where, where_cap, lm->l_name);
    else
      copy_where(where, where_cap, path);
  }
  return h;
}
