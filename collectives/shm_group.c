/*
 * shm_group.c - the single-copy engine (see shm_group.h).
 */
#include "collectives/shm_group.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "device/host/reduce.h"

/* The fold works through a slice in blocks of this many bytes, so the
 * running value stays in L1 while the n inputs stream past it. */
#define FOLD_BLOCK ((size_t)8192)

hk_status hk_shm_group_init(hk_shm_group *g, const hk_shm_seg *seg, int n,
                            int me, const int *local, const int *ranks,
                            const int *fds, const hk_io *io) {
  memset(g, 0, sizeof *g);
  const size_t slot = seg->hdr->layout.slot_bytes;
  if (n < 1 || me < 0 || me >= n || n > seg->hdr->layout.n ||
      slot < (size_t)n * HK_SHM_LINE)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "an shm group of %d (position %d) over a segment of %d "
                   "ranks with %zu-byte slots",
                   n, me, seg->hdr->layout.n, slot);
  g->n = n;
  g->me = me;
  g->io = *io;
  g->slice = slot / (size_t)n / HK_SHM_LINE * HK_SHM_LINE;
  g->ctl = calloc((size_t)n, sizeof *g->ctl);
  g->slot = calloc(2 * (size_t)n, sizeof *g->slot);
  g->peers = calloc((size_t)n, sizeof *g->peers);
  g->names = calloc((size_t)n, sizeof *g->names);
  g->owner = calloc(2 * (size_t)n, sizeof *g->owner);
  if (!g->ctl || !g->slot || !g->peers || !g->names || !g->owner) {
    hk_shm_group_destroy(g);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate an shm group of %d", n);
  }
  g->start = g->owner + n;
  for (int p = 0; p < n; p++) {
    g->ctl[p] = hk_shm_seg_ctl(seg, local[p]);
    g->slot[2 * p] = hk_shm_seg_slot(seg, local[p], 0);
    g->slot[2 * p + 1] = hk_shm_seg_slot(seg, local[p], 1);
    snprintf(g->names[p], sizeof g->names[p], "rank %d", ranks[p]);
    g->peers[p] = (hk_shm_peer){p == me ? -1 : fds[p], g->names[p]};
  }
  /* every member starts at the same count: the segment's counters are
   * zero when created and only group calls move them */
  g->rounds =
      atomic_load_explicit(&g->ctl[me]->progress, memory_order_relaxed) / 3;
  return HK_OK;
}

void hk_shm_group_destroy(hk_shm_group *g) {
  free(g->ctl);
  free(g->slot);
  free(g->peers);
  free(g->names);
  free(g->owner);
  memset(g, 0, sizeof *g);
}

/* ---- waiting for the members' progress ---- */

typedef struct progress_wait {
  hk_shm_group *g;
  uint64_t target; /* every member in [first..] must have reached it */
  int only;        /* >= 0: only this position */
} progress_wait;

static int behind(const hk_shm_group *g, int p, uint64_t target) {
  return atomic_load_explicit(&g->ctl[p]->progress, memory_order_acquire) <
         target;
}

static int pw_ready(void *arg) {
  const progress_wait *w = arg;
  if (w->only >= 0)
    return !behind(w->g, w->only, w->target);
  for (int p = 0; p < w->g->n; p++)
    if (p != w->g->me && behind(w->g, p, w->target))
      return 0;
  return 1;
}

static void pw_arm(void *arg, int on) {
  const progress_wait *w = arg;
  atomic_store_explicit(&w->g->ctl[w->g->me]->bell.group_wait,
                        on ? HK_SHM_SLEEP_FUTEX : HK_SHM_AWAKE,
                        memory_order_seq_cst);
}

static int pw_waiting_for(void *arg, hk_shm_peer *peers, int max) {
  const progress_wait *w = arg;
  int k = 0;
  for (int p = 0; p < w->g->n && k < max; p++)
    if (p != w->g->me && (w->only < 0 || p == w->only) &&
        behind(w->g, p, w->target))
      peers[k++] = w->g->peers[p];
  return k;
}

static hk_status wait_progress(hk_shm_group *g, int only, uint64_t target,
                               const char *what) {
  progress_wait w = {g, target, only};
  if (pw_ready(&w))
    return HK_OK;
  hk_shm_cond c = {pw_ready, pw_arm, pw_waiting_for, &w, &g->ctl[g->me]->bell};
  return hk_shm_wait(&c, &g->io, what);
}

