/*
 * test_cuda.c - the cuda device backend (device/cuda, the module
 * libhk_cuda.so) through hk_device_open("cuda"), as libhk opens it.
 *
 * Without a GPU (or a driver, or the module) every test that needs one is
 * skipped, unless HK_TEST_GPU=1 (common/config.h: test_gpu), which turns
 * the skip into a failure naming why the backend did not open. One test
 * runs only where it cannot open: the message must name what is missing.
 *
 * With a GPU:
 * - batch_copy against device/elem.h's hk_elem_copy on the host, byte for
 *   byte (guard bytes around every item included), for every dtype pair
 *   (the 8 dtypes to themselves, float32 <-> float16/bfloat16), scales
 *   and divisors, odd counts and element offsets that give src and dst
 *   every relative alignment, batches over HKC_ITEMS_PER_LAUNCH items and
 *   items of a million elements. A NaN that went through arithmetic may
 *   carry another payload on the GPU (NVIDIA's float units return the
 *   canonical NaN, x86's propagate the operand's): such results must be
 *   NaN, and their number is printed; everything else is exact.
 * - fill, memcpy round trips (pageable, pinned, device, odd sizes),
 *   pointer_kind, events (ordering across streams, never-recorded events,
 *   elapsed time);
 * - a one-rank NCCL communicator: allreduce (every dtype x op, in place
 *   too), reducescatter, allgather, broadcast, operations back to back
 *   without polling (each must be queued when its call returns), AVERAGE
 *   refused;
 * - comm_abort of a pending init (a two-rank communicator whose second
 *   rank never comes) and of a one-rank communicator with an operation
 *   just queued: both return, and the stream moves on.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/status.h"
#include "device/device.h"
#include "device/elem.h"

static hk_config cfg;
static hk_device *dev;
static const hk_device_ops *ops;
static hk_status open_st;
static char open_msg[HK_ERROR_MSG_CAP];

static int group_setup(void **state) {
  (void)state;
  if (hk_config_load(&cfg) != HK_OK) {
    fprintf(stderr, "test_cuda: %s\n", hk_last_error());
    return -1;
  }
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.device_index = cfg.gpu >= 0 ? cfg.gpu : 0;
  open_st = hk_device_open("cuda", &o, &dev);
  if (open_st != HK_OK) {
    snprintf(open_msg, sizeof open_msg, "%s", hk_last_error());
    dev = NULL;
  } else {
    ops = dev->ops;
    print_message("cuda backend: %s\n", ops->describe(dev));
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  hk_device_close(dev);
  return 0;
}

/* Skips without a usable GPU, fails instead under HK_TEST_GPU=1. */
#define NEED_GPU()                                                             \
  do {                                                                         \
    if (!dev) {                                                                \
      if (cfg.test_gpu)                                                        \
        fail_msg("HK_TEST_GPU=1, but the cuda backend did not open: %s",       \
                 open_msg);                                                    \
      print_message("skipped: %s\n", open_msg);                                \
      skip();                                                                  \
    }                                                                          \
  } while (0)

