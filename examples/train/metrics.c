/*
 * metrics.c - the per-epoch CSV (see metrics.h).
 */
#include "metrics.h"

#include <errno.h>
#include <string.h>

static int failed(metrics_file *m, const char *what, char *err, size_t cap) {
  snprintf(err, cap, "%s: %s: %s", m->path, what, strerror(errno));
  return -1;
}

int metrics_open(metrics_file *m, const char *path, int append, char *err,
                 size_t err_cap) {
  memset(m, 0, sizeof *m);
  snprintf(m->path, sizeof m->path, "%s", path);
  m->f = fopen(path, append ? "a" : "w");
  if (!m->f)
    return failed(m, "cannot open the metrics file", err, err_cap);
  if (fseek(m->f, 0, SEEK_END) != 0) {
    failed(m, "cannot seek", err, err_cap);
    fclose(m->f);
    m->f = NULL;
    return -1;
  }
  if (ftell(m->f) == 0 &&
      (fputs(METRICS_HEADER "\n", m->f) < 0 || fflush(m->f) != 0)) {
    failed(m, "write failed", err, err_cap);
    fclose(m->f);
    m->f = NULL;
    return -1;
  }
  return 0;
}

int metrics_write(metrics_file *m, const metrics_row *r, char *err,
                  size_t err_cap) {
  if (fprintf(m->f, "%d,%.6f,%.4f,%.4f,%.0f,%.4f,%.4f,%.6g\n", r->epoch,
              r->loss, r->train_acc, r->test_acc, r->samples_per_s,
              r->data_wait, r->allreduce_wait, r->lr) < 0 ||
      fflush(m->f) != 0)
    return failed(m, "write failed", err, err_cap);
  return 0;
}

int metrics_close(metrics_file *m, char *err, size_t err_cap) {
  if (!m->f)
    return 0;
  int rc = fclose(m->f);
  m->f = NULL;
  return rc != 0 ? failed(m, "close failed", err, err_cap) : 0;
}
