/*
 * submit.c - include/hk/hk.h's collectives: a description (hk_collective)
 * checked by its kind and turned into a request for the tensor queue
 * (worker/queue.h). hk_submit and hk_submit_group take the description
 * whole; the shorthands (hk_allreduce_async, hk_broadcast_async, ...) fill
 * one in and take the same path, naming themselves in their messages.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "device/host/reduce.h"
#include "worker/queue.h"
#include "worker/runtime.h"
#include "worker/sets.h"

/* ---- what every kind checks ---- */

/* The name, the dtype and a count that fits; fills the request's common
 * fields. */
static hk_status check_common(const char *fn, const char *name, size_t count,
                              hk_dtype dtype, hk_wire_request *req) {
  if (!name || !*name)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: the tensor name is %s", fn,
                   name ? "empty" : "NULL");
  size_t len = strlen(name);
  if (len > HK_MAX_NAME_LEN)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor name '%.40s...' is %zu bytes, over the limit "
                   "of %d",
                   fn, name, len, HK_MAX_NAME_LEN);
  if (!hk_dtype_size(dtype))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': unknown dtype %d", fn,
                   name, (int)dtype);
  if (count > SIZE_MAX / 8)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': count %zu elements is too large", fn, name,
                   count);
  hk_wire_request_clear(req);
  memcpy(req->name, name, len + 1);
  req->prescale = req->postscale = 1.0;
  req->dtype = (uint8_t)dtype;
  req->count = count;
  req->row_elems = 1;
  return HK_OK;
}

/* The reduction op is one of hk_op's, and the dtype (checked known) one
 * hk reduces: all but bool (device/host/reduce.h). */
static hk_status check_op(const char *fn, const char *name, hk_dtype dtype,
                          hk_op op) {
  if ((unsigned)op > HK_PRODUCT)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': unknown op %d", fn,
                   name, (int)op);
  if (!hk_reduce_supported(dtype, op))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': %s tensors are not reduced (as in "
                   "Horovod, they take broadcast, allgather and alltoall); "
                   "reduce them as uint8, where max is a logical or and min "
                   "a logical and",
                   fn, name, hk_dtype_name(dtype));
  return HK_OK;
}

/* check_common for a tensor of rows x row_elems elements, which must
 * fit, in bytes, in a size_t. */
static hk_status check_rows(const char *fn, const char *name, size_t rows,
                            size_t row_elems, hk_dtype dtype,
                            hk_wire_request *req) {
  hk_status st = check_common(fn, name, rows, dtype, req);
  if (st != HK_OK)
    return st;
  if (row_elems == 0 || (rows && row_elems > SIZE_MAX / 8 / rows))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': %zu rows of %zu elements is not a "
                   "valid shape",
                   fn, name, rows, row_elems);
  req->row_elems = row_elems;
  return HK_OK;
}

/* prescale and postscale: finite (any dtype; integers scale as
 * hk_scale_copy says). */
static hk_status check_scales(const char *fn, const char *name, hk_dtype dtype,
                              double prescale, double postscale,
                              hk_wire_request *req) {
  if (!isfinite(prescale) || !isfinite(postscale))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': prescale %g / postscale %g: factors "
                   "must be finite (dtype %s)",
                   fn, name, prescale, postscale, hk_dtype_name(dtype));
  req->prescale = prescale;
  req->postscale = postscale;
  return HK_OK;
}

/* The shape, if one is given: at most HK_MAX_DIMS extents, none negative,
 * whose product is `elems` (rows x row_elems for the row collectives). */
static hk_status check_shape(const char *fn, const hk_collective *c,
                             size_t elems, hk_wire_request *req) {
  if (c->ndims == 0)
    return HK_OK;
  if (c->ndims < 0 || c->ndims > HK_MAX_DIMS || !c->shape)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': a shape of %d dimensions%s (at most "
                   "%d)",
                   fn, c->name, c->ndims, c->shape ? "" : " and no extents",
                   HK_MAX_DIMS);
  uint64_t product = 1;
  int overflow = 0;
  for (int d = 0; d < c->ndims; d++) {
    if (c->shape[d] < 0)
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: tensor '%s': extent %d of its shape is %lld", fn,
                     c->name, d, (long long)c->shape[d]);
    uint64_t x = (uint64_t)c->shape[d];
    if (x && product > UINT64_MAX / x)
      overflow = 1;
    product *= x;
    req->shape[d] = c->shape[d];
  }
  if (overflow || product != elems)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': its shape holds %s%llu elements, its "
                   "counts %zu",
                   fn, c->name, overflow ? "more than " : "",
                   (unsigned long long)product, elems);
  req->ndims = (uint8_t)c->ndims;
  return HK_OK;
}

