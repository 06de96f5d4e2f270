/*
 * hosts.c - -H and host-file parsers (see hosts.h). Pure: reads its
 * arguments, allocates the result, reports through hk_fail().
 */
#include "launcher/hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* Longest token quoted in an error message, in bytes. */
#define TOKEN_SHOWN_MAX 200

/* Where a token came from: "-H" or "FILE:LINE". */
typedef struct origin {
  char where[320];
} origin;

static int tok_shown(size_t len) {
  return (int)(len < TOKEN_SHOWN_MAX ? len : TOKEN_SHOWN_MAX);
}

static int is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* Checks host name s[0..len) and copies it into out. tok/tok_len is the
 * whole token shown in messages. */
static hk_status take_name(const origin *o, const char *tok, size_t tok_len,
                           const char *s, size_t len, hk_host *out) {
  if (len == 0)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: '%.*s': no host name before ':'",
                   o->where, tok_shown(tok_len), tok);
  if (len > HK_HOST_NAME_MAX)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': the host name is longer than %d bytes",
                   o->where, tok_shown(tok_len), tok, HK_HOST_NAME_MAX);
  for (size_t i = 0; i < len; i++) {
    if (!is_name_char(s[i]) || (i == 0 && (s[i] == '-' || s[i] == '.')))
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: '%.*s': '%.*s' is not a host name (letters, "
                     "digits, '-', '.', '_'; IPv6 addresses are not "
                     "supported)",
                     o->where, tok_shown(tok_len), tok, tok_shown(len), s);
  }
  memcpy(out->name, s, len);
  out->name[len] = '\0';
  return HK_OK;
}

/* Parses the slot count s[0..len) into *slots. */
static hk_status take_slots(const origin *o, const char *tok, size_t tok_len,
                            const char *s, size_t len, int *slots) {
  if (len == 0)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: '%.*s': no slot count after '%c'",
                   o->where, tok_shown(tok_len), tok, s[-1]);
  long v = 0;
  int ok = 1;
  for (size_t i = 0; i < len && ok; i++) {
    if (s[i] < '0' || s[i] > '9')
      ok = 0;
    else if ((v = v * 10 + (s[i] - '0')) > HK_HOST_MAX_SLOTS)
      ok = 0;
  }
  if (!ok || v < 1)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': the slot count must be a whole number from 1 "
                   "to %d, not '%.*s'",
                   o->where, tok_shown(tok_len), tok, HK_HOST_MAX_SLOTS,
                   tok_shown(len), s);
  *slots = (int)v;
  return HK_OK;
}

/* Parses "host" or "host:SLOTS" (tok[0..len), no spaces inside). */
static hk_status parse_entry(const origin *o, const char *tok, size_t len,
                             hk_host *out) {
  const char *colon = memchr(tok, ':', len);
  if (!colon) {
    out->slots = 1;
    return take_name(o, tok, len, tok, len, out);
  }
  size_t name_len = (size_t)(colon - tok);
  if (memchr(colon + 1, ':', len - name_len - 1))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': more than one ':' (write host:slots; IPv6 "
                   "addresses are not supported)",
                   o->where, tok_shown(len), tok);
  hk_status st = take_name(o, tok, len, tok, name_len, out);
  if (st == HK_OK)
    st = take_slots(o, tok, len, colon + 1, len - name_len - 1, &out->slots);
  return st;
}

/* Appends h to *l, growing it. */
static hk_status push(hk_hostlist *l, int *cap, const hk_host *h) {
  if (l->n == HK_HOSTS_MAX)
    return hk_fail(HK_ERR_INVALID_ARG, "more than %d hosts", HK_HOSTS_MAX);
  if (l->n == *cap) {
    int ncap = *cap ? 2 * *cap : 8;
    hk_host *v = realloc(l->v, (size_t)ncap * sizeof *v);
    if (!v)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate the host list");
    l->v = v;
    *cap = ncap;
  }
  l->v[l->n++] = *h;
  l->total_slots += h->slots;
  return HK_OK;
}

static int cmp_index_by_name(const void *a, const void *b, void *hosts) {
  const hk_host *v = hosts;
  int ia = *(const int *)a, ib = *(const int *)b;
  int c = strcmp(v[ia].name, v[ib].name);
  return c ? c : (ia > ib) - (ia < ib);
}

/* Rejects a host listed twice, naming it (O(n log n)). */
static hk_status check_unique(const hk_hostlist *l, const char *what) {
  int *idx = malloc((size_t)l->n * sizeof *idx);
  if (!idx)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the host list");
  for (int i = 0; i < l->n; i++)
    idx[i] = i;
  qsort_r(idx, (size_t)l->n, sizeof *idx, cmp_index_by_name, l->v);
  hk_status st = HK_OK;
  for (int i = 1; i < l->n && st == HK_OK; i++) {
    const hk_host *h = &l->v[idx[i]];
    if (strcmp(l->v[idx[i - 1]].name, h->name) == 0)
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%s:%d': host '%s' is listed twice (give each host "
                   "once, with all its slots)",
                   what, h->name, h->slots, h->name);
  }
  free(idx);
  return st;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

