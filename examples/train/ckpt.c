/*
 * ckpt.c - writing and checking HKCKPT files (see ckpt.h).
 */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "le.h"

int ckpt_path(const char *dir, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%s", dir, CKPT_FILE);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Loss scaler (4 + 8 + 8) and plateau (8 + 4 + 4 + 4) states. */
#define CKPT_SCHEDULE_BYTES 40

static void put_f32(uint8_t *b, float v) { le_put_f32s(b, &v, 1); }

static float get_f32(const uint8_t *b) {
  float v;
  le_get_f32s(b, &v, 1);
  return v;
}

static size_t payload_size(const ckpt_state *s) {
  size_t n = (size_t)s->n_params;
  return 4 + strlen(s->settings) + 4 + 8 + 4 + 8 * (size_t)s->n_rng +
         CKPT_SCHEDULE_BYTES + 8 + 4 * n + 4 + 24 + 4 * n * (s->has_v ? 2 : 1);
}

/* The whole file's bytes for s (malloc'ed), length in *len. */
static uint8_t *encode(const ckpt_state *s, size_t *len) {
  size_t p = payload_size(s), n = (size_t)s->n_params;
  uint8_t *b = malloc(CKPT_HEADER + p);
  if (!b)
    return NULL;
  uint8_t *q = b + CKPT_HEADER;
  uint32_t slen = (uint32_t)strlen(s->settings);
  le_put_u32(q, slen);
  memcpy(q + 4, s->settings, slen);
  q += 4 + slen;
  le_put_u32(q, s->epoch);
  le_put_u64(q + 4, s->step);
  le_put_u32(q + 12, s->n_rng);
  q += 16;
  for (uint32_t i = 0; i < s->n_rng; i++, q += 8)
    le_put_u64(q, s->rng[i]);
  put_f32(q, s->loss_scale);
  le_put_u64(q + 4, s->scaler_good);
  le_put_u64(q + 12, s->scaler_skipped);
  le_put_f64(q + 20, s->plateau_best);
  le_put_u32(q + 28, s->plateau_bad);
  put_f32(q + 32, s->plateau_scale);
  le_put_u32(q + 36, s->plateau_reductions);
  q += CKPT_SCHEDULE_BYTES;
  le_put_u64(q, s->n_params);
  le_put_f32s(q + 8, s->params, n);
  q += 8 + 4 * n;
  le_put_u32(q, (uint32_t)s->has_v);
  le_put_u64(q + 4, (uint64_t)s->opt_step);
  le_put_f64(q + 12, s->b1_t);
  le_put_f64(q + 20, s->b2_t);
  q += 28;
  le_put_f32s(q, s->m, n);
  if (s->has_v)
    le_put_f32s(q + 4 * n, s->v, n);
  memcpy(b, CKPT_MAGIC, 8);
  le_put_u32(b + 8, CKPT_VERSION);
  le_put_u32(b + 12, (uint32_t)crc32_z(0L, b + CKPT_HEADER, p));
  le_put_u64(b + 16, p);
  *len = CKPT_HEADER + p;
  return b;
}

static int write_all(int fd, const uint8_t *b, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, b, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    b += w;
    len -= (size_t)w;
  }
  return 0;
}

int ckpt_prepare_dir(const char *dir, char *err, size_t err_cap) {
  struct stat st;
  const char *why = NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    why = strerror(errno);
  else if (stat(dir, &st) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "not a directory";
  else if (access(dir, W_OK | X_OK) != 0)
    why = strerror(errno);
  if (why) {
    snprintf(err, err_cap, "%s: cannot use as checkpoint directory: %s", dir,
             why);
    return -1;
  }
  /* A temporary file is only ever a write that did not finish (a killed
   * run): with one writer per directory it is garbage. */
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, CKPT_FILE) <
          (int)sizeof tmp &&
      unlink(tmp) != 0 && errno != ENOENT) {
    snprintf(err, err_cap, "%s: cannot remove a stale temporary file: %s", tmp,
             strerror(errno));
    return -1;
  }
  return 0;
}