#define OK(call)                                                               \
  do {                                                                         \
    hk_status st_ = (call);                                                    \
    if (st_ != HK_OK)                                                          \
      fail_msg("%s: status %d: %s", #call, (int)st_, hk_last_error());         \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec t = {0, 100 * 1000};
  nanosleep(&t, NULL);
}

/* Polls e until done (failing on an error or after timeout_s). */
static void wait_event(hk_dev_event e, double timeout_s) {
  double end = now_s() + timeout_s;
  for (;;) {
    int done = 0;
    OK(ops->event_query(dev, e, &done));
    if (done)
      return;
    if (now_s() > end)
      fail_msg("event not done after %.0f s", timeout_s);
    nap();
  }
}

/* Waits for everything queued on s so far. */
static void sync_stream(hk_dev_stream s) {
  hk_dev_event e;
  OK(ops->event_create(dev, &e));
  OK(ops->event_record(dev, e, s));
  wait_event(e, 60);
  ops->event_destroy(dev, e);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

static size_t dsize(int dtype) {
  static const size_t s[] = {2, 2, 4, 8, 1, 1, 4, 8, 2, 1};
  return s[dtype];
}

static int is_float(int dtype) { return dtype <= HK_ELEM_F64; }

/* Random bits, with a special value (zeros, infinities, NaNs with
 * payloads, subnormals, rounding ties) in about one element of eight. */
static void fill_random(void *p, size_t count, int dtype) {
  static const uint16_t s16[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00,
                                 0x7D01, 0xFE55, 0x0001, 0x83FF, 0x3C00,
                                 0x7BFF, 0x7F80, 0x7FC1, 0xFF81, 0x0080};
  static const uint32_t s32[] = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
      0x7FA00001u, 0xFFC12345u, 0x00000001u, 0x807FFFFFu, 0x3F800000u,
      0x7F7FFFFFu, 0x33800000u, 0x3F801000u, 0x3F808000u, 0x477FF000u,
      0x387FC000u, 0x00800000u};
  static const uint64_t s64[] = {0,
                                 0x8000000000000000ull,
                                 0x7FF0000000000000ull,
                                 0x7FF8000000000001ull,
                                 0xFFF4000000000000ull,
                                 1,
                                 0x3FF0000000000000ull,
                                 0x7FEFFFFFFFFFFFFFull};
  for (size_t i = 0; i < count; i++) {
    uint64_t r = rnd();
    int special = is_float(dtype) && (r >> 61) == 0;
    switch (dsize(dtype)) {
    case 1:
      ((uint8_t *)p)[i] = (uint8_t)(r >> 11);
      break;
    case 2:
      ((uint16_t *)p)[i] = special ? s16[(r >> 20) % (sizeof s16 / sizeof *s16)]
                                   : (uint16_t)(r >> 17);
      break;
    case 4:
      ((uint32_t *)p)[i] = special ? s32[(r >> 20) % (sizeof s32 / sizeof *s32)]
                                   : (uint32_t)(r >> 13);
      break;
    default:
      ((uint64_t *)p)[i] =
          special ? s64[(r >> 20) % (sizeof s64 / sizeof *s64)] : r * 3u;
    }
  }
}

static int elem_is_nan(const void *p, int dtype) {
  switch (dtype) {
  case HK_ELEM_F16: {
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7FFFu) > 0x7C00u;
  }
  case HK_ELEM_BF16: {
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7FFFu) > 0x7F80u;
  }
  case HK_ELEM_F32: {
    float f;
    memcpy(&f, p, 4);
    return f != f;
  }
  case HK_ELEM_F64: {
    double f;
    memcpy(&f, p, 8);
    return f != f;
  }
  default:
    return 0;
  }
}

/* ---- where the backend cannot open ---- */

static void test_open_names_what_is_missing(void **state) {
  (void)state;
  if (dev) {
    print_message("skipped: the cuda backend opened here (%s)\n",
                  ops->describe(dev));
    skip();
  }
  print_message("hk_device_open(\"cuda\"): %s\n", open_msg);
  assert_int_equal(open_st, HK_ERR_CONFIG);
#ifdef HKT_CUDA_MODULE
  /* the module is built beside libhk: it loads (cudart is linked in,
   * libnccl.so.2 found through its run path), and finds no GPU or no
   * driver */
  assert_non_null(
      strstr(open_msg, "cuda: no CUDA device (cudaGetDeviceCount: "));
#else
  /* built without CUDA: no module beside libhk (one installed elsewhere
   * would load and say there is no GPU) */
  assert_true(strstr(open_msg, "HK_DEVICE=cuda: cannot load libhk_cuda.so") ||
              strstr(open_msg, "cuda: no CUDA device (cudaGetDeviceCount: "));
#endif
  /* "auto" is quietly no device where "cuda" cannot open */
  hk_device *d = (hk_device *)1;
  hk_device_options o;
  memset(&o, 0, sizeof o);
  assert_int_equal(hk_device_open("auto", &o, &d), HK_OK);
  assert_null(d);
}

/* ---- memory ---- */

