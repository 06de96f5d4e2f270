/*
 * emu.h - what the emu backend (hk_emu_device_ops, device/device.h) offers
 * beyond the device interface: hooks for tests, and its constants. hk's
 * runtime uses only device.h; tests include this header too.
 *
 * The emulated GPU in one paragraph (details at each file of device/emu/):
 * - Device memory (memory.c) is a memfd mapped twice: the address handed
 *   out (the "device pointer") is mapped PROT_NONE, so host code that
 *   dereferences it dies with SIGSEGV, as on a real GPU; the backend reads
 *   and writes the same pages through a second, read-write mapping. A
 *   table of allocations answers pointer_kind (interior pointers too) and
 *   bounds-checks every device range an operation names: a range running
 *   past its allocation, or a free of an unknown pointer, is an error.
 * - Streams (stream.c) are threads that run a FIFO of operations in order;
 *   events follow cudaEventRecord / cudaStreamWaitEvent / cudaEventQuery.
 * - The communicator (comm.c) reduces for real between the processes of one
 *   host through a POSIX shared-memory segment, and checks that every rank
 *   issued the same operation (see "Reduction order" below).
 * - Faults (fault.c): hk_device_options.fault (HK_EMU_FAULT) makes the n-th
 *   communicator operation of one rank fail, hang or start late.
 *
 * Devices. A process sees hk_device_options.emu_devices devices
 * (HK_EMU_DEVICES; 1 when unset), numbered from 0: an open takes one of
 * them by hk_device_pick's rule and refuses an index outside them, naming
 * the index and the count, as the cuda backend does. Each allocation
 * belongs to the device of the handle that made it (pointer_kind tells
 * it). Each thread has a current device, as under CUDA: -1 until the
 * thread first calls an operation of a handle, which makes that handle's
 * device current (every operation but open, close, describe, current and
 * set_current: cuda.c's enter); current and set_current read and set it.
 *
 * Process-wide state. A CUDA driver is process-global, and so is the emu's:
 * the allocation table and the default stream (the NULL stream) are shared
 * by every hk_device that hk_emu_device_ops.open returns in a process. Each
 * open returns its own handle (its device_index, job_rank and fault
 * settings) holding a reference on that state; the last close stops the
 * default stream. Device pointers are valid with any handle. The state is
 * not fork-safe (neither is CUDA's): a child of fork() must not use devices
 * or pointers its parent opened (it may _exit, exec, or, when its parent
 * had nothing open, open its own).
 *
 * Reduction order (what hk's tests compare against). For every element,
 * allreduce and reducescatter compute, on every rank,
 *     v = x[0];  for r = 1 .. nranks-1:  v = hk_reduce(v, x[r])
 * where x[r] is rank r's input (r = the communicator rank) and
 * hk_reduce(a, b) is device/host/reduce.h's a op b (a the running value,
 * b rank r's: min/max ties and NaNs follow reduce.h's rules for that
 * order). float16/bfloat16 round to 16 bits after every step. Every rank
 * gets the same bits. Allgather concatenates in rank order; broadcast
 * copies root's bytes.
 */
#ifndef HK_DEVICE_EMU_EMU_H
#define HK_DEVICE_EMU_EMU_H

#include <stddef.h>

#include "device/device.h"

/** Bytes each rank's slot of a communicator's shared segment holds: a
 *  tensor larger than this crosses in chunks of this size (reducescatter:
 *  nranks blocks of chunk/nranks bytes). */
#define HK_EMU_CHUNK_BYTES ((size_t)1 << 20)

/** Most ranks one emu communicator takes. */
#define HK_EMU_MAX_RANKS 256

/**
 * Enqueues a pause on stream s (NULL: the default stream): the stream
 * sleeps `ms` milliseconds before it runs its next operation. This is the
 * tests' "producer stream delayed by the backend": work queued after it,
 * and every event recorded after it, completes at least ms later.
 * Thread-safety: as any enqueue (one feeding thread per stream).
 * Errors: HK_ERR_INVALID_ARG (dev not an emu device, ms < 0),
 * HK_ERR_NOMEM.
 */
