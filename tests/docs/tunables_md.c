/*
 * tunables_md - docs/tuning.md's table of tunables, printed from the table
 * hk_config_load itself reads (common/config.c, through
 * hk_config_tunable), so that the documentation cannot drift from the code.
 *
 *   tunables_md                print the markdown table on stdout
 *   tunables_md --write FILE   replace FILE's generated block with it
 *   tunables_md --check FILE   exit 0 when FILE's block is the table, else
 *                              say where it differs and how to regenerate
 *
 * The block is every line between a line starting with BEGIN_MARK and the
 * next line starting with END_MARK. scripts/gen-tunables.sh builds this
 * program and runs --write on docs/tuning.md; the ctest docs_tunables runs
 * --check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

#define BEGIN_MARK "<!-- tunables:begin"
#define END_MARK "<!-- tunables:end"
#define REGENERATE "bash scripts/gen-tunables.sh"

/* A whole number as digits, bytes also in the largest binary unit that
 * divides them exactly ("1048576 (1 MiB)"); anything else as %.15g. */
static void put_number(FILE *f, double v, const char *unit) {
  if (v != floor(v) || fabs(v) >= 1e18) {
    fprintf(f, "%.15g", v);
    return;
  }
  long long n = (long long)v;
  fprintf(f, "%lld", n);
  if (strcmp(unit, "bytes") != 0 || n < 1024)
    return;
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  int k = -1;
  while (k < 3 && n % 1024 == 0) {
    n /= 1024;
    k++;
  }
  if (k >= 0)
    fprintf(f, " (%lld %s)", n, units[k]);
}

/* Text in a table cell: '|' would end the cell. */
static void put_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '|')
      fputc('\\', f);
    fputc(*s, f);
  }
}

/* One row: variable | default | values | unit | meaning. */
static void put_row(FILE *f, const hk_tunable_info *t) {
  const int numeric = t->kind == HK_TUNABLE_NUMBER ||
                      t->kind == HK_TUNABLE_SIZE ||
                      t->kind == HK_TUNABLE_INTEGER;
  fprintf(f, "| `%s` | ", t->var);
  if (t->def_text)
    put_cell(f, t->def_text);
  else if (numeric)
    put_number(f, t->def, t->unit);
  else if (t->nwords)
    fprintf(f, "`%s`", t->words[0]);
  fputs(" | ", f);
  if (numeric) {
    put_number(f, t->min, t->unit);
    fputs(" to ", f);
    put_number(f, t->max, t->unit);
    if (t->values_text) {
      fputs(", ", f);
      put_cell(f, t->values_text);
    }
  } else if (t->nwords) {
    for (int w = 0; w < t->nwords; w++)
      fprintf(f, "%s`%s`", w ? ", " : "", t->words[w]);
  } else if (t->values_text) {
    put_cell(f, t->values_text);
  }
  fputs(" | ", f);
  put_cell(f, t->unit);
  fputs(" | ", f);
  put_cell(f, t->meaning);
  fputs(" | ", f);
  if (t->alias)
    fprintf(f, "`%s`", t->alias);
  fputs(" |\n", f);
}

/* The tables (the user's settings, then those hkrun sets for its
 * workers), as a malloc'd string (NULL when out of memory). */
static char *table_markdown(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return NULL;
  hk_tunable_info t;
  for (int launcher = 0; launcher < 2; launcher++) {
    if (launcher)
      fputs("\nSet by hkrun for each of its workers:\n\n", f);
    fputs("| variable | default | values | unit | meaning | Horovod's |\n", f);
    fputs("|---|---|---|---|---|---|\n", f);
    for (size_t i = 0; hk_config_tunable(i, &t); i++)
      if ((t.kind == HK_TUNABLE_LAUNCHER) == launcher)
        put_row(f, &t);
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  char *text = NULL;
  size_t len = 0, cap = 0, n;
  char chunk[8192];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n + 1 > cap) {
      cap = (len + n + 1) * 2;
      char *grown = realloc(text, cap);
      if (!grown) {
        free(text);
        fclose(f);
        fprintf(stderr, "%s: out of memory\n", path);
        return NULL;
      }
      text = grown;
    }
    memcpy(text + len, chunk, n);
    len += n;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "%s: read error\n", path);
    free(text);
    return NULL;
  }
  if (!text && !(text = calloc(1, 1)))
    return NULL;
  text[len] = '\0';
  return text;
}

