/*
 * w_device - device tensors end to end on the emulated GPU (HK_DEVICE=emu),
 * run under hkrun by test_device. Every result is compared bit for bit
 * with a serial computation in the documented order, and one hash of all
 * results is compared across ranks.
 *
 *   w_device dtypes COUNT...   every dtype x op on device buffers (plus a
 *                              host tensor in the same step), one host:
 *                              the emu communicator's rank-order fold
 *   w_device ring COUNT...     HK_ALLREDUCE_ALGO=ring: device results equal
 *                              the host tensors' (the flat ring's order)
 *   w_device hier COUNT...     pseudo-hosts (HK_LOCAL_SIZE blocks),
 *                              HK_HIERARCHICAL_ALLREDUCE=1: in-host rank-
 *                              order fold, then the cross ring's order
 *   w_device fusion N          N odd-sized tensors, prescale/postscale and
 *                              average, fused (a group) vs one at a time
 *   w_device delay             the producer stream is delayed by the emu:
 *                              hk must wait for it
 *   w_device reuse             the producer stream is delayed; a write to
 *                              the input on another stream ordered after
 *                              hk_device_stream() (a caching allocator's
 *                              reuse) lands after hk's read of it
 *   w_device reuse staged      the same on a staged schedule (the host
 *                              may wait for the producers before the ring)
 *   w_device compress COUNT    HK_COMPRESSION=fp16|bf16 round trips
 *   w_device mismatch          host vs device, and mixed buffers
 *   w_device current           the calling thread's current device (1,
 *                              while hk uses 0: HK_EMU_DEVICES=2,
 *                              HK_GPU=0) is the same after hk_init, a
 *                              device submit, hk_wait_stream and hk_free;
 *                              100 more steps reuse their events
 *   w_device lazy              a job of host tensors makes no device context
 *                              and no communicator id (emu's counters);
 *                              the first device allreduce makes the id on
 *                              the host's first rank only, and no second
 *                              context (the trainer's allocation made
 *                              the device's one)
 *   w_device otherdev          the last rank's tensor on another device
 *                              than hk's (HK_EMU_DEVICES=2, HK_GPU=0):
 *                              refused on every rank
 *   w_device collectives       broadcast/allgather/reducescatter/alltoall
 *                              on device buffers vs host results
 *   w_device features          grouped allreduce, the response cache (one
 *                              name over steps) and hk_join on device
 *                              tensors
 *   w_device overlap [fault D] two device batches (float32, float64) in
 *                              flight at once: the first's producer stream
 *                              is held by a host callback until the second
 *                              was enqueued behind it (hk_wait_stream
 *                              returned) and the first is seen not done;
 *                              then both against the serial sums. With
 *                              fault (HK_EMU_FAULT in the second), the
 *                              first completes and the job fails; each
 *                              rank says why, and exits once every rank
 *                              has (a file each in folder D)
 *   w_device fault [linger R]  allreduces until one fails (HK_EMU_FAULT);
 *                              with linger, rank R then stays (without
 *                              hk_shutdown) until hkrun ends it
 *   w_device moves             int16 and bool on device buffers:
 *                              broadcast, allgather and alltoall vs host
 *   w_device intscale          integer prescale/postscale on device
 *                              tensors (allreduce fused, reduce-scatter)
 *                              vs the same tensors on the host
 *   w_device half16 COUNT      16-bit averages whose sum would overflow:
 *                              float16 5000 and 60000, and float32 60000
 *                              (travelling as float16 under
 *                              HK_COMPRESSION=fp16), finite and within
 *                              float16's rounding of the partial sums
 *   w_device sets [fold]       device tensors on process sets: every rank
 *                              (given in reverse), ranks 1..np-1 (rank 0
 *                              coordinates it from outside) and pairs
 *                              {0,1}, {2,3}, ... running at once: int32
 *                              and int64 sums, a fused group, a broadcast
 *                              from the set's last rank and an allgather
 *                              against serial results over the members;
 *                              with fold (one host, auto: the set's own
 *                              communicator), a float32 sum bit for bit
 *                              against the emu's fold in set-rank order
 * Prints "device ok: <mode> ..." on success; exits 1 with a message else.
 */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/ring.h"
#include "common/config.h"
#include "common/half.h"
#include "device/device.h"
#include "device/emu/emu.h"
#include "device/host/reduce.h"
#include "hk/hk.h"
#include "wcommon.h"

static hk_device *dev;
static int rank, size;

/* ---- device memory helpers (the test's own use of the emu) ---- */

static void dsync(hk_dev_stream s) {
  hk_dev_event e;
  HKT_OK(dev->ops->event_create(dev, &e));
  HKT_OK(dev->ops->event_record(dev, e, s));
  int done = 0;
  for (;;) { /* the emu's stream thread finishes it */
    HKT_OK(dev->ops->event_query(dev, e, &done));
    if (done)
      break;
    sched_yield();
  }
  dev->ops->event_destroy(dev, e);
}

static void *dalloc(size_t bytes) {
  void *p;
  HKT_OK(dev->ops->mem_alloc(dev, bytes ? bytes : 1, &p));
  return p;
}

static void up(void *d, const void *h, size_t bytes) {
  if (!bytes)
    return;
  HKT_OK(dev->ops->memcpy_async(dev, d, h, bytes, NULL));
  dsync(NULL);
}

static void down(void *h, const void *d, size_t bytes) {
  if (!bytes)
    return;
  HKT_OK(dev->ops->memcpy_async(dev, h, d, bytes, NULL));
  dsync(NULL);
}

/* ---- inputs every rank can regenerate for any rank ---- */

static void fill_input(void *buf, size_t count, hk_dtype d, int r,
                       uint64_t salt) {
  for (size_t i = 0; i < count; i++) {
    uint64_t x = hkt_mix(salt * 1000003u + (uint64_t)r * 7919u + i);
    double v = (double)(int64_t)(x % 2001) / 16.0 - 62.5; /* [-62.5, 62.5] */
    switch (d) {
    case HK_FLOAT16:
      ((uint16_t *)buf)[i] = hk_f32_to_f16((float)(v / 8));
      break;
    case HK_BFLOAT16:
      ((uint16_t *)buf)[i] = hk_f32_to_bf16((float)v * 1.37f);
      break;
    case HK_FLOAT32:
      ((float *)buf)[i] = (float)v * 1.0001f;
      break;
    case HK_FLOAT64:
      ((double *)buf)[i] = v * 1.0000001;
      break;
    case HK_INT8:
      ((int8_t *)buf)[i] = (int8_t)(x % 7) - 3;
      break;
    case HK_UINT8:
      ((uint8_t *)buf)[i] = (uint8_t)(x % 5);
      break;
    case HK_INT16:
      ((int16_t *)buf)[i] = (int16_t)((int)(x % 20001) - 10000);
      break;
    case HK_BOOL: /* any byte: hk moves bool as it is */
      ((uint8_t *)buf)[i] = (uint8_t)(x >> 8);
      break;
    case HK_INT32:
      ((int32_t *)buf)[i] = (int32_t)(x % 200001) - 100000;
      break;
    default:
      ((int64_t *)buf)[i] = (int64_t)(x % 2000001) - 1000000;
      break;
    }
  }
}

/* acc = x op acc (the ring's combination, collectives/ring.c) */
static void ring_combine(void *acc, const void *x, hk_dtype d, hk_op op) {
  hk_reduce(acc, x, acc, 1, d, op);
}

/* acc = acc op x (the emu communicator's rank-order fold, emu.h) */
static void fold_combine(void *acc, const void *x, hk_dtype d, hk_op op) {
  hk_reduce(acc, acc, x, 1, d, op);
}

/* The average's division, then the postscale: the unpack's arithmetic. */
static void finish(void *acc, size_t n, hk_dtype d, hk_op op, int divisor,
                   double post) {
  if (op == HK_AVERAGE)
    hk_reduce_finish_average(acc, n, d, divisor);
  if (post != 1.0)
    hk_scale_copy(acc, acc, n, d, post);
}

/* In-host model: element e of ranks first..first+L-1, rank-order fold. */
static void host_fold(uint8_t *acc, void *const *in, int first, int L, size_t e,
                      hk_dtype d, hk_op op) {
  const size_t esz = hk_dtype_size(d);
  memcpy(acc, (uint8_t *)in[first] + e * esz, esz);
  for (int l = 1; l < L; l++)
    fold_combine(acc, (uint8_t *)in[first + l] + e * esz, d, op);
}

