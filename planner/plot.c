/*
 * plot.c - hkplan's PNG through gnuplot (plot.h).
 */
#include "planner/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/status.h"

extern char **environ;

/* 1 if gnuplot is on PATH. */
static int have_gnuplot(void) {
  const char *path = getenv("PATH");
  char dir[4096];
  while (path && *path) {
    size_t len = strcspn(path, ":");
    snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)len, path);
    if (len && access(dir, X_OK) == 0)
      return 1;
    path += len + (path[len] == ':');
  }
  return 0;
}

/* The data: one block per (server, network), "servers samples/s cost";
 * at most 64 blocks, their titles into titles[64]. */
static int write_data(FILE *f, const hk_plan_row *rows, size_t n,
                      char titles[][160], int *nblocks) {
  int b = 0;
  for (size_t i = 0; i < n && b < 64; i++) {
    int seen = 0;
    for (size_t k = 0; k < i; k++)
      seen |= rows[k].server == rows[i].server &&
              rows[k].net_gbit == rows[i].net_gbit;
    if (seen)
      continue;
    snprintf(titles[b], 160, "%s, %g Gbit/s", rows[i].server->name,
             rows[i].net_gbit);
    for (size_t k = 0; k < n; k++) /* one server: on every line */
      if (rows[k].server == rows[i].server &&
          (rows[k].net_gbit == rows[i].net_gbit || rows[k].hosts == 1))
        fprintf(f, "%d %.6g %.6g\n", rows[k].hosts, rows[k].samples_s,
                rows[k].cost_per_m < 0 ? 0 : rows[k].cost_per_m);
    fprintf(f, "\n\n");
    b++;
  }
  *nblocks = b;
  return ferror(f) ? -1 : 0;
}

/* 1 if png can be written: the file if it is there, else its folder. */
static int writable(const char *png) {
  if (access(png, F_OK) == 0)
    return access(png, W_OK) == 0;
  char folder[4096];
  snprintf(folder, sizeof folder, "%s", png);
  char *slash = strrchr(folder, '/');
  if (!slash)
    return access(".", W_OK | X_OK) == 0;
  slash[slash == folder] = '\0'; /* "/x.png": the root */
  return access(folder, W_OK | X_OK) == 0;
}

/* The first line of file path into out (cap bytes), "" if none. */
static void first_line(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  if (fgets(out, (int)cap, f))
    out[strcspn(out, "\n")] = '\0';
  fclose(f);
}

hk_status hk_plan_plot(const hk_plan_row *rows, size_t n, const char *png) {
  if (!writable(png))
    return hk_fail(HK_ERR_SYSTEM, "--plot: cannot write %s: %s", png,
                   strerror(errno));
  if (!have_gnuplot())
    return hk_fail(HK_ERR_CONFIG,
                   "--plot needs gnuplot, not found on PATH (Debian: "
                   "apt-get install gnuplot-nox); the table is complete "
                   "without it");
  char dir[] = "/tmp/hkplan.XXXXXX";
  if (!mkdtemp(dir))
    return hk_fail(HK_ERR_SYSTEM, "--plot: cannot make a temporary folder: %s",
                   strerror(errno));
  char data[64], script[64], errs[64];
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(script, sizeof script, "%s/plot.gp", dir);
  snprintf(errs, sizeof errs, "%s/stderr", dir);
  char(*titles)[160] = malloc(64 * sizeof *titles);
  int nb = 0;
  hk_status st = HK_OK;
  FILE *f = titles ? fopen(data, "w") : NULL;
  FILE *g = f ? fopen(script, "w") : NULL;
  if (!f || !g || write_data(f, rows, n, titles, &nb) != 0)
    st = hk_fail(HK_ERR_SYSTEM, "--plot: cannot write %s", dir);
  int priced = 0; /* without prices, the throughput alone */
  for (size_t i = 0; i < n; i++)
    priced |= rows[i].cost_per_m >= 0;
  if (st == HK_OK) {
    fprintf(g,
            "set terminal pngcairo size %d,500 noenhanced\n"
            "set output '%s'\n"
            "set multiplot layout 1,%d\n"
            "set xlabel 'servers'\nset grid\nset key top left\n"
            "set ylabel 'samples/s'\nset title 'throughput'\n",
            priced ? 1200 : 600, png, priced ? 2 : 1);
    for (int pass = 0; pass < 1 + priced; pass++) {
      if (pass == 1)
        fprintf(g, "set ylabel 'cost per million samples'\n"
                   "set title 'cost'\n");
      fprintf(g, "plot ");
      for (int b = 0; b < nb; b++)
        fprintf(g, "%s'%s' index %d using 1:%d with linespoints title '%s'",
                b ? ", " : "", data, b, pass ? 3 : 2, titles[b]);
      fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
  }
  if (f)
    fclose(f);
  if (g && fclose(g) != 0 && st == HK_OK)
    st = hk_fail(HK_ERR_SYSTEM, "--plot: cannot write %s", script);
  if (st == HK_OK) {
    char *argv[] = {"gnuplot", script, NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa; /* its warnings (a one-point range) and
                                      errors into errs, not the terminal */
    int rc = posix_spawn_file_actions_init(&fa), ws = 0;
    if (rc == 0)
      rc = posix_spawn_file_actions_addopen(&fa, 2, errs,
                                            O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc == 0)
      rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    char why[256];
    if (rc != 0)
      st = hk_fail(HK_ERR_SYSTEM, "--plot: cannot start gnuplot: %s",
                   strerror(rc));
    else if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) ||
             WEXITSTATUS(ws) != 0) {
      first_line(errs, why, sizeof why);
      st = hk_fail(HK_ERR_SYSTEM, "--plot: gnuplot failed (status %d): %s", ws,
                   why);
    }
  }
  free(titles);
  unlink(data);
  unlink(script);
  unlink(errs);
  rmdir(dir);
  return st;
}
