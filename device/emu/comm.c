/*
 * comm.c - the emu's communicator: real reductions between the processes
 * of one host through one POSIX shared-memory segment per communicator.
 *
 * Unique id: "HKEMUID1", 16 random bytes (getrandom), zeros. They name the
 * segment "/hk-emu-<32 hex>" (mode 0600, the user's only).
 *
 * Init (non-blocking; a thread per communicator until it is done): rank 0
 * creates the segment (O_EXCL), sizes it and fills its header; the other
 * ranks open it once it exists (they retry, sleeping, woken at once by a
 * local comm_abort) and check that it was made for the same number of
 * ranks. Every rank then counts itself in; the last to arrive shm_unlinks
 * the name, so once init is complete nothing of it is left in /dev/shm
 * however the processes end (the mappings keep the memory until the last
 * one goes). comm_async_error reports *pending = 1 until then (and only
 * then: an enqueued op is not "pending", it is on its stream); operations
 * enqueued before that wait on their stream. The name exists in /dev/shm
 * only between rank 0's create and the last rank's arrival: a rank killed
 * in that window leaves it behind; a rank that aborts in that window
 * removes it (ranks not yet arrived then wait until their own abort).
 *
 * Layout: header (barrier words, abort record), then two buffers, each one
 * descriptor and one slot of HK_EMU_CHUNK_BYTES per rank.
 *
 * An operation runs on its stream's thread, in rounds of one chunk; the
 * rounds of a communicator alternate between the two buffers. Every rank
 * writes its descriptor (op number, round, kind, count, dtype, op, root)
 * and its data chunk into its slot of the round's buffer; a barrier; each
 * rank compares every descriptor with rank 0's (a difference fails the op
 * on every rank with the same message naming both) and computes its output
 * from the slots, reducing in rank order (emu.h, "Reduction order"). The
 * next round's barrier is the one before the buffer is reused (two rounds
 * later), so a round costs one barrier. The barrier is a sense-reversing
 * counter on shared atomics; waiters sleep on a futex and look at the
 * abort flags at every wake (at least every 100 ms, and at once when
 * someone aborts).
 *
 * Failures: a failed op (mismatch, injected error, peer's abort) sets the
 * communicator's async error (HK_ERR_SYSTEM); later ops on it do nothing
 * and fail with the same message. Peers of a rank whose op failed stay
 * blocked until someone aborts (as with NCCL); a rank whose peers never
 * come stays blocked too: hk's watchdog applies HK_TIMEOUT_S and aborts.
 * comm_abort publishes "aborted by rank R: <reason>" in the segment (the
 * reason is this rank's async error, if any), which ends the peers'
 * pending and blocked ops with that async error (and is their async error
 * from then on, even while they run no op), and ends this rank's own.
 * Ranks are the communicator's (job ranks added where they differ).
 *
 * One op at a time per communicator: ops on one stream are; an op that
 * starts while another of the same communicator runs on another stream
 * fails (NCCL leaves that undefined).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "device/emu/emu.h"
#include "device/emu/internal.h"
#include "device/host/reduce.h"

#define ID_MAGIC "HKEMUID1"
#define ID_RANDOM 16
#define SHM_MAGIC 0x316d68737568656bULL
#define WAIT_MS 100 /* longest futex sleep between abort checks */

enum { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_BROADCAST };
static const char *const kind_names[] = {"allreduce", "reducescatter",
                                         "allgather", "broadcast"};

/* One rank's description of the round it is in. */
typedef struct shm_desc {
  uint64_t seq;   /* the communicator's op number on that rank, from 0 */
  uint64_t round; /* chunk round within the op */
  uint64_t count; /* elements as passed to the op */
  int32_t kind, dtype, op, root, job_rank, pad;
} shm_desc;

typedef struct shm_header {
  uint64_t magic;
  uint32_t nranks;
  uint32_t pad;
  uint64_t chunk_bytes;
  uint64_t slot_offset;
  _Atomic uint32_t ready;    /* rank 0 filled the header */
  _Atomic uint32_t attached; /* ranks counted in */
  _Atomic uint32_t unlinked; /* the last one in removed the name */
  _Atomic uint32_t bar_count, bar_gen;
  _Atomic uint32_t abort_claim; /* one aborting rank writes the record */
  _Atomic uint32_t abort_flag;  /* 1 + its rank, once the record is there */
  int32_t abort_rank, abort_job_rank;
  char abort_reason[EMU_MSG_CAP];
  shm_desc desc[]; /* 2 x nranks: buffer 0's, then buffer 1's */
} shm_header;

