/*
 * data.c - loading and cross-checking the Fashion-MNIST files (data.h).
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void split_free(data_split *s) {
  idx_free(&s->image_idx);
  idx_free(&s->label_idx);
  memset(s, 0, sizeof *s);
}

static int load_split(const char *dir, const char *images, const char *labels,
                      size_t limit, data_split *s, char *err, size_t cap) {
  char ipath[4096], lpath[4096];
  memset(s, 0, sizeof *s);
  if (snprintf(ipath, sizeof ipath, "%s/%s", dir, images) >=
          (int)sizeof ipath ||
      snprintf(lpath, sizeof lpath, "%s/%s", dir, labels) >=
          (int)sizeof lpath) {
    snprintf(err, cap, "%s: data directory path too long", dir);
    return -1;
  }
  static const uint32_t image_dims[2] = {DATA_ROWS, DATA_COLS};
  if (idx_load(ipath, 3, image_dims, limit, &s->image_idx, err, cap) != 0)
    return -1;
  if (idx_load(lpath, 1, NULL, limit, &s->label_idx, err, cap) != 0)
    goto fail;
  if (s->image_idx.file_count != s->label_idx.file_count) {
    snprintf(err, cap,
             "%s: count mismatch: %zu labels, but %s holds %zu images", lpath,
             s->label_idx.file_count, images, s->image_idx.file_count);
    goto fail;
  }
  s->n = s->image_idx.count;
  s->images = s->image_idx.data;
  s->labels = s->label_idx.data;
  for (size_t i = 0; i < s->n; i++)
    if (s->labels[i] >= DATA_CLASSES) {
      snprintf(err, cap, "%s: label %u of record %zu is not a class 0..%d",
               lpath, s->labels[i], i, DATA_CLASSES - 1);
      goto fail;
    }
  return 0;
fail:
  split_free(s);
  return -1;
}

int data_load(const char *dir, size_t limit_train, size_t limit_test,
              data_set *out, char *err, size_t err_cap) {
  memset(out, 0, sizeof *out);
  struct stat st;
  const char *why = NULL;
  if (stat(dir, &st) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "not a directory";
  if (why) {
    snprintf(err, err_cap,
             "%s: cannot read the data directory: %s (Fashion-MNIST: "
             "apt-get install dataset-fashion-mnist, or pass --data DIR)",
             dir, why);
    return -1;
  }
  if (load_split(dir, DATA_TRAIN_IMAGES, DATA_TRAIN_LABELS, limit_train,
                 &out->train, err, err_cap) != 0)
    return -1;
  if (load_split(dir, DATA_TEST_IMAGES, DATA_TEST_LABELS, limit_test,
                 &out->test, err, err_cap) != 0) {
    data_free(out);
    return -1;
  }
  return 0;
}

void data_free(data_set *d) {
  split_free(&d->train);
  split_free(&d->test);
}
