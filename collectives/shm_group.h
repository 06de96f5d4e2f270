/*
 * shm_group.h - single-copy collectives among the ranks of one host
 * through their shared segment (collectives/transport/shm_seg.h): the
 * engine behind the ring collectives when every member of a ring is on
 * this host (collectives/shm_ring.h).
 *
 * Idea (Open MPI's single-copy components, DeepSpeed's shared-memory
 * allreduce): every rank copies what its peers need into its own slot
 * once; each rank then reads its peers' slots straight from shared
 * memory and reduces them into its own result; then everyone copies the
 * results out of the owners' slots. Per rank and byte of the buffer:
 * one copy in, one reduction, one copy out; no byte stream, no system
 * call unless a rank sleeps.
 *
 * A job is split like the ring: N segments (seg[0..N], element offsets;
 * N = members), segment j owned by position owner[j]. Large buffers run
 * in rounds through the fixed slots: slice = slot_bytes / N (a multiple
 * of 64 bytes), round t covers elements [seg[j] + t*S, seg[j] + (t+1)*S)
 * of every segment j (S = slice / element size). Each rank's slot has two
 * halves used by alternate rounds, so a rank fills round t+1 while its
 * peers still read round t. Memory stays bounded: 2 x slot_bytes per rank,
 * whatever the buffer size.
 *
 * One round, three phases, each ended by publishing the rank's progress
 * counter (3 values per round, counted over the job's whole life, so no
 * reset between calls: every member runs the same calls with the same
 * round counts):
 *   A copy-in:  wait until every member has finished round t-2 (the half
 *               is free); copy this rank's slice of every segment it does
 *               not own (reductions), or of the segments it owns
 *               (gathers), into its slot half t mod 2.
 *   B reduce:   wait until every member finished A; for each owned
 *               segment fold the N slices in ring order (below), apply
 *               the finish, write the result to its slot and its buffer.
 *   C copy-out: for each segment it does not own, wait until the owner
 *               finished B, copy the owner's slice into the buffer.
 * Waits spin briefly, then sleep on the futex doorbell, checking the
 * peers' liveness (collectives/transport/shm_wait.h).
 *
 * One-shot: a whole allreduce of at most HK_SHM_ONESHOT_BYTES x 4/N^2
 * (that fits a slot half) runs as one round of a different shape
 * (TensorRT-LLM's "one-shot" custom allreduce): every rank copies its whole
 * buffer into its slot, waits for all, and folds every segment itself from
 * every slot, in the order below. One synchronisation instead of three; each
 * rank reads n times the buffer, which for small buffers costs less than
 * the two extra phases.
 *
 * Reduction order (the bits): segment j is folded starting at ring
 * position start[j] and going round: v = x[start]; then for i = 1..N-1:
 * v = hk_reduce(x[start+i], v) (positions mod N; hk_reduce's first operand
 * is the later rank's own value, its second the running value). For the
 * ring's allreduce start[j] = j and owner[j] = j-1, for its reduce-scatter
 * start = owner+1: exactly the association and operand order of
 * collectives/ring.c's schedules (a rank receiving the running value from
 * its left reduces `mine op incoming`), so results are bitwise identical
 * to the ring over TCP links, for every dtype and op, NaNs and signed
 * zeros included (tests/unit/test_shm_group.c checks it against the
 * ring). The finish (average, postscale) is applied once, by the owner
 * (one-shot: by every rank, to the same values, so the same bits).
 *
 * Thread-safety: a group is used by one thread (the background thread).
 */
#ifndef HK_COLLECTIVES_SHM_GROUP_H
#define HK_COLLECTIVES_SHM_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/ring.h"
#include "collectives/transport/shm_seg.h"
#include "collectives/transport/shm_wait.h"
#include "hk/hk.h"

/* One-shot allreduce up to HK_SHM_ONESHOT_BYTES x 4 / n^2 bytes (n
 * members; and what fits a slot half): 256 KiB at np 2, 64 KiB at np 4,
 * 16 KiB at np 8. It moves about 3n bytes per byte of the buffer (a copy
 * in, n-1 folds), the three phases about 5 - 1/n, but it synchronises
 * once, not three times. Measured on the 2-core VM with the cores kept
 * for the benchmark (chrt -r 1, hkbench --raw, 200 iterations): at np 2
 * the three phases win from 512 KiB (71 us against one-shot's 122 us),
 * at np 4 from 128 KiB (60 us against 82 us); one-shot wins at 64 KiB
 * (14 against 16 us at np 2). */
