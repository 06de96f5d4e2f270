/*
 * fusion.h - the fusion plan: which of a round's ready tensors are reduced
 * together in one fusion buffer, and where each lands in it.
 *
 * Plan (as Horovod's fusion buffer manager does): walk the responses in the
 * order rank 0 sent them; each fusable collective (allreduce, allgather or
 * reduce-scatter) that completed OK and fits opens a group, which takes
 * every later unplanned one of the same kind, process set, dtype, op,
 * divisor and implementation while the group's bytes stay within the
 * threshold (HK_FUSION_THRESHOLD, Horovod's default 128 MiB; 0 disables
 * fusion) and the opening item's own limit, if it has one.
 * Anything else, and any tensor larger than the threshold, runs alone and
 * without a copy. Every rank computes the same plan from the same
 * responses, so no plan crosses the network.
 *
 * Layout (hk's own, so that fusion never changes a result): the buffer is
 * laid out segment by segment. Each tensor is split into the ring's N
 * segments as it would be alone (hk_ring_default_segments), and segment j
 * of the buffer is segment j of every tensor of the group, in group order.
 * The ring reduces element e of a tensor starting from the rank after its
 * segment's index; since e keeps its segment index inside the buffer, it
 * is reduced in exactly the order, and so to exactly the bits, it would be
 * alone. Pure functions; thread-safety: reentrant.
 */
#ifndef HK_COORDINATOR_FUSION_H
#define HK_COORDINATOR_FUSION_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** What the plan needs to know of one response. */
typedef struct hk_fusion_item {
  int fusable;  /* a collective that completed negotiation OK and may run
                   with others of its kind */
  uint8_t coll; /* hk_wire_coll: only one kind shares a buffer */
  int32_t set;  /* the process set: only one set's tensors share a buffer
                   (a round's responses are one set's; the plan checks it
                   all the same) */
  uint8_t dtype, op;
  uint8_t mem;     /* hk_wire_mem: host and device tensors never share a
                      fusion buffer */
  int32_t divisor; /* HK_AVERAGE's divisor (ranks that took part) */
  const struct hk_allreduce_impl *impl; /* the allreduce implementation
                      that runs it (collectives/allreduce.h's table; only
                      compared here): only tensors of one implementation
                      share a buffer, so a tensor's bits do not depend on
                      fusion */
  size_t bytes;                         /* count * element size */
} hk_fusion_item;

/**
 * The size above which a host allreduce runs alone on its own buffers
 * instead of being copied into the fusion buffer: `configured`
 * (HK_FUSION_DIRECT_BYTES) when not 0, else (size - 1) x 256 KiB for a
 * process set of `size` ranks (common/config.c says where the figure comes
 * from). Bytes. Pure.
 */
size_t hk_fusion_direct_bytes(size_t configured, int size);

/**
 * Whether one response may share a fusion buffer (hk_fusion_item.
 * fusable): it negotiated OK (`ok`), and it is an allreduce of device
 * memory, a host allreduce of at most `direct` bytes, or a host allgather
 * or reduce-scatter (`rows`: coll is one of them) of at most `direct`
 * bytes of every rank's rows. The worker's execute step and hkplan's
 * simulation (planner/sim.h) both ask this. Pure.
 */
int hk_fusion_fusable(uint8_t coll, int ok, int device, size_t bytes,
                      size_t direct);

/**
 * Plans items[0..n) (taken[] is n bytes of scratch): order[] (n entries)
 * receives the execution order (a permutation of 0..n-1) and starts[] (n+1
 * entries) the boundaries of the groups in it: group g is order[starts[g] ..
 * starts[g+1]). Returns the number of groups.
 */
uint32_t hk_fusion_plan(const hk_fusion_item *items, uint32_t n,
                        size_t threshold_bytes, uint8_t *taken, uint32_t *order,
                        uint32_t *starts);

/**
 * The segment-major layout of a group of `ntensors` tensors of counts[]
 * ELEMENTS over `nranks` ring segments: seg[0..nranks] receives the
 * buffer's segment offsets (elements; seg[nranks] = total), and
 * where[t * nranks + j] the element offset in the buffer of tensor t's
 * segment j (which starts at element first_of(t, j) of the tensor, see
 * hk_ring_default_segments).
 */
void hk_fusion_layout(const size_t *counts, uint32_t ntensors, int nranks,
                      size_t *seg, size_t *where);

#endif
