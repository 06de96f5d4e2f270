/*
 * netbench.c - hkbench's CSV fitted to the ring's alpha-beta cost (see
 * netbench.h).
 */
#include "planner/netbench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

enum { COL_SIZE, COL_TIME, COL_NRANKS, COL_RAW, COL_WRONG, NCOLS };
static const char *const col_names[NCOLS] = {"size_bytes", "time_us", "nranks",
                                             "raw_us", "wrong"};

/* The sums of the weighted least squares (weights 1/t^2). */
typedef struct sums {
  double w, s, ss, t, st;
} sums;

static void add(sums *m, double s, double t) {
  const double w = 1.0 / (t * t);
  m->w += w;
  m->s += w * s;
  m->ss += w * s * s;
  m->t += w * t;
  m->st += w * s * t;
}

/* Splits line at commas in place into at most max fields; returns how
 * many. */
static int fields(char *line, char **f, int max) {
  int n = 0;
  line[strcspn(line, "\r\n")] = '\0';
  for (char *p = line; n < max;) {
    f[n++] = p;
    char *c = strchr(p, ',');
    if (!c)
      break;
    *c = '\0';
    p = c + 1;
  }
  return n;
}

static int number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return end != s && *end == '\0' && errno == 0 && *v == *v;
}

hk_status hk_netbench_load(const char *path, hk_netbench *out) {
  FILE *fp = fopen(path, "r");
  if (!fp)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: cannot read the hkbench sweep: %s",
                   path, strerror(errno));
  char line[4096];
  char *f[64];
  int col[NCOLS] = {-1, -1, -1, -1, -1}, nf = 0;
  hk_status st = HK_OK;
  if (!fgets(line, sizeof line, fp)) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: empty (expected hkbench --csv's "
                 "header and rows)",
                 path);
    goto out;
  }
  nf = fields(line, f, 64);
  for (int i = 0; i < nf; i++)
    for (int c = 0; c < NCOLS; c++)
      if (!strcmp(f[i], col_names[c]))
        col[c] = i;
  for (int c = 0; c < COL_RAW; c++)
    if (col[c] < 0) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s: no column '%s' in its header (expected hkbench "
                   "--csv's)",
                   path, col_names[c]);
      goto out;
    }
  double first_size = -1;
  int nranks = 0, rows = 0, distinct = 0, raw = col[COL_RAW] >= 0;
  sums by_raw = {0}, by_time = {0};
  for (int lineno = 2; fgets(line, sizeof line, fp); lineno++) {
    if (line[0] == '\n' || line[0] == '#')
      continue;
    int n = fields(line, f, 64);
    double v[NCOLS] = {0};
    for (int c = 0; c < NCOLS; c++) {
      if (col[c] < 0)
        continue;
      if (col[c] >= n || !number(f[col[c]], &v[c])) {
        st = hk_fail(HK_ERR_INVALID_ARG,
                     "%s:%d: the row's '%s' is missing or not a number", path,
                     lineno, col_names[c]);
        goto out;
      }
    }
    if (v[COL_WRONG] > 0) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: the sweep got %g wrong results at %g bytes: not a "
                   "measurement to plan with",
                   path, lineno, v[COL_WRONG], v[COL_SIZE]);
      goto out;
    }
    if (!(v[COL_SIZE] > 0) || !(v[COL_TIME] > 0)) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: size %g bytes and time %g us: both must be > 0",
                   path, lineno, v[COL_SIZE], v[COL_TIME]);
      goto out;
    }
    if (rows && (int)v[COL_NRANKS] != nranks) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: a sweep of %g ranks after rows of %d: one sweep "
                   "a file",
                   path, lineno, v[COL_NRANKS], nranks);
      goto out;
    }
    nranks = (int)v[COL_NRANKS];
    if (!(v[COL_RAW] > 0))
      raw = 0; /* the collective alone is not known for every row */
    add(&by_time, v[COL_SIZE], v[COL_TIME]);
    if (v[COL_RAW] > 0)
      add(&by_raw, v[COL_SIZE], v[COL_RAW]);
    if (rows == 0)
      first_size = v[COL_SIZE];
    else if (v[COL_SIZE] != first_size)
      distinct = 1;
    rows++;
  }
  if (nranks < 2) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: %s: a network needs a sweep of 2 ranks or more (one a "
                 "server)",
                 path, rows ? "a sweep of one rank" : "no rows");
    goto out;
  }
  if (!distinct) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: every row is of %g bytes: a latency and a bandwidth "
                 "need 2 sizes or more",
                 path, first_size);
    goto out;
  }
  const sums *m = raw ? &by_raw : &by_time;
  const double det = m->w * m->ss - m->s * m->s;
  double slope = det > 0 ? (m->w * m->st - m->s * m->t) / det : 0;
  double icpt = slope > 0 ? (m->t - slope * m->s) / m->w : 0;
  if (slope > 0 && icpt < 0) { /* the line through the origin instead */
    icpt = 0;
    slope = m->st / m->ss;
  }
  if (!(slope > 0)) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: the times do not grow with the size: no bandwidth "
                 "can be fitted (sweep to 16 MiB or more: hkbench -e 16M)",
                 path);
    goto out;
  }
  const double steps = 2.0 * (nranks - 1);
  *out = (hk_netbench){.gbit = steps / nranks / slope *
                               8e-3, /* bytes/us -> Gbit/s */
                       .step_us = icpt / steps,
                       .nranks = nranks,
                       .rows = rows,
                       .raw = raw};
out:
  fclose(fp);
  return st;
}