static void test_pointer_kind(void **state) {
  (void)state;
  NEED_GPU();
  int idx = -1;
  int stack_var = 0;
  void *heap = malloc(64), *pinned, *d;
  OK(ops->host_alloc(dev, 4096, &pinned));
  OK(ops->mem_alloc(dev, 4096, &d));
  assert_int_equal(ops->pointer_kind(dev, NULL, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, heap, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, &stack_var, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, pinned, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, (void *)(uintptr_t)0x1000, NULL),
                   HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, d, &idx), HK_MEM_DEVICE);
  assert_int_equal(idx, cfg.gpu >= 0 ? cfg.gpu : 0);
  assert_int_equal(ops->pointer_kind(dev, (char *)d + 4095, NULL),
                   HK_MEM_DEVICE);
  assert_int_equal((uintptr_t)d % 256, 0);
  /* an unknown pointer left no error behind */
  void *z;
  OK(ops->mem_alloc(dev, 0, &z));
  assert_non_null(z);
  assert_ptr_not_equal(z, d);
  ops->mem_free(dev, z);
  ops->mem_free(dev, d);
  ops->host_free(dev, pinned);
  ops->mem_free(dev, NULL);
  ops->host_free(dev, NULL);
  free(heap);
}

static void test_memcpy_round_trip(void **state) {
  (void)state;
  NEED_GPU();
  static const size_t sizes[] = {0, 1, 3, 4097, (1u << 20) + 7};
  hk_dev_stream s;
  OK(ops->stream_create(dev, &s));
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    uint8_t *a = malloc(n + 8), *b = malloc(n + 8), *pin;
    void *d1, *d2;
    OK(ops->host_alloc(dev, n + 8, (void **)&pin));
    OK(ops->mem_alloc(dev, n + 8, &d1));
    OK(ops->mem_alloc(dev, n + 8, &d2));
    for (size_t i = 0; i < n + 8; i++)
      a[i] = (uint8_t)rnd();
    memset(b, 0, n + 8);
    memset(pin, 0, n + 8);
    /* pageable -> device, device -> device at an odd offset, device ->
     * pinned, pinned -> device, device -> pageable */
    OK(ops->memcpy_async(dev, d1, a, n, s));
    OK(ops->memcpy_async(dev, (char *)d2 + 3, d1, n, s));
    OK(ops->memcpy_async(dev, pin, (char *)d2 + 3, n, s));
    sync_stream(s);
    if (n)
      assert_memory_equal(pin, a, n);
    OK(ops->memcpy_async(dev, d1, pin, n, NULL)); /* the default stream */
    sync_stream(NULL);
    OK(ops->memcpy_async(dev, b, d1, n, s));
    sync_stream(s);
    if (n)
      assert_memory_equal(b, a, n);
    ops->mem_free(dev, d1);
    ops->mem_free(dev, d2);
    ops->host_free(dev, pin);
    free(a);
    free(b);
  }
  ops->stream_destroy(dev, s);
}

/* ---- batch_copy against hk_elem_copy ---- */

typedef struct copy_case {
  int sdt, ddt;
  double scale;
  int divisor;
} copy_case;

static size_t nan_results, nan_payload_diffs;

/* Runs one batch of `nitems` items with the given counts on the GPU and on
 * the host; compares every byte of the destination buffer. */
