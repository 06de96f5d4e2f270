/*
 * flags.h - the trainer's command line, parsed by one pure function.
 *
 *   train [--epochs N] [--batch-size N | --global-batch-size N] [--lr X]
 *         [--no-lr-scaling] [--optimizer sgd|adamw] [--weight-decay X]
 *         [--warmup-steps N] [--nesterov] [--seed N] [--data DIR]
 *         [--prefetch N] [--augment] [--checkpoint-dir DIR [--resume]]
 *         [--metrics FILE.csv] [--save FILE] [--save-all PREFIX]
 *         [--limit-train N] [--limit-test N] [--progress] [-h|--help]
 *
 * Options taking a value accept `--opt VALUE` and `--opt=VALUE`.
 */
#ifndef HK_TRAIN_FLAGS_H
#define HK_TRAIN_FLAGS_H

#include <stddef.h>
#include <stdint.h>

#include "optim.h"

typedef struct train_flags {
  int epochs;            /* >= 1; default 5 */
  int batch_size;        /* samples per step PER WORKER, >= 1; default 32 */
  int global_batch_size; /* samples per step, all workers; 0 = not given */
  float lr;              /* peak rate per worker; default 5e-4 adamw,
                            0.0125 sgd; times the workers (lr_scaling) */
  int lr_scaling;        /* 1 unless --no-lr-scaling */
  optim_kind optimizer;  /* default adamw */
  float weight_decay;    /* default 0.01 adamw, 0 sgd */
  long warmup_steps;     /* -1 (default): 5% of all steps, at least 1 */
  int nesterov;          /* sgd only */
  uint64_t seed;         /* init and shuffling; default 42 */
  const char *data_dir;  /* default DATA_DEFAULT_DIR; points into argv */
  const char *save;      /* rank 0 writes the weights here, or NULL */
  const char *save_all;  /* every rank writes <save_all>.<rank>, or NULL */
  size_t limit_train;    /* 0 = all */
  size_t limit_test;     /* 0 = all */
  int progress;          /* show progress on rank 0 */
  int prefetch;          /* batches prepared ahead, 0..64; default 2 */
  int augment;           /* random crop + flip of training batches */
  const char *checkpoint_dir; /* rank 0 checkpoints each epoch, or NULL */
  int resume;                 /* continue from checkpoint_dir's checkpoint */
  const char *metrics;        /* rank 0 writes one CSV row per epoch, or NULL */
} train_flags;

/** Default peak learning rates per worker (Horovod's convention: scaled
 *  by the number of workers). At -np 4 and the default 32 per worker they
 *  give 2e-3 (adamw) and 0.05 (sgd) for the global batch of 128, the rates
 *  measured best for it (see the README section). */
#define TRAIN_DEFAULT_LR_ADAMW 5e-4f
#define TRAIN_DEFAULT_LR_SGD 0.0125f
/** Default batches the input pipeline prepares ahead. */
#define TRAIN_DEFAULT_PREFETCH 2
/** Default warm-up share of all steps when --warmup-steps is not given. */
#define TRAIN_DEFAULT_WARMUP_SHARE 0.05

/**
 * Parses argv[1..argc) into *out (defaults for what is not given).
 * Returns 0 to train, 1 for -h/--help, -1 on a bad command line with one
 * line (no newline) in err[err_cap] naming the offending option, e.g.
 * "--epochs: 'x' is not an integer in 1..100000", or a combination that
 * cannot hold ("--batch-size and --global-batch-size: give one of them",
 * "--resume: needs --checkpoint-dir"). Pure; reentrant.
 */
int flags_parse(int argc, char **argv, train_flags *out, char *err,
                size_t err_cap);

/** The usage text (static storage, ends in a newline). */
const char *flags_usage(void);

#endif