struct hk_dev_comm_s {
  emu_device *dev;
  int nranks, rank;
  char name[64];
  size_t map_bytes;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* init_done, aborted, refs (CLOCK_MONOTONIC) */
  int refs;          /* the owner's + one per queued op */
  int init_done;     /* init finished, successfully or not */
  int init_ok;
  int aborted;
  atomic_int abort_local; /* = aborted, for the futex waits */
  hk_status err;          /* the async error */
  char errmsg[EMU_MSG_CAP];
  shm_header *hdr; /* set (under mu) once mapped */
  pthread_t init_thread;
  atomic_uint next_seq;
  atomic_int busy;     /* an op is running its rounds */
  uint64_t rounds_run; /* rounds done (under busy): picks the buffer */
};

/* ---- futexes on the shared words ---- */

static void futex_wait(_Atomic uint32_t *w, uint32_t val, int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &t, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- names and messages ---- */

static const char *rank_str(char *buf, size_t cap, int rank, int job_rank) {
  if (rank == job_rank)
    snprintf(buf, cap, "rank %d", rank);
  else
    snprintf(buf, cap, "rank %d (job rank %d)", rank, job_rank);
  return buf;
}

static void desc_str(char *buf, size_t cap, const shm_desc *d, int with_seq) {
  char seq[32] = "";
  if (with_seq)
    snprintf(seq, sizeof seq, " #%llu", (unsigned long long)d->seq);
  const char *kind = (unsigned)d->kind < 4 ? kind_names[d->kind] : "unknown";
  unsigned long long n = (unsigned long long)d->count;
  const char *dt = hk_dtype_name((hk_dtype)d->dtype);
  if (d->kind == K_ALLREDUCE || d->kind == K_REDUCESCATTER)
    snprintf(buf, cap, "%s%s of %llu %s %s", kind, seq, n, dt,
             hk_op_name((hk_op)d->op));
  else if (d->kind == K_BROADCAST)
    snprintf(buf, cap, "%s%s of %llu %s from root %d", kind, seq, n, dt,
             d->root);
  else
    snprintf(buf, cap, "%s%s of %llu %s", kind, seq, n, dt);
}

static int desc_equal(const shm_desc *a, const shm_desc *b) {
  return a->seq == b->seq && a->round == b->round && a->count == b->count &&
         a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
         a->root == b->root;
}

hk_status hk_emu_comm_shm_name(const uint8_t id[HK_DEV_UID_BYTES], char *buf,
                               size_t cap) {
  if (!id || memcmp(id, ID_MAGIC, 8) != 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: comm: the unique id is not an emu communicator id");
  char hex[2 * ID_RANDOM + 1];
  for (int i = 0; i < ID_RANDOM; i++)
    snprintf(hex + 2 * i, 3, "%02x", id[8 + i]);
  if ((size_t)snprintf(buf, cap, "/hk-emu-%s", hex) >= cap)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: comm: name buffer too small");
  return HK_OK;
}

/* Ids made so far (hk_emu_unique_ids_created). */
static atomic_size_t ids_made;

size_t hk_emu_unique_ids_created(void) { return atomic_load(&ids_made); }

/* Communicators aborted so far (hk_emu_comms_aborted). */
static atomic_size_t aborts_made;

size_t hk_emu_comms_aborted(void) { return atomic_load(&aborts_made); }

hk_status emu_comm_unique_id(hk_device *dev, uint8_t id[HK_DEV_UID_BYTES]) {
  if (!emu_dev(dev, "comm_unique_id"))
    return HK_ERR_INVALID_ARG;
  atomic_fetch_add(&ids_made, 1);
  memset(id, 0, HK_DEV_UID_BYTES);
  memcpy(id, ID_MAGIC, 8);
  ssize_t n;
  do
    n = getrandom(id + 8, ID_RANDOM, 0);
  while (n < 0 && errno == EINTR);
  if (n != ID_RANDOM)
    return hk_fail_errno(HK_ERR_SYSTEM, n < 0 ? errno : EIO,
                         "emu: comm_unique_id: getrandom");
  return HK_OK;
}

/* ---- the communicator's local state ---- */

static void comm_unref(hk_dev_comm c) {
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (left)
    return;
  if (c->hdr)
    munmap(c->hdr, c->map_bytes);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Sets the async error (the first one stays). */
static void set_error(hk_dev_comm c, const char *msg) {
  pthread_mutex_lock(&c->mu);
  if (c->err == HK_OK) {
    c->err = HK_ERR_SYSTEM;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
  }
  pthread_mutex_unlock(&c->mu);
}

/* Bytes of a peer's abort reason shown after "aborted by <rank>: ", so
 * that the whole fits an EMU_MSG_CAP message (the rest is cut). */
#define ABORT_REASON_SHOWN (EMU_MSG_CAP - 72)

/* 1 if a peer has published an abort in the segment (msg gets the async
 * error), 0 if not or if it was this rank's own. */
static int peer_aborted(hk_dev_comm c, shm_header *h, char *msg, size_t cap) {
  uint32_t f = atomic_load_explicit(&h->abort_flag, memory_order_acquire);
  if (!f || (int)f - 1 == c->rank)
    return 0;
  char who[48];
  snprintf(msg, cap, "aborted by %s: %.*s",
           rank_str(who, sizeof who, h->abort_rank, h->abort_job_rank),
           ABORT_REASON_SHOWN, h->abort_reason);
  return 1;
}

/* Publishes this rank's abort in the segment and wakes every waiter. */
static void publish_abort(hk_dev_comm c, shm_header *h, const char *reason) {
  uint32_t zero = 0;
  if (atomic_compare_exchange_strong(&h->abort_claim, &zero, 1)) {
    h->abort_rank = c->rank;
    h->abort_job_rank = c->dev->job_rank;
    snprintf(h->abort_reason, sizeof h->abort_reason, "%s", reason);
    atomic_store_explicit(&h->abort_flag, (uint32_t)c->rank + 1,
                          memory_order_release);
  }
  futex_wake(&h->ready);
  futex_wake(&h->unlinked);
  futex_wake(&h->bar_count);
  futex_wake(&h->bar_gen);
}

/* Sleeps up to ms on the local condition; 1 if aborted locally. */
static int local_sleep(hk_dev_comm c, int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += (long)ms * 1000000L;
  t.tv_sec += t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&c->mu);
  if (!c->aborted)
    pthread_cond_timedwait(&c->cv, &c->mu, &t);
  int a = c->aborted;
  pthread_mutex_unlock(&c->mu);
  return a;
}

/* Why a wait must end: a local abort or a peer's; 0 if neither. */
static int wait_cut(hk_dev_comm c, shm_header *h, const char *what, char *msg,
                    size_t cap) {
  if (atomic_load(&c->abort_local)) {
    char who[48];
    snprintf(msg, cap, "emu communicator: %s aborted on %s (comm_abort)", what,
             rank_str(who, sizeof who, c->rank, c->dev->job_rank));
    return 1;
  }
  return h && peer_aborted(c, h, msg, cap);
}

/* ---- init ---- */

static size_t layout_slot_offset(int nranks) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t head = sizeof(shm_header) + 2 * (size_t)nranks * sizeof(shm_desc);
  return (head + page - 1) / page * page;
}

static size_t layout_bytes(int nranks) {
  return layout_slot_offset(nranks) + 2 * (size_t)nranks * HK_EMU_CHUNK_BYTES;
}

/* Opens (rank > 0: waits for) the segment and maps it; *h, *fail set. */
static hk_status attach_map(hk_dev_comm c, shm_header **out, char *msg,
                            size_t cap) {
  size_t bytes = layout_bytes(c->nranks);
  int fd;
  if (c->rank == 0) {
    /* said before it exists, so that a job's own segments can be told
     * from another job's (test_device checks every one it named is gone) */
    hk_log(HK_LOG_DEBUG, "emu communicator: creating %s for %d ranks", c->name,
           c->nranks);
    fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
      snprintf(msg, cap, "emu communicator: creating %s: %s", c->name,
               strerror(errno));
      if (fd >= 0) {
        close(fd);
        shm_unlink(c->name);
      }
      return HK_ERR_SYSTEM;
    }
  } else {
    int ms = 1;
    while ((fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0)) < 0) {
      if (errno != ENOENT) {
        snprintf(msg, cap, "emu communicator: opening %s: %s", c->name,
                 strerror(errno));
        return HK_ERR_SYSTEM;
      }
      if (local_sleep(c, ms))
        return wait_cut(c, NULL, "init", msg, cap), HK_ERR_SYSTEM;
      ms = ms < 20 ? ms * 2 : 20;
    }
    struct stat st;
    for (ms = 1;; ms = ms < 20 ? ms * 2 : 20) { /* rank 0 sizes it */
      if (fstat(fd, &st) != 0) {
        snprintf(msg, cap, "emu communicator: fstat %s: %s", c->name,
                 strerror(errno));
        close(fd);
        return HK_ERR_SYSTEM;
      }
      if (st.st_size > 0)
        break;
      if (local_sleep(c, ms)) {
        close(fd);
        return wait_cut(c, NULL, "init", msg, cap), HK_ERR_SYSTEM;
      }
    }
    if ((size_t)st.st_size != bytes) { /* made for another nranks */
      size_t head =
          (size_t)st.st_size < sizeof(shm_header) ? 0 : layout_slot_offset(1);
      shm_header *h =
          head ? mmap(NULL, head, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
      close(fd);
      long theirs = -1;
      if (h != MAP_FAILED) {
        for (int i = 0;
             i < 50 && !atomic_load(&h->ready) && !atomic_load(&c->abort_local);
             i++)
          futex_wait(&h->ready, 0, WAIT_MS);
        if (atomic_load(&h->ready))
          theirs = (long)h->nranks;
        munmap(h, head);
      }
      snprintf(msg, cap,
               "emu communicator: rank %d joined with nranks %d, but rank 0 "
               "created it for %ld ranks",
               c->rank, c->nranks, theirs);
      return HK_ERR_INVALID_ARG;
    }
  }
  shm_header *h = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (h == MAP_FAILED) {
    snprintf(msg, cap, "emu communicator: mapping %s: %s", c->name,
             strerror(e));
    if (c->rank == 0)
      shm_unlink(c->name);
    return HK_ERR_SYSTEM;
  }
  if (c->rank == 0) {
    h->magic = SHM_MAGIC;
    h->nranks = (uint32_t)c->nranks;
    h->chunk_bytes = HK_EMU_CHUNK_BYTES;
    h->slot_offset = layout_slot_offset(c->nranks);
    atomic_store_explicit(&h->ready, 1, memory_order_release);
    futex_wake(&h->ready);
  }
  pthread_mutex_lock(&c->mu);
  c->hdr = h;
  c->map_bytes = bytes;
  pthread_mutex_unlock(&c->mu);
  *out = h;
  return HK_OK;
}

