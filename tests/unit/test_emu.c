/*
 * test_emu.c - the emu backend (device/emu/) in one process: device memory
 * host code cannot read (a forked child dies of SIGSEGV), pointer_kind,
 * bounds and overlap checks, copies in every direction, fill, batch_copy
 * bit for bit against the host kernels (reduce.h, half.h), stream order,
 * CUDA's event rules, stream_destroy waiting, and mem_free while work is
 * queued. Streams are held at known points by host callbacks (gates) and
 * results are checked by their order and contents, never by sleeping.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/half.h"
#include "common/status.h"
#include "device/device.h"
#include "device/emu/emu.h"
#include "device/host/reduce.h"

/* ---- helpers ---- */

enum { EMU_DEVICES = 4 }; /* the devices the tests' process sees */

static hk_device *open_emu(int index) {
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.device_index = index;
  o.emu_devices = EMU_DEVICES;
  hk_device *dev = NULL;
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_OK);
  assert_non_null(dev);
  assert_string_equal(dev->ops->name, "emu");
  return dev;
}

/* The streams and events a test made with new_stream and new_event, on
 * the one device it then gives to close_emu. */
enum { MADE_MAX = 4 };
static struct {
  hk_dev_stream streams[MADE_MAX];
  hk_dev_event events[MADE_MAX];
  int n_streams, n_events;
} made;

static hk_dev_stream new_stream(hk_device *dev) {
  assert_true(made.n_streams < MADE_MAX);
  hk_dev_stream s = NULL;
  assert_int_equal(dev->ops->stream_create(dev, &s), HK_OK);
  return made.streams[made.n_streams++] = s;
}

static hk_dev_event new_event(hk_device *dev) {
  assert_true(made.n_events < MADE_MAX);
  hk_dev_event e = NULL;
  assert_int_equal(dev->ops->event_create(dev, &e), HK_OK);
  return made.events[made.n_events++] = e;
}

/* new_event with timing (event_elapsed takes it). */
static hk_dev_event new_timed_event(hk_device *dev) {
  assert_true(made.n_events < MADE_MAX);
  hk_dev_event e = NULL;
  assert_int_equal(dev->ops->event_create_timed(dev, &e), HK_OK);
  return made.events[made.n_events++] = e;
}

/* Destroys what new_event and new_stream made (events first; a stream's
 * destroy waits for its queued work), closes dev and asserts that no
 * device memory is left allocated. */
static void close_emu(hk_device *dev) {
  for (int i = 0; i < made.n_events; i++)
    dev->ops->event_destroy(dev, made.events[i]);
  for (int i = 0; i < made.n_streams; i++)
    dev->ops->stream_destroy(dev, made.streams[i]);
  made.n_events = made.n_streams = 0;
  hk_device_close(dev);
  assert_int_equal(hk_emu_live_allocations(), 0);
}

/* cmocka setup and teardown: *state is emu device 0 while the test runs;
 * emu_down then destroys the streams and events the test made with
 * new_stream and new_event and asserts that the test freed all device
 * memory (close_emu). */
static int emu_up(void **state) {
  *state = open_emu(0);
  return 0;
}

static int emu_down(void **state) {
  close_emu(*state);
  return 0;
}

#define EMU_TEST(test) cmocka_unit_test_setup_teardown(test, emu_up, emu_down)

/* A one-shot flag with a condition: host callbacks set it (latch) or
 * block until it is set (gate). */
typedef struct flag {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int set;
} flag;

static void flag_init(flag *f) {
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->set = 0;
}

static void flag_done(flag *f) {
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
}

static void flag_set(void *arg) {
  flag *f = arg;
  pthread_mutex_lock(&f->mu);
  f->set = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Blocks until set; a safety net of 60 s turns a hang into a failure. */
static int flag_wait(flag *f) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += 60;
  pthread_mutex_lock(&f->mu);
  int r = 0;
  while (!f->set && r == 0)
    r = pthread_cond_timedwait(&f->cv, &f->mu, &t);
  int set = f->set;
  pthread_mutex_unlock(&f->mu);
  return set;
}

static void gate_fn(void *arg) { flag_wait(arg); }

/* Waits (host-side) until s has run everything queued so far. */
static void sync_stream(hk_device *dev, hk_dev_stream s) {
  flag f;
  flag_init(&f);
  assert_int_equal(hk_emu_stream_host_fn(dev, s, flag_set, &f), HK_OK);
  assert_true(flag_wait(&f));
  flag_done(&f);
}

/* Asserts that event_query says e is done (want 1) or not (want 0); the
 * flag it fills starts at !want, so a query that writes nothing fails. */
static void expect_done(hk_device *dev, hk_dev_event e, int want) {
  int done = !want;
  assert_int_equal(dev->ops->event_query(dev, e, &done), HK_OK);
  assert_int_equal(done, want);
}

/* A log host callbacks append to, in the order streams run them. */
typedef struct logbook {
  pthread_mutex_t mu;
  int n;
  int v[64];
} logbook;

typedef struct log_arg {
  logbook *b;
  int value;
} log_arg;

static void log_fn(void *arg) {
  log_arg *a = arg;
  pthread_mutex_lock(&a->b->mu);
  a->b->v[a->b->n++] = a->value;
  pthread_mutex_unlock(&a->b->mu);
}

