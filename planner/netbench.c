/*
 * netbench.c - hkbench's CSV fitted to the ring's alpha-beta cost (see
 * netbench.h).
 */
#include "planner/netbench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "planner/median.h"

enum { COL_SIZE, COL_TIME, COL_NRANKS, COL_RAW, COL_WRONG, NCOLS };
static const char *const col_names[NCOLS] = {"size_bytes", "time_us", "nranks",
                                             "raw_us", "wrong"};

/* One size and its time (the mean of its rows). */
typedef struct point {
  double s, t;
  int rows;
} point;

enum { MAX_ROWS = 4096 };

static int by_size(const void *a, const void *b) {
  const double x = ((const point *)a)->s, y = ((const point *)b)->s;
  return x < y ? -1 : x > y;
}

/* Sorts p[0..n) by size and merges rows of one size (their mean time);
 * returns the distinct sizes. */
static int merge(point *p, int n) {
  qsort(p, (size_t)n, sizeof *p, by_size);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k && p[k - 1].s == p[i].s) {
      p[k - 1].t = (p[k - 1].t * p[k - 1].rows + p[i].t) / (p[k - 1].rows + 1);
      p[k - 1].rows++;
    } else {
      p[k++] = p[i];
    }
  }
  return k;
}

/* Slope and intercept of the least-squares line through p[0..n). */
static void fit_line(const point *p, int n, double *slope, double *icpt) {
  double ms = 0, mt = 0, sst = 0, sss = 0;
  for (int i = 0; i < n; i++) {
    ms += p[i].s / n;
    mt += p[i].t / n;
  }
  for (int i = 0; i < n; i++) {
    sst += (p[i].s - ms) * (p[i].t - mt);
    sss += (p[i].s - ms) * (p[i].s - ms);
  }
  *slope = sss > 0 ? sst / sss : 0;
  *icpt = mt - *slope * ms;
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
  return end != s && *end == '\0' && errno == 0 && isfinite(*v);
}

/* Reads one line into buf (cap bytes); 0 at the end of the file, -1 for a
 * line too long to hold (it would be split in silence). */
static int read_line(FILE *fp, char *buf, size_t cap) {
  if (!fgets(buf, (int)cap, fp))
    return 0;
  if (!strchr(buf, '\n') && !feof(fp))
    return -1;
  return 1;
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
  point *by_raw = malloc(2 * MAX_ROWS * sizeof *by_raw), *by_time;
  if (!by_raw) {
    fclose(fp);
    return hk_fail(HK_ERR_NOMEM, "%s: cannot allocate %d rows", path, MAX_ROWS);
  }
  by_time = by_raw + MAX_ROWS;
  int got = read_line(fp, line, sizeof line);
  if (got <= 0) {
    st = got < 0 ? hk_fail(HK_ERR_INVALID_ARG,
                           "%s:1: a line longer than %zu characters", path,
                           sizeof line - 2)
                 : hk_fail(HK_ERR_INVALID_ARG,
                           "%s: empty (expected hkbench --csv's header and "
                           "rows)",
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
  int nranks = 0, rows = 0, raw = col[COL_RAW] >= 0;
  for (int lineno = 2; (got = read_line(fp, line, sizeof line)) != 0;
       lineno++) {
    if (got < 0) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: a line longer than %zu characters", path, lineno,
                   sizeof line - 2);
      goto out;
    }
    if (line[strspn(line, " \t\r\n")] == '\0' || line[0] == '#')
      continue; /* blank (also "\r\n") or a comment */
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
    if (v[COL_NRANKS] != floor(v[COL_NRANKS]) || v[COL_NRANKS] < 1 ||
        v[COL_NRANKS] > 1 << 20) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: nranks %g: not a whole count of ranks", path, lineno,
                   v[COL_NRANKS]);
      goto out;
    }
    if (rows && (int)v[COL_NRANKS] != nranks) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: a sweep of %g ranks after rows of %d: one sweep "
                   "a file",
                   path, lineno, v[COL_NRANKS], nranks);
      goto out;
    }
    if (rows == MAX_ROWS) {
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "%s:%d: more than %d rows: one sweep a file", path, lineno,
                   MAX_ROWS);
      goto out;
    }
    nranks = (int)v[COL_NRANKS];
    if (!(v[COL_RAW] > 0))
      raw = 0; /* the collective alone is not known for every row */
    by_time[rows] = (point){v[COL_SIZE], v[COL_TIME], 1};
    by_raw[rows] = (point){v[COL_SIZE], v[COL_RAW], 1};
    rows++;
  }
  if (nranks < 2) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: %s: a network needs a sweep of 2 ranks or more (one a "
                 "server)",
                 path, rows ? "a sweep of one rank" : "no rows");
    goto out;
  }
  point *p = raw ? by_raw : by_time;
  const int k = merge(p, rows);
  if (k < 2) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: every row is of %g bytes: a latency and a bandwidth "
                 "need 2 sizes or more",
                 path, p[0].s);
    goto out;
  }
  /* the rate from the largest third, the latency from the smallest */
  const int large = k / 3 > 2 ? k / 3 : 2, small = k / 3 > 1 ? k / 3 : 1;
  double slope, icpt;
  fit_line(p + k - large, large, &slope, &icpt);
  if (!(slope > 0)) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: the times of the largest sizes (%g to %g bytes) do not "
                 "grow with the size: no bandwidth can be fitted (sweep to "
                 "16 MiB or more: hkbench -e 16M)",
                 path, p[k - large].s, p[k - 1].s);
    goto out;
  }
  double left[MAX_ROWS];
  for (int i = 0; i < small; i++)
    left[i] = p[i].t - slope * p[i].s;
  icpt = hk_median(left, (size_t)small);
  icpt = icpt > 0 ? icpt : 0;
  const double steps = 2.0 * (nranks - 1);
  *out = (hk_netbench){.gbit = steps / nranks / slope *
                               8e-3, /* bytes/us -> Gbit/s */
                       .step_us = icpt / steps,
                       .nranks = nranks,
                       .rows = k,
                       .raw = raw};
out:
  fclose(fp);
  free(by_raw);
  return st;
}
