#include "worker/execute.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "collectives/alltoall.h"
#include "collectives/ring.h"
#include "collectives/shm_ring.h"
#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/fusion.h"
#include "device/host/reduce.h"
#include "worker/devflight.h"
#include "worker/devplane.h"
#include "worker/queue.h"
#include "worker/sets.h"
#include "worker/tune.h"

/* Working arrays for the n responses of one message, kept between calls
 * (ctx->plan, grown as needed; hk_execute_release frees them). */
typedef struct hk_exec_plan {
  hk_handle *h;
  hk_handle *done; /* a batch's handles, completed together */
  hk_fusion_item *items;
  uint8_t *taken;
  uint32_t *order, *starts;
  size_t *counts, *seg, *where;
  hk_shm_piece *pieces; /* run_fused_in_place: cap x size pieces */
  size_t *firsts;       /* and cap x (size + 1) segment offsets */
  hk_obs_tensor *obs;   /* a batch's tensors as the observers see them */
  uint32_t cap;         /* responses the arrays hold */
} plan;

/* The name of what this rank's links to the members of S are (the
 * observers' hk_obs_batch.transport): the kinds in use,
 * "+"-joined (hk_link_kinds: "tcp", "shm+tcp", ...): TCP over
 * HK_SOCKETS_PER_PEER sockets, MPI (HK_CROSS_TRANSPORT=mpi), shared
 * memory (HK_INTRA_TRANSPORT). */
static const char *mesh_transport(const hk_set *S, char *buf, size_t cap) {
  return hk_link_kinds(S->peers, S->size, buf, cap);
}

/* What a call that failed alike on every rank did for its handle (a
 * process set call, an output no rank could allocate; others run or fail
 * the job): HK_OK, or the failure every rank gets, and why. */
typedef struct verdict {
  hk_status st;
  char why[HK_WIRE_MAX_REASON_LEN + 1];
} verdict;

static void plan_free(plan *p) {
  free(p->h);
  free(p->done);
  free(p->items);
  free(p->taken);
  free(p->order);
  free(p->starts);
  free(p->counts);
  free(p->seg);
  free(p->where);
  free(p->pieces);
  free(p->firsts);
  free(p->obs);
  memset(p, 0, sizeof *p);
}

/* Grows array p to n elements of its type: 1, or 0 (p unchanged) when
 * realloc fails. tmp_ is a void * in scope. */
#define GROW(p, n)                                                             \
  ((tmp_ = realloc((p), (size_t)(n) * sizeof *(p))) ? ((p) = tmp_, 1) : 0)

/* The plan for n responses: ctx->plan, grown if need be, with h[] and
 * items[] cleared for them (the rest is written before it is read). */
static hk_status plan_get(hk_ctx *ctx, uint32_t n, plan **out) {
  plan *p = ctx->plan;
  if (!p && !(p = ctx->plan = calloc(1, sizeof *p)))
    return hk_fail(HK_ERR_NOMEM, "cannot plan %u responses", n);
  if (n > p->cap || !p->seg) {
    size_t c = p->cap ? p->cap : 64, size = (size_t)ctx->size;
    while (c < n)
      c *= 2;
    void *tmp_;
    if (!GROW(p->h, c) || !GROW(p->done, c) || !GROW(p->items, c) ||
        !GROW(p->taken, c) || !GROW(p->order, c) || !GROW(p->starts, c + 1) ||
        !GROW(p->counts, c) || !GROW(p->seg, size + 1) ||
        !GROW(p->where, c * size) || !GROW(p->pieces, c * size) ||
        !GROW(p->firsts, c * (size + 1)) || !GROW(p->obs, c)) {
      plan_free(p);
      return hk_fail(HK_ERR_NOMEM, "cannot plan %u responses", n);
    }
    p->cap = (uint32_t)c;
  }
  memset(p->h, 0, (size_t)n * sizeof *p->h);
  memset(p->items, 0, (size_t)n * sizeof *p->items);
  *out = p;
  return HK_OK;
}

static hk_status map_fusion_buffer(hk_ctx *ctx) {
  if (ctx->fusion && ctx->fusion_bytes >= ctx->cfg.fusion_threshold)
    return HK_OK;
  if (ctx->fusion) /* the autotuner raised the threshold */
    munmap(ctx->fusion, ctx->fusion_bytes);
  ctx->fusion = NULL;
  size_t bytes = ctx->cfg.fusion_threshold;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return hk_fail(HK_ERR_NOMEM,
                   "cannot map a %zu-byte fusion buffer "
                   "(HK_FUSION_THRESHOLD)",
                   bytes);
  /* First touch costs ~11 us per 4 KiB page on the reference VM and 46x
   * less with huge pages (bench/peers/results): ask for them. */
  madvise(p, bytes, MADV_HUGEPAGE);
  ctx->fusion = p;
  ctx->fusion_bytes = bytes;
  return HK_OK;
}

void hk_execute_release(hk_ctx *ctx) {
  if (ctx->fusion)
    munmap(ctx->fusion, ctx->fusion_bytes);
  ctx->fusion = NULL;
  if (ctx->plan)
    plan_free(ctx->plan);
  free(ctx->plan);
  ctx->plan = NULL;
}

/* Per collective: the name of the algorithm that runs it (the
 * observers' hk_obs_batch.algorithm). An allreduce's is its
 * implementation's schedule (collectives/allreduce.h). A barrier and a
 * join move no data: the negotiation that completed them was the
 * synchronisation. Indexed by hk_wire_coll; any other is a barrier's. */
static const char *const algo_labels[] = {
    /* hk_ring_broadcast: root -> root+1 -> ..., pipelined */
    [HK_COLL_BROADCAST] = "chain",
    [HK_COLL_ALLGATHER] = "ring",
    [HK_COLL_REDUCESCATTER] = "ring",
    [HK_COLL_ALLTOALL] = "pairwise",
    [HK_COLL_JOIN] = "negotiation",
    [HK_COLL_BARRIER] = "negotiation",
    /* the members' lists, allgathered over the world's ring */
    [HK_COLL_SET_ADD] = "ring",
    [HK_COLL_SET_REMOVE] = "negotiation",
};

static const char *algo_label(unsigned c, const hk_allreduce_impl *impl) {
  if (impl)
    return impl->schedule;
  return c < sizeof algo_labels / sizeof algo_labels[0] && algo_labels[c]
             ? algo_labels[c]
             : algo_labels[HK_COLL_BARRIER];
}

