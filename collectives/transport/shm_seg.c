/*
 * shm_seg.c - the shared-memory segment (see shm_seg.h).
 */
#include "collectives/transport/shm_seg.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/status.h"

#define PAGE ((size_t)4096)

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

_Static_assert(sizeof(hk_shm_ctl) <= HK_SHM_CTL, "control block too large");
_Static_assert(sizeof(hk_shm_header) <= PAGE, "header too large");

/* Fills the offsets of a layout; 0 if invalid. */
static size_t plan(const hk_shm_layout *l, hk_shm_header *h) {
  if (l->n < 1 || l->n > HK_SHM_MAX_RANKS || l->slot_bytes < PAGE ||
      l->slot_bytes % HK_SHM_LINE || l->link_bytes < PAGE ||
      (l->link_bytes & (l->link_bytes - 1)) ||
      l->slot_bytes > ((size_t)1 << 32) || l->link_bytes > ((size_t)1 << 30) ||
      (l->ctrl_bytes &&
       (l->ctrl_bytes < PAGE || (l->ctrl_bytes & (l->ctrl_bytes - 1)) ||
        l->ctrl_bytes > ((size_t)1 << 30))))
    return 0;
  const size_t n = (size_t)l->n;
  memset(h, 0, sizeof *h);
  h->magic = HK_SHM_MAGIC;
  h->version = HK_SHM_VERSION;
  h->layout = *l;
  h->ctl_off = PAGE;
  h->slot_off = round_up(h->ctl_off + n * HK_SHM_CTL, PAGE);
  h->ring_stride = round_up(sizeof(hk_shm_ring) + l->link_bytes, PAGE);
  h->ring_off = h->slot_off + n * 2 * round_up(l->slot_bytes, PAGE);
  h->ctrl_off = h->ring_off + n * n * h->ring_stride;
  h->ctrl_stride =
      l->ctrl_bytes ? round_up(sizeof(hk_shm_ring) + l->ctrl_bytes, PAGE) : 0;
  h->total_bytes = h->ctrl_off + 2 * (n - 1) * h->ctrl_stride;
  return (size_t)h->total_bytes;
}

size_t hk_shm_seg_bytes(const hk_shm_layout *layout) {
  hk_shm_header h;
  return plan(layout, &h);
}

static hk_status map(int fd, size_t bytes, const char *name, hk_shm_seg *seg) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                 fd, 0);
  if (p == MAP_FAILED)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot map the shared-memory segment %s (%zu bytes)",
                         name, bytes);
  seg->base = p;
  seg->bytes = bytes;
  seg->hdr = p;
  return HK_OK;
}

hk_status hk_shm_seg_create(const hk_shm_layout *layout, hk_shm_seg *seg) {
  memset(seg, 0, sizeof *seg);
  seg->fd = -1;
  hk_shm_header h;
  size_t bytes = plan(layout, &h);
  if (!bytes)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "shared-memory layout of %d ranks, %zu-byte slots, "
                   "%zu-byte links is invalid",
                   layout->n, layout->slot_bytes, layout->link_bytes);
  /* no name at any moment: nothing to leave behind */
  int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot create an unnamed shared-memory segment in "
                         "/dev/shm");
  hk_status st = HK_OK;
  /* posix_fallocate reserves the pages now: a full /dev/shm fails here
   * rather than with SIGBUS on the data path */
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  if (rc != 0)
    st = hk_fail_errno(HK_ERR_SYSTEM, rc,
                       "cannot size the shared-memory segment to %zu bytes "
                       "(is /dev/shm large enough?)",
                       bytes);
  if (st == HK_OK)
    st = map(fd, bytes, "(unnamed, in /dev/shm)", seg);
  if (st != HK_OK) {
    close(fd);
    return st;
  }
  seg->fd = fd;
  h.creator_pid = (int32_t)getpid();
  h.total_bytes = bytes;
  memcpy(seg->base, &h, sizeof h);
  return HK_OK;
}

