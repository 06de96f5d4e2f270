/*
 * internal.h - what the files of the emu backend share (not for use outside
 * device/emu/). One file per job:
 *   emu.c     the ops table, open/close
 *   memory.c  device memory: the double mapping and the allocation table
 *   stream.c  stream threads, their FIFOs, events, delay and host
 *             callbacks; the driver's count of handles, the default stream
 *   copy.c    memcpy, batch_copy (device/elem.h) and fill
 *   comm.c    the communicator over a shared-memory segment
 *   fault.c   HK_EMU_FAULT: which operation a fault hits, and its message
 *   current.c each thread's current device
 * Every function here follows device.h's conventions (hk_status, message
 * set with hk_fail).
 */
#ifndef HK_DEVICE_EMU_INTERNAL_H
#define HK_DEVICE_EMU_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/status.h"
#include "device/device.h"

/** Capacity of the emu's error messages (bytes incl. NUL). */
#define EMU_MSG_CAP 512

/** One opened handle (emu.c). */
typedef struct emu_device {
  hk_device base; /* first: hk_device * <-> emu_device *; base.index: the
                     device it opened (hk_device_pick) */
  int index;      /* base.index */
  int job_rank;   /* opts->job_rank */
  hk_dev_fault fault;
  atomic_uint comm_ops; /* communicator ops accepted so far (fault index) */
  char desc[32];        /* "emu 0" */
} emu_device;

/** The calling thread's current device (device.h's current): -1 until
 *  the thread first enters a handle (current.c). */
extern _Thread_local int emu_current_device;

/** Notes that device `index` has its (emulated, process-wide) context,
 *  counting it the first time (hk_emu_contexts_created). Thread-safe. */
void emu_context_made(int index);

/** dev as an emu_device, or NULL (HK_ERR_INVALID_ARG's message set) if
 *  it is not one: a handle is the emu's when its table is named "emu"
 *  (asked of the table, so no file of the backend needs emu.c's symbol).
 *  Does not change the current device (emu_dev does). */
static inline emu_device *emu_handle(hk_device *dev, const char *what) {
  if (!dev || !dev->ops || strcmp(dev->ops->name, "emu") != 0) {
    hk_fail(HK_ERR_INVALID_ARG, "emu: %s: not an emu device handle", what);
    return NULL;
  }
  return (emu_device *)dev;
}

/** emu_handle, and the entry into the backend: dev's device becomes the
 *  calling thread's current one, as cuda.c's enter() makes it, and has its
 *  context (every operation but open, close, describe, current,
 *  set_current and pointer_kind). */
static inline emu_device *emu_dev(hk_device *dev, const char *what) {
  emu_device *d = emu_handle(dev, what);
  if (d) {
    emu_current_device = d->index;
    emu_context_made(d->index);
  }
  return d;
}

/* ---- memory.c ---- */

typedef struct emu_alloc emu_alloc;

/** A resolved range: ptr is where the backend reads/writes (the shadow
 *  mapping for device memory, p itself for host memory); alloc is the
 *  referenced allocation (NULL for host memory). */
typedef struct emu_range {
  emu_alloc *alloc;
  void *ptr;
} emu_range;

/**
 * Resolves [p, p + bytes) for an operation named `what` ("memcpy_async
 * dst"). Device memory: the range must lie inside one allocation; the
 * allocation is referenced (emu_range_release drops it), so a mem_free
 * before the operation ran unmaps only after it. Host memory: taken as is,
 * but a host range that reaches into a device allocation is refused.
 * need_device: host memory is refused.
 * Errors: HK_ERR_INVALID_ARG naming what, the pointer and the allocation.
 */
hk_status emu_range_resolve(const void *p, size_t bytes, int need_device,
                            const char *what, emu_range *out);
void emu_range_release(emu_range *r); /* NULL alloc is fine */

/** HK_MEM_DEVICE if p is inside a live allocation (*device_index set). */
hk_mem_kind emu_pointer_kind(const void *p, int *device_index);

/* ---- the ops of the table (emu.c), by file; contracts in device.h ---- */

/* current.c */
int emu_current(hk_device *dev);
void emu_set_current(hk_device *dev, int index);

/* memory.c */
hk_mem_kind emu_ptr_kind(hk_device *dev, const void *p, int *device_index);
hk_status emu_mem_alloc(hk_device *dev, size_t bytes, void **out);
void emu_mem_free(hk_device *dev, void *p);
hk_status emu_host_alloc(hk_device *dev, size_t bytes, void **out);
void emu_host_free(hk_device *dev, void *p);

