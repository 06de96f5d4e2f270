/*
 * buf.h - a growable byte buffer (used to build wire frames).
 * Ownership: the hk_buf owns data; hk_buf_free releases it.
 * Thread-safety: none; one owner at a time.
 */
#ifndef HK_COMMON_BUF_H
#define HK_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

typedef struct hk_buf {
  uint8_t *data;
  size_t len; /* bytes used */
  size_t cap; /* bytes allocated */
} hk_buf;

/** Makes room for `extra` more bytes. Errors: HK_ERR_NOMEM. */
hk_status hk_buf_reserve(hk_buf *b, size_t extra);
/** Appends n bytes. Errors: HK_ERR_NOMEM. */
hk_status hk_buf_append(hk_buf *b, const void *p, size_t n);
/** Sets len to 0, keeping the allocation. */
void hk_buf_clear(hk_buf *b);
/** Frees the allocation and zeroes the struct. */
void hk_buf_free(hk_buf *b);

#endif
