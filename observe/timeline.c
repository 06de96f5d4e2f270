#include "observe/timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/strmap.h"

struct hk_timeline {
  int fd;
  off_t end; /* where the closing "\n]\n" starts */
  int nevents;
  double t0;       /* hk_now() at open */
  hk_strmap *rows; /* tensor name -> row id (tid) */
  int next_row;
  hk_buf line;
  int failed;        /* a write failed: stop writing, say so once */
  size_t limit;      /* bytes the file may take; 0: no bound */
  off_t note_at;     /* where the TIMELINE_TRUNCATED note starts, or -1 */
  double note_ts;    /* its time stamp, us */
  unsigned long cut; /* events left out since */
};

/* Room the truncation note and the closing bracket take at most. */
#define NOTE_RESERVE 512

hk_status hk_timeline_open(const char *path, hk_timeline **out) {
  hk_timeline *tl = calloc(1, sizeof *tl);
  if (!tl)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the timeline");
  tl->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tl->fd < 0) {
    int e = errno;
    free(tl);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "HK_TIMELINE: cannot create '%s'",
                         path);
  }
  if (hk_strmap_create(&tl->rows) != HK_OK ||
      pwrite(tl->fd, "[\n]\n", 4, 0) != 4) {
    hk_timeline_close(tl);
    return hk_fail(HK_ERR_SYSTEM, "HK_TIMELINE: cannot write '%s'", path);
  }
  tl->end = 1;
  tl->note_at = -1;
  tl->t0 = hk_now();
  tl->next_row = 1; /* row 0: cycles */
  *out = tl;
  return HK_OK;
}

void hk_timeline_set_limit(hk_timeline *tl, size_t max_bytes) {
  if (tl)
    tl->limit = max_bytes && max_bytes < 1024 ? 1024 : max_bytes;
}

/* Writes the truncation note at tl->note_at with the closing bracket. */
static void write_note(hk_timeline *tl) {
  char ev[NOTE_RESERVE];
  int n = snprintf(ev, sizeof ev,
                   "%s{\"name\":\"TIMELINE_TRUNCATED\",\"cat\":\"hk\","
                   "\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,"
                   "\"ts\":%.3f,\"args\":{\"note\":\"HK_TIMELINE_MAX_MB: "
                   "the file reached its bound of %zu bytes; later events "
                   "were not written\",\"events_not_written\":%lu}}\n]\n",
                   tl->nevents ? ",\n" : "", tl->note_ts, tl->limit, tl->cut);
  if (n > 0 && n < (int)sizeof ev &&
      pwrite(tl->fd, ev, (size_t)n, tl->note_at) != n && !tl->failed) {
    tl->failed = 1;
    hk_log(HK_LOG_WARNING, "HK_TIMELINE: write failed; timeline stopped");
  }
}

void hk_timeline_close(hk_timeline *tl) {
  if (!tl)
    return;
  if (tl->fd >= 0 && tl->note_at >= 0 && !tl->failed)
    write_note(tl); /* with the final count */
  if (tl->fd >= 0)
    close(tl->fd);
  hk_strmap_destroy(tl->rows);
  hk_buf_free(&tl->line);
  free(tl);
}

/* Appends s as a JSON string body (quotes, backslashes, controls escaped). */
static void put_escaped(hk_buf *b, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      hk_buf_append(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      hk_buf_append(b, esc, 6);
    } else {
      hk_buf_append(b, s, 1);
    }
  }
}

static void put(hk_buf *b, const char *s) { hk_buf_append(b, s, strlen(s)); }

/* Writes the event in tl->line (without separators) and the closing
 * bracket behind it, in one pwrite over the old closing bracket. */
static void emit(hk_timeline *tl) {
  if (tl->failed)
    return;
  if (tl->note_at >= 0) { /* cut: count it, write nothing */
    tl->cut++;
    return;
  }
  /* the event, ",\n" and the bracket must leave room for the note */
  if (tl->limit &&
      (size_t)tl->end + tl->line.len + 2 + NOTE_RESERVE > tl->limit) {
    tl->note_at = tl->end;
    tl->note_ts = (hk_now() - tl->t0) * 1e6;
    tl->cut = 1;
    write_note(tl);
    hk_log(HK_LOG_WARNING,
           "HK_TIMELINE: the file reached HK_TIMELINE_MAX_MB (%zu bytes); "
           "later events are not written",
           tl->limit);
    return;
  }
  hk_buf out = {0};
  put(&out, tl->nevents ? ",\n" : "");
  hk_buf_append(&out, tl->line.data, tl->line.len);
  put(&out, "\n]\n");
  ssize_t w = out.data ? pwrite(tl->fd, out.data, out.len, tl->end) : -1;
  if (w != (ssize_t)out.len) {
    tl->failed = 1;
    hk_log(HK_LOG_WARNING, "HK_TIMELINE: write failed; timeline stopped");
  } else {
    tl->end += (off_t)(out.len - 3);
    tl->nevents++;
  }
  hk_buf_free(&out);
}

static int row_of(hk_timeline *tl, const char *tensor) {
  void *v = hk_strmap_get(tl->rows, tensor);
  if (v)
    return (int)(intptr_t)v;
  int row = tl->next_row++;
  hk_strmap_put(tl->rows, tensor, (void *)(intptr_t)row);
  hk_buf_clear(&tl->line);
  char head[96];
  snprintf(head, sizeof head,
           "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
           "\"args\":{\"name\":\"",
           row);
  put(&tl->line, head);
  put_escaped(&tl->line, tensor);
  put(&tl->line, "\"}}");
  emit(tl);
  return row;
}

void hk_timeline_span(hk_timeline *tl, const char *tensor, const char *phase,
                      double start_s, double end_s, const char *args_json) {
  int row = row_of(tl, tensor);
  hk_buf_clear(&tl->line);
  char num[160];
  put(&tl->line, "{\"name\":\"");
  put(&tl->line, phase);
  snprintf(num, sizeof num,
           "\",\"cat\":\"hk\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
           "\"dur\":%.3f,\"args\":{\"tensor\":\"",
           row, (start_s - tl->t0) * 1e6,
           (end_s > start_s ? end_s - start_s : 0) * 1e6);
  put(&tl->line, num);
  put_escaped(&tl->line, tensor);
  put(&tl->line, "\"");
  if (args_json && *args_json) {
    put(&tl->line, ",");
    put(&tl->line, args_json);
  }
  put(&tl->line, "}}");
  emit(tl);
}

void hk_timeline_mark(hk_timeline *tl, const char *name, double t_s) {
  hk_buf_clear(&tl->line);
  char ev[192];
  snprintf(ev, sizeof ev,
           "{\"name\":\"%s\",\"cat\":\"hk\",\"ph\":\"i\",\"s\":\"p\","
           "\"pid\":0,\"tid\":0,\"ts\":%.3f}",
           name, (t_s - tl->t0) * 1e6);
  put(&tl->line, ev);
  emit(tl);
}
