#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Set once by hk_log_setup before any thread starts; read-only after. */
static char log_prefix[64] = "hk";
static hk_log_level log_threshold = HK_LOG_WARNING;

static const char *level_names[] = {"error", "warning", "info", "debug"};

void hk_log_setup(const char *prefix, hk_log_level threshold) {
  snprintf(log_prefix, sizeof log_prefix, "%s", prefix);
  log_threshold = threshold;
}

int hk_log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcasecmp(s, level_names[i]) == 0)
      return i;
  return -1;
}

void hk_log(hk_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hk_vlog(level, fmt, ap);
  va_end(ap);
}

void hk_vlog(hk_log_level level, const char *fmt, va_list ap) {
  if (level > log_threshold || level < HK_LOG_ERROR)
    return;
  char line[2048];
  int n =
      snprintf(line, sizeof line, "%s %s: ", log_prefix, level_names[level]);
  if (n >= 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  size_t len = strlen(line);
  if (len == sizeof line - 1)
    len--; /* leave room for the newline */
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}
