#include "common/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/status.h"

/* The one table of tunables. Defaults: HK_CYCLE_TIME_MS = 1 ms is
 * Horovod's HOROVOD_CYCLE_TIME default; the chunk size of 1 MiB matches
 * the write size at which loopback TCP reaches its peak on the reference
 * machine (../shared/peers/results/limits.txt, tcp_ring 1024 KiB). */
typedef struct tunable {
  const char *var;
  double def, min, max;
  const char *unit, *meaning;
  size_t offset;
  int is_size; /* stored as size_t, else double */
} tunable;

#define OFF(f) offsetof(hk_config, f)
static const tunable table[] = {
    {"HK_CYCLE_TIME_MS", 1, 0, 60000, "ms", "time between negotiation cycles",
     OFF(cycle_time_ms), 0},
    {"HK_TIMEOUT_S", 60, 0.1, 86400, "s",
     "a transfer or negotiation making no progress for this long fails",
     OFF(timeout_s), 0},
    {"HK_START_TIMEOUT_S", 60, 0.1, 86400, "s",
     "hk_init fails if the job has not assembled by then", OFF(start_timeout_s),
     0},
    {"HK_RING_CHUNK_BYTES", 1 << 20, 4096, 1 << 30, "bytes",
     "pipeline chunk of the ring (receive staging buffer)",
     OFF(ring_chunk_bytes), 1},
};

hk_status hk_config_load(hk_config *cfg) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const tunable *t = &table[i];
    double v = t->def;
    const char *s = getenv(t->var);
    if (s && *s) {
      char *end;
      errno = 0;
      v = strtod(s, &end);
      if (errno || *end || !isfinite(v))
        return hk_fail(HK_ERR_CONFIG, "%s='%s' is not a number (unit: %s)",
                       t->var, s, t->unit);
      if (v < t->min || v > t->max)
        return hk_fail(HK_ERR_CONFIG, "%s=%s is out of range [%g, %g] %s",
                       t->var, s, t->min, t->max, t->unit);
    }
    char *field = (char *)cfg + t->offset;
    if (t->is_size)
      *(size_t *)field = (size_t)v;
    else
      *(double *)field = v;
  }
  cfg->log_level = HK_LOG_WARNING;
  const char *lvl = getenv("HK_LOG_LEVEL");
  if (lvl && *lvl) {
    int l = hk_log_level_parse(lvl);
    if (l < 0)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_LOG_LEVEL='%s' is not one of error, warning, info, "
                     "debug",
                     lvl);
    cfg->log_level = l;
  }
  return HK_OK;
}

void hk_config_print_table(void) {
  printf("%-22s %12s  %-24s %s\n", "variable", "default", "range", "meaning");
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const tunable *t = &table[i];
    char range[64];
    snprintf(range, sizeof range, "[%g, %g] %s", t->min, t->max, t->unit);
    printf("%-22s %12g  %-24s %s\n", t->var, t->def, range, t->meaning);
  }
  printf("%-22s %12s  %-24s %s\n", "HK_LOG_LEVEL", "warning",
         "error|warning|info|debug", "diagnostics written to stderr");
}