/* Publishes this rank's progress and wakes the members that sleep. */
static void publish(hk_shm_group *g, uint64_t value) {
  atomic_store_explicit(&g->ctl[g->me]->progress, value, memory_order_release);
  for (int p = 0; p < g->n; p++)
    if (p != g->me)
      hk_shm_wake_flag(&g->ctl[p]->bell.group_wait, &g->ctl[p]->bell, -1);
}

/* ---- one round ---- */

/* Segment j's elements in round t: [*lo, *lo + return value). */
static size_t slice_of(const hk_shm_job *job, size_t per, int j, uint64_t t,
                       size_t *lo) {
  size_t a = job->seg[j] + (size_t)t * per, b = job->seg[j + 1];
  *lo = a;
  return a < b ? (b - a < per ? b - a : per) : 0;
}

/* ---- the job's buffers: contiguous, or pieces ---- */

/* The address of element e of the job's input (out = 0) or output (out
 * = 1), and in *m how many elements from e are contiguous there. *hint is
 * a piece index from the caller's previous call (0 at first): the phases
 * walk the pieces in order, so the piece is nearly always *hint or the
 * next one, and the binary search runs only when it is neither. */
static uint8_t *run_at(const hk_shm_job *job, int out, size_t e, size_t *m,
                       size_t *hint) {
  const size_t esz = hk_dtype_size(job->dtype);
  if (job->npieces == 0) {
    *m = SIZE_MAX;
    return (out ? job->dst : (uint8_t *)job->src) + e * esz;
  }
  size_t lo = *hint < job->npieces ? *hint : 0;
  const hk_shm_piece *p = &job->pieces[lo];
  if (e < p->off || e >= p->off + p->count) {
    if (lo + 1 < job->npieces && e >= p[1].off && e < p[1].off + p[1].count)
      lo++;
    else { /* the last piece with off <= e */
      size_t hi = job->npieces;
      lo = 0;
      while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (job->pieces[mid].off <= e)
          lo = mid;
        else
          hi = mid;
      }
    }
    p = &job->pieces[lo];
  }
  *hint = lo;
  *m = p->off + p->count - e;
  return (out ? p->dst : (uint8_t *)p->src) + (e - p->off) * esz;
}

/* Starts loading the first lines of the piece after *hint (out: for
 * writing): the hardware prefetchers stop at page boundaries, and the
 * pieces of a fused batch are many small runs in separate allocations,
 * each of which would otherwise begin with a train of cache misses
 * (small1000 at np 2 on the 2-core VM: copying out of the slots went
 * from 235 to 170 us per step). */
static void prefetch_next(const hk_shm_job *job, int out, size_t hint) {
  if (job->npieces == 0 || hint + 1 >= job->npieces)
    return;
  const hk_shm_piece *p = &job->pieces[hint + 1];
  const uint8_t *a = out ? p->dst : p->src;
  size_t bytes = p->count * hk_dtype_size(job->dtype);
  for (size_t o = 0; o < bytes && o < 1024; o += HK_SHM_LINE)
    if (out)
      __builtin_prefetch(a + o, 1, 3);
    else
      __builtin_prefetch(a + o, 0, 3);
}

/* 1 when the job's inputs are multiplied as they are read (in_scale). */
static int scaled(const hk_shm_job *job) {
  return job->in_scale != 0.0 && job->in_scale != 1.0;
}

/* Copies elements [lo, lo + ne) of the job's input (from_out = 0) or
 * output (1) to `to`. */
static void copy_from_job(const hk_shm_job *job, int from_out, size_t lo,
                          size_t ne, uint8_t *to) {
  const size_t esz = hk_dtype_size(job->dtype);
  size_t hint = 0;
  while (ne > 0) {
    size_t m;
    const uint8_t *p = run_at(job, from_out, lo, &m, &hint);
    m = m < ne ? m : ne;
    prefetch_next(job, from_out, hint);
    if (!from_out && scaled(job))
      hk_scale_copy(to, p, m, job->dtype, job->in_scale);
    else
      memcpy(to, p, m * esz);
    to += m * esz;
    lo += m;
    ne -= m;
  }
}

