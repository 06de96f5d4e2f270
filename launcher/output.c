/*
 * output.c - the line splitter behind hkrun's output prefixing (output.h).
 *
 * s->buf always starts with the prefix; the pending partial line follows
 * it. Emitting appends '\n', hands prefix + line + '\n' to emit() and
 * truncates the buffer back to the prefix.
 */
#include "launcher/output.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

hk_status hk_out_init(hk_out_splitter *s, const char *prefix,
                      hk_out_emit_fn emit, void *ctx) {
  memset(s, 0, sizeof *s);
  size_t plen = prefix ? strlen(prefix) : 0;
  if (!emit || plen > HK_OUT_MAX_PREFIX)
    return HK_ERR_INVALID_ARG;
  s->emit = emit;
  s->ctx = ctx;
  s->prefix_len = plen;
  /* Invariant: cap > len, so there is always room for the '\n'. */
  if (hk_buf_reserve(&s->buf, plen + 1) != HK_OK)
    return HK_ERR_NOMEM;
  if (plen > 0)
    memcpy(s->buf.data, prefix, plen);
  s->buf.len = plen;
  return HK_OK;
}

/* Bytes of the current line buffered so far. */
static size_t pending(const hk_out_splitter *s) {
  return s->buf.len - s->prefix_len;
}

/* Emits prefix + pending + '\n' and empties the pending line. Never
 * allocates: the invariant cap > len leaves room for the newline. */
static void emit_line(hk_out_splitter *s) {
  s->buf.data[s->buf.len] = '\n';
  s->emit(s->ctx, (const char *)s->buf.data, s->buf.len + 1);
  s->buf.len = s->prefix_len;
}

hk_status hk_out_feed(hk_out_splitter *s, const char *data, size_t n) {
  while (n > 0) {
    if (pending(s) == HK_OUT_MAX_LINE) {
      /* A full piece and more bytes follow: if the next byte ends the
       * line it belongs to this piece, otherwise the piece goes out now. */
      int ends_line = data[0] == '\n';
      emit_line(s);
      if (ends_line) {
        data++;
        n--;
        continue;
      }
    }
    size_t room = HK_OUT_MAX_LINE - pending(s);
    size_t take = n < room ? n : room;
    const char *nl = memchr(data, '\n', take);
    size_t text = nl ? (size_t)(nl - data) : take;
    if (hk_buf_reserve(&s->buf, text + 1) != HK_OK) /* +1: the '\n' */
      return HK_ERR_NOMEM;
    memcpy(s->buf.data + s->buf.len, data, text);
    s->buf.len += text;
    data += text;
    n -= text;
    if (nl) {
      emit_line(s);
      data++; /* the newline itself */
      n--;
    }
  }
  return HK_OK;
}

void hk_out_finish(hk_out_splitter *s) {
  if (pending(s) > 0)
    emit_line(s);
}

void hk_out_free(hk_out_splitter *s) {
  hk_buf_free(&s->buf);
  memset(s, 0, sizeof *s);
}

int hk_out_write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w >= 0) {
      p += w;
      len -= (size_t)w;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      /* Someone made our stdout non-blocking: wait until it drains. */
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
        return -errno;
      continue;
    }
    return -errno;
  }
  return 0;
}

void hk_out_say(const char *fmt, ...) {
  char line[HK_OUT_SAY_CAP + 1];
  int n = snprintf(line, sizeof line, "hkrun: ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len++] = '\n';
  (void)hk_out_write_all(STDERR_FILENO, line, len);
}
