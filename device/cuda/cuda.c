/*
 * cuda.c - the "cuda" device backend (device/device.h): memory, streams,
 * events and copies over the CUDA runtime, hk's kernels
 * (device/cuda/kernels.cu), and the in-server communicator over NCCL. It
 * is the module libhk_cuda.so, which libhk opens with dlopen
 * (device/device.c), so libhk itself never links CUDA or NCCL.
 *
 * Mapping (device.h's conventions hold; only what CUDA adds is said here):
 * - hk_dev_stream is a cudaStream_t (created cudaStreamNonBlocking, so
 *   hk's streams never serialise with the legacy default stream); a NULL
 *   stream argument means the legacy default stream (cudaStreamLegacy),
 *   whatever the caller compiled its default-stream mode to.
 * - hk_dev_event is a cudaEvent_t, made with cudaEventDisableTiming by
 *   event_create and with timing by event_create_timed.
 * - hk_dev_comm wraps a non-blocking ncclComm_t (config.blocking = 0):
 *   comm_init returns while NCCL connects (comm_async_error,
 *   ncclCommGetAsyncError: *pending = 1). NCCL forbids any call on a
 *   communicator still ncclInProgress ("Attempt to use communicator before
 *   the previous operation returned ncclSuccess"), and an operation that
 *   returns ncclInProgress is not on its stream yet; so each operation
 *   first waits for the communicator to settle (its init included), and
 *   when NCCL answers ncclInProgress waits again until the operation is
 *   queued, at most HK_TIMEOUT_S each (hk_device_options.timeout_s; then
 *   HK_ERR_TIMEOUT), or until hkrun aborts the job (options.stop). Callers need
 *   not poll between operations; comm_async_error still reports failures.
 * - The device: hk_device_pick's among cudaGetDeviceCount's at open.
 *   Opening makes no context (cudaGetDeviceCount and
 *   cudaGetDeviceProperties need none; to check on a GPU that they make
 *   none): a host-only job on a GPU machine under HK_DEVICE=auto pays no
 *   context (~0.3-2 s, ~500 MB). The first entry that needs the device
 *   makes its primary context (cudaSetDevice) and checks that the module
 *   has code for it (first_use). pointer_kind asks the driver
 *   (cuPointerGetAttribute, which answers from the pointer alone under
 *   unified addressing) and makes none either. Every entry makes it the
 *   calling thread's current
 *   device again if it is not (hk's background thread and trainer threads
 *   both call in), and leaves it current; the caller's is put back by hk
 *   (worker/devplane.c) through current and set_current, which save and
 *   restore the thread's CUDA context itself (cuCtxGetCurrent /
 *   cuCtxSetCurrent of the driver cudart loaded), so a thread that had
 *   none gets none back: cudaSetDevice would create a context on a GPU
 *   the process never meant to use (it initialises the primary context
 *   since CUDA 12).
 *
 * Errors: HK_ERR_SYSTEM with "cuda: <call> ...: <cudaGetErrorString>" (or
 * NCCL's ncclGetErrorString and ncclGetLastError); HK_ERR_NOMEM for
 * cudaErrorMemoryAllocation; HK_ERR_INVALID_ARG for arguments the contract
 * does not allow; HK_ERR_TIMEOUT for a communicator that stays
 * ncclInProgress past HK_TIMEOUT_S; HK_ERR_PEER_LOST when hkrun aborts it;
 * HK_ERR_CONFIG at open for what is missing (no driver or GPU, the wrong NCCL,
 * no kernels for this GPU). The message goes to the calling thread's last-error
 * buffer through libhk's hk_set_last_error (device/cuda/module.h).
 *
 * Thread-safety: device.h's (any thread; one stream fed by one thread at
 * a time). The module's only globals are set once by hk_cuda_module_bind.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h> /* the driver's types and values only: nothing is linked */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/cuda/kernels.h"
#include "device/cuda/module.h"
#include "device/device.h"

/* The oldest NCCL the module accepts, at build time (CMake checks nccl.h
 * too) and at run time (ncclGetVersion). The non-blocking communicator
 * (ncclConfig_t, ncclCommInitRankConfig with blocking = 0, ncclInProgress)
 * and ncclCommFinalize came with NCCL 2.14; 2.19 added user buffer
 * registration (ncclMemAlloc, ncclCommRegister), which the persistent
 * device fusion buffer is to use (issue 10), so 2.19 is hk's floor. */
#define HKC_NCCL_MIN_MAJOR 2
#define HKC_NCCL_MIN_MINOR 19

#if NCCL_VERSION_CODE < NCCL_VERSION(HKC_NCCL_MIN_MAJOR, HKC_NCCL_MIN_MINOR, 0)
#error "hk's cuda backend needs nccl.h 2.19 or newer"
#endif

#ifndef HK_CUDA_ARCHS /* set by CMake: CMAKE_CUDA_ARCHITECTURES */
#define HK_CUDA_ARCHS "?"
#endif

_Static_assert(sizeof(ncclUniqueId) == HK_DEV_UID_BYTES,
               "HK_DEV_UID_BYTES must be NCCL_UNIQUE_ID_BYTES");
_Static_assert(sizeof(cudaStream_t) == sizeof(hk_dev_stream),
               "hk_dev_stream holds a cudaStream_t");
_Static_assert(sizeof(cudaEvent_t) == sizeof(hk_dev_event),
               "hk_dev_event holds a cudaEvent_t");

/* ---- errors ---- */

static void (*host_set_last_error)(const char *msg);

/** Binds libhk's services (device/cuda/module.h). */
__attribute__((visibility("default"))) void
hk_cuda_module_bind(const hk_cuda_host *host) {
  if (host && host->size >= offsetof(hk_cuda_host, set_last_error) +
                                sizeof host->set_last_error)
    __atomic_store_n(&host_set_last_error, host->set_last_error,
                     __ATOMIC_RELEASE);
}

