/*
 * save.c - writing and reading the HKMLP1 format (see save.h). Values are
 * converted to little-endian byte by byte, so the file is the same on any
 * host.
 */
#include "save.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "le.h"

int mlp_save(const mlp *m, const char *path, char *err, size_t err_cap) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, err_cap, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  uint8_t head[12 + 4 * (MLP_MAX_LAYERS + 1)];
  memcpy(head, SAVE_MAGIC, SAVE_MAGIC_LEN);
  le_put_u32(head + 8, (uint32_t)m->n_layers);
  for (int l = 0; l <= m->n_layers; l++)
    le_put_u32(head + 12 + 4 * l, (uint32_t)m->dims[l]);
  int ok = fwrite(head, 1, 12 + 4 * ((size_t)m->n_layers + 1), f) ==
           12 + 4 * ((size_t)m->n_layers + 1);
  uint8_t chunk[4096];
  for (size_t i = 0; ok && i < m->n_params;) {
    size_t k =
        m->n_params - i < sizeof chunk / 4 ? m->n_params - i : sizeof chunk / 4;
    le_put_f32s(chunk, m->params + i, k);
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
