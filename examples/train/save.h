/*
 * save.h - the trainer's weight file format, "HKMLP1".
 *
 * All integers and floats are little-endian, with no padding:
 *
 *   offset  size            content
 *   0       8               magic: the bytes "HKMLP1" followed by two NULs
 *   8       4               L, the number of layers (uint32, 1..6)
 *   12      4 * (L + 1)     widths dims[0..L] (uint32): inputs, hidden...,
 *                           classes; e.g. 784 256 128 10
 *   ...     4 * n_params    the parameters (IEEE 754 binary32), tensor
 *                           after tensor: fc1.weight (dims[1] x dims[0],
 *                           row-major: out x in), fc1.bias (dims[1]),
 *                           fc2.weight, fc2.bias, ... (mlp.h's order)
 *
 * The file ends there: its size is 12 + 4 (L + 1) + 4 n_params bytes.
 * Writing the same model gives the same bytes, so ranks holding the same
 * weights write identical files (the tests compare them with cmp).
 *
 * model_save (model.h) writes any model of the table the same way: 8
 * magic bytes ("HKMLP1\0\0" for --model mlp, giving exactly this format;
 * "HKCNN1\0\0" for cnn, see cnn.h), the kind's shape words, then every
 * float of its parameter buffer, buffers such as batch norm's running
 * statistics included.
 *
 * Errors: 0 on success, -1 with one line in err[err_cap] naming the path.
 */
#ifndef HK_TRAIN_SAVE_H
#define HK_TRAIN_SAVE_H

#include <stddef.h>

#include "mlp.h"
#include "model.h"

#define SAVE_MAGIC "HKMLP1\0\0"
#define SAVE_MAGIC_LEN 8

/** Writes m to path (created or truncated). */
int mlp_save(const mlp *m, const char *path, char *err, size_t err_cap);

/** Reads a file written by mlp_save into a new model *m (free with
 *  mlp_free). Rejects bad magic, bad widths and a wrong file size. */
int mlp_load(mlp *m, const char *path, char *err, size_t err_cap);

#endif