static void run_batch(const copy_case *c, const size_t *counts, size_t nitems,
                      hk_dev_stream s) {
  size_t ssz = dsize(c->sdt), dsz = dsize(c->ddt);
  size_t *soff = calloc(nitems, sizeof *soff);
  size_t *doff = calloc(nitems, sizeof *doff);
  size_t sbytes = 64, dbytes = 64;
  /* element offsets 0..7 on either side (so every relative alignment of
   * src and dst modulo 16 bytes occurs), gaps of guard bytes between */
  for (size_t k = 0; k < nitems; k++) {
    sbytes = (sbytes + 15) / 16 * 16 + (k % 8) * ssz;
    dbytes = (dbytes + 15) / 16 * 16 + ((k * 5 + k / 8) % 8) * dsz;
    soff[k] = sbytes;
    doff[k] = dbytes;
    sbytes += counts[k] * ssz + 16;
    dbytes += counts[k] * dsz + 16;
  }
  uint8_t *hs = malloc(sbytes), *he = malloc(dbytes), *hg = malloc(dbytes);
  fill_random(hs, sbytes / ssz, c->sdt);
  memset(he, 0xA5, dbytes);
  void *ds, *dd;
  OK(ops->mem_alloc(dev, sbytes, &ds));
  OK(ops->mem_alloc(dev, dbytes, &dd));
  OK(ops->memcpy_async(dev, ds, hs, sbytes, s));
  OK(ops->memcpy_async(dev, dd, he, dbytes, s));
  hk_dev_copy *items = calloc(nitems, sizeof *items);
  for (size_t k = 0; k < nitems; k++) {
    items[k].dst = (char *)dd + doff[k];
    items[k].src = (const char *)ds + soff[k];
    items[k].count = counts[k];
    items[k].scale = c->scale;
    items[k].divisor = c->divisor;
    items[k].pre = c->divisor > 1 ? 2.0 : 1.0; /* 16-bit averages' */
    for (size_t i = 0; i < counts[k]; i++)
      hk_elem_copy(he + doff[k], hs + soff[k], i, c->sdt, c->ddt, c->scale,
                   c->divisor, (float)items[k].pre);
  }
  OK(ops->batch_copy(dev, items, nitems, (hk_dtype)c->sdt, (hk_dtype)c->ddt,
                     s));
  memset(items, 0xEE, nitems * sizeof *items); /* copied before returning */
  OK(ops->memcpy_async(dev, hg, dd, dbytes, s));
  sync_stream(s);
  int raw = c->sdt == c->ddt && c->divisor <= 1 &&
            (c->scale == 1.0 || c->sdt == HK_ELEM_BOOL);
  if (memcmp(hg, he, dbytes) != 0) {
    for (size_t k = 0; k <= nitems; k++) {
      /* the guard bytes before item k (after the last item for k ==
       * nitems) */
      size_t g0 = k ? doff[k - 1] + counts[k - 1] * dsz : 0;
      size_t g1 = k < nitems ? doff[k] : dbytes;
      for (size_t b = g0; b < g1; b++)
        if (hg[b] != he[b])
          fail_msg("dtype %d -> %d scale %g divisor %d: byte %zu outside "
                   "the items changed (0x%02x)",
                   c->sdt, c->ddt, c->scale, c->divisor, b, hg[b]);
      if (k == nitems)
        break;
      for (size_t i = 0; i < counts[k]; i++) {
        const uint8_t *g = hg + doff[k] + i * dsz, *e = he + doff[k] + i * dsz;
        if (!memcmp(g, e, dsz))
          continue;
        if (!raw && elem_is_nan(e, c->ddt) && elem_is_nan(g, c->ddt)) {
          nan_payload_diffs++;
          continue;
        }
        uint64_t sv = 0, ev = 0, gv = 0;
        memcpy(&sv, hs + soff[k] + i * ssz, ssz);
        memcpy(&ev, e, dsz);
        memcpy(&gv, g, dsz);
        fail_msg("dtype %d -> %d scale %g divisor %d, item %zu (count %zu, "
                 "src %% 16 = %zu, dst %% 16 = %zu) element %zu: src 0x%llx "
                 "host 0x%llx gpu 0x%llx",
                 c->sdt, c->ddt, c->scale, c->divisor, k, counts[k],
                 soff[k] % 16, doff[k] % 16, i, (unsigned long long)sv,
                 (unsigned long long)ev, (unsigned long long)gv);
      }
    }
  }
  if (!raw)
    for (size_t k = 0; k < nitems; k++)
      for (size_t i = 0; i < counts[k]; i++)
        nan_results += (size_t)elem_is_nan(he + doff[k] + i * dsz, c->ddt);
  ops->mem_free(dev, ds);
  ops->mem_free(dev, dd);
  free(items);
  free(hs);
  free(he);
  free(hg);
  free(soff);
  free(doff);
}

static const int pairs[][2] = {
    {HK_ELEM_F16, HK_ELEM_F16}, {HK_ELEM_BF16, HK_ELEM_BF16},
    {HK_ELEM_F32, HK_ELEM_F32}, {HK_ELEM_F64, HK_ELEM_F64},
    {HK_ELEM_I8, HK_ELEM_I8},   {HK_ELEM_U8, HK_ELEM_U8},
    {HK_ELEM_I32, HK_ELEM_I32}, {HK_ELEM_I64, HK_ELEM_I64},
    {HK_ELEM_I16, HK_ELEM_I16}, {HK_ELEM_BOOL, HK_ELEM_BOOL},
    {HK_ELEM_F32, HK_ELEM_F16}, {HK_ELEM_F32, HK_ELEM_BF16},
    {HK_ELEM_F16, HK_ELEM_F32}, {HK_ELEM_BF16, HK_ELEM_F32},
};

