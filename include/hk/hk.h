/*
 * hk.h - the public C API of hk, a distributed training coordinator.
 *
 * This is the only header a trainer includes. A job is N worker processes
 * started by `hkrun -np N ./prog`; each calls hk_init(), hands named tensors
 * to hk_allreduce_async()/hk_broadcast_async(), waits on the handles, and
 * calls hk_shutdown(). A program started without hkrun is a world of size 1.
 *
 * Conventions used by every function below
 * - Counts are in ELEMENTS of the given dtype, never bytes, and are size_t:
 *   tensors over 2^31 elements or bytes are supported.
 * - Every fallible function returns hk_status; HK_OK is 0. On failure a
 *   detailed message (naming the tensor, ranks and values involved) is
 *   available from hk_last_error() on the calling thread.
 * - Thread-safety: after hk_init() returns, every function may be called from
 *   any thread concurrently, except hk_init/hk_shutdown themselves, which must
 *   not race with any other hk call. Calls only enqueue work; a background
 *   thread (one per process) does all communication.
 * - Names identify a tensor across ranks: every rank must submit a tensor
 *   under the same name, and the name must not be reused while a previous
 *   operation with that name is still in flight on this rank. Names are at
 *   most HK_MAX_NAME_LEN bytes, NUL-terminated, any bytes but NUL.
 * - Ordering: ranks may submit tensors in any order, from any number of
 *   threads. hk negotiates (rank 0 coordinates) so that every rank executes
 *   the ready tensors in the same order.
 */
#ifndef HK_HK_H
#define HK_HK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HK_VERSION_MAJOR 0
#define HK_VERSION_MINOR 1
#define HK_VERSION_PATCH 0

/* HK_API marks the functions libhk.so exports; everything else in the
 * library is hidden (built with -fvisibility=hidden). Nothing to define
 * for users: the same header serves libhk.so and libhk.a. */
#if defined(__GNUC__) || defined(__clang__)
#define HK_API __attribute__((visibility("default")))
#else
#define HK_API
#endif

/** Longest tensor name accepted, in bytes, excluding the terminating NUL. */
#define HK_MAX_NAME_LEN 511

/** Most dimensions a tensor's shape may have (hk_collective.shape). */
#define HK_MAX_DIMS 8

/** Result of every fallible hk call. HK_OK is 0; the others are errors. */
typedef enum hk_status {
  HK_OK = 0,
  /** An argument was invalid (NULL pointer, unknown dtype/op, bad root,
   *  empty or over-long name, buffers that overlap partially, a bool
   *  tensor given to a reduction, a scale factor that is not finite). */
  HK_ERR_INVALID_ARG = 1,
  /** hk_init() was not called, or hk_shutdown() already was. */
  HK_ERR_NOT_INITIALIZED = 2,
  /** hk_init() was called twice without hk_shutdown() in between. */
  HK_ERR_ALREADY_INITIALIZED = 3,
  /** Ranks disagree on a tensor's count, dtype, op, root or collective. The
   *  tensor completes with this status on EVERY rank; the job continues. */
  HK_ERR_MISMATCH = 4,
  /** The name is already in flight on this rank (returned at submit time,
   *  on this rank only; the first operation is unaffected). */
  HK_ERR_DUPLICATE_NAME = 5,
  /** Another rank (or hkrun) died, exited early or became unreachable. The
   *  job cannot continue; every later call returns this status too. */
  HK_ERR_PEER_LOST = 6,
  /** hk_shutdown() was called (on this or another rank) while the
   *  operation was pending, or the operation's process set was removed
   *  (hk_process_set_remove) before it ran. */
  HK_ERR_SHUTDOWN = 7,
  /** A network operation did not complete within HK_TIMEOUT_S (or the
   *  start-up rendezvous within HK_START_TIMEOUT_S). */
  HK_ERR_TIMEOUT = 8,
  /** A peer failed to prove it knows the job's secret. */
  HK_ERR_AUTH = 9,
  /** A malformed or unexpected message arrived (version, length, type). */
  HK_ERR_PROTOCOL = 10,
  /** An operating-system call failed; the message names it and errno. */
  HK_ERR_SYSTEM = 11,
  /** Memory could not be allocated. */
  HK_ERR_NOMEM = 12,
  /** An HK_* environment variable is malformed or out of range. */
  HK_ERR_CONFIG = 13,
  /** Some ranks submitted a tensor and others did not for longer than
   *  HK_STALL_SHUTDOWN_TIME_S: the job was stopped on every rank. */
  HK_ERR_STALLED = 14,
  /** The GPU, its runtime or the device communicator (NCCL) failed (an
   *  asynchronous NCCL error, a failed copy or kernel), or a device
   *  buffer was given where hk has no device backend; the message names
   *  the cause, and what is missing. The job cannot continue. */
  HK_ERR_DEVICE = 15,
  /** Elastic jobs only (hkrun --min-np; docs/elastic.md): a rank was lost
   *  and the job re-forms without it. Every pending operation and every
   *  later call fails with this on every surviving rank, within
   *  HK_TIMEOUT_S of the loss; the message names the lost rank and why.
   *  Restore the last committed state and call hk_elastic_reset. */
  HK_ERR_RANKS_CHANGED = 16,
} hk_status;

/**
 * Element types. Sizes in bytes: 2, 2, 4, 8, 1, 1, 4, 8, 2, 1. The values
 * are fixed (the wire and the Python front carry them); new types are
 * appended.
 * HK_BOOL is one byte per element, moved as it is (any byte value):
 * broadcast, allgather and alltoall take it; allreduce and reduce-scatter
 * do not (HK_ERR_INVALID_ARG at submit), as Horovod reduces no bool.
 */