/* Asserts that the log holds exactly want[0..n-1], in that order. */
static void expect_log(const logbook *b, const int *want, int n) {
  assert_int_equal(b->n, n);
  for (int i = 0; i < n; i++)
    assert_int_equal(b->v[i], want[i]);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static void fill_random(void *p, size_t bytes, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    b[i] = (unsigned char)(rng_next(&s) >> 24);
}

/* ---- device memory ---- */

/* A child reads (or writes) p: it must die of SIGSEGV. */
static void expect_segv(void *p, int write) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGSEGV, SIG_DFL); /* sanitizers install their own handler */
    volatile char *v = p;
    if (write)
      v[0] = 1;
    else
      (void)v[0];
    _exit(0); /* reached only if host code could touch device memory */
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGSEGV);
}

static void test_host_deref_crashes(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  char *d;
  assert_int_equal(dev->ops->mem_alloc(dev, 10000, (void **)&d), HK_OK);
  /* the backend itself can write it */
  assert_int_equal(dev->ops->fill(dev, d, 10000, HK_UINT8, "\x5a", NULL),
                   HK_OK);
  sync_stream(dev, NULL);
  expect_segv(d, 0);
  expect_segv(d + 5000, 0);
  expect_segv(d + 9999, 1);
  unsigned char back[16];
  assert_int_equal(dev->ops->memcpy_async(dev, back, d + 9984, 16, NULL),
                   HK_OK);
  sync_stream(dev, NULL);
  for (int i = 0; i < 16; i++)
    assert_int_equal(back[i], 0x5a);
  dev->ops->mem_free(dev, d);
}

static void test_pointer_kind(void **state) {
  (void)state;
  hk_device *dev = open_emu(0), *dev3 = open_emu(3);
  const hk_device_ops *ops = dev->ops;
  char *a, *b, *z, *z2, *c3, *h;
  assert_int_equal(ops->mem_alloc(dev, 100, (void **)&a), HK_OK);
  assert_int_equal(ops->mem_alloc(dev, 4096, (void **)&b), HK_OK);
  assert_int_equal(ops->mem_alloc(dev, 0, (void **)&z), HK_OK);
  assert_int_equal(ops->mem_alloc(dev, 0, (void **)&z2), HK_OK);
  assert_int_equal(ops->mem_alloc(dev3, 64, (void **)&c3), HK_OK);
  assert_int_equal(ops->host_alloc(dev, 1000, (void **)&h), HK_OK);
  assert_int_equal(hk_emu_live_allocations(), 5);
  assert_ptr_not_equal(z, z2);
  assert_non_null(z);
  assert_int_equal((uintptr_t)a % 256, 0);
  assert_int_equal((uintptr_t)b % 256, 0);
  assert_int_equal((uintptr_t)h % 256, 0);

  int idx = -1;
  assert_int_equal(ops->pointer_kind(dev, a, &idx), HK_MEM_DEVICE);
  assert_int_equal(idx, 0);
  assert_int_equal(ops->pointer_kind(dev, a + 50, NULL), HK_MEM_DEVICE);
  assert_int_equal(ops->pointer_kind(dev, a + 99, NULL), HK_MEM_DEVICE);
  assert_int_equal(ops->pointer_kind(dev, a + 100, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, b + 4095, NULL), HK_MEM_DEVICE);
  assert_int_equal(ops->pointer_kind(dev, b + 4096, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, b - 1, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, z, NULL), HK_MEM_DEVICE);
  assert_int_equal(ops->pointer_kind(dev, z + 1, NULL), HK_MEM_HOST);
  /* the owner's index, whichever handle asks */
  idx = -1;
  assert_int_equal(ops->pointer_kind(dev, c3 + 63, &idx), HK_MEM_DEVICE);
  assert_int_equal(idx, 3);
  idx = -1;
  assert_int_equal(ops->pointer_kind(dev3, a, &idx), HK_MEM_DEVICE);
  assert_int_equal(idx, 0);
  /* host memory of every sort */
  int local = 0;
  char *heap = malloc(16);
  assert_int_equal(ops->pointer_kind(dev, NULL, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, &local, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, heap, NULL), HK_MEM_HOST);
  assert_int_equal(ops->pointer_kind(dev, h, NULL), HK_MEM_HOST);
  free(heap);
  assert_string_equal(ops->describe(dev3), "emu 3");

  ops->mem_free(dev, a);
  assert_int_equal(ops->pointer_kind(dev, a, NULL), HK_MEM_HOST);
  ops->mem_free(dev, b);
  ops->mem_free(dev, z);
  ops->mem_free(dev, z2);
  ops->mem_free(dev3, c3);
  ops->host_free(dev, h);
  ops->host_free(dev, NULL);
  ops->mem_free(dev, NULL);
  hk_device_close(dev3);
  close_emu(dev);
}

