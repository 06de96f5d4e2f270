/*
 * data.h - the Fashion-MNIST data set (Xiao, Rasul & Vollgraf 2017,
 * arXiv:1708.07747) as the trainer uses it: 60,000 training and 10,000
 * test images of 28x28 unsigned bytes, labels 0..9, read from the four
 * IDX files of the original distribution in one directory (Debian's
 * dataset-fashion-mnist installs them in DATA_DEFAULT_DIR).
 */
#ifndef HK_TRAIN_DATA_H
#define HK_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "idx.h"

#define DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define DATA_TRAIN_IMAGES "train-images-idx3-ubyte.gz"
#define DATA_TRAIN_LABELS "train-labels-idx1-ubyte.gz"
#define DATA_TEST_IMAGES "t10k-images-idx3-ubyte.gz"
#define DATA_TEST_LABELS "t10k-labels-idx1-ubyte.gz"
#define DATA_ROWS 28
#define DATA_COLS 28
#define DATA_PIXELS (DATA_ROWS * DATA_COLS)
#define DATA_CLASSES 10
/** Mean and standard deviation of the training pixels scaled to [0, 1],
 *  computed over all 60,000 x 784 of them (0.286041, 0.353024); the
 *  trainer feeds (pixel / 255 - DATA_MEAN) / DATA_STD. */
#define DATA_MEAN 0.2860f
#define DATA_STD 0.3530f

/** One split: n images of DATA_PIXELS bytes (0..255) and n labels. */
typedef struct data_split {
  size_t n;
  const uint8_t *images; /* n * DATA_PIXELS bytes, row-major; in the idx */
  const uint8_t *labels; /* n bytes, each < DATA_CLASSES */
  idx_array image_idx, label_idx; /* own the bytes above */
} data_split;

typedef struct data_set {
  data_split train, test;
} data_set;

/**
 * Loads the four files from `dir`, keeping the first limit_train training
 * and limit_test test samples (0 = all; a limit beyond the file keeps
 * all). Checks, for each file, everything idx_load checks (existence,
 * magic, dims, truncation, trailing data), then that each images file and
 * its labels file declare the same count ("count mismatch: ...") and that
 * every loaded label is below DATA_CLASSES.
 * Returns 0, or -1 with one line in err[err_cap] naming the file (its full
 * path) and the problem; *out is then empty. Free with data_free.
 */
int data_load(const char *dir, size_t limit_train, size_t limit_test,
              data_set *out, char *err, size_t err_cap);

/** Frees what data_load allocated and zeroes *d. Safe on a zeroed set. */
void data_free(data_set *d);

#endif