static void test_batch_copy_bits(void **state) {
  (void)state;
  NEED_GPU();
  static const double scales[] = {1.0, 0.5, 0.1, -3.0};
  static const int divisors[] = {0, 1, 3, 8};
  static const size_t counts[] = {0,  1,   2,   3,    7,    8,    9,
                                  15, 16,  17,  31,   33,   63,   64,
                                  65, 100, 257, 1023, 4099, 65537};
  const size_t ncounts = sizeof counts / sizeof *counts;
  size_t many[150]; /* more items than one launch takes */
  for (size_t k = 0; k < 150; k++)
    many[k] = (k * 37) % 300;
  size_t big[3] = {1000003, 5, 262147};
  hk_dev_stream s;
  OK(ops->stream_create(dev, &s));
  nan_results = nan_payload_diffs = 0;
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
    for (size_t a = 0; a < sizeof scales / sizeof *scales; a++)
      for (size_t b = 0; b < sizeof divisors / sizeof *divisors; b++) {
        copy_case c = {pairs[p][0], pairs[p][1], scales[a], divisors[b]};
        run_batch(&c, counts, ncounts, s);
        if (a == b) {
          run_batch(&c, many, 150, s);
          run_batch(&c, big, 3, s);
        }
      }
  /* an empty batch, and a batch of empty items */
  OK(ops->batch_copy(dev, NULL, 0, HK_FLOAT32, HK_FLOAT32, s));
  hk_dev_copy none = {NULL, NULL, 0, 1.0, 0, 1.0};
  OK(ops->batch_copy(dev, &none, 1, HK_FLOAT32, HK_FLOAT16, s));
  sync_stream(s);
  print_message("NaN results of arithmetic: %zu, with another payload on the "
                "GPU than on the host: %zu\n",
                nan_results, nan_payload_diffs);
  ops->stream_destroy(dev, s);
}

static void test_batch_copy_refuses(void **state) {
  (void)state;
  NEED_GPU();
  void *d;
  OK(ops->mem_alloc(dev, 1024, &d));
  hk_dev_copy c = {(char *)d + 2, d, 4, 1.0, 0, 1.0};
  /* a pair device.h does not define */
  assert_int_equal(ops->batch_copy(dev, &c, 1, HK_INT32, HK_FLOAT32, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "cuda: "));
  /* float32 at an address not a multiple of 4 */
  assert_int_equal(ops->batch_copy(dev, &c, 1, HK_FLOAT32, HK_FLOAT32, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "not aligned"));
  c.src = NULL;
  assert_int_equal(ops->batch_copy(dev, &c, 1, HK_INT8, HK_INT8, NULL),
                   HK_ERR_INVALID_ARG);
  ops->mem_free(dev, d);
}

static void test_fill(void **state) {
  (void)state;
  NEED_GPU();
  static const size_t counts[] = {1, 2, 3, 15, 16, 17, 255, 1000, 65537};
  static const uint8_t value[8] = {0x11, 0x22, 0x33, 0x44,
                                   0x55, 0x66, 0x77, 0x88};
  for (int dt = 0; dt < 8; dt++)
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
      for (size_t off = 0; off < 4; off++) {
        size_t esz = dsize(dt), n = counts[k];
        size_t bytes = (n + off + 8) * esz;
        uint8_t *h = malloc(bytes), *want = malloc(bytes);
        memset(want, 0xA5, bytes);
        for (size_t i = 0; i < n; i++)
          memcpy(want + (off + i) * esz, value, esz);
        void *d;
        OK(ops->mem_alloc(dev, bytes, &d));
        memset(h, 0xA5, bytes);
        OK(ops->memcpy_async(dev, d, h, bytes, NULL));
        OK(ops->fill(dev, (char *)d + off * esz, n, (hk_dtype)dt, value, NULL));
        OK(ops->memcpy_async(dev, h, d, bytes, NULL));
        sync_stream(NULL);
        if (memcmp(h, want, bytes))
          fail_msg("fill: dtype %d count %zu offset %zu", dt, n, off);
        ops->mem_free(dev, d);
        free(h);
        free(want);
      }
}

