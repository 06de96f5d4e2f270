/*
 * log.h - diagnostics to stderr, one line per call, written with a single
 * write(2) so lines from threads and processes never interleave mid-line.
 * Format: "hk[<rank>] <level>: <message>\n" ("hkrun <level>: ..." in the
 * launcher). The level threshold comes from HK_LOG_LEVEL
 * (error|warning|info|debug; default warning).
 * Thread-safety: safe from any thread.
 */
#ifndef HK_COMMON_LOG_H
#define HK_COMMON_LOG_H

#include <stdarg.h>

typedef enum hk_log_level {
  HK_LOG_ERROR = 0,
  HK_LOG_WARNING = 1,
  HK_LOG_INFO = 2,
  HK_LOG_DEBUG = 3,
} hk_log_level;

/** Sets the prefix ("hk[3]", "hkrun") and threshold; call before threads. */
void hk_log_setup(const char *prefix, hk_log_level threshold);

/** Parses "error"/"warning"/"info"/"debug"; returns -1 if unknown. */
int hk_log_level_parse(const char *s);

/** Logs one line at `level` if it passes the threshold. */
void hk_log(hk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** hk_log with a va_list. */
void hk_vlog(hk_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#endif