/* Formats "cuda: ..." into the calling thread's last-error buffer and
 * returns st. Without a bind (a libhk older than the module) the message
 * goes to libhk's hk_set_last_error if the loader can see it, else to
 * stderr, so it is never lost silently. */
static hk_status fail(hk_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static hk_status fail(hk_status st, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  int n = snprintf(msg, sizeof msg, "cuda: ");
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  void (*set)(const char *) =
      __atomic_load_n(&host_set_last_error, __ATOMIC_ACQUIRE);
  if (!set)
    set = (void (*)(const char *))dlsym(RTLD_DEFAULT, "hk_set_last_error");
  if (set)
    set(msg);
  else
    fprintf(stderr, "%s\n", msg);
  return st;
}

/* A CUDA runtime failure of `what`: HK_ERR_NOMEM for an allocation. */
static hk_status fail_cuda(cudaError_t e, const char *what) {
  return fail(e == cudaErrorMemoryAllocation ? HK_ERR_NOMEM : HK_ERR_SYSTEM,
              "%s: %s", what, cudaGetErrorString(e));
}

/* ---- the device ---- */

typedef struct cuda_dev {
  hk_device base; /* ops first (device.h); base.index == index */
  int index;      /* the CUDA device (in this process's visible set) */
  int (*ctx_get)(void **ctx); /* the driver's cuCtxGetCurrent, or NULL */
  int (*ctx_set)(void *ctx);  /* the driver's cuCtxSetCurrent, or NULL */
  double settle_s;            /* comm_settle's bound: opts->timeout_s */
  int (*stop)(void *arg);     /* comm_settle's abort check: opts->stop */
  void *stop_arg;
  /* the driver's cuPointerGetAttribute, or NULL (pointer_kind) */
  CUresult (*ptr_attr)(void *data, CUpointer_attribute a, CUdeviceptr p);
  int sms, major, minor;  /* multiprocessors, compute capability */
  pthread_mutex_t use_mu; /* first_use, once: */
  atomic_int used;        /* 1 once the context exists and passed */
  int target_blocks;      /* multiprocessors x blocks of the copy kernel each
                             (first_use) */
  char desc[300];         /* cudaDeviceProp.name is 256 bytes */
} cuda_dev;

struct hk_dev_comm_s {
  ncclComm_t nc;
  cuda_dev *dev;
  int nranks, rank;
};

static cuda_dev *as_dev(hk_device *d) { return (cuda_dev *)d; }

static cudaStream_t as_stream(hk_dev_stream s) {
  return s ? (cudaStream_t)s : cudaStreamLegacy;
}

/* The device's first use, with its context current (made by enter's
 * cudaSetDevice, or the trainer's): the module must have code this GPU
 * runs (the occupancy query loads it), and the copy kernels' grid is
 * sized from it. Once per device handle; a failure is returned again by
 * the next entry. Errors: HK_ERR_CONFIG naming the GPU and the
 * architectures built; HK_ERR_SYSTEM. */
static hk_status first_use(cuda_dev *d) {
  pthread_mutex_lock(&d->use_mu);
  hk_status st = HK_OK;
  if (!atomic_load_explicit(&d->used, memory_order_relaxed)) {
    int per_sm = 0;
    cudaError_t e = hkc_occupancy(&per_sm);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidSource ||
        e == cudaErrorUnsupportedPtxVersion) {
      (void)cudaGetLastError();
      st = fail(HK_ERR_CONFIG,
                "libhk_cuda.so has no code %s can run (%s): built for CUDA "
                "architectures %s; rebuild hk with "
                "-DCMAKE_CUDA_ARCHITECTURES=%d%d",
                d->desc, cudaGetErrorString(e), HK_CUDA_ARCHS, d->major,
                d->minor);
    } else if (e != cudaSuccess) {
      st = fail_cuda(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    } else {
      d->target_blocks = d->sms * per_sm;
      atomic_store_explicit(&d->used, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&d->use_mu);
  return st;
}

/* Makes d's device current in the calling thread (its primary context,
 * made the first time), and checks it once (first_use). */
static hk_status enter(cuda_dev *d) {
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess || cur != d->index) {
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess) {
      char what[48];
      snprintf(what, sizeof what, "cudaSetDevice(%d)", d->index);
      return fail_cuda(e, what);
    }
  }
  if (atomic_load_explicit(&d->used, memory_order_acquire))
    return HK_OK;
  return first_use(d);
}

/* enter() for the functions that report nothing (pointer_kind, frees,
 * destroys, comm_async_error's own device switch): the last-error message
 * of the calling thread stays as it was. */
static void enter_quiet(const cuda_dev *d) {
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess || cur != d->index)
    if (cudaSetDevice(d->index) != cudaSuccess)
      (void)cudaGetLastError();
}

/* hk_dtype_size's table (the module does not link libhk), indexed by
 * hk_dtype. */
static size_t dtype_bytes(int dtype) {
  static const size_t bytes[] = {2, 2, 4, 8, 1, 1, 4, 8, 2, 1};
  return dtype >= 0 && dtype < (int)(sizeof bytes / sizeof *bytes)
             ? bytes[dtype]
             : 0;
}

/* Decodes ncclGetVersion's code (major*10000 + minor*100 + patch since
 * 2.9, major*1000 + minor*100 + patch before). */
static void nccl_decode(int code, int *major, int *minor, int *patch) {
  int base = code >= 10000 ? 10000 : 1000;
  *major = code / base;
  *minor = (code % base) / 100;
  *patch = code % 100;
}

/* The NCCL loaded at run time has nccl.h's major version and is at least
 * HKC_NCCL_MIN_MAJOR.HKC_NCCL_MIN_MINOR. */