int ckpt_write(const char *dir, const ckpt_state *s, char *err,
               size_t err_cap) {
  char path[4096], tmp[4200];
  if (ckpt_path(dir, path, sizeof path) != 0) {
    snprintf(err, err_cap, "%s: checkpoint directory path too long", dir);
    return -1;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (ckpt_prepare_dir(dir, err, err_cap) != 0)
    return -1;
  size_t len;
  uint8_t *b = encode(s, &len);
  if (!b) {
    snprintf(err, err_cap, "%s: out of memory", path);
    return -1;
  }
  const char *what = NULL;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    what = "cannot create";
  else if (write_all(fd, b, len) != 0)
    what = "write failed";
  else if (fsync(fd) != 0)
    what = "fsync failed";
  int saved = errno;
  if (fd >= 0 && close(fd) != 0 && !what) {
    what = "close failed";
    saved = errno;
  }
  free(b);
  if (!what && rename(tmp, path) != 0) {
    saved = errno;
    snprintf(err, err_cap, "%s: cannot rename %s over it: %s", path, tmp,
             strerror(saved));
    unlink(tmp);
    return -1;
  }
  if (what) {
    snprintf(err, err_cap, "%s: %s: %s", tmp, what, strerror(saved));
    unlink(tmp);
    return -1;
  }
  /* The rename itself is durable once the directory is synced. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || fsync(dfd) != 0) {
    snprintf(err, err_cap, "%s: fsync of the directory failed: %s", dir,
             strerror(errno));
    if (dfd >= 0)
      close(dfd);
    return -1;
  }
  close(dfd);
  return 0;
}

/* The value of `key` in a "key=value\n" block of len bytes: pointer and
 * length, or NULL. */
static const char *find_setting(const char *block, size_t len, const char *key,
                                size_t klen, size_t *vlen) {
  const char *p = block, *end = block + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = nl ? nl : end;
    if ((size_t)(line_end - p) > klen && !memcmp(p, key, klen) &&
        p[klen] == '=') {
      *vlen = (size_t)(line_end - p) - klen - 1;
      return p + klen + 1;
    }
    p = line_end + 1;
  }
  return NULL;
}

/* Compares the file's settings with the run's; the first difference into
 * why[cap]. Returns 0 when they are the same set of key=value lines. */
static int compare_settings(const char *file, size_t flen, const char *run,
                            char *why, size_t cap) {
  size_t rlen = strlen(run);
  for (int pass = 0; pass < 2; pass++) {
    const char *a = pass ? file : run, *b = pass ? run : file;
    size_t alen = pass ? flen : rlen, blen = pass ? rlen : flen;
    const char *p = a, *end = a + alen;
    while (p < end) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      const char *line_end = nl ? nl : end;
      const char *eq = memchr(p, '=', (size_t)(line_end - p));
      if (!eq) {
        snprintf(why, cap, "malformed settings line '%.*s'",
                 (int)(line_end - p), p);
        return -1;
      }
      size_t klen = (size_t)(eq - p), vlen = (size_t)(line_end - eq - 1),
             ov = 0;
      const char *other = find_setting(b, blen, p, klen, &ov);
      if (!other || ov != vlen || memcmp(other, eq + 1, vlen) != 0) {
        const char *fv = pass ? eq + 1 : other, *rv = pass ? other : eq + 1;
        int fl = (int)(pass ? vlen : ov), rl = (int)(pass ? ov : vlen);
        /* the schedule's step counts follow from --epochs (and the batch,
         * the data, the world size): say so, since the user set none */
        int derived = (klen == 12 && !memcmp(p, "warmup_steps", 12)) ||
                      (klen == 11 && !memcmp(p, "total_steps", 11));
        snprintf(why, cap,
                 "settings differ: %.*s is %.*s in the checkpoint, %.*s in "
                 "this run%s",
                 (int)klen, p, fv ? fl : 6, fv ? fv : "absent", rv ? rl : 6,
                 rv ? rv : "absent",
                 derived ? " (it follows from --epochs and the batch: a run "
                           "resumes with the settings it started with, so "
                           "it cannot be extended)"
                         : "");
        return -1;
      }
      p = line_end + 1;
    }
  }
  return 0;
}

/* Reads the whole file; NULL with why set on failure. */
static uint8_t *slurp(const char *path, size_t *len, char *why, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, cap, "cannot open: %s", strerror(errno));
    return NULL;
  }
  uint8_t *b = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    n = ftell(f);
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) &&
      fread(b, 1, (size_t)n, f) == (size_t)n) {
    fclose(f);
    *len = (size_t)n;
    return b;
  }
  snprintf(why, cap, "cannot read: %s", b ? strerror(errno) : "out of memory");
  free(b);
  fclose(f);
  return NULL;
}

/* Checks the file's bytes b[0..len) against what s expects; on success
 * copies them into s. Returns 0, or -1 with why set. */
