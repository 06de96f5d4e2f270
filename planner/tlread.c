/*
 * tlread.c - reading hk's timeline (tlread.h).
 */
#include "planner/tlread.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* The string value of "key":"..." in line into out (cap bytes); 0 if absent. */
static int str_field(const char *line, const char *key, char *out, size_t cap) {
  const char *p = strstr(line, key);
  if (!p)
    return 0;
  p += strlen(key);
  size_t n = 0;
  while (*p && *p != '"' && n + 1 < cap) {
    if (*p == '\\' && p[1])
      p++;
    out[n++] = *p++;
  }
  out[n] = '\0';
  return *p == '"';
}

static int num_field(const char *line, const char *key, double *v) {
  const char *p = strstr(line, key);
  if (!p)
    return 0;
  char *end;
  *v = strtod(p + strlen(key), &end);
  return end != p + strlen(key);
}

hk_status hk_tl_read(const char *path, hk_tl *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f)
    return hk_fail(HK_ERR_SYSTEM, "timeline %s: %s", path, strerror(errno));
  char *line = NULL;
  size_t linecap = 0, cap = 0;
  hk_status st = HK_OK;
  size_t lineno = 0;
  while (st == HK_OK && getline(&line, &linecap, f) >= 0) {
    lineno++;
    if (!strstr(line, "\"ph\":\"X\""))
      continue;
    hk_tl_span s = {.bytes = -1, .response = -1};
    double fused = 0, bytes = -1, resp = -1;
    if (!str_field(line, "{\"name\":\"", s.phase, sizeof s.phase) ||
        !str_field(line, "\"tensor\":\"", s.tensor, sizeof s.tensor) ||
        !num_field(line, "\"ts\":", &s.ts_us) ||
        !num_field(line, "\"dur\":", &s.dur_us))
      continue;
    if (!(fabs(s.ts_us) <= HK_TL_MAX_US) ||
        !(s.dur_us >= 0 && s.dur_us <= HK_TL_MAX_US)) { /* NaN fails too */
      st = hk_fail(HK_ERR_CONFIG,
                   "%s: line %zu: span %s of %s: ts %g, dur %g µs (want "
                   "finite times within +-%g µs, dur >= 0)",
                   path, lineno, s.phase, s.tensor, s.ts_us, s.dur_us,
                   HK_TL_MAX_US);
      break;
    }
    if (num_field(line, "\"fused_tensors\":", &fused))
      s.fused = (long)fused;
    if (num_field(line, "\"bytes\":", &bytes))
      s.bytes = (long long)bytes;
    if (num_field(line, "\"response\":", &resp))
      s.response = (long)resp;
    if (out->n == cap) {
      cap = cap ? 2 * cap : 1024;
      hk_tl_span *g = realloc(out->span, cap * sizeof *g);
      if (!g) {
        st = hk_fail(HK_ERR_NOMEM, "timeline %s: out of memory", path);
        break;
      }
      out->span = g;
    }
    out->span[out->n++] = s;
  }
  free(line);
  fclose(f);
  if (st == HK_OK && out->n == 0)
    st = hk_fail(HK_ERR_CONFIG,
                 "%s: no timeline spans (is it an hk timeline, HK_TIMELINE?)",
                 path);
  if (st != HK_OK)
    hk_tl_free(out);
  return st;
}

void hk_tl_free(hk_tl *t) {
  free(t->span);
  memset(t, 0, sizeof *t);
}