#define HK_SHM_ONESHOT_BYTES ((size_t)256 << 10)

typedef struct hk_shm_group {
  int n, me;          /* members, this rank's position among them */
  hk_shm_ctl **ctl;   /* ctl[pos]: the member's control block */
  uint8_t **slot;     /* slot[2*pos + half] */
  hk_shm_peer *peers; /* peers[pos]: liveness socket and name */
  char (*names)[32];  /* storage of the names */
  size_t slice;       /* bytes of one segment's slice in a slot half */
  uint64_t rounds;    /* rounds run so far (the same on every member) */
  int *owner, *start; /* per-call maps, n entries each */
  hk_io io;
} hk_shm_group;

/**
 * A group of n members at ring positions 0..n-1; member at position p is
 * local rank local[p] of the mapped segment seg (which must outlive the
 * group), job rank ranks[p] (for messages), reachable for liveness over
 * the TCP socket fds[p] (-1 for this rank; the sockets stay the caller's).
 * `me` is this rank's position. Needs slot_bytes >= 64 n.
 * Errors: HK_ERR_INVALID_ARG, HK_ERR_NOMEM.
 */
hk_status hk_shm_group_init(hk_shm_group *g, const hk_shm_seg *seg, int n,
                            int me, const int *local, const int *ranks,
                            const int *fds, const hk_io *io);

/** Frees what init allocated (not the segment, not the sockets). */
void hk_shm_group_destroy(hk_shm_group *g);

/** What one call does (see the phases above). */
typedef enum hk_shm_mode {
  HK_SHM_REDUCE = 1, /* phases A (non-owned slices) and B */
  HK_SHM_GATHER = 2, /* phase C; alone: A copies the owned slices */
} hk_shm_mode;

/** A run of a job's logical buffer that lives elsewhere: elements
 *  [off, off + count) of the buffer are src[0..count) and dst[0..count)
 *  (a fused batch's tensors in place, without a fusion buffer). */
typedef struct hk_shm_piece {
  size_t off, count; /* elements */
  const uint8_t *src;
  uint8_t *dst;
} hk_shm_piece;

/** One call: segments, owners, buffers (see hk_shm_group_run). */
typedef struct hk_shm_job {
  unsigned mode;      /* hk_shm_mode bits */
  const size_t *seg;  /* n+1 element offsets, non-decreasing */
  const int *owner;   /* owner[j]: position owning segment j */
  const int *start;   /* start[j]: where segment j's fold starts */
  const uint8_t *src; /* REDUCE: this rank's inputs, at seg offsets */
  uint8_t *dst;       /* results at seg offsets (GATHER: all of them;
                         REDUCE alone: the owned ones), or NULL */
  uint8_t *own_out;   /* if not NULL: an owned segment's result goes
                         here (offset 0) instead of dst */
  hk_dtype dtype;
  hk_op op;
  const hk_ring_finish *fin; /* applied by the owner if finish is set */
  int finish;
  /* if npieces > 0: src and dst are these runs instead (sorted by off,
   * none empty, covering [0, seg[n]) exactly; an allreduce only) */
  const hk_shm_piece *pieces;
  size_t npieces;
  /* 0 or 1: inputs are read as they are; else every input element is
   * multiplied by it as it is read, rounded as hk_scale_copy rounds (a
   * 16-bit average's pre-division, device/host/reduce.h, which the
   * fusion buffer's copy-in applies otherwise: the same bits) */
  double in_scale;
} hk_shm_job;

/**
 * Runs a job on every member (all call it with the same seg, owner,
 * start, mode, dtype, op; buffers are each rank's own). start[j] must be
 * (owner[j] + 1) mod n for a reduction (the fold ends at the owner).
 * GATHER alone reads the owned segments from dst. src and dst may be the
 * same buffer (in place); otherwise they must not overlap.
 * Errors: HK_ERR_PEER_LOST (a member died, the launcher aborted),
 * HK_ERR_TIMEOUT naming the members waited for; the buffers are then
 * unspecified and the group unusable.
 */
hk_status hk_shm_group_run(hk_shm_group *g, const hk_shm_job *job);

#endif
