/*
 * device.h - the device interface: everything hk does with a GPU goes
 * through one table of operations (hk_device_ops), implemented by two
 * backends (docs/design.md, "The GPU data plane"):
 *   - "cuda": cudart, NCCL and hk's kernels, in the separately loaded
 *     module libhk_cuda.so (device/cuda/), opened with dlopen at run time;
 *   - "emu": an emulated GPU for CPU machines (device/emu/): device memory
 *     host code cannot read, in-order stream threads, events with CUDA's
 *     rules, and a communicator between the ranks of one host that really
 *     reduces (through a shared-memory segment) and checks that every rank
 *     issued the same operation; faults can be injected.
 * Everything above this header (worker/, collectives/) is the same for
 * both, so CPU CI runs the whole GPU orchestration on emu.
 *
 * Conventions
 * - Sizes named `bytes` are bytes; `count` is ELEMENTS of the given dtype.
 * - Every fallible operation returns hk_status and sets the message
 *   (common/status.h: hk_fail) naming the backend and what failed, e.g.
 *   "cuda: cudaMalloc of 1048576 bytes: out of memory".
 * - Device pointers are opaque to host code: only the backend reads or
 *   writes through them. Host pointers given to copies must stay valid
 *   until the copy's stream has passed it.
 * - Streams run their operations in the order enqueued; operations on
 *   different streams are ordered only through events.
 * - Thread-safety: an hk_device and its streams/events/communicators may be
 *   used from any thread, but one stream is fed by one thread at a time
 *   (hk's streams: the background thread; a producer stream: the trainer).
 *   In hk only the background thread enqueues on hk's own streams and
 *   calls the communicator; trainer threads only record events on their
 *   producer streams (event_record) and make their streams wait on hk's
 *   events (stream_wait_event).
 */
#ifndef HK_DEVICE_DEVICE_H
#define HK_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** Where a buffer lives. */
typedef enum hk_mem_kind {
  HK_MEM_HOST = 0,   /* ordinary or pinned host memory */
  HK_MEM_DEVICE = 1, /* the device's memory (cudaMalloc / emu) */
} hk_mem_kind;

/** Bytes of a communicator's unique id (NCCL_UNIQUE_ID_BYTES is 128). */
#define HK_DEV_UID_BYTES 128

typedef struct hk_device hk_device;            /* an opened backend */
typedef struct hk_dev_stream_s *hk_dev_stream; /* cudaStream_t, or emu's */
typedef struct hk_dev_event_s *hk_dev_event;   /* cudaEvent_t, or emu's */
typedef struct hk_dev_comm_s *hk_dev_comm;     /* ncclComm_t, or emu's */

/**
 * One tensor of a batched copy (pack into / unpack out of the fusion
 * buffer): dst[i] = convert(src[i] * scale) for i in [0, count), where src
 * holds src_dtype and dst dst_dtype. The element arithmetic is
 * device/elem.h's, shared by every backend, so results are the same bits
 * on emu and cuda:
 * - src_dtype == dst_dtype: scale == 1 copies the bytes; otherwise floats
 *   multiply in the type (binary32 for 16-bit types, rounded back to
 *   nearest even), integers in binary64, truncated toward zero and
 *   saturated to the type (hk_scale_copy's rule); bool is copied.
 * - float32 -> float16/bfloat16 (compression): x * scale in binary32, then
 *   rounded to nearest even; float16/bfloat16 -> float32: widened exactly,
 *   then multiplied by scale in binary32.
 * - divisor > 1: floats are first divided by divisor (binary32 for 16-bit
 *   types), integers divided truncating toward zero; then scaled. This is
 *   HK_AVERAGE's division, fused into the unpack (hk_reduce_finish_average
 *   gives the same bits on the host). A 16-bit source with pre > 1 is
 *   multiplied by pre first, in the same binary32 step (one rounding:
 *   hk_reduce_finish_average_pre's bits): the pack divided the inputs by
 *   that power of two so that the 16-bit sum cannot overflow.
 * src and dst may be host or device pointers as the backend allows (both
 *   device for pack/unpack); they must not overlap unless equal, and are
 *   equal only when the dtypes are (a conversion in place would race).
 */