hk_status hk_emu_stream_delay(hk_device *dev, hk_dev_stream s, int ms);

/**
 * Enqueues a host callback on stream s (NULL: the default stream): the
 * stream's thread calls fn(arg) when it reaches it, after every operation
 * queued before and before any queued after (cudaLaunchHostFunc). fn must
 * not enqueue on s or destroy it; it may block (the stream waits), which is
 * how tests hold a stream at a known point. arg stays the caller's.
 * Thread-safety: as any enqueue (one feeding thread per stream); fn runs
 * on the stream's thread.
 * Errors: HK_ERR_INVALID_ARG (dev not an emu device, fn NULL), HK_ERR_NOMEM.
 */
hk_status hk_emu_stream_host_fn(hk_device *dev, hk_dev_stream s,
                                void (*fn)(void *arg), void *arg);

/**
 * Writes the name of the POSIX shared-memory segment that the communicator
 * with unique id `id` uses ("/hk-emu-<32 hex digits>", as shm_open takes it;
 * it appears as /dev/shm/hk-emu-<hex> until every rank has attached) into
 * buf (cap bytes, 64 suffice). Pure; thread-safe.
 * Errors: HK_ERR_INVALID_ARG (id is not an emu unique id, cap too small).
 */
hk_status hk_emu_comm_shm_name(const uint8_t id[HK_DEV_UID_BYTES], char *buf,
                               size_t cap);

/**
 * For tests: blocks the calling thread until at least n ranks (this one
 * included) wait at the communicator's barrier, i.e. are inside an
 * operation waiting for their peers. Waits for the communicator's init
 * first. This rank's own async error does not end the wait (a rank whose
 * op failed may wait for its peers to block before it aborts); an abort
 * (this rank's or a peer's) or a failed init does. The barrier here is the
 * one a blocked operation waits at, so a test can abort while a peer is
 * known to be blocked. The thread sleeps (futex), it does not spin.
 * Thread-safety: any thread, while no other thread aborts or destroys c
 * (abort after it returns).
 * Errors: HK_ERR_INVALID_ARG (n outside [1, nranks]); HK_ERR_SYSTEM (init
 * failed, aborted: the message says which).
 */
hk_status hk_emu_comm_wait_arrived(hk_dev_comm c, int n);

/** Number of live emu device allocations in this process (all handles):
 *  for leak checks in tests. Thread-safe. */
size_t hk_emu_live_allocations(void);

/** Number of events event_create and event_create_timed have made in this
 *  process so far (all handles; destroyed ones too): for tests that check
 *  that events are reused. Thread-safe. */
size_t hk_emu_events_created(void);

/** Number of memcpy_async calls from device to host memory enqueued in
 *  this process so far (all handles, all streams; counted when enqueued,
 *  also those whose stream later fails), and through *bytes (if not NULL)
 *  their bytes: for tests that check how device tensors are staged
 *  through host memory (the chunks of a staged schedule, compression's
 *  halved bytes). The two are read one after the other: read them while
 *  no copy is being enqueued. Thread-safe. */
size_t hk_emu_copies_to_host(size_t *bytes);

/** Number of emulated contexts made in this process so far: as CUDA's
 *  primary context, one per device, made by the first operation of a
 *  handle on that device (emu.h, "Devices": every operation but open,
 *  close, describe, current, set_current and pointer_kind, which CUDA
 *  can answer without a context). For tests that check that hk makes no
 *  context before it needs one. Thread-safe. */
size_t hk_emu_contexts_created(void);

/** Number of communicator ids comm_unique_id has made in this process so
 *  far (NCCL's ncclGetUniqueId starts a bootstrap listener each time):
 *  for tests that check when hk makes one. Thread-safe. */
size_t hk_emu_unique_ids_created(void);

/** Number of communicators comm_abort has ended in this process so far
 *  (also comm_destroy's of a failed one): for tests that check that a
 *  communicator peers may hang in is aborted, not destroyed. Thread-safe. */
size_t hk_emu_comms_aborted(void);

#endif