/* rows of a reduce-scatter split over n ranks: rank r's first row */
static size_t rs_first_row(size_t rows, int n, int r) {
  size_t q = rows / (size_t)n, m = rows % (size_t)n;
  return (size_t)r * q + ((size_t)r < m ? (size_t)r : m);
}

/* Allreduce of seg[size] elements split into seg (the ring's size
 * segments) with host implementation a of set S; fin may be NULL. */
static hk_status allreduce_with(hk_set *S, const hk_allreduce_impl *a,
                                const void *src, void *dst, const size_t *seg,
                                hk_dtype dtype, hk_op op,
                                const hk_ring_finish *fin) {
  hk_allreduce_call c = {
      .src = src, .dst = dst, .seg = seg, .dtype = dtype, .op = op, .fin = fin};
  return a->run(S->ar, &c);
}

/* An output of at least this many bytes is allocated by every rank
 * before the data moves, and the ranks agree that all of them could: a
 * failure (an allgather of 2^40 rows) fails that tensor on every rank and
 * the job goes on. Below it, running out of memory fails the job. The
 * agreement is one byte per rank around the ring, nothing next to moving
 * 16 MiB. */
#define AGREE_BYTES ((size_t)16 << 20)

/* For h's output of `bytes` bytes, which this rank could allocate if ok:
 * when bytes >= AGREE_BYTES, learns from every member of S whether it
 * could, and if one could not sets *v to the failure every rank gives h
 * (HK_ERR_NOMEM, naming the tensor, the bytes and the ranks). Below
 * AGREE_BYTES, !ok is this rank's HK_ERR_NOMEM (the job fails). Errors:
 * the ring's (hk_ring_allgather_records), HK_ERR_NOMEM. */
static hk_status agree_allocated(hk_set *S, hk_handle h, int ok, size_t bytes,
                                 verdict *v) {
  if (bytes < AGREE_BYTES)
    return ok ? HK_OK
              : hk_fail(HK_ERR_NOMEM, "cannot allocate %zu bytes", bytes);
  const int n = S->size;
  uint8_t mine = (uint8_t)(ok != 0), *all = malloc((size_t)n);
  if (!all)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %d flags", n);
  hk_status st = hk_ring_allgather_records(S->ring, &mine, 1, all);
  int failed = 0;
  for (int r = 0; r < n && st == HK_OK; r++)
    failed += !all[r];
  if (failed) {
    v->st = HK_ERR_NOMEM;
    int at = snprintf(v->why, sizeof v->why,
                      "tensor '%s': cannot allocate its output of %zu bytes "
                      "on rank%s",
                      h->req.name, bytes, failed > 1 ? "s" : "");
    for (int r = 0, k = 0; r < n && at > 0 && (size_t)at < sizeof v->why; r++)
      if (!all[r])
        at += snprintf(v->why + at, sizeof v->why - (size_t)at, "%s %d",
                       k++ ? "," : "", S->ranks ? S->ranks[r] : r);
  }
  free(all);
  return st;
}

/* Runs one lone tensor of set S on its own buffers. t[0..3] get the phase
 * times; divisor is the response's (ranks that took part); v what a
 * process set call did; impl the implementation an allreduce runs with
 * (its fusion item's: hk_allreduce_for_tensor), NULL for another
 * collective. */
static hk_status run_alone(hk_ctx *ctx, hk_set *S, hk_handle h,
                           const hk_allreduce_impl *impl, int32_t divisor,
                           const hk_wire_response *r, double *t, verdict *v) {
  const hk_wire_request *q = &h->req;
  const hk_dtype dtype = (hk_dtype)q->dtype;
  const size_t esz = hk_dtype_size(dtype);
  const int n = S->size;
  hk_ring *ring = S->ring;
  hk_status st = HK_OK;
  t[0] = t[1] = hk_now();
  switch (q->coll) {
  case HK_COLL_ALLREDUCE: {
    const void *src = h->sendbuf;
    /* a 16-bit average divides by a power of two first (reduce.h) */
    const double pre =
        hk_average_pre_divisor(dtype, (hk_op)q->op, divisor > 0 ? divisor : n);
    if (q->prescale != 1.0 || pre != 1.0) { /* scale into recvbuf */
      hk_scale_copy(h->recvbuf, h->sendbuf, q->count, dtype, q->prescale / pre);
      src = h->recvbuf;
    }
    hk_ring_finish fin = {divisor, q->postscale, pre};
    hk_ring_default_segments(q->count, n, ring->segs);
    st = allreduce_with(S, impl, src, h->recvbuf, ring->segs, dtype,
                        (hk_op)q->op, &fin);
    break;
  }
  case HK_COLL_BROADCAST:
    st = hk_ring_broadcast(ring, h->recvbuf, q->count, dtype, q->root);
    break;
  case HK_COLL_ALLGATHER: {
    size_t total = 0; /* rank 0 checked that it fits (negotiate.c) */
    for (int j = 0; j < n; j++)
      total += (size_t)r->counts[j] * q->row_elems;
    void *out = total ? malloc(total * esz) : NULL;
    st = agree_allocated(S, h, out || !total, total * esz, v);
    if (st != HK_OK || v->st != HK_OK) {
      free(out);
      break;
    }
    size_t *seg = ring->segs;
    seg[0] = 0;
    for (int j = 0; j < n; j++)
      seg[j + 1] = seg[j] + (size_t)r->counts[j] * q->row_elems;
    st = hk_ring_allgatherv(ring, h->sendbuf, out, seg, dtype);
    if (st != HK_OK || !h->out_buf) {
      free(out);
      break;
    }
    *h->out_buf = out;
    if (h->out_counts)
      for (int j = 0; j < n; j++)
        h->out_counts[j] = (size_t)r->counts[j];
    break;
  }
  case HK_COLL_REDUCESCATTER: {
    size_t *seg = ring->segs;
    for (int j = 0; j <= n; j++)
      seg[j] = rs_first_row(q->count, n, j) * q->row_elems;
    const double pre =
        hk_average_pre_divisor(dtype, (hk_op)q->op, divisor > 0 ? divisor : n);
    const void *src = h->sendbuf;
    void *scaled = NULL;
    /* the input scaled first (prescale, and a 16-bit average's division),
     * as allreduce's */
    if ((pre != 1.0 || q->prescale != 1.0) && seg[n]) {
      if (!(scaled = malloc(seg[n] * esz)))
        return hk_fail(HK_ERR_NOMEM, "cannot allocate %zu bytes", seg[n] * esz);
      hk_scale_copy(scaled, h->sendbuf, seg[n], dtype, q->prescale / pre);
      src = scaled;
    }
    hk_ring_finish fin = {divisor, q->postscale, pre};
    st = hk_ring_reducescatter(ring, src, h->recvbuf, seg, dtype, (hk_op)q->op,
                               &fin);
    free(scaled);
    if (st == HK_OK && h->out_rows)
      *h->out_rows = rs_first_row(q->count, n, S->rank + 1) -
                     rs_first_row(q->count, n, S->rank);
    break;
  }
  case HK_COLL_ALLTOALL: {
    size_t *recv_rows = calloc((size_t)n, sizeof *recv_rows);
    void *out = NULL;
    if (!recv_rows)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate alltoall counts");
    st = hk_alltoall_pairwise(S->rank, n, S->peers, &ctx->io, h->sendbuf,
                              h->splits, q->row_elems * esz, &out, recv_rows);
    if (st == HK_OK && h->out_buf)
      *h->out_buf = out;
    else
      free(out);
    if (st == HK_OK && h->out_counts)
      memcpy(h->out_counts, recv_rows, (size_t)n * sizeof *recv_rows);
    free(recv_rows);
    break;
  }
  case HK_COLL_JOIN: /* the rank that joined last, in the set */
    if (h->out_rows)
      *h->out_rows = (size_t)divisor;
    break;
  case HK_COLL_SET_ADD:
    st = hk_sets_run_add(ctx, h, &v->st, v->why, sizeof v->why);
    break;
  case HK_COLL_SET_REMOVE:
    st = hk_sets_run_remove(ctx, h, &v->st, v->why, sizeof v->why);
    break;
  default: /* a barrier: agreement itself was the synchronisation */
    break;
  }
  t[2] = t[3] = hk_now();
  return st;
}

