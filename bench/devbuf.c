/*
 * devbuf.c - hkbench's device buffers and kernel table (see devbuf.h).
 */
#include "devbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "stats.h"
#include "worker/internal.h"

static hk_device *device(void) {
  hk_ctx *ctx = hk_runtime_context();
  if (!ctx || !ctx->dev) {
    fprintf(stderr, "hkbench --device gpu: %s\n",
            ctx ? ctx->dev_missing : "hk_init was not called");
    exit(1);
  }
  return ctx->dev;
}

static void ok(hk_status st, const char *what) { hkb_ok(st, what); }

static void sync_stream(hk_device *d, hk_dev_stream s) {
  hk_dev_event e;
  ok(d->ops->event_create(d, &e), "event_create");
  ok(d->ops->event_record(d, e, s), "event_record");
  for (int done = 0; !done;)
    ok(d->ops->event_query(d, e, &done), "event_query");
  d->ops->event_destroy(d, e);
}

void *hkb_dev_alloc(size_t bytes) {
  hk_device *d = device();
  void *p;
  ok(d->ops->mem_alloc(d, bytes ? bytes : 1, &p), "device mem_alloc");
  return p;
}

void hkb_dev_free(void *p) {
  if (p)
    device()->ops->mem_free(device(), p);
}

void hkb_dev_upload(void *dev, const void *host, size_t bytes) {
  hk_device *d = device();
  ok(d->ops->memcpy_async(d, dev, host, bytes, NULL), "copy to the device");
  sync_stream(d, NULL);
}

void hkb_dev_download(void *host, const void *dev, size_t bytes) {
  hk_device *d = device();
  ok(d->ops->memcpy_async(d, host, dev, bytes, NULL), "copy to the host");
  sync_stream(d, NULL);
}

enum { NTENSORS = 64 };

/* Milliseconds of one launch of what `run` queues, by events. */
typedef void (*launch_fn)(hk_device *d, hk_dev_stream s, void *arg);

static double time_ms(hk_device *d, hk_dev_stream s, hk_dev_event a,
                      hk_dev_event b, launch_fn run, void *arg) {
  ok(d->ops->event_record(d, a, s), "event_record");
  run(d, s, arg);
  ok(d->ops->event_record(d, b, s), "event_record");
  sync_stream(d, s);
  float ms = 0;
  ok(d->ops->event_elapsed(d, a, b, &ms), "event_elapsed");
  return ms;
}

typedef struct kargs {
  void *src, *dst;
  size_t bytes;
  hk_dev_copy items[NTENSORS];
} kargs;

static void run_copy(hk_device *d, hk_dev_stream s, void *arg) {
  kargs *k = arg;
  ok(d->ops->memcpy_async(d, k->dst, k->src, k->bytes, s), "copy");
}

static void run_batch(hk_device *d, hk_dev_stream s, void *arg) {
  kargs *k = arg;
  ok(d->ops->batch_copy(d, k->items, NTENSORS, HK_FLOAT32, HK_FLOAT32, s),
     "batch_copy");
}

/* 64 tensors of equal float32 size: pack (tensors -> contiguous) or
 * unpack (contiguous -> tensors, with a postscale of 0.5). */
static void make_items(kargs *k, int pack) {
  size_t each = k->bytes / NTENSORS / 4;
  for (int i = 0; i < NTENSORS; i++) {
    uint8_t *t = (uint8_t *)k->src + (size_t)i * each * 4;
    uint8_t *f = (uint8_t *)k->dst + (size_t)i * each * 4;
    k->items[i] = pack ? (hk_dev_copy){f, t, each, 1.0, 1, 1.0}
                       : (hk_dev_copy){t, f, each, 0.5, 1, 1.0};
  }
}

void hkb_kernels(const hkb_opts *o) {
  hk_device *d = device();
  const int iters = o->iters > 0 ? o->iters : 20;
  const int warm = o->warmup >= 0 ? o->warmup : 3;
  const size_t minb = o->min_bytes < (1u << 20) ? 1u << 20 : o->min_bytes;
  hk_dev_stream s;
  hk_dev_event a, b;
  ok(d->ops->stream_create(d, &s), "stream_create");
  ok(d->ops->event_create_timed(d, &a), "event_create_timed");
  ok(d->ops->event_create_timed(d, &b), "event_create_timed");
  double *t = malloc((size_t)iters * sizeof *t);
  kargs *k = calloc(1, sizeof *k);
  k->src = hkb_dev_alloc(o->max_bytes);
  k->dst = hkb_dev_alloc(o->max_bytes);
  if (hk_rank() == 0)
    printf("# device kernels on %s (%s): %d tensors per batch, float32; "
           "GB/s = bytes read / time, median of %d\n"
           "#%11s %12s %12s %12s %10s %10s\n",
           d->ops->describe(d), d->ops->name, NTENSORS, iters, "size(B)",
           "copy(GB/s)", "pack(GB/s)", "unpack(GB/s)", "pack/copy",
           "unpack/copy");
  for (size_t bytes = minb; bytes <= o->max_bytes; bytes *= (size_t)o->factor) {
    k->bytes = bytes / (NTENSORS * 4) * (NTENSORS * 4);
    double med[3];
    for (int which = 0; which < 3; which++) {
      if (which)
        make_items(k, which == 1);
      launch_fn run = which ? run_batch : run_copy;
      for (int it = -warm; it < iters; it++) {
        double ms = time_ms(d, s, a, b, run, k);
        if (it >= 0)
          t[it] = ms;
      }
      med[which] = hkb_median(t, iters);
    }
    double gb[3];
    for (int i = 0; i < 3; i++)
      gb[i] = (double)k->bytes / (med[i] * 1e-3) / 1e9;
    if (hk_rank() == 0)
      printf(" %11zu %12.1f %12.1f %12.1f %10.3f %10.3f\n", k->bytes, gb[0],
             gb[1], gb[2], gb[1] / gb[0], gb[2] / gb[0]);
    fflush(stdout);
    if (bytes > o->max_bytes / (size_t)o->factor)
      break;
  }
  hkb_dev_free(k->src);
  hkb_dev_free(k->dst);
  free(k);
  free(t);
  d->ops->event_destroy(d, a);
  d->ops->event_destroy(d, b);
  d->ops->stream_destroy(d, s);
}