typedef struct hk_dev_copy {
  void *dst;
  const void *src;
  size_t count;    /* elements */
  double scale;    /* 1.0: none */
  int32_t divisor; /* <= 1: none */
  double pre;      /* HK_AVERAGE of float16/bfloat16: the power of two the
                      inputs were divided by (hk_average_pre_divisor), put
                      back before the division; <= 1: none */
} hk_dev_copy;

/** Faults the emu backend injects (HK_EMU_FAULT), for CI's fault tests. */
typedef enum hk_dev_fault_kind {
  HK_DEV_FAULT_NONE = 0,
  HK_DEV_FAULT_ERROR = 1,   /* the op fails asynchronously (async error) */
  HK_DEV_FAULT_HANG = 2,    /* the op never completes until aborted */
  HK_DEV_FAULT_DELAY = 3,   /* the op starts delay_ms late, then succeeds */
  HK_DEV_FAULT_ENQUEUE = 4, /* the op's call fails (nothing is queued) and
                               the communicator is left in error, as an
                               NCCL call that fails, or a settle that
                               times out */
} hk_dev_fault_kind;

typedef struct hk_dev_fault {
  int kind;     /* hk_dev_fault_kind */
  int rank;     /* the rank (in the communicator's job) it hits */
  int op_index; /* the n-th communicator operation on that rank, from 0 */
  int delay_ms; /* HK_DEV_FAULT_DELAY only */
} hk_dev_fault;

/** What hk_device_open is told (from common/config.h; no getenv below). */
typedef struct hk_device_options {
  double timeout_s;       /* the longest a backend's own wait lasts (the
                             CUDA communicator's settle: HK_TIMEOUT_S);
                             <= 0: 60 s */
  int (*stop)(void *arg); /* polled by those waits: nonzero ends them
                             with HK_ERR_PEER_LOST (hkrun's abort);
                             NULL: never; called on the waiting thread */
  void *stop_arg;
  int device_index;   /* which GPU of this process: an index among the
                         devices it sees (HK_GPU), or the local rank */
  int by_local_rank;  /* 1: device_index is the local rank, taken modulo
                         the number of visible devices (hk_device_pick) */
  hk_dev_fault fault; /* emu only */
  int emu_devices;    /* emu only: the devices the emulated driver shows
                         this process (HK_EMU_DEVICES); <= 0: 1 */
  int job_rank;       /* for fault matching and messages */
} hk_device_options;

/**
 * Which of `count` visible devices an open takes (every backend's rule,
 * as hk.h promises): with by_local_rank the local rank modulo count (one
 * visible GPU: that one, whatever the local rank); otherwise
 * device_index itself. NULL opts: device 0. Returns the index, or -1 when
 * there is none (count <= 0, or an explicit index outside [0, count)):
 * the backend's open then fails naming the index and the count. Pure.
 */
static inline int hk_device_pick(const hk_device_options *opts, int count) {
  int i = opts ? opts->device_index : 0;
  if (count <= 0 || i < 0)
    return -1;
  if (opts && opts->by_local_rank)
    return i % count;
  return i < count ? i : -1;
}

/**
 * The operations of a backend. Unless said otherwise each returns HK_OK or
 * an error (HK_ERR_SYSTEM for a driver/runtime failure, HK_ERR_NOMEM for
 * an allocation, HK_ERR_INVALID_ARG for a bad pointer) with the message
 * set. Enqueueing functions return when the work is queued, not done;
 * failures of queued work surface through event_query (and
 * comm_async_error for the communicator).
 */