static hk_status attach(hk_dev_comm c, char *msg, size_t cap) {
  shm_header *h;
  hk_status st = attach_map(c, &h, msg, cap);
  if (st != HK_OK)
    return st;
  while (!atomic_load_explicit(&h->ready, memory_order_acquire)) {
    if (wait_cut(c, h, "init", msg, cap))
      return HK_ERR_SYSTEM;
    futex_wait(&h->ready, 0, WAIT_MS);
  }
  if (h->magic != SHM_MAGIC || h->nranks != (uint32_t)c->nranks) {
    snprintf(msg, cap,
             "emu communicator: %s is not a segment for %d ranks (%u)", c->name,
             c->nranks, h->nranks);
    return HK_ERR_INVALID_ARG;
  }
  /* init is complete on a rank only once the name is gone, so a rank that
   * sees its init done sees nothing in /dev/shm */
  uint32_t n = atomic_fetch_add(&h->attached, 1) + 1;
  if (n == (uint32_t)c->nranks) {
    shm_unlink(c->name); /* everyone has it mapped: nothing left behind */
    atomic_store(&h->unlinked, 1);
    futex_wake(&h->unlinked);
  }
  while (!atomic_load(&h->unlinked)) {
    if (wait_cut(c, h, "init", msg, cap))
      return HK_ERR_SYSTEM;
    futex_wait(&h->unlinked, 0, WAIT_MS);
  }
  return HK_OK;
}