/* Copies `from` to elements [lo, lo + ne) of the job's output. */
static void copy_to_job(const hk_shm_job *job, size_t lo, size_t ne,
                        const uint8_t *from) {
  const size_t esz = hk_dtype_size(job->dtype);
  size_t hint = 0;
  while (ne > 0) {
    size_t m;
    uint8_t *p = run_at(job, 1, lo, &m, &hint);
    m = m < ne ? m : ne;
    prefetch_next(job, 1, hint);
    memcpy(p, from, m * esz);
    from += m * esz;
    lo += m;
    ne -= m;
  }
}

/* acc = the fold of in[0..n) over ne elements (in[i] is ring position
 * start+i's value), block by block; then the finish; then, if out is not
 * NULL, the block is copied there while it is still in L1 (instead of
 * re-reading the whole slice from L2 for a separate copy afterwards;
 * np 2, 16 MiB on the 2-core VM: busbw 6.6-6.7 -> 7.1-7.2 GB/s). out may
 * be one of in[]: a block is read whole before it is written. */
static void fold_core(const hk_shm_job *job, const uint8_t *const *in, int n,
                      size_t ne, uint8_t *acc, uint8_t *out) {
  const size_t esz = hk_dtype_size(job->dtype);
  const size_t blk = FOLD_BLOCK / esz;
  for (size_t b = 0; b < ne; b += blk) {
    size_t m = ne - b < blk ? ne - b : blk, o = b * esz;
    if (n == 1)
      memcpy(acc + o, in[0] + o, m * esz);
    else
      hk_reduce(acc + o, in[1] + o, in[0] + o, m, job->dtype, job->op);
    for (int i = 2; i < n; i++)
      hk_reduce(acc + o, in[i] + o, acc + o, m, job->dtype, job->op);
    if (job->finish)
      hk_ring_finish_apply(acc + o, m, job->dtype, job->op, job->fin, n);
    if (out)
      memcpy(out + o, acc + o, m * esz);
  }
}

/* Folds segment j's slice (ne elements at element offset lo) over every
 * position, in ring order from start[j], into acc, and copies the result
 * to the owned segment's output (own_out, or the job's output). A scaled
 * job's own input goes through `own` block by block (it is not in a slot,
 * where the copy-in scaled the peers' inputs). */
static void fold(hk_shm_group *g, const hk_shm_job *job, int j, int half,
                 size_t lo, size_t ne, uint8_t *acc) {
  const int n = g->n;
  const size_t esz = hk_dtype_size(job->dtype);
  const size_t off = (size_t)j * g->slice;
  const int scale = scaled(job);
  const uint8_t *in[HK_SHM_MAX_RANKS];
  uint8_t own_block[FOLD_BLOCK];
  size_t hint = 0, hint_out = 0;
  for (size_t done = 0, m, mo; done < ne; done += m) {
    /* this rank's own input, one contiguous run of it at a time (a block
     * at most when scaled); the output's runs are the same (a piece has
     * both, or both are whole) */
    const uint8_t *own = run_at(job, 0, lo + done, &m, &hint);
    uint8_t *out = job->own_out ? job->own_out + (lo + done - job->seg[j]) * esz
                                : run_at(job, 1, lo + done, &mo, &hint_out);
    m = m < ne - done ? m : ne - done;
    if (scale) {
      m = m < FOLD_BLOCK / esz ? m : FOLD_BLOCK / esz;
      hk_scale_copy(own_block, own, m, job->dtype, job->in_scale);
      own = own_block;
    }
    for (int i = 0; i < n; i++) {
      int q = (job->start[j] + i) % n;
      in[i] = q == g->me ? own : g->slot[2 * q + half] + off + done * esz;
    }
    fold_core(job, in, n, m, acc + done * esz, out);
  }
}

/* One-shot (small buffers): every rank copies its whole buffer into its
 * slot, then folds every segment itself, from every slot, in the same
 * order as above; one synchronisation instead of three, and each rank
 * computes the same bits the owners would. */