typedef enum hk_dtype {
  HK_FLOAT16 = 0,  /**< IEEE 754 binary16 */
  HK_BFLOAT16 = 1, /**< bfloat16: the top 16 bits of a binary32 */
  HK_FLOAT32 = 2,
  HK_FLOAT64 = 3,
  HK_INT8 = 4,
  HK_UINT8 = 5,
  HK_INT32 = 6,
  HK_INT64 = 7,
  HK_INT16 = 8,
  HK_BOOL = 9, /**< one byte; not reduced (see above) */
} hk_dtype;

/**
 * Reduction operations.
 *
 * Arithmetic, exactly as implemented (all ranks get bitwise identical
 * results):
 * - float16/bfloat16: each pairwise step converts both operands to binary32,
 *   applies the op in binary32, and rounds the result back to 16 bits with
 *   round-to-nearest-even (the IEEE default; what a user gets from
 *   `(__half)((float)a + (float)b)`). A sum over N ranks is therefore N-1
 *   such rounded additions, as in NCCL.
 * - float32/float64: IEEE arithmetic in the type itself.
 * - Integers (int8, uint8, int16, int32, int64): sum and product wrap
 *   modulo 2^bits (two's complement), as in NCCL and MPI; no undefined
 *   behaviour. bool is not reduced (HK_BOOL).
 * - HK_SUM of float16 (largest finite 65504) or bfloat16 can overflow to
 *   +-inf although every input is finite: 16 ranks summing 5000.0 give
 *   +inf in float16. hk warns once per tensor name when a sum's result
 *   holds an infinity (HK_LOG_LEVEL=warning).
 * - HK_AVERAGE: the sum as above, then divided by the world size once, at
 *   the end: floats `x / size` in the type (binary32 for 16-bit types, then
 *   rounded to nearest even); integers truncate toward zero (C division) of
 *   the wrapped sum, exactly, as NCCL's ncclAvg does (Horovod's NCCL path;
 *   its MPI and Gloo paths multiply the sum by the binary64 1.0 / size and
 *   truncate, which can come out one nearer zero: a sum of 49 over 49 ranks
 *   gives 0 there, as 49 * (1.0 / 49) is 0.99999999999999989, and 1 in hk).
 *   For float16/bfloat16 each rank's input is first divided by the smallest
 *   power of two P >= size, which is exact (it only moves the exponent) and
 *   keeps every partial sum in range, and the end computes `x * P / size`
 *   in binary32: an average whose value is representable is representable
 *   (16 ranks averaging float16 5000.0 give 5000.0), and where no sum
 *   overflowed the bits are those of dividing the plain sum. Inputs below
 *   2^-14 * P (float16's normal range) keep fewer significant bits, as with
 *   NCCL's ncclAvg, which pre-multiplies. The same holds for device tensors
 *   (the pack divides, the unpack multiplies back), and for float32
 *   travelling as float16/bfloat16 under HK_COMPRESSION.
 * - HK_MIN/HK_MAX on floats: if either operand is NaN, the result is NaN.
 * Summation order: the ring reduces segment s starting from rank s+1 in ring
 * order, so floating-point sums may differ in the last bits from a serial
 * left-to-right sum, but never between ranks.
 */
typedef enum hk_op {
  HK_SUM = 0,
  HK_AVERAGE = 1,
  HK_MIN = 2,
  HK_MAX = 3,
  HK_PRODUCT = 4,
} hk_op;

/** An operation in flight. Returned by the *_async calls; must be passed
 *  exactly once to hk_wait(), which releases it. Opaque. */
typedef struct hk_handle_s *hk_handle;

/**
 * Joins the job. Reads the environment hkrun sets (HK_RANK, HK_SIZE,
 * HK_LOCAL_RANK, HK_LOCAL_SIZE, HK_RENDEZVOUS, HK_SECRET); without HK_RANK
 * the process is a world of size 1 and no network is used. Registers with
 * hkrun's rendezvous, connects to the peers (every connection proves it
 * knows the job's secret), and starts the background thread. A job that
 * mpirun or srun started (also through hkrun -H) loads hk's MPI module,
 * libhk_mpi.so, and exchanges addresses over MPI instead; other jobs
 * never load MPI.
 * Blocks until every rank has joined or HK_START_TIMEOUT_S (default 60 s)
 * passes. In an elastic job (hkrun --min-np; docs/elastic.md) a worker
 * lost before the job formed is left out: hk_rank and hk_size may then be
 * less than hkrun's HK_RANK and HK_SIZE (the ranks are renumbered in
 * order), and a loss while the ranks connect or set up the job makes
 * them form it again before hk_init returns.
 * Thread-safety: call once, from one thread, before any other hk call.
 * Errors: HK_ERR_ALREADY_INITIALIZED, HK_ERR_CONFIG (a malformed HK_*
 * variable, named in the message; HK_SOCKET_IFNAME naming an interface
 * this machine lacks, listing those it has; under mpirun, an MPI module
 * that cannot be loaded, saying why), HK_ERR_TIMEOUT, HK_ERR_AUTH,
 * HK_ERR_PROTOCOL, HK_ERR_SYSTEM, HK_ERR_NOMEM, HK_ERR_PEER_LOST.
 */
HK_API hk_status hk_init(void);

