/*
 * train_fake_row.c - a test module standing in for libhk_train_cuda.so
 * (examples/train/compute.h): the CPU row's arithmetic behind the device
 * interface (host = 0), so that without a GPU `train --device cuda`
 * (TRAIN_CUDA_MODULE pointing here) runs every device-side path of the
 * model and the trainer: weights, statistics, batch, dLoss/dlogits and
 * gradients in the row's own buffers, the gradients handed to hk from
 * them with hk_set_stream / hk_wait_stream (host memory to hk, so those
 * are the host tensor's submit and wait), the step's tail on the row
 * (loss sums, loss scaling, finite check, optimiser on the row's weights
 * and state: the CPU row's entries), the copies to and from the host for
 * the initial weights, checkpoints, resume and the end, and the input
 * pipeline's staging slots. Same arithmetic, so the weights must equal
 * the CPU row's bit for bit (tests/integration/test_train.c).
 *
 * Row name "fake"; only device 0 opens (a one-GPU machine: at np 2 the
 * local rank 1 fails unless HK_GPU=0). Staging: malloc'd slots, stage_put a
 * memcpy on the pipeline's thread, stage_take the slot's buffer (the pipeline's
 * lock orders the two).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"

#define FAKE_SLOTS 65

typedef struct fake {
  int slots;
  size_t bytes;
  float *slot[FAKE_SLOTS];
} fake;

static int open_fake(compute *c) {
  if (c->device_index != 0) { /* a machine with one GPU */
    compute_fail(c, "fake: device %d requested, only device 0 here",
                 c->device_index);
    return -1;
  }
  if (!(c->impl = calloc(1, sizeof(fake)))) {
    compute_fail(c, "out of memory");
    return -1;
  }
  return 0;
}

static void close_fake(compute *c) {
  fake *f = c->impl;
  if (!f)
    return;
  for (int i = 0; i < f->slots; i++)
    free(f->slot[i]);
  free(f);
  c->impl = NULL;
}

static int stage_init_fake(compute *c, int slots, size_t bytes) {
  fake *f = c->impl;
  if (slots < 1 || slots > FAKE_SLOTS) {
    compute_fail(c, "stage_init: %d slots", slots);
    return -1;
  }
  f->bytes = bytes;
  for (; f->slots < slots; f->slots++)
    if (!(f->slot[f->slots] = malloc(bytes ? bytes : 4))) {
      compute_fail(c, "out of memory");
      return -1;
    }
  return 0;
}

static int stage_put_fake(compute *c, int slot, const void *host,
                          size_t bytes) {
  fake *f = c->impl;
  if (slot < 0 || slot >= f->slots || bytes > f->bytes) {
    snprintf(c->stage_err, sizeof c->stage_err,
             "stage_put: slot %d of %d, %zu bytes of %zu", slot, f->slots,
             bytes, f->bytes);
    return -1;
  }
  memcpy(f->slot[slot], host, bytes);
  return 0;
}

static const float *stage_take_fake(compute *c, int slot) {
  return ((fake *)c->impl)->slot[slot];
}

/* Its operations run at the call: the slot's reads are done already. */
static void stage_consumed_fake(compute *c, int slot) {
  (void)c;
  (void)slot;
}

/* The module's entry point, as libhk_train_cuda.so's. */
__attribute__((visibility("default"))) const compute_ops *
hk_train_compute_cuda(void) {
  static compute_ops ops;
  ops = compute_cpu_ops;
  ops.name = "fake";
  ops.host = 0;
  ops.open = open_fake;
  ops.close = close_fake;
  ops.stage_init = stage_init_fake;
  ops.stage_put = stage_put_fake;
  ops.stage_take = stage_take_fake;
  ops.stage_consumed = stage_consumed_fake;
  return &ops;
}
