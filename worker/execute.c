#include "worker/execute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "collectives/reduce.h"
#include "collectives/ring.h"
#include "collectives/transport/tcp.h"
#include "common/status.h"
#include "coordinator/fusion.h"
#include "worker/introspect.h"
#include "worker/queue.h"
#include "worker/timeline.h"

/* Per-call working arrays, sized for the n responses of one message. */
typedef struct plan {
  hk_handle *h;
  hk_fusion_item *items;
  uint8_t *taken;
  uint32_t *order, *starts;
  size_t *counts, *seg, *where;
} plan;

static void plan_free(plan *p) {
  free(p->h);
  free(p->items);
  free(p->taken);
  free(p->order);
  free(p->starts);
  free(p->counts);
  free(p->seg);
  free(p->where);
}

static hk_status plan_alloc(plan *p, uint32_t n, int size) {
  memset(p, 0, sizeof *p);
  size_t nn = n ? n : 1;
  p->h = calloc(nn, sizeof *p->h);
  p->items = calloc(nn, sizeof *p->items);
  p->taken = calloc(nn, 1);
  p->order = calloc(nn, sizeof *p->order);
  p->starts = calloc(nn + 1, sizeof *p->starts);
  p->counts = calloc(nn, sizeof *p->counts);
  p->seg = calloc((size_t)size + 1, sizeof *p->seg);
  p->where = calloc(nn * (size_t)size, sizeof *p->where);
  if (!p->h || !p->items || !p->taken || !p->order || !p->starts ||
      !p->counts || !p->seg || !p->where) {
    plan_free(p);
    return hk_fail(HK_ERR_NOMEM, "cannot plan %u responses", n);
  }
  return HK_OK;
}

static hk_status map_fusion_buffer(hk_ctx *ctx) {
  if (ctx->fusion)
    return HK_OK;
  size_t bytes = ctx->cfg.fusion_threshold;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return hk_fail(HK_ERR_NOMEM,
                   "cannot map a %zu-byte fusion buffer "
                   "(HK_FUSION_THRESHOLD)",
                   bytes);
  /* First touch costs ~11 us per 4 KiB page on the reference VM and 46x
   * less with huge pages (../shared/peers/results): ask for them. */
  madvise(p, bytes, MADV_HUGEPAGE);
  ctx->fusion = p;
  return HK_OK;
}

void hk_execute_release(hk_ctx *ctx) {
  if (ctx->fusion)
    munmap(ctx->fusion, ctx->cfg.fusion_threshold);
  ctx->fusion = NULL;
}

/* Rank 0's timeline of one tensor that ran in a group. */
static void trace(hk_ctx *ctx, const hk_wire_response *r, hk_handle h,
                  double t_ready, const double *t, int fused,
                  const char *args) {
  hk_timeline *tl = ctx->timeline;
  const char *name = h->req.name;
  hk_timeline_span(tl, name, "NEGOTIATE", r->first_seen, t_ready, NULL);
  hk_timeline_span(tl, name, "WAIT_FOR_DATA", h->t_submit, h->t_submit,
                   "\"device\":\"cpu\"");
  hk_timeline_span(tl, name, "QUEUE", t_ready, t[0], NULL);
  if (fused)
    hk_timeline_span(tl, name, "MEMCPY_IN_FUSION_BUFFER", t[0], t[1], NULL);
  hk_timeline_span(tl, name,
                   h->req.coll == HK_COLL_BROADCAST ? "BROADCAST" : "ALLREDUCE",
                   t[1], t[2], args);
  if (fused)
    hk_timeline_span(tl, name, "MEMCPY_OUT", t[2], t[3], NULL);
}

/* Runs one lone tensor on its own buffers. t[0..3] get the phase times. */
static hk_status run_alone(hk_ctx *ctx, hk_handle h, double *t) {
  const hk_wire_request *q = &h->req;
  hk_status st = HK_OK;
  t[0] = t[1] = hk_now();
  if (q->coll == HK_COLL_ALLREDUCE) {
    const void *src = h->sendbuf;
    if (q->prescale != 1.0) { /* scale while copying into recvbuf */
      hk_scale_copy(h->recvbuf, h->sendbuf, q->count, (hk_dtype)q->dtype,
                    q->prescale);
      src = h->recvbuf;
    }
    hk_ring_finish fin = {0, q->postscale};
    st = hk_ring_allreduce(&ctx->ring, src, h->recvbuf, q->count,
                           (hk_dtype)q->dtype, (hk_op)q->op, &fin);
  } else if (q->coll == HK_COLL_BROADCAST) {
    st = hk_ring_broadcast(&ctx->ring, h->recvbuf, q->count, (hk_dtype)q->dtype,
                           q->root);
  }
  t[2] = t[3] = hk_now();
  return st;
}

/* Runs group members p->order[a..b) (k > 1 allreduces of one dtype/op)
 * through the fusion buffer. */