static void test_free_errors(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  char *d;
  char host[8];
  assert_int_equal(dev->ops->mem_alloc(dev, 256, (void **)&d), HK_OK);
  hk_clear_error();
  dev->ops->mem_free(dev, host);
  assert_non_null(strstr(hk_last_error(), "not an emu device allocation"));
  hk_clear_error();
  dev->ops->mem_free(dev, d + 8);
  assert_non_null(strstr(hk_last_error(), "not its start"));
  assert_int_equal(hk_emu_live_allocations(), 1);
  hk_clear_error();
  dev->ops->mem_free(dev, d);
  assert_string_equal(hk_last_error(), "");
  dev->ops->mem_free(dev, d); /* twice */
  assert_non_null(strstr(hk_last_error(), "not an emu device allocation"));
}

static void test_copies_round_trip(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream s = new_stream(dev);
  static const size_t sizes[] = {0, 1, 7, 4096, 4097, (3u << 20) + 5};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *src = malloc(n + 1), *dst = malloc(n + 1),
                  *h2h = malloc(n + 1);
    fill_random(src, n, k + 1);
    memset(dst, 0, n + 1);
    char *d1, *d2;
    assert_int_equal(ops->mem_alloc(dev, n, (void **)&d1), HK_OK);
    assert_int_equal(ops->mem_alloc(dev, 2 * n + 3, (void **)&d2), HK_OK);
    assert_int_equal(ops->memcpy_async(dev, d1, src, n, s), HK_OK);    /* H2D */
    assert_int_equal(ops->memcpy_async(dev, d2 + 3, d1, n, s), HK_OK); /* D2D */
    /* D2D inside one allocation, not overlapping */
    assert_int_equal(ops->memcpy_async(dev, d2 + 3 + n, d2 + 3, n, s), HK_OK);
    assert_int_equal(ops->memcpy_async(dev, dst, d2 + 3 + n, n, s), HK_OK);
    assert_int_equal(ops->memcpy_async(dev, h2h, src, n, s), HK_OK); /* H2H */
    sync_stream(dev, s);
    assert_memory_equal(dst, src, n);
    assert_memory_equal(h2h, src, n);
    assert_int_equal(dst[n], 0);
    ops->mem_free(dev, d1);
    ops->mem_free(dev, d2);
    free(src);
    free(dst);
    free(h2h);
  }
}

static void test_bounds_and_overlap(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  char *d, *e;
  char host[256];
  assert_int_equal(ops->mem_alloc(dev, 100, (void **)&d), HK_OK);
  assert_int_equal(ops->mem_alloc(dev, 100, (void **)&e), HK_OK);
  /* a device range past its allocation's end, either side */
  assert_int_equal(ops->memcpy_async(dev, host, d + 50, 51, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "run past the end"));
  assert_non_null(strstr(hk_last_error(), "memcpy_async src"));
  assert_int_equal(ops->memcpy_async(dev, d + 1, host, 100, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "memcpy_async dst"));
  assert_int_equal(ops->memcpy_async(dev, host, d + 50, 50, NULL), HK_OK);
  /* the end pointer is not device memory, and not host memory either */
  assert_int_equal(ops->pointer_kind(dev, d + 100, NULL), HK_MEM_HOST);
  assert_int_equal(ops->memcpy_async(dev, host, d + 100, 1, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "in its padding"));
  assert_int_equal(ops->memcpy_async(dev, host, d + 100, 0, NULL), HK_OK);
  /* overlap */
  assert_int_equal(ops->memcpy_async(dev, d + 8, d, 64, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "overlap"));
  /* fill: device memory only, in bounds */
  int32_t one = 1;
  assert_int_equal(ops->fill(dev, host, 4, HK_INT32, &one, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "not emu device memory"));
  assert_int_equal(ops->fill(dev, d, 26, HK_INT32, &one, NULL),
                   HK_ERR_INVALID_ARG);
  assert_int_equal(ops->fill(dev, d, 25, HK_INT32, &one, NULL), HK_OK);
  /* batch_copy: conversions, bounds (naming the item), in-place */
  hk_dev_copy it[2] = {{e, d, 10, 1.0, 1, 1.0},
                       {e + 40, d + 40, 16, 1.0, 1, 1.0}};
  assert_int_equal(ops->batch_copy(dev, it, 2, HK_FLOAT32, HK_INT32, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "not a supported conversion"));
  assert_int_equal(ops->batch_copy(dev, it, 2, HK_FLOAT32, HK_FLOAT32, NULL),
                   HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "item 1"));
  it[1].count = 15;
  assert_int_equal(ops->batch_copy(dev, it, 2, HK_FLOAT32, HK_FLOAT32, NULL),
                   HK_OK);
  hk_dev_copy inplace = {d, d, 10, 2.0, 1, 1.0};
  assert_int_equal(
      ops->batch_copy(dev, &inplace, 1, HK_FLOAT32, HK_FLOAT32, NULL), HK_OK);
  assert_int_equal(
      ops->batch_copy(dev, &inplace, 1, HK_FLOAT16, HK_FLOAT32, NULL),
      HK_ERR_INVALID_ARG);
  /* a freed pointer is no longer device memory */
  ops->mem_free(dev, e);
  assert_int_equal(ops->fill(dev, e, 1, HK_INT32, &one, NULL),
                   HK_ERR_INVALID_ARG);
  sync_stream(dev, NULL);
  ops->mem_free(dev, d);
}