/* The serial model: L ranks per host, H hosts. H == 1: the comm's fold.
 * Otherwise hierarchical: element of segment j = b*H + c (default
 * segments over L*H): host partials by the fold, then the cross ring
 * from host c. */
static void model(void *out, void *const *in, int L, int H, size_t count,
                  hk_dtype d, hk_op op) {
  const size_t esz = hk_dtype_size(d);
  size_t *seg = malloc(((size_t)L * H + 1) * sizeof *seg);
  hk_ring_default_segments(count, L * H, seg);
  uint8_t part[64][8], acc[8];
  for (int j = 0; j < L * H; j++) {
    int c = j % H;
    for (size_t e = seg[j]; e < seg[j + 1]; e++) {
      for (int h = 0; h < H; h++)
        host_fold(part[h], in, h * L, L, e, d, op);
      memcpy(acc, part[c], esz);
      for (int k = 1; k < H; k++)
        ring_combine(acc, part[(c + k) % H], d, op);
      memcpy((uint8_t *)out + e * esz, acc, esz);
    }
  }
  free(seg);
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = hkt_mix(h ^ b[i]);
  return h;
}

/* Every rank must hold the same bits: allgather the hashes (host). */
static void same_everywhere(uint64_t h, const char *what) {
  uint64_t *all = NULL;
  HKT_OK(
      hk_allgather("w_device.hash", &h, 1, 1, HK_INT64, (void **)&all, NULL));
  for (int r = 0; r < size; r++)
    HKT_CHECK(all[r] == all[0], "%s: rank %d's results differ from rank 0's",
              what, r);
  hk_free(all);
}

static void check_bits(const void *got, const void *want, size_t count,
                       hk_dtype d, const char *what) {
  const size_t esz = hk_dtype_size(d);
  for (size_t i = 0; i < count; i++)
    HKT_CHECK(!memcmp((const uint8_t *)got + i * esz,
                      (const uint8_t *)want + i * esz, esz),
              "%s: element %zu of %zu differs from the serial model", what, i,
              count);
}

/* ---- modes ---- */

static const hk_op ops[] = {HK_SUM, HK_AVERAGE, HK_MIN, HK_MAX, HK_PRODUCT};

/* One allreduce of `count` elements on device buffers vs the model (L
 * ranks per host); in_place alternates. Also a host tensor in the same
 * step when with_host. Returns the result hash. */
static uint64_t one_case(hk_dtype d, hk_op op, size_t count, int L, int H,
                         int with_host, int vs_host, uint64_t salt) {
  const size_t esz = hk_dtype_size(d), bytes = count * esz;
  void **in = calloc((size_t)size, sizeof *in);
  for (int r = 0; r < size; r++) {
    in[r] = malloc(bytes + 1);
    fill_input(in[r], count, d, r, salt);
  }
  if (op == HK_PRODUCT) /* keep products small and exact: -1, 1, 2 */
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < count && d <= HK_FLOAT64; i++) {
        uint64_t x = hkt_mix(salt + (uint64_t)r * 31 + i) % 3;
        double v = x == 0 ? -1 : x == 1 ? 1 : 2;
        if (d == HK_FLOAT16)
          ((uint16_t *)in[r])[i] = hk_f32_to_f16((float)v);
        else if (d == HK_BFLOAT16)
          ((uint16_t *)in[r])[i] = hk_f32_to_bf16((float)v);
        else if (d == HK_FLOAT32)
          ((float *)in[r])[i] = (float)v;
        else
          ((double *)in[r])[i] = v;
      }
  void *want = malloc(bytes + 1), *got = malloc(bytes + 1);
  int in_place = (int)(salt & 1);
  void *dsend = dalloc(bytes), *drecv = in_place ? dsend : dalloc(bytes);
  up(dsend, in[rank], bytes);
  char name[96];
  snprintf(name, sizeof name, "dev.%s.%s.%zu.%llu", hk_dtype_name(d),
           hk_op_name(op), count, (unsigned long long)salt);
  hk_handle h, hh = NULL;
  void *hbuf = NULL;
  HKT_OK(hk_allreduce_async(name, dsend, drecv, count, d, op, &h));
  if (with_host || vs_host) { /* a host tensor of the same data */
    hbuf = malloc(bytes + 1);
    memcpy(hbuf, in[rank], bytes);
    char hname[112];
    snprintf(hname, sizeof hname, "%s.host", name);
    HKT_OK(hk_allreduce_async(hname, hbuf, hbuf, count, d, op, &hh));
  }
  HKT_OK(hk_wait(h));
  if (hh)
    HKT_OK(hk_wait(hh));
  down(got, drecv, bytes);
  if (vs_host) {
    memcpy(want, hbuf, bytes);
  } else {
    model(want, in, L, H, count, d, op);
    finish(want, count, d, op, size, 1.0);
  }
  check_bits(got, want, count, d, name);
  uint64_t hash = hash_bytes(salt, got, bytes);
  dev->ops->mem_free(dev, dsend);
  if (!in_place)
    dev->ops->mem_free(dev, drecv);
  for (int r = 0; r < size; r++)
    free(in[r]);
  free(in);
  free(want);
  free(got);
  free(hbuf);
  return hash;
}

static void mode_cases(int argc, char **argv, int L, int H, int vs_host,
                       const char *mode) {
  uint64_t hash = 0, salt = 1;
  int cases = 0;
  for (int a = 2; a < argc; a++) {
    size_t count = strtoull(argv[a], NULL, 10);
    int big = count > 100000;
    for (int d = HK_FLOAT16; d <= HK_INT16; d++)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        /* the big count on a few pairs: the rest adds time, not cover */
        if (big && !((d == HK_FLOAT32 && ops[o] == HK_SUM) ||
                     (d == HK_BFLOAT16 && ops[o] == HK_AVERAGE) ||
                     (d == HK_INT64 && ops[o] == HK_MAX)))
          continue;
        hash ^= one_case((hk_dtype)d, ops[o], count, L, H, cases % 3 == 0,
                         vs_host, salt++);
        cases++;
      }
  }
  same_everywhere(hash, mode);
  printf("device ok: %s np=%d cases=%d\n", mode, size, cases);
}

/* N tensors of odd sizes at odd offsets of one allocation, scaled and
 * averaged: fused (one group) vs one at a time. */
static void mode_fusion(int n) {
  const hk_dtype d = HK_FLOAT32;
  size_t *counts = malloc((size_t)n * sizeof *counts), total = 0;
  for (int i = 0; i < n; i++) {
    counts[i] = 1 + hkt_mix((uint64_t)i) % 3001;
    total += counts[i] + 1; /* +1: the next one starts misaligned */
  }
  float *host = malloc(total * 4), *a = malloc(total * 4),
        *b = malloc(total * 4);
  fill_input(host, total, d, rank, 99);
  float *dbuf = dalloc(total * 4), *dout = dalloc(total * 4);
  up(dbuf, host, total * 4);
  const void **send = malloc((size_t)n * sizeof *send);
  void **recv = malloc((size_t)n * sizeof *recv);
  char **names = malloc((size_t)n * sizeof *names);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    send[i] = dbuf + at;
    recv[i] = dout + at;
    names[i] = malloc(32);
    snprintf(names[i], 32, "fuse.%d", i);
    at += counts[i] + 1;
  }
  /* fused: every tensor submitted before any is waited */
  hk_handle *hs = malloc((size_t)n * sizeof *hs);
  for (int i = 0; i < n; i++)
    HKT_OK(hk_allreduce_scaled_async(names[i], send[i], recv[i], counts[i], d,
                                     HK_AVERAGE, 0.5, 3.0, &hs[i]));
  for (int i = 0; i < n; i++)
    HKT_OK(hk_wait(hs[i]));
  down(a, dout, total * 4);
  /* alone: one at a time */
  for (int i = 0; i < n; i++) {
    HKT_OK(hk_allreduce_scaled_async(names[i], send[i], recv[i], counts[i], d,
                                     HK_AVERAGE, 0.5, 3.0, &hs[i]));
    HKT_OK(hk_wait(hs[i]));
  }
  down(b, dout, total * 4);
  at = 0;
  for (int i = 0; i < n; i++) {
    check_bits(a + at, b + at, counts[i], d, names[i]);
    at += counts[i] + 1;
  }
  same_everywhere(hash_bytes(7, a, total * 4), "fusion");
  printf("device ok: fusion np=%d tensors=%d\n", size, n);
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
  free(send);
  free(recv);
  free(hs);
  free(host);
  free(a);
  free(b);
  free(counts);
  dev->ops->mem_free(dev, dbuf);
  dev->ops->mem_free(dev, dout);
}