/* ---- each kind ---- */

/* What a kind's check fills besides the request: the buffers and where
 * the outputs go (out's splits is malloc'd, owned by the caller); and
 * what it checks against: the process set's size and this rank's rank
 * in it (the world's: the job's). */
typedef struct prepared {
  const void *send;
  void *recv;
  struct hk_handle_s out;
  int size, rank;
} prepared;

/* The process set: this rank must be a member of a live one
 * (worker/sets.h says why not, naming the set and the rank). */
static hk_status check_set(const char *fn, hk_ctx *ctx, const hk_collective *c,
                           prepared *p) {
  p->size = ctx->size;
  p->rank = ctx->rank;
  if (c->set == HK_WORLD)
    return HK_OK; /* (no lock on the common path) */
  return hk_sets_find(ctx, fn, c->name ? c->name : "(null)", c->set, &p->size,
                      &p->rank);
}

typedef hk_status (*kind_check)(const char *fn, const hk_collective *c,
                                hk_wire_request *req, prepared *p);

static hk_status check_allreduce(const char *fn, const hk_collective *c,
                                 hk_wire_request *req, prepared *p) {
  hk_status st = check_common(fn, c->name, c->count, c->dtype, req);
  if (st == HK_OK)
    st = check_op(fn, c->name, c->dtype, c->op);
  if (st != HK_OK)
    return st;
  if (c->count > 0 && (!c->sendbuf || !c->recvbuf))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL buffer", fn,
                   c->name);
  size_t bytes = c->count * hk_dtype_size(c->dtype);
  const char *s = c->sendbuf, *r = c->recvbuf;
  if (s != r && c->count > 0 && s < r + bytes && r < s + bytes)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': sendbuf and recvbuf overlap without "
                   "being equal",
                   fn, c->name);
  st = check_scales(fn, c->name, c->dtype, c->prescale, c->postscale, req);
  if (st == HK_OK)
    st = check_shape(fn, c, c->count, req);
  req->coll = HK_COLL_ALLREDUCE;
  req->op = (uint8_t)c->op;
  p->send = c->sendbuf;
  p->recv = c->recvbuf;
  return st;
}

static hk_status check_broadcast(const char *fn, const hk_collective *c,
                                 hk_wire_request *req, prepared *p) {
  hk_status st = check_common(fn, c->name, c->count, c->dtype, req);
  if (st != HK_OK)
    return st;
  if (c->root < 0 || c->root >= p->size)
    return c->set == HK_WORLD
               ? hk_fail(HK_ERR_INVALID_ARG,
                         "%s: tensor '%s': root %d is not a rank in [0, %d)",
                         fn, c->name, c->root, p->size)
               : hk_fail(HK_ERR_INVALID_ARG,
                         "%s: tensor '%s': root %d is not a rank of process "
                         "set %d, whose ranks are [0, %d)",
                         fn, c->name, c->root, (int)c->set, p->size);
  if (c->count > 0 && !c->recvbuf)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL buffer", fn,
                   c->name);
  req->coll = HK_COLL_BROADCAST;
  req->root = c->root;
  p->send = p->recv = c->recvbuf;
  return check_shape(fn, c, c->count, req);
}

static hk_status check_allgather(const char *fn, const hk_collective *c,
                                 hk_wire_request *req, prepared *p) {
  hk_status st = check_rows(fn, c->name, c->rows, c->row_elems, c->dtype, req);
  if (st != HK_OK)
    return st;
  if (!c->recvbuf_out || (c->rows > 0 && !c->sendbuf))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn, c->name,
                   !c->recvbuf_out ? "recvbuf pointer" : "sendbuf");
  req->coll = HK_COLL_ALLGATHER;
  p->send = c->sendbuf;
  p->out.out_buf = c->recvbuf_out;
  p->out.out_counts = c->rows_out;
  return check_shape(fn, c, c->rows * c->row_elems, req);
}

