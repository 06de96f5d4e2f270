/*
 * gradset.c - reading and listing model gradient sets (see gradset.h).
 */
#include "planner/gradset.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk/hk.h"
#include "planner/names.h"

/* A tensor while reading: where it was, for duplicate messages. */
typedef struct entry {
  const char *name;
  long line;
} entry;

static int cmp_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Product of the 'x'-joined positive dimensions in s, or 0 if malformed or
 * over SIZE_MAX / 8 elements. */
static size_t parse_shape(const char *s) {
  size_t count = 1;
  for (;;) {
    if (*s < '0' || *s > '9')
      return 0;
    size_t d = 0;
    while (*s >= '0' && *s <= '9') {
      if (d > (SIZE_MAX / 8 - 9) / 10)
        return 0;
      d = d * 10 + (size_t)(*s++ - '0');
    }
    if (d == 0 || count > SIZE_MAX / 8 / d)
      return 0;
    count *= d;
    if (*s == '\0')
      return count;
    if (*s++ != 'x')
      return 0;
  }
}

static int out_of_memory(const hk_gradset *m, long lineno) {
  fprintf(stderr, "%s: %s:%ld: out of memory\n", m->who, m->path, lineno);
  return -1;
}

/* Adds one "name<TAB>shape" line. Returns 0, or -1 after a message. */
static int add_line(hk_gradset *m, size_t *cap, long *lines, char *line,
                    long lineno) {
  char *tab = strchr(line, '\t');
  const char *where = m->path;
  if (!tab) {
    fprintf(stderr,
            "%s: %s:%ld: expected 'name<TAB>shape', found no tab in "
            "'%.60s'\n",
            m->who, where, lineno, line);
    return -1;
  }
  *tab = '\0';
  const char *name = line, *shape = tab + 1;
  size_t len = strlen(name);
  if (len == 0 || len > HK_MAX_NAME_LEN) {
    fprintf(stderr, "%s: %s:%ld: tensor name is %zu bytes, not 1..%d\n", m->who,
            where, lineno, len, HK_MAX_NAME_LEN);
    return -1;
  }
  size_t count = parse_shape(shape);
  if (!count) {
    fprintf(stderr,
            "%s: %s:%ld: tensor '%s': bad shape '%.60s' (positive "
            "integers joined by 'x', e.g. 64x3x7x7)\n",
            m->who, where, lineno, name, shape);
    return -1;
  }
  if (m->total > SIZE_MAX / 8 - count) {
    fprintf(stderr, "%s: %s:%ld: the model is too large\n", m->who, where,
            lineno);
    return -1;
  }
  if (m->ntensors == *cap) {
    size_t ncap = *cap ? 2 * *cap : 64;
    hk_gradset_tensor *t = realloc(m->tensors, ncap * sizeof *t);
    if (!t)
      return out_of_memory(m, lineno);
    m->tensors = t;
    *cap = ncap;
  }
  char *copy = strdup(name);
  if (!copy)
    return out_of_memory(m, lineno);
  lines[0] = lineno; /* caller keeps lines[] as long as tensors[] */
  m->tensors[m->ntensors++] = (hk_gradset_tensor){copy, count};
  m->total += count;
  return 0;
}

/* Names must be unique: they name the tensors in flight. */
static int check_unique(const hk_gradset *m, const long *lines) {
  entry *e = malloc((m->ntensors + 1) * sizeof *e);
  if (!e)
    return out_of_memory(m, 0);
  for (size_t i = 0; i < m->ntensors; i++)
    e[i] = (entry){m->tensors[i].name, lines[i]};
  qsort(e, m->ntensors, sizeof *e, cmp_entry);
  int rc = 0;
  for (size_t i = 1; i < m->ntensors && rc == 0; i++)
    if (!strcmp(e[i].name, e[i - 1].name)) {
      fprintf(stderr,
              "%s: %s:%ld: tensor '%s' appears again (first on line "
              "%ld)\n",
              m->who, m->path, e[i].line, e[i].name, e[i - 1].line);
      rc = -1;
    }
  free(e);
  return rc;
}