/* The values reach the device only after the emu delays the producer
 * stream: a read before that would see the zeros mem_alloc gives. */
static void mode_delay(void) {
  const size_t count = 4099;
  float *vals = malloc(count * 4), *got = malloc(count * 4);
  for (size_t i = 0; i < count; i++)
    vals[i] = (float)(rank + 1) + (float)i;
  float *d = dalloc(count * 4);
  float *zero = calloc(count, 4);
  up(d, zero, count * 4);
  hk_dev_stream s;
  HKT_OK(dev->ops->stream_create(dev, &s));
  HKT_OK(hk_emu_stream_delay(dev, s, 2000));
  HKT_OK(dev->ops->memcpy_async(dev, d, vals, count * 4, s));
  hk_set_stream(s);
  hk_handle h;
  HKT_OK(hk_allreduce_async("delayed", d, d, count, HK_FLOAT32, HK_SUM, &h));
  hk_set_stream(NULL);
  /* A second stream, ordered after the result by hk_wait_stream, which
   * must return without waiting for the GPU: the result is still 2 s of
   * producer delay away, so an event recorded on s2 right after the
   * return cannot have completed (it would have, had hk_wait_stream
   * waited for the device on the host). */
  hk_dev_stream s2;
  hk_dev_event e;
  HKT_OK(dev->ops->stream_create(dev, &s2));
  HKT_OK(dev->ops->event_create(dev, &e));
  HKT_OK(hk_wait_stream(h, s2));
  HKT_OK(dev->ops->event_record(dev, e, s2));
  int done = 1;
  HKT_OK(dev->ops->event_query(dev, e, &done));
  HKT_CHECK(!done, "hk_wait_stream waited on the host for the GPU result");
  dsync(s2);
  HKT_OK(dev->ops->event_query(dev, e, &done));
  HKT_CHECK(done, "the stream's event after the result did not complete");
  dev->ops->event_destroy(dev, e);
  dev->ops->stream_destroy(dev, s2);
  down(got, d, count * 4);
  float ranks = (float)size * (float)(size + 1) / 2;
  for (size_t i = 0; i < count; i++)
    HKT_CHECK(got[i] == ranks + (float)size * (float)i,
              "element %zu is %g, expected %g: hk read the tensor before its "
              "producer stream had written it",
              i, got[i], ranks + (float)size * (float)i);
  dev->ops->stream_destroy(dev, s);
  dev->ops->mem_free(dev, d);
  free(vals);
  free(got);
  free(zero);
  printf("device ok: delay np=%d\n", size);
}

/* hk_device_stream orders after hk's last read of a tensor: the producer
 * stream is delayed, so when hk_wait_stream returns hk's pack of src is
 * still queued behind it. A caching allocator that reuses src's memory on
 * another stream A (PyTorch's, after record_stream on hk's stream) makes
 * A wait for an event recorded on hk_device_stream(), then writes it: that
 * write must not reach src before hk read it, so the sum is still the
 * original values'. Were the event recorded on a stream hk does not read
 * src on, the zeros written on A would be summed. On a staged schedule
 * (`staged`: hk's ring through pinned host memory) the host waits for
 * copies out, its own and a peer's: hk_wait_stream may return after the
 * delay, and the work left on hk's stream may already be done. */
static void mode_reuse(int staged) {
  const size_t count = 4099;
  float *vals = malloc(count * 4), *got = malloc(count * 4);
  float *zero = calloc(count, 4);
  for (size_t i = 0; i < count; i++)
    vals[i] = (float)(rank + 1) + (float)i;
  float *src = dalloc(count * 4), *out = dalloc(count * 4);
  up(src, vals, count * 4);
  hk_dev_stream p, s2, a;
  hk_dev_event e;
  HKT_OK(dev->ops->stream_create(dev, &p));
  HKT_OK(dev->ops->stream_create(dev, &s2));
  HKT_OK(dev->ops->stream_create(dev, &a));
  HKT_OK(dev->ops->event_create(dev, &e));
  /* both ranks start the delay together: one that reached the collective
   * seconds after the other (a loaded machine, a sanitizer) would find the
   * other's delay already over */
  HKT_OK(hk_barrier());
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0); /* the delay starts after this */
  HKT_OK(hk_emu_stream_delay(dev, p, 3000));
  hk_set_stream(p);
  hk_handle h;
  HKT_OK(hk_allreduce_async("reused", src, out, count, HK_FLOAT32, HK_SUM, &h));
  hk_set_stream(NULL);
  HKT_OK(hk_wait_stream(h, s2));
  void *hs = hk_device_stream();
  HKT_CHECK(hs != NULL, "hk_device_stream: NULL with HK_DEVICE=emu");
  HKT_OK(dev->ops->event_record(dev, e, (hk_dev_stream)hs));
  int done = 1;
  HKT_OK(dev->ops->event_query(dev, e, &done));
  /* under 3 s since before the delay was queued, it was still running
   * when e was looked at, and hk's read of src, queued behind it, too
   * (an event recorded on p after the delay would race: the delay may
   * end and hk's work complete before p's thread records it). Later (a
   * staged schedule's host may wait for a peer's copy out, so for the
   * peer's producer) the work may be over. */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const int produced = (double)(t1.tv_sec - t0.tv_sec) +
                           1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) >=
                       3.0;
  HKT_CHECK(staged || !produced, "hk_wait_stream returned after the "
                                 "producer's delay: it waited on the host");
  HKT_CHECK(produced || !done,
            "hk's stream had no work queued for 'reused' after "
            "hk_wait_stream (the producer's delay is still running)");
  HKT_OK(dev->ops->stream_wait_event(dev, a, e));
  HKT_OK(dev->ops->memcpy_async(dev, src, zero, count * 4, a));
  dsync(a);
  dsync(s2);
  down(got, out, count * 4);
  float ranks = (float)size * (float)(size + 1) / 2;
  for (size_t i = 0; i < count; i++)
    HKT_CHECK(got[i] == ranks + (float)size * (float)i,
              "element %zu is %g, expected %g: a write ordered after "
              "hk_device_stream() reached the tensor before hk read it",
              i, got[i], ranks + (float)size * (float)i);
  dev->ops->event_destroy(dev, e);
  dev->ops->stream_destroy(dev, a);
  dev->ops->stream_destroy(dev, s2);
  dev->ops->stream_destroy(dev, p);
  dev->ops->mem_free(dev, src);
  dev->ops->mem_free(dev, out);
  free(vals);
  free(got);
  free(zero);
  printf("device ok: reuse np=%d\n", size);
}

/* Compression: float32 travels as float16/bfloat16. Values exact in the
 * low type and sums that stay exact round trip exactly; any value matches
 * the model: round to the low type, fold in it, widen, divide. */