/* The first line of text at or after `from` that starts with `mark`, or
 * NULL. */
static const char *find_line(const char *from, const char *mark) {
  for (const char *p = from; p && *p;) {
    if (strncmp(p, mark, strlen(mark)) == 0)
      return p;
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  return NULL;
}

/* Finds FILE's block: *start is the first byte after the begin marker's
 * line, *end the first byte of the end marker's line. 0 when found. */
static int find_block(const char *path, const char *text, const char **start,
                      const char **end) {
  const char *b = find_line(text, BEGIN_MARK);
  const char *nl = b ? strchr(b, '\n') : NULL;
  const char *e = nl ? find_line(nl + 1, END_MARK) : NULL;
  if (!e) {
    fprintf(stderr,
            "%s: no block of tunables: it needs a line starting with '%s' "
            "and, after it, one starting with '%s'\n",
            path, BEGIN_MARK, END_MARK);
    return -1;
  }
  *start = nl + 1;
  *end = e;
  return 0;
}

static int check(const char *path, const char *table) {
  char *text = read_file(path);
  const char *start, *end;
  if (!text || find_block(path, text, &start, &end) != 0) {
    free(text);
    return 1;
  }
  size_t have = (size_t)(end - start), want = strlen(table);
  if (have == want && memcmp(start, table, want) == 0) {
    free(text);
    return 0;
  }
  /* the first line that differs, both versions */
  int line = 1;
  const char *a = start, *b = table;
  while (a < end && *b) {
    const char *ae = memchr(a, '\n', (size_t)(end - a));
    const char *be = strchr(b, '\n');
    size_t al = ae ? (size_t)(ae - a) : (size_t)(end - a);
    size_t bl = be ? (size_t)(be - b) : strlen(b);
    if (al != bl || memcmp(a, b, al) != 0)
      break;
    a += al + (ae != NULL);
    b += bl + (be != NULL);
    line++;
  }
  if (a >= end)
    a = "(nothing: the block ends here)";
  if (!*b)
    b = "(nothing: the table ends here)";
  int an = (int)strcspn(a, "\n"), bn = (int)strcspn(b, "\n");
  fprintf(stderr,
          "%s: the table of tunables differs from common/config.c's table "
          "(line %d of the block):\n"
          "  in the file:      %.*s\n"
          "  from config.c:    %.*s\n"
          "The block between '%s' and '%s' is generated: do not edit it "
          "by hand. Change common/config.c's table instead and regenerate "
          "it with:\n  %s\n",
          path, line, an, a, bn, b, BEGIN_MARK, END_MARK, REGENERATE);
  free(text);
  return 1;
}

static int write_block(const char *path, const char *table) {
  char *text = read_file(path);
  const char *start, *end;
  if (!text || find_block(path, text, &start, &end) != 0) {
    free(text);
    return 1;
  }
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
    fprintf(stderr, "%s: path too long\n", path);
    free(text);
    return 1;
  }
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    perror(tmp);
    free(text);
    return 1;
  }
  fwrite(text, 1, (size_t)(start - text), f);
  fputs(table, f);
  fputs(end, f);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  free(text);
  if (bad || rename(tmp, path) != 0) {
    perror(tmp);
    remove(tmp);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  char *table = table_markdown();
  if (!table) {
    fprintf(stderr, "tunables_md: out of memory\n");
    return 1;
  }
  int rc;
  if (argc == 1) {
    fputs(table, stdout);
    rc = fflush(stdout) != 0;
  } else if (argc == 3 && strcmp(argv[1], "--check") == 0) {
    rc = check(argv[2], table);
  } else if (argc == 3 && strcmp(argv[1], "--write") == 0) {
    rc = write_block(argv[2], table);
  } else {
    fprintf(stderr, "usage: tunables_md [--check FILE | --write FILE]\n");
    rc = 2;
  }
  free(table);
  return rc;
}