/**
 * Leaves the job: tells every rank this one is done, stops the background
 * thread, closes connections and frees everything hk_init allocated.
 * Operations still pending on any rank complete with HK_ERR_SHUTDOWN (their
 * handles must still be waited). Safe to call after a failure. Under hkrun
 * a process whose hk_init succeeded must call this before it exits: one
 * that exits without it, even with status 0, fails the job (hkrun names
 * it, aborts the other ranks and exits 1), as mpirun treats a process that
 * exits without MPI_Finalize.
 * Thread-safety: call once, from one thread, with no other hk call running.
 * Errors: HK_ERR_NOT_INITIALIZED; otherwise HK_OK (a job that had already
 * failed returns its failure status, e.g. HK_ERR_PEER_LOST). In an elastic
 * job, HK_ERR_RANKS_CHANGED: a rank was lost before this one left (e.g.
 * one that exited without hk_shutdown after the last step); this rank has
 * left all the same, and a program at its end may take it as success.
 */
HK_API hk_status hk_shutdown(void);

/**
 * Elastic jobs (hkrun --min-np N; docs/elastic.md): re-forms the job after
 * a call failed with HK_ERR_RANKS_CHANGED, or after
 * hk_elastic_hosts_updated said workers wait to join (then with them, and
 * every rank calls it at the same commit), without restarting this
 * process. Tears down this rank's old job (the background thread, links,
 * shared-memory segment, rings, process sets, response cache; the device
 * communicator is aborted, never destroyed, as peers may hang in it),
 * registers again with hkrun's rendezvous on the connection hk_init
 * opened, waits until every surviving worker has, and builds the new job
 * as hk_init does. Afterwards hk_rank, hk_size, hk_local_rank and the
 * others give the new values (ranks are renumbered 0..size-1, survivors
 * in their old order); handles of the old job have completed (with
 * HK_ERR_RANKS_CHANGED) and must still be waited; process sets other than
 * the world are gone (add them again). Nothing is rolled back for the
 * caller: it restores its last committed state itself (Horovod's
 * State.restore), then makes every rank agree on it (e.g. a broadcast
 * from rank 0), as the new job's ranks may have seen different steps.
 * Blocks until the job has re-formed, hkrun fails it, or
 * HK_START_TIMEOUT_S + HK_ELASTIC_TIMEOUT_S pass.
 * Thread-safety: as hk_init: one thread, no other hk call running.
 * Errors: HK_ERR_NOT_INITIALIZED (no job); HK_ERR_INVALID_ARG (not an
 * elastic job, or it has not changed: nothing failed with
 * HK_ERR_RANKS_CHANGED and nobody waits to join); HK_ERR_RANKS_CHANGED (another
 * rank was lost while the job re-formed: call it again); HK_ERR_PEER_LOST
 * (hkrun failed the job, e.g. fewer than --min-np workers were left for
 * --elastic-timeout: the message is hkrun's and says what is missing; or
 * hkrun died); HK_ERR_TIMEOUT; and hk_init's errors. After an error the
 * process is still in its (failed) job: hk_shutdown, or call again after
 * HK_ERR_RANKS_CHANGED.
 */
HK_API hk_status hk_elastic_reset(void);

/**
 * Elastic jobs: whether workers wait to join the job (an agent started on
 * a new host, or on one whose workers were lost: docs/elastic.md). Call
 * it at each commit, after the step's handles were waited: *updated = 1
 * when they do; then call hk_elastic_reset, which re-forms the job with
 * them (nothing to restore: the state just committed is current), and
 * make every rank agree on the state (the broadcast from rank 0 that
 * follows any reset; the newcomers' hk_init returns into the same
 * broadcast). Every rank gets the same answer at the same commit: rank 0
 * learns of the newcomers from hkrun, and tells every rank with the
 * responses of a round of the world's tensors, before that round's
 * handles complete; once 1, the answer stays 1 until the job re-forms.
 * No collective: it reads a flag (Horovod's check_host_updates does a
 * broadcast at each commit). A program that never calls it simply never
 * admits anyone (the newcomers' hk_init times out).
 * updated: out, 0 or 1 (0 outside an elastic job).
 * Thread-safety: any thread.
 * Errors: HK_ERR_INVALID_ARG (updated NULL), HK_ERR_NOT_INITIALIZED; the
 * job's failure when it has failed (e.g. HK_ERR_RANKS_CHANGED: restore
 * and call hk_elastic_reset), *updated then 0. Once workers wait to join
 * it returns HK_OK and 1 even after the generation stopped for them (the
 * first rank to call hk_elastic_reset stops it for every rank).
 */
HK_API hk_status hk_elastic_hosts_updated(int *updated);

/*
 * The job's shape. Each of the six returns -1 outside a job: before
 * hk_init, after an hk_init that failed, and after hk_shutdown (this
 * process has left its job; the values come back only with a later
 * hk_init that succeeds). Between hk_init and hk_shutdown they never
 * change. Thread-safe, but not during hk_init or hk_shutdown (which no
 * other hk call may overlap).
 */
/** This process's rank in [0, size), or -1 outside a job. */
HK_API int hk_rank(void);
/** The world size (number of ranks), or -1 outside a job. */
HK_API int hk_size(void);
/** The rank among the processes on this host, or -1 outside a job. */
HK_API int hk_local_rank(void);
/** The number of ranks on this host, or -1 outside a job. */
HK_API int hk_local_size(void);
/** The index of this rank's host among the job's hosts (hosts ordered by
 *  their lowest rank; 0 on a single host), or -1 outside a job. */
HK_API int hk_cross_rank(void);
/** The number of hosts in the job (1 on a single host), or -1 outside a
 *  job. */
HK_API int hk_cross_size(void);

