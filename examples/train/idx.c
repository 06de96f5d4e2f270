/*
 * idx.c - the IDX reader (see idx.h for the format and the messages).
 */
#include "idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* gzread takes an unsigned count; read in slices well under UINT_MAX. */
#define READ_SLICE (1u << 24)

static int failf(char *err, size_t cap, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int failf(char *err, size_t cap, const char *path, const char *fmt,
                 ...) {
  int n = snprintf(err, cap, "%s: ", path);
  if (n >= 0 && (size_t)n < cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* gzerror's message is "<path>: <problem>"; the caller names the path. */
static const char *skip_path(const char *msg, const char *path) {
  size_t n = strlen(path);
  return strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' '
             ? msg + n + 2
             : msg;
}

/* Reads up to len bytes into buf; returns the count read (short only at
 * end of file), or -1 on a zlib error (message in err). */
static long long read_full(gzFile f, void *buf, size_t len, const char *path,
                           char *err, size_t cap) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got < READ_SLICE ? len - got : READ_SLICE;
    int n = gzread(f, (uint8_t *)buf + got, (unsigned)want);
    if (n < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      failf(err, cap, path, "corrupt gzip data: %s", skip_path(msg, path));
      return -1;
    }
    if (n == 0)
      break;
    got += (size_t)n;
  }
  /* A gzip stream cut short reads as an early end of file (zlib records
   * Z_BUF_ERROR "unexpected end of file"): the caller reports it as
   * truncated, like a short uncompressed file. */
  int zerr;
  const char *msg = gzerror(f, &zerr);
  if (zerr != Z_OK && zerr != Z_BUF_ERROR) {
    failf(err, cap, path, "corrupt gzip data: %s", skip_path(msg, path));
    return -1;
  }
  return (long long)got;
}

static void dims_text(char *buf, size_t cap, const uint32_t *d, int n) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && at < cap; i++) {
    int k = snprintf(buf + at, cap - at, i ? "x%u" : "%u", (unsigned)d[i]);
    if (k < 0)
      break;
    at += (size_t)k;
  }
}

int idx_load(const char *path, int ndims, const uint32_t *record_dims,
             size_t limit, idx_array *out, char *err, size_t err_cap) {
  memset(out, 0, sizeof *out);
  if (ndims < 1 || ndims > IDX_MAX_DIMS)
    return failf(err, err_cap, path, "unsupported number of dimensions %d",
                 ndims);
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (!f)
    return failf(err, err_cap, path, "cannot open: %s",
                 errno ? strerror(errno) : "out of memory");
  int rc = -1;
  uint8_t *data = NULL;

  uint8_t head[4 + 4 * IDX_MAX_DIMS];
  size_t head_len = 4 + 4 * (size_t)ndims;
  long long n = read_full(f, head, 4, path, err, err_cap);
  if (n < 0)
    goto done;
  if (n < 4) {
    failf(err, err_cap, path, "truncated: %lld of the 4 magic bytes", n);
    goto done;
  }
  uint32_t magic = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 |
                   (uint32_t)head[2] << 8 | head[3];
  uint32_t want_magic = (uint32_t)IDX_TYPE_U8 << 8 | (uint32_t)ndims;
  if (magic != want_magic) {
    failf(err, err_cap, path,
          "bad magic 0x%08x (expected 0x%08x: unsigned bytes, %d "
          "dimension%s)",
          (unsigned)magic, (unsigned)want_magic, ndims, ndims > 1 ? "s" : "");
    goto done;
  }
  n = read_full(f, head + 4, head_len - 4, path, err, err_cap);
  if (n < 0)
    goto done;
  if ((size_t)n < head_len - 4) {
    failf(err, err_cap, path,
          "truncated: header ends after %lld of its %zu bytes", n + 4,
          head_len);
    goto done;
  }
  uint32_t dims[IDX_MAX_DIMS];
  for (int i = 0; i < ndims; i++) {
    const uint8_t *p = head + 4 + 4 * i;
    dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
              (uint32_t)p[2] << 8 | p[3];
  }
  if (ndims > 1 &&
      memcmp(dims + 1, record_dims, (size_t)(ndims - 1) * sizeof *dims) != 0) {
    char got[64], want[64];
    dims_text(got, sizeof got, dims + 1, ndims - 1);
    dims_text(want, sizeof want, record_dims, ndims - 1);
    failf(err, err_cap, path, "wrong dims %s (expected %s)", got, want);
    goto done;
  }
  size_t record = 1;
  for (int i = 1; i < ndims; i++)
    if (__builtin_mul_overflow(record, (size_t)dims[i], &record)) {
      failf(err, err_cap, path, "record size overflows");
      goto done;
    }
  size_t file_count = dims[0];
  size_t count = limit && limit < file_count ? limit : file_count;
  if (record && count > SIZE_MAX / record) {
    failf(err, err_cap, path, "%zu records of %zu bytes overflow", count,
          record);
    goto done;
  }
  size_t bytes = count * record;
  data = malloc(bytes ? bytes : 1);
  if (!data) {
    failf(err, err_cap, path, "out of memory for %zu bytes", bytes);
    goto done;
  }
  n = read_full(f, data, bytes, path, err, err_cap);
  if (n < 0)
    goto done;
  if ((size_t)n < bytes) {
    failf(err, err_cap, path,
          "truncated: the header declares %zu records of %zu bytes, the "
          "file ends after %zu of them",
          file_count, record, record ? (size_t)n / record : 0);
    goto done;
  }
  if (count == file_count) {
    uint8_t extra;
    n = read_full(f, &extra, 1, path, err, err_cap);
    if (n < 0)
      goto done;
    if (n > 0) {
      failf(err, err_cap, path, "trailing data after %zu records", file_count);
      goto done;
    }
  }
  out->data = data;
  out->count = count;
  out->file_count = file_count;
  out->record_size = record;
  data = NULL;
  rc = 0;
done:
  free(data);
  gzclose(f);
  return rc;
}

void idx_free(idx_array *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}
