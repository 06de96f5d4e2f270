/*
 * dev_allreduce.h - the GPU allreduce schedules (docs/design.md, "The GPU data
 * plane"), over the device interface (device/device.h) and hk's host rings
 * (collectives/ring.h). They work on a device fusion buffer laid out in
 * nseg padded segments of seglen elements each (segment j holds segment j
 * of every tensor in it, as coordinator/fusion.h lays out a host fusion
 * buffer; the padding is reduced and never read back):
 *
 *   comm    one host: the device communicator's allreduce of the whole
 *           buffer (NCCL; emu's rank-order fold). nseg is irrelevant.
 *   staged  every byte crosses hk's ring: the buffer is copied to pinned
 *           host memory chunk by chunk, each chunk is allreduced over
 *           `ring` with hk's ring, and copied back, the device-to-host
 *           copy of chunk k+1, the network on chunk k and the host-to-
 *           device copy of chunk k-1 overlapping (HK_DEV_SLOTS pinned
 *           slots of slot_bytes). nseg must be ring->size.
 *   hier    several hosts of L GPUs: the device communicator's reduce-
 *           scatter in place (local rank b keeps segments b*H..b*H+H-1,
 *           H = nseg / L), `staged` of that block over the cross ring
 *           (one rank per host), then the communicator's allgather.
 *
 * Chunks cut every segment at the same offsets: chunk c holds elements
 * [c*q, (c+1)*q) of each of the nseg segments, contiguous in the slot,
 * and the ring allreduces it with those nseg sub-segments. An element's
 * reduction order therefore depends only on its segment index, never on
 * the chunk or on where fusion put it: in `staged`, element of segment j
 * is folded along the ring from position j+1 (hk_ring's order: the same
 * bits as the host path's flat ring), so fusion never changes a bit. In
 * `hier` the in-host part is the communicator's order (emu: rank order;
 * NCCL: its channels'), then the cross-host fold of the block's segment
 * c from host position c+1.
 *
 * No schedule divides or scales: HK_AVERAGE is run as HK_SUM and the
 * division is fused into the unpack (device.h's hk_dev_copy.divisor).
 *
 * Waiting: whenever the host needs device work done (a chunk copied to
 * the host), the schedule calls sched->wait, the caller's watchdog, which
 * also watches the communicator's async errors and HK_TIMEOUT_S and
 * aborts the communicator on failure.
 *
 * Thread-safety: one thread (the background thread) per hk_dev_sched.
 */
#ifndef HK_COLLECTIVES_DEV_ALLREDUCE_H
#define HK_COLLECTIVES_DEV_ALLREDUCE_H

#include "collectives/ring.h"
#include "device/device.h"

/** Pinned staging slots: 4 slots let the device-to-host copy, the ring
 *  and the host-to-device copy each work on their own chunk with one
 *  spare. */
#define HK_DEV_SLOTS 4

/** Bytes of one staging slot. Copies between host and device reach their
 *  plateau from about 1 MiB (NVIDIA's CUDA C++ Best Practices Guide,
 *  "Data Transfer Between Host and Device"); 4 MiB slots keep each copy
 *  and each ring call well above it while 4 slots pin only 16 MiB. */
#define HK_DEV_SLOT_BYTES (4u << 20)

typedef struct hk_dev_sched {
  hk_device *dev;
  hk_dev_stream stream;   /* pack, communicator, unpack */
  hk_dev_stream d2h, h2d; /* staging copies */
  hk_dev_comm comm;       /* this host's ranks; NULL when they are 1 */
  int local_rank, local_size;
  uint8_t *slot[HK_DEV_SLOTS]; /* pinned, HK_DEV_SLOT_BYTES each */
  size_t chunk_bytes;          /* staged: a chunk's bytes over all its segments
                                  (HK_STAGING_CHUNK_BYTES; 0 or more than a slot:
                                  HK_DEV_SLOT_BYTES). Every rank must use the same:
                                  it decides the ring calls */
  hk_dev_event ev_d2h[HK_DEV_SLOTS], ev_h2d[HK_DEV_SLOTS];
  hk_dev_event ev_ready; /* scratch: stream -> copy streams */
  size_t *segs;          /* nseg + 1 offsets, grown on demand */
  size_t segs_cap;
  /** The watchdog: returns once e has completed, or an error (the
   *  communicator is then aborted and sched->comm is NULL). */
  hk_status (*wait)(void *arg, hk_dev_event e, const char *what);
  void *wait_arg;
} hk_dev_sched;

/**
 * The three schedules (above), each an entry's run in the table of
 * allreduce implementations (collectives/allreduce.h, which chooses
 * among them). Each runs on the device buffer buf (nseg * seglen ELEMENTS
 * of dtype, nseg and seglen > 0, already packed by work queued on
 * sched->stream): on return every rank's buf holds op over all ranks, or
 * work queued on sched->stream will leave it so (comm, and hier's last
 * phase): the caller queues its unpack on sched->stream. op is never
 * HK_AVERAGE (run as HK_SUM: the unpack divides). `ring` is the flat
 * ring (staged) or the cross ring (hier); unused by comm. For hier, nseg
 * must be local_size * ring->size; for staged, ring->size.
 * Errors: the watchdog's (HK_ERR_DEVICE, HK_ERR_TIMEOUT, HK_ERR_PEER_LOST),
 * the ring's (HK_ERR_PEER_LOST, HK_ERR_TIMEOUT naming the neighbour), the
 * backend's when enqueueing fails, HK_ERR_NOMEM, HK_ERR_INVALID_ARG (nseg
 * does not fit the ring).
 */
hk_status hk_dev_run_comm(hk_dev_sched *sched, hk_ring *ring, void *buf,
                          size_t nseg, size_t seglen, hk_dtype dtype, hk_op op);
hk_status hk_dev_run_staged(hk_dev_sched *sched, hk_ring *ring, void *buf,
                            size_t nseg, size_t seglen, hk_dtype dtype,
                            hk_op op);
hk_status hk_dev_run_hier(hk_dev_sched *sched, hk_ring *ring, void *buf,
                          size_t nseg, size_t seglen, hk_dtype dtype, hk_op op);

#endif