/* Bytes of a request's input and output (elements x size) on this rank
 * of set S. */
static void io_bytes(const hk_set *S, const hk_wire_request *q, size_t *in,
                     size_t *out) {
  const size_t esz = hk_dtype_size((hk_dtype)q->dtype);
  const size_t row = q->row_elems * esz;
  *in = q->count * row;
  *out = q->coll == HK_COLL_BROADCAST ? *in
         : q->coll == HK_COLL_REDUCESCATTER
             ? (q->count + (size_t)S->size - 1) / (size_t)S->size * row
             : 0;
}

/* A collective other than allreduce on device buffers: staged through
 * host memory (input copied down, the host algorithm, output copied up;
 * outputs hk allocates are allocated on the device). */
static hk_status run_alone_staged(hk_ctx *ctx, hk_set *S, hk_handle h,
                                  int32_t divisor, const hk_wire_response *r,
                                  double *t, verdict *v) {
  size_t in, out;
  io_bytes(S, &h->req, &in, &out);
  struct hk_handle_s tmp = *h;
  void *host_out = NULL;
  size_t *rows = NULL;
  uint8_t *hin = malloc(in + out + 1);
  if (!hin)
    return hk_fail(HK_ERR_NOMEM, "cannot stage %zu bytes", in + out);
  hk_status st = hk_devplane_copy(ctx, h, hin, h->sendbuf, in);
  tmp.sendbuf = hin;
  tmp.recvbuf = h->req.coll == HK_COLL_BROADCAST ? hin : hin + in;
  tmp.out_buf = &host_out;
  if (h->out_counts || h->req.coll == HK_COLL_ALLGATHER ||
      h->req.coll == HK_COLL_ALLTOALL) {
    rows = calloc((size_t)S->size, sizeof *rows);
    tmp.out_counts = rows;
    if (!rows)
      st = hk_fail(HK_ERR_NOMEM, "cannot allocate row counts");
  }
  if (st == HK_OK)
    st = run_alone(ctx, S, &tmp, NULL, divisor, r, t, v); /* no allreduce */
  if (st == HK_OK && out)
    st = hk_devplane_copy(ctx, NULL, h->recvbuf, tmp.recvbuf, out);
  if (st == HK_OK &&
      (h->req.coll == HK_COLL_ALLGATHER || h->req.coll == HK_COLL_ALLTOALL)) {
    size_t total = 0;
    for (int j = 0; j < S->size; j++)
      total += rows[j];
    size_t bytes = total * h->req.row_elems * hk_dtype_size(h->req.dtype);
    void *dev = NULL;
    if (bytes) {
      st = hk_devplane_alloc(ctx, bytes, &dev);
      if (st == HK_OK)
        st = hk_devplane_copy(ctx, NULL, dev, host_out, bytes);
      if (st != HK_OK)
        hk_devplane_free(ctx, dev);
    }
    if (st == HK_OK && h->out_buf)
      *h->out_buf = dev;
    else
      hk_devplane_free(ctx, dev);
    if (st == HK_OK && h->out_counts)
      memcpy(h->out_counts, rows, (size_t)S->size * sizeof *rows);
  }
  free(host_out);
  free(rows);
  free(hin);
  return st;
}

/* Group members p->order[a..b) on device buffers: one device batch,
 * enqueued on hk's stream and kept in flight (worker/devflight.h) with
 * ob, the batch as the observers will see it end (the caller made room:
 * fewer than HK_DEVICE_INFLIGHT in flight). On success the handles are
 * the batch's: p->h[] forgets them. */
static hk_status run_device(hk_ctx *ctx, hk_set *S, plan *p, uint32_t a,
                            uint32_t b, int32_t divisor,
                            const hk_obs_batch *ob) {
  hk_handle *hs = malloc((b - a) * sizeof *hs);
  if (!hs)
    return hk_fail(HK_ERR_NOMEM, "cannot list %u device tensors", b - a);
  for (uint32_t i = a; i < b; i++)
    hs[i - a] = p->h[p->order[i]];
  const double t0 = hk_now();
  hk_status st = hk_devplane_allreduce(ctx, S, hs, b - a, divisor,
                                       p->items[p->order[a]].impl);
  if (st == HK_OK)
    st = hk_devflight_add(ctx, hs, p->obs + a, b - a, ob, t0);
  free(hs);
  if (st == HK_OK)
    for (uint32_t i = a; i < b; i++)
      p->h[p->order[i]] = NULL;
  return st;
}