static hk_status nccl_check_version(void) {
  int code = 0, major, minor, patch;
  ncclResult_t r = ncclGetVersion(&code);
  if (r != ncclSuccess)
    return fail(HK_ERR_CONFIG, "ncclGetVersion: %s", ncclGetErrorString(r));
  nccl_decode(code, &major, &minor, &patch);
  if (major != NCCL_MAJOR ||
      code < NCCL_VERSION(HKC_NCCL_MIN_MAJOR, HKC_NCCL_MIN_MINOR, 0))
    return fail(HK_ERR_CONFIG,
                "NCCL %d.%d.%d found at run time; libhk_cuda.so was built "
                "with nccl.h %d.%d.%d and needs NCCL %d.x, %d.%d or newer",
                major, minor, patch, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
                NCCL_MAJOR, HKC_NCCL_MIN_MAJOR, HKC_NCCL_MIN_MINOR);
  return HK_OK;
}

/* The table device/device.c takes with dlsym (module.h's
 * HK_CUDA_OPS_SYMBOL); defined at the end. */
__attribute__((
    visibility("default"))) extern const hk_device_ops hk_cuda_device_ops;

static int cuda_current(hk_device *dev);
static void cuda_set_current(hk_device *dev, int index);

/* The longest one call waits for the communicator to leave NCCL's
 * ncclInProgress state (s) when hk_device_options gives no timeout_s:
 * HK_TIMEOUT_S's default (common/config.c). */
#define HKC_SETTLE_S 60

/* device.h: opens device opts->device_index (0 without opts). */
static hk_status cuda_open(const hk_device_options *opts, hk_device **out) {
  *out = NULL;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    /* cudart loads the driver's libcuda.so.1 itself: say whether it could */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (drv)
      dlclose(drv);
    (void)cudaGetLastError();
    return fail(HK_ERR_CONFIG, "no CUDA device (cudaGetDeviceCount: %s%s)",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                drv ? "" : "; the NVIDIA driver's libcuda.so.1 is not loaded");
  }
  int index = hk_device_pick(opts, count);
  if (index < 0) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return fail(HK_ERR_CONFIG,
                "device %d requested (%s), but %d visible "
                "(CUDA_VISIBLE_DEVICES=%s)",
                opts ? opts->device_index : 0,
                opts && opts->by_local_rank ? "the local rank" : "HK_GPU",
                count, vis ? vis : "unset");
  }
  hk_status st = nccl_check_version();
  if (st != HK_OK)
    return st;
  cuda_dev *d = calloc(1, sizeof *d);
  if (!d)
    return fail(HK_ERR_NOMEM, "open: out of memory");
  d->base.ops = &hk_cuda_device_ops;
  d->base.index = d->index = index;
  d->settle_s = opts && opts->timeout_s > 0 ? opts->timeout_s : HKC_SETTLE_S;
  d->stop = opts ? opts->stop : NULL;
  d->stop_arg = opts ? opts->stop_arg : NULL;
  /* cudart loaded the driver: its context calls, for current/set_current,
   * and its pointer query (the reference taken here stays for the
   * process, as cudart's) */
  void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (drv) {
    *(void **)&d->ctx_get = dlsym(drv, "cuCtxGetCurrent");
    *(void **)&d->ctx_set = dlsym(drv, "cuCtxSetCurrent");
    *(void **)&d->ptr_attr = dlsym(drv, "cuPointerGetAttribute");
  }
  /* no context yet: the properties need none (first_use checks the
   * kernels once the device is used) */
  struct cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, index)) != cudaSuccess) {
    free(d);
    return fail_cuda(e, "cudaGetDeviceProperties");
  }
  d->sms = prop.multiProcessorCount;
  d->major = prop.major;
  d->minor = prop.minor;
  pthread_mutex_init(&d->use_mu, NULL);
  snprintf(d->desc, sizeof d->desc, "%s (sm_%d%d)", prop.name, prop.major,
           prop.minor);
  *out = &d->base;
  return HK_OK;
}

/* device.h: frees the handle; the device and its context stay (other code
 * in the process, e.g. the trainer's framework, uses them too). */
static void cuda_close(hk_device *dev) {
  if (!dev)
    return;
  pthread_mutex_destroy(&as_dev(dev)->use_mu);
  free(dev);
}

/* "NVIDIA H200 (sm_90)": owned by dev, valid until close. */
static const char *cuda_describe(hk_device *dev) { return as_dev(dev)->desc; }

/* device.h: the calling thread's device; -1 while it has no context
 * current (cudaGetDevice would say 0 then). */
static int cuda_current(hk_device *dev) {
  cuda_dev *d = as_dev(dev);
  void *ctx = NULL;
  if (d->ctx_get && d->ctx_get(&ctx) == 0 && !ctx)
    return -1;
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return cur;
}

/* device.h: puts back what cuda_current returned; -1 makes no context
 * current again (the thread's next CUDA call picks as it would have). */
static void cuda_set_current(hk_device *dev, int index) {
  cuda_dev *d = as_dev(dev);
  if (index < 0) {
    if (d->ctx_set)
      (void)d->ctx_set(NULL);
    return;
  }
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == index)
    return;
  if (cudaSetDevice(index) != cudaSuccess)
    (void)cudaGetLastError();
}

/* ---- memory ---- */

/* Device and managed memory are "device"; pinned, registered and
 * ordinary host memory, NULL, and anything CUDA does not know are "host".
 * Asked of the driver (cuPointerGetAttribute: from the pointer alone,
 * making no context, so a host tensor costs none); where cudart's driver
 * lacks it, of cudaPointerGetAttributes (which enters the device, making
 * its context; the lookup's error is cleared so it does not surface in a
 * later call). */
static hk_mem_kind cuda_pointer_kind(hk_device *dev, const void *p,
                                     int *device_index) {
  if (!p)
    return HK_MEM_HOST;
  cuda_dev *d = as_dev(dev);
  if (d->ptr_attr) {
    const CUdeviceptr at = (CUdeviceptr)(uintptr_t)p;
    unsigned int type = 0, managed = 0;
    int ordinal = -1;
    if (d->ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at) !=
        CUDA_SUCCESS)
      return HK_MEM_HOST;
    if (d->ptr_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, at) !=
        CUDA_SUCCESS)
      managed = 0;
    if (type != CU_MEMORYTYPE_DEVICE && !managed)
      return HK_MEM_HOST;
    if (device_index &&
        d->ptr_attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, at) ==
            CUDA_SUCCESS)
      *device_index = ordinal;
    return HK_MEM_DEVICE;
  }
  enter_quiet(d);
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return HK_MEM_HOST;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
    if (device_index)
      *device_index = a.device;
    return HK_MEM_DEVICE;
  }
  return HK_MEM_HOST;
}

