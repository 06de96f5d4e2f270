/*
 * memory.c - the emu's device memory. Each allocation is a memfd mapped
 * twice: the "view" (the device pointer hk sees) PROT_NONE, followed by
 * one more PROT_NONE guard page that belongs to nothing, and the "shadow"
 * read-write, where the backend's stream threads do the work
 * (shadow + (p - view)). Host code that dereferences a device pointer gets
 * SIGSEGV, as it would on a GPU.
 *
 * The process-wide allocation table (a sorted array under one mutex, as a
 * driver's is process-wide) answers pointer_kind and checks every range an
 * operation names. Allocations are reference-counted by the operations
 * queued on them: mem_free takes the allocation out of the table at once
 * (later lookups see host memory, later enqueues fail), and unmaps it when
 * the last queued operation on it has run, as cudaFree waits for the
 * device.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "device/emu/emu.h"
#include "device/emu/internal.h"

struct emu_alloc {
  char *view;       /* the device pointer (PROT_NONE) */
  char *shadow;     /* the same pages, read-write */
  size_t bytes;     /* as requested */
  size_t map_bytes; /* mapped (whole pages, >= 1) */
  int device_index;
  int refs;  /* queued operations using it (under table.mu) */
  int freed; /* mem_free was called (under table.mu) */
};

/* The driver's allocation table: process-wide, see emu.h. */
static struct {
  pthread_mutex_t mu;
  emu_alloc **v; /* sorted by view */
  size_t n, cap;
} table = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static size_t page_bytes(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void unmap(emu_alloc *a) {
  munmap(a->view, a->map_bytes + page_bytes());
  munmap(a->shadow, a->map_bytes);
  free(a);
}

/* Index of the last allocation whose view is <= p, or -1. Under table.mu. */
static ptrdiff_t find_le(const void *p) {
  ptrdiff_t lo = 0, hi = (ptrdiff_t)table.n - 1, found = -1;
  uintptr_t x = (uintptr_t)p;
  while (lo <= hi) {
    ptrdiff_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)table.v[mid]->view <= x) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

/* The allocation p points into, or NULL. A zero-byte allocation holds its
 * base pointer. Under table.mu. */
static emu_alloc *find(const void *p) {
  if (!p)
    return NULL;
  ptrdiff_t i = find_le(p);
  if (i < 0)
    return NULL;
  emu_alloc *a = table.v[i];
  size_t len = a->bytes ? a->bytes : 1;
  return (uintptr_t)p - (uintptr_t)a->view < len ? a : NULL;
}

hk_mem_kind emu_pointer_kind(const void *p, int *device_index) {
  pthread_mutex_lock(&table.mu);
  emu_alloc *a = find(p);
  if (a && device_index)
    *device_index = a->device_index;
  pthread_mutex_unlock(&table.mu);
  return a ? HK_MEM_DEVICE : HK_MEM_HOST;
}

hk_status emu_range_resolve(const void *p, size_t bytes, int need_device,
                            const char *what, emu_range *out) {
  out->alloc = NULL;
  out->ptr = (void *)p;
  if (bytes && (uintptr_t)p > UINTPTR_MAX - bytes)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: %s: %p + %zu bytes wraps", what, p,
                   bytes);
  pthread_mutex_lock(&table.mu);
  emu_alloc *a = find(p);
  if (a) {
    size_t off = (size_t)((uintptr_t)p - (uintptr_t)a->view);
    if (bytes > a->bytes - off) {
      pthread_mutex_unlock(&table.mu);
      return hk_fail(HK_ERR_INVALID_ARG,
                     "emu: %s: %zu bytes at device pointer %p run past the "
                     "end of its allocation (%zu bytes at %p, %zu left)",
                     what, bytes, p, a->bytes, (void *)a->view, a->bytes - off);
    }
    a->refs++;
    out->alloc = a;
    out->ptr = a->shadow + off;
    pthread_mutex_unlock(&table.mu);
    return HK_OK;
  }
  /* host memory: refused if wanted on the device, if it lies in the
   * mapped padding or guard page after an allocation (the stream thread
   * would fault there), or if it runs into an allocation (the first one
   * after p must start at or past the range's end) */
  ptrdiff_t i = p ? find_le(p) + 1 : 0;
  emu_alloc *prev = i > 0 ? table.v[i - 1] : NULL;
  if (prev && bytes &&
      (uintptr_t)p - (uintptr_t)prev->view < prev->map_bytes + page_bytes()) {
    pthread_mutex_unlock(&table.mu);
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: %s: %p is past the end of device allocation %p (%zu "
                   "bytes), in its padding",
                   what, p, (void *)prev->view, prev->bytes);
  }
  emu_alloc *next = (size_t)i < table.n ? table.v[i] : NULL;
  int into = p && bytes && next &&
             (uintptr_t)next->view - (uintptr_t)p < (uintptr_t)bytes;
  pthread_mutex_unlock(&table.mu);
  if (need_device)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: %s: %p is not emu device memory (host memory or "
                   "freed)",
                   what, p);
  if (into)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: %s: host range of %zu bytes at %p runs into device "
                   "allocation %p",
                   what, bytes, p, (void *)next->view);
  if (!p && bytes)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: %s: NULL pointer for %zu bytes",
                   what, bytes);
  return HK_OK;
}

void emu_range_release(emu_range *r) {
  emu_alloc *a = r->alloc;
  if (!a)
    return;
  r->alloc = NULL;
  pthread_mutex_lock(&table.mu);
  int last = --a->refs == 0 && a->freed;
  pthread_mutex_unlock(&table.mu);
  if (last)
    unmap(a);
}

/* Maps the memfd: view (PROT_NONE) with a guard page after it, shadow
 * read-write. */