hk_status hk_hosts_parse_list(const char *list, const char *what,
                              hk_hostlist *out) {
  *out = (hk_hostlist){0};
  origin o;
  snprintf(o.where, sizeof o.where, "%s", what);
  size_t total = strlen(list);
  size_t lead = 0;
  while (lead < total && is_space(list[lead]))
    lead++;
  if (lead == total)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: the host list is empty", what);
  int cap = 0;
  hk_status st = HK_OK;
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const char *tok = p;
    while (len > 0 && is_space(*tok)) {
      tok++;
      len--;
    }
    while (len > 0 && is_space(tok[len - 1]))
      len--;
    hk_host h;
    if (len == 0)
      st = hk_fail(HK_ERR_INVALID_ARG, "%s: '%.*s': empty entry in the list",
                   what, tok_shown(total), list);
    else
      st = parse_entry(&o, tok, len, &h);
    if (st == HK_OK)
      st = push(out, &cap, &h);
    if (st != HK_OK || !comma)
      break;
    p = comma + 1;
  }
  if (st == HK_OK)
    st = check_unique(out, what);
  if (st != HK_OK)
    hk_hosts_free(out);
  return st;
}

/* Parses one host-file line (comment already cut, not empty). */
static hk_status parse_line(const origin *o, const char *s, size_t len,
                            hk_host *h) {
  size_t i = 0, wlen = 0;
  while (i + wlen < len && !is_space(s[i + wlen]))
    wlen++;
  hk_status st = parse_entry(o, s, wlen, h);
  int has_colon = memchr(s, ':', wlen) != NULL;
  int seen_slots = 0;
  i = wlen;
  while (st == HK_OK) {
    while (i < len && is_space(s[i]))
      i++;
    if (i == len)
      break;
    const char *w = s + i;
    wlen = 0;
    while (i + wlen < len && !is_space(w[wlen]))
      wlen++;
    i += wlen;
    if (wlen >= 6 && memcmp(w, "slots=", 6) == 0) {
      if (has_colon || seen_slots)
        return hk_fail(HK_ERR_INVALID_ARG,
                       "%s: '%.*s': the slot count is given twice", o->where,
                       tok_shown(len), s);
      seen_slots = 1;
      st = take_slots(o, w, wlen, w + 6, wlen - 6, &h->slots);
    } else {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': unknown keyword (a line is 'host', "
                   "'host slots=N' or 'host:N')",
                   o->where, tok_shown(wlen), w);
    }
  }
  return st;
}

hk_status hk_hosts_parse_file(const char *text, size_t len, const char *fname,
                              hk_hostlist *out) {
  *out = (hk_hostlist){0};
  int cap = 0, line_no = 0;
  hk_status st = HK_OK;
  size_t pos = 0;
  while (pos < len && st == HK_OK) {
    line_no++;
    const char *line = text + pos;
    const char *nl = memchr(line, '\n', len - pos);
    size_t line_len = nl ? (size_t)(nl - line) : len - pos;
    pos += line_len + (nl ? 1 : 0);
    origin o;
    snprintf(o.where, sizeof o.where, "%s:%d", fname, line_no);
    if (memchr(line, '\0', line_len)) {
      st = hk_fail(HK_ERR_INVALID_ARG, "%s: a NUL byte (not a text file?)",
                   o.where);
      break;
    }
    const char *hash = memchr(line, '#', line_len);
    if (hash)
      line_len = (size_t)(hash - line);
    while (line_len > 0 && is_space(*line)) {
      line++;
      line_len--;
    }
    while (line_len > 0 && is_space(line[line_len - 1]))
      line_len--;
    if (line_len == 0)
      continue;
    hk_host h;
    st = parse_line(&o, line, line_len, &h);
    if (st == HK_OK)
      st = push(out, &cap, &h);
  }
  if (st == HK_OK && out->n == 0)
    st = hk_fail(HK_ERR_INVALID_ARG, "%s: no hosts in the file", fname);
  if (st == HK_OK)
    st = check_unique(out, fname);
  if (st != HK_OK)
    hk_hosts_free(out);
  return st;
}

hk_status hk_hosts_check_np(const hk_hostlist *h, int np) {
  if ((int64_t)np > h->total_slots)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%d processes requested but only %lld slots", np,
                   (long long)h->total_slots);
  return HK_OK;
}

char *hk_hosts_join(const hk_hostlist *h) {
  size_t cap = 1;
  for (int i = 0; i < h->n; i++)
    cap += strlen(h->v[i].name) + 1 + 6 + 1; /* name ':' slots ',' */
  char *s = malloc(cap);
  if (!s)
    return NULL;
  size_t n = 0;
  s[0] = '\0';
  for (int i = 0; i < h->n; i++)
    n += (size_t)snprintf(s + n, cap - n, "%s%s:%d", i ? "," : "", h->v[i].name,
                          h->v[i].slots);
  return s;
}

void hk_hosts_free(hk_hostlist *h) {
  free(h->v);
  *h = (hk_hostlist){0};
}