static hk_status check_reducescatter(const char *fn, const hk_collective *c,
                                     hk_wire_request *req, prepared *p) {
  hk_status st = check_rows(fn, c->name, c->rows, c->row_elems, c->dtype, req);
  if (st == HK_OK)
    st = check_op(fn, c->name, c->dtype, c->op);
  if (st != HK_OK)
    return st;
  if (c->rows > 0 && (!c->sendbuf || !c->recvbuf))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL buffer", fn,
                   c->name);
  st = check_scales(fn, c->name, c->dtype, c->prescale, c->postscale, req);
  if (st == HK_OK)
    st = check_shape(fn, c, c->rows * c->row_elems, req);
  req->coll = HK_COLL_REDUCESCATTER;
  req->op = (uint8_t)c->op;
  p->send = c->sendbuf;
  p->recv = c->recvbuf;
  p->out.out_rows = c->rows_out;
  return st;
}

static hk_status check_alltoall(const char *fn, const hk_collective *c,
                                hk_wire_request *req, prepared *p) {
  if (!c->splits || !c->recvbuf_out)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn,
                   c->name ? c->name : "(null)",
                   !c->splits ? "splits" : "recvbuf pointer");
  size_t rows = 0;
  for (int r = 0; r < p->size; r++) {
    if (c->splits[r] > SIZE_MAX / 16 - rows)
      return hk_fail(HK_ERR_INVALID_ARG, "%s: splits overflow", fn);
    rows += c->splits[r];
  }
  hk_status st = check_rows(fn, c->name, rows, c->row_elems, c->dtype, req);
  if (st != HK_OK)
    return st;
  if (rows > 0 && !c->sendbuf)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL sendbuf", fn,
                   c->name);
  p->out.splits = malloc((size_t)p->size * sizeof(size_t));
  if (!p->out.splits)
    return hk_fail(HK_ERR_NOMEM, "cannot copy the splits");
  memcpy(p->out.splits, c->splits, (size_t)p->size * sizeof(size_t));
  req->coll = HK_COLL_ALLTOALL;
  p->send = c->sendbuf;
  p->out.out_buf = c->recvbuf_out;
  p->out.out_counts = c->rows_out;
  return check_shape(fn, c, rows * c->row_elems, req);
}

/* A barrier and a join: no data; the name is given by submit_sync (it
 * counts them per set). rows_out, for a join, receives the set rank that
 * joined last. */
static hk_status check_sync(const char *fn, const hk_collective *c,
                            hk_wire_request *req, prepared *p) {
  (void)fn;
  hk_wire_request_clear(req);
  req->coll = (uint8_t)c->kind; /* HK_BARRIER, HK_JOIN: hk_coll's values */
  req->row_elems = 1;
  req->prescale = req->postscale = 1.0;
  p->out.out_rows = c->kind == HK_JOIN ? c->rows_out : NULL;
  return HK_OK;
}

/* The kinds, by hk_collective_kind. */
static const kind_check kinds[] = {
    [HK_ALLREDUCE] = check_allreduce,
    [HK_BROADCAST] = check_broadcast,
    [HK_BARRIER] = check_sync,
    [HK_ALLGATHER] = check_allgather,
    [HK_REDUCESCATTER] = check_reducescatter,
    [HK_ALLTOALL] = check_alltoall,
    [HK_JOIN] = check_sync,
};
_Static_assert((int)HK_BARRIER == HK_COLL_BARRIER &&
                   (int)HK_JOIN == HK_COLL_JOIN &&
                   (int)HK_ALLTOALL == HK_COLL_ALLTOALL,
               "hk_collective_kind's values are hk_coll's");

/* Checks c's set, then c as its kind does. */
static hk_status prepare(const char *fn, hk_ctx *ctx, const hk_collective *c,
                         hk_wire_request *req, prepared *p) {
  memset(p, 0, sizeof *p);
  if ((unsigned)c->kind >= sizeof kinds / sizeof kinds[0] || !kinds[c->kind])
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': unknown kind %d", fn,
                   c->name ? c->name : "(null)", (int)c->kind);
  hk_status st = check_set(fn, ctx, c, p);
  if (st == HK_OK)
    st = kinds[c->kind](fn, c, req, p);
  req->set = c->set;
  if (st != HK_OK) {
    free(p->out.splits);
    p->out.splits = NULL;
  }
  return st;
}