/**
 * Starts an allreduce of `count` elements of `dtype` under `name`: when it
 * completes, recvbuf on every rank holds op(sendbuf of all ranks), bitwise
 * identical on every rank (see hk_op for the arithmetic).
 * sendbuf == recvbuf is allowed (in place); otherwise the two must not
 * overlap. count may be 0 (completes when all ranks submitted it).
 * Ownership: the caller owns both buffers and must keep them valid and not
 * modify sendbuf (nor touch recvbuf) until hk_wait returns. `name` is copied.
 * On HK_OK, *handle receives a handle to pass to hk_wait exactly once.
 * Errors (returned at once, on this rank only): HK_ERR_INVALID_ARG,
 * HK_ERR_DUPLICATE_NAME, HK_ERR_NOT_INITIALIZED, and the job's failure
 * status if it already failed. Errors found by negotiation
 * (HK_ERR_MISMATCH) or during the transfer arrive through hk_wait.
 */
HK_API hk_status hk_allreduce_async(const char *name, const void *sendbuf,
                                    void *recvbuf, size_t count, hk_dtype dtype,
                                    hk_op op, hk_handle *handle);

/**
 * hk_allreduce_async with Horovod's scale factors: every rank's input is
 * multiplied by `prescale` before the reduction (while it is copied into
 * the fusion buffer, or into recvbuf for a tensor that runs alone) and the
 * result by `postscale` after it (after the division of HK_AVERAGE). Both
 * must be finite (else HK_ERR_INVALID_ARG) and equal on every rank (else
 * HK_ERR_MISMATCH). A factor of exactly 1 changes nothing. Otherwise, on
 * host and device tensors alike:
 * - floating types multiply in the type (binary32 for float16/bfloat16,
 *   then rounded to nearest even);
 * - integers multiply in binary64, `(double)x * factor` (an int64 beyond
 *   2^53 is rounded by the conversion), then truncate toward zero and
 *   saturate to the type's range: 0.5 on int32 -7 gives -3, 2.0 on int8
 *   100 gives 127, -1.0 on uint8 5 gives 0, 1e30 on int64 gives
 *   INT64_MAX. This is Horovod's rule (its ScaleBuffer computes
 *   `factor * x` with a double factor and converts back, on CPU and GPU)
 *   where the result fits the type; where it does not, Horovod's C++
 *   conversion is undefined (what comes out depends on the compiler and
 *   the processor), and hk saturates. Horovod scales no int16 (its
 *   ScaleBuffer has no case for it; its PyTorch front reduces no int16).
 *   With HK_AVERAGE, hk divides the wrapped sum by the world size (hk_op)
 *   and then multiplies by postscale: Horovod's NCCL path does the same;
 *   its MPI and Gloo paths multiply once, by postscale / size, so results
 *   differ where the division truncated (a sum of 5 over 2 ranks with
 *   postscale 2: 5 there, 4 in hk).
 * Otherwise as hk_allreduce_async, which is this call with 1.0 and 1.0.
 */
HK_API hk_status hk_allreduce_scaled_async(const char *name,
                                           const void *sendbuf, void *recvbuf,
                                           size_t count, hk_dtype dtype,
                                           hk_op op, double prescale,
                                           double postscale, hk_handle *handle);

/**
 * Starts a broadcast of `count` elements of `dtype` from rank `root` under
 * `name`: when it completes, buf on every rank equals buf on root.
 * Ownership and errors as hk_allreduce_async; root outside [0, size) is
 * HK_ERR_INVALID_ARG; ranks naming different roots get HK_ERR_MISMATCH.
 */
HK_API hk_status hk_broadcast_async(const char *name, void *buf, size_t count,
                                    hk_dtype dtype, int root,
                                    hk_handle *handle);

/**
 * Starts an allgather (Horovod's allgather; MPI's allgatherv): rank r
 * contributes `rows` rows of `row_elems` elements (the first dimension may
 * differ between ranks; the row size must not). When it completes, every
 * rank holds the concatenation of all contributions in rank order, in a
 * buffer hk allocated with malloc: *recvbuf receives it (the caller frees
 * it; NULL when the total is 0), and rows_per_rank (if not NULL, size()
 * entries) receives each rank's row count. Both are written by the time
 * hk_wait returns HK_OK. Ranks disagreeing on dtype or row_elems get
 * HK_ERR_MISMATCH. Rows that, summed over the ranks, exceed SIZE_MAX / 8
 * elements fail on every rank with HK_ERR_INVALID_ARG naming the ranks and
 * their rows (so does an alltoall's); an output of 16 MiB or more that some
 * rank cannot allocate fails on every rank with HK_ERR_NOMEM naming those
 * ranks, and the job goes on. Algorithm: ring allgather, pipelined. Errors
 * as hk_allreduce_async; NULL recvbuf is HK_ERR_INVALID_ARG.
 */
HK_API hk_status hk_allgather_async(const char *name, const void *sendbuf,
                                    size_t rows, size_t row_elems,
                                    hk_dtype dtype, void **recvbuf,
                                    size_t *rows_per_rank, hk_handle *handle);

/**
 * Starts a reduce-scatter: every rank passes `rows` rows of `row_elems`
 * elements; the rows are reduced across ranks (op as in hk_op) and split
 * as evenly as possible: rank r receives rows [r*q + min(r, m), ...) where
 * q = rows / size and m = rows % size (the first m ranks get one extra
 * row). recvbuf must hold ceil(rows/size) * row_elems elements; *rows_out
 * (if not NULL) receives this rank's row count. Ranks must agree on rows,
 * row_elems, dtype and op (else HK_ERR_MISMATCH). Algorithm: ring
 * reduce-scatter (N-1 steps). Errors as hk_allreduce_async.
 */
HK_API hk_status hk_reducescatter_async(const char *name, const void *sendbuf,
                                        size_t rows, size_t row_elems,
                                        hk_dtype dtype, hk_op op, void *recvbuf,
                                        size_t *rows_out, hk_handle *handle);