static void test_fill(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  for (int t = HK_FLOAT16; t <= HK_BOOL; t++) {
    size_t es = hk_dtype_size((hk_dtype)t), n = 1001;
    unsigned char value[8] = {0x81, 0x42, 0x13, 0x74, 0x25, 0x96, 0x37, 0x08};
    char *d;
    assert_int_equal(ops->mem_alloc(dev, n * es + 8, (void **)&d), HK_OK);
    assert_int_equal(ops->fill(dev, d, n + 1, HK_UINT8, "\xee", NULL), HK_OK);
    assert_int_equal(ops->fill(dev, d + es, n - 1, (hk_dtype)t, value, NULL),
                     HK_OK);
    unsigned char *back = malloc(n * es + 8);
    assert_int_equal(ops->memcpy_async(dev, back, d, n * es + 8, NULL), HK_OK);
    sync_stream(dev, NULL);
    for (size_t i = 0; i < es; i++)
      assert_int_equal(back[i], 0xee);
    for (size_t i = 1; i < n; i++)
      assert_memory_equal(back + i * es, value, es);
    free(back);
    ops->mem_free(dev, d);
  }
}

/* ---- batch_copy against the host kernels ---- */

/* The host's result for one item: the average's division
 * (hk_reduce_finish_average), then the scale (hk_scale_copy), then a
 * narrowing (hk_f32_to_f16/bf16) or after a widening. */
static void host_item(void *dst, const void *src, size_t count, hk_dtype st,
                      hk_dtype dt, double scale, int divisor) {
  size_t ss = hk_dtype_size(st);
  if (st == dt) {
    memcpy(dst, src, count * ss);
    if (divisor > 1)
      hk_reduce_finish_average(dst, count, dt, divisor);
    if (scale != 1.0)
      hk_scale_copy(dst, dst, count, dt, scale);
    return;
  }
  float *tmp = malloc((count ? count : 1) * sizeof *tmp);
  if (st == HK_FLOAT32) {
    memcpy(tmp, src, count * 4);
  } else {
    const uint16_t *s = src;
    for (size_t i = 0; i < count; i++)
      tmp[i] = st == HK_FLOAT16 ? hk_f16_to_f32(s[i]) : hk_bf16_to_f32(s[i]);
  }
  if (divisor > 1)
    hk_reduce_finish_average(tmp, count, HK_FLOAT32, divisor);
  if (scale != 1.0)
    hk_scale_copy(tmp, tmp, count, HK_FLOAT32, scale);
  if (dt == HK_FLOAT32) {
    memcpy(dst, tmp, count * 4);
  } else {
    uint16_t *d = dst;
    for (size_t i = 0; i < count; i++)
      d[i] = dt == HK_FLOAT16 ? hk_f32_to_f16(tmp[i]) : hk_f32_to_bf16(tmp[i]);
  }
  free(tmp);
}

/* Float inputs: mostly ordinary values, some specials and random bits. */
static void fill_values(void *p, size_t count, hk_dtype t, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  if (t == HK_FLOAT32) {
    float *f = p;
    static const float special[] = {0.0f,   -0.0f,   1.0f / 0.0f, -1.0f / 0.0f,
                                    1e-40f, 3.0e38f, 65504.0f,    65520.0f};
    for (size_t i = 0; i < count; i++) {
      uint64_t r = rng_next(&s);
      if (r % 16 == 0)
        f[i] = special[(r >> 8) % 8];
      else if (r % 16 == 1) {
        uint32_t u = (uint32_t)(r >> 16);
        memcpy(&f[i], &u, 4);
      } else
        f[i] = (float)((int64_t)(r >> 20) % 200001 - 100000) / 997.0f;
    }
  } else if (t == HK_FLOAT64) {
    double *f = p;
    for (size_t i = 0; i < count; i++) {
      uint64_t r = rng_next(&s);
      if (r % 16 == 1)
        memcpy(&f[i], &r, 8);
      else
        f[i] = (double)((int64_t)(r >> 20) % 2000001 - 1000000) / 9973.0;
    }
  } else {
    fill_random(p, count * hk_dtype_size(t), seed);
  }
}

typedef struct pair {
  hk_dtype src, dst;
} pair;