/* A barrier's or a join's name: its sequence on this rank in its set (the
 * n-th pairs with the n-th on every other member): hk.barrier.<n>,
 * hk.join.<n> in the world, hk.set<id>.barrier.<n> in a set. */
static void name_sync(hk_ctx *ctx, const hk_collective *c,
                      hk_wire_request *req) {
  const int join = c->kind == HK_JOIN;
  pthread_mutex_lock(&ctx->mu); /* (the entry stays when a set goes) */
  hk_set *s = ctx->sets[c->set];
  uint64_t seq = join ? s->join_seq++ : s->barrier_seq++;
  pthread_mutex_unlock(&ctx->mu);
  char set[32] = "";
  if (c->set != HK_WORLD)
    snprintf(set, sizeof set, "set%d.", (int)c->set);
  snprintf(req->name, sizeof req->name, "hk.%s%s.%llu", set,
           join ? "join" : "barrier", (unsigned long long)seq);
}

/* hk_submit under the name of the function the caller called. */
static hk_status submit_as(const char *fn, const hk_collective *c,
                           hk_handle *handle) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_runtime_no_job(fn);
  if (!c || !handle)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn,
                   c && c->name ? c->name : "(null)",
                   !c ? "description" : "handle pointer");
  hk_wire_request req;
  prepared p;
  hk_status st = prepare(fn, ctx, c, &req, &p);
  if (st != HK_OK)
    return st;
  if (c->kind == HK_BARRIER || c->kind == HK_JOIN)
    name_sync(ctx, c, &req);
  return hk_queue_submit(ctx, &req, p.send, p.recv, &p.out, handle);
}

/* hk_submit's defaults: row_elems, prescale and postscale 0 are 1 (the
 * shorthands pass what their callers gave: a row size of 0 is an error
 * there, a factor of 0 a zero). */
static hk_collective with_defaults(const hk_collective *c) {
  hk_collective d = *c;
  d.row_elems = d.row_elems ? d.row_elems : 1;
  d.prescale = d.prescale != 0.0 ? d.prescale : 1.0;
  d.postscale = d.postscale != 0.0 ? d.postscale : 1.0;
  return d;
}

hk_status hk_submit(const hk_collective *c, hk_handle *handle) {
  if (!c)
    return submit_as("hk_submit", c, handle);
  hk_collective d = with_defaults(c);
  return submit_as("hk_submit", &d, handle);
}

/* hk_submit_group under the name of the function the caller called. */
static hk_status submit_group_as(const char *fn, const hk_collective *cs,
                                 size_t n, hk_handle *handle) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx)
    return hk_runtime_no_job(fn);
  if (n == 0 || n > UINT32_MAX || !cs || !handle)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: %s", fn,
                   n == 0 ? "the group is empty"
                          : "a NULL array or handle pointer");
  hk_handle *m = calloc(n, sizeof *m);
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %zu handles", n);
  hk_status st = HK_OK;
  for (size_t i = 0; i < n && st == HK_OK; i++) {
    const hk_collective *c = &cs[i];
    if (c->kind == HK_BARRIER || c->kind == HK_JOIN) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: a barrier or a join cannot be a member of a group", fn);
      break;
    }
    if (c->kind != cs[0].kind || c->set != cs[0].set) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': a group's members are of one kind and "
                   "one process set (the first is %d in set %d, this %d in "
                   "set %d)",
                   fn, c->name ? c->name : "(null)", (int)cs[0].kind,
                   (int)cs[0].set, (int)c->kind, (int)c->set);
      break;
    }
    hk_wire_request req;
    prepared p;
    st = prepare(fn, ctx, c, &req, &p);
    for (size_t j = 0; j < i && st == HK_OK; j++)
      if (!strcmp(c->name, cs[j].name))
        st = hk_fail(HK_ERR_DUPLICATE_NAME,
                     "%s: tensor '%s' appears twice in the group", fn, c->name);
    if (st == HK_OK && !(m[i] = calloc(1, sizeof **m)))
      st = hk_fail(HK_ERR_NOMEM, "cannot allocate a handle");
    if (st != HK_OK) {
      free(p.out.splits);
      break;
    }
    req.group_size = (uint32_t)n;
    req.group_index = (uint32_t)i;
    snprintf(req.group, sizeof req.group, "%s", cs[0].name);
    *m[i] = p.out;
    m[i]->req = req;
    m[i]->sendbuf = p.send;
    m[i]->recvbuf = p.recv;
  }
  if (st == HK_OK)
    st = hk_queue_submit_group(ctx, m, n, handle);
  if (st != HK_OK)
    for (size_t i = 0; i < n; i++)
      if (m[i]) {
        free(m[i]->splits);
        free(m[i]);
      }
  free(m);
  return st;
}