/* cudaMalloc (aligned to 256 bytes by CUDA); 0 bytes allocates 256 so the
 * pointer is unique and non-NULL. */
static hk_status cuda_mem_alloc(hk_device *dev, size_t bytes, void **out) {
  *out = NULL;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
  if (e != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc of %zu bytes", bytes);
    *out = NULL;
    return fail_cuda(e, what);
  }
  return HK_OK;
}

/* cudaFree (synchronises the device, as CUDA does). Errors are dropped:
 * there is nothing a caller freeing memory could do with them. */
static void cuda_mem_free(hk_device *dev, void *p) {
  if (!p)
    return;
  enter_quiet(as_dev(dev));
  if (cudaFree(p) != cudaSuccess)
    (void)cudaGetLastError();
}

/* cudaHostAlloc(cudaHostAllocPortable): pinned for every context. */
static hk_status cuda_host_alloc(hk_device *dev, size_t bytes, void **out) {
  *out = NULL;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "cudaHostAlloc of %zu bytes", bytes);
    *out = NULL;
    return fail_cuda(e, what);
  }
  return HK_OK;
}

/* cudaFreeHost; errors dropped as mem_free's are. */
static void cuda_host_free(hk_device *dev, void *p) {
  if (!p)
    return;
  enter_quiet(as_dev(dev));
  if (cudaFreeHost(p) != cudaSuccess)
    (void)cudaGetLastError();
}

/* ---- streams and events ---- */

/* A cudaStreamNonBlocking stream; the caller owns it (stream_destroy). */
static hk_status cuda_stream_create(hk_device *dev, hk_dev_stream *out) {
  *out = NULL;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return fail_cuda(e, "cudaStreamCreateWithFlags");
  *out = (hk_dev_stream)s;
  return HK_OK;
}

/* cudaStreamDestroy: returns at once; CUDA releases the stream once its
 * queued work has finished. */
static void cuda_stream_destroy(hk_device *dev, hk_dev_stream s) {
  if (!s)
    return;
  enter_quiet(as_dev(dev));
  if (cudaStreamDestroy((cudaStream_t)s) != cudaSuccess)
    (void)cudaGetLastError();
}

/* A cudaEventDefault event (timing on); the caller owns it
 * (event_destroy, which CUDA defers until its captured work is done). */
static hk_status event_new(hk_device *dev, unsigned flags, hk_dev_event *out) {
  *out = NULL;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaEvent_t e;
  cudaError_t r = cudaEventCreateWithFlags(&e, flags);
  if (r != cudaSuccess)
    return fail_cuda(r, "cudaEventCreateWithFlags");
  *out = (hk_dev_event)e;
  return HK_OK;
}

/* device.h: an event without timing (cheaper to record and wait on). */
static hk_status cuda_event_create(hk_device *dev, hk_dev_event *out) {
  return event_new(dev, cudaEventDisableTiming, out);
}

/* device.h: an event event_elapsed can time. */
static hk_status cuda_event_create_timed(hk_device *dev, hk_dev_event *out) {
  return event_new(dev, cudaEventDefault, out);
}

/* cudaEventDestroy (NULL is fine). */
static void cuda_event_destroy(hk_device *dev, hk_dev_event e) {
  if (!e)
    return;
  enter_quiet(as_dev(dev));
  if (cudaEventDestroy((cudaEvent_t)e) != cudaSuccess)
    (void)cudaGetLastError();
}

/* cudaEventRecord on s (NULL: the legacy default stream). */
static hk_status cuda_event_record(hk_device *dev, hk_dev_event e,
                                   hk_dev_stream s) {
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t r = cudaEventRecord((cudaEvent_t)e, as_stream(s));
  return r == cudaSuccess ? HK_OK : fail_cuda(r, "cudaEventRecord");
}

/* cudaStreamWaitEvent: no host wait; a never-recorded event: no wait. */
static hk_status cuda_stream_wait_event(hk_device *dev, hk_dev_stream s,
                                        hk_dev_event e) {
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t r = cudaStreamWaitEvent(as_stream(s), (cudaEvent_t)e, 0);
  return r == cudaSuccess ? HK_OK : fail_cuda(r, "cudaStreamWaitEvent");
}

/* cudaEventQuery: cudaErrorNotReady is "not yet", anything else but
 * success is the failure of the captured work (or of the context). */
static hk_status cuda_event_query(hk_device *dev, hk_dev_event e, int *done) {
  *done = 0;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  if (r == cudaSuccess) {
    *done = 1;
    return HK_OK;
  }
  if (r == cudaErrorNotReady)
    return HK_OK;
  return fail_cuda(r, "cudaEventQuery");
}

/* cudaEventElapsedTime: both events recorded and completed, else
 * HK_ERR_INVALID_ARG. */
static hk_status cuda_event_elapsed(hk_device *dev, hk_dev_event start,
                                    hk_dev_event end, float *ms) {
  *ms = 0;
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t r =
      cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end);
  if (r == cudaErrorNotReady || r == cudaErrorInvalidResourceHandle) {
    (void)cudaGetLastError();
    return fail(HK_ERR_INVALID_ARG,
                "cudaEventElapsedTime: %s (both events must have been "
                "recorded and have completed)",
                cudaGetErrorString(r));
  }
  return r == cudaSuccess ? HK_OK : fail_cuda(r, "cudaEventElapsedTime");
}

/* ---- copies and kernels ---- */

/* cudaMemcpyAsync(cudaMemcpyDefault): CUDA finds the direction from the
 * pointers (unified addressing). Pageable host memory makes the copy
 * synchronous with respect to the host, as CUDA documents. */