/**
 * Starts an alltoall with per-rank splits: rank r sends splits[j] rows of
 * `row_elems` elements to rank j (splits has size() entries; its sum is
 * the number of rows in sendbuf, taken in rank order). When it completes,
 * *recvbuf holds (hk malloc'd; the caller frees; NULL when empty) the rows
 * received from every rank in rank order, and recv_splits (if not NULL,
 * size() entries) how many came from each. Ranks must agree on dtype and
 * row_elems. Algorithm: pairwise exchange, step k sending to rank r+k and
 * receiving from r-k, over direct connections. Errors as
 * hk_allreduce_async.
 */
HK_API hk_status hk_alltoall_async(const char *name, const void *sendbuf,
                                   const size_t *splits, size_t row_elems,
                                   hk_dtype dtype, void **recvbuf,
                                   size_t *recv_splits, hk_handle *handle);

/**
 * Starts a grouped allreduce: n tensors (names[i], sendbufs[i],
 * recvbufs[i], counts[i] elements; in place allowed per tensor) that are
 * negotiated as one unit: none of them runs before all of them are ready
 * on every rank, and they are then fused together (up to the fusion
 * threshold per fusion buffer). One handle covers the group; it completes
 * when every member has, with the first error among them. The group is
 * identified by names[0] and n, which must agree across ranks.
 * Errors as hk_allreduce_async; n == 0 is HK_ERR_INVALID_ARG.
 */
HK_API hk_status hk_grouped_allreduce_async(const char *const *names,
                                            const void *const *sendbufs,
                                            void *const *recvbufs,
                                            const size_t *counts, size_t n,
                                            hk_dtype dtype, hk_op op,
                                            hk_handle *handle);

/*
 * One way to describe any collective: hk_collective and hk_submit
 *
 * The functions above are shorthands for the common cases. hk_submit takes
 * a whole description instead, which is the one way to reach what they do
 * not spell out: a process set, a tensor's shape (checked across ranks
 * like its dtype), and groups of allgathers or reduce-scatters.
 */

/** A process set: a group of ranks with its own negotiation, fusion,
 *  response cache, rings and device communicator (MPI's communicator,
 *  NCCL's split communicator). HK_WORLD is every rank. See "Process
 *  sets" below. */
typedef int32_t hk_process_set;
#define HK_WORLD 0

/** The collectives hk_submit runs. */
typedef enum hk_collective_kind {
  HK_ALLREDUCE = 1,
  HK_BROADCAST = 2,
  HK_BARRIER = 3, /* every member of the set: as hk_barrier */
  HK_ALLGATHER = 4,
  HK_REDUCESCATTER = 5,
  HK_ALLTOALL = 6,
  HK_JOIN = 7, /* as hk_join, among the members of the set */
} hk_collective_kind;

/**
 * One collective, described whole. Zero-initialise it
 * (`hk_collective c = {0};` or designated initialisers) and set the fields
 * its kind uses; the others are ignored. Every buffer and count means what
 * the shorthand above for that kind says it means (hk_allreduce_async,
 * hk_broadcast_async, hk_allgather_async, hk_reducescatter_async,
 * hk_alltoall_async), with ranks counted within the process set:
 *
 *   field        allreduce broadcast allgather reducescatter alltoall
 *   sendbuf          x                   x          x           x
 *   recvbuf          x       x (in/out)             x
 *   count            x       x
 *   rows                                 x          x
 *   row_elems                            x          x           x
 *   op               x                              x
 *   prescale,        x                              x
 *    postscale
 *   root                     x
 *   splits                                                      x
 *   recvbuf_out                          x                      x
 *   rows_out                             x          x (1)       x
 *
 * HK_BARRIER and HK_JOIN take only set (and a join rows_out: one entry,
 * the rank in the set that joined last); they are named by their order
 * on this rank's set, as hk_barrier and hk_join are, so name is ignored.
 * hk_submit's handle makes them asynchronous (MPI_Ibarrier).
 *
 * row_elems 0 is taken as 1. prescale and postscale 0 are taken as 1 (a
 * zero-initialised description is unscaled); otherwise they multiply
 * every rank's input before the reduction and the result after it (after
 * HK_AVERAGE's division), as in hk_allreduce_scaled_async, for every
 * dtype: floating types in the type (binary32 for 16-bit ones), integers
 * through binary64, truncated toward zero and saturated to the type's
 * range. shape (ndims extents, 0 < ndims <= HK_MAX_DIMS; ndims 0: none
 * given) is the tensor's shape: its product must be count (allreduce,
 * broadcast) or rows x row_elems (allgather, reducescatter, where
 * shape[0] is the rows); ranks that pass different shapes (every extent;
 * for allgather and alltoall every extent but the first) get
 * HK_ERR_MISMATCH on every rank, naming both shapes and the ranks. set:
 * HK_WORLD, or a process set this rank is a member of; ranks (root, the
 * blocks of allgather and alltoall, a reduce-scatter's rows, splits and
 * rows_out entries) are then ranks in the set, and HK_AVERAGE divides by
 * its size.
 */