static hk_status run_fused(hk_ctx *ctx, plan *p, uint32_t a, uint32_t b,
                           double *t) {
  const int n = ctx->size;
  const uint32_t k = b - a;
  const hk_wire_request *q0 = &p->h[p->order[a]]->req;
  const hk_dtype dtype = (hk_dtype)q0->dtype;
  const size_t esz = hk_dtype_size(dtype);
  t[0] = hk_now();
  hk_status st = map_fusion_buffer(ctx);
  if (st != HK_OK)
    return st;
  for (uint32_t i = 0; i < k; i++)
    p->counts[i] = p->h[p->order[a + i]]->req.count;
  hk_fusion_layout(p->counts, k, n, p->seg, p->where);
  size_t *first = ctx->ring.segs; /* a tensor's own default segments */
  for (uint32_t i = 0; i < k; i++) {
    hk_handle h = p->h[p->order[a + i]];
    hk_ring_default_segments(h->req.count, n, first);
    for (int j = 0; j < n; j++)
      hk_scale_copy(ctx->fusion + p->where[(size_t)i * n + j] * esz,
                    (const uint8_t *)h->sendbuf + first[j] * esz,
                    first[j + 1] - first[j], dtype, h->req.prescale);
  }
  t[1] = hk_now();
  st = hk_ring_allreduce_segmented(&ctx->ring, ctx->fusion, ctx->fusion, p->seg,
                                   dtype, (hk_op)q0->op, NULL);
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

/* Finds the in-flight handle a response is about. */
static hk_status resolve(hk_ctx *ctx, const hk_wire_response *r,
                         hk_handle *out) {
  const char *name = r->name;
  if (r->flags & HK_RESP_CACHED) {
    if (!hk_cache_is_live(ctx->cache, r->cache_bit))
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank 0 scheduled cache bit %u, which rank %d does not "
                     "hold",
                     r->cache_bit, ctx->rank);
    name = hk_cache_get(ctx->cache, r->cache_bit)->name;
  }
  *out = hk_queue_find(ctx, name);
  if (!*out)
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 scheduled tensor '%s', which rank %d never "
                   "submitted",
                   name, ctx->rank);
  return HK_OK;
}

hk_status hk_execute_responses(hk_ctx *ctx, const hk_wire_response *rs,
                               uint32_t n, double t_ready) {
  plan p;
  hk_status st = plan_alloc(&p, n, ctx->size);
  if (st != HK_OK)
    return st;
  for (uint32_t i = 0; i < n && st == HK_OK; i++) {
    st = resolve(ctx, &rs[i], &p.h[i]);
    if (st != HK_OK)
      break;
    const hk_wire_request *q = &p.h[i]->req;
    p.items[i] = (hk_fusion_item){
        rs[i].status == HK_OK && q->coll == HK_COLL_ALLREDUCE, q->dtype, q->op,
        q->count * hk_dtype_size((hk_dtype)q->dtype)};
  }
  /* The cache learns uncached tensors in response order (as every rank
   * does); reading the requests now, before any handle completes. */
  for (uint32_t i = 0; i < n && st == HK_OK; i++)
    if (rs[i].status == HK_OK && !(rs[i].flags & HK_RESP_CACHED) &&
        p.h[i]->req.coll != HK_COLL_BARRIER)
      hk_cache_insert(ctx->cache, &p.h[i]->req);
  if (st == HK_OK)
    for (uint32_t i = 0; i < n; i++) /* failed negotiations end at once */
      if (rs[i].status != HK_OK)
        hk_queue_complete(ctx, p.h[i], (hk_status)rs[i].status, rs[i].reason);
  uint32_t groups = st == HK_OK
                        ? hk_fusion_plan(p.items, n, ctx->cfg.fusion_threshold,
                                         p.taken, p.order, p.starts)
                        : 0;
  for (uint32_t g = 0; g < groups && st == HK_OK; g++) {
    uint32_t a = p.starts[g], b = p.starts[g + 1];
    if (rs[p.order[a]].status != HK_OK)
      continue; /* completed above */
    double t[4];
    int fused = b - a > 1;
    st = fused ? run_fused(ctx, &p, a, b, t)
               : run_alone(ctx, p.h[p.order[a]], t);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      st = hk_fail(st, "tensor '%s': %s", p.h[p.order[a]]->req.name, msg);
      break;
    }
    char args[160] = "";
    if (ctx->timeline) {
      size_t bytes = 0;
      for (uint32_t i = a; i < b; i++)
        bytes += p.items[p.order[i]].bytes;
      snprintf(args, sizeof args,
               "\"algorithm\":\"ring\",\"transport\":\"tcp\","
               "\"fused_tensors\":%u,\"bytes\":%zu",
               b - a, bytes);
    }
    for (uint32_t i = a; i < b; i++) {
      hk_handle h = p.h[p.order[i]];
      if (h->req.coll != HK_COLL_BARRIER)
        hk_introspect_record(ctx, h->req.name, t[1], t[2]);
      if (ctx->timeline && h->req.coll != HK_COLL_BARRIER)
        trace(ctx, &rs[p.order[i]], h, t_ready, t, fused, args);
      hk_queue_complete(ctx, h, HK_OK, NULL);
    }
  }
  plan_free(&p);
  return st;
}
