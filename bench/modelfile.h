/*
 * modelfile.h - a model's gradient set, read from a .tsv file as in
 * bench/models/: one trainable tensor per
 * line, `name<TAB>shape`, the shape's dimensions (positive decimal
 * integers) joined by 'x' ("64x3x7x7"), in registration order; lines
 * starting with '#' and empty lines are skipped. Names must be unique and
 * at most HK_MAX_NAME_LEN bytes.
 */
#ifndef HKB_MODELFILE_H
#define HKB_MODELFILE_H

#include <stddef.h>

typedef struct hkb_tensor {
  char *name;   /* owned */
  size_t count; /* elements: the product of the dimensions */
} hkb_tensor;

typedef struct hkb_model {
  char *label; /* the file's base name without .tsv ("resnet50"); owned */
  char *path;  /* owned */
  hkb_tensor *tensors; /* in file order; owned */
  size_t ntensors;
  size_t total; /* elements over all tensors */
} hkb_model;

/**
 * Reads the model `spec`: a path (containing '/' or ending in ".tsv"), or
 * a name looked up as DIR/NAME.tsv. On error prints "hkbench: FILE:LINE:
 * what is wrong" (or FILE: why it cannot be read) to stderr and returns
 * -1; on success fills *m (free with hkb_model_free) and returns 0.
 */
int hkb_model_load(const char *spec, const char *dir, hkb_model *m);

/** Frees what hkb_model_load allocated. */
void hkb_model_free(hkb_model *m);

/**
 * Prints, for every .tsv file in DIR in name order, "name tensors params bytes
 * (as float32)". Returns 0, or -1 (message printed) if DIR cannot be
 * read or a file there is malformed.
 */
int hkb_model_list(const char *dir);

#endif
