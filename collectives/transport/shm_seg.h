/*
 * shm_seg.h - the shared-memory segment of one host's ranks: a POSIX shm
 * object mapped by every local rank of a job, holding
 *   - a header (magic, version, layout, creator's pid);
 *   - one control block per local rank: its progress counter (the group
 *     collectives of collectives/shm_ring.h), its doorbell (the futex word
 *     it sleeps on, collectives/transport/shm_wait.h) and its pid;
 *   - one slot per local rank: two halves of slot_bytes each, where the
 *     rank puts what its peers read (double buffering: a rank fills one
 *     half while its peers still read the other);
 *   - one byte ring per ordered pair of local ranks (i -> j, i != j):
 *     the stream of an shm link (collectives/transport/link_shm.c), a
 *     single-producer single-consumer ring of link_bytes bytes;
 *   - with ctrl_bytes > 0 (the host of the job's rank 0, whose local rank
 *     0 it is), two rings of ctrl_bytes per other local rank j: 0 -> j
 *     and j -> 0, the control messages between rank 0 and j
 *     (collectives/transport/ctrl.h), same structure as a link's ring.
 * Every part starts on its own page; counters and flags written by
 * different ranks sit on different cache lines (HK_SHM_LINE).
 *
 *   offset 0             header                       1 page
 *   ctl_off + i*CTL      control block of rank i      HK_SHM_CTL bytes
 *   slot_off + i*S       slot of rank i: half 0, 1    S = 2*slot_bytes
 *   ring_off + (i*n+j)*R ring i -> j: head line,      R = 2 lines + data
 *                        tail line, link_bytes data
 *   ctrl_off + (2*(j-1)+d)*C  control ring 0 -> j (d 0)  C = 2 lines +
 *                        or j -> 0 (d 1)               ctrl_bytes
 *
 * Lifetime (docs/design.md: "segments belong to the job's user only and are
 * removed however the job ends"): the first local rank creates the
 * object without a name (O_TMPFILE in /dev/shm, mode 0600, so /dev/shm's
 * size still bounds it), and the others open it through the creator's
 * descriptor (/proc/<pid>/fd/<fd>: only the creator's user can, and only
 * while the creator lives). It never has a name: nothing of it is in
 * /dev/shm at any moment, so no kill -9 of a rank or of hkrun, at any
 * point of the set-up, can leave anything behind; the memory lives as
 * long as a process maps it. Every mapping is MAP_SHARED|MAP_POPULATE
 * (no page faults on the data path: a first touch costs ~11 us per 4 KiB
 * page on the reference VM, bench/peers/results/limits.txt).
 *
 * Thread-safety: create/open/close on one thread; the mapped memory is
 * shared by design (the atomics in the structures below).
 */
#ifndef HK_TRANSPORT_SHM_SEG_H
#define HK_TRANSPORT_SHM_SEG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

#define HK_SHM_LINE 64 /* bytes: one cache line (x86-64, arm64) */
#define HK_SHM_CTL 256 /* bytes of a rank's control block */
#define HK_SHM_MAX_RANKS 256
#define HK_SHM_MAGIC 0x314d48534b48ull /* "HKSHM1" */
#define HK_SHM_VERSION 2u

/** The doorbell a rank sleeps on (collectives/transport/shm_wait.h). */
typedef struct hk_shm_doorbell {
  _Atomic uint32_t word;       /* futex word: bumped by every wake */
  _Atomic uint32_t group_wait; /* 1 while the rank sleeps in a group wait */
} hk_shm_doorbell;

/** A rank's control block (HK_SHM_CTL bytes; one writer per line). */
typedef struct hk_shm_ctl {
  _Alignas(HK_SHM_LINE) _Atomic uint64_t progress; /* shm_ring.h phases */
  _Alignas(HK_SHM_LINE) hk_shm_doorbell bell;
  _Alignas(HK_SHM_LINE) _Atomic int32_t pid; /* set when it maps */
  _Atomic uint32_t mapped;                   /* 1 once it has mapped */
} hk_shm_ctl;

/** Waiter flag values (shm ring reader_wait/writer_wait). */
enum { HK_SHM_AWAKE = 0, HK_SHM_SLEEP_FUTEX = 1, HK_SHM_SLEEP_SOCKET = 2 };

/** The control lines of one byte ring i -> j. `head` counts bytes the
 *  producer (i) has written, `tail` bytes the consumer (j) has taken;
 *  both only grow. The waiter flags say how to wake a side that sleeps:
 *  HK_SHM_SLEEP_FUTEX (its doorbell) or _SOCKET (a byte on the pair's
 *  TCP connection; see link.h's mixed waits). */