/* ---- events ---- */

static void test_event_order(void **state) {
  (void)state;
  NEED_GPU();
  const size_t n = (64u << 20) / 4; /* 64 MiB of float32 */
  hk_dev_stream a, b;
  hk_dev_event ea, eb, never, t0;
  OK(ops->stream_create(dev, &a));
  OK(ops->stream_create(dev, &b));
  OK(ops->event_create_timed(dev, &ea)); /* timed: event_elapsed below */
  OK(ops->event_create(dev, &eb));
  OK(ops->event_create_timed(dev, &never));
  OK(ops->event_create_timed(dev, &t0));
  /* a never-recorded event is done, and waiting on it does not block */
  int done = 0;
  OK(ops->event_query(dev, never, &done));
  assert_int_equal(done, 1);
  OK(ops->stream_wait_event(dev, b, never));
  float ms = -1;
  assert_int_equal(ops->event_elapsed(dev, never, ea, &ms), HK_ERR_INVALID_ARG);

  float *h = malloc(n * 4), *back = malloc(n * 4);
  fill_random(h, n, HK_ELEM_I32); /* any bits: a plain copy */
  void *src, *mid, *dst;
  OK(ops->mem_alloc(dev, n * 4, &src));
  OK(ops->mem_alloc(dev, n * 4, &mid));
  OK(ops->mem_alloc(dev, n * 4, &dst));
  OK(ops->memcpy_async(dev, src, h, n * 4, a));
  OK(ops->event_record(dev, t0, a));
  /* a: src -> mid (several times, so it takes a while); b: after a's
   * event, mid -> dst. Without the wait b would read mid early. */
  hk_dev_copy c1 = {mid, src, n, 1.0, 0, 1.0};
  for (int r = 0; r < 8; r++)
    OK(ops->batch_copy(dev, &c1, 1, HK_FLOAT32, HK_FLOAT32, a));
  OK(ops->event_record(dev, ea, a));
  OK(ops->stream_wait_event(dev, b, ea));
  hk_dev_copy c2 = {dst, mid, n, 1.0, 0, 1.0};
  OK(ops->batch_copy(dev, &c2, 1, HK_FLOAT32, HK_FLOAT32, b));
  OK(ops->event_record(dev, eb, b));
  wait_event(eb, 60);
  OK(ops->event_query(dev, ea, &done));
  assert_int_equal(done, 1); /* eb came after ea */
  OK(ops->event_elapsed(dev, t0, ea, &ms));
  assert_true(ms >= 0 && ms < 10000);
  print_message("8 plain copies of 64 MiB: %.3f ms (%.0f GB/s read+write)\n",
                ms, ms > 0 ? 8.0 * 2 * n * 4 / (ms * 1e6) : 0.0);
  OK(ops->memcpy_async(dev, back, dst, n * 4, b));
  sync_stream(b);
  assert_memory_equal(back, h, n * 4);
  /* the legacy default stream (NULL) records too */
  OK(ops->event_record(dev, eb, NULL));
  wait_event(eb, 60);
  ops->mem_free(dev, src);
  ops->mem_free(dev, mid);
  ops->mem_free(dev, dst);
  free(h);
  free(back);
  ops->event_destroy(dev, ea);
  ops->event_destroy(dev, eb);
  ops->event_destroy(dev, never);
  ops->event_destroy(dev, t0);
  ops->stream_destroy(dev, a);
  ops->stream_destroy(dev, b);
}

/* ---- NCCL ---- */

/* Polls c until it is no longer pending (failing on an error). */
static void wait_comm(hk_dev_comm c, double timeout_s) {
  double end = now_s() + timeout_s;
  for (;;) {
    int pending = 0;
    OK(ops->comm_async_error(c, &pending));
    if (!pending)
      return;
    if (now_s() > end)
      fail_msg("communicator still pending after %.0f s", timeout_s);
    nap();
  }
}

