/*
 * gradset.h - a model's gradient set (what hkbench replays and hkplan
 * predicts), read from a .tsv file as in bench/models/: one trainable tensor
 * per line, `name<TAB>shape`, the shape's dimensions (positive decimal
 * integers) joined by 'x' ("64x3x7x7"), in registration order; lines
 * starting with '#' and empty lines are skipped. Names must be unique and
 * at most HK_MAX_NAME_LEN bytes.
 */
#ifndef HK_PLANNER_GRADSET_H
#define HK_PLANNER_GRADSET_H

#include <stddef.h>

typedef struct hk_gradset_tensor {
  char *name;   /* owned */
  size_t count; /* elements: the product of the dimensions */
} hk_gradset_tensor;

typedef struct hk_gradset {
  char *label;     /* the file's base name without .tsv ("resnet50"); owned */
  char *path;      /* owned */
  const char *who; /* the program named in messages (borrowed) */
  hk_gradset_tensor *tensors; /* in file order; owned */
  size_t ntensors;
  size_t total; /* elements over all tensors */
} hk_gradset;

/**
 * Reads the model `spec`: a path (containing '/' or ending in ".tsv"), or
 * a name looked up as DIR/NAME.tsv. On error prints "WHO: FILE:LINE:
 * what is wrong" (or FILE: why it cannot be read; a file with no tensor
 * is "WHO: FILE: no tensors ...") to stderr and returns -1; on success
 * fills *m (free with hk_gradset_free) and returns 0. `who` (a static
 * string, kept in *m) names the program. Thread-safety: reentrant.
 */
int hk_gradset_load(const char *who, const char *spec, const char *dir,
                    hk_gradset *m);

/** Frees what hk_gradset_load allocated. */
void hk_gradset_free(hk_gradset *m);

/**
 * Prints, for every .tsv file in DIR in name order, "name tensors params bytes
 * (as float32)". Returns 0, or -1 (message printed) if DIR cannot be
 * read or a file there is malformed (messages start with `who`).
 */
int hk_gradset_list(const char *who, const char *dir);

#endif