typedef struct hk_collective {
  hk_collective_kind kind;
  const char *name;   /* the tensor's name, as for the shorthands */
  hk_process_set set; /* HK_WORLD (0) or a process set */
  hk_dtype dtype;
  hk_op op;             /* allreduce, reducescatter */
  const void *sendbuf;  /* allreduce, allgather, reducescatter, alltoall */
  void *recvbuf;        /* allreduce, reducescatter; broadcast's buffer */
  size_t count;         /* allreduce, broadcast: elements */
  size_t rows;          /* allgather: this rank's rows; reducescatter: rows */
  size_t row_elems;     /* elements per row (allgather, reducescatter,
                           alltoall); 0 is 1 */
  int root;             /* broadcast: the root's rank in the set (the
                           world: its rank) */
  double prescale;      /* allreduce, reducescatter; 0 is 1 */
  double postscale;     /* allreduce, reducescatter; 0 is 1 */
  const size_t *splits; /* alltoall: rows to each rank of the set */
  void **recvbuf_out;   /* allgather, alltoall: receives hk's output buffer
                           (free it with hk_free; NULL when empty) */
  size_t *rows_out;     /* allgather, alltoall: rows from each rank of the
                           set (set-size entries); reducescatter: this
                           rank's rows (one entry); may be NULL */
  int ndims;            /* the shape's dimensions; 0: no shape given */
  const int64_t *shape; /* ndims extents, each >= 0 */
} hk_collective;

/**
 * Starts the collective c describes (copied: c and its name, shape and
 * splits may go once this returns; the buffers may not). On HK_OK
 * *handle receives a handle for hk_wait, as the shorthands do.
 * Thread-safety: as the shorthands. Errors (at once, on this rank only):
 * HK_ERR_INVALID_ARG naming the field (an unknown kind, dtype or op, a
 * shape whose product is not the count, a rank outside the set, a root
 * outside the set, NULL buffers where the kind needs them),
 * HK_ERR_DUPLICATE_NAME, HK_ERR_NOT_INITIALIZED, the job's failure status;
 * later, through hk_wait: HK_ERR_MISMATCH (ranks disagree: dtype, count,
 * shape, op, ...) and the transfer's errors.
 */
HK_API hk_status hk_submit(const hk_collective *c, hk_handle *handle);

/**
 * Starts n collectives of one kind and one process set as a group (the
 * generalisation of hk_grouped_allreduce_async): they are negotiated as
 * one unit, none runs before all are ready on every rank of the set, and
 * they are then run together: allreduces and reduce-scatters of one
 * dtype and op, and allgathers of one dtype, share a fusion buffer (up to
 * HK_FUSION_THRESHOLD bytes each); broadcasts and alltoalls run one after
 * the other. The group is identified by cs[0].name and n, which must
 * agree across ranks. One handle covers the group; it completes when
 * every member has, with the first error among them.
 * Errors as hk_submit; n == 0, members of different kinds or sets, and a
 * name twice in the group are HK_ERR_INVALID_ARG (the last
 * HK_ERR_DUPLICATE_NAME).
 */
HK_API hk_status hk_submit_group(const hk_collective *cs, size_t n,
                                 hk_handle *handle);

/*
 * Process sets
 *
 * A process set is a group of the job's ranks that runs collectives of its
 * own (hk_collective.set), concurrently with the other sets and the world:
 * MPI's communicators, NCCL's ncclCommSplit, Horovod's process sets. Each
 * has its own negotiation (rank 0 of the job coordinates every set but
 * answers each only to its members, so a set whose tensors wait never
 * holds up another's), response cache, fusion (a fused batch holds
 * tensors of one set), ring over its members (in the flat ring's
 * topology order, over the links between them: shared memory inside a
 * host, TCP across) and, for device tensors, device communicator among
 * its members on each host. hk_collective.set names the set; the
 * shorthands above run on HK_WORLD.
 *
 * Ranks in a set: the members are numbered 0..size-1 in the order of
 * their ranks in the job (hk_process_set_ranks), whatever order they were
 * given in; a broadcast's root, the blocks of allgather and alltoall,
 * reduce-scatter's split and the rank a join reports are counted so, as
 * ranks in an MPI communicator are. (Horovod's Python API takes a
 * broadcast's root_rank as a rank of the job: a front end for it maps it
 * with hk_process_set_ranks.)
 *
 * Names: a tensor name is in flight on a rank once, whatever its set (the
 * names of hk.h's conventions are this rank's, across sets).
 * Ids are given in the order sets are added, the same on every rank
 * (HK_PROCESS_SETS's first, from 1); an id is never given twice, so a
 * removed set's id stays an error. The same ranks may form several sets.
 * Every call below is safe on any thread; the two that change the table
 * are collectives of the whole job.
 */

/**
 * Adds a process set of the n ranks ranks[0..n) (ranks of the job, in any
 * order; the set numbers them in ascending order) and puts its id in
 * *out. A collective of the world: every rank of the job calls it, in the
 * same order relative to its other hk_process_set_add and
 * hk_process_set_remove calls, with the same ranks (as a set), members or
 * not; a rank outside the set gets the id too (hk_process_set_rank then
 * says -1). Blocks until every rank has called it (it is negotiated like
 * a barrier, so collectives already submitted run meanwhile) and every
 * member has made the set's ring (and device communicator id).
 * Thread-safety: any thread; one at a time per process is what makes the
 * order the same everywhere.
 * Errors, the same on EVERY rank, and no set is added: HK_ERR_INVALID_ARG
 * when any rank passed a NULL ranks or out, n outside [1, size], a rank
 * outside [0, size) or a rank twice (the message names the rank that did
 * and what it passed); HK_ERR_MISMATCH when ranks passed different sets
 * (the message names which ranks gave which members, the first 8 of
 * each); a rank calling hk_process_set_remove instead is HK_ERR_MISMATCH
 * naming both calls. HK_ERR_NOT_INITIALIZED, and the job's failure.
 */
HK_API hk_status hk_process_set_add(const int *ranks, int n,
                                    hk_process_set *out);