static hk_status cuda_memcpy_async(hk_device *dev, void *dst, const void *src,
                                   size_t bytes, hk_dev_stream s) {
  if (bytes == 0)
    return HK_OK;
  if (!dst || !src)
    return fail(HK_ERR_INVALID_ARG, "memcpy_async of %zu bytes: NULL pointer",
                bytes);
  hk_status st = enter(as_dev(dev));
  if (st != HK_OK)
    return st;
  cudaError_t r =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(s));
  if (r != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "cudaMemcpyAsync of %zu bytes", bytes);
    return fail_cuda(r, what);
  }
  return HK_OK;
}

/* device.h's batch_copy. The kernels read and write through unified
 * addresses: device, managed or pinned (mapped) host memory; each pointer
 * must be aligned to its element size (a misaligned access would fail the
 * whole context, so it is refused here). */
static hk_status cuda_batch_copy(hk_device *dev, const hk_dev_copy *items,
                                 size_t n, hk_dtype src_dtype,
                                 hk_dtype dst_dtype, hk_dev_stream s) {
  size_t ssz = dtype_bytes((int)src_dtype), dsz = dtype_bytes((int)dst_dtype);
  if (!ssz || !dsz)
    return fail(HK_ERR_INVALID_ARG, "batch_copy: unknown dtype %d or %d",
                (int)src_dtype, (int)dst_dtype);
  int pair_ok = src_dtype == dst_dtype ||
                (src_dtype == HK_FLOAT32 &&
                 (dst_dtype == HK_FLOAT16 || dst_dtype == HK_BFLOAT16)) ||
                (dst_dtype == HK_FLOAT32 &&
                 (src_dtype == HK_FLOAT16 || src_dtype == HK_BFLOAT16));
  if (!pair_ok)
    return fail(HK_ERR_INVALID_ARG,
                "batch_copy: no conversion from dtype %d to dtype %d (equal "
                "dtypes, or float32 to/from float16/bfloat16)",
                (int)src_dtype, (int)dst_dtype);
  for (size_t i = 0; i < n; i++) {
    const hk_dev_copy *c = &items[i];
    if (c->count == 0)
      continue;
    if (!c->src || !c->dst)
      return fail(HK_ERR_INVALID_ARG, "batch_copy: item %zu: NULL pointer", i);
    if ((uintptr_t)c->src % ssz || (uintptr_t)c->dst % dsz)
      return fail(HK_ERR_INVALID_ARG,
                  "batch_copy: item %zu: src %p or dst %p not aligned to its "
                  "element size (%zu, %zu bytes)",
                  i, c->src, c->dst, ssz, dsz);
    if (c->count > SIZE_MAX / 8)
      return fail(HK_ERR_INVALID_ARG, "batch_copy: item %zu: count %zu", i,
                  c->count);
  }
  if (n == 0)
    return HK_OK;
  cuda_dev *d = as_dev(dev);
  hk_status st = enter(d);
  if (st != HK_OK)
    return st;
  cudaError_t r = hkc_batch_copy(items, n, (int)src_dtype, (int)dst_dtype,
                                 d->target_blocks, as_stream(s));
  if (r != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "batch_copy of %zu items", n);
    return fail_cuda(r, what);
  }
  return HK_OK;
}

/* hkc_fill on s: count elements of dtype at p (aligned to its size) get
 * value's first hk_dtype_size bytes. */
static hk_status cuda_fill(hk_device *dev, void *p, size_t count,
                           hk_dtype dtype, const void *value, hk_dev_stream s) {
  size_t esz = dtype_bytes((int)dtype);
  if (!esz)
    return fail(HK_ERR_INVALID_ARG, "fill: unknown dtype %d", (int)dtype);
  if (count == 0)
    return HK_OK;
  if (!p || !value)
    return fail(HK_ERR_INVALID_ARG, "fill: NULL pointer");
  if ((uintptr_t)p % esz)
    return fail(HK_ERR_INVALID_ARG,
                "fill: %p not aligned to its element size (%zu bytes)", p, esz);
  if (count > SIZE_MAX / 8)
    return fail(HK_ERR_INVALID_ARG, "fill: count %zu", count);
  cuda_dev *d = as_dev(dev);
  hk_status st = enter(d);
  if (st != HK_OK)
    return st;
  unsigned char v[8];
  memcpy(v, value, 8);
  cudaError_t r =
      hkc_fill(p, count, (int)esz, v, d->target_blocks, as_stream(s));
  return r == cudaSuccess ? HK_OK : fail_cuda(r, "fill");
}

/* ---- the communicator (NCCL) ---- */

/* "<what>: <ncclGetErrorString>: <ncclGetLastError>" as st. */
static hk_status fail_nccl_as(hk_status st, ncclResult_t r, ncclComm_t nc,
                              const char *what) {
  const char *last = ncclGetLastError(nc);
  return fail(st, "%s: %s%s%s", what, ncclGetErrorString(r),
              last && *last ? ": " : "", last ? last : "");
}

/* A failed NCCL call: HK_ERR_INVALID_ARG for NCCL's usage errors, else
 * HK_ERR_SYSTEM. */
static hk_status fail_nccl(ncclResult_t r, ncclComm_t nc, const char *what) {
  return fail_nccl_as(r == ncclInvalidArgument || r == ncclInvalidUsage
                          ? HK_ERR_INVALID_ARG
                          : HK_ERR_SYSTEM,
                      r, nc, what);
}

/* NCCL's type for a dtype it reduces; 0 for int16 (NCCL has no 16-bit
 * integer: comm_int16 reduces it in int32) and bool (hk reduces none). */
static int nccl_dtype(hk_dtype t, ncclDataType_t *out) {
  switch (t) {
  case HK_FLOAT16:
    *out = ncclFloat16;
    return 1;
  case HK_BFLOAT16:
    *out = ncclBfloat16;
    return 1;
  case HK_FLOAT32:
    *out = ncclFloat32;
    return 1;
  case HK_FLOAT64:
    *out = ncclFloat64;
    return 1;
  case HK_INT8:
    *out = ncclInt8;
    return 1;
  case HK_UINT8:
    *out = ncclUint8;
    return 1;
  case HK_INT32:
    *out = ncclInt32;
    return 1;
  case HK_INT64:
    *out = ncclInt64;
    return 1;
  case HK_INT16:
  case HK_BOOL:
    return 0;
  }
  return 0;
}

