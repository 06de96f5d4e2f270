/* foreign.c - asking the CUDA driver already in the process about a
 * pointer (see foreign.h). */
#include "device/foreign.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>

/* The driver API's values (cuda.h): CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
 * CU_MEMORYTYPE_DEVICE = 2. */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_MEMORYTYPE_DEVICE 2u

typedef int (*pointer_attr_fn)(void *, int, unsigned long long);

/* The number of objects the dynamic linker has loaded and unloaded
 * (dl_iterate_phdr's dlpi_adds / dlpi_subs, the same in every entry). */
static int count_loads(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  unsigned long long *n = arg;
  n[0] = info->dlpi_adds;
  n[1] = info->dlpi_subs;
  return 1; /* the first entry says it */
}

hk_foreign_driver hk_foreign_driver_find(void) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static unsigned long long seen[2] = {~0ull, ~0ull};
  static pointer_attr_fn attr;
  unsigned long long now[2] = {0, 0};
  dl_iterate_phdr(count_loads, now);
  pthread_mutex_lock(&mu);
  if (!attr && (now[0] != seen[0] || now[1] != seen[1])) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      attr = (pointer_attr_fn)dlsym(h, "cuPointerGetAttribute");
      if (!attr)
        dlclose(h);
    }
    dl_iterate_phdr(count_loads, seen); /* after our own dlopen/dlclose */
  }
  hk_foreign_driver d = {attr};
  pthread_mutex_unlock(&mu);
  return d;
}

int hk_foreign_is_device(hk_foreign_driver d, const void *p) {
  unsigned int type = 0;
  return d.pointer_attr && p &&
         d.pointer_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        (unsigned long long)(uintptr_t)p) == 0 &&
         type == CU_MEMORYTYPE_DEVICE;
}
