/*
 * ckpt.h - the trainer's checkpoint file, "HKCKPT" version 2: everything a
 * run needs to continue bitwise as if it had not stopped, for any model
 * whose parameters and optimiser state are flat float arrays (model.h's
 * table: the MLP, the CNN with its batch-norm buffers inside the
 * parameters). Version 2 added the loss scaler and plateau states; a
 * version-1 file is refused (its run had neither).
 *
 * Layout (little-endian, no padding; le.h):
 *
 *   offset  size  content
 *   0       8     magic "HKCKPT\0\0"
 *   8       4     version (uint32) = CKPT_VERSION
 *   12      4     CRC-32 (zlib's crc32, ISO-HDLC polynomial) of the payload
 *   16      8     payload bytes P (uint64)
 *   24      P     payload:
 *     4 + S   settings: S (uint32), then S bytes of "key=value\n" lines
 *     4       epoch: epochs completed (uint32)
 *     8       step: optimiser steps completed (uint64)
 *     4 + 8R  R (uint32), then R rng states (uint64): the trainer's order
     4+8+8   fp16 loss scaler (scaler.h): scale (binary32), good steps in
             a row (uint64), skipped steps (uint64); 1, 0, 0 when off
     8+4+4+4 reduce-on-plateau (optim.h): best loss (binary64, +inf before
             the first epoch), bad epochs (uint32), scale so far
             (binary32), reductions (uint32); inf, 0, 1, 0 for cosine
 *     8 + 4N  N (uint64), then N parameters (binary32)
 *     4       optimiser has a second moment (uint32 0 or 1)
 *     8+8+8   optimiser step (int64), b1_t, b2_t (binary64)
 *     4N      first moment / velocity (binary32)
 *     4N      second moment, when present
 *
 * The file is exactly 24 + P bytes. Reading checks, in order: magic,
 * version, size, CRC, the payload's own lengths, then that every setting
 * and every size equals what the resuming run expects; only a file that
 * passes all of it is copied into the caller's buffers, so nothing trains
 * from a bad one.
 *
 * Writing is atomic (POSIX rename): the bytes go to DIR/CKPT_FILE.tmp,
 * which is fsync'ed, renamed over DIR/CKPT_FILE, and the directory is
 * fsync'ed, so after a crash DIR/CKPT_FILE is the previous or the new
 * checkpoint, never a mix. One writer per directory (rank 0 of a job).
 *
 * Errors: 0 on success, -1 with one line in err[err_cap] that starts with
 * the file's path and says what is wrong. Thread-safety: the functions
 * share no state; a ckpt_state is the caller's.
 */
#ifndef HK_TRAIN_CKPT_H
#define HK_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "HKCKPT\0\0"
#define CKPT_VERSION 2u
#define CKPT_HEADER 24
/** The checkpoint's name inside --checkpoint-dir. */
#define CKPT_FILE "last.hkckpt"
/** Longest settings block (bytes). */
#define CKPT_SETTINGS_CAP 4096

/**
 * What a checkpoint holds. For ckpt_write every pointer is read; for
 * ckpt_read the settings, counts and has_v are what the run expects and
 * the arrays are where the file's values go (rng: n_rng states, params,
 * m: n_params floats, v: n_params floats when has_v). Reading refuses a
 * loss scale that is not finite and > 0, a plateau scale outside (0, 1]
 * and a NaN best loss.
 */
typedef struct ckpt_state {
  const char *settings; /* "key=value\n" lines, NUL-terminated */
  uint32_t epoch;
  uint64_t step;
  uint32_t n_rng;
  uint64_t *rng;
  float loss_scale; /* scaler.h's state */
  uint64_t scaler_good, scaler_skipped;
  double plateau_best; /* optim.h's plateau state */
  uint32_t plateau_bad;
  float plateau_scale;
  uint32_t plateau_reductions;
  uint64_t n_params;
  float *params;
  int has_v;
  int64_t opt_step;
  double b1_t, b2_t;
  float *m, *v;
} ckpt_state;

/** DIR/CKPT_FILE into out[cap]; -1 when it does not fit. */
int ckpt_path(const char *dir, char *out, size_t cap);

/** Creates DIR if it does not exist, checks that it is a directory this
 *  process may write in (so a run fails before training, not at its first
 *  checkpoint) and removes a temporary file a killed writer left. */
int ckpt_prepare_dir(const char *dir, char *err, size_t err_cap);

/** Writes s atomically as DIR/CKPT_FILE (see above), creating DIR if it
 *  does not exist. Leaves no temporary file behind, also on failure. */
int ckpt_write(const char *dir, const ckpt_state *s, char *err, size_t err_cap);

/**
 * Reads DIR/CKPT_FILE into s (see ckpt_state). Besides the format's checks
 * it refuses, naming the first difference, settings that differ from
 * s->settings ("settings differ: np is 2 in the checkpoint, 4 in this
 * run") and sizes that differ from s's. On failure s's arrays and fields
 * are unchanged.
 */
int ckpt_read(const char *dir, ckpt_state *s, char *err, size_t err_cap);

#endif