/* For a move (allgather, broadcast), which does no arithmetic: NCCL's
 * type, or for a dtype it lacks (int16, bool) its bytes as ncclUint8,
 * *count multiplied to match. 0 for an unknown dtype. */
static int nccl_move_type(hk_dtype t, size_t *count, ncclDataType_t *out) {
  if (nccl_dtype(t, out))
    return 1;
  size_t esz = dtype_bytes((int)t);
  if (!esz)
    return 0;
  *count *= esz;
  *out = ncclUint8;
  return 1;
}

static hk_status nccl_op(hk_op op, ncclRedOp_t *out) {
  *out = ncclSum; /* set on every return, the errors' too */
  switch (op) {
  case HK_SUM:
    *out = ncclSum;
    return HK_OK;
  case HK_MIN:
    *out = ncclMin;
    return HK_OK;
  case HK_MAX:
    *out = ncclMax;
    return HK_OK;
  case HK_PRODUCT:
    *out = ncclProd;
    return HK_OK;
  case HK_AVERAGE:
    return fail(HK_ERR_INVALID_ARG,
                "HK_AVERAGE is not passed to the communicator (hk sums, "
                "then divides in the unpack)");
  }
  return fail(HK_ERR_INVALID_ARG, "unknown reduction op %d", (int)op);
}

/* comm_settle's polling, in one place. NCCL 2.28's non-blocking
 * communicator answers ncclInProgress for every collective (its group end
 * hands the enqueue to a thread), and that thread usually finishes within
 * microseconds: a first sleep of 20 us would add ~50-200 us to every
 * call. So the loop first polls back to back for HKC_SETTLE_SPIN_NS,
 * giving the core away between polls (sched_yield: NCCL's thread may be
 * waiting for it), then sleeps from HKC_SETTLE_NAP0_NS, doubling up to
 * HKC_SETTLE_NAP_MAX_NS (a long init: connections being made). These
 * values come from reading NCCL's group.cc, not from a measurement: no
 * GPU has run this loop yet; compare them on one (the settle's share of
 * a small allreduce) before tuning. */
#define HKC_SETTLE_SPIN_NS 50000L      /* 50 us of polling without a sleep */
#define HKC_SETTLE_NAP0_NS 20000L      /* then the first sleep: 20 us */
#define HKC_SETTLE_NAP_MAX_NS 1000000L /* doubling up to 1 ms */

/* Waits while the communicator is ncclInProgress (its init, or NCCL still
 * enqueueing the previous operation: connections are set up on first use),
 * polling ncclCommGetAsyncError: back to back (yielding) for
 * HKC_SETTLE_SPIN_NS, then with a sleep from HKC_SETTLE_NAP0_NS up to
 * HKC_SETTLE_NAP_MAX_NS, at most the device's settle_s (HK_TIMEOUT_S),
 * and asking its stop check (hkrun's abort) at every poll: the worker's
 * watchdog's checks. HK_OK once it is ncclSuccess; HK_ERR_SYSTEM with
 * NCCL's reason once it failed; HK_ERR_TIMEOUT past the bound;
 * HK_ERR_PEER_LOST when stopped. The caller (worker/devplane.c) aborts the
 * communicator on any error. Calling thread: the one feeding the
 * communicator's stream. */
static hk_status comm_settle(hk_dev_comm c, const char *what) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long ns = HKC_SETTLE_NAP0_NS;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->nc, &state);
    if (r != ncclSuccess)
      return fail_nccl(r, c->nc, "ncclCommGetAsyncError");
    if (state == ncclSuccess)
      return HK_OK;
    if (state != ncclInProgress) {
      char w[96];
      snprintf(w, sizeof w, "%s: the NCCL communicator (rank %d of %d) failed",
               what, c->rank, c->nranks);
      return fail_nccl_as(HK_ERR_SYSTEM, state, c->nc, w);
    }
    const cuda_dev *d = c->dev;
    if (d->stop && d->stop(d->stop_arg))
      return fail(HK_ERR_PEER_LOST,
                  "%s: hkrun stopped the job while the NCCL communicator "
                  "(rank %d of %d) was busy",
                  what, c->rank, c->nranks);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double waited = (double)(now.tv_sec - t0.tv_sec) +
                    (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (waited >= d->settle_s)
      return fail(HK_ERR_TIMEOUT,
                  "%s: the NCCL communicator (rank %d of %d) was still busy "
                  "(its init, or enqueueing the previous operation) after "
                  "HK_TIMEOUT_S = %g s",
                  what, c->rank, c->nranks, d->settle_s);
    if (waited * 1e9 < (double)HKC_SETTLE_SPIN_NS) {
      sched_yield();
      continue;
    }
    struct timespec nap = {0, ns};
    nanosleep(&nap, NULL);
    ns = ns < HKC_SETTLE_NAP_MAX_NS / 2 ? ns * 2 : HKC_SETTLE_NAP_MAX_NS;
  }
}

/* Before an operation: the device is current, and the communicator has
 * settled (NCCL refuses any call on one still ncclInProgress) and is
 * healthy. */
static hk_status comm_enter(hk_dev_comm c, const char *what) {
  if (!c)
    return fail(HK_ERR_INVALID_ARG, "%s: NULL communicator", what);
  hk_status st = enter(c->dev);
  if (st != HK_OK)
    return st;
  return comm_settle(c, what);
}

/* An operation's result: ncclSuccess is queued; ncclInProgress is NCCL
 * still enqueueing it, waited for (comm_settle) so that the operation is
 * on the stream when the call returns, as device.h promises (an event
 * recorded next must come after it). */
