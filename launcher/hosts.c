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

/* An IPv6 address: hex digits and ':' (at least two), an IPv4 tail
 * ("::ffff:10.0.0.1") and a zone ("fe80::1%eth0") allowed. */
static int is_ipv6(const char *s, size_t len) {
  size_t colons = 0, i = 0;
  for (; i < len && s[i] != '%'; i++) {
    char c = s[i];
    if (c == ':')
      colons++;
    else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
               (c >= 'A' && c <= 'F') || c == '.'))
      return 0;
  }
  if (i < len) { /* a zone: an interface name */
    if (i + 1 == len)
      return 0;
    for (size_t k = i + 1; k < len; k++)
      if (!is_name_char(s[k]))
        return 0;
  }
  return colons >= 2 && colons <= 7;
}

/* Checks host name s[0..len) and copies it into out. tok/tok_len is the
 * whole token shown in messages. Forms Open MPI gives a meaning hk has no
 * place for are named with theirs. */
static hk_status take_name(const origin *o, const char *tok, size_t tok_len,
                           const char *s, size_t len, hk_host *out) {
  if (len == 0)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: '%.*s': no host name before ':'",
                   o->where, tok_shown(tok_len), tok);
  if (len > HK_HOST_NAME_MAX)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': the host name is longer than %d bytes",
                   o->where, tok_shown(tok_len), tok, HK_HOST_NAME_MAX);
  if (memchr(s, '@', len))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': a user name before '@' is not supported (give "
                   "it to ssh: User in ~/.ssh/config)",
                   o->where, tok_shown(tok_len), tok);
  if (s[0] == '^')
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': excluding a host ('^') is not supported: list "
                   "only the hosts to use",
                   o->where, tok_shown(tok_len), tok);
  if (s[0] == '+')
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': relative host names ('+n0', '+e') refer to an "
                   "allocation hk does not have: name the hosts",
                   o->where, tok_shown(tok_len), tok);
  for (size_t i = 0; i < len; i++) {
    if (!is_name_char(s[i]) || (i == 0 && (s[i] == '-' || s[i] == '.')))
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: '%.*s': '%.*s' is not a host name (letters, "
                     "digits, '-', '.', '_'; an IPv6 address in brackets)",
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

/* Parses "host", "host:SLOTS", "[ipv6]", "[ipv6]:SLOTS" and, where
 * bare_v6 (a host file's first word, as Open MPI reads it), a bare IPv6
 * address (tok[0..len), no spaces inside). *suffix: whether ":SLOTS"
 * was given. */
static hk_status parse_entry(const origin *o, const char *tok, size_t len,
                             int bare_v6, hk_host *out, int *suffix) {
  *suffix = 0;
  out->slots = 1;
  if (len > 0 && tok[0] == '[') {
    const char *close = memchr(tok, ']', len);
    size_t alen = close ? (size_t)(close - tok - 1) : 0;
    if (!close || !is_ipv6(tok + 1, alen))
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: '%.*s': brackets hold an IPv6 address "
                     "('[fe80::1]:4')",
                     o->where, tok_shown(len), tok);
    if (alen > HK_HOST_NAME_MAX)
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: '%.*s': the host name is longer than %d bytes",
                     o->where, tok_shown(len), tok, HK_HOST_NAME_MAX);
    memcpy(out->name, tok + 1, alen);
    out->name[alen] = '\0';
    size_t rest = len - alen - 2;
    if (rest == 0)
      return HK_OK;
    if (close[1] != ':')
      return hk_fail(HK_ERR_INVALID_ARG,
                     "%s: '%.*s': after ']' comes ':' and the slot count",
                     o->where, tok_shown(len), tok);
    *suffix = 1;
    return take_slots(o, tok, len, close + 2, rest - 1, &out->slots);
  }
  const char *colon = memchr(tok, ':', len);
  if (!colon)
    return take_name(o, tok, len, tok, len, out);
  size_t name_len = (size_t)(colon - tok);
  if (memchr(colon + 1, ':', len - name_len - 1)) {
    if (bare_v6 && is_ipv6(tok, len) && len <= HK_HOST_NAME_MAX) {
      memcpy(out->name, tok, len);
      out->name[len] = '\0';
      return HK_OK;
    }
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': more than one ':' (write host:slots; an IPv6 "
                   "address goes in brackets: [fe80::1]:4)",
                   o->where, tok_shown(len), tok);
  }
  hk_status st = take_name(o, tok, len, tok, name_len, out);
  *suffix = 1;
  if (st == HK_OK)
    st = take_slots(o, tok, len, colon + 1, len - name_len - 1, &out->slots);
  return st;
}

/* Appends h to *l, growing it; a host already listed gets h's slots
 * added (Open MPI aggregates repeated hosts the same way). Linear in the
 * list: host lists are at most thousands of entries. */
static hk_status push(hk_hostlist *l, int *cap, const hk_host *h) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->v[i].name, h->name) == 0) {
      if ((int64_t)l->v[i].slots + h->slots > HK_HOST_MAX_SLOTS)
        return hk_fail(HK_ERR_INVALID_ARG,
                       "host '%s' is listed with more than %d slots in all",
                       h->name, HK_HOST_MAX_SLOTS);
      l->v[i].slots += h->slots;
      l->total_slots += h->slots;
      return HK_OK;
    }
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
    else {
      int suffix;
      st = parse_entry(&o, tok, len, 0, &h, &suffix);
    }
    if (st == HK_OK)
      st = push(out, &cap, &h);
    if (st != HK_OK || !comma)
      break;
    p = comma + 1;
  }
  if (st != HK_OK)
    hk_hosts_free(out);
  return st;
}

