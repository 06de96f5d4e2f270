/*
 * batch.h - one training or evaluation batch as the model consumes it, and
 * how it is made from the in-memory data set: gather of the sampled
 * records, optional augmentation, conversion to float, and a staging hook.
 *
 * Conversion: pixel p (0..255) becomes (p / 255 - DATA_MEAN) / DATA_STD
 * (data.h), float32, row-major B x DATA_PIXELS; labels are copied.
 *
 * Augmentation (--augment), per sample, in this order of draws from the
 * caller's rng: a vertical and a horizontal shift dy, dx uniform in
 * [-BATCH_CROP_PAD, BATCH_CROP_PAD] and a coin for a horizontal flip. The
 * sample becomes the 28 x 28 crop at offset (PAD + dy, PAD + dx) of the
 * image zero-padded by PAD pixels on every side, mirrored left-right when
 * the coin says so: the "pad, random crop, random flip" of He et al.,
 * "Deep Residual Learning for Image Recognition", CVPR 2016, section 4.2
 * (4 pixels on 32 x 32 CIFAR images; 2 here on 28 x 28, the same share).
 * Padding is raw 0, Fashion-MNIST's background. Equal rng states give
 * bitwise equal batches.
 *
 * Ownership: a batch owns its x and y. Thread-safety: a batch is used by
 * one thread at a time (prefetch.h hands batches between threads under a
 * lock).
 */
#ifndef HK_TRAIN_BATCH_H
#define HK_TRAIN_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "rng.h"

/** Pixels of zero padding on each side before the random crop. */
#define BATCH_CROP_PAD 2

typedef struct batch {
  size_t cap; /* samples x and y hold */
  size_t n;   /* samples filled */
  float *x;   /* cap x DATA_PIXELS floats, owned */
  uint8_t *y; /* cap labels, owned */
} batch;

/**
 * The stage every prepared batch goes through before the step may use it,
 * called on the thread that prepared it (the prefetch thread when there is
 * one). The trainer's CPU path uses it only with --precision bf16|fp16,
 * to round the batch to the compute type (train.c); otherwise there is
 * none (NULL). This is also the hook for the GPU backend: a copy into
 * pinned host memory and an asynchronous copy onto the device on a stream
 * of its own, recorded with an event the step waits on.
 * Returns 0, or non-zero to fail the batch (prefetch_next then reports it).
 */
typedef int (*batch_stage_fn)(void *ctx, batch *b);

/**
 * Called on the consumer's thread when the step is done with batch b
 * (prefetch_release), before its buffer may be prepared again: the GPU
 * backend records there that the compute stream has queued its last read
 * of b's device slot, so that the slot's next copy waits for that read
 * (stage.h). ctx is the stage hook's.
 */
typedef void (*batch_done_fn)(void *ctx, const batch *b);

/** Allocates room for cap >= 1 samples. Returns 0, or -1 (out of memory;
 *  *b is then zeroed). */
int batch_init(batch *b, size_t cap);
void batch_free(batch *b);

/**
 * Fills b with n <= b->cap samples of split s: records idx[0..n), or
 * first .. first + n - 1 when idx is NULL. aug: augment with draws from
 * *aug (see above), or NULL for none. Indices must be < s->n.
 */
void batch_fill(batch *b, const data_split *s, const uint32_t *idx,
                size_t first, size_t n, rng *aug);

#endif