/**
 * Removes process set `set`: a collective of the world, as
 * hk_process_set_add (every rank calls it with the same set, in the same
 * order relative to the other adds and removes). Operations of the set
 * that have not run when the removal runs (submitted on some members and
 * not yet on others, or queued here) complete with HK_ERR_SHUTDOWN on
 * every rank that submitted them, naming the set: nothing waits for a set
 * that is gone. Later submits to it are HK_ERR_INVALID_ARG. Its ring,
 * device communicator, response cache and negotiation are freed; its id
 * is not given again.
 * Errors, the same on every rank: HK_ERR_INVALID_ARG for HK_WORLD, an id
 * never given or a set removed already; HK_ERR_MISMATCH when ranks named
 * different sets (naming which ranks gave which). HK_ERR_NOT_INITIALIZED,
 * and the job's failure.
 */
HK_API hk_status hk_process_set_remove(hk_process_set set);

/** This rank's rank in process set `set` (0..size-1, in the order of the
 *  members' ranks in the job), or -1: not a member, an unknown or removed
 *  set, or before hk_init. HK_WORLD: hk_rank(). Thread-safe. */
HK_API int hk_process_set_rank(hk_process_set set);

/** The number of ranks in process set `set`, or -1 for an unknown or
 *  removed set or before hk_init (a member or not). Thread-safe. */
HK_API int hk_process_set_size(hk_process_set set);

/**
 * Writes the job ranks of process set `set`, ascending (set rank j is
 * ranks[j]), into ranks[0..size) (hk_process_set_size). Thread-safe.
 * Errors: HK_ERR_INVALID_ARG (an unknown or removed set, a NULL array,
 * cap below the set's size: the message says its size),
 * HK_ERR_NOT_INITIALIZED.
 */
HK_API hk_status hk_process_set_ranks(hk_process_set set, int *ranks, int cap);

/**
 * Horovod's join, for ranks that run out of data early: blocks until every
 * rank has called hk_join. Meanwhile the other ranks' collectives do not
 * wait for this one: it takes part in them with the identity of the op
 * (0 for sum and average, 1 for product, the largest/smallest value for
 * min/max) and no rows for allgather and alltoall, and HK_AVERAGE divides
 * by the number of ranks that contributed. A broadcast whose root has
 * joined fails with HK_ERR_MISMATCH. *last_rank (if not NULL) receives the
 * rank that joined last. Errors as hk_wait. In a process set:
 * hk_submit's HK_JOIN (the join and what it covers are the set's).
 */
HK_API hk_status hk_join(int *last_rank);

/** Blocking forms: the *_async call followed by hk_wait. */
HK_API hk_status hk_allgather(const char *name, const void *sendbuf,
                              size_t rows, size_t row_elems, hk_dtype dtype,
                              void **recvbuf, size_t *rows_per_rank);
HK_API hk_status hk_reducescatter(const char *name, const void *sendbuf,
                                  size_t rows, size_t row_elems, hk_dtype dtype,
                                  hk_op op, void *recvbuf, size_t *rows_out);
HK_API hk_status hk_alltoall(const char *name, const void *sendbuf,
                             const size_t *splits, size_t row_elems,
                             hk_dtype dtype, void **recvbuf,
                             size_t *recv_splits);
HK_API hk_status hk_grouped_allreduce(const char *const *names,
                                      const void *const *sendbufs,
                                      void *const *recvbufs,
                                      const size_t *counts, size_t n,
                                      hk_dtype dtype, hk_op op);

/**
 * Blocks until the operation completes, releases the handle, and returns
 * its status (HK_OK, HK_ERR_MISMATCH, HK_ERR_PEER_LOST, HK_ERR_SHUTDOWN,
 * HK_ERR_TIMEOUT, ...). On error hk_last_error() on this thread gives the
 * detailed message. The handle must not be used afterwards.
 * Thread-safety: any thread, but each handle is waited exactly once.
 * Errors: HK_ERR_INVALID_ARG for a NULL handle.
 */
HK_API hk_status hk_wait(hk_handle handle);

/**
 * Tests, without blocking, whether the operation completed: *done is set to
 * 1 if it did (then call hk_wait to get its status and release it), 0 if
 * not. Does not release the handle.
 * Errors: HK_ERR_INVALID_ARG for a NULL handle or NULL done.
 */
HK_API hk_status hk_poll(hk_handle handle, int *done);

/** Blocking allreduce: hk_allreduce_async followed by hk_wait. */
HK_API hk_status hk_allreduce(const char *name, const void *sendbuf,
                              void *recvbuf, size_t count, hk_dtype dtype,
                              hk_op op);

/** Blocking broadcast: hk_broadcast_async followed by hk_wait. */
HK_API hk_status hk_broadcast(const char *name, void *buf, size_t count,
                              hk_dtype dtype, int root);

/**
 * Blocks until every rank has called hk_barrier (the n-th call on one rank
 * pairs with the n-th call on every other). Errors as hk_wait. A process
 * set's barrier: hk_submit's HK_BARRIER.
 */
HK_API hk_status hk_barrier(void);

