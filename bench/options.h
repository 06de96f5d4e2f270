/*
 * options.h - hkbench's command line: what to run (a size sweep or a model
 * replay) and how, with the option letters of nccl-tests' all_reduce_perf
 * where it has one (-b -e -f -n -w -c -d -o) and of bench/peers (-B).
 */
#ifndef HKB_OPTIONS_H
#define HKB_OPTIONS_H

#include <stddef.h>

#include "hk/hk.h"

/** Upper bound on -d all x -o all: 9 dtypes (all but bool), 5 ops. */
#define HKB_MAX_TYPES 9
#define HKB_MAX_OPS 5

typedef struct hkb_opts {
  size_t min_bytes, max_bytes;   /* -b, -e: sweep sizes, bytes */
  size_t budget_bytes;           /* -B: bytes moved per size at most */
  int factor;                    /* -f: size multiplier, >= 2 */
  int iters, warmup;             /* -n, -w; -1 when not given */
  int check;                     /* -c: 1 counts wrong elements */
  int raw;                       /* --raw: print the ring-only time too */
  hk_dtype types[HKB_MAX_TYPES]; /* -d: in sweep order */
  int ntypes;
  hk_op ops[HKB_MAX_OPS]; /* -o: in sweep order */
  int nops;
  const char *csv_path;  /* --csv FILE, or NULL */
  const char *model;     /* --model NAME|FILE.tsv|list, or NULL */
  const char *model_dir; /* --model-dir, default HKB_MODEL_DIR */
  int device;            /* --device gpu: buffers in device memory */
  int kernels;           /* --kernels: the pack/unpack bandwidth table */
  int compute_ms;        /* --compute-ms: a synthetic backward pass of this
                            many ms per step (model replay), 0: none */
  int steps_only;        /* --steps-only: model replay steps without the
                            whole-set allreduce after each */
} hkb_opts;

/**
 * Parses argv into *o (defaults: -b 8 -e 256M -f 4 -B 1G -c 1, float32,
 * sum for the sweep and average for --model; iters/warmup -1, for each
 * mode's own default). On a bad option prints usage or the reason to stderr and
 * returns 2 (the exit status); 0 on success; 1 after printing --help.
 */
int hkb_parse_options(int argc, char **argv, hkb_opts *o);

/** nccl-tests' name of a dtype ("float", "half", "double", "int32"...),
 *  as printed in the type column. */
const char *hkb_type_name(hk_dtype t);

/** nccl-tests' name of an op ("sum", "prod", "min", "max", "avg"). */
const char *hkb_op_name(hk_op op);

#endif