hk_status hk_submit_group(const hk_collective *cs, size_t n,
                          hk_handle *handle) {
  if (!cs || n == 0 || n > UINT32_MAX)
    return submit_group_as("hk_submit_group", cs, n, handle);
  hk_collective *d = malloc(n * sizeof *d);
  if (!d)
    return hk_fail(HK_ERR_NOMEM, "cannot describe %zu tensors", n);
  for (size_t i = 0; i < n; i++)
    d[i] = with_defaults(&cs[i]);
  hk_status st = submit_group_as("hk_submit_group", d, n, handle);
  free(d);
  return st;
}

/* ---- the shorthands ---- */

hk_status hk_allreduce_async(const char *name, const void *sendbuf,
                             void *recvbuf, size_t count, hk_dtype dtype,
                             hk_op op, hk_handle *handle) {
  return hk_allreduce_scaled_async(name, sendbuf, recvbuf, count, dtype, op,
                                   1.0, 1.0, handle);
}

hk_status hk_allreduce_scaled_async(const char *name, const void *sendbuf,
                                    void *recvbuf, size_t count, hk_dtype dtype,
                                    hk_op op, double prescale, double postscale,
                                    hk_handle *handle) {
  hk_collective c = {.kind = HK_ALLREDUCE,
                     .name = name,
                     .dtype = dtype,
                     .op = op,
                     .sendbuf = sendbuf,
                     .recvbuf = recvbuf,
                     .count = count,
                     .prescale = prescale,
                     .postscale = postscale};
  return submit_as("hk_allreduce_async", &c, handle);
}

hk_status hk_broadcast_async(const char *name, void *buf, size_t count,
                             hk_dtype dtype, int root, hk_handle *handle) {
  hk_collective c = {.kind = HK_BROADCAST,
                     .name = name,
                     .dtype = dtype,
                     .recvbuf = buf,
                     .count = count,
                     .root = root};
  return submit_as("hk_broadcast_async", &c, handle);
}

hk_status hk_allgather_async(const char *name, const void *sendbuf, size_t rows,
                             size_t row_elems, hk_dtype dtype, void **recvbuf,
                             size_t *rows_per_rank, hk_handle *handle) {
  hk_collective c = {.kind = HK_ALLGATHER,
                     .name = name,
                     .dtype = dtype,
                     .sendbuf = sendbuf,
                     .rows = rows,
                     .row_elems = row_elems,
                     .recvbuf_out = recvbuf,
                     .rows_out = rows_per_rank};
  return submit_as("hk_allgather_async", &c, handle);
}

hk_status hk_reducescatter_async(const char *name, const void *sendbuf,
                                 size_t rows, size_t row_elems, hk_dtype dtype,
                                 hk_op op, void *recvbuf, size_t *rows_out,
                                 hk_handle *handle) {
  hk_collective c = {.kind = HK_REDUCESCATTER,
                     .name = name,
                     .dtype = dtype,
                     .op = op,
                     .prescale = 1.0,
                     .postscale = 1.0,
                     .sendbuf = sendbuf,
                     .recvbuf = recvbuf,
                     .rows = rows,
                     .row_elems = row_elems,
                     .rows_out = rows_out};
  return submit_as("hk_reducescatter_async", &c, handle);
}

hk_status hk_alltoall_async(const char *name, const void *sendbuf,
                            const size_t *splits, size_t row_elems,
                            hk_dtype dtype, void **recvbuf, size_t *recv_splits,
                            hk_handle *handle) {
  hk_collective c = {.kind = HK_ALLTOALL,
                     .name = name,
                     .dtype = dtype,
                     .sendbuf = sendbuf,
                     .row_elems = row_elems,
                     .splits = splits,
                     .recvbuf_out = recvbuf,
                     .rows_out = recv_splits};
  return submit_as("hk_alltoall_async", &c, handle);
}

