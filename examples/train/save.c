/*
 * save.c - writing weight files (HKMLP1 and the model table's, see save.h
 * and model.h) and reading HKMLP1. Values are
 * converted to little-endian byte by byte, so the file is the same on any
 * host.
 */
#include "save.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "le.h"

/* Writes magic, nw header words and n floats of p to path. */
static int write_weights(const char *path, const char magic[8],
                         const uint32_t *words, int nw, const float *p,
                         size_t n, char *err, size_t err_cap) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, err_cap, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  uint8_t head[SAVE_MAGIC_LEN + 4 * MODEL_MAX_WORDS];
  memcpy(head, magic, SAVE_MAGIC_LEN);
  for (int i = 0; i < nw; i++)
    le_put_u32(head + SAVE_MAGIC_LEN + 4 * i, words[i]);
  size_t hlen = SAVE_MAGIC_LEN + 4 * (size_t)nw;
  int ok = fwrite(head, 1, hlen, f) == hlen;
  uint8_t chunk[4096];
  for (size_t i = 0; ok && i < n;) {
    size_t k = n - i < sizeof chunk / 4 ? n - i : sizeof chunk / 4;
    le_put_f32s(chunk, p + i, k);
    i += k;
    ok = fwrite(chunk, 4, k, f) == k;
  }
  int saved_errno = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    saved_errno = errno;
  }
  if (!ok) {
    snprintf(err, err_cap, "%s: write failed: %s", path, strerror(saved_errno));
    return -1;
  }
  return 0;
}

int mlp_save(const mlp *m, const char *path, char *err, size_t err_cap) {
  uint32_t words[MLP_MAX_LAYERS + 2];
  words[0] = (uint32_t)m->n_layers;
  for (int l = 0; l <= m->n_layers; l++)
    words[1 + l] = (uint32_t)m->dims[l];
  return write_weights(path, SAVE_MAGIC, words, m->n_layers + 2, m->params,
                       m->n_params, err, err_cap);
}

int model_save(const model *m, const char *path, char *err, size_t err_cap) {
  char magic[SAVE_MAGIC_LEN];
  uint32_t words[MODEL_MAX_WORDS];
  int nw = m->ops->header(m, magic, words);
  return write_weights(path, magic, words, nw, m->params, m->n_params, err,
                       err_cap);
}

int mlp_load(mlp *m, const char *path, char *err, size_t err_cap) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_cap, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  uint8_t head[12 + 4 * (MLP_MAX_LAYERS + 1)];
  int dims[MLP_MAX_LAYERS + 1];
  const char *why = NULL;
  uint32_t L = 0;
  if (fread(head, 1, 12, f) != 12 || memcmp(head, SAVE_MAGIC, 8) != 0)
    why = "not an HKMLP1 file (bad magic or too short)";
  else if ((L = le_get_u32(head + 8)) < 1 || L > MLP_MAX_LAYERS)
    why = "bad number of layers";
  else if (fread(head + 12, 4, L + 1, f) != L + 1)
    why = "truncated header";
  else {
    for (uint32_t l = 0; l <= L; l++) {
      uint32_t d = le_get_u32(head + 12 + 4 * l);
      dims[l] = d > 65536 ? 0 : (int)d;
    }
    if (mlp_init(m, (int)L, dims) != 0)
      why = "bad widths (or out of memory)";
  }
  uint8_t b[4];
  for (size_t i = 0; !why && i < m->n_params; i++) {
    if (fread(b, 1, 4, f) != 4) {
      why = "truncated parameters";
      break;
    }
    le_get_f32s(b, &m->params[i], 1);
  }
  if (!why && fread(b, 1, 1, f) != 0)
    why = "trailing bytes after the parameters";
  fclose(f);
  if (why) {
    mlp_free(m);
    snprintf(err, err_cap, "%s: %s", path, why);
    return -1;
  }
  return 0;
}
