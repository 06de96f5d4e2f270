/*
 * idx.h - reading one IDX file (the format of MNIST and Fashion-MNIST),
 * gzip-compressed or not, with zlib.
 *
 * IDX (LeCun, Cortes & Burges, http://yann.lecun.com/exdb/mnist/): a 4-byte
 * magic 0x00 0x00 <type> <ndims>, then ndims big-endian uint32 dimensions,
 * then the data, row-major, in the given type. Only type 0x08 (unsigned
 * byte) is accepted: both Fashion-MNIST images (ndims 3: count, 28, 28) and
 * labels (ndims 1: count) use it. zlib's gzread reads gzip files and,
 * transparently, uncompressed ones.
 *
 * Errors: every function returns 0 on success and -1 on failure, with one
 * line (no newline) in err[err_cap] that starts with the file's path and
 * says what is wrong: "cannot open: <strerror>", "bad magic 0x........
 * (expected 0x0000080N: unsigned bytes, N dimensions)", "wrong dims
 * 28x29 (expected 28x28)", "truncated: ...", "corrupt gzip data: ...",
 * "trailing data after N records". A file that fails leaves *out empty.
 */
#ifndef HK_TRAIN_IDX_H
#define HK_TRAIN_IDX_H

#include <stddef.h>
#include <stdint.h>

/** IDX type byte for unsigned 8-bit data. */
#define IDX_TYPE_U8 0x08
/** Most dimensions an accepted file may have. */
#define IDX_MAX_DIMS 4

/** Records read from one IDX file. */
typedef struct idx_array {
  uint8_t *data;      /* count * record_size bytes; owned, see idx_free */
  size_t count;       /* records loaded: min(file_count, limit) */
  size_t file_count;  /* records the header declares (dims[0]) */
  size_t record_size; /* bytes per record: product of dims[1..ndims) */
} idx_array;

/**
 * Reads the IDX file at `path`, which must have type unsigned byte,
 * exactly `ndims` dimensions (1..IDX_MAX_DIMS), and per-record dimensions
 * record_dims[0..ndims-1) (the dims after the count; NULL when ndims is 1).
 * Loads the first min(count, limit) records (limit 0 = all). When all
 * records are loaded the file must end right after them; with a smaller
 * limit the rest of the file is not read (nor checked).
 * On success *out owns the data; on failure *out is zeroed.
 */
int idx_load(const char *path, int ndims, const uint32_t *record_dims,
             size_t limit, idx_array *out, char *err, size_t err_cap);

/** Frees a's data and zeroes it. Safe on a zeroed array. */
void idx_free(idx_array *a);

#endif