hk_status hk_grouped_allreduce_async(const char *const *names,
                                     const void *const *sendbufs,
                                     void *const *recvbufs,
                                     const size_t *counts, size_t n,
                                     hk_dtype dtype, hk_op op,
                                     hk_handle *handle) {
  const char *fn = "hk_grouped_allreduce_async";
  if (!hk_runtime_context())
    return hk_runtime_no_job(fn);
  if (n == 0 || n > UINT32_MAX || !names || !sendbufs || !recvbufs || !counts ||
      !handle)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: %s", fn,
                   n == 0 ? "the group is empty"
                          : "a NULL array or handle pointer");
  if ((unsigned)op > HK_PRODUCT)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: unknown op %d", fn, (int)op);
  hk_collective *cs = calloc(n, sizeof *cs);
  if (!cs)
    return hk_fail(HK_ERR_NOMEM, "cannot describe %zu tensors", n);
  for (size_t i = 0; i < n; i++)
    cs[i] = (hk_collective){.kind = HK_ALLREDUCE,
                            .name = names[i],
                            .dtype = dtype,
                            .op = op,
                            .prescale = 1.0,
                            .postscale = 1.0,
                            .sendbuf = sendbufs[i],
                            .recvbuf = recvbufs[i],
                            .count = counts[i]};
  hk_status st = submit_group_as(fn, cs, n, handle);
  free(cs);
  return st;
}

/* The end of a blocking form (the *_async call, then hk_wait): the call
 * returned st, having submitted h unless it failed; hk_queue_next_waits(1)
 * came before it. */
static hk_status waited(hk_status st, hk_handle h) {
  hk_queue_next_waits(0);
  return st != HK_OK ? st : hk_wait(h);
}

/* The world's negotiated synchronisations: hk_submit's HK_JOIN and
 * HK_BARRIER on HK_WORLD. */
hk_status hk_join(int *last_rank) {
  size_t last = 0;
  hk_collective c = {.kind = HK_JOIN, .set = HK_WORLD, .rows_out = &last};
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = submit_as("hk_join", &c, &h);
  st = waited(st, h);
  if (st == HK_OK && last_rank)
    *last_rank = (int)last;
  return st;
}

hk_status hk_barrier(void) {
  hk_collective c = {.kind = HK_BARRIER, .set = HK_WORLD};
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = submit_as("hk_barrier", &c, &h);
  return waited(st, h);
}

/* ---- blocking forms: the *_async call followed by hk_wait ---- */

hk_status hk_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                       size_t count, hk_dtype dtype, hk_op op) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st =
      hk_allreduce_async(name, sendbuf, recvbuf, count, dtype, op, &h);
  return waited(st, h);
}

hk_status hk_broadcast(const char *name, void *buf, size_t count,
                       hk_dtype dtype, int root) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = hk_broadcast_async(name, buf, count, dtype, root, &h);
  return waited(st, h);
}

hk_status hk_allgather(const char *name, const void *sendbuf, size_t rows,
                       size_t row_elems, hk_dtype dtype, void **recvbuf,
                       size_t *rows_per_rank) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = hk_allgather_async(name, sendbuf, rows, row_elems, dtype,
                                    recvbuf, rows_per_rank, &h);
  return waited(st, h);
}

hk_status hk_reducescatter(const char *name, const void *sendbuf, size_t rows,
                           size_t row_elems, hk_dtype dtype, hk_op op,
                           void *recvbuf, size_t *rows_out) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = hk_reducescatter_async(name, sendbuf, rows, row_elems, dtype,
                                        op, recvbuf, rows_out, &h);
  return waited(st, h);
}

hk_status hk_alltoall(const char *name, const void *sendbuf,
                      const size_t *splits, size_t row_elems, hk_dtype dtype,
                      void **recvbuf, size_t *recv_splits) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = hk_alltoall_async(name, sendbuf, splits, row_elems, dtype,
                                   recvbuf, recv_splits, &h);
  return waited(st, h);
}

hk_status hk_grouped_allreduce(const char *const *names,
                               const void *const *sendbufs,
                               void *const *recvbufs, const size_t *counts,
                               size_t n, hk_dtype dtype, hk_op op) {
  hk_handle h = NULL;
  hk_queue_next_waits(1);
  hk_status st = hk_grouped_allreduce_async(names, sendbufs, recvbufs, counts,
                                            n, dtype, op, &h);
  return waited(st, h);
}