hk_status hk_shm_seg_open(long pid, int fd, hk_shm_seg *seg) {
  memset(seg, 0, sizeof *seg);
  seg->fd = -1;
  char name[64];
  snprintf(name, sizeof name, "/proc/%ld/fd/%d", pid, fd);
  int ofd = open(name, O_RDWR | O_CLOEXEC);
  if (ofd < 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot open the shared-memory segment %s (the "
                         "creating rank's descriptor)",
                         name);
  struct stat sb;
  hk_status st = HK_OK;
  if (fstat(ofd, &sb) != 0)
    st = hk_fail_errno(HK_ERR_SYSTEM, errno, "fstat %s", name);
  else if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 077))
    st = hk_fail(HK_ERR_PROTOCOL,
                 "the shared-memory segment %s belongs to uid %u with mode "
                 "%o, not to this user (uid %u) alone: not using it",
                 name, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777),
                 (unsigned)geteuid());
  else if ((size_t)sb.st_size < PAGE)
    st = hk_fail(HK_ERR_PROTOCOL,
                 "the shared-memory segment %s is %lld bytes: too small", name,
                 (long long)sb.st_size);
  if (st == HK_OK)
    st = map(ofd, (size_t)sb.st_size, name, seg);
  close(ofd); /* the mapping keeps the memory */
  if (st != HK_OK)
    return st;
  hk_shm_header h;
  memcpy(&h, seg->base, sizeof h);
  hk_shm_header want;
  size_t bytes = h.magic == HK_SHM_MAGIC && h.version == HK_SHM_VERSION
                     ? plan(&h.layout, &want)
                     : 0;
  if (!bytes || bytes != seg->bytes || want.ring_off != h.ring_off ||
      want.slot_off != h.slot_off || want.ctl_off != h.ctl_off ||
      want.ctrl_off != h.ctrl_off || want.ctrl_stride != h.ctrl_stride) {
    hk_shm_seg_close(seg);
    return hk_fail(HK_ERR_PROTOCOL,
                   "the shared-memory segment %s has no valid hk header "
                   "(magic %#llx, version %u)",
                   name, (unsigned long long)h.magic, h.version);
  }
  return HK_OK;
}

void hk_shm_seg_seal(hk_shm_seg *seg) {
  if (seg->base && seg->fd >= 0)
    close(seg->fd);
  seg->fd = -1;
}

void hk_shm_seg_close(hk_shm_seg *seg) {
  if (seg->base) { /* (a mapped seg's fd is its own or -1, never 0's) */
    munmap(seg->base, seg->bytes);
    if (seg->fd >= 0)
      close(seg->fd);
  }
  memset(seg, 0, sizeof *seg);
  seg->fd = -1;
}

hk_shm_ctl *hk_shm_seg_ctl(const hk_shm_seg *seg, int i) {
  return (hk_shm_ctl *)(seg->base + seg->hdr->ctl_off + (size_t)i * HK_SHM_CTL);
}

uint8_t *hk_shm_seg_slot(const hk_shm_seg *seg, int i, int half) {
  size_t half_stride = round_up(seg->hdr->layout.slot_bytes, PAGE);
  return seg->base + seg->hdr->slot_off +
         ((size_t)i * 2 + (size_t)half) * half_stride;
}

hk_shm_ring *hk_shm_seg_ring(const hk_shm_seg *seg, int i, int j) {
  size_t n = (size_t)seg->hdr->layout.n;
  return (hk_shm_ring *)(seg->base + seg->hdr->ring_off +
                         ((size_t)i * n + (size_t)j) * seg->hdr->ring_stride);
}

hk_shm_ring *hk_shm_seg_ctrl_ring(const hk_shm_seg *seg, int j, int to_zero) {
  if (!seg->hdr->ctrl_stride || j < 1 || j >= seg->hdr->layout.n)
    return NULL;
  return (hk_shm_ring *)(seg->base + seg->hdr->ctrl_off +
                         ((size_t)(j - 1) * 2 + (size_t)(to_zero != 0)) *
                             seg->hdr->ctrl_stride);
}