static void mode_compress(size_t count, const char *kind) {
  const hk_dtype low = !strcmp(kind, "bf16") ? HK_BFLOAT16 : HK_FLOAT16;
  float **in = calloc((size_t)size, sizeof *in);
  uint16_t **lin = calloc((size_t)size, sizeof *lin);
  for (int r = 0; r < size; r++) {
    in[r] = malloc(count * 4 + 4);
    lin[r] = malloc(count * 2 + 2);
    fill_input(in[r], count, HK_FLOAT32, r, 5);
    for (size_t i = 0; i < count; i++)
      lin[r][i] = low == HK_FLOAT16 ? hk_f32_to_f16(in[r][i])
                                    : hk_f32_to_bf16(in[r][i]);
  }
  uint16_t *lsum = malloc(count * 2 + 2);
  model(lsum, (void *const *)lin, size, 1, count, low, HK_SUM);
  float *want = calloc(count + 1, 4), *got = malloc(count * 4 + 4);
  for (size_t i = 0; i < count; i++)
    want[i] =
        (low == HK_FLOAT16 ? hk_f16_to_f32(lsum[i]) : hk_bf16_to_f32(lsum[i])) /
        (float)size;
  float *d = dalloc(count * 4);
  up(d, in[rank], count * 4);
  HKT_OK(hk_allreduce("compressed", d, d, count, HK_FLOAT32, HK_AVERAGE));
  down(got, d, count * 4);
  check_bits(got, want, count, HK_FLOAT32, "compressed average");
  /* small integers: exact in both types, so the round trip is exact */
  for (size_t i = 0; i < count; i++)
    in[rank][i] = (float)((i + (size_t)rank) % 17);
  up(d, in[rank], count * 4);
  HKT_OK(hk_allreduce("compressed.exact", d, d, count, HK_FLOAT32, HK_SUM));
  down(got, d, count * 4);
  for (size_t i = 0; i < count; i++) {
    float s = 0;
    for (int r = 0; r < size; r++)
      s += (float)((i + (size_t)r) % 17);
    HKT_CHECK(got[i] == s, "exact element %zu: %g, expected %g", i, got[i], s);
  }
  same_everywhere(hash_bytes(3, got, count * 4), "compress");
  printf("device ok: compress %s np=%d\n", kind, size);
  for (int r = 0; r < size; r++) {
    free(in[r]);
    free(lin[r]);
  }
  free(in);
  free(lin);
  free(lsum);
  free(want);
  free(got);
  dev->ops->mem_free(dev, d);
}

/* A refusal on every rank: st is HK_ERR_MISMATCH naming `want`; printed
 * as "<label>: <message>". */
static void expect_refused(hk_status st, const char *want, const char *label) {
  HKT_CHECK(st == HK_ERR_MISMATCH && strstr(hk_last_error(), want),
            "%s: got %s: %s", label, hk_strerror(st), hk_last_error());
  printf("%s: %s\n", label, hk_last_error());
}

/* After a refusal the job goes on: d (8 floats, host's values on every
 * rank) allreduces to size x host. */
static void expect_job_goes_on(float *d, const float host[8]) {
  float out[8];
  HKT_OK(hk_allreduce("after", d, d, 8, HK_FLOAT32, HK_SUM));
  down(out, d, sizeof out);
  for (int i = 0; i < 8; i++)
    HKT_CHECK(out[i] == host[i] * (float)size, "after the refusal: [%d]", i);
}

/* Host on rank 0, device elsewhere: a mismatch on every rank, before any
 * device work; then sendbuf on the device with recvbuf on the host on
 * the last rank. The job goes on afterwards. */
static void mode_mismatch(void) {
  float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float *d = dalloc(sizeof host);
  up(d, host, sizeof host);
  hk_status st =
      hk_allreduce("kind", rank == 0 ? (void *)host : (void *)d,
                   rank == 0 ? (void *)host : (void *)d, 8, HK_FLOAT32, HK_SUM);
  expect_refused(st, "memory kind", "mismatch 1");
  float out[8];
  int mixed = rank == size - 1;
  st = hk_allreduce("mixed", d, mixed ? (void *)out : (void *)d, 8, HK_FLOAT32,
                    HK_SUM);
  char want[64];
  snprintf(want, sizeof want, "rank %d has sendbuf on the device", size - 1);
  expect_refused(st, want, "mismatch 2");
  expect_job_goes_on(d, host);
  dev->ops->mem_free(dev, d);
  printf("device ok: mismatch np=%d\n", size);
}

/* The calling thread's current device before and after each hk call
 * that enters the backend on it: hk may make its own device current for
 * its calls, but puts the caller's back (mode current). */
static void same_current(int want, const char *after) {
  int cur = dev->ops->current(dev);
  HKT_CHECK(cur == want, "%s left the thread's current device at %d, not %d",
            after, cur, want);
}

static void submit_wait(const hk_collective *c);

static void mode_current(void) {
  float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  float *d = dalloc(sizeof host); /* our calls make device 0 current */
  up(d, host, sizeof host);
  dev->ops->set_current(dev, 1);
  hk_handle h;
  HKT_OK(hk_allreduce_async("current", d, d, 8, HK_FLOAT32, HK_SUM, &h));
  same_current(1, "a device submit");
  HKT_OK(hk_wait_stream(h, NULL));
  same_current(1, "hk_wait_stream");
  down(out, d, sizeof out);
  for (int i = 0; i < 8; i++)
    HKT_CHECK(out[i] == host[i] * (float)size, "current: element %d", i);
  /* a handle's events are reused: 100 more steps make at most a few */
  const size_t made = hk_emu_events_created();
  for (int i = 0; i < 100; i++) {
    char name[32]; /* a name may still be in flight after hk_wait_stream */
    snprintf(name, sizeof name, "reuse.%d", i);
    HKT_OK(hk_allreduce_async(name, d, d, 8, HK_FLOAT32, HK_SUM, &h));
    HKT_OK(hk_wait_stream(h, NULL));
  }
  HKT_CHECK(hk_emu_events_created() - made <= 8,
            "100 device allreduces made %zu events (reused: a few)",
            hk_emu_events_created() - made);
  void *g = NULL;
  size_t rows[64];
  hk_collective ag = {.kind = HK_ALLGATHER,
                      .name = "current.gather",
                      .dtype = HK_FLOAT32,
                      .sendbuf = d,
                      .rows = 1,
                      .row_elems = 8,
                      .recvbuf_out = &g,
                      .rows_out = rows};
  submit_wait(&ag);
  dev->ops->set_current(dev, 1);
  hk_free(g);
  same_current(1, "hk_free of a device output");
  dev->ops->mem_free(dev, d);
  printf("device ok: current np=%d\n", size);
}

/* hk makes the backend's context (emu's counter, as CUDA's primary
 * context) and the communicator's id (NCCL's listener) at the first
 * device tensor, not at hk_init: none after host collectives. */
static void mode_lazy(void) {
  size_t ctxs = hk_emu_contexts_created(), ids = hk_emu_unique_ids_created();
  HKT_CHECK(ctxs == 0 && ids == 0,
            "hk_init made %zu device contexts and %zu communicator ids", ctxs,
            ids);
  float host[8], out[8];
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < 8; i++)
      host[i] = (float)(i + step);
    HKT_OK(hk_allreduce("lazy.host", host, out, 8, HK_FLOAT32, HK_SUM));
    for (int i = 0; i < 8; i++)
      HKT_CHECK(out[i] == (float)((i + step) * size), "host step %d: %d", step,
                i);
  }
  ctxs = hk_emu_contexts_created();
  ids = hk_emu_unique_ids_created();
  HKT_CHECK(ctxs == 0 && ids == 0,
            "host allreduces made %zu device contexts and %zu communicator "
            "ids",
            ctxs, ids);
  float *d = dalloc(sizeof host); /* the trainer's: the device's context */
  up(d, host, sizeof host);
  HKT_CHECK(hk_emu_contexts_created() == 1, "the trainer's allocation: %zu",
            hk_emu_contexts_created());
  HKT_OK(hk_allreduce("lazy.device", d, d, 8, HK_FLOAT32, HK_SUM));
  down(out, d, sizeof out);
  for (int i = 0; i < 8; i++)
    HKT_CHECK(out[i] == host[i] * (float)size, "device: element %d", i);
  ctxs = hk_emu_contexts_created();
  ids = hk_emu_unique_ids_created();
  const size_t want_ids = hk_local_rank() == 0 && hk_local_size() > 1;
  HKT_CHECK(ctxs == 1 && ids == want_ids,
            "after the first device allreduce: %zu device contexts (1), %zu "
            "communicator ids (%zu)",
            ctxs, ids, want_ids);
  dev->ops->mem_free(dev, d);
  printf("device ok: lazy contexts=%zu ids=%zu\n", ctxs, ids);
}

/* The last rank's tensor on emu device 1 while hk uses device 0
 * (HK_EMU_DEVICES=2, HK_GPU=0): HK_ERR_MISMATCH on every rank before any
 * device work, naming that rank (its own log names both devices); the
 * job goes on. */
static void mode_otherdev(void) {
  hk_device_options o = {.device_index = 1, .emu_devices = 2};
  hk_device *dev1 = NULL;
  HKT_OK(hk_device_open("emu", &o, &dev1));
  float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float *d = dalloc(sizeof host), *d1 = NULL;
  HKT_OK(dev1->ops->mem_alloc(dev1, sizeof host, (void **)&d1));
  up(d, host, sizeof host);
  float *buf = rank == size - 1 ? d1 : d;
  hk_status st = hk_allreduce("otherdev", buf, buf, 8, HK_FLOAT32, HK_SUM);
  char want[96];
  snprintf(want, sizeof want, "rank %d has a buffer on another GPU", size - 1);
  expect_refused(st, want, "otherdev");
  expect_job_goes_on(d, host);
  dev1->ops->mem_free(dev1, d1);
  hk_device_close(dev1);
  dev->ops->mem_free(dev, d);
  printf("device ok: otherdev np=%d\n", size);
}

