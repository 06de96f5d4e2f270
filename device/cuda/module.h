/*
 * module.h - what passes between libhk (device/device.c) and the module
 * libhk_cuda.so besides the ops table: the module's exported symbol names
 * and the host services libhk hands it right after dlopen.
 *
 * Why a bind step: the module links none of libhk (it is loaded into
 * programs that link libhk.so, libhk.a, or load libhk.so RTLD_LOCAL from
 * Python), so it cannot reach libhk's thread-local last-error buffer by
 * symbol lookup in every case. device.c gives it hk_set_last_error through
 * hk_cuda_module_bind before the first call into the ops table; each
 * failing op then sets the message in the calling thread, as
 * common/status.h's hk_fail does for the rest of hk.
 */
#ifndef HK_DEVICE_CUDA_MODULE_H
#define HK_DEVICE_CUDA_MODULE_H

#include <stddef.h>

/** The module's ops table (const hk_device_ops, device/device.h). */
#define HK_CUDA_OPS_SYMBOL "hk_cuda_device_ops"
/** void hk_cuda_module_bind(const hk_cuda_host *host). */
#define HK_CUDA_BIND_SYMBOL "hk_cuda_module_bind"

/** libhk's services for the module. The module copies what it needs;
 *  fields are only ever added at the end (size says how many there are). */
typedef struct hk_cuda_host {
  size_t size; /* sizeof(hk_cuda_host) as the caller compiled it */
  /* common/status.h's hk_set_last_error: copies msg into the calling
   * thread's last-error buffer */
  void (*set_last_error)(const char *msg);
} hk_cuda_host;

/** Type of hk_cuda_module_bind. Thread-safety: may be called again (every
 *  hk_device_open does) with the same services; it only stores them. */
typedef void (*hk_cuda_bind_fn)(const hk_cuda_host *host);

#endif
