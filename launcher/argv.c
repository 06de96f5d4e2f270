/*
 * argv.c - owned argument vectors, sh-style splitting and quoting (see
 * argv.h).
 */
#include "launcher/argv.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/status.h"

hk_status hk_argv_push(hk_argv *a, const char *s) {
  if (a->n + 2 > a->cap) {
    int ncap = a->cap ? 2 * a->cap : 16;
    char **v = realloc(a->v, (size_t)ncap * sizeof *v);
    if (!v)
      return hk_fail(HK_ERR_NOMEM, "cannot grow an argument vector");
    a->v = v;
    a->cap = ncap;
  }
  char *copy = strdup(s);
  if (!copy)
    return hk_fail(HK_ERR_NOMEM, "cannot copy an argument");
  a->v[a->n++] = copy;
  a->v[a->n] = NULL;
  return HK_OK;
}

hk_status hk_argv_push_all(hk_argv *a, const char *const *list) {
  for (; *list; list++) {
    hk_status st = hk_argv_push(a, *list);
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/* Appends byte c to the word being built. */
static hk_status put(hk_buf *w, char c) {
  return hk_buf_append(w, &c, 1) == HK_OK
             ? HK_OK
             : hk_fail(HK_ERR_NOMEM, "cannot build a word");
}

/* Reads one word starting at *pp (not blank, not NUL) into w (with its
 * NUL) and advances *pp past it. */
static hk_status read_word(const char **pp, hk_buf *w, const char *what) {
  const char *p = *pp, *word = p;
  hk_status st = HK_OK;
  while (st == HK_OK && *p && !is_blank(*p)) {
    if (*p == '\'') {
      const char *close = strchr(p + 1, '\'');
      if (!close)
        return hk_fail(HK_ERR_INVALID_ARG,
                       "%s: '%s': unterminated single quote", what, word);
      for (const char *q = p + 1; q < close && st == HK_OK; q++)
        st = put(w, *q);
      p = close + 1;
    } else if (*p == '"') {
      for (p++; st == HK_OK && *p && *p != '"'; p++) {
        if (*p == '\\' && p[1] && strchr("\"\\$`\n", p[1]))
          p++;
        st = put(w, *p);
      }
      if (st == HK_OK && !*p)
        return hk_fail(HK_ERR_INVALID_ARG,
                       "%s: '%s': unterminated double quote", what, word);
      p++;
    } else if (*p == '\\') {
      if (!p[1])
        return hk_fail(HK_ERR_INVALID_ARG, "%s: '%s': trailing backslash", what,
                       word);
      st = put(w, p[1]);
      p += 2;
    } else {
      st = put(w, *p++);
    }
  }
  *pp = p;
  return st == HK_OK ? put(w, '\0') : st;
}

hk_status hk_argv_split(hk_argv *a, const char *s, const char *what) {
  hk_buf w = {0};
  hk_status st = HK_OK;
  const char *p = s;
  for (;;) {
    while (is_blank(*p))
      p++;
    if (!*p)
      break;
    hk_buf_clear(&w);
    st = read_word(&p, &w, what);
    if (st == HK_OK)
      st = hk_argv_push(a, (const char *)w.data);
    if (st != HK_OK)
      break;
  }
  hk_buf_free(&w);
  return st;
}

static int is_plain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c && strchr("_@%+=:,./-", c));
}

char *hk_argv_format(const hk_argv *a) {
  size_t cap = 1;
  for (int i = 0; i < a->n; i++)
    cap += 4 * strlen(a->v[i]) + 3; /* worst case: every byte is ' */
  char *out = malloc(cap);
  if (!out)
    return NULL;
  char *o = out;
  for (int i = 0; i < a->n; i++) {
    const char *s = a->v[i];
    if (i)
      *o++ = ' ';
    int plain = *s != '\0';
    for (const char *q = s; *q && plain; q++)
      plain = is_plain(*q);
    if (plain) {
      size_t len = strlen(s);
      memcpy(o, s, len);
      o += len;
      continue;
    }
    *o++ = '\'';
    for (; *s; s++) {
      if (*s == '\'') {
        memcpy(o, "'\\''", 4);
        o += 4;
      } else {
        *o++ = *s;
      }
    }
    *o++ = '\'';
  }
  *o = '\0';
  return out;
}

void hk_argv_free(hk_argv *a) {
  for (int i = 0; i < a->n; i++)
    free(a->v[i]);
  free(a->v);
  *a = (hk_argv){0};
}