/* Broadcast, allgather, reducescatter and alltoall on device buffers
 * give the host tensors' results. */
static void mode_collectives(void) {
  enum { ROWS = 5, ROW = 3 };
  int32_t in[ROWS * ROW], hb[ROWS * ROW], got[ROWS * ROW * 8];
  fill_input(in, ROWS * ROW, HK_INT32, rank, 11);
  int32_t *d = dalloc(sizeof in);
  /* broadcast from the last rank */
  memcpy(hb, in, sizeof in);
  up(d, in, sizeof in);
  HKT_OK(hk_broadcast("c.bcast", d, ROWS * ROW, HK_INT32, size - 1));
  HKT_OK(hk_broadcast("c.bcast.h", hb, ROWS * ROW, HK_INT32, size - 1));
  down(got, d, sizeof in);
  check_bits(got, hb, ROWS * ROW, HK_INT32, "broadcast");
  /* allgather: rank r gives r+1 rows */
  up(d, in, sizeof in);
  size_t rows = (size_t)(rank % ROWS) + 1, per[64], hper[64];
  void *dout = NULL, *hout = NULL;
  HKT_OK(hk_allgather("c.gather", d, rows, ROW, HK_INT32, &dout, per));
  HKT_OK(hk_allgather("c.gather.h", in, rows, ROW, HK_INT32, &hout, hper));
  HKT_CHECK(dev->ops->pointer_kind(dev, dout, NULL) == HK_MEM_DEVICE,
            "allgather of device memory gave a host buffer");
  size_t total = 0;
  for (int r = 0; r < size; r++) {
    HKT_CHECK(per[r] == hper[r], "allgather rows of rank %d", r);
    total += per[r];
  }
  int32_t *g = malloc(total * ROW * 4 + 4);
  down(g, dout, total * ROW * 4);
  check_bits(g, hout, total * ROW, HK_INT32, "allgather");
  free(g);
  hk_free(dout);
  hk_free(hout);
  /* reducescatter of ROWS rows */
  int32_t *dr = dalloc(sizeof in), hr[ROWS * ROW];
  size_t out_rows = 0, hrows = 0;
  HKT_OK(
      hk_reducescatter("c.rs", d, ROWS, ROW, HK_INT32, HK_SUM, dr, &out_rows));
  HKT_OK(
      hk_reducescatter("c.rs.h", in, ROWS, ROW, HK_INT32, HK_SUM, hr, &hrows));
  HKT_CHECK(out_rows == hrows, "reducescatter rows");
  down(got, dr, out_rows * ROW * 4);
  check_bits(got, hr, out_rows * ROW, HK_INT32, "reducescatter");
  dev->ops->mem_free(dev, dr);
  /* alltoall: one row to each rank (rows wrap) */
  size_t splits[64], rsplits[64], hsplits[64];
  for (int r = 0; r < size; r++)
    splits[r] = r < ROWS ? 1 : 0;
  dout = hout = NULL;
  HKT_OK(hk_alltoall("c.a2a", d, splits, ROW, HK_INT32, &dout, rsplits));
  HKT_OK(hk_alltoall("c.a2a.h", in, splits, ROW, HK_INT32, &hout, hsplits));
  total = 0;
  for (int r = 0; r < size; r++)
    total += hsplits[r];
  if (total) {
    down(got, dout, total * ROW * 4);
    check_bits(got, hout, total * ROW, HK_INT32, "alltoall");
  }
  hk_free(dout);
  hk_free(hout);
  dev->ops->mem_free(dev, d);
  printf("device ok: collectives np=%d\n", size);
}

/* Integer prescale/postscale on device tensors (the pack and the unpack,
 * device/elem.h) against the same tensors on the host, whose results
 * test_dtypes checks against a serial computation: every integer dtype x
 * op x (prescale, postscale), the allreduces of a dtype submitted at once
 * (fused), and reduce-scatters (hk_submit). */
static void mode_intscale(void) {
  static const hk_dtype ints[] = {HK_INT8, HK_UINT8, HK_INT16, HK_INT32,
                                  HK_INT64};
  static const double sc[][2] = {{0.5, -2.5}, {2.0, 1.0}, {-1.5, 1e10}};
  enum { NO = sizeof ops / sizeof ops[0], NS = sizeof sc / sizeof sc[0] };
  enum { N = 1001, ROWS = 7, RE = 3 };
  int cases = 0;
  for (size_t t = 0; t < sizeof ints / sizeof ints[0]; t++) {
    const hk_dtype d = ints[t];
    const size_t esz = hk_dtype_size(d);
    void *in = malloc(N * esz), *hbuf[NO * NS], *dbuf[NO * NS];
    hk_handle hh[NO * NS], hd[NO * NS];
    for (size_t k = 0; k < NO * NS; k++) { /* all at once: fused */
      const hk_op op = ops[k / NS];
      const double pre = sc[k % NS][0], post = sc[k % NS][1];
      fill_input(in, N, d, rank, 40 + k);
      hbuf[k] = malloc(N * esz);
      memcpy(hbuf[k], in, N * esz);
      dbuf[k] = dalloc(N * esz);
      up(dbuf[k], in, N * esz);
      char name[64];
      snprintf(name, sizeof name, "is.%s.%zu", hk_dtype_name(d), k);
      HKT_OK(hk_allreduce_scaled_async(name, dbuf[k], dbuf[k], N, d, op, pre,
                                       post, &hd[k]));
      strcat(name, ".h");
      HKT_OK(hk_allreduce_scaled_async(name, hbuf[k], hbuf[k], N, d, op, pre,
                                       post, &hh[k]));
    }
    void *got = malloc(N * esz);
    for (size_t k = 0; k < NO * NS; k++, cases++) {
      HKT_OK(hk_wait(hd[k]));
      HKT_OK(hk_wait(hh[k]));
      down(got, dbuf[k], N * esz);
      check_bits(got, hbuf[k], N, d, "scaled allreduce, device vs host");
      dev->ops->mem_free(dev, dbuf[k]);
      free(hbuf[k]);
    }
    /* reduce-scatter: rows split over the ranks, scaled on both sides */
    for (size_t k = 0; k < NO * NS; k++, cases++) {
      const size_t rows = ROWS + (size_t)size;
      void *hin = malloc(rows * RE * esz), *hout = malloc(rows * RE * esz);
      fill_input(hin, rows * RE, d, rank, 90 + k);
      void *din = dalloc(rows * RE * esz), *dout = dalloc(rows * RE * esz);
      up(din, hin, rows * RE * esz);
      size_t hrows = 0, drows = 0;
      char name[64];
      snprintf(name, sizeof name, "isrs.%s.%zu", hk_dtype_name(d), k);
      hk_collective c = {.kind = HK_REDUCESCATTER,
                         .name = name,
                         .dtype = d,
                         .op = ops[k / NS],
                         .sendbuf = din,
                         .recvbuf = dout,
                         .rows = rows,
                         .row_elems = RE,
                         .prescale = sc[k % NS][0],
                         .postscale = sc[k % NS][1],
                         .rows_out = &drows};
      HKT_OK(hk_submit(&c, &hd[0]));
      HKT_OK(hk_wait(hd[0]));
      strcat(name, ".h");
      c.sendbuf = hin;
      c.recvbuf = hout;
      c.rows_out = &hrows;
      HKT_OK(hk_submit(&c, &hh[0]));
      HKT_OK(hk_wait(hh[0]));
      HKT_CHECK(drows == hrows, "%s: %zu rows on the device, %zu on the host",
                name, drows, hrows);
      void *rgot = malloc(rows * RE * esz);
      down(rgot, dout, drows * RE * esz);
      check_bits(rgot, hout, drows * RE, d, name);
      free(rgot);
      free(hin);
      free(hout);
      dev->ops->mem_free(dev, din);
      dev->ops->mem_free(dev, dout);
    }
    free(got);
    free(in);
  }
  printf("device ok: intscale np=%d cases=%d\n", size, cases);
}

