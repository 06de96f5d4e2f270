/*
 * foreign.h - device memory hk did not allocate and has no backend for:
 * a CUDA pointer can reach hk in a process that loaded the CUDA driver
 * itself (it allocated the memory) while hk opened no device backend
 * (HK_DEVICE=none, or no libhk_cuda.so). Asking the driver already in the
 * process, never loading it, turns what would be a crash into an error
 * saying what is missing (worker/devplane.c classifies a submit's
 * buffers with it).
 *
 * The driver's answer costs a function call; finding the driver costs a
 * dlopen(RTLD_NOLOAD), which searches the library path (tens of
 * microseconds), so it is looked for again only when the set of loaded
 * objects has changed since the last look: a driver the trainer loads
 * after hk_init (PyTorch's first CUDA call) is still found.
 * Thread-safety: any thread.
 */
#ifndef HK_DEVICE_FOREIGN_H
#define HK_DEVICE_FOREIGN_H

/** The CUDA driver already in the process, or none (a plain value). */
typedef struct hk_foreign_driver {
  int (*pointer_attr)(void *, int, unsigned long long); /* or NULL */
} hk_foreign_driver;

/** The driver of the process, if one is loaded (found once, kept: it is
 *  never unloaded under a live CUDA context). Never loads it. */
hk_foreign_driver hk_foreign_driver_find(void);

/** 1 if the driver says p is device memory; 0 for host memory, for a
 *  pointer it does not know, and without a driver. */
int hk_foreign_is_device(hk_foreign_driver d, const void *p);

#endif
