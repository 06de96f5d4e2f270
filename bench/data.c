/*
 * data.c - inputs and exact expected results (see data.h).
 */
#include "data.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>

#include "common/half.h"

static int is_narrow(hk_dtype t) {
  return t == HK_FLOAT16 || t == HK_BFLOAT16 || t == HK_INT8 || t == HK_UINT8;
}

static int is_float(hk_dtype t) { return t <= HK_FLOAT64; }

/* Input of rank r at element i, as an integer. */
static int64_t input(hk_dtype t, hk_op op, int r, size_t i) {
  if (op == HK_PRODUCT)
    return 1 + (int64_t)((r + i) % 2);
  if (op == HK_MIN || op == HK_MAX) /* the extreme moves between ranks */
    return 1 + (int64_t)((r + i) % (is_narrow(t) ? 3 : 13));
  if (is_narrow(t))
    return (int64_t)(r % 2 + 1) * (int64_t)(i % 3 + 1);
  return (int64_t)(r + 1) * (int64_t)(i % 13 + 1);
}

/* Stores a float value (exactly representable unless out of range) as t. */
static void store_float(void *dst, hk_dtype t, double v) {
  uint16_t h; /* a double beyond float's range converts to infinity */
  float f = v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
  switch (t) {
  case HK_FLOAT16:
    h = hk_f32_to_f16(f);
    memcpy(dst, &h, 2);
    break;
  case HK_BFLOAT16:
    h = hk_f32_to_bf16(f);
    memcpy(dst, &h, 2);
    break;
  case HK_FLOAT32:
    memcpy(dst, &f, 4);
    break;
  default:
    memcpy(dst, &v, 8);
  }
}

/* Stores the low bytes of v (two's complement, little-endian as the host:
 * memcpy of the same-width integer) as integer type t. */
static void store_int(void *dst, hk_dtype t, uint64_t v) {
  uint8_t b = (uint8_t)v;
  uint16_t h = (uint16_t)v;
  uint32_t w = (uint32_t)v;
  if (t == HK_INT8 || t == HK_UINT8)
    memcpy(dst, &b, 1);
  else if (t == HK_INT16)
    memcpy(dst, &h, 2);
  else if (t == HK_INT32)
    memcpy(dst, &w, 4);
  else
    memcpy(dst, &v, 8);
}

/* The wrapped value of v in type t, sign-extended for signed types. */
static int64_t wrapped(hk_dtype t, uint64_t v) {
  switch (t) {
  case HK_INT8:
    return (int64_t)(v & 0xff) - ((v & 0x80) ? 0x100 : 0);
  case HK_UINT8:
    return (int64_t)(v & 0xff);
  case HK_INT16:
    return (int64_t)(v & 0xffff) - ((v & 0x8000) ? 0x10000 : 0);
  case HK_INT32:
    return (int64_t)(v & 0xffffffffu) - ((v & 0x80000000u) ? 0x100000000 : 0);
  default:
    return (int64_t)v; /* int64: the two's complement reading */
  }
}

/* Serial result at element i: integers in uint64 arithmetic (wrapping mod
 * 2^64, hence mod 2^bits); floats in double, exact for these inputs. */
static void serial(void *dst, hk_dtype t, hk_op op, int size, size_t i) {
  uint64_t acc = (uint64_t)input(t, op, 0, i);
  double facc = (double)input(t, op, 0, i);
  for (int r = 1; r < size; r++) {
    int64_t x = input(t, op, r, i);
    switch (op) {
    case HK_SUM:
    case HK_AVERAGE:
      acc += (uint64_t)x;
      facc += (double)x;
      break;
    case HK_PRODUCT:
      acc *= (uint64_t)x;
      facc *= (double)x;
      break;
    case HK_MIN: /* inputs are positive: unsigned compare is fine */
      acc = (uint64_t)x < acc ? (uint64_t)x : acc;
      facc = (double)x < facc ? (double)x : facc;
      break;
    case HK_MAX:
      acc = (uint64_t)x > acc ? (uint64_t)x : acc;
      facc = (double)x > facc ? (double)x : facc;
      break;
    }
  }
  if (!is_float(t)) {
    if (op == HK_AVERAGE) /* C division truncates toward zero */
      acc = (uint64_t)(wrapped(t, acc) / size);
    store_int(dst, t, acc);
  } else if (op != HK_AVERAGE) {
    store_float(dst, t, facc);
  } else if (t == HK_FLOAT64) {
    store_float(dst, t, facc / size);
  } else { /* binary32 division, then (16-bit types) rounded once more */
    store_float(dst, t, (double)((float)facc / (float)size));
  }
}

void hkb_pattern_init(hkb_pattern *p, hk_dtype dtype, hk_op op, int rank,
                      int size) {
  memset(p, 0, sizeof *p);
  p->dtype = dtype;
  p->esize = hk_dtype_size(dtype);
  for (size_t i = 0; i < HKB_PERIOD; i++) {
    unsigned char *in = p->in + i * p->esize;
    int64_t x = input(dtype, op, rank, i);
    if (is_float(dtype))
      store_float(in, dtype, (double)x);
    else
      store_int(in, dtype, (uint64_t)x);
    serial(p->ref + i * p->esize, dtype, op, size, i);
  }
}

void hkb_fill(const hkb_pattern *p, void *buf, size_t count) {
  unsigned char *b = buf;
  size_t total = count * p->esize, period = HKB_PERIOD * p->esize;
  size_t done = total < period ? total : period;
  memcpy(b, p->in, done);
  while (done < total) { /* double the filled prefix: whole periods */
    size_t n = total - done < done ? total - done : done;
    memcpy(b + done, b, n);
    done += n;
  }
}

size_t hkb_check(const hkb_pattern *p, const void *buf, size_t count) {
  const unsigned char *b = buf;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i += HKB_PERIOD) {
    size_t n = count - i < HKB_PERIOD ? count - i : HKB_PERIOD;
    if (!memcmp(b + i * p->esize, p->ref, n * p->esize))
      continue;
    for (size_t k = 0; k < n; k++)
      wrong +=
          memcmp(b + (i + k) * p->esize, p->ref + k * p->esize, p->esize) != 0;
  }
  return wrong;
}

void *hkb_buffer_alloc(size_t bytes) {
  if (bytes == 0)
    bytes = 1;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  madvise(p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
  memset(p, 0, bytes);
  return p;
}

void hkb_buffer_free(void *buf, size_t bytes) {
  if (buf)
    munmap(buf, bytes ? bytes : 1);
}