/* A fused batch on one host over shared memory, without the fusion
 * buffer: the shm engine reads every tensor's sendbuf and writes its
 * recvbuf where they are (hk_ring_shm_allreduce_pieces), the pieces being
 * where the fusion layout p->seg/p->where puts each tensor's segments,
 * so the bits are the fusion buffer's. Returns -1 (nothing done) where it
 * does not apply: another algorithm or transport, a pre- or postscale
 * (applied while copying through the fusion buffer). A 16-bit average's
 * pre-division (pre > 1) is the engine's as it reads the inputs. The
 * pieces and segment tables are the plan's (grown with it), so a step
 * allocates nothing here. */
static int run_fused_in_place(hk_set *S, plan *p, uint32_t a, uint32_t k,
                              double pre, hk_status *st) {
  const int n = S->size;
  const hk_fusion_item *it = &p->items[p->order[a]];
  if (n < 2 || !it->impl->run_pieces || p->seg[n] == 0)
    return -1;
  for (uint32_t i = 0; i < k; i++) {
    const hk_wire_request *q = &p->h[p->order[a + i]]->req;
    if (q->prescale != 1.0 || q->postscale != 1.0)
      return -1;
  }
  const hk_wire_request *q0 = &p->h[p->order[a]]->req;
  const size_t esz = hk_dtype_size((hk_dtype)q0->dtype);
  hk_shm_piece *pc = p->pieces;
  size_t *first = p->firsts;
  for (uint32_t i = 0; i < k; i++)
    hk_ring_default_segments(p->counts[i], n, first + (size_t)i * (n + 1));
  size_t np = 0; /* segment-major, as the layout: increasing offsets */
  for (int j = 0; j < n; j++)
    for (uint32_t i = 0; i < k; i++) {
      const size_t *f = first + (size_t)i * (n + 1);
      hk_handle h = p->h[p->order[a + i]];
      if (f[j + 1] > f[j])
        pc[np++] = (hk_shm_piece){p->where[(size_t)i * n + j], f[j + 1] - f[j],
                                  (const uint8_t *)h->sendbuf + f[j] * esz,
                                  (uint8_t *)h->recvbuf + f[j] * esz};
    }
  hk_ring_finish fin = {it->divisor, 1.0, pre};
  *st = it->impl->run_pieces(S->ar, pc, np, p->seg, (hk_dtype)q0->dtype,
                             (hk_op)q0->op, &fin);
  return 0;
}

/* Runs group members p->order[a..b) (k > 1 allreduces of one dtype/op)
 * through the fusion buffer, or in place on one host (above). */
static hk_status run_fused(hk_ctx *ctx, hk_set *S, plan *p, uint32_t a,
                           uint32_t b, double *t) {
  const int n = S->size;
  const uint32_t k = b - a;
  const hk_wire_request *q0 = &p->h[p->order[a]]->req;
  const hk_dtype dtype = (hk_dtype)q0->dtype;
  const size_t esz = hk_dtype_size(dtype);
  t[0] = hk_now();
  for (uint32_t i = 0; i < k; i++)
    p->counts[i] = p->h[p->order[a + i]]->req.count;
  hk_fusion_layout(p->counts, k, n, p->seg, p->where);
  const hk_fusion_item *it = &p->items[p->order[a]];
  /* a 16-bit average divides by a power of two first (reduce.h) */
  const double pre = hk_average_pre_divisor(dtype, (hk_op)q0->op,
                                            it->divisor > 0 ? it->divisor : n);
  hk_status st = HK_OK;
  if (run_fused_in_place(S, p, a, k, pre, &st) == 0) {
    t[1] = t[0];
    t[2] = t[3] = hk_now();
    return st;
  }
  st = map_fusion_buffer(ctx);
  if (st != HK_OK)
    return st;
  size_t *first = S->ring->segs; /* a tensor's own default segments */
  for (uint32_t i = 0; i < k; i++) {
    hk_handle h = p->h[p->order[a + i]];
    hk_ring_default_segments(h->req.count, n, first);
    for (int j = 0; j < n; j++)
      hk_scale_copy(ctx->fusion + p->where[(size_t)i * n + j] * esz,
                    (const uint8_t *)h->sendbuf + first[j] * esz,
                    first[j + 1] - first[j], dtype, h->req.prescale / pre);
  }
  t[1] = hk_now();
  hk_ring_finish fin = {it->divisor, 1.0, pre}; /* postscale: copying out */
  st = allreduce_with(S, it->impl, ctx->fusion, ctx->fusion, p->seg, dtype,
                      (hk_op)q0->op, &fin);
  t[2] = hk_now();
  if (st != HK_OK)
    return st;
  for (uint32_t i = 0; i < k; i++) {
    hk_handle h = p->h[p->order[a + i]];
    hk_ring_default_segments(h->req.count, n, first);
    for (int j = 0; j < n; j++)
      hk_scale_copy((uint8_t *)h->recvbuf + first[j] * esz,
                    ctx->fusion + p->where[(size_t)i * n + j] * esz,
                    first[j + 1] - first[j], dtype, h->req.postscale);
  }
  t[3] = hk_now();
  return HK_OK;
}

/* Bytes an allgather or reduce-scatter puts through a fusion buffer:
 * every rank's rows (an allgather's from the response's counts). */
static size_t rows_bytes(const hk_set *S, const hk_wire_request *q,
                         const hk_wire_response *r) {
  const size_t row = q->row_elems * hk_dtype_size((hk_dtype)q->dtype);
  if (q->coll == HK_COLL_REDUCESCATTER)
    return q->count * row;
  size_t rows = 0;
  for (uint32_t j = 0; j < r->ncounts && j < (uint32_t)S->size; j++)
    rows += r->counts[j];
  return rows * row;
}

/* Gives each member of a fused allgather its output: the rows of every
 * rank of set S, in rank order, out of the gathered buffer `all` (rank r's
 * block at seg[r], the members' rows one after the other in group
 * order). */