static void *init_main(void *arg) {
  hk_dev_comm c = arg;
  char msg[EMU_MSG_CAP] = "";
  hk_status st = attach(c, msg, sizeof msg);
  pthread_mutex_lock(&c->mu);
  if (st != HK_OK && c->err == HK_OK) {
    c->err = st;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
  }
  c->init_ok = st == HK_OK;
  c->init_done = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

hk_status emu_comm_init(hk_device *dev, const uint8_t id[HK_DEV_UID_BYTES],
                        int nranks, int rank, hk_dev_comm *out) {
  *out = NULL;
  emu_device *d = emu_dev(dev, "comm_init");
  if (!d)
    return HK_ERR_INVALID_ARG;
  if (nranks < 1 || nranks > HK_EMU_MAX_RANKS || rank < 0 || rank >= nranks)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: comm_init: rank %d of %d (1 to %d ranks)", rank,
                   nranks, HK_EMU_MAX_RANKS);
  hk_dev_comm c = calloc(1, sizeof *c);
  if (!c)
    return hk_fail(HK_ERR_NOMEM, "emu: comm_init: out of host memory");
  hk_status st = hk_emu_comm_shm_name(id, c->name, sizeof c->name);
  if (st != HK_OK) {
    free(c);
    return st;
  }
  c->dev = d;
  c->nranks = nranks;
  c->rank = rank;
  c->refs = 1;
  atomic_init(&c->abort_local, 0);
  atomic_init(&c->next_seq, 0);
  atomic_init(&c->busy, 0);
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  int e = pthread_create(&c->init_thread, NULL, init_main, c);
  if (e) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "emu: comm_init: thread");
  }
  pthread_setname_np(c->init_thread, "hk-emu-comm");
  *out = c;
  return HK_OK;
}

