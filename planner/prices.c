/*
 * prices.c - the price table (prices.h).
 */
#include "planner/prices.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

static hk_status parse_line(hk_prices *p, char *line, long lineno,
                            size_t *cap) {
  char *save = NULL;
  char *name = strtok_r(line, " \t\r\n", &save);
  if (!name || name[0] == '#')
    return HK_OK;
  char *price = strtok_r(NULL, " \t\r\n", &save);
  char *extra = strtok_r(NULL, " \t\r\n", &save);
  char *end = NULL;
  double v = price ? strtod(price, &end) : NAN;
  if (!price || *end || strpbrk(price, "xXnN") ||
      !(v >= 0 && v <= HK_PRICE_MAX) || (extra && extra[0] != '#'))
    return hk_fail(HK_ERR_CONFIG,
                   "%s:%ld: expected 'server price-per-hour' (a decimal "
                   "number in 0 .. 1e6), found '%s%s%s'",
                   p->path, lineno, name, price ? " " : "", price ? price : "");
  if (strlen(name) >= sizeof p->e[0].name)
    return hk_fail(HK_ERR_CONFIG, "%s:%ld: server name longer than %zu bytes",
                   p->path, lineno, sizeof p->e[0].name - 1);
  for (size_t i = 0; i < p->n; i++)
    if (!strcmp(p->e[i].name, name))
      return hk_fail(HK_ERR_CONFIG, "%s:%ld: server '%s' is priced twice",
                     p->path, lineno, name);
  if (p->n == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    struct hk_price *g = realloc(p->e, *cap * sizeof *g);
    if (!g)
      return hk_fail(HK_ERR_NOMEM, "%s: out of memory", p->path);
    p->e = g;
  }
  snprintf(p->e[p->n].name, sizeof p->e[p->n].name, "%s", name);
  p->e[p->n++].per_hour = v;
  return HK_OK;
}

hk_status hk_prices_load(const char *path, hk_prices *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  FILE *f = fopen(path, "r");
  if (!f)
    return hk_fail(HK_ERR_SYSTEM, "price table %s: %s", path, strerror(errno));
  char *line = NULL;
  size_t linecap = 0, cap = 0;
  long lineno = 0;
  hk_status st = HK_OK;
  errno = 0;
  while (st == HK_OK && getline(&line, &linecap, f) >= 0)
    st = parse_line(out, line, ++lineno, &cap);
  if (st == HK_OK && ferror(f)) /* a folder, say */
    st = hk_fail(HK_ERR_SYSTEM, "price table %s: %s", path, strerror(errno));
  free(line);
  fclose(f);
  if (st != HK_OK)
    hk_prices_free(out);
  return st;
}

hk_status hk_prices_get(const hk_prices *p, const char *name, double *out) {
  for (size_t i = 0; i < p->n; i++)
    if (!strcmp(p->e[i].name, name)) {
      *out = p->e[i].per_hour;
      return HK_OK;
    }
  return hk_fail(HK_ERR_CONFIG,
                 "the price table %s has no price for server '%s' (add a "
                 "line '%s <price per hour>')",
                 p->path, name, name);
}

void hk_prices_free(hk_prices *p) {
  free(p->e);
  p->e = NULL;
  p->n = 0;
}