static hk_status unpack_allgather(const hk_set *S, plan *p,
                                  const hk_wire_response *rs, uint32_t a,
                                  uint32_t k, const uint8_t *all,
                                  const size_t *seg, size_t esz) {
  const int n = S->size;
  hk_status st = HK_OK;
  for (uint32_t i = 0; i < k && st == HK_OK; i++) {
    hk_handle h = p->h[p->order[a + i]];
    const hk_wire_response *r = &rs[p->order[a + i]];
    const size_t row = h->req.row_elems * esz;
    size_t total = 0;
    for (int j = 0; j < n; j++)
      total += (size_t)r->counts[j];
    uint8_t *out = total ? malloc(total * row) : NULL;
    if (total && !out) {
      st = hk_fail(HK_ERR_NOMEM, "cannot allocate %zu bytes", total * row);
      break;
    }
    size_t at = 0;
    for (int j = 0; j < n; j++) {
      size_t before = 0; /* this rank's rows of the members before i */
      for (uint32_t m = 0; m < i; m++) {
        hk_handle hm = p->h[p->order[a + m]];
        before += (size_t)rs[p->order[a + m]].counts[j] * hm->req.row_elems;
      }
      const size_t len = (size_t)r->counts[j] * row;
      if (len)
        memcpy(out + at, all + (seg[j] + before) * esz, len);
      at += len;
    }
    if (h->phantom || !h->out_buf) {
      free(out);
      continue;
    }
    *h->out_buf = out;
    if (h->out_counts)
      for (int j = 0; j < n; j++)
        h->out_counts[j] = (size_t)r->counts[j];
  }
  return st;
}

/* Group members p->order[a..b) (k > 1 allgathers of one dtype) as one
 * allgatherv through the fusion buffer: rank r's block is its rows of
 * every member in group order, the result is cut back into each member's
 * output. Copies only, so the bytes are those of the members alone. */
static hk_status run_fused_allgather(hk_ctx *ctx, hk_set *S, plan *p,
                                     const hk_wire_response *rs, uint32_t a,
                                     uint32_t b, double *t) {
  const int n = S->size;
  const uint32_t k = b - a;
  const hk_dtype dtype = (hk_dtype)p->h[p->order[a]]->req.dtype;
  const size_t esz = hk_dtype_size(dtype);
  t[0] = hk_now();
  size_t *seg = p->seg; /* n + 1 offsets, elements */
  seg[0] = 0;
  for (int j = 0; j < n; j++) {
    size_t block = 0;
    for (uint32_t i = 0; i < k; i++)
      block += (size_t)rs[p->order[a + i]].counts[j] *
               p->h[p->order[a + i]]->req.row_elems;
    seg[j + 1] = seg[j] + block;
  }
  hk_status st = map_fusion_buffer(ctx);
  if (st != HK_OK)
    return st;
  uint8_t *mine = ctx->fusion + seg[S->rank] * esz;
  for (uint32_t i = 0; i < k; i++) {
    hk_handle h = p->h[p->order[a + i]];
    const size_t len = h->req.count * h->req.row_elems * esz;
    if (len)
      memcpy(mine, h->sendbuf, len);
    mine += len;
  }
  t[1] = hk_now();
  st = hk_ring_allgatherv(S->ring, ctx->fusion + seg[S->rank] * esz,
                          ctx->fusion, seg, dtype);
  t[2] = hk_now();
  if (st == HK_OK)
    st = unpack_allgather(S, p, rs, a, k, ctx->fusion, seg, esz);
  t[3] = hk_now();
  return st;
}

/* Group members p->order[a..b) (k > 1 reduce-scatters of one dtype, op and
 * divisor) as one reduce-scatter through the fusion buffer: segment j is
 * rank j's rows of every member in group order (each member split as it
 * is alone), so every element is reduced in the order, and to the bits, it
 * would be alone. Prescale while copying in, postscale while copying out,
 * as run_fused. */
static hk_status run_fused_reducescatter(hk_ctx *ctx, hk_set *S, plan *p,
                                         uint32_t a, uint32_t b, double *t) {
  const int n = S->size, me = S->rank;
  const uint32_t k = b - a;
  const hk_wire_request *q0 = &p->h[p->order[a]]->req;
  const hk_dtype dtype = (hk_dtype)q0->dtype;
  const size_t esz = hk_dtype_size(dtype);
  const hk_fusion_item *it = &p->items[p->order[a]];
  const double pre = hk_average_pre_divisor(dtype, (hk_op)q0->op,
                                            it->divisor > 0 ? it->divisor : n);
  t[0] = hk_now();
  size_t *seg = p->seg;
  seg[0] = 0;
  for (int j = 0; j < n; j++) {
    size_t block = 0;
    for (uint32_t i = 0; i < k; i++) {
      const hk_wire_request *q = &p->h[p->order[a + i]]->req;
      block +=
          (rs_first_row(q->count, n, j + 1) - rs_first_row(q->count, n, j)) *
          q->row_elems;
    }
    seg[j + 1] = seg[j] + block;
  }
  hk_status st = map_fusion_buffer(ctx);
  uint8_t *out = NULL;
  if (st == HK_OK && seg[me + 1] > seg[me] &&
      !(out = malloc((seg[me + 1] - seg[me]) * esz)))
    st = hk_fail(HK_ERR_NOMEM, "cannot allocate %zu bytes",
                 (seg[me + 1] - seg[me]) * esz);
  if (st != HK_OK)
    return st;
  for (int j = 0; j < n; j++) { /* segment j: member i's block j, in order */
    uint8_t *at = ctx->fusion + seg[j] * esz;
    for (uint32_t i = 0; i < k; i++) {
      hk_handle h = p->h[p->order[a + i]];
      const hk_wire_request *q = &h->req;
      const size_t from = rs_first_row(q->count, n, j) * q->row_elems;
      const size_t len = rs_first_row(q->count, n, j + 1) * q->row_elems - from;
      if (len)
        hk_scale_copy(at, (const uint8_t *)h->sendbuf + from * esz, len, dtype,
                      q->prescale / pre);
      at += len * esz;
    }
  }
  t[1] = hk_now();
  hk_ring_finish fin = {it->divisor, 1.0, pre}; /* postscale: copying out */
  st = hk_ring_reducescatter(S->ring, ctx->fusion, out, seg, dtype,
                             (hk_op)q0->op, &fin);
  t[2] = hk_now();
  const uint8_t *from = out;
  for (uint32_t i = 0; i < k && st == HK_OK; i++) {
    hk_handle h = p->h[p->order[a + i]];
    const hk_wire_request *q = &h->req;
    const size_t rows =
        rs_first_row(q->count, n, me + 1) - rs_first_row(q->count, n, me);
    if (rows)
      hk_scale_copy(h->recvbuf, from, rows * q->row_elems, dtype, q->postscale);
    from += rows * q->row_elems * esz;
    if (h->out_rows)
      *h->out_rows = rows;
  }
  free(out);
  t[3] = hk_now();
  return st;
}