static void run_batch(hk_device *dev, hk_dtype st, hk_dtype dt, int src_host,
                      int dst_host) {
  const hk_device_ops *ops = dev->ops;
  enum { N = 300 };
  size_t ss = hk_dtype_size(st), ds = hk_dtype_size(dt);
  size_t soff[N], doff[N], cnt[N], stot = 0, dtot = 0;
  hk_dev_copy items[N];
  for (int k = 0; k < N; k++) {
    cnt[k] = (size_t)((k * 7919) % 1500) + (k % 10 == 0 ? 0 : 1);
    stot += k % 3; /* odd alignments (in elements) */
    soff[k] = stot;
    stot += cnt[k];
    dtot += k % 2;
    doff[k] = dtot;
    dtot += cnt[k];
  }
  unsigned char *hsrc = malloc(stot * ss), *out = calloc(dtot, ds),
                *want = calloc(dtot, ds);
  fill_values(hsrc, stot, st, (uint64_t)st * 31 + dt);
  char *dsrc = NULL, *ddst = NULL, *hdst = calloc(dtot, ds);
  assert_int_equal(ops->mem_alloc(dev, stot * ss, (void **)&dsrc), HK_OK);
  assert_int_equal(ops->mem_alloc(dev, dtot * ds, (void **)&ddst), HK_OK);
  assert_int_equal(ops->memcpy_async(dev, dsrc, hsrc, stot * ss, NULL), HK_OK);
  char *src = src_host ? (char *)hsrc : dsrc;
  char *dst = dst_host ? hdst : ddst;
  for (int k = 0; k < N; k++) {
    double scale = k % 4 == 0 ? 1.0 : 0.25 + 0.01 * k;
    int divisor = k % 3 == 0 ? 1 : k % 7 + 2;
    if (k % 11 == 0)
      divisor = 0;
    items[k] = (hk_dev_copy){
        dst + doff[k] * ds, src + soff[k] * ss, cnt[k], scale, divisor, 1.0};
    host_item(want + doff[k] * ds, hsrc + soff[k] * ss, cnt[k], st, dt, scale,
              divisor);
  }
  assert_int_equal(ops->batch_copy(dev, items, N, st, dt, NULL), HK_OK);
  if (dst_host) {
    sync_stream(dev, NULL);
    memcpy(out, hdst, dtot * ds);
  } else {
    assert_int_equal(ops->memcpy_async(dev, out, ddst, dtot * ds, NULL), HK_OK);
    sync_stream(dev, NULL);
  }
  if (memcmp(out, want, dtot * ds) != 0) {
    for (size_t i = 0; i < dtot * ds; i++)
      if (out[i] != want[i])
        fail_msg("%s -> %s (src %s, dst %s): byte %zu differs: %02x vs %02x",
                 hk_dtype_name(st), hk_dtype_name(dt),
                 src_host ? "host" : "device", dst_host ? "host" : "device", i,
                 out[i], want[i]);
  }
  ops->mem_free(dev, dsrc);
  ops->mem_free(dev, ddst);
  free(hsrc);
  free(out);
  free(want);
  free(hdst);
}

static void test_batch_copy_bits(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  static const pair pairs[] = {
      {HK_FLOAT32, HK_FLOAT32}, {HK_FLOAT64, HK_FLOAT64},
      {HK_FLOAT16, HK_FLOAT16}, {HK_BFLOAT16, HK_BFLOAT16},
      {HK_INT8, HK_INT8},       {HK_UINT8, HK_UINT8},
      {HK_INT32, HK_INT32},     {HK_INT64, HK_INT64},
      {HK_INT16, HK_INT16},     {HK_BOOL, HK_BOOL},
      {HK_FLOAT32, HK_FLOAT16}, {HK_FLOAT32, HK_BFLOAT16},
      {HK_FLOAT16, HK_FLOAT32}, {HK_BFLOAT16, HK_FLOAT32},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
    run_batch(dev, pairs[i].src, pairs[i].dst, 0, 0);
  /* unpack to the host and pack from it */
  run_batch(dev, HK_FLOAT32, HK_FLOAT16, 0, 1);
  run_batch(dev, HK_BFLOAT16, HK_FLOAT32, 1, 0);
}

/* The items array is copied at enqueue: clobbering it afterwards changes
 * nothing. */
static void test_batch_items_copied(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream s = new_stream(dev);
  float src[64], out[64];
  for (int i = 0; i < 64; i++)
    src[i] = (float)i;
  char *d;
  assert_int_equal(ops->mem_alloc(dev, sizeof src, (void **)&d), HK_OK);
  flag gate;
  flag_init(&gate);
  assert_int_equal(hk_emu_stream_host_fn(dev, s, gate_fn, &gate), HK_OK);
  hk_dev_copy *items = malloc(2 * sizeof *items);
  items[0] = (hk_dev_copy){d, src, 32, 2.0, 1, 1.0};
  items[1] = (hk_dev_copy){d + 128, src + 32, 32, 1.0, 4, 1.0};
  assert_int_equal(ops->batch_copy(dev, items, 2, HK_FLOAT32, HK_FLOAT32, s),
                   HK_OK);
  memset(items, 0xff, 2 * sizeof *items);
  free(items);
  assert_int_equal(ops->memcpy_async(dev, out, d, sizeof out, s), HK_OK);
  flag_set(&gate);
  sync_stream(dev, s);
  for (int i = 0; i < 32; i++)
    assert_true(out[i] == 2.0f * (float)i);
  for (int i = 32; i < 64; i++)
    assert_true(out[i] == (float)i / 4.0f);
  flag_done(&gate);
  ops->mem_free(dev, d);
}

/* ---- streams ---- */

static void test_stream_order(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream s;
  assert_int_equal(ops->stream_create(dev, &s), HK_OK);
  logbook b = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  log_arg args[40];
  /* a chain of copies where each needs the one before, with host callbacks
   * in between: values and log must come out in enqueue order */
  int32_t *d;
  assert_int_equal(ops->mem_alloc(dev, 41 * 4, (void **)&d), HK_OK);
  int32_t seed = 12345, out[41] = {0};
  assert_int_equal(ops->memcpy_async(dev, d, &seed, 4, s), HK_OK);
  for (int i = 0; i < 40; i++) {
    if (i == 10)
      assert_int_equal(hk_emu_stream_delay(dev, s, 5), HK_OK);
    assert_int_equal(ops->memcpy_async(dev, d + i + 1, d + i, 4, s), HK_OK);
    args[i] = (log_arg){&b, i};
    assert_int_equal(hk_emu_stream_host_fn(dev, s, log_fn, &args[i]), HK_OK);
  }
  assert_int_equal(ops->memcpy_async(dev, out, d, sizeof out, s), HK_OK);
  ops->stream_destroy(dev, s); /* waits for all of it */
  assert_int_equal(b.n, 40);
  for (int i = 0; i < 40; i++)
    assert_int_equal(b.v[i], i);
  for (int i = 0; i < 41; i++)
    assert_int_equal(out[i], 12345);
  ops->mem_free(dev, d);
}

static void set_int(void *arg) { *(int *)arg = 1; }

static void test_stream_destroy_waits(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream s;
  assert_int_equal(ops->stream_create(dev, &s), HK_OK);
  int done = 0;
  char *d;
  unsigned char out[4096] = {0};
  assert_int_equal(ops->mem_alloc(dev, sizeof out, (void **)&d), HK_OK);
  assert_int_equal(hk_emu_stream_delay(dev, s, 20), HK_OK);
  assert_int_equal(ops->fill(dev, d, sizeof out, HK_UINT8, "\x77", s), HK_OK);
  assert_int_equal(ops->memcpy_async(dev, out, d, sizeof out, s), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, s, set_int, &done), HK_OK);
  ops->stream_destroy(dev, s);
  assert_int_equal(done, 1);
  for (size_t i = 0; i < sizeof out; i++)
    assert_int_equal(out[i], 0x77);
  ops->mem_free(dev, d);
}

