#include "common/ratelog.h"

#include <stdio.h>

#include "common/clock.h"

void hk_ratelog_say(hk_ratelog *r, hk_log_level level, const char *fmt, ...) {
  const double now = hk_now();
  if (r->last > 0 && now - r->last < 1.0) {
    r->suppressed++;
    return;
  }
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (r->suppressed)
    hk_log(level, "%s (%u more like it in the last %.1f s)", line,
           r->suppressed, now - r->last);
  else
    hk_log(level, "%s", line);
  r->last = now;
  r->suppressed = 0;
}

void hk_ratelog_flush(hk_ratelog *r, hk_log_level level, const char *what) {
  if (r->suppressed)
    hk_log(level, "%s: %u more like it in the last %.1f s", what, r->suppressed,
           hk_now() - r->last);
  r->suppressed = 0;
}