/* The identity of op in dtype, count elements, into buf: what a rank
 * that joined contributes (0 for sum and average, 1 for product, the
 * largest/smallest value for min/max). */
static void fill_identity(void *buf, size_t count, hk_dtype d, hk_op op) {
  const size_t esz = hk_dtype_size(d);
  uint8_t one[8] = {0};
  int big = op == HK_MIN, small = op == HK_MAX;
  switch (d) {
  case HK_FLOAT32: {
    float v = op == HK_PRODUCT ? 1.0f : big ? INFINITY : small ? -INFINITY : 0;
    memcpy(one, &v, 4);
    break;
  }
  case HK_FLOAT64: {
    double v = op == HK_PRODUCT ? 1.0 : big ? INFINITY : small ? -INFINITY : 0;
    memcpy(one, &v, 8);
    break;
  }
  case HK_FLOAT16: {
    uint16_t v = op == HK_PRODUCT ? 0x3c00 : big ? 0x7c00 : small ? 0xfc00 : 0;
    memcpy(one, &v, 2);
    break;
  }
  case HK_BFLOAT16: {
    uint16_t v = op == HK_PRODUCT ? 0x3f80 : big ? 0x7f80 : small ? 0xff80 : 0;
    memcpy(one, &v, 2);
    break;
  }
  case HK_INT8: {
    int8_t v = op == HK_PRODUCT ? 1 : big ? INT8_MAX : small ? INT8_MIN : 0;
    memcpy(one, &v, 1);
    break;
  }
  case HK_UINT8: {
    uint8_t v = op == HK_PRODUCT ? 1 : big ? UINT8_MAX : 0;
    memcpy(one, &v, 1);
    break;
  }
  case HK_INT16: {
    int16_t v = op == HK_PRODUCT ? 1 : big ? INT16_MAX : small ? INT16_MIN : 0;
    memcpy(one, &v, 2);
    break;
  }
  case HK_BOOL: /* never reduced: broadcast, allgather, alltoall */
    break;
  case HK_INT32: {
    int32_t v = op == HK_PRODUCT ? 1 : big ? INT32_MAX : small ? INT32_MIN : 0;
    memcpy(one, &v, 4);
    break;
  }
  default: {
    int64_t v = op == HK_PRODUCT ? 1 : big ? INT64_MAX : small ? INT64_MIN : 0;
    memcpy(one, &v, 8);
    break;
  }
  }
  uint8_t *p = buf;
  for (size_t i = 0; i < count; i++)
    memcpy(p + i * esz, one, esz);
}

/* A rank that joined takes part in a collective it never submitted: a
 * handle (not in flight) with buffers holding the identity of the op, no
 * rows to gather or send, and outputs that are thrown away. */
static hk_status make_phantom(hk_ctx *ctx, const hk_set *S,
                              const hk_wire_request *q, hk_handle *out) {
  hk_handle h = calloc(1, sizeof *h);
  if (!h)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a handle");
  h->req = *q;
  h->phantom = 1;
  const hk_dtype d = (hk_dtype)q->dtype;
  const size_t esz = hk_dtype_size(d);
  size_t elems = 0;
  if (q->coll == HK_COLL_ALLREDUCE || q->coll == HK_COLL_BROADCAST ||
      q->coll == HK_COLL_REDUCESCATTER)
    elems = q->count * (q->coll == HK_COLL_REDUCESCATTER ? q->row_elems : 1);
  if (q->coll == HK_COLL_ALLGATHER || q->coll == HK_COLL_ALLTOALL)
    h->req.count = 0;
  if (q->coll == HK_COLL_ALLTOALL)
    h->splits = calloc((size_t)S->size, sizeof(size_t));
  void *buf = malloc(elems * esz + 1);
  if (!buf || (q->coll == HK_COLL_ALLTOALL && !h->splits)) {
    free(buf);
    free(h->splits);
    free(h);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a joined rank's buffers");
  }
  fill_identity(buf, elems, d, (hk_op)q->op);
  if (q->mem == HK_WIRE_MEM_DEVICE && ctx->dev) { /* the identity, uploaded */
    void *dev = NULL;
    hk_status st = hk_devplane_alloc(ctx, elems * esz + 1, &dev);
    if (st == HK_OK)
      st = hk_devplane_copy(ctx, NULL, dev, buf, elems * esz);
    free(buf);
    if (st != HK_OK) {
      hk_devplane_free(ctx, dev);
      free(h->splits);
      free(h);
      return st;
    }
    buf = dev;
  }
  h->sendbuf = h->recvbuf = buf;
  h->req.prescale = 1.0; /* identity stays identity */
  *out = h;
  return HK_OK;
}

/* A rank that joined took part in a barrier the others held meanwhile:
 * its own next barrier on that set pairs with their next one, so its
 * sequence (hk_set's barrier_seq, which names barriers as submit.c does:
 * hk.barrier.<n>, hk.set<id>.barrier.<n>) moves past this one. */
static void passed_barrier(hk_ctx *ctx, hk_set *S, const hk_wire_request *q) {
  char prefix[40] = "hk.barrier.";
  if (S->id != HK_WORLD)
    snprintf(prefix, sizeof prefix, "hk.set%d.barrier.", (int)S->id);
  const size_t n = strlen(prefix);
  if (q->coll != HK_COLL_BARRIER || strncmp(q->name, prefix, n))
    return;
  uint64_t seq = strtoull(q->name + n, NULL, 10);
  pthread_mutex_lock(&ctx->mu);
  if (S->barrier_seq <= seq)
    S->barrier_seq = seq + 1;
  pthread_mutex_unlock(&ctx->mu);
}

/* Finds the in-flight handle a response is about (or, on a rank that
 * joined, makes one up from the parameters the response carries). */