typedef struct hk_device_ops {
  const char *name; /* "cuda" or "emu" */

  /* ---- the device ---- */
  /** Opens the backend on the device hk_device_pick chooses; *out owns
   *  it. The calling thread's current device is as it was before. */
  hk_status (*open)(const hk_device_options *opts, hk_device **out);
  /** Closes it; every stream, event, comm and allocation must be gone. */
  void (*close)(hk_device *dev);
  /** Human-readable device name ("NVIDIA H200 (sm_90)", "emu 0"). */
  const char *(*describe)(hk_device *dev);
  /** The calling thread's current device (cudaGetDevice; the emu keeps
   *  one per thread): an index, or -1 while the thread has none (CUDA: no
   *  context current; emu: the thread never entered the backend). Every
   *  other operation that takes dev makes dev's device the calling
   *  thread's current one (CUDA needs it for its calls); hk asks this
   *  first and gives it back with set_current, so the caller's choice
   *  stands. Never fails; any thread. */
  int (*current)(hk_device *dev);
  /** Makes `index` (a value current returned) the calling thread's
   *  current device again; -1: none. Never fails (an error is cleared);
   *  creates no context that was not there (CUDA: the context current
   *  before, put back). Any thread. */
  void (*set_current)(hk_device *dev, int index);

  /* ---- memory ---- */
  /** Which kind of memory p points into (HK_MEM_HOST for anything the
   *  backend does not know, NULL included). *device_index (may be NULL)
   *  receives the owning device for device memory (an index among the
   *  visible devices, as hk_device.index), untouched for host memory. Never
   * fails: a lookup error counts as host. Cheap (cudaPointerGetAttributes / a
   * table). */
  hk_mem_kind (*pointer_kind)(hk_device *dev, const void *p, int *device_index);
  /** Device memory of `bytes` (0 gives a unique non-NULL pointer), aligned
   *  to 256 bytes. */
  hk_status (*mem_alloc)(hk_device *dev, size_t bytes, void **out);
  void (*mem_free)(hk_device *dev, void *p); /* NULL is fine */
  /** Page-locked host memory (cudaHostAlloc), readable by host code. */
  hk_status (*host_alloc)(hk_device *dev, size_t bytes, void **out);
  void (*host_free)(hk_device *dev, void *p); /* NULL is fine */

  /* ---- streams and events ---- */
  hk_status (*stream_create)(hk_device *dev, hk_dev_stream *out);
  /** Destroys a stream after its queued work has finished. */
  void (*stream_destroy)(hk_device *dev, hk_dev_stream s);
  /** Creates an event without timing (cudaEventDisableTiming: recording
   *  and waiting on it cost less); event_elapsed refuses it. */
  hk_status (*event_create)(hk_device *dev, hk_dev_event *out);
  /** Creates an event with timing, for event_elapsed (the timeline's
   *  phase events, benchmarks). */
  hk_status (*event_create_timed)(hk_device *dev, hk_dev_event *out);
  void (*event_destroy)(hk_device *dev, hk_dev_event e);
  /** CUDA's cudaEventRecord: the event completes when s reaches this
   *  point. s NULL means the default stream of the calling context. */
  hk_status (*event_record)(hk_device *dev, hk_dev_event e, hk_dev_stream s);
  /** CUDA's cudaStreamWaitEvent: work queued on s after this call waits
   *  for the work e captured at its most recent event_record (an event
   *  never recorded: no wait). Does not block the calling thread. */
  hk_status (*stream_wait_event)(hk_device *dev, hk_dev_stream s,
                                 hk_dev_event e);
  /** cudaEventQuery: *done = 1 if the captured work has completed (or the
   *  event was never recorded), else 0. A failure of the captured work is
   *  returned as an error. */
  hk_status (*event_query)(hk_device *dev, hk_dev_event e, int *done);
  /** Milliseconds between two completed events (cudaEventElapsedTime),
   *  both made by event_create_timed: HK_ERR_INVALID_ARG (emu) or
   *  HK_ERR_SYSTEM (cuda) otherwise. */
  hk_status (*event_elapsed)(hk_device *dev, hk_dev_event start,
                             hk_dev_event end, float *ms);

  /* ---- copies and kernels (enqueued on s) ---- */
  /** Copies bytes between any two of host/device memory. */
  hk_status (*memcpy_async)(hk_device *dev, void *dst, const void *src,
                            size_t bytes, hk_dev_stream s);
  /** n copies in one launch (see hk_dev_copy), src_dtype -> dst_dtype;
   *  the items array is copied before returning. */
  hk_status (*batch_copy)(hk_device *dev, const hk_dev_copy *items, size_t n,
                          hk_dtype src_dtype, hk_dtype dst_dtype,
                          hk_dev_stream s);
  /** Fills count elements of dtype at device pointer p with the 8-byte
   *  pattern value (its first hk_dtype_size bytes), e.g. a join's
   *  identity. */
  hk_status (*fill)(hk_device *dev, void *p, size_t count, hk_dtype dtype,
                    const void *value, hk_dev_stream s);

  /* ---- the in-server communicator (NCCL, or emu's) ---- */
  /** A new unique id (rank 0 of the communicator calls it and sends the
   *  bytes to the others over hk's control plane). */
  hk_status (*comm_unique_id)(hk_device *dev, uint8_t id[HK_DEV_UID_BYTES]);
  /** Joins communicator `id` as `rank` of `nranks`, non-blocking: returns
   *  once the join is started; comm_async_error reports progress
   *  (HK_OK-but-pending through *pending). */
  hk_status (*comm_init)(hk_device *dev, const uint8_t id[HK_DEV_UID_BYTES],
                         int nranks, int rank, hk_dev_comm *out);
  /** recv = op over ranks of send, count elements (in place allowed).
   *  HK_AVERAGE is not passed here (hk sums and divides in the unpack). */
  hk_status (*comm_allreduce)(hk_dev_comm c, const void *send, void *recv,
                              size_t count, hk_dtype dtype, hk_op op,
                              hk_dev_stream s);
  /** recv (recvcount elements) = this rank's block of op over ranks of
   *  send (nranks * recvcount elements, block r for rank r). */
  hk_status (*comm_reducescatter)(hk_dev_comm c, const void *send, void *recv,
                                  size_t recvcount, hk_dtype dtype, hk_op op,
                                  hk_dev_stream s);
  /** recv (nranks * sendcount elements) = every rank's send, rank order. */
  hk_status (*comm_allgather)(hk_dev_comm c, const void *send, void *recv,
                              size_t sendcount, hk_dtype dtype,
                              hk_dev_stream s);
  /** buf (count elements) on every rank = buf on root. */
  hk_status (*comm_broadcast)(hk_dev_comm c, void *buf, size_t count,
                              hk_dtype dtype, int root, hk_dev_stream s);
  /** HK_OK while the communicator is healthy (*pending, if not NULL: 1
   *  while a non-blocking init or operation is still in progress inside
   *  the library); an error (HK_ERR_SYSTEM, with NCCL's or emu's reason in
   *  the message) once it failed asynchronously. */
  hk_status (*comm_async_error)(hk_dev_comm c, int *pending);
  /** Aborts: every operation queued or running on it ends on this rank
   *  and its stream moves on (the results are undefined; emu also makes
   *  later events of that stream report the failure, CUDA's do not);
   *  peers see their own operations fail or time out. Then frees it.
   *  Callable from any thread, also while an operation blocks. */
  void (*comm_abort)(hk_dev_comm c);
  /** Frees a healthy communicator after its operations have completed. */
  void (*comm_destroy)(hk_dev_comm c);
} hk_device_ops;

/** An opened backend: its table first, then the backend's own state. */
struct hk_device {
  const hk_device_ops *ops;
  int index; /* the device it opened, among those the process sees */
};

/**
 * Opens the backend named by `kind` ("cuda", "emu", or "auto": cuda where
 * libhk_cuda.so loads and finds a GPU, else none). For "cuda" the module
 * libhk_cuda.so is opened with dlopen (next to libhk, then the loader's
 * path) and its hk_cuda_device_ops symbol taken.
 * *out is NULL (with HK_OK) for "auto" on a machine without a GPU.
 * Errors: HK_ERR_CONFIG naming what is missing ("libhk_cuda.so not found:
 * hk was built without CUDA", "libcudart.so.13: cannot open shared
 * object", "no CUDA device", "NCCL 2.18 found, 2.19 or newer needed"),
 * or the backend's own error.
 */
hk_status hk_device_open(const char *kind, const hk_device_options *opts,
                         hk_device **out);

/** Closes what hk_device_open opened (NULL is fine). */
void hk_device_close(hk_device *dev);

/** The emu backend's table (device/emu/emu.c). */
extern const hk_device_ops hk_emu_device_ops;

#endif