/* Open MPI's host-file keywords, by what hk does with them. */
static const char *const slot_words[] = {"slots", "count", "cpu", NULL};
static const char *const max_words[] = {
    "max_slots", "max-slots", "slots_max", "slots-max", "max_cpu",
    "max-cpu",   "cpu_max",   "cpu-max",   "max_count", "max-count",
    "count_max", "count-max", NULL};
static const char *const user_words[] = {"username", "user-name", "user_name",
                                         NULL};
static const char *const layout_words[] = {"boards",
                                           "sockets",
                                           "sockets_per_board",
                                           "sockets-per-board",
                                           "cores",
                                           "cores_per_socket",
                                           "cores-per-socket",
                                           "cpu_set",
                                           "cpu-set",
                                           NULL};

static int word_in(const char *w, size_t len, const char *const *list) {
  for (int i = 0; list[i]; i++)
    if (strlen(list[i]) == len && memcmp(w, list[i], len) == 0)
      return 1;
  return 0;
}

/* Parses one host-file line (comment already cut, not empty), as Open
 * MPI's host files: "host [slots=N] [max_slots=M]" (and their synonyms;
 * slots given twice add up, max_slots alone sets the slots), "host:N". */
static hk_status parse_line(const origin *o, const char *s, size_t len,
                            hk_host *h) {
  size_t i = 0, wlen = 0;
  while (i + wlen < len && !is_space(s[i + wlen]))
    wlen++;
  int has_colon;
  hk_status st = parse_entry(o, s, wlen, 1, h, &has_colon);
  int64_t slots = 0;
  long max = -1;
  const char *max_tok = NULL;
  size_t max_len = 0;
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
    const char *eq = memchr(w, '=', wlen);
    size_t klen = eq ? (size_t)(eq - w) : wlen;
    if (eq && word_in(w, klen, slot_words)) {
      if (has_colon)
        return hk_fail(HK_ERR_INVALID_ARG,
                       "%s: '%.*s': the slot count is given twice", o->where,
                       tok_shown(len), s);
      int v = 0;
      st = take_slots(o, w, wlen, eq + 1, wlen - klen - 1, &v);
      slots += v;
      seen_slots = 1;
      if (st == HK_OK && slots > HK_HOST_MAX_SLOTS)
        st = hk_fail(HK_ERR_INVALID_ARG, "%s: '%.*s': more than %d slots",
                     o->where, tok_shown(len), s, HK_HOST_MAX_SLOTS);
    } else if (eq && word_in(w, klen, max_words)) {
      int v = 0;
      st = take_slots(o, w, wlen, eq + 1, wlen - klen - 1, &v);
      max = v;
      max_tok = w;
      max_len = wlen;
    } else if (eq && word_in(w, klen, user_words)) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': a user name per host is not supported (give "
                   "it to ssh: User in ~/.ssh/config)",
                   o->where, tok_shown(wlen), w);
    } else if (eq && word_in(w, klen, layout_words)) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': hk does not place ranks by board, socket or "
                   "core (--bind-to is passed to mpirun)",
                   o->where, tok_shown(wlen), w);
    } else {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': unknown keyword (a line is 'host', 'host:N' "
                   "or 'host slots=N max_slots=M', with count= or cpu= for "
                   "slots=)",
                   o->where, tok_shown(wlen), w);
    }
  }
  if (st != HK_OK)
    return st;
  if (seen_slots)
    h->slots = (int)slots;
  else if (max >= 0 && !has_colon)
    h->slots = (int)max; /* as Open MPI: the maximum is what there is */
  if (max >= 0 && max < h->slots)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: '%.*s': max_slots is below the host's %d slots",
                   o->where, tok_shown(max_len), max_tok, h->slots);
  return HK_OK;
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

int hk_hosts_has_ipv6(const hk_hostlist *h) {
  for (int i = 0; i < h->n; i++)
    if (strchr(h->v[i].name, ':'))
      return 1;
  return 0;
}

char *hk_hosts_join(const hk_hostlist *h) {
  size_t cap = 1;
  for (int i = 0; i < h->n; i++)
    cap += strlen(h->v[i].name) + 2 + 1 + 6 + 1; /* [name] ':' slots ',' */
  char *s = malloc(cap);
  if (!s)
    return NULL;
  size_t n = 0;
  s[0] = '\0';
  for (int i = 0; i < h->n; i++) {
    int v6 = strchr(h->v[i].name, ':') != NULL;
    n += (size_t)snprintf(s + n, cap - n, "%s%s%s%s:%d", i ? "," : "",
                          v6 ? "[" : "", h->v[i].name, v6 ? "]" : "",
                          h->v[i].slots);
  }
  return s;
}

char *hk_hosts_file_text(const hk_hostlist *h) {
  size_t cap = 1;
  for (int i = 0; i < h->n; i++)
    cap += strlen(h->v[i].name) + 7 + 6 + 1; /* " slots=" N '\n' */
  char *s = malloc(cap);
  if (!s)
    return NULL;
  size_t n = 0;
  s[0] = '\0';
  for (int i = 0; i < h->n; i++)
    n += (size_t)snprintf(s + n, cap - n, "%s slots=%d\n", h->v[i].name,
                          h->v[i].slots);
  return s;
}

void hk_hosts_free(hk_hostlist *h) {
  free(h->v);
  *h = (hk_hostlist){0};
}