static hk_status comm_result(hk_dev_comm c, ncclResult_t r, const char *what,
                             size_t count) {
  if (r == ncclSuccess)
    return HK_OK;
  if (r == ncclInProgress)
    return comm_settle(c, what);
  char w[128];
  snprintf(w, sizeof w, "%s of %zu elements (rank %d of %d)", what, count,
           c->rank, c->nranks);
  return fail_nccl(r, c->nc, w);
}

/* ncclGetUniqueId: 128 bytes (NCCL_UNIQUE_ID_BYTES) naming a bootstrap
 * listener this process starts; rank 0 of the communicator calls it. */
static hk_status cuda_comm_unique_id(hk_device *dev,
                                     uint8_t id[HK_DEV_UID_BYTES]) {
  (void)dev;
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess)
    return fail_nccl(r, NULL, "ncclGetUniqueId");
  memcpy(id, u.internal, HK_DEV_UID_BYTES);
  return HK_OK;
}

/* ncclCommInitRankConfig with config.blocking = 0: returns while NCCL
 * still connects (comm_async_error: pending). */
static hk_status cuda_comm_init(hk_device *dev,
                                const uint8_t id[HK_DEV_UID_BYTES], int nranks,
                                int rank, hk_dev_comm *out) {
  *out = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(HK_ERR_INVALID_ARG, "comm_init: rank %d of %d", rank, nranks);
  cuda_dev *d = as_dev(dev);
  hk_status st = nccl_check_version();
  if (st != HK_OK || (st = enter(d)) != HK_OK)
    return st;
  hk_dev_comm c = calloc(1, sizeof *c);
  if (!c)
    return fail(HK_ERR_NOMEM, "comm_init: out of memory");
  ncclUniqueId u;
  memcpy(u.internal, id, HK_DEV_UID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nc, nranks, u, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    char w[96];
    snprintf(w, sizeof w, "ncclCommInitRankConfig (rank %d of %d)", rank,
             nranks);
    st = fail_nccl(r, nc, w);
    if (nc)
      (void)ncclCommAbort(nc);
    free(c);
    return st;
  }
  c->nc = nc;
  c->dev = d;
  c->nranks = nranks;
  c->rank = rank;
  *out = c;
  return HK_OK;
}

/* NCCL has no 16-bit integer type: an int16 allreduce (scatter 0) or
 * reduce-scatter (1) runs in int32, in a buffer of the stream
 * (cudaMallocAsync; cudaFreeAsync after the narrowing, whatever failed).
 * The int32 sums and products wrap modulo 2^32, and their low 16 bits are
 * the int16 ones wrapped; min and max are exact: the bits of an int16
 * reduction. send holds count elements (allreduce) or nranks * recvcount
 * (reduce-scatter, reduced in place in int32: this rank's block at
 * rank * recvcount); recv receives recvcount (allreduce: count). The
 * communicator has been entered (comm_enter). */
static hk_status comm_int16(hk_dev_comm c, const void *send, void *recv,
                            size_t recvcount, ncclRedOp_t o, int scatter,
                            hk_dev_stream s) {
  const char *what = scatter ? "ncclReduceScatter" : "ncclAllReduce";
  const size_t count = scatter ? recvcount * (size_t)c->nranks : recvcount;
  const int tb = c->dev->target_blocks;
  cudaStream_t cs = as_stream(s);
  int32_t *w = NULL;
  cudaError_t e = cudaMallocAsync((void **)&w, count ? count * 4 : 4, cs);
  if (e != cudaSuccess) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s of int16: cudaMallocAsync of %zu bytes", what,
             count * 4);
    return fail_cuda(e, msg);
  }
  hk_status st = HK_OK;
  int32_t *mine = scatter ? w + (size_t)c->rank * recvcount : w;
  e = hkc_int16_convert(w, send, count, 1, tb, cs);
  if (e != cudaSuccess)
    st = fail_cuda(e, "int16 widened to int32");
  if (st == HK_OK)
    st = comm_result(
        c,
        scatter ? ncclReduceScatter(w, mine, recvcount, ncclInt32, o, c->nc, cs)
                : ncclAllReduce(w, w, count, ncclInt32, o, c->nc, cs),
        what, recvcount);
  if (st == HK_OK &&
      (e = hkc_int16_convert(recv, mine, recvcount, 0, tb, cs)) != cudaSuccess)
    st = fail_cuda(e, "int32 narrowed to int16");
  e = cudaFreeAsync(w, cs);
  if (e != cudaSuccess && st == HK_OK)
    st = fail_cuda(e, "cudaFreeAsync of the int16 reduction's buffer");
  return st;
}

/* The collectives: ncclAllReduce / ncclReduceScatter / ncclAllGather /
 * ncclBroadcast on s (NULL: the legacy default stream), counts in elements
 * (device.h); float16 and bfloat16 reduce natively (ncclFloat16,
 * ncclBfloat16), in NCCL's order (its channels), so ranks agree bit for
 * bit but the order is not hk's; int16 reduces in int32 (comm_int16);
 * bool is not reduced (HK_ERR_INVALID_ARG). Queued when they return
 * (comm_result). */
static hk_status cuda_comm_allreduce(hk_dev_comm c, const void *send,
                                     void *recv, size_t count, hk_dtype dtype,
                                     hk_op op, hk_dev_stream s) {
  ncclDataType_t t = ncclInt32; /* int16 is reduced as int32 (comm_int16) */
  ncclRedOp_t o;
  if (!nccl_dtype(dtype, &t) && dtype != HK_INT16)
    return fail(HK_ERR_INVALID_ARG, "allreduce: dtype %d is not reduced",
                dtype);
  hk_status st = nccl_op(op, &o);
  if (st != HK_OK || (st = comm_enter(c, "ncclAllReduce")) != HK_OK)
    return st;
  if (dtype == HK_INT16)
    return comm_int16(c, send, recv, count, o, 0, s);
  return comm_result(
      c, ncclAllReduce(send, recv, count, t, o, c->nc, as_stream(s)),
      "ncclAllReduce", count);
}