/* ---- the barrier ---- */

static hk_status barrier(hk_dev_comm c, shm_header *h, const char *what,
                         char *msg, size_t cap) {
  uint32_t gen = atomic_load_explicit(&h->bar_gen, memory_order_acquire);
  uint32_t was =
      atomic_fetch_add_explicit(&h->bar_count, 1, memory_order_acq_rel);
  if (was == (uint32_t)c->nranks - 1) {
    atomic_store_explicit(&h->bar_count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bar_gen, 1, memory_order_release);
    futex_wake(&h->bar_gen);
    return HK_OK;
  }
  futex_wake(&h->bar_count); /* for hk_emu_comm_wait_arrived */
  while (atomic_load_explicit(&h->bar_gen, memory_order_acquire) == gen) {
    if (wait_cut(c, h, what, msg, cap))
      return HK_ERR_SYSTEM;
    futex_wait(&h->bar_gen, gen, WAIT_MS);
  }
  return HK_OK;
}

/* ---- operations ---- */

typedef struct comm_op {
  emu_op base;
  hk_dev_comm c;
  int kind;
  hk_dtype dtype;
  hk_op op;
  int root;
  size_t count; /* as passed (allreduce/broadcast count, the others' per-rank
                   count) */
  emu_range send, recv;
  uint64_t seq;
  unsigned index; /* the device's communicator op number (faults) */
  int fault;
  char what[48]; /* "allreduce #3" */
} comm_op;

static void comm_op_destroy(emu_op *op) {
  comm_op *o = (comm_op *)op;
  emu_range_release(&o->send);
  emu_range_release(&o->recv);
  comm_unref(o->c);
  free(o);
}

/* Rank r's slot and descriptor in buffer `par` (0 or 1). */
static char *slot(shm_header *h, int par, int r) {
  return (char *)h + h->slot_offset +
         ((size_t)par * h->nranks + (size_t)r) * h->chunk_bytes;
}

static shm_desc *desc(shm_header *h, int par, int r) {
  return &h->desc[(size_t)par * h->nranks + (size_t)r];
}

/* Moves this rank's part of one round into its slot. */
static void put(const comm_op *o, shm_header *h, int par, size_t off, size_t m,
                size_t es) {
  const char *send = o->send.ptr;
  char *mine = slot(h, par, o->c->rank);
  int n = o->c->nranks;
  switch (o->kind) {
  case K_ALLREDUCE:
  case K_ALLGATHER:
    memcpy(mine, send + off * es, m * es);
    break;
  case K_REDUCESCATTER:
    for (int b = 0; b < n; b++)
      memcpy(mine + (size_t)b * m * es,
             send + ((size_t)b * o->count + off) * es, m * es);
    break;
  default: /* broadcast */
    if (o->c->rank == o->root)
      memcpy(mine, send + off * es, m * es);
  }
}

/* Computes this rank's output of one round from the slots: rank order. */
static void take(const comm_op *o, shm_header *h, int par, size_t off, size_t m,
                 size_t es) {
  char *recv = o->recv.ptr;
  int n = o->c->nranks, me = o->c->rank;
  switch (o->kind) {
  case K_ALLREDUCE:
  case K_REDUCESCATTER: {
    size_t at = o->kind == K_ALLREDUCE ? 0 : (size_t)me * m * es;
    char *v = recv + off * es;
    memcpy(v, slot(h, par, 0) + at, m * es);
    for (int r = 1; r < n; r++)
      hk_reduce(v, v, slot(h, par, r) + at, m, o->dtype, o->op);
    break;
  }
  case K_ALLGATHER:
    for (int q = 0; q < n; q++)
      memcpy(recv + ((size_t)q * o->count + off) * es, slot(h, par, q), m * es);
    break;
  default:
    if (me != o->root)
      memcpy(recv + off * es, slot(h, par, o->root), m * es);
  }
}

/* 0 if every rank's descriptor equals rank 0's, else msg names the first
 * that differs. */