static void test_nccl_one_rank(void **state) {
  (void)state;
  NEED_GPU();
  uint8_t id[HK_DEV_UID_BYTES];
  hk_dev_comm c;
  hk_dev_stream s;
  OK(ops->stream_create(dev, &s));
  OK(ops->comm_unique_id(dev, id));
  OK(ops->comm_init(dev, id, 1, 0, &c));
  /* no wait for the init: the first operation waits for it */
  const size_t n = 1001;
  static const hk_op opsl[] = {HK_SUM, HK_MIN, HK_MAX, HK_PRODUCT};
  /* every dtype hk reduces; int16 goes through NCCL as int32 (cuda.c) */
  for (int dt = 0; dt <= HK_INT16; dt++) {
    size_t bytes = n * dsize(dt);
    uint8_t *h = malloc(bytes), *got = malloc(bytes);
    void *send, *recv;
    OK(ops->mem_alloc(dev, bytes, &send));
    OK(ops->mem_alloc(dev, bytes, &recv));
    fill_random(h, n, dt);
    OK(ops->memcpy_async(dev, send, h, bytes, s));
    for (size_t o = 0; o < sizeof opsl / sizeof *opsl; o++) {
      OK(ops->fill(dev, recv, n, (hk_dtype)dt, "\0\0\0\0\0\0\0\0", s));
      OK(ops->comm_allreduce(c, send, recv, n, (hk_dtype)dt, opsl[o], s));
      wait_comm(c, 60);
      OK(ops->memcpy_async(dev, got, recv, bytes, s));
      sync_stream(s);
      if (memcmp(got, h, bytes))
        fail_msg("one-rank allreduce dtype %d op %d changed the data", dt,
                 (int)opsl[o]);
    }
    /* in place */
    OK(ops->comm_allreduce(c, send, send, n, (hk_dtype)dt, HK_SUM, s));
    wait_comm(c, 60);
    OK(ops->comm_reducescatter(c, send, recv, n, (hk_dtype)dt, HK_MAX, s));
    wait_comm(c, 60);
    OK(ops->memcpy_async(dev, got, recv, bytes, s));
    sync_stream(s);
    assert_memory_equal(got, h, bytes);
    OK(ops->comm_allgather(c, send, recv, n, (hk_dtype)dt, s));
    wait_comm(c, 60);
    OK(ops->memcpy_async(dev, got, recv, bytes, s));
    sync_stream(s);
    assert_memory_equal(got, h, bytes);
    OK(ops->comm_broadcast(c, recv, n, (hk_dtype)dt, 0, s));
    wait_comm(c, 60);
    OK(ops->memcpy_async(dev, got, recv, bytes, s));
    sync_stream(s);
    assert_memory_equal(got, h, bytes);
    ops->mem_free(dev, send);
    ops->mem_free(dev, recv);
    free(h);
    free(got);
  }
  /* back to back without polling, as hk's hierarchical allreduce does
   * (reduce-scatter, then allgather): each call leaves its operation
   * queued, whatever NCCL answered */
  {
    const size_t m = 1 << 20;
    float *h = malloc(m * 4), *got = malloc(m * 4);
    void *a, *b2;
    for (size_t i = 0; i < m; i++)
      h[i] = (float)(i % 1000);
    OK(ops->mem_alloc(dev, m * 4, &a));
    OK(ops->mem_alloc(dev, m * 4, &b2));
    OK(ops->memcpy_async(dev, a, h, m * 4, s));
    OK(ops->comm_reducescatter(c, a, b2, m, HK_FLOAT32, HK_SUM, s));
    OK(ops->comm_allgather(c, b2, a, m, HK_FLOAT32, s));
    OK(ops->comm_allreduce(c, a, a, m, HK_FLOAT32, HK_SUM, s));
    OK(ops->memcpy_async(dev, got, a, m * 4, s));
    sync_stream(s);
    assert_memory_equal(got, h, m * 4);
    ops->mem_free(dev, a);
    ops->mem_free(dev, b2);
    free(h);
    free(got);
  }
  /* AVERAGE is never passed down; a root outside the communicator; bool
   * is moved (as bytes) but not reduced */
  void *b;
  OK(ops->mem_alloc(dev, 64, &b));
  {
    uint8_t hb[16], gb[32];
    for (int i = 0; i < 16; i++)
      hb[i] = (uint8_t)(i * 37);
    OK(ops->memcpy_async(dev, b, hb, 16, s));
    OK(ops->comm_broadcast(c, b, 16, HK_BOOL, 0, s));
    OK(ops->comm_allgather(c, b, (uint8_t *)b + 16, 16, HK_BOOL, s));
    wait_comm(c, 60);
    OK(ops->memcpy_async(dev, gb, b, 32, s));
    sync_stream(s);
    assert_memory_equal(gb, hb, 16);
    assert_memory_equal(gb + 16, hb, 16);
    assert_int_equal(ops->comm_allreduce(c, b, b, 4, HK_BOOL, HK_MAX, s),
                     HK_ERR_INVALID_ARG);
    assert_non_null(strstr(hk_last_error(), "not reduced"));
    assert_int_equal(ops->comm_reducescatter(c, b, b, 4, HK_BOOL, HK_SUM, s),
                     HK_ERR_INVALID_ARG);
  }
  assert_int_equal(ops->comm_allreduce(c, b, b, 4, HK_FLOAT32, HK_AVERAGE, s),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "HK_AVERAGE"));
  assert_int_equal(ops->comm_broadcast(c, b, 4, HK_FLOAT32, 1, s),
                   HK_ERR_INVALID_ARG);
  /* zero elements */
  OK(ops->comm_allreduce(c, b, b, 0, HK_FLOAT32, HK_SUM, s));
  wait_comm(c, 60);
  sync_stream(s);
  ops->mem_free(dev, b);
  ops->comm_destroy(c);
  ops->stream_destroy(dev, s);
}

