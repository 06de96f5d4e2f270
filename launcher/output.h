/*
 * output.h - turns a worker's byte stream into whole, prefixed lines.
 *
 * A splitter is fed the bytes of one stream (stdout or stderr of one
 * worker) in chunks of any size, as they arrive from the pipe. For every
 * complete line it calls emit() once with the prefix, the line and its
 * '\n' in ONE contiguous buffer, so the caller can write it with a single
 * write(2) and lines from different workers never mix. A line longer than
 * HK_OUT_MAX_LINE bytes is emitted in pieces of HK_OUT_MAX_LINE bytes, each
 * with the prefix and a '\n' added. hk_out_finish() emits a final partial
 * line (with '\n' added) at end of stream.
 *
 * The splitter itself is pure (no I/O); hk_out_write_all() is the small
 * helper hkrun uses to write emitted lines to its own stdout/stderr.
 */
#ifndef HK_LAUNCHER_OUTPUT_H
#define HK_LAUNCHER_OUTPUT_H

#include <stddef.h>

#include "common/buf.h"
#include "hk/hk.h"

/** Longest piece of one line emitted at once, in bytes (without prefix
 *  and newline). */
#define HK_OUT_MAX_LINE (64u * 1024u)
/** Longest prefix accepted by hk_out_init, in bytes. */
#define HK_OUT_MAX_PREFIX 64u

/**
 * Called once per output line. `line` holds prefix + text + '\n' (len
 * bytes, not NUL-terminated) and is valid only during the call.
 */
typedef void (*hk_out_emit_fn)(void *ctx, const char *line, size_t len);

typedef struct hk_out_splitter {
  hk_out_emit_fn emit;
  void *ctx;
  size_t prefix_len; /* bytes of prefix at the start of buf */
  hk_buf buf;        /* prefix, then the pending partial line */
} hk_out_splitter;

/**
 * Prepares *s to emit lines starting with `prefix` ("" for none; copied,
 * at most HK_OUT_MAX_PREFIX bytes). Memory grows with the longest pending
 * partial line, up to HK_OUT_MAX_LINE + prefix + 1 bytes.
 * Errors: HK_ERR_INVALID_ARG (prefix too long, NULL emit), HK_ERR_NOMEM.
 * Thread-safety: a splitter has one owner at a time.
 */
hk_status hk_out_init(hk_out_splitter *s, const char *prefix,
                      hk_out_emit_fn emit, void *ctx);

/**
 * Consumes n bytes of the stream: emits every line they complete and keeps
 * the rest pending. Errors: HK_ERR_NOMEM (the bytes not yet buffered are
 * dropped; already-complete lines were emitted).
 */
hk_status hk_out_feed(hk_out_splitter *s, const char *data, size_t n);

/** End of stream: emits the pending partial line, if any, with '\n'
 *  added. The splitter may be fed again afterwards. */
void hk_out_finish(hk_out_splitter *s);

/** Releases the splitter's memory (pending bytes are discarded). */
void hk_out_free(hk_out_splitter *s);

/**
 * Writes all len bytes of data to fd, retrying on EINTR and partial
 * writes, and waiting (poll) while a non-blocking fd reports EAGAIN.
 * Returns 0, or a negative errno (e.g. -EPIPE when the reader is gone;
 * SIGPIPE must be ignored by the caller for that to be reported).
 * Thread-safety: reentrant; concurrent writers to one fd may interleave
 * once a line exceeds PIPE_BUF.
 */
int hk_out_write_all(int fd, const void *data, size_t len);

/**
 * hkrun's own messages: "hkrun: <printf of fmt>\n" on stderr in one
 * write (so lines from several processes do not interleave below
 * PIPE_BUF); a message longer than HK_OUT_SAY_CAP bytes is cut. Errors
 * writing are ignored (nothing else could say them). Thread-safety:
 * reentrant.
 */
#define HK_OUT_SAY_CAP 2048
void hk_out_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