/* mem_free while an op on the memory is queued: the op still sees it. */
static void test_free_while_queued(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream s = new_stream(dev);
  char *d;
  unsigned char out[100] = {0};
  assert_int_equal(ops->mem_alloc(dev, 100, (void **)&d), HK_OK);
  assert_int_equal(ops->fill(dev, d, 100, HK_UINT8, "\x33", s), HK_OK);
  flag gate;
  flag_init(&gate);
  assert_int_equal(hk_emu_stream_host_fn(dev, s, gate_fn, &gate), HK_OK);
  assert_int_equal(ops->memcpy_async(dev, out, d, 100, s), HK_OK);
  ops->mem_free(dev, d);
  assert_int_equal(hk_emu_live_allocations(), 0);
  assert_int_equal(ops->pointer_kind(dev, d, NULL), HK_MEM_HOST);
  flag_set(&gate);
  sync_stream(dev, s);
  for (int i = 0; i < 100; i++)
    assert_int_equal(out[i], 0x33);
  flag_done(&gate);
}

static void test_default_stream(void **state) {
  hk_device *dev = *state, *dev2 = open_emu(1);
  const hk_device_ops *ops = dev->ops;
  /* two handles share the process's default stream: order across them */
  logbook b = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  log_arg a1 = {&b, 1}, a2 = {&b, 2};
  flag gate;
  flag_init(&gate);
  assert_int_equal(hk_emu_stream_host_fn(dev, NULL, gate_fn, &gate), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev2, NULL, log_fn, &a2), HK_OK);
  log_fn(&a1);
  flag_set(&gate);
  hk_dev_event e = new_event(dev);
  assert_int_equal(ops->event_record(dev, e, NULL), HK_OK);
  sync_stream(dev2, NULL);
  expect_done(dev, e, 1);
  expect_log(&b, (const int[]){1, 2}, 2);
  flag_done(&gate);
  hk_device_close(dev2);
}

/* ---- events ---- */

/* A waiting stream really waits: the producer is delayed by the backend and
 * the consumer must still see the producer's data, and run after it. */
static void test_wait_event_waits(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream a = new_stream(dev), b = new_stream(dev);
  hk_dev_event e = new_event(dev);
  logbook book = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  log_arg la = {&book, 'A'}, lb = {&book, 'B'};
  enum { N = 1 << 16 };
  int32_t *src = malloc(N * 4), *out = malloc(N * 4);
  for (int i = 0; i < N; i++)
    src[i] = i * 3 + 1;
  memset(out, 0, N * 4);
  char *d;
  assert_int_equal(ops->mem_alloc(dev, N * 4, (void **)&d), HK_OK);
  int32_t zero = 0;
  assert_int_equal(ops->fill(dev, d, N, HK_INT32, &zero, a), HK_OK);
  sync_stream(dev, a);
  /* producer: slow, then writes, then records */
  assert_int_equal(hk_emu_stream_delay(dev, a, 100), HK_OK);
  assert_int_equal(ops->memcpy_async(dev, d, src, N * 4, a), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, log_fn, &la), HK_OK);
  assert_int_equal(ops->event_record(dev, e, a), HK_OK);
  /* consumer: waits on the event, reads */
  assert_int_equal(ops->stream_wait_event(dev, b, e), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, b, log_fn, &lb), HK_OK);
  assert_int_equal(ops->memcpy_async(dev, out, d, N * 4, b), HK_OK);
  sync_stream(dev, b);
  expect_log(&book, (const int[]){'A', 'B'}, 2);
  assert_memory_equal(out, src, N * 4);
  ops->mem_free(dev, d);
  free(src);
  free(out);
}