static hk_status map_pair(size_t map_bytes, emu_alloc *a, size_t bytes) {
  size_t page = page_bytes();
  int fd = memfd_create("hk-emu-device", MFD_CLOEXEC);
  if (fd < 0)
    return hk_fail_errno(errno == ENOMEM ? HK_ERR_NOMEM : HK_ERR_SYSTEM, errno,
                         "emu: mem_alloc of %zu bytes: memfd_create", bytes);
  if (ftruncate(fd, (off_t)map_bytes) != 0) {
    int e = errno;
    close(fd);
    return hk_fail_errno(HK_ERR_NOMEM, e, "emu: mem_alloc of %zu bytes", bytes);
  }
  /* reserve view + guard, then put the memfd over the view part */
  char *view = mmap(NULL, map_bytes + page, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  char *shadow = MAP_FAILED;
  int e = 0;
  if (view == MAP_FAILED) {
    e = errno;
  } else if (mmap(view, map_bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) ==
             MAP_FAILED) {
    e = errno;
    munmap(view, map_bytes + page);
    view = MAP_FAILED;
  } else {
    shadow = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shadow == MAP_FAILED) {
      e = errno;
      munmap(view, map_bytes + page);
      view = MAP_FAILED;
    }
  }
  close(fd);
  if (view == MAP_FAILED)
    return hk_fail_errno(HK_ERR_NOMEM, e, "emu: mem_alloc of %zu bytes: mmap",
                         bytes);
  a->view = view;
  a->shadow = shadow;
  a->map_bytes = map_bytes;
  return HK_OK;
}

hk_status emu_mem_alloc(hk_device *dev, size_t bytes, void **out) {
  *out = NULL;
  emu_device *d = emu_dev(dev, "mem_alloc");
  if (!d)
    return HK_ERR_INVALID_ARG;
  size_t page = page_bytes();
  if (bytes > SIZE_MAX / 2)
    return hk_fail(HK_ERR_NOMEM, "emu: mem_alloc of %zu bytes: too large",
                   bytes);
  size_t map_bytes = bytes ? (bytes + page - 1) / page * page : page;
  emu_alloc *a = calloc(1, sizeof *a);
  if (!a)
    return hk_fail(HK_ERR_NOMEM, "emu: mem_alloc: out of host memory");
  hk_status st = map_pair(map_bytes, a, bytes);
  if (st != HK_OK) {
    free(a);
    return st;
  }
  a->bytes = bytes;
  a->device_index = d->index;
  pthread_mutex_lock(&table.mu);
  if (table.n == table.cap) {
    size_t cap = table.cap ? table.cap * 2 : 64;
    emu_alloc **v = realloc(table.v, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&table.mu);
      unmap(a);
      return hk_fail(HK_ERR_NOMEM, "emu: mem_alloc: out of host memory");
    }
    table.v = v;
    table.cap = cap;
  }
  size_t i = (size_t)(find_le(a->view) + 1);
  memmove(table.v + i + 1, table.v + i, (table.n - i) * sizeof *table.v);
  table.v[i] = a;
  table.n++;
  pthread_mutex_unlock(&table.mu);
  *out = a->view;
  return HK_OK;
}

void emu_mem_free(hk_device *dev, void *p) {
  if (!p || !emu_dev(dev, "mem_free"))
    return;
  pthread_mutex_lock(&table.mu);
  ptrdiff_t i = find_le(p);
  emu_alloc *a = i >= 0 ? table.v[i] : NULL;
  if (!a || a->view != (char *)p) {
    emu_alloc *in = find(p);
    pthread_mutex_unlock(&table.mu);
    /* mem_free returns nothing (device.h): the error is this thread's
     * last error and is logged, as the driver would report it */
    if (in)
      hk_fail(HK_ERR_INVALID_ARG,
              "emu: mem_free(%p): inside the device allocation %p (%zu "
              "bytes), not its start",
              p, (void *)in->view, in->bytes);
    else
      hk_fail(HK_ERR_INVALID_ARG,
              "emu: mem_free(%p): not an emu device allocation (host memory, "
              "or freed already)",
              p);
    hk_log(HK_LOG_ERROR, "%s", hk_last_error());
    return;
  }
  memmove(table.v + i, table.v + i + 1,
          (table.n - (size_t)i - 1) * sizeof *table.v);
  table.n--;
  a->freed = 1;
  int now = a->refs == 0;
  if (table.n == 0) { /* give the array back when nothing is left */
    free(table.v);
    table.v = NULL;
    table.cap = 0;
  }
  pthread_mutex_unlock(&table.mu);
  if (now)
    unmap(a);
}

hk_mem_kind emu_ptr_kind(hk_device *dev, const void *p, int *device_index) {
  /* an entry (emu_dev's rule) that never fails: no message if dev is
   * not the emu's, the table answers alone */
  if (dev && dev->ops && strcmp(dev->ops->name, "emu") == 0)
    emu_current_device = ((emu_device *)dev)->index;
  return emu_pointer_kind(p, device_index);
}

hk_status emu_host_alloc(hk_device *dev, size_t bytes, void **out) {
  *out = NULL;
  if (!emu_dev(dev, "host_alloc"))
    return HK_ERR_INVALID_ARG;
  void *p = NULL;
  int e = posix_memalign(&p, 256, bytes ? bytes : 1);
  if (e)
    return hk_fail_errno(HK_ERR_NOMEM, e, "emu: host_alloc of %zu bytes",
                         bytes);
  *out = p;
  return HK_OK;
}

void emu_host_free(hk_device *dev, void *p) {
  (void)dev;
  free(p);
}

size_t hk_emu_live_allocations(void) {
  pthread_mutex_lock(&table.mu);
  size_t n = table.n;
  pthread_mutex_unlock(&table.mu);
  return n;
}
