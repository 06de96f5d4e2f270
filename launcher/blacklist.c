/*
 * blacklist.c - hosts kept out after a failure (see blacklist.h).
 */
#include "launcher/blacklist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hk_blacklist_init(hk_blacklist *b, double lo_s, double hi_s) {
  *b = (hk_blacklist){.lo_s = lo_s, .hi_s = hi_s};
}

static hk_blacklist_entry *find(const hk_blacklist *b, const char *ip) {
  for (int i = 0; i < b->n; i++)
    if (strcmp(b->e[i].ip, ip) == 0)
      return &b->e[i];
  return NULL;
}

double hk_blacklist_fail(hk_blacklist *b, const char *ip, double now) {
  hk_blacklist_entry *e = find(b, ip);
  if (!e) {
    if (b->n == b->cap) {
      int cap = b->cap ? 2 * b->cap : 8;
      hk_blacklist_entry *more = cap <= HK_BLACKLIST_CAP
                                     ? realloc(b->e, (size_t)cap * sizeof *more)
                                     : NULL;
      if (!more)
        return 0;
      b->e = more;
      b->cap = cap;
    }
    e = &b->e[b->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->ip, sizeof e->ip, "%s", ip);
  }
  e->failures++;
  if (b->lo_s < 0) {
    e->until = -1;
    return -1;
  }
  double cool = b->lo_s;
  for (int k = 1; k < e->failures && cool < b->hi_s; k++)
    cool *= 2;
  if (cool > b->hi_s)
    cool = b->hi_s;
  e->until = now + cool;
  return cool;
}

double hk_blacklist_left(const hk_blacklist *b, const char *ip, double now) {
  const hk_blacklist_entry *e = find(b, ip);
  if (!e)
    return 0;
  if (e->until < 0)
    return -1;
  return e->until > now ? e->until - now : 0;
}

int hk_blacklist_failures(const hk_blacklist *b, const char *ip) {
  const hk_blacklist_entry *e = find(b, ip);
  return e ? e->failures : 0;
}

void hk_blacklist_free(hk_blacklist *b) {
  free(b->e);
  *b = (hk_blacklist){.lo_s = b->lo_s, .hi_s = b->hi_s};
}