/* stream_wait_event waits for the record current at the call; a later
 * re-record moves the event (query) but not that wait. */
static void test_wait_uses_record_at_call(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream a = new_stream(dev), b = new_stream(dev);
  hk_dev_event e = new_event(dev);
  flag gate, b_done;
  flag_init(&gate);
  flag_init(&b_done);
  logbook book = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
  log_arg a1 = {&book, 1}, a2 = {&book, 2}, b1 = {&book, 3};
  assert_int_equal(hk_emu_stream_host_fn(dev, a, log_fn, &a1), HK_OK);
  assert_int_equal(ops->event_record(dev, e, a), HK_OK);
  assert_int_equal(ops->stream_wait_event(dev, b, e), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, gate_fn, &gate), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, log_fn, &a2), HK_OK);
  assert_int_equal(ops->event_record(dev, e, a), HK_OK); /* re-record */
  assert_int_equal(hk_emu_stream_host_fn(dev, b, log_fn, &b1), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, b, flag_set, &b_done), HK_OK);
  /* b finishes while a is held at the gate */
  assert_true(flag_wait(&b_done));
  expect_done(dev, e, 0); /* the event now stands behind the gate */
  flag_set(&gate);
  sync_stream(dev, a);
  expect_done(dev, e, 1);
  expect_log(&book, (const int[]){1, 3, 2}, 3);
  flag_done(&gate);
  flag_done(&b_done);
}

static void test_event_query_rules(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream a = new_stream(dev), b = new_stream(dev);
  hk_dev_event e = new_event(dev);
  /* never recorded: done, and waiting on it waits for nothing */
  expect_done(dev, e, 1);
  flag gate;
  flag_init(&gate);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, gate_fn, &gate), HK_OK);
  assert_int_equal(ops->stream_wait_event(dev, a, e), HK_OK);
  assert_int_equal(ops->stream_wait_event(dev, b, e), HK_OK);
  sync_stream(dev, b); /* not held by anything */
  /* recorded behind a gate: not done until the stream passes it */
  assert_int_equal(ops->event_record(dev, e, a), HK_OK);
  expect_done(dev, e, 0);
  flag_set(&gate);
  sync_stream(dev, a);
  expect_done(dev, e, 1);
  /* re-recording moves the capture point */
  flag gate2;
  flag_init(&gate2);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, gate_fn, &gate2), HK_OK);
  assert_int_equal(ops->event_record(dev, e, a), HK_OK);
  expect_done(dev, e, 0);
  /* destroying an event whose record is still queued is fine */
  hk_dev_event e2;
  assert_int_equal(ops->event_create(dev, &e2), HK_OK);
  assert_int_equal(ops->event_record(dev, e2, a), HK_OK);
  ops->event_destroy(dev, e2);
  flag_set(&gate2);
  sync_stream(dev, a);
  expect_done(dev, e, 1);
  flag_done(&gate);
  flag_done(&gate2);
}

static void test_event_elapsed(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream a = new_stream(dev);
  hk_dev_event e0 = new_timed_event(dev), e1 = new_timed_event(dev),
               never = new_timed_event(dev);
  float ms = -1;
  assert_int_equal(ops->event_elapsed(dev, e0, never, &ms), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "never recorded"));
  flag gate;
  flag_init(&gate);
  assert_int_equal(ops->event_record(dev, e0, a), HK_OK);
  assert_int_equal(hk_emu_stream_delay(dev, a, 30), HK_OK);
  assert_int_equal(hk_emu_stream_host_fn(dev, a, gate_fn, &gate), HK_OK);
  assert_int_equal(ops->event_record(dev, e1, a), HK_OK);
  assert_int_equal(ops->event_elapsed(dev, e0, e1, &ms), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "not completed"));
  flag_set(&gate);
  sync_stream(dev, a);
  assert_int_equal(ops->event_elapsed(dev, e0, e1, &ms), HK_OK);
  assert_true(ms >= 29.9f && ms < 60000.0f);
  float back = 0;
  assert_int_equal(ops->event_elapsed(dev, e1, e0, &back), HK_OK);
  assert_true(back <= -29.9f);
  flag_done(&gate);
}

static void test_open_errors(void **state) {
  (void)state;
  hk_device_options o;
  memset(&o, 0, sizeof o);
  hk_device *dev = (hk_device *)&o;
  o.device_index = -1;
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_ERR_INVALID_ARG);
  assert_null(dev);
  o.device_index = 0;
  o.fault.kind = 9;
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_device_open("nonsense", &o, &dev), HK_ERR_CONFIG);
  /* an operation given something that is not an emu handle */
  hk_device other = {0};
  void *p = NULL;
  assert_int_equal(hk_emu_device_ops.mem_alloc(&other, 8, &p),
                   HK_ERR_INVALID_ARG);
  assert_null(p);
  assert_int_equal(hk_emu_stream_delay(NULL, NULL, 1), HK_ERR_INVALID_ARG);
}