static int check_descs(const comm_op *o, shm_header *h, int par, char *msg,
                       size_t cap) {
  const shm_desc *d0 = desc(h, par, 0);
  for (int r = 1; r < o->c->nranks; r++) {
    const shm_desc *d = desc(h, par, r);
    if (desc_equal(d, d0))
      continue;
    int seq = d->seq != d0->seq;
    char a[160], b[160], ra[48], rb[48];
    desc_str(a, sizeof a, d, seq);
    desc_str(b, sizeof b, d0, seq);
    snprintf(msg, cap, "emu communicator: %s issued %s, %s %s",
             rank_str(ra, sizeof ra, r, d->job_rank), a,
             rank_str(rb, sizeof rb, 0, d0->job_rank), b);
    return 1;
  }
  return 0;
}

static hk_status rounds(comm_op *o, char *msg, size_t cap) {
  hk_dev_comm c = o->c;
  shm_header *h = c->hdr;
  size_t es = hk_dtype_size(o->dtype);
  size_t per = HK_EMU_CHUNK_BYTES / es; /* elements per slot */
  if (o->kind == K_REDUCESCATTER)
    per /= (size_t)c->nranks;
  size_t total = o->count;
  size_t nround = total ? (total + per - 1) / per : 1;
  for (size_t k = 0; k < nround; k++) {
    size_t off = k * per, m = total - off < per ? total - off : per;
    if (!total)
      m = 0;
    int par = (int)(c->rounds_run++ & 1);
    *desc(h, par, c->rank) =
        (shm_desc){.seq = o->seq,
                   .round = k,
                   .count = o->count,
                   .kind = o->kind,
                   .dtype = (int32_t)o->dtype,
                   .op = o->kind <= K_REDUCESCATTER ? (int32_t)o->op : 0,
                   .root = o->kind == K_BROADCAST ? o->root : 0,
                   .job_rank = c->dev->job_rank};
    put(o, h, par, off, m, es);
    if (barrier(c, h, o->what, msg, cap) != HK_OK)
      return HK_ERR_SYSTEM;
    if (check_descs(o, h, par, msg, cap))
      return HK_ERR_SYSTEM; /* every rank finds the same difference */
    take(o, h, par, off, m, es);
    /* no second barrier: the next round writes the other buffer, and no
     * rank can write this one again before every rank has passed the next
     * round's barrier, i.e. has finished reading this round */
  }
  return HK_OK;
}

/* The message of an op ended by this rank's comm_abort (an op the hang
 * fault hit says so, whether it had started hanging or not). */
static hk_status aborted_here(const comm_op *o, char *msg, size_t cap) {
  wait_cut(o->c, NULL, o->what, msg, cap);
  if (o->fault == HK_DEV_FAULT_HANG)
    snprintf(msg + strlen(msg), cap - strlen(msg),
             " while hung by HK_EMU_FAULT");
  return HK_ERR_SYSTEM;
}

static hk_status comm_run(emu_op *op, hk_dev_stream s, char *msg, size_t cap) {
  (void)s;
  comm_op *o = (comm_op *)op;
  hk_dev_comm c = o->c;
  pthread_mutex_lock(&c->mu);
  while (!c->init_done && !c->aborted)
    pthread_cond_wait(&c->cv, &c->mu);
  int aborted = c->aborted;
  hk_status err = c->err;
  if (!aborted && err != HK_OK)
    snprintf(msg, cap, "%s", c->errmsg); /* a failed comm does nothing */
  pthread_mutex_unlock(&c->mu);
  if (aborted)
    return aborted_here(o, msg, cap);
  if (err != HK_OK)
    return err;

  switch (o->fault) {
  case HK_DEV_FAULT_ERROR:
    emu_fault_message(msg, cap, o->fault, kind_names[o->kind], o->index,
                      c->dev->job_rank);
    set_error(c, msg);
    return HK_ERR_SYSTEM;
  case HK_DEV_FAULT_HANG:
    pthread_mutex_lock(&c->mu);
    while (!c->aborted)
      pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return aborted_here(o, msg, cap);
  case HK_DEV_FAULT_DELAY: {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns =
        (long long)t.tv_nsec + (long long)c->dev->fault.delay_ms * 1000000LL;
    t.tv_sec += (time_t)(ns / 1000000000LL);
    t.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&c->mu);
    while (!c->aborted &&
           pthread_cond_timedwait(&c->cv, &c->mu, &t) != ETIMEDOUT)
      ;
    aborted = c->aborted;
    pthread_mutex_unlock(&c->mu);
    if (aborted)
      return aborted_here(o, msg, cap);
    break;
  }
  default:
    break;
  }
  int idle = 0;
  if (!atomic_compare_exchange_strong(&c->busy, &idle, 1)) {
    snprintf(msg, cap,
             "emu communicator: %s started while another operation of the "
             "communicator was running on another stream (order them)",
             o->what);
    set_error(c, msg);
    return HK_ERR_SYSTEM;
  }
  hk_status st = rounds(o, msg, cap);
  atomic_store(&c->busy, 0);
  if (st != HK_OK)
    set_error(c, msg);
  return st;
}

