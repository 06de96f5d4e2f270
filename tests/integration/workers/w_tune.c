/*
 * w_tune STEPS - a training-like loop for --autotune's tests: a one-off
 * broadcast, then every step one grouped allreduce of 32 float tensors of
 * 16384 elements (64 KiB each, 2 MiB a step), whose values are small
 * integers so that every sum is exact: each result is checked against the
 * serial sum, whatever the fusion threshold the autotuner is trying. Each
 * rank folds every result into a hash (FNV-1a) and prints "hash H" at the
 * end: the driver compares the ranks'.
 *
 *   w_tune STEPS KILL_SLOT KILL_STEP   (an elastic job: hkrun --min-np)
 *
 * also makes the worker started as rank KILL_SLOT kill itself (SIGKILL)
 * at the start of step KILL_STEP; the others re-form (hk_elastic_reset,
 * saying "reset: rank R of N") and go on from the step that failed.
 *
 *   w_tune STEPS dev   (HK_DEVICE=emu)
 *
 * puts the tensors on the emulated device instead, and counts the copies
 * to host memory that each step's allreduce enqueues (hk_emu_copies_to_
 * host): each time the count or their bytes differ from the step
 * before's, it prints "staged from step S: C copies, B bytes". How a
 * batch is staged follows the staging chunk and the compression in use,
 * so the driver sees from these lines which setting each step ran with.
 *
 *   w_tune STEPS barrier | gather
 *
 * ends each step with an hk_barrier (never fused), or with an allgather
 * of one row of 4 floats (fused by the threshold too), checked.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "device/device.h"
#include "device/emu/emu.h"
#include "wcommon.h"

static hk_device *dev; /* dev mode: the emu device hk uses */

/* The emu device hk uses (HK_GPU, else the local rank's), as w_device. */
static void open_device(void) {
  hk_config cfg;
  HKT_OK(hk_config_load(&cfg));
  hk_device_options opts = {.device_index = cfg.gpu,
                            .emu_devices = cfg.emu_devices};
  if (cfg.gpu < 0) {
    opts.device_index = hk_local_rank();
    opts.by_local_rank = 1;
  }
  HKT_OK(hk_device_open("emu", &opts, &dev));
}

/* Copies bytes between host and device memory (either way), and waits. */
static void copy_sync(void *dst, const void *src, size_t bytes) {
  HKT_OK(dev->ops->memcpy_async(dev, dst, src, bytes, NULL));
  hk_dev_event e;
  HKT_OK(dev->ops->event_create(dev, &e));
  HKT_OK(dev->ops->event_record(dev, e, NULL));
  for (int done = 0; !done;)
    HKT_OK(dev->ops->event_query(dev, e, &done));
  dev->ops->event_destroy(dev, e);
}

#define NT 32
#define ELEMS 16384

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  const int kill_slot = argc > 3 ? atoi(argv[2]) : -1;
  const int kill_step = argc > 3 ? atoi(argv[3]) : -1;
  const int on_dev = argc == 3 && !strcmp(argv[2], "dev");
  const int barrier = argc == 3 && !strcmp(argv[2], "barrier");
  const int gather = argc == 3 && !strcmp(argv[2], "gather");
  HKT_OK(hk_init());
  if (on_dev)
    open_device();
  const int slot = hk_rank();
  int rank = hk_rank(), np = hk_size();
  float init[4] = {(float)rank, 0, 0, 0};
  HKT_OK(hk_broadcast("init", init, 4, HK_FLOAT32, 0));
  HKT_CHECK(init[0] == 0, "broadcast gave %g", init[0]);
  static float in[NT][ELEMS], out[NT][ELEMS];
  char names[NT][16];
  const char *nm[NT];
  const void *src[NT];
  void *dst[NT];
  size_t counts[NT];
  float *din = NULL, *dout = NULL;
  if (on_dev) {
    HKT_OK(dev->ops->mem_alloc(dev, sizeof in, (void **)&din));
    HKT_OK(dev->ops->mem_alloc(dev, sizeof out, (void **)&dout));
  }
  for (int t = 0; t < NT; t++) {
    snprintf(names[t], sizeof names[t], "grad.%02d", t);
    nm[t] = names[t];
    src[t] = on_dev ? (void *)(din + (size_t)t * ELEMS) : (void *)in[t];
    dst[t] = on_dev ? (void *)(dout + (size_t)t * ELEMS) : (void *)out[t];
    counts[t] = ELEMS;
  }
  size_t last_copies = 0, last_bytes = 0;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int step = 0; step < steps; step++) {
    if (slot == kill_slot && step == kill_step) {
      printf("dying at step %d\n", step);
      fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    for (int t = 0; t < NT; t++)
      for (int i = 0; i < ELEMS; i++)
        in[t][i] = (float)((rank + 1) * ((i + t + step) % 7));
    size_t bytes0 = 0, bytes1 = 0, copies0 = 0;
    if (on_dev) {
      copy_sync(din, in, sizeof in);
      copies0 = hk_emu_copies_to_host(&bytes0);
    }
    hk_status st =
        hk_grouped_allreduce(nm, src, dst, counts, NT, HK_FLOAT32, HK_SUM);
    if (on_dev && st == HK_OK) {
      const size_t c = hk_emu_copies_to_host(&bytes1) - copies0;
      const size_t b = bytes1 - bytes0;
      if (c != last_copies || b != last_bytes)
        printf("staged from step %d: %zu copies, %zu bytes\n", step, c, b);
      last_copies = c;
      last_bytes = b;
      copy_sync(out, dout, sizeof out);
    }
    if (st == HK_ERR_RANKS_CHANGED) { /* this step again, by the others */
      HKT_OK(hk_elastic_reset());
      rank = hk_rank();
      np = hk_size();
      printf("reset: rank %d of %d\n", rank, np);
      step--;
      continue;
    }
    HKT_OK(st);
    for (int t = 0; t < NT; t++)
      for (int i = 0; i < ELEMS; i++) {
        const float want = (float)(np * (np + 1) / 2 * ((i + t + step) % 7));
        HKT_CHECK(out[t][i] == want, "step %d %s[%d]: %g, expected %g", step,
                  names[t], i, out[t][i], want);
      }
    if (barrier)
      HKT_OK(hk_barrier());
    if (gather) {
      float row[4] = {(float)rank, (float)step, 0, 0};
      void *all = NULL;
      size_t rows[64];
      HKT_OK(hk_allgather("gather", row, 1, 4, HK_FLOAT32, &all, rows));
      for (int r = 0; r < np && r < 64; r++)
        HKT_CHECK(rows[r] == 1 && ((float *)all)[4 * r] == (float)r &&
                      ((float *)all)[4 * r + 1] == (float)step,
                  "step %d: allgather row %d", step, r);
      hk_free(all);
    }
    const unsigned char *b = (const unsigned char *)out;
    for (size_t k = 0; k < sizeof out; k += 64)
      hash = (hash ^ b[k]) * 0x100000001b3ull;
  }
  printf("hash %016llx\n", (unsigned long long)hash);
  if (on_dev) {
    dev->ops->mem_free(dev, din);
    dev->ops->mem_free(dev, dout);
    hk_device_close(dev);
  }
  HKT_OK(hk_shutdown());
  return 0;
}