typedef struct hk_shm_ring {
  _Alignas(HK_SHM_LINE) _Atomic uint64_t head;
  _Atomic uint32_t writer_wait; /* set by the producer, cleared by waker */
  _Alignas(HK_SHM_LINE) _Atomic uint64_t tail;
  _Atomic uint32_t reader_wait; /* set by the consumer, cleared by waker */
  _Alignas(HK_SHM_LINE) uint8_t data[]; /* link_bytes */
} hk_shm_ring;

/** What a segment holds: n local ranks, two slot halves of slot_bytes
 *  each per rank, a ring of link_bytes per ordered pair, and with
 *  ctrl_bytes > 0 the control rings between local rank 0 and the others. */
typedef struct hk_shm_layout {
  int n;             /* 1..HK_SHM_MAX_RANKS */
  size_t slot_bytes; /* one half; a multiple of HK_SHM_LINE, >= 4096 */
  size_t link_bytes; /* a power of two, >= 4096 */
  size_t ctrl_bytes; /* 0 (none), or a power of two, >= 4096 */
} hk_shm_layout;

/** The header at offset 0 (written by the creator before anyone opens). */
typedef struct hk_shm_header {
  uint64_t magic;
  uint32_t version;
  int32_t creator_pid;
  uint64_t total_bytes;
  hk_shm_layout layout;
  uint64_t ctl_off, slot_off, ring_off, ring_stride;
  uint64_t ctrl_off, ctrl_stride; /* control rings (ctrl_bytes > 0) */
} hk_shm_header;

/** A mapped segment (this process's view). */
typedef struct hk_shm_seg {
  uint8_t *base; /* NULL when not mapped */
  size_t bytes;
  const hk_shm_header *hdr;
  int fd; /* the object (-1 when closed): the creator's is what the other
             ranks open (hk_shm_seg_open) */
} hk_shm_seg;

/** Bytes a segment of this layout takes. 0 if the layout is invalid. */
size_t hk_shm_seg_bytes(const hk_shm_layout *layout);

/**
 * Creates an object without a name in /dev/shm (O_TMPFILE, mode 0600),
 * sizes it (posix_fallocate: a full /dev/shm fails here, not with SIGBUS
 * later), maps it populated and writes the header; seg->fd stays open
 * for the other ranks to open (hk_shm_seg_open with getpid() and
 * seg->fd) until hk_shm_seg_seal or hk_shm_seg_close. Errors:
 * HK_ERR_INVALID_ARG (bad layout), HK_ERR_SYSTEM (/dev/shm cannot hold an
 * unnamed object, no space, mmap), naming what failed. On error nothing is left
 * open.
 */
hk_status hk_shm_seg_create(const hk_shm_layout *layout, hk_shm_seg *seg);

/**
 * Opens and maps the object that process `pid` (same host, same PID
 * namespace) holds open as descriptor `fd` (its hk_shm_seg_create's),
 * through /proc/<pid>/fd/<fd>, checking that it belongs to this user, is
 * not readable by anyone else, and carries a header of this version whose
 * size matches. Errors: HK_ERR_SYSTEM (no such process or descriptor, not
 * this user's process, mmap), HK_ERR_PROTOCOL (wrong owner/mode/magic/
 * version/size), each naming the pid and descriptor.
 */
hk_status hk_shm_seg_open(long pid, int fd, hk_shm_seg *seg);

/** The creator, once every rank has opened the object: closes seg->fd,
 *  so that no process can open it any more (the mappings stay). */
void hk_shm_seg_seal(hk_shm_seg *seg);

/** Unmaps and closes (safe on a zeroed or closed seg, and twice). */
void hk_shm_seg_close(hk_shm_seg *seg);

/** Control block of local rank i (0 <= i < n). */
hk_shm_ctl *hk_shm_seg_ctl(const hk_shm_seg *seg, int i);

/** Slot half `half` (0 or 1) of local rank i: slot_bytes bytes. */
uint8_t *hk_shm_seg_slot(const hk_shm_seg *seg, int i, int half);

/** The byte ring from local rank i to local rank j (i != j). */
hk_shm_ring *hk_shm_seg_ring(const hk_shm_seg *seg, int i, int j);

/** The control ring between local rank 0 and local rank j (1 <= j < n):
 *  0 -> j when to_zero is 0, j -> 0 when 1; ctrl_bytes of data. NULL when
 *  the layout has no control rings (ctrl_bytes 0). */
hk_shm_ring *hk_shm_seg_ctrl_ring(const hk_shm_seg *seg, int j, int to_zero);

#endif