/* int16 and bool on device buffers: broadcast, allgather and alltoall
 * give the host tensors' results, byte for byte. */
static void mode_moves(void) {
  static const hk_dtype ts[] = {HK_INT16, HK_BOOL};
  enum { ROWS = 5, ROW = 3, N = ROWS * ROW };
  for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
    const hk_dtype d = ts[t];
    const size_t esz = hk_dtype_size(d);
    uint8_t in[N * 2], hb[N * 2], got[N * 2 * 64];
    fill_input(in, N, d, rank, 13 + t);
    void *dbuf = dalloc(N * esz);
    char name[64];
    /* broadcast from the last rank */
    memcpy(hb, in, N * esz);
    up(dbuf, in, N * esz);
    snprintf(name, sizeof name, "mv.bcast.%s", hk_dtype_name(d));
    HKT_OK(hk_broadcast(name, dbuf, N, d, size - 1));
    strcat(name, ".h");
    HKT_OK(hk_broadcast(name, hb, N, d, size - 1));
    down(got, dbuf, N * esz);
    check_bits(got, hb, N, d, name);
    /* allgather: rank r gives r % ROWS + 1 rows */
    up(dbuf, in, N * esz);
    size_t rows = (size_t)(rank % ROWS) + 1, per[64], hper[64], total = 0;
    void *dout = NULL, *hout = NULL;
    snprintf(name, sizeof name, "mv.gather.%s", hk_dtype_name(d));
    HKT_OK(hk_allgather(name, dbuf, rows, ROW, d, &dout, per));
    strcat(name, ".h");
    HKT_OK(hk_allgather(name, in, rows, ROW, d, &hout, hper));
    for (int r = 0; r < size; r++) {
      HKT_CHECK(per[r] == hper[r], "%s: rows of rank %d", name, r);
      total += per[r];
    }
    down(got, dout, total * ROW * esz);
    check_bits(got, hout, total * ROW, d, name);
    hk_free(dout);
    hk_free(hout);
    /* alltoall: one row to each of the first ROWS ranks */
    size_t splits[64], rsplits[64], hsplits[64];
    for (int r = 0; r < size; r++)
      splits[r] = r < ROWS ? 1 : 0;
    dout = hout = NULL;
    snprintf(name, sizeof name, "mv.a2a.%s", hk_dtype_name(d));
    HKT_OK(hk_alltoall(name, dbuf, splits, ROW, d, &dout, rsplits));
    strcat(name, ".h");
    HKT_OK(hk_alltoall(name, in, splits, ROW, d, &hout, hsplits));
    total = 0;
    for (int r = 0; r < size; r++) {
      HKT_CHECK(rsplits[r] == hsplits[r], "%s: rows from rank %d", name, r);
      total += hsplits[r];
    }
    if (total) {
      down(got, dout, total * ROW * esz);
      check_bits(got, hout, total * ROW, d, name);
    }
    hk_free(dout);
    hk_free(hout);
    dev->ops->mem_free(dev, dbuf);
  }
  printf("device ok: moves np=%d\n", size);
}

/* Sum over ranks [0, upto) of fill_input(salt), the ranks from upto on
 * contributing zeros (a joined rank's identity), in the documented order
 * for this job's hosts (one host: the communicator's rank-order fold;
 * several: hierarchical, which test_device forces there). */
static void fold_model(float *want, size_t count, int upto, uint64_t salt) {
  void **in = calloc((size_t)size, sizeof *in);
  for (int r = 0; r < size; r++) {
    in[r] = calloc(count + 1, 4);
    if (r < upto)
      fill_input(in[r], count, HK_FLOAT32, r, salt);
  }
  model(want, in, hk_local_size(), hk_cross_size(), count, HK_FLOAT32, HK_SUM);
  for (int r = 0; r < size; r++)
    free(in[r]);
  free(in);
}

static void mode_features(void) {
  enum { K = 5, C = 1001 };
  float *host = malloc(K * C * 4), *got = malloc(K * C * 4),
        *want = malloc(C * 4);
  float *d = dalloc(K * C * 4);
  /* grouped: K tensors negotiated and fused as one unit */
  const char *names[K] = {"g.0", "g.1", "g.2", "g.3", "g.4"};
  const void *send[K];
  void *recv[K];
  size_t counts[K];
  for (int i = 0; i < K; i++) {
    fill_input(host + i * C, C, HK_FLOAT32, rank, 200 + (uint64_t)i);
    send[i] = recv[i] = d + i * C;
    counts[i] = C - (size_t)i * 100;
  }
  up(d, host, K * C * 4);
  HKT_OK(
      hk_grouped_allreduce(names, send, recv, counts, K, HK_FLOAT32, HK_SUM));
  down(got, d, K * C * 4);
  for (int i = 0; i < K; i++) {
    fold_model(want, counts[i], size, 200 + (uint64_t)i);
    check_bits(got + i * C, want, counts[i], HK_FLOAT32, names[i]);
  }
  /* one name over steps: after the first, the response cache's bit */
  for (int step = 0; step < 4; step++) {
    fill_input(host, C, HK_FLOAT32, rank, 300 + (uint64_t)step);
    up(d, host, C * 4);
    HKT_OK(hk_allreduce("cached", d, d, C, HK_FLOAT32, HK_SUM));
    down(got, d, C * 4);
    fold_model(want, C, size, 300 + (uint64_t)step);
    check_bits(got, want, C, HK_FLOAT32, "cached");
  }
  /* join: the last rank runs out of data after one step; the others'
   * averages then divide by the ranks that contributed */
  for (int step = 0; step < 3; step++) {
    int joined = step > 0 && size > 1;
    if (joined && rank == size - 1)
      break;
    char name[32];
    snprintf(name, sizeof name, "join.%d", step);
    fill_input(host, C, HK_FLOAT32, rank, 400 + (uint64_t)step);
    up(d, host, C * 4);
    HKT_OK(hk_allreduce(name, d, d, C, HK_FLOAT32, HK_AVERAGE));
    down(got, d, C * 4);
    int contributors = joined ? size - 1 : size;
    fold_model(want, C, contributors, 400 + (uint64_t)step);
    hk_reduce_finish_average(want, C, HK_FLOAT32, contributors);
    check_bits(got, want, C, HK_FLOAT32, name);
  }
  int last = -1;
  HKT_OK(hk_join(&last));
  HKT_CHECK(size == 1 || last != size - 1 || size == 1,
            "rank %d joined last, expected one of the ranks still stepping",
            last);
  dev->ops->mem_free(dev, d);
  free(host);
  free(got);
  free(want);
  printf("device ok: features np=%d\n", size);
}

/* The gate a host callback holds a producer stream at (mode_overlap): a
 * pipe, opened by writing a byte. */
static int gate[2];

static void gate_wait(void *arg) {
  (void)arg;
  char c;
  while (read(gate[0], &c, 1) < 0)
    ;
}

/* At exit (a check that failed with the gate shut): opened, so that the
 * held stream's thread ends. */
static void gate_open(void) {
  if (gate[1] > 0 && write(gate[1], "x", 1) != 1)
    perror("w_device: opening the gate");
}

/* After this rank said why it failed: marks it (D/said.<rank>) and waits
 * until every rank has, at most 30 s, so that hkrun, which ends the job
 * at the first exit, stops no rank before it has said its own reason. */
static void all_said(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/said.%d", dir, rank);
  FILE *f = fopen(path, "w");
  HKT_CHECK(f && fclose(f) == 0, "cannot write %s", path);
  for (int tries = 0; tries < 30000; tries++) {
    int n = 0;
    for (int r = 0; r < size; r++) {
      snprintf(path, sizeof path, "%s/said.%d", dir, r);
      n += access(path, F_OK) == 0;
    }
    if (n == size)
      return;
    struct timespec ts = {0, 1000000}; /* the next look */
    nanosleep(&ts, NULL);
  }
}

/* Two batches in flight on hk's stream at once, then their results
 * against the serial sums (every rank's inputs folded in rank order, as
 * the emu does; the values are exact). With fault, the second batch
 * fails (HK_EMU_FAULT) after the first completed: prints the error and
 * exits 3, as mode_fault. */
