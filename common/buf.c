#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

hk_status hk_buf_reserve(hk_buf *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return HK_OK;
  size_t need = b->len + extra;
  if (need < b->len)
    return hk_fail(HK_ERR_NOMEM, "buffer size overflow");
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need)
    cap = cap * 2 > cap ? cap * 2 : need;
  uint8_t *p = realloc(b->data, cap);
  if (!p)
    return hk_fail(HK_ERR_NOMEM, "cannot grow a buffer to %zu bytes", cap);
  b->data = p;
  b->cap = cap;
  return HK_OK;
}

hk_status hk_buf_append(hk_buf *b, const void *p, size_t n) {
  hk_status st = hk_buf_reserve(b, n);
  if (st != HK_OK)
    return st;
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  return HK_OK;
}

void hk_buf_clear(hk_buf *b) { b->len = 0; }

void hk_buf_free(hk_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}
