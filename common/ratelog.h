/*
 * ratelog.h - a log line that anyone on the network can make us write
 * (a refused connection, a failed accept) is rate-limited: at most one
 * line a second per cause, the next line saying how many were suppressed
 * in between, so a flood of connections costs a few lines, not a full
 * disk, and still says what happened.
 * Thread-safety: one limiter is used by one thread at a time.
 */
#ifndef HK_COMMON_RATELOG_H
#define HK_COMMON_RATELOG_H

#include "common/log.h"

/* One cause's limiter; zero-initialised it is ready. */
typedef struct hk_ratelog {
  double last;         /* hk_now() of the last line written; 0: none yet */
  unsigned suppressed; /* lines not written since */
} hk_ratelog;

/**
 * Logs the line (hk_log's format) if this limiter wrote none in the last
 * second, appending " (N more like it in the last X.X s)" when it
 * suppressed N since the last; else counts it as suppressed.
 */
void hk_ratelog_say(hk_ratelog *r, hk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Writes "<what>: N more like it in the last X.X s" if lines were
 * suppressed since the last written, so no count is lost when the cause
 * stops (at the end of a start-up, at shutdown).
 */
void hk_ratelog_flush(hk_ratelog *r, hk_log_level level, const char *what);

#endif
