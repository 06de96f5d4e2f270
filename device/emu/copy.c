/*
 * copy.c - the emu's copies and kernels: memcpy_async, batch_copy (every
 * element through device/elem.h's hk_elem_copy, the arithmetic the CUDA
 * kernels run) and fill. Every range is checked when the operation is
 * enqueued (memory.c): a device range past its allocation's end, or ranges
 * that overlap without being equal, are refused with HK_ERR_INVALID_ARG;
 * nothing is checked or can fail later, on the stream.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "device/elem.h"
#include "device/emu/internal.h"

/* 1 if [a, a+an) and [b, b+bn) share a byte. */
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}

/* ---- memcpy ---- */

typedef struct memcpy_op {
  emu_op base;
  emu_range dst, src;
  size_t bytes;
} memcpy_op;

static hk_status memcpy_run(emu_op *op, hk_dev_stream s, char *msg,
                            size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  memcpy_op *o = (memcpy_op *)op;
  if (o->bytes && o->dst.ptr != o->src.ptr)
    memcpy(o->dst.ptr, o->src.ptr, o->bytes);
  return HK_OK;
}

static void memcpy_destroy(emu_op *op) {
  memcpy_op *o = (memcpy_op *)op;
  emu_range_release(&o->dst);
  emu_range_release(&o->src);
  free(o);
}

/* Copies from device to host memory enqueued so far in the process, and
 * their bytes (hk_emu_copies_to_host). */
static atomic_size_t to_host_copies, to_host_bytes;

size_t hk_emu_copies_to_host(size_t *bytes) {
  if (bytes)
    *bytes = atomic_load(&to_host_bytes);
  return atomic_load(&to_host_copies);
}

hk_status emu_memcpy_async(hk_device *dev, void *dst, const void *src,
                           size_t bytes, hk_dev_stream s) {
  if (!emu_dev(dev, "memcpy_async"))
    return HK_ERR_INVALID_ARG;
  if (dst != src && overlap(dst, bytes, src, bytes))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: memcpy_async: %zu bytes from %p to %p overlap", bytes,
                   src, dst);
  memcpy_op *o = calloc(1, sizeof *o);
  if (!o)
    return hk_fail(HK_ERR_NOMEM, "emu: memcpy_async: out of host memory");
  o->base.run = memcpy_run;
  o->base.destroy = memcpy_destroy;
  o->bytes = bytes;
  hk_status st = emu_range_resolve(dst, bytes, 0, "memcpy_async dst", &o->dst);
  if (st == HK_OK)
    st = emu_range_resolve(src, bytes, 0, "memcpy_async src", &o->src);
  if (st != HK_OK) {
    memcpy_destroy(&o->base);
    return st;
  }
  if (o->src.alloc && !o->dst.alloc) {
    atomic_fetch_add(&to_host_copies, 1);
    atomic_fetch_add(&to_host_bytes, bytes);
  }
  return emu_enqueue(s, &o->base);
}

/* ---- batch_copy ---- */

typedef struct batch_item {
  emu_range dst, src;
  size_t count;
  double scale;
  int32_t divisor;
  float pre;
} batch_item;

typedef struct batch_op {
  emu_op base;
  int src_dtype, dst_dtype;
  size_t n;
  batch_item items[]; /* n */
} batch_op;

static hk_status batch_run(emu_op *op, hk_dev_stream s, char *msg, size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  batch_op *o = (batch_op *)op;
  for (size_t k = 0; k < o->n; k++) {
    const batch_item *it = &o->items[k];
    for (size_t i = 0; i < it->count; i++)
      hk_elem_copy(it->dst.ptr, it->src.ptr, i, o->src_dtype, o->dst_dtype,
                   it->scale, it->divisor, it->pre);
  }
  return HK_OK;
}

static void batch_destroy(emu_op *op) {
  batch_op *o = (batch_op *)op;
  for (size_t k = 0; k < o->n; k++) {
    emu_range_release(&o->items[k].dst);
    emu_range_release(&o->items[k].src);
  }
  free(o);
}

static int is16(hk_dtype t) { return t == HK_FLOAT16 || t == HK_BFLOAT16; }