static hk_status cuda_comm_reducescatter(hk_dev_comm c, const void *send,
                                         void *recv, size_t recvcount,
                                         hk_dtype dtype, hk_op op,
                                         hk_dev_stream s) {
  ncclDataType_t t = ncclInt32; /* int16 is reduced as int32 (comm_int16) */
  ncclRedOp_t o;
  if (!nccl_dtype(dtype, &t) && dtype != HK_INT16)
    return fail(HK_ERR_INVALID_ARG, "reducescatter: dtype %d is not reduced",
                dtype);
  hk_status st = nccl_op(op, &o);
  if (st != HK_OK || (st = comm_enter(c, "ncclReduceScatter")) != HK_OK)
    return st;
  if (dtype == HK_INT16)
    return comm_int16(c, send, recv, recvcount, o, 1, s);
  return comm_result(
      c, ncclReduceScatter(send, recv, recvcount, t, o, c->nc, as_stream(s)),
      "ncclReduceScatter", recvcount);
}

static hk_status cuda_comm_allgather(hk_dev_comm c, const void *send,
                                     void *recv, size_t sendcount,
                                     hk_dtype dtype, hk_dev_stream s) {
  ncclDataType_t t;
  if (!nccl_move_type(dtype, &sendcount, &t))
    return fail(HK_ERR_INVALID_ARG, "allgather: unknown dtype %d", dtype);
  hk_status st = comm_enter(c, "ncclAllGather");
  if (st != HK_OK)
    return st;
  return comm_result(
      c, ncclAllGather(send, recv, sendcount, t, c->nc, as_stream(s)),
      "ncclAllGather", sendcount);
}

static hk_status cuda_comm_broadcast(hk_dev_comm c, void *buf, size_t count,
                                     hk_dtype dtype, int root,
                                     hk_dev_stream s) {
  ncclDataType_t t;
  if (!nccl_move_type(dtype, &count, &t))
    return fail(HK_ERR_INVALID_ARG, "broadcast: unknown dtype %d", dtype);
  hk_status st = comm_enter(c, "ncclBroadcast");
  if (st != HK_OK)
    return st;
  if (root < 0 || root >= c->nranks)
    return fail(HK_ERR_INVALID_ARG, "broadcast: root %d of %d ranks", root,
                c->nranks);
  return comm_result(
      c, ncclBroadcast(buf, buf, count, t, root, c->nc, as_stream(s)),
      "ncclBroadcast", count);
}

/* ncclCommGetAsyncError: ncclInProgress is pending, ncclSuccess healthy,
 * anything else the communicator's failure. */
static hk_status cuda_comm_async_error(hk_dev_comm c, int *pending) {
  if (pending)
    *pending = 0;
  if (!c)
    return fail(HK_ERR_INVALID_ARG, "comm_async_error: NULL communicator");
  enter_quiet(c->dev);
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->nc, &state);
  if (r != ncclSuccess)
    return fail_nccl(r, c->nc, "ncclCommGetAsyncError");
  if (state == ncclInProgress) {
    if (pending)
      *pending = 1;
    return HK_OK;
  }
  if (state == ncclSuccess)
    return HK_OK;
  char w[96];
  snprintf(w, sizeof w, "the NCCL communicator (rank %d of %d) failed", c->rank,
           c->nranks);
  return fail_nccl_as(HK_ERR_SYSTEM, state, c->nc, w);
}

/* ncclCommAbort: NCCL runs it to the end before returning (a destroy or
 * abort is always blocking, even on a non-blocking communicator); kernels
 * it queued see the abort flag and exit. */
static void cuda_comm_abort(hk_dev_comm c) {
  if (!c)
    return;
  enter_quiet(c->dev);
  (void)ncclCommAbort(c->nc);
  free(c);
}

/* ncclCommFinalize (non-blocking: polled until no longer in progress),
 * then ncclCommDestroy; a failure on the way aborts. A healthy
 * communicator whose operations have completed finalises in milliseconds;
 * past the device's settle_s (HK_TIMEOUT_S), or once hkrun aborts the job,
 * the peers are taken to be gone and the communicator is aborted
 * instead. */
static void cuda_comm_destroy(hk_dev_comm c) {
  if (!c)
    return;
  enter_quiet(c->dev);
  ncclResult_t r = ncclCommFinalize(c->nc);
  ncclResult_t state = r;
  struct timespec nap = {0, 200 * 1000}; /* 0.2 ms */
  long waited_us = 0;
  while (r == ncclSuccess || r == ncclInProgress) {
    r = ncclCommGetAsyncError(c->nc, &state);
    if (r != ncclSuccess || state != ncclInProgress)
      break;
    const cuda_dev *d = c->dev;
    if (waited_us >= (long)(d->settle_s * 1e6) ||
        (d->stop && d->stop(d->stop_arg)))
      break;
    nanosleep(&nap, NULL);
    waited_us += 200;
  }
  if (r == ncclSuccess && state == ncclSuccess)
    (void)ncclCommDestroy(c->nc);
  else
    (void)ncclCommAbort(c->nc);
  free(c);
}

const hk_device_ops hk_cuda_device_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .describe = cuda_describe,
    .current = cuda_current,
    .set_current = cuda_set_current,
    .pointer_kind = cuda_pointer_kind,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_create_timed = cuda_event_create_timed,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_query = cuda_event_query,
    .event_elapsed = cuda_event_elapsed,
    .memcpy_async = cuda_memcpy_async,
    .batch_copy = cuda_batch_copy,
    .fill = cuda_fill,
    .comm_unique_id = cuda_comm_unique_id,
    .comm_init = cuda_comm_init,
    .comm_allreduce = cuda_comm_allreduce,
    .comm_reducescatter = cuda_comm_reducescatter,
    .comm_allgather = cuda_comm_allgather,
    .comm_broadcast = cuda_comm_broadcast,
    .comm_async_error = cuda_comm_async_error,
    .comm_abort = cuda_comm_abort,
    .comm_destroy = cuda_comm_destroy,
};