static hk_status oneshot(hk_shm_group *g, const hk_shm_job *job,
                         const char *what) {
  const int n = g->n, me = g->me;
  const size_t esz = hk_dtype_size(job->dtype);
  const uint64_t r = g->rounds, base = 3 * r;
  const int half = (int)(r & 1);
  hk_status st = HK_OK;
  if (r >= 2 && (st = wait_progress(g, -1, base - 3, what)) != HK_OK)
    return st;
  copy_from_job(job, 0, 0, job->seg[n], g->slot[2 * me + half]);
  publish(g, base + 2);
  if ((st = wait_progress(g, -1, base + 2, what)) != HK_OK)
    return st;
  const uint8_t *in[HK_SHM_MAX_RANKS];
  size_t hint = 0;
  for (int j = 0; j < n; j++)
    for (size_t e = job->seg[j], m; e < job->seg[j + 1]; e += m) {
      uint8_t *out = run_at(job, 1, e, &m, &hint); /* one run at a time */
      m = m < job->seg[j + 1] - e ? m : job->seg[j + 1] - e;
      for (int i = 0; i < n; i++)
        in[i] = g->slot[2 * ((job->start[j] + i) % n) + half] + e * esz;
      fold_core(job, in, n, m, out, NULL);
    }
  publish(g, base + 3);
  g->rounds++;
  return HK_OK;
}

static hk_status round_once(hk_shm_group *g, const hk_shm_job *job, size_t per,
                            uint64_t t, const char *what) {
  const int n = g->n, me = g->me;
  const uint64_t r = g->rounds, base = 3 * r;
  const int half = (int)(r & 1);
  uint8_t *mine = g->slot[2 * me + half];
  const int reduce = (job->mode & HK_SHM_REDUCE) != 0;
  const int gather = (job->mode & HK_SHM_GATHER) != 0;
  hk_status st = HK_OK;
  size_t lo, ne;
  /* A: the half is free once every member finished round r-2 */
  if (r >= 2 && (st = wait_progress(g, -1, base - 3, what)) != HK_OK)
    return st;
  for (int j = 0; j < n; j++) {
    if ((job->owner[j] == me) == reduce)
      continue; /* reductions copy what others own; gathers what we own */
    if ((ne = slice_of(job, per, j, t, &lo)) > 0)
      copy_from_job(job, !reduce, lo, ne, mine + (size_t)j * g->slice);
  }
  publish(g, base + (reduce ? 1 : 2));
  /* B: fold the owned segments once every member has copied in */
  if (reduce) {
    if ((st = wait_progress(g, -1, base + 1, what)) != HK_OK)
      return st;
    for (int j = 0; j < n; j++) {
      if (job->owner[j] != me || (ne = slice_of(job, per, j, t, &lo)) == 0)
        continue;
      fold(g, job, j, half, lo, ne, mine + (size_t)j * g->slice);
    }
    publish(g, base + 2);
  }
  /* C: copy every other owner's results as soon as it has them */
  if (gather) {
    for (int k = 1; k <= n; k++) {
      int j = (me + k) % n; /* start after our own: spreads the readers */
      int o = job->owner[j];
      if (o == me || (ne = slice_of(job, per, j, t, &lo)) == 0)
        continue;
      if ((st = wait_progress(g, o, base + 2, what)) != HK_OK)
        return st;
      copy_to_job(job, lo, ne, g->slot[2 * o + half] + (size_t)j * g->slice);
    }
  }
  publish(g, base + 3);
  g->rounds++;
  return HK_OK;
}

hk_status hk_shm_group_run(hk_shm_group *g, const hk_shm_job *job) {
  const size_t esz = hk_dtype_size(job->dtype), per = g->slice / esz;
  if (job->mode == (HK_SHM_REDUCE | HK_SHM_GATHER) &&
      job->seg[g->n] * esz <=
          HK_SHM_ONESHOT_BYTES * 4 / ((size_t)g->n * (size_t)g->n) &&
      job->seg[g->n] * esz <= g->slice * (size_t)g->n && job->seg[g->n])
    return oneshot(g, job, "in shm allreduce");
  size_t longest = 0;
  for (int j = 0; j < g->n; j++)
    if (job->seg[j + 1] - job->seg[j] > longest)
      longest = job->seg[j + 1] - job->seg[j];
  const uint64_t rounds = (longest + per - 1) / per;
  const char *what = job->mode == HK_SHM_GATHER   ? "in shm allgather"
                     : job->mode == HK_SHM_REDUCE ? "in shm reduce-scatter"
                                                  : "in shm allreduce";
  for (uint64_t t = 0; t < rounds; t++) {
    hk_status st = round_once(g, job, per, t, what);
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}