/*
 * GPU tensors
 *
 * Every collective above accepts device pointers (memory from cudaMalloc,
 * or from the emulated device of HK_DEVICE=emu) as well as host pointers.
 * hk finds each buffer's memory kind itself (CUDA pointer attributes);
 * a tensor's kind is negotiated like its dtype: a rank whose sendbuf and
 * recvbuf are in different kinds, or ranks that disagree on the kind of
 * one tensor, get HK_ERR_MISMATCH on every rank before any device work
 * starts. Outputs hk allocates (allgather, alltoall) are in the input's
 * kind: free them with hk_free().
 *
 * The backend: HK_DEVICE = auto (default: cuda where libhk_cuda.so loads
 * and sees a GPU, else host tensors only) | cuda | emu | none. Each
 * process uses the GPU HK_GPU names (an index among the devices it sees,
 * so CUDA_VISIBLE_DEVICES applies first), else the one at its local rank
 * modulo the number it sees (one visible GPU: that one). A device tensor
 * on another GPU gets HK_ERR_MISMATCH on every rank. hk leaves the calling
 * thread's current device as the caller set it (hk_init, submits,
 * hk_wait_stream and hk_free make hk's GPU current only for their own
 * calls).
 *
 * Streams: a device tensor is read only after the work queued on its
 * producer stream before the submit has finished; hk never blocks the
 * submitting thread to find out (its own stream waits on an event it
 * records on the producer stream at submit). The producer stream is a
 * per-thread setting, as cuBLAS's handle stream is: hk_set_stream().
 * Completion: hk_wait() (host), or hk_wait_stream(), which also orders
 * the caller's stream after the result. hk_wait_stream may return while
 * hk's own stream still reads the tensor: before its memory is used for
 * anything else on another stream, order that stream after
 * hk_device_stream() (an event recorded there).
 *
 * Algorithms for device allreduce (docs/design.md, "The GPU data plane"): one
 * host: the device communicator (NCCL); several hosts: NCCL reduce-
 * scatter inside each host, the shard's ring allreduce across hosts from
 * pinned host memory over hk's links, NCCL allgather; one GPU per host,
 * or HK_ALLREDUCE_ALGO=ring: staged through pinned memory over hk's flat
 * ring. Copies and the network are pipelined in 4 MiB chunks.
 *
 * Bits: with hk's own schedules (HK_ALLREDUCE_ALGO=ring) a device tensor
 * reduces exactly as a host tensor does (the ring's documented order) and
 * fusion never changes a bit. NCCL's order depends on its channels: ranks
 * still agree bit for bit, but fused and unfused results, and results on
 * different GPU counts, may differ in the last bits.
 *
 * HK_COMPRESSION = fp16 | bf16 casts float32 device tensors to that type
 * when they are packed (after prescale, round to nearest even), reduces
 * them in it (each pairwise step rounded, as for float16 tensors) and
 * widens them when unpacked (then the average's division and postscale in
 * binary32): about 3 (fp16) or 2 (bf16) significant decimal digits, and
 * fp16 overflows above 65504 (Horovod's Compression.fp16 has the same
 * limits). It halves the bytes every link carries.
 */

/**
 * Sets the CUDA stream (a cudaStream_t, or an emu stream) that produced
 * the device tensors this thread submits from now on; NULL (the initial
 * value) is the legacy default stream. hk records an event on it at each
 * submit of a device tensor. Thread-local; never fails; may be called
 * before hk_init.
 */
HK_API void hk_set_stream(void *stream);

/** The calling thread's stream set by hk_set_stream (NULL by default). */
HK_API void *hk_get_stream(void);

/**
 * The GPU-side completion of a device allreduce: blocks only until hk has
 * negotiated the tensor and queued its device work (never for the GPU to
 * finish it), then makes `stream` (a cudaStream_t; NULL: the legacy
 * default stream) wait GPU-side for the result, so work queued on it
 * afterwards reads the reduced values, and releases the handle. The
 * handle must not be used afterwards. A failure found after this returned
 * (an asynchronous NCCL error, say) fails the job: every later hk call
 * returns it. For other handles (host tensors, groups, collectives other
 * than allreduce) it is hk_wait. Errors as hk_wait; HK_ERR_DEVICE when the
 * stream cannot be made to wait.
 */
HK_API hk_status hk_wait_stream(hk_handle handle, void *stream);

/**
 * hk's own device stream (a cudaStream_t, or an emu stream): the one
 * stream on which hk reads and writes the buffers of every device tensor
 * (after waiting for the producer stream's event: the pack into its fusion
 * buffer, the unpack, the staging copies of the collectives that go
 * through host memory). Once hk_wait or hk_wait_stream has returned for a
 * handle, all of hk's reads and writes of that handle's buffers are queued
 * on this stream, so an event recorded on it afterwards completes only
 * after them. That is what a caching allocator needs before it hands a
 * freed buffer to work on another stream: PyTorch's
 * tensor.record_stream(torch.cuda.ExternalStream(stream)), which hk.torch
 * does for the CUDA tensors of every operation it completes. Only record
 * events on it and make other streams wait on them; never destroy it or
 * queue other work on it. Valid from hk_init to hk_shutdown. hk makes its
 * streams (and with them the CUDA context on its GPU) at the first device
 * tensor, or at the first call of this function if that comes first.
 * Returns NULL when hk is not initialised or has no device backend
 * (HK_DEVICE=none, or auto without a GPU), or when the stream cannot be
 * made; never fails. Thread-safety: any thread.
 */
HK_API void *hk_device_stream(void);

/**
 * Frees a buffer hk allocated for an output (hk_allgather, hk_alltoall):
 * device memory through the device backend, host memory with free().
 * NULL is fine. Call it before hk_shutdown for device buffers.
 * Thread-safety: any thread.
 */
HK_API void hk_free(void *p);

/** Size in bytes of one element of dtype, or 0 for an unknown dtype. */
HK_API size_t hk_dtype_size(hk_dtype dtype);

/** Lower-case name of a dtype ("float32"), or "unknown". Static storage. */
HK_API const char *hk_dtype_name(hk_dtype dtype);

/** Lower-case name of an op ("sum"), or "unknown". Static storage. */
HK_API const char *hk_op_name(hk_op op);

/** A short static description of a status code ("peer lost"). */
HK_API const char *hk_strerror(hk_status status);

/**
 * The detailed message of the last failed hk call on the calling thread
 * (the string is empty if none failed). Thread-local storage, valid until
 * the next hk call on this thread; copy it to keep it.
 */
HK_API const char *hk_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HK_HK_H */