static int read_file(FILE *f, hk_gradset *m) {
  char *line = NULL;
  size_t linecap = 0, cap = 0, lcap = 0;
  long *lines = NULL, lineno = 0;
  ssize_t n;
  int rc = 0;
  while (rc == 0 && (n = getline(&line, &linecap, f)) >= 0) {
    lineno++;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
      line[--n] = '\0';
    if (n == 0 || line[0] == '#')
      continue;
    if (m->ntensors == lcap) {
      lcap = lcap ? 2 * lcap : 64;
      long *l = realloc(lines, lcap * sizeof *l);
      if (!l) {
        rc = out_of_memory(m, lineno);
        break;
      }
      lines = l;
    }
    rc = add_line(m, &cap, &lines[m->ntensors], line, lineno);
  }
  if (rc == 0 && ferror(f)) {
    fprintf(stderr, "%s: %s: read error: %s\n", m->who, m->path,
            strerror(errno));
    rc = -1;
  }
  if (rc == 0 && m->ntensors == 0) {
    fprintf(stderr,
            "%s: %s: no tensors (expected 'name<TAB>shape' "
            "lines)\n",
            m->who, m->path);
    rc = -1;
  }
  if (rc == 0)
    rc = check_unique(m, lines);
  free(lines);
  free(line);
  return rc;
}

/* "dir/resnet50.tsv" -> "resnet50" (malloc'd). */
static char *label_of(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t len = strlen(base);
  if (len > 4 && !strcmp(base + len - 4, ".tsv"))
    len -= 4;
  return strndup(base, len);
}

int hk_gradset_load(const char *who, const char *spec, const char *dir,
                    hk_gradset *m) {
  memset(m, 0, sizeof *m);
  m->who = who;
  size_t len = strlen(spec);
  int is_path =
      strchr(spec, '/') || (len > 4 && !strcmp(spec + len - 4, ".tsv"));
  if (is_path) {
    m->path = strdup(spec);
  } else {
    m->path = malloc(strlen(dir) + len + 6);
    if (m->path)
      sprintf(m->path, "%s/%s.tsv", dir, spec);
  }
  m->label = m->path ? label_of(m->path) : NULL;
  if (!m->path || !m->label) {
    fprintf(stderr, "%s: out of memory\n", who);
    hk_gradset_free(m);
    return -1;
  }
  FILE *f = fopen(m->path, "r");
  if (!f) {
    if (!is_path && errno == ENOENT) {
      char known[1024], near[256];
      hk_names_in(dir, ".tsv", spec, known, sizeof known, near, sizeof near);
      fprintf(stderr,
              "%s: no model '%s' in %s%s%s%s (known: %s; a path FILE.tsv "
              "reads any file)\n",
              who, spec, dir, near[0] ? ": did you mean " : "", near,
              near[0] ? "?" : "", known);
    } else
      fprintf(stderr, "%s: %s: %s\n", who, m->path, strerror(errno));
    hk_gradset_free(m);
    return -1;
  }
  int rc = read_file(f, m);
  fclose(f);
  if (rc != 0)
    hk_gradset_free(m);
  return rc;
}

void hk_gradset_free(hk_gradset *m) {
  for (size_t i = 0; i < m->ntensors; i++)
    free(m->tensors[i].name);
  free(m->tensors);
  free(m->label);
  free(m->path);
  memset(m, 0, sizeof *m);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int hk_gradset_list(const char *who, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "%s: %s: %s\n", who, dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len <= 4 || strcmp(e->d_name + len - 4, ".tsv"))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) {
        rc = -1;
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(e->d_name)))
      rc = -1;
    else
      n++;
  }
  closedir(d);
  if (rc != 0)
    fprintf(stderr, "%s: %s: out of memory\n", who, dir);
  if (n > 0)
    qsort(names, n, sizeof *names, cmp_str);
  else if (rc == 0)
    printf("# no .tsv files in %s\n", dir);
  if (rc == 0 && n > 0)
    printf("# %-14s %8s %12s %14s  (in %s)\n", "model", "tensors", "params",
           "bytes(f32)", dir);
  for (size_t i = 0; i < n && rc == 0; i++) {
    char *path = malloc(strlen(dir) + strlen(names[i]) + 2);
    hk_gradset m;
    if (!path)
      rc = -1;
    else {
      sprintf(path, "%s/%s", dir, names[i]);
      rc = hk_gradset_load(who, path, dir, &m);
      free(path);
    }
    if (rc == 0) {
      printf("  %-14s %8zu %12zu %14zu\n", m.label, m.ntensors, m.total,
             m.total * 4);
      hk_gradset_free(&m);
    }
  }
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return rc;
}