static void mode_overlap(const char *fault_dir) {
  const size_t na = 3001, nb = 2003;
  float *ha = malloc(na * 4), *wa = calloc(na, 4);
  double *hb = malloc(nb * 8), *wb = calloc(nb, 8);
  for (int r = 0; r < size; r++) {
    for (size_t i = 0; i < na; i++) {
      float x = (float)(r + 1) * 0.5f + (float)(i % 97);
      wa[i] += x;
      if (r == rank)
        ha[i] = x;
    }
    for (size_t i = 0; i < nb; i++) {
      double x = (double)(r + 1) * 0.25 + (double)i;
      wb[i] += x;
      if (r == rank)
        hb[i] = x;
    }
  }
  float *da = dalloc(na * 4);
  double *db = dalloc(nb * 8);
  up(da, ha, na * 4);
  up(db, hb, nb * 8);
  /* a's producer stream is held at the gate: a's batch cannot complete */
  hk_dev_stream pa, sb;
  HKT_OK(dev->ops->stream_create(dev, &pa));
  HKT_OK(dev->ops->stream_create(dev, &sb));
  HKT_CHECK(pipe(gate) == 0, "pipe");
  atexit(gate_open);
  HKT_OK(hk_emu_stream_host_fn(dev, pa, gate_wait, NULL));
  hk_set_stream(pa);
  hk_handle a, b;
  HKT_OK(hk_allreduce_async("overlap.a", da, da, na, HK_FLOAT32, HK_SUM, &a));
  hk_set_stream(NULL);
  HKT_OK(hk_allreduce_async("overlap.b", db, db, nb, HK_FLOAT64, HK_SUM, &b));
  /* returns once b's batch is enqueued (its done event recorded): behind
   * a's, which is still held, so both are in flight */
  HKT_OK(hk_wait_stream(b, sb));
  int done = 1;
  HKT_OK(hk_poll(a, &done));
  HKT_CHECK(!done, "overlap.a completed while its producer was held");
  const int inflight = 2;
  gate_open();
  hk_status st = hk_wait(a);
  if (fault_dir) { /* b failed: the job with it; the next call says why
                      (a too, on a peer whose communicator was aborted
                      before a's end was seen) */
    if (st == HK_OK)
      st = hk_allreduce("overlap.after", da, da, na, HK_FLOAT32, HK_SUM);
    HKT_CHECK(st != HK_OK, "the job went on after overlap.b's fault");
    printf("rank %d failed: %s: %s\n", rank, hk_strerror(st), hk_last_error());
    fflush(stdout);
    all_said(fault_dir);
    hk_shutdown();
    exit(3);
  }
  HKT_OK(st);
  dsync(sb);
  float *ga = malloc(na * 4);
  double *gb = malloc(nb * 8);
  down(ga, da, na * 4);
  down(gb, db, nb * 8);
  check_bits(ga, wa, na, HK_FLOAT32, "overlap.a");
  check_bits(gb, wb, nb, HK_FLOAT64, "overlap.b");
  dev->ops->stream_destroy(dev, pa);
  dev->ops->stream_destroy(dev, sb);
  dev->ops->mem_free(dev, da);
  dev->ops->mem_free(dev, db);
  free(ha);
  free(wa);
  free(hb);
  free(wb);
  free(ga);
  free(gb);
  printf("device ok: overlap np=%d in flight at once: %d\n", size, inflight);
}

/* Allreduces until one fails: prints the error and exits 3. */
static void mode_fault(int linger) {
  const size_t count = 1000;
  float *d = dalloc(count * 4);
  for (int i = 0; i < 20; i++) {
    char name[32];
    snprintf(name, sizeof name, "fault.%d", i);
    hk_status st = hk_allreduce(name, d, d, count, HK_FLOAT32, HK_SUM);
    if (st != HK_OK) {
      printf("rank %d failed: %s: %s\n", rank, hk_strerror(st),
             hk_last_error());
      fflush(stdout);
      while (rank == linger) /* a trainer that carries on: its hk_shutdown
                                would end the communicator for it; hkrun
                                ends it once the others have failed */
        pause();
      hk_shutdown();
      exit(3);
    }
  }
  printf("device ok: fault np=%d (no failure)\n", size);
}

/* Every element of got[count] (float16 bits, or float32) finite and within
 * a relative 2^-11 per partial sum (size of them, and one more) of want. */
static void check_near(const char *what, const void *got, int is_f16,
                       size_t count, double want) {
  const double tol = want * (size + 1) / 2048.0;
  for (size_t i = 0; i < count; i++) {
    double x = is_f16 ? hk_f16_to_f32(((const uint16_t *)got)[i])
                      : ((const float *)got)[i];
    HKT_CHECK(isfinite(x) && fabs(x - want) <= tol,
              "%s: element %zu of %zu is %g, not %g (+-%g)", what, i, count, x,
              want, tol);
  }
}

/* Averages of values whose sum over the ranks passes float16's largest
 * value (65504) where the average does not (issue 13 item 6): the pack
 * divides by a power of two, the unpack multiplies it back. */
static void mode_half16(size_t count) {
  static const float vals[] = {5000.0f, 60000.0f};
  uint16_t *h = malloc(count * 2 + 2);
  float *f = malloc(count * 4 + 4);
  void *d = dalloc(count * 4);
  for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
    char name[64];
    snprintf(name, sizeof name, "avg.f16.%g", vals[v]);
    for (size_t i = 0; i < count; i++)
      h[i] = hk_f32_to_f16(vals[v]);
    up(d, h, count * 2);
    HKT_OK(hk_allreduce(name, d, d, count, HK_FLOAT16, HK_AVERAGE));
    down(h, d, count * 2);
    check_near(name, h, 1, count, vals[v]);
  }
  for (size_t i = 0; i < count; i++)
    f[i] = 60000.0f;
  up(d, f, count * 4);
  HKT_OK(hk_allreduce("avg.f32.60000", d, d, count, HK_FLOAT32, HK_AVERAGE));
  down(f, d, count * 4);
  check_near("avg.f32.60000", f, 0, count, 60000.0);
  dev->ops->mem_free(dev, d);
  free(h);
  free(f);
  printf("device ok: half16 np=%d\n", size);
}

/* hk_submit(c), then hk_wait: either failing exits. */
static void submit_wait(const hk_collective *c) {
  hk_handle h;
  HKT_OK(hk_submit(c, &h));
  HKT_OK(hk_wait(h));
}

/* acc = the sum over set members ranks[0..n) of their inputs (d: int32 or
 * int64, exact), or with fold the float32 fold in set-rank order. */
static void set_model(void *want, const int *ranks, int n, size_t count,
                      hk_dtype d, uint64_t salt) {
  const size_t esz = hk_dtype_size(d);
  uint8_t *in = malloc(count * esz + 8);
  memset(want, 0, count * esz);
  for (int j = 0; j < n; j++) {
    fill_input(in, count, d, ranks[j], salt);
    for (size_t i = 0; i < count; i++) {
      uint8_t *w = (uint8_t *)want + i * esz;
      if (j == 0)
        memcpy(w, in + i * esz, esz);
      else
        fold_combine(w, in + i * esz, d, HK_SUM);
    }
  }
  free(in);
}

/* One allreduce of `count` elements of d on device memory in set s (this
 * rank a member; its ranks[0..n)), against set_model. */
static void set_allreduce(hk_process_set s, const int *ranks, int n,
                          const char *name, size_t count, hk_dtype d,
                          uint64_t salt) {
  const size_t esz = hk_dtype_size(d);
  uint8_t *host = malloc(count * esz + 8), *want = malloc(count * esz + 8);
  void *dv = dalloc(count * esz);
  fill_input(host, count, d, rank, salt);
  up(dv, host, count * esz);
  hk_collective c = {.kind = HK_ALLREDUCE,
                     .set = s,
                     .name = name,
                     .dtype = d,
                     .op = HK_SUM,
                     .sendbuf = dv,
                     .recvbuf = dv,
                     .count = count};
  submit_wait(&c);
  down(host, dv, count * esz);
  set_model(want, ranks, n, count, d, salt);
  check_bits(host, want, count, d, name);
  dev->ops->mem_free(dev, dv);
  free(host);
  free(want);
}