static hk_status resolve(hk_ctx *ctx, hk_set *S, const hk_wire_response *r,
                         hk_handle *out) {
  const char *name = r->name;
  if (r->flags & HK_RESP_CACHED) {
    /* a bit names one tensor for the cache's life (cache.h), so one
     * evicted since rank 0 decided still says which */
    const hk_wire_request *q = hk_cache_get(S->cache, r->cache_bit);
    if (!q)
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank 0 scheduled cache bit %u of process set %d, which "
                     "rank %d never gave out",
                     r->cache_bit, (int)S->id, ctx->rank);
    name = q->name;
  }
  *out = hk_queue_find(ctx, name);
  if (!*out && (r->flags & HK_RESP_PARAMS)) { /* this rank joined */
    passed_barrier(ctx, S, r->params);
    return r->status == HK_OK ? make_phantom(ctx, S, r->params, out) : HK_OK;
  }
  if (!*out)
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 scheduled tensor '%s', which rank %d never "
                   "submitted",
                   name, ctx->rank);
  return HK_OK;
}

/* A float16/bfloat16 sum on this rank's host buffer that holds an
 * infinity: said once per tensor name (hk.h, hk_op). Averages divide
 * first and cannot overflow; other types have the range to spare, and
 * scanning their results would cost a pass over every gradient. */
static void warn_if_sum_overflowed(hk_ctx *ctx, const hk_set *S, hk_handle h) {
  const hk_wire_request *q = &h->req;
  const hk_dtype d = (hk_dtype)q->dtype;
  if (h->phantom || q->op != HK_SUM || q->mem == HK_WIRE_MEM_DEVICE ||
      (d != HK_FLOAT16 && d != HK_BFLOAT16) ||
      (q->coll != HK_COLL_ALLREDUCE && q->coll != HK_COLL_REDUCESCATTER) ||
      hk_strmap_get(ctx->overflow_warned, q->name))
    return;
  if (q->coll == HK_COLL_ALLREDUCE && S->rank != 0)
    return; /* every member holds these bits: its rank 0 says it */
  size_t count = q->coll == HK_COLL_ALLREDUCE
                     ? q->count
                     : (rs_first_row(q->count, S->size, S->rank + 1) -
                        rs_first_row(q->count, S->size, S->rank)) *
                           q->row_elems;
  size_t inf = hk_count_inf(h->recvbuf, count, d);
  if (!inf)
    return;
  if (hk_strmap_put(ctx->overflow_warned, q->name, ctx) != HK_OK)
    return; /* out of memory: warn again next time rather than not at all */
  hk_log(HK_LOG_WARNING,
         "tensor '%s': the %s sum holds +-inf in %zu of its %zu elements: "
         "it overflowed (largest finite %s: %s) or an input was infinite; "
         "HK_AVERAGE divides before summing and does not overflow (said "
         "once for this tensor)",
         q->name, hk_dtype_name(d), inf, count, hk_dtype_name(d),
         d == HK_FLOAT16 ? "65504" : "3.39e38");
}

/* The first eviction (rank 0 says it, once): more tensors are alive than
 * the cache holds, so some are negotiated by name every step. */
static void cache_full_warning(hk_ctx *ctx, const hk_set *S) {
  if (ctx->rank != 0 || ctx->cache_warned || !S->cache)
    return;
  hk_cache_stats s = hk_cache_get_stats(S->cache);
  if (!s.evictions && !s.out_of_bits)
    return;
  ctx->cache_warned = 1;
  unsigned cap = hk_cache_capacity(S->cache);
  if (s.evictions)
    hk_log(HK_LOG_WARNING,
           "the response cache is full (HK_CACHE_CAPACITY=%u tensors): more "
           "tensors are in use than it holds, so the least recently used "
           "are evicted and negotiated by name again; set HK_CACHE_CAPACITY "
           "to at least the number of tensors a step submits (said once)",
           cap);
  else
    hk_log(HK_LOG_WARNING,
           "the response cache has given a bit to %u tensor names (4 x "
           "HK_CACHE_CAPACITY=%u), its most: new names are negotiated by "
           "name; names that change every step (a step number in the name) "
           "defeat the cache (said once)",
           4 * cap, cap);
}

/* Completes h, or frees it if it was made up for a joined rank. */
static void finish_handle(hk_ctx *ctx, hk_handle h, hk_status st,
                          const char *reason) {
  if (h->phantom)
    hk_queue_free_phantom(ctx, h);
  else
    hk_queue_complete(ctx, h, st, reason);
}

/* The batch p->order[a..b) as the observers see it (observe/observe.h),
 * its tensors in p->obs[a..b). */
static hk_obs_batch observed_batch(plan *p, const hk_wire_response *rs,
                                   uint32_t a, uint32_t b, double t_ready) {
  for (uint32_t i = a; i < b; i++) {
    p->obs[i] = hk_observed(p->h[p->order[i]], &rs[p->order[i]], t_ready);
    p->obs[i].index = p->order[i];
  }
  return (hk_obs_batch){.tensors = p->obs + a, .n = b - a};
}

/* What tensor_done tells of batch p->order[a..b) (when an observer takes
 * it): its bytes, algorithm and transport (named in kinds). */
static void described(hk_ctx *ctx, const hk_set *S, const plan *p, uint32_t a,
                      uint32_t b, hk_obs_batch *ob, char *kinds, size_t cap) {
  if (!hk_observe_on(&ctx->obs, HK_OBS_BIT(HK_OBS_TENSOR_DONE)))
    return;
  for (uint32_t i = a; i < b; i++)
    ob->bytes += p->items[p->order[i]].bytes;
  ob->algorithm =
      algo_label(p->items[p->order[a]].coll, p->items[p->order[a]].impl);
  ob->transport = mesh_transport(S, kinds, cap);
}