static void test_nccl_abort_pending(void **state) {
  (void)state;
  NEED_GPU();
  uint8_t id[HK_DEV_UID_BYTES];
  hk_dev_comm c;
  int pending = 0;
  /* (a) a two-rank communicator whose rank 1 never comes: its init stays
   * pending; abort must end it */
  OK(ops->comm_unique_id(dev, id));
  OK(ops->comm_init(dev, id, 2, 0, &c));
  double t = now_s();
  while (now_s() - t < 0.5) {
    OK(ops->comm_async_error(c, &pending));
    assert_int_equal(pending, 1);
    nap();
  }
  t = now_s();
  ops->comm_abort(c);
  print_message("abort of a pending init: %.3f s\n", now_s() - t);

  /* (b) a one-rank communicator, aborted right after an allreduce was
   * queued: the abort returns and the stream moves on */
  hk_dev_stream s;
  void *b;
  OK(ops->stream_create(dev, &s));
  OK(ops->mem_alloc(dev, 64 << 20, &b));
  OK(ops->comm_unique_id(dev, id));
  OK(ops->comm_init(dev, id, 1, 0, &c));
  wait_comm(c, 60);
  OK(ops->comm_allreduce(c, b, b, (64 << 20) / 4, HK_FLOAT32, HK_SUM, s));
  t = now_s();
  ops->comm_abort(c);
  print_message("abort with an allreduce queued: %.3f s\n", now_s() - t);
  hk_dev_event e;
  OK(ops->event_create(dev, &e));
  OK(ops->event_record(dev, e, s));
  double end = now_s() + 60;
  int done = 0;
  while (!done && now_s() < end) {
    if (ops->event_query(dev, e, &done) != HK_OK) {
      print_message("the stream's event failed after the abort: %s\n",
                    hk_last_error());
      break;
    }
    nap();
  }
  assert_true(done || now_s() < end);
  ops->event_destroy(dev, e);
  ops->mem_free(dev, b);
  ops->stream_destroy(dev, s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_names_what_is_missing),
      cmocka_unit_test(test_pointer_kind),
      cmocka_unit_test(test_memcpy_round_trip),
      cmocka_unit_test(test_batch_copy_bits),
      cmocka_unit_test(test_batch_copy_refuses),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_event_order),
      cmocka_unit_test(test_nccl_one_rank),
      cmocka_unit_test(test_nccl_abort_pending),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