static void mode_sets(int fold) {
  int all[64], up_from_1[64], pair[2] = {-1, -1};
  HKT_CHECK(size <= 64, "sets wants np <= 64");
  for (int r = 0; r < size; r++)
    all[r] = size - 1 - r;
  for (int r = 1; r < size; r++)
    up_from_1[r - 1] = r;
  hk_process_set sets[3], mine_pair = -1;
  int nsets = 0;
  HKT_OK(hk_process_set_add(all, size, &sets[nsets++]));
  if (size > 1)
    HKT_OK(hk_process_set_add(up_from_1, size - 1, &sets[nsets++]));
  for (int p = 0; p + 1 < size; p += 2) { /* every rank adds every pair */
    int two[2] = {p, p + 1};
    hk_process_set id;
    HKT_OK(hk_process_set_add(two, 2, &id));
    if (rank / 2 == p / 2) {
      mine_pair = id;
      pair[0] = p;
      pair[1] = p + 1;
    }
  }
  if (mine_pair >= 0)
    sets[nsets++] = mine_pair;
  for (int k = 0; k < nsets; k++) {
    int n = hk_process_set_size(sets[k]), ranks[64];
    if (hk_process_set_rank(sets[k]) < 0)
      continue;
    HKT_OK(hk_process_set_ranks(sets[k], ranks, 64));
    if (sets[k] == mine_pair)
      HKT_CHECK(ranks[0] == pair[0] && ranks[1] == pair[1], "pair");
    char name[64];
    for (int step = 0; step < 2; step++) { /* the second from the cache */
      snprintf(name, sizeof name, "set%d.i32", (int)sets[k]);
      set_allreduce(sets[k], ranks, n, name, 1001, HK_INT32, 50 + k);
      snprintf(name, sizeof name, "set%d.i64", (int)sets[k]);
      set_allreduce(sets[k], ranks, n, name, 77, HK_INT64, 60 + k);
      if (fold) {
        snprintf(name, sizeof name, "set%d.f32", (int)sets[k]);
        set_allreduce(sets[k], ranks, n, name, 4099, HK_FLOAT32, 70 + k);
      }
    }
    /* a fused group of three */
    enum { G = 3, C = 333 };
    int32_t *gh = malloc(G * C * 4), *gw = malloc(C * 4);
    int32_t *gd = dalloc(G * C * 4);
    hk_collective gc[G];
    char gn[G][64];
    for (int i = 0; i < G; i++) {
      fill_input(gh + i * C, C, HK_INT32, rank, 80 + (uint64_t)i);
      snprintf(gn[i], sizeof gn[i], "set%d.g%d", (int)sets[k], i);
      gc[i] = (hk_collective){.kind = HK_ALLREDUCE,
                              .set = sets[k],
                              .name = gn[i],
                              .dtype = HK_INT32,
                              .op = HK_SUM,
                              .sendbuf = gd + i * C,
                              .recvbuf = gd + i * C,
                              .count = C};
    }
    up(gd, gh, G * C * 4);
    hk_handle h;
    HKT_OK(hk_submit_group(gc, G, &h));
    HKT_OK(hk_wait(h));
    down(gh, gd, G * C * 4);
    for (int i = 0; i < G; i++) {
      set_model(gw, ranks, n, C, HK_INT32, 80 + (uint64_t)i);
      check_bits(gh + i * C, gw, C, HK_INT32, gn[i]);
    }
    dev->ops->mem_free(dev, gd);
    free(gh);
    free(gw);
    /* broadcast from the set's last rank; allgather of 2 rows each */
    int64_t b[17], bw[17], *bd = dalloc(sizeof b);
    fill_input(b, 17, HK_INT64, rank, 90);
    up(bd, b, sizeof b);
    snprintf(name, sizeof name, "set%d.bcast", (int)sets[k]);
    hk_collective bc = {.kind = HK_BROADCAST,
                        .set = sets[k],
                        .name = name,
                        .dtype = HK_INT64,
                        .recvbuf = bd,
                        .count = 17,
                        .root = n - 1};
    submit_wait(&bc);
    down(b, bd, sizeof b);
    fill_input(bw, 17, HK_INT64, ranks[n - 1], 90);
    check_bits(b, bw, 17, HK_INT64, name);
    void *gout = NULL;
    size_t rows[64];
    snprintf(name, sizeof name, "set%d.gather", (int)sets[k]);
    hk_collective ag = {.kind = HK_ALLGATHER,
                        .set = sets[k],
                        .name = name,
                        .dtype = HK_INT64,
                        .sendbuf = bd,
                        .rows = 2,
                        .row_elems = 3,
                        .recvbuf_out = &gout,
                        .rows_out = rows};
    submit_wait(&ag);
    int64_t *g = malloc((size_t)n * 6 * 8);
    down(g, gout, (size_t)n * 6 * 8);
    for (int j = 0; j < n; j++) {
      fill_input(bw, 17, HK_INT64, ranks[n - 1], 90); /* the broadcast's */
      HKT_CHECK(rows[j] == 2, "allgather rows[%d] = %zu", j, rows[j]);
      check_bits(g + j * 6, bw, 6, HK_INT64, name);
    }
    free(g);
    hk_free(gout);
    dev->ops->mem_free(dev, bd);
  }
  HKT_OK(hk_barrier()); /* a rank's hk_shutdown ends every set's work */
  printf("device ok: sets np=%d sets=%d\n", size, nsets);
}

int main(int argc, char **argv) {
  HKT_CHECK(argc >= 2, "usage: w_device MODE [ARGS...]");
  const char *m = argv[1];
  /* the device hk takes (HK_GPU, else the local rank modulo
   * HK_EMU_DEVICES): the test's tensors must be on it */
  hk_config cfg;
  HKT_OK(hk_config_load(&cfg));
  hk_device_options opts = {.device_index = cfg.gpu,
                            .emu_devices = cfg.emu_devices};
  const int early = !strcmp(m, "current"); /* hk_init keeps it too */
  if (early) {
    HKT_CHECK(cfg.gpu >= 0, "w_device current: set HK_GPU");
    HKT_OK(hk_device_open("emu", &opts, &dev));
    dev->ops->set_current(dev, 1);
  }
  HKT_OK(hk_init());
  if (early) {
    same_current(1, "hk_init");
  } else {
    if (cfg.gpu < 0) {
      opts.device_index = hk_local_rank();
      opts.by_local_rank = 1;
    }
    HKT_OK(hk_device_open("emu", &opts, &dev));
  }
  rank = hk_rank();
  size = hk_size();
  if (!strcmp(m, "dtypes"))
    mode_cases(argc, argv, size, 1, 0, m);
  else if (!strcmp(m, "ring"))
    mode_cases(argc, argv, size, 1, 1, m);
  else if (!strcmp(m, "hier"))
    mode_cases(argc, argv, hk_local_size(), hk_cross_size(), 0, m);
  else if (!strcmp(m, "fusion"))
    mode_fusion(argc > 2 ? atoi(argv[2]) : 300);
  else if (!strcmp(m, "delay"))
    mode_delay();
  else if (!strcmp(m, "reuse"))
    mode_reuse(argc > 2 && !strcmp(argv[2], "staged"));
  else if (!strcmp(m, "compress"))
    mode_compress(argc > 2 ? strtoull(argv[2], NULL, 10) : 1000,
                  argc > 3 ? argv[3] : "fp16");
  else if (!strcmp(m, "mismatch"))
    mode_mismatch();
  else if (!strcmp(m, "current"))
    mode_current();
  else if (!strcmp(m, "otherdev"))
    mode_otherdev();
  else if (!strcmp(m, "lazy"))
    mode_lazy();
  else if (!strcmp(m, "collectives"))
    mode_collectives();
  else if (!strcmp(m, "sets"))
    mode_sets(argc > 2 && !strcmp(argv[2], "fold"));
  else if (!strcmp(m, "features"))
    mode_features();
  else if (!strcmp(m, "overlap"))
    mode_overlap(argc > 3 && !strcmp(argv[2], "fault") ? argv[3] : NULL);
  else if (!strcmp(m, "fault"))
    mode_fault(argc > 3 && !strcmp(argv[2], "linger") ? atoi(argv[3]) : -1);
  else if (!strcmp(m, "moves"))
    mode_moves();
  else if (!strcmp(m, "intscale"))
    mode_intscale();
  else if (!strcmp(m, "half16"))
    mode_half16(argc > 2 ? strtoull(argv[2], NULL, 10) : 1001);
  else
    HKT_CHECK(0, "unknown mode %s", m);
  hk_device_close(dev);
  HKT_OK(hk_shutdown());
  return 0;
}