static int decode(const uint8_t *b, size_t len, ckpt_state *s, char *why,
                  size_t cap) {
  if (len == 0 || memcmp(b, CKPT_MAGIC, len < 8 ? len : 8) != 0) {
    snprintf(why, cap, "bad magic: not an hk checkpoint (HKCKPT)");
    return -1;
  }
  if (len < CKPT_HEADER) {
    snprintf(why, cap, "truncated: %zu bytes, shorter than the %d-byte header",
             len, CKPT_HEADER);
    return -1;
  }
  uint32_t version = le_get_u32(b + 8);
  if (version != CKPT_VERSION) {
    snprintf(why, cap, "unsupported version %u (this trainer reads %u)",
             version, CKPT_VERSION);
    return -1;
  }
  uint64_t p = le_get_u64(b + 16);
  if (p != len - CKPT_HEADER) {
    snprintf(why, cap,
             "%s: the header declares a payload of %llu bytes, the file "
             "holds %zu",
             p > len - CKPT_HEADER ? "truncated" : "wrong size",
             (unsigned long long)p, len - CKPT_HEADER);
    return -1;
  }
  uint32_t want = le_get_u32(b + 12);
  uint32_t got = (uint32_t)crc32_z(0L, b + CKPT_HEADER, (size_t)p);
  if (want != got) {
    snprintf(why, cap,
             "CRC32 mismatch: the header says 0x%08x, the payload has 0x%08x "
             "(corrupted)",
             want, got);
    return -1;
  }
  /* The payload: lengths first, checked against what is left. */
  const uint8_t *q = b + CKPT_HEADER, *end = b + len;
#define NEED(k, what)                                                          \
  do {                                                                         \
    if ((size_t)(end - q) < (size_t)(k)) {                                     \
      snprintf(why, cap, "malformed payload: it ends inside %s", what);        \
      return -1;                                                               \
    }                                                                          \
  } while (0)
  NEED(4, "the settings");
  uint32_t slen = le_get_u32(q);
  NEED(4 + (uint64_t)slen, "the settings");
  const char *settings = (const char *)q + 4;
  q += 4 + slen;
  if (compare_settings(settings, slen, s->settings, why, cap) != 0)
    return -1;
  NEED(16, "the counters");
  uint32_t epoch = le_get_u32(q);
  uint64_t step = le_get_u64(q + 4);
  uint32_t n_rng = le_get_u32(q + 12);
  q += 16;
  if (n_rng != s->n_rng) {
    snprintf(why, cap, "%u rng states, this run has %u", n_rng, s->n_rng);
    return -1;
  }
  NEED(8 * (uint64_t)n_rng + CKPT_SCHEDULE_BYTES + 8, "the rng states");
  const uint8_t *rngs = q;
  q += 8 * (size_t)n_rng;
  float loss_scale = get_f32(q), plateau_scale = get_f32(q + 32);
  uint64_t scaler_good = le_get_u64(q + 4), scaler_skipped = le_get_u64(q + 12);
  double plateau_best = le_get_f64(q + 20);
  uint32_t plateau_bad = le_get_u32(q + 28);
  uint32_t plateau_reductions = le_get_u32(q + 36);
  q += CKPT_SCHEDULE_BYTES;
  if (!isfinite(loss_scale) || !(loss_scale > 0)) {
    snprintf(why, cap, "loss scale %g is not a finite positive number",
             (double)loss_scale);
    return -1;
  }
  if (!(plateau_scale > 0 && plateau_scale <= 1) || isnan(plateau_best)) {
    snprintf(why, cap,
             "plateau state out of range (scale %g, best loss %g): the "
             "scale must be in (0, 1], the best loss a number",
             (double)plateau_scale, plateau_best);
    return -1;
  }
  uint64_t n = le_get_u64(q);
  q += 8;
  if (n != s->n_params) {
    snprintf(why, cap, "%llu parameters, this run's model has %llu",
             (unsigned long long)n, (unsigned long long)s->n_params);
    return -1;
  }
  NEED(4 * n + 28, "the parameters");
  const uint8_t *params = q;
  q += 4 * n;
  uint32_t has_v = le_get_u32(q);
  if (has_v != (uint32_t)(s->has_v != 0)) {
    snprintf(why, cap, "optimiser state %s a second moment, this run's %s",
             has_v ? "has" : "lacks", s->has_v ? "has one" : "has none");
    return -1;
  }
  int64_t opt_step = (int64_t)le_get_u64(q + 4);
  double b1_t = le_get_f64(q + 12), b2_t = le_get_f64(q + 20);
  q += 28;
  size_t moments = 4 * (size_t)n * (has_v ? 2 : 1);
  if ((size_t)(end - q) != moments) {
    snprintf(why, cap,
             "malformed payload: %zu bytes of optimiser state, expected %zu",
             (size_t)(end - q), moments);
    return -1;
  }
#undef NEED
  /* All checked: copy. */
  s->epoch = epoch;
  s->step = step;
  for (uint32_t i = 0; i < n_rng; i++)
    s->rng[i] = le_get_u64(rngs + 8 * i);
  s->loss_scale = loss_scale;
  s->scaler_good = scaler_good;
  s->scaler_skipped = scaler_skipped;
  s->plateau_best = plateau_best;
  s->plateau_bad = plateau_bad;
  s->plateau_scale = plateau_scale;
  s->plateau_reductions = plateau_reductions;
  le_get_f32s(params, s->params, (size_t)n);
  s->opt_step = opt_step;
  s->b1_t = b1_t;
  s->b2_t = b2_t;
  le_get_f32s(q, s->m, (size_t)n);
  if (has_v)
    le_get_f32s(q + 4 * n, s->v, (size_t)n);
  return 0;
}

int ckpt_read(const char *dir, ckpt_state *s, char *err, size_t err_cap) {
  char path[4096], why[1024];
  if (ckpt_path(dir, path, sizeof path) != 0) {
    snprintf(err, err_cap, "%s: checkpoint directory path too long", dir);
    return -1;
  }
  size_t len = 0;
  uint8_t *b = slurp(path, &len, why, sizeof why);
  int rc = b ? decode(b, len, s, why, sizeof why) : -1;
  free(b);
  if (rc != 0)
    snprintf(err, err_cap, "%s: checkpoint refused: %s", path, why);
  return rc;
}