hk_status emu_batch_copy(hk_device *dev, const hk_dev_copy *items, size_t n,
                         hk_dtype src_dtype, hk_dtype dst_dtype,
                         hk_dev_stream s) {
  if (!emu_dev(dev, "batch_copy"))
    return HK_ERR_INVALID_ARG;
  size_t ss = hk_dtype_size(src_dtype), ds = hk_dtype_size(dst_dtype);
  if (!ss || !ds)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: batch_copy: bad dtype (%d -> %d)",
                   (int)src_dtype, (int)dst_dtype);
  if (src_dtype != dst_dtype && !(src_dtype == HK_FLOAT32 && is16(dst_dtype)) &&
      !(dst_dtype == HK_FLOAT32 && is16(src_dtype)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: batch_copy: %s -> %s is not a supported conversion "
                   "(same dtype, or float32 <-> float16/bfloat16)",
                   hk_dtype_name(src_dtype), hk_dtype_name(dst_dtype));
  if (n && !items)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: batch_copy: NULL items, n %zu", n);
  size_t bytes;
  if (!emu_mul(n, sizeof(batch_item), &bytes) ||
      bytes > SIZE_MAX - sizeof(batch_op))
    return hk_fail(HK_ERR_INVALID_ARG, "emu: batch_copy: %zu items", n);
  batch_op *o = calloc(1, sizeof *o + bytes);
  if (!o)
    return hk_fail(HK_ERR_NOMEM,
                   "emu: batch_copy of %zu items: out of host "
                   "memory",
                   n);
  o->base.run = batch_run;
  o->base.destroy = batch_destroy;
  o->src_dtype = (int)src_dtype;
  o->dst_dtype = (int)dst_dtype;
  hk_status st = HK_OK;
  for (size_t k = 0; k < n && st == HK_OK; k++) {
    const hk_dev_copy *c = &items[k];
    size_t sb, db;
    char what[64];
    if (!emu_mul(c->count, ss, &sb) || !emu_mul(c->count, ds, &db)) {
      st = hk_fail(HK_ERR_INVALID_ARG, "emu: batch_copy item %zu: count %zu", k,
                   c->count);
      break;
    }
    if (overlap(c->dst, db, c->src, sb) &&
        !(c->dst == c->src && src_dtype == dst_dtype)) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "emu: batch_copy item %zu: src %p (%zu bytes) and dst %p "
                   "(%zu bytes) overlap",
                   k, c->src, sb, c->dst, db);
      break;
    }
    batch_item *it = &o->items[k];
    o->n = k + 1; /* destroy releases what was resolved */
    it->count = c->count;
    it->scale = c->scale;
    it->divisor = c->divisor;
    it->pre = (float)c->pre;
    snprintf(what, sizeof what, "batch_copy item %zu dst", k);
    st = emu_range_resolve(c->dst, db, 0, what, &it->dst);
    if (st == HK_OK) {
      snprintf(what, sizeof what, "batch_copy item %zu src", k);
      st = emu_range_resolve(c->src, sb, 0, what, &it->src);
    }
  }
  if (st != HK_OK) {
    batch_destroy(&o->base);
    return st;
  }
  return emu_enqueue(s, &o->base);
}

/* ---- fill ---- */

typedef struct fill_op {
  emu_op base;
  emu_range p;
  size_t count, size;
  unsigned char value[8];
} fill_op;

static hk_status fill_run(emu_op *op, hk_dev_stream s, char *msg, size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  fill_op *o = (fill_op *)op;
  unsigned char *p = o->p.ptr;
  size_t bytes = o->count * o->size, done = o->size;
  if (!o->count)
    return HK_OK;
  memcpy(p, o->value, o->size); /* one element, then doubling copies */
  while (done < bytes) {
    size_t n = done < bytes - done ? done : bytes - done;
    memcpy(p + done, p, n);
    done += n;
  }
  return HK_OK;
}

static void fill_destroy(emu_op *op) {
  fill_op *o = (fill_op *)op;
  emu_range_release(&o->p);
  free(o);
}

hk_status emu_fill(hk_device *dev, void *p, size_t count, hk_dtype dtype,
                   const void *value, hk_dev_stream s) {
  if (!emu_dev(dev, "fill"))
    return HK_ERR_INVALID_ARG;
  size_t es = hk_dtype_size(dtype), bytes;
  if (!es)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: fill: bad dtype %d", (int)dtype);
  if (!value)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: fill: NULL value");
  if (!emu_mul(count, es, &bytes))
    return hk_fail(HK_ERR_INVALID_ARG, "emu: fill: count %zu", count);
  fill_op *o = calloc(1, sizeof *o);
  if (!o)
    return hk_fail(HK_ERR_NOMEM, "emu: fill: out of host memory");
  o->base.run = fill_run;
  o->base.destroy = fill_destroy;
  o->count = count;
  o->size = es;
  memcpy(o->value, value, es);
  hk_status st = emu_range_resolve(p, bytes, count > 0, "fill", &o->p);
  if (st != HK_OK) {
    fill_destroy(&o->base);
    return st;
  }
  return emu_enqueue(s, &o->base);
}