/* stream.c */
hk_status emu_stream_create(hk_device *dev, hk_dev_stream *out);
void emu_stream_destroy(hk_device *dev, hk_dev_stream s);
hk_status emu_event_create(hk_device *dev, hk_dev_event *out);
hk_status emu_event_create_timed(hk_device *dev, hk_dev_event *out);
void emu_event_destroy(hk_device *dev, hk_dev_event e);
hk_status emu_event_record(hk_device *dev, hk_dev_event e, hk_dev_stream s);
hk_status emu_stream_wait_event(hk_device *dev, hk_dev_stream s,
                                hk_dev_event e);
hk_status emu_event_query(hk_device *dev, hk_dev_event e, int *done);
hk_status emu_event_elapsed(hk_device *dev, hk_dev_event start,
                            hk_dev_event end, float *ms);

/* copy.c */
hk_status emu_memcpy_async(hk_device *dev, void *dst, const void *src,
                           size_t bytes, hk_dev_stream s);
hk_status emu_batch_copy(hk_device *dev, const hk_dev_copy *items, size_t n,
                         hk_dtype src_dtype, hk_dtype dst_dtype,
                         hk_dev_stream s);
hk_status emu_fill(hk_device *dev, void *p, size_t count, hk_dtype dtype,
                   const void *value, hk_dev_stream s);

/* comm.c */
hk_status emu_comm_unique_id(hk_device *dev, uint8_t id[HK_DEV_UID_BYTES]);
hk_status emu_comm_init(hk_device *dev, const uint8_t id[HK_DEV_UID_BYTES],
                        int nranks, int rank, hk_dev_comm *out);
hk_status emu_comm_allreduce(hk_dev_comm c, const void *send, void *recv,
                             size_t count, hk_dtype dtype, hk_op op,
                             hk_dev_stream s);
hk_status emu_comm_reducescatter(hk_dev_comm c, const void *send, void *recv,
                                 size_t recvcount, hk_dtype dtype, hk_op op,
                                 hk_dev_stream s);
hk_status emu_comm_allgather(hk_dev_comm c, const void *send, void *recv,
                             size_t sendcount, hk_dtype dtype, hk_dev_stream s);
hk_status emu_comm_broadcast(hk_dev_comm c, void *buf, size_t count,
                             hk_dtype dtype, int root, hk_dev_stream s);
hk_status emu_comm_async_error(hk_dev_comm c, int *pending);
void emu_comm_abort(hk_dev_comm c);
void emu_comm_destroy(hk_dev_comm c);

/* ---- stream.c ---- */

typedef struct emu_op emu_op;

/** An operation in a stream's FIFO. Modules embed it first in their own
 *  struct. run is called on the thread of stream s; on failure it writes a
 *  message into msg (cap bytes) and returns the status, which becomes the
 *  stream's error if it has none yet (see stream.c). destroy frees the op
 *  (and drops what it references); it is called after run, or instead of
 *  it if the enqueue fails. */
struct emu_op {
  emu_op *next;
  hk_status (*run)(emu_op *op, hk_dev_stream s, char *msg, size_t cap);
  void (*destroy)(emu_op *op);
};

/** Queues op on s (NULL: the default stream). Takes ownership of op, also
 *  on failure (then op->destroy is called). */
hk_status emu_enqueue(hk_dev_stream s, emu_op *op);

/** A new stream (its thread started). */
hk_status emu_stream_new(hk_dev_stream *out);
/** Waits for s's queued work, stops its thread, frees it. */
void emu_stream_free(hk_dev_stream s);

/* The process-wide driver state (emu.h, "Process-wide state"). */

/** The process's default stream, created on first use. Errors: as
 *  emu_stream_new (HK_ERR_NOMEM, HK_ERR_SYSTEM). */
hk_status emu_default_stream(hk_dev_stream *out);
/** A handle was opened (emu.c's open): counted. */
void emu_driver_open(void);
/** A handle was closed: the last one stops the default stream (waiting
 *  for its queued work). */
void emu_driver_close(void);

/* ---- fault.c ---- */

/** The fault (hk_dev_fault_kind) the communicator op numbered `index` on
 *  this device hits: HK_DEV_FAULT_NONE unless dev's fault names this
 *  job_rank and index. */
int emu_fault_for(const emu_device *dev, unsigned index);

/** "injected async error (HK_EMU_FAULT) in allreduce #3 on rank 1"; for
 *  kind HK_DEV_FAULT_ENQUEUE "injected enqueue failure (...)...". */
void emu_fault_message(char *buf, size_t cap, int kind, const char *op_name,
                       unsigned index, int job_rank);

/* ---- small helpers ---- */

/** a * b into *out; 0 on overflow of size_t. */
static inline int emu_mul(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

#endif