/* Validates and enqueues one op: send (sbytes) and recv (rbytes) must be
 * device memory. */
static hk_status comm_enqueue(hk_dev_comm c, int kind, const void *send,
                              size_t scount, void *recv, size_t rcount,
                              size_t count, hk_dtype dtype, hk_op op, int root,
                              hk_dev_stream s) {
  const char *name = kind_names[kind];
  if (!c)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: comm_%s: NULL communicator", name);
  size_t es = hk_dtype_size(dtype), sb, rb;
  if (!es)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: comm_%s: bad dtype %d", name,
                   (int)dtype);
  if (kind <= K_REDUCESCATTER) {
    if (op == HK_AVERAGE)
      return hk_fail(HK_ERR_INVALID_ARG,
                     "emu: comm_%s: HK_AVERAGE is not a communicator op (hk "
                     "sums and divides in the unpack; device.h)",
                     name);
    if (!hk_reduce_supported(dtype, op))
      return hk_fail(HK_ERR_INVALID_ARG,
                     "emu: comm_%s: op %d on %s is not a reduction hk runs",
                     name, (int)op, hk_dtype_name(dtype));
  }
  if (kind == K_BROADCAST && (root < 0 || root >= c->nranks))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: comm_broadcast: root %d of %d ranks", root, c->nranks);
  if (!emu_mul(scount, es, &sb) || !emu_mul(rcount, es, &rb))
    return hk_fail(HK_ERR_INVALID_ARG, "emu: comm_%s: count %zu too large",
                   name, count);
  comm_op *o = calloc(1, sizeof *o);
  if (!o)
    return hk_fail(HK_ERR_NOMEM, "emu: comm_%s: out of host memory", name);
  char what[64];
  snprintf(what, sizeof what, "comm_%s %s", name,
           kind == K_BROADCAST ? "buf" : "recv");
  hk_status st = emu_range_resolve(recv, rb, 1, what, &o->recv);
  if (st == HK_OK && kind != K_BROADCAST) {
    snprintf(what, sizeof what, "comm_%s send", name);
    st = emu_range_resolve(send, sb, 1, what, &o->send);
  }
  if (st != HK_OK) {
    emu_range_release(&o->recv);
    emu_range_release(&o->send);
    free(o);
    return st;
  }
  if (kind == K_BROADCAST)
    o->send.ptr = o->recv.ptr; /* one buffer, referenced once */
  o->base.run = comm_run;
  o->base.destroy = comm_op_destroy;
  o->c = c;
  o->kind = kind;
  o->dtype = dtype;
  o->op = op;
  o->root = root;
  o->count = count;
  o->seq = atomic_fetch_add(&c->next_seq, 1);
  o->index = atomic_fetch_add(&c->dev->comm_ops, 1);
  o->fault = emu_fault_for(c->dev, o->index);
  if (o->fault == HK_DEV_FAULT_ENQUEUE) { /* the call fails, nothing queued */
    char msg[EMU_MSG_CAP];
    emu_fault_message(msg, sizeof msg, o->fault, kind_names[kind], o->index,
                      c->dev->job_rank);
    set_error(c, msg);
    emu_range_release(&o->recv);
    if (kind != K_BROADCAST)
      emu_range_release(&o->send);
    free(o);
    return hk_fail(HK_ERR_SYSTEM, "emu: comm_%s: %s", name, msg);
  }
  snprintf(o->what, sizeof o->what, "%s #%u", name, o->index);
  pthread_mutex_lock(&c->mu);
  c->refs++;
  pthread_mutex_unlock(&c->mu);
  return emu_enqueue(s, &o->base);
}

hk_status emu_comm_allreduce(hk_dev_comm c, const void *send, void *recv,
                             size_t count, hk_dtype dtype, hk_op op,
                             hk_dev_stream s) {
  return comm_enqueue(c, K_ALLREDUCE, send, count, recv, count, count, dtype,
                      op, 0, s);
}