hk_status hk_execute_responses(hk_ctx *ctx, hk_set *S,
                               const hk_wire_response *rs, uint32_t n,
                               double t_ready) {
  if (n)
    hk_observe_round_started(
        &ctx->obs, &(hk_obs_round){.n = n, .t_ready = t_ready, .set = S->id});
  plan *pp = NULL;
  hk_status st = plan_get(ctx, n, &pp);
  if (st != HK_OK)
    return st;
  plan p = *pp; /* the arrays stay where they are during this call */
  /* a tensor this large costs more to copy than to reduce on its own */
  const size_t direct = hk_fusion_direct_bytes(ctx->cfg.fusion_direct, S->size);
  for (uint32_t i = 0; i < n && st == HK_OK; i++) {
    st = resolve(ctx, S, &rs[i], &p.h[i]);
    if (st != HK_OK)
      break;
    if (!p.h[i]) /* a failure this rank (joined) takes no part in */
      continue;
    hk_obs_tensor ot = hk_observed(p.h[i], &rs[i], t_ready);
    hk_observe_negotiated(&ctx->obs, &ot);
    const hk_wire_request *q = &p.h[i]->req;
    size_t bytes = q->count * hk_dtype_size((hk_dtype)q->dtype);
    const int device = q->mem == HK_WIRE_MEM_DEVICE;
    const int rows =
        q->coll == HK_COLL_ALLGATHER || q->coll == HK_COLL_REDUCESCATTER;
    if (rows) /* what the fusion buffer holds: every rank's rows */
      bytes = rows_bytes(S, q, &rs[i]);
    const int fusable = hk_fusion_fusable(q->coll, rs[i].status == HK_OK,
                                          device, bytes, direct);
    const hk_allreduce_impl *impl =
        q->coll != HK_COLL_ALLREDUCE
            ? NULL
            : hk_allreduce_for_tensor(S->ar,
                                      device ? HK_MEM_DEVICE : HK_MEM_HOST,
                                      bytes, fusable, direct);
    p.items[i] = (hk_fusion_item){.fusable = fusable,
                                  .coll = q->coll,
                                  .set = q->set,
                                  .dtype = q->dtype,
                                  .op = q->op,
                                  .mem = q->mem,
                                  .divisor = rs[i].divisor,
                                  .impl = impl,
                                  .bytes = bytes};
  }
  /* The cache learns uncached tensors in response order (as every rank
   * does); reading the requests now, before any handle completes. */
  for (uint32_t i = 0; i < n && st == HK_OK; i++)
    if (p.h[i])
      hk_cache_apply(S->cache, &rs[i],
                     (rs[i].flags & HK_RESP_PARAMS) ? rs[i].params
                                                    : &p.h[i]->req);
  cache_full_warning(ctx, S);
  if (st == HK_OK)
    for (uint32_t i = 0; i < n; i++) /* failed negotiations end at once */
      if (rs[i].status != HK_OK && p.h[i]) {
        finish_handle(ctx, p.h[i], (hk_status)rs[i].status, rs[i].reason);
        p.h[i] = NULL;
      }
  uint32_t groups = st == HK_OK
                        ? hk_fusion_plan(p.items, n, ctx->cfg.fusion_threshold,
                                         p.taken, p.order, p.starts)
                        : 0;
  hk_tune_groups(ctx, groups);
  for (uint32_t g = 0; g < groups && st == HK_OK; g++) {
    uint32_t a = p.starts[g], b = p.starts[g + 1];
    if (!p.h[p.order[a]])
      continue; /* completed above */
    double t[4] = {0, 0, 0, 0};
    int fused = b - a > 1;
    hk_handle h0 = p.h[p.order[a]];
    const int dev_allreduce =
        h0->req.mem == HK_WIRE_MEM_DEVICE && h0->req.coll == HK_COLL_ALLREDUCE;
    /* device batches in flight complete in order, before anything else
     * runs; another device batch needs only room for itself */
    st = hk_devflight_retire(
        ctx, dev_allreduce ? hk_devplane_inflight_max(ctx) - 1 : 0, NULL);
    if (st != HK_OK)
      break; /* the batch that failed is named */
    hk_obs_batch ob = observed_batch(&p, rs, a, b, t_ready);
    if (hk_observe_on(&ctx->obs, HK_OBS_BIT(HK_OBS_BATCH_STARTED))) {
      ob.t_start = hk_now();
      hk_observe_batch_started(&ctx->obs, &ob);
    }
    verdict v = {HK_OK, ""};
    char kinds[32]; /* the transport's name, for tensor_done */
    if (dev_allreduce) {
      described(ctx, S, &p, a, b, &ob, kinds, sizeof kinds);
      ob.staged = 1;
      st = run_device(ctx, S, &p, a, b, rs[p.order[a]].divisor, &ob);
      if (st == HK_OK)
        continue; /* in flight: it completes when its events say */
    } else if (h0->req.mem == HK_WIRE_MEM_DEVICE)
      st = run_alone_staged(ctx, S, h0, rs[p.order[a]].divisor, &rs[p.order[a]],
                            t, &v);
    else if (!fused)
      st = run_alone(ctx, S, h0, p.items[p.order[a]].impl,
                     rs[p.order[a]].divisor, &rs[p.order[a]], t, &v);
    else if (h0->req.coll == HK_COLL_ALLGATHER)
      st = run_fused_allgather(ctx, S, &p, rs, a, b, t);
    else if (h0->req.coll == HK_COLL_REDUCESCATTER)
      st = run_fused_reducescatter(ctx, S, &p, a, b, t);
    else
      st = run_fused(ctx, S, &p, a, b, t);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      ob.status = st;
      ob.t_end = hk_now();
      hk_observe_batch_done(&ctx->obs, &ob);
      st = hk_fail_tensor(st, p.h[p.order[a]]->req.name, msg);
      break;
    }
    described(ctx, S, &p, a, b, &ob, kinds, sizeof kinds);
    /* the observers see the batch end, then its tensors; then all its
     * handles complete under one lock */
    memcpy(ob.t, t, sizeof ob.t);
    ob.t_end = t[3];
    ob.fused = fused && h0->req.mem != HK_WIRE_MEM_DEVICE ? b - a : 0;
    ob.staged = fused;
    hk_observe_batch_done(&ctx->obs, &ob);
    uint32_t ndone = 0;
    for (uint32_t i = a; i < b; i++) {
      hk_handle h = p.h[p.order[i]];
      hk_observe_tensor_done(&ctx->obs, &p.obs[i], &ob);
      warn_if_sum_overflowed(ctx, S, h);
      if (h->phantom)
        hk_queue_free_phantom(ctx, h);
      else if (v.st != HK_OK) /* a process set call that failed */
        hk_queue_complete(ctx, h, v.st, v.why);
      else
        p.done[ndone++] = h;
      p.h[p.order[i]] = NULL;
    }
    hk_queue_complete_ok(ctx, p.done, ndone);
  }
  if (st != HK_OK) /* made-up handles that did not run */
    for (uint32_t i = 0; i < n; i++)
      if (p.h[i] && p.h[i]->phantom)
        hk_queue_free_phantom(ctx, p.h[i]);
  return st;
}
