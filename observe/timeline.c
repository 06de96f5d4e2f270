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
#include "common/outfile.h"
#include "common/status.h"
#include "common/strmap.h"

struct hk_timeline {
  hk_outfile file; /* file.fd: written with pwrite */
  off_t end;       /* where the closing "\n]\n" starts */
  int nevents;
  double t0;       /* hk_now() at open */
  hk_strmap *rows; /* tensor name -> row id (tid) */
  int next_row;
  hk_buf line;
  int failed;        /* a write failed: stopped, said once */
  size_t limit;      /* bytes the file may take; 0: no bound */
  off_t note_at;     /* where the TIMELINE_TRUNCATED note starts, or -1 */
  double note_ts;    /* its time stamp, us */
  unsigned long cut; /* events left out since */
};

/* Room the truncation note and the closing bracket take at most. */
#define NOTE_RESERVE 512

hk_status hk_timeline_open(const char *path, unsigned mode, hk_timeline **out) {
  hk_timeline *tl = calloc(1, sizeof *tl);
  if (!tl)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the timeline");
  /* made without a name, named once it holds "[]" (common/outfile.h) */
  hk_status st = hk_outfile_open(&tl->file, path, mode, "HK_TIMELINE");
  if (st == HK_OK)
    st = hk_strmap_create(&tl->rows);
  if (st == HK_OK)
    st = hk_outfile_write(&tl->file, "[\n]\n", 4);
  if (st == HK_OK)
    st = hk_outfile_publish(&tl->file, HK_OUT_UNLINK_FIRST);
  if (st != HK_OK) {
    hk_timeline_close(tl);
    return st;
  }
  tl->end = 1;
  tl->note_at = -1;
  tl->t0 = hk_now();
  tl->next_row = 1; /* row 0: cycles */
  *out = tl;
  return HK_OK;
}

/* A write at `at` failed or fell short (a full disk, a quota): put the
 * closing bracket back where the last whole event ends and cut what the
 * write left behind it, so the file stays valid JSON; then stop, saying so
 * once with the file and the reason. The bracket's bytes were the file's
 * before the write, so putting them back needs no new space. */
static void stop_writing(hk_timeline *tl, off_t at, int err) {
  tl->failed = 1;
  int ok = pwrite(tl->file.fd, "\n]\n", 3, at) == 3 &&
           ftruncate(tl->file.fd, at + 3) == 0;
  hk_log(HK_LOG_WARNING,
         "HK_TIMELINE: cannot write '%s': %s; the timeline stops here, %s "
         "(%d events)",
         tl->file.path, strerror(err),
         ok ? "valid JSON up to its last whole event"
            : "and it could not be closed as valid JSON",
         tl->nevents);
}

/* pwrite(2) of all len bytes at `at`; 0, or the errno of the failure
 * (ENOSPC for a write that fell short). */
static int write_at(hk_timeline *tl, const void *data, size_t len, off_t at) {
  ssize_t w = pwrite(tl->file.fd, data, len, at);
  return w == (ssize_t)len ? 0 : w < 0 ? errno : ENOSPC;
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
  int err = n > 0 && n < (int)sizeof ev
                ? write_at(tl, ev, (size_t)n, tl->note_at)
                : EOVERFLOW;
  if (err)
    stop_writing(tl, tl->note_at, err);
}

void hk_timeline_close(hk_timeline *tl) {
  if (!tl)
    return;
  if (tl->file.fd >= 0 && tl->note_at >= 0 && !tl->failed)
    write_note(tl); /* with the final count */
  hk_outfile_close(&tl->file);
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
  int err = out.data ? write_at(tl, out.data, out.len, tl->end) : ENOMEM;
  if (err) {
    stop_writing(tl, tl->end, err);
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