hk_status emu_comm_reducescatter(hk_dev_comm c, const void *send, void *recv,
                                 size_t recvcount, hk_dtype dtype, hk_op op,
                                 hk_dev_stream s) {
  size_t total = 0;
  if (c && !emu_mul(recvcount, (size_t)c->nranks, &total))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: comm_reducescatter: count %zu too large", recvcount);
  return comm_enqueue(c, K_REDUCESCATTER, send, total, recv, recvcount,
                      recvcount, dtype, op, 0, s);
}

hk_status emu_comm_allgather(hk_dev_comm c, const void *send, void *recv,
                             size_t sendcount, hk_dtype dtype,
                             hk_dev_stream s) {
  size_t total = 0;
  if (c && !emu_mul(sendcount, (size_t)c->nranks, &total))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: comm_allgather: count %zu too large", sendcount);
  return comm_enqueue(c, K_ALLGATHER, send, sendcount, recv, total, sendcount,
                      dtype, HK_SUM, 0, s);
}

hk_status emu_comm_broadcast(hk_dev_comm c, void *buf, size_t count,
                             hk_dtype dtype, int root, hk_dev_stream s) {
  return comm_enqueue(c, K_BROADCAST, buf, count, buf, count, count, dtype,
                      HK_SUM, root, s);
}

hk_status emu_comm_async_error(hk_dev_comm c, int *pending) {
  if (pending)
    *pending = 0;
  if (!c)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: comm_async_error: NULL comm");
  char msg[EMU_MSG_CAP];
  pthread_mutex_lock(&c->mu);
  /* a peer's abort counts even while no op of ours is running */
  if (c->err == HK_OK && c->hdr && peer_aborted(c, c->hdr, msg, sizeof msg)) {
    c->err = HK_ERR_SYSTEM;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
  }
  hk_status st = c->err;
  if (st != HK_OK)
    snprintf(msg, sizeof msg, "%s", c->errmsg);
  if (pending && st == HK_OK)
    *pending = !c->init_done;
  pthread_mutex_unlock(&c->mu);
  return st == HK_OK ? HK_OK : hk_fail(st, "%s", msg);
}

void emu_comm_abort(hk_dev_comm c) {
  if (!c)
    return;
  atomic_fetch_add(&aborts_made, 1);
  char reason[EMU_MSG_CAP];
  pthread_mutex_lock(&c->mu);
  c->aborted = 1;
  atomic_store(&c->abort_local, 1);
  snprintf(reason, sizeof reason, "%s",
           c->err != HK_OK ? c->errmsg
                           : "comm_abort called (no async error on that rank)");
  shm_header *h = c->hdr;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (h)
    publish_abort(c, h, reason);
  pthread_join(c->init_thread, NULL); /* it sees the abort at once */
  pthread_mutex_lock(&c->mu);
  shm_header *late = c->hdr != h ? c->hdr : NULL; /* mapped meanwhile */
  int unlinked = c->init_ok;
  pthread_mutex_unlock(&c->mu);
  if (late)
    publish_abort(c, late, reason);
  if (!unlinked)
    shm_unlink(c->name); /* not all attached: remove it (ENOENT is fine) */
  comm_unref(c);         /* queued ops end at once and drop theirs */
}

void emu_comm_destroy(hk_dev_comm c) {
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  int healthy = c->init_done && c->err == HK_OK;
  if (healthy)
    while (c->refs > 1) /* its queued operations complete */
      pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  if (!healthy) {
    emu_comm_abort(c);
    return;
  }
  pthread_join(c->init_thread, NULL);
  comm_unref(c);
}

hk_status hk_emu_comm_wait_arrived(hk_dev_comm c, int n) {
  if (!c || n < 1 || n > c->nranks)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: hk_emu_comm_wait_arrived: n %d of %d ranks", n,
                   c ? c->nranks : 0);
  pthread_mutex_lock(&c->mu);
  while (!c->init_done && !c->aborted)
    pthread_cond_wait(&c->cv, &c->mu);
  shm_header *h = c->init_ok ? c->hdr : NULL;
  pthread_mutex_unlock(&c->mu);
  char msg[EMU_MSG_CAP];
  for (;;) {
    if (!h || wait_cut(c, h, "wait", msg, sizeof msg))
      return hk_fail(HK_ERR_SYSTEM, "%s",
                     h ? msg : "emu communicator: init failed or aborted");
    uint32_t k = atomic_load(&h->bar_count);
    if (k >= (uint32_t)n)
      return HK_OK;
    futex_wait(&h->bar_count, k, WAIT_MS);
  }
}
