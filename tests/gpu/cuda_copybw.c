/*
 * cuda_copybw.c - the batched copy kernels' bandwidth on a real GPU
 * against a plain cudaMemcpyAsync device-to-device of the same bytes in
 * the same run (the ceiling for pack/unpack), through the cuda backend's
 * ops (device/device.h). scripts/device-check.sh runs it.
 *
 *   cuda_copybw [MiB ...]      (default: 1 16 64 256 1024)
 *
 * For each size S: memcpy (the ceiling), a plain copy of one item, a
 * fused batch of 256 items of S/256 bytes (pack), the same batch with
 * divisor 4 (the average's unpack), one item scaled by 0.5, float32 ->
 * float16 of one item. Bandwidth counts bytes read + written; each row is
 * the median of 5 timings (CUDA events) of `iters` back-to-back runs.
 * Exit: 0, 77 without a usable GPU (1 under HK_TEST_GPU=1), 1 on an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "device/device.h"

static hk_device *dev;
static const hk_device_ops *ops;

#define CHECK(call)                                                            \
  do {                                                                         \
    hk_status st_ = (call);                                                    \
    if (st_ != HK_OK) {                                                        \
      fprintf(stderr, "cuda_copybw: %s: %s\n", #call, hk_last_error());        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static void wait_event(hk_dev_event e) {
  int done = 0;
  while (!done)
    CHECK(ops->event_query(dev, e, &done));
}

typedef struct variant {
  const char *name;
  int nitems;    /* items the S bytes are cut into */
  double scale;  /* 1: none */
  int divisor;   /* <= 1: none */
  hk_dtype dst;  /* HK_FLOAT32, or HK_FLOAT16 (compression) */
  int is_memcpy; /* the ceiling */
} variant;

static const variant variants[] = {
    {"memcpy", 1, 1.0, 0, HK_FLOAT32, 1},
    {"copy1", 1, 1.0, 0, HK_FLOAT32, 0},
    {"pack256", 256, 1.0, 0, HK_FLOAT32, 0},
    {"avg256", 256, 1.0, 4, HK_FLOAT32, 0},
    {"scale1", 1, 0.5, 0, HK_FLOAT32, 0},
    {"to_f16", 1, 1.0, 0, HK_FLOAT16, 0},
};

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  hk_config cfg;
  if (hk_config_load(&cfg) != HK_OK) {
    fprintf(stderr, "cuda_copybw: %s\n", hk_last_error());
    return 1;
  }
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.device_index = cfg.gpu >= 0 ? cfg.gpu : 0;
  if (hk_device_open("cuda", &o, &dev) != HK_OK) {
    printf("cuda_copybw: no usable GPU: %s\n", hk_last_error());
    return cfg.test_gpu ? 1 : 77;
  }
  ops = dev->ops;
  size_t mib[16] = {1, 16, 64, 256, 1024};
  int nsizes = 5;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 16; i++)
      mib[nsizes++] = strtoul(argv[i], NULL, 10);
  }
  printf("# cuda_copybw on %s: bytes read + written per second; ratio to "
         "memcpy (cudaMemcpyAsync device to device) of the same size\n",
         ops->describe(dev));
  printf("#%13s %-8s %6s %6s %12s %10s %8s\n", "size(B)", "kernel", "items",
         "iters", "time(us)", "GB/s", "ratio");
  hk_dev_stream s;
  hk_dev_event e0, e1;
  CHECK(ops->stream_create(dev, &s));
  CHECK(ops->event_create_timed(dev, &e0));
  CHECK(ops->event_create_timed(dev, &e1));
  for (int k = 0; k < nsizes; k++) {
    size_t bytes = mib[k] << 20, n = bytes / 4;
    void *src, *dst;
    CHECK(ops->mem_alloc(dev, bytes, &src));
    CHECK(ops->mem_alloc(dev, bytes, &dst));
    unsigned char value[8] = {0};
    float x = 1.5f; /* finite data: no NaN in the arithmetic variants */
    memcpy(value, &x, sizeof x);
    CHECK(ops->fill(dev, src, n, HK_FLOAT32, value, s));
    int iters = (int)((8ull << 30) / (2 * bytes));
    iters = iters < 3 ? 3 : iters > 100 ? 100 : iters;
    double memcpy_gbs = 0;
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
      const variant *var = &variants[v];
      int m = var->nitems;
      hk_dev_copy *items = calloc((size_t)m, sizeof *items);
      size_t per = n / (size_t)m, dsz = var->dst == HK_FLOAT16 ? 2 : 4;
      for (int i = 0; i < m; i++) {
        items[i].src = (const char *)src + (size_t)i * per * 4;
        items[i].dst = (char *)dst + (size_t)i * per * dsz;
        items[i].count = i == m - 1 ? n - per * (size_t)(m - 1) : per;
        items[i].scale = var->scale;
        items[i].divisor = var->divisor;
      }
      float t[5];
      for (int rep = -1; rep < 5; rep++) { /* rep -1: warm-up */
        CHECK(ops->event_record(dev, e0, s));
        for (int it = 0; it < iters; it++) {
          if (var->is_memcpy)
            CHECK(ops->memcpy_async(dev, dst, src, bytes, s));
          else
            CHECK(ops->batch_copy(dev, items, (size_t)m, HK_FLOAT32, var->dst,
                                  s));
        }
        CHECK(ops->event_record(dev, e1, s));
        wait_event(e1);
        float ms;
        CHECK(ops->event_elapsed(dev, e0, e1, &ms));
        if (rep >= 0)
          t[rep] = ms / (float)iters;
      }
      qsort(t, 5, sizeof *t, cmp_float);
      double moved = (double)bytes + (double)n * (double)dsz;
      double gbs = moved / ((double)t[2] * 1e6);
      if (var->is_memcpy)
        memcpy_gbs = gbs;
      printf(" %13zu %-8s %6d %6d %12.1f %10.1f %8.3f\n", bytes, var->name, m,
             iters, (double)t[2] * 1e3, gbs,
             memcpy_gbs > 0 ? gbs / memcpy_gbs : 0.0);
      fflush(stdout);
      free(items);
    }
    ops->mem_free(dev, src);
    ops->mem_free(dev, dst);
  }
  ops->event_destroy(dev, e0);
  ops->event_destroy(dev, e1);
  ops->stream_destroy(dev, s);
  hk_device_close(dev);
  return 0;
}