/* The devices a process sees: an explicit index among them, the local
 * rank modulo their count, anything else refused naming the index and the
 * count; the handle says which it opened. */
static void test_devices(void **state) {
  (void)state;
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.emu_devices = 2;
  hk_device *dev = NULL;
  o.device_index = 2; /* HK_GPU=2 with two devices */
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_ERR_CONFIG);
  assert_null(dev);
  assert_non_null(strstr(hk_last_error(), "device 2 requested (HK_GPU)"));
  assert_non_null(strstr(hk_last_error(), "but 2 visible"));
  o.emu_devices = 0; /* unset: one device */
  o.device_index = 1;
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "but 1 visible"));
  o.emu_devices = 2;
  o.device_index = 1;
  assert_int_equal(hk_device_open("emu", &o, &dev), HK_OK);
  assert_int_equal(dev->index, 1);
  assert_string_equal(dev->ops->describe(dev), "emu 1");
  hk_device_close(dev);
  /* local ranks 0..4 over two devices: 0 1 0 1 0 */
  o.by_local_rank = 1;
  for (int lr = 0; lr < 5; lr++) {
    o.device_index = lr;
    assert_int_equal(hk_device_open("emu", &o, &dev), HK_OK);
    assert_int_equal(dev->index, lr % 2);
    hk_device_close(dev);
  }
  assert_int_equal(hk_device_pick(NULL, 1), 0);
  assert_int_equal(hk_device_pick(&o, 0), -1);
}

/* Each thread's current device: none until it enters a handle, then the
 * device of the last handle it entered; set_current puts any back. */
static void *other_thread_current(void *arg) {
  hk_device *dev = arg;
  int *seen = malloc(2 * sizeof *seen);
  seen[0] = dev->ops->current(dev);
  hk_dev_event e = NULL;
  assert_int_equal(dev->ops->event_create(dev, &e), HK_OK);
  dev->ops->event_destroy(dev, e);
  seen[1] = dev->ops->current(dev);
  return seen;
}

static void test_current_device(void **state) {
  (void)state;
  hk_device *d0 = open_emu(0), *d2 = open_emu(2);
  const hk_device_ops *o = d0->ops;
  o->set_current(d0, -1);
  assert_int_equal(o->current(d0), -1);
  void *p = NULL;
  assert_int_equal(o->mem_alloc(d2, 64, &p), HK_OK);
  assert_int_equal(o->current(d0), 2); /* asked of any handle */
  int idx = -1;
  assert_int_equal(o->pointer_kind(d0, p, &idx), HK_MEM_DEVICE);
  assert_int_equal(idx, 2); /* the allocation's device, not the asker's */
  assert_int_equal(o->current(d2), 0);
  o->set_current(d0, 2);
  assert_int_equal(o->current(d0), 2);
  /* another thread has its own */
  pthread_t t;
  void *seen = NULL;
  assert_int_equal(pthread_create(&t, NULL, other_thread_current, d0), 0);
  assert_int_equal(pthread_join(t, &seen), 0);
  assert_int_equal(((int *)seen)[0], -1);
  assert_int_equal(((int *)seen)[1], 0);
  free(seen);
  assert_int_equal(o->current(d0), 2);
  o->mem_free(d2, p);
  hk_device_close(d2);
  close_emu(d0);
}

/* event_create makes events without timing (cudaEventDisableTiming):
 * event_elapsed refuses them, completed or not, as CUDA does. */
static void test_event_untimed(void **state) {
  hk_device *dev = *state; /* emu device 0, see emu_up */
  const hk_device_ops *ops = dev->ops;
  hk_dev_stream a = new_stream(dev);
  hk_dev_event t = new_timed_event(dev), u = new_event(dev);
  assert_int_equal(ops->event_record(dev, t, a), HK_OK);
  assert_int_equal(ops->event_record(dev, u, a), HK_OK);
  sync_stream(dev, a);
  expect_done(dev, u, 1); /* it orders and completes as any event */
  float ms = -1;
  assert_int_equal(ops->event_elapsed(dev, t, u, &ms), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "the end event was made without "
                                          "timing"));
  assert_int_equal(ops->event_elapsed(dev, u, t, &ms), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "the start event"));
  assert_int_equal(ops->event_elapsed(dev, t, t, &ms), HK_OK);
  assert_true(ms == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EMU_TEST(test_event_untimed),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_current_device),
      EMU_TEST(test_host_deref_crashes),
      cmocka_unit_test(test_pointer_kind),
      EMU_TEST(test_free_errors),
      EMU_TEST(test_copies_round_trip),
      EMU_TEST(test_bounds_and_overlap),
      EMU_TEST(test_fill),
      EMU_TEST(test_batch_copy_bits),
      EMU_TEST(test_batch_items_copied),
      EMU_TEST(test_stream_order),
      EMU_TEST(test_stream_destroy_waits),
      EMU_TEST(test_free_while_queued),
      EMU_TEST(test_default_stream),
      EMU_TEST(test_wait_event_waits),
      EMU_TEST(test_wait_uses_record_at_call),
      EMU_TEST(test_event_query_rules),
      EMU_TEST(test_event_elapsed),
      cmocka_unit_test(test_open_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
