/*
 * metrics.h - the per-epoch metrics file (--metrics FILE.csv), written by
 * rank 0 for people and plot_metrics.sh.
 *
 * Format: RFC 4180 CSV, '\n' line ends, a header line then one row per
 * epoch, flushed as each epoch ends (a killed run keeps its rows):
 *
 *   epoch,loss,train_acc,test_acc,samples_per_s,data_wait,allreduce_wait,lr
 *   1,0.518123,0.8159,0.8312,14890,0.0021,0.8004,0.00197
 *
 * epoch: 1-based; loss: mean training loss over all ranks' samples (nats);
 * train_acc, test_acc: shares correct (0..1); samples_per_s: global
 * training throughput; data_wait, allreduce_wait: shares (0..1) of rank
 * 0's step time spent waiting for a batch and in hk_wait for gradients;
 * lr: the learning rate of the epoch's last step. A resumed run appends
 * to the file (no second header) so the curve goes on.
 *
 * Errors: 0, or -1 with one line in err[err_cap] naming the file.
 * Thread-safety: a metrics_file belongs to one thread.
 */
#ifndef HK_TRAIN_METRICS_H
#define HK_TRAIN_METRICS_H

#include <stddef.h>
#include <stdio.h>

#define METRICS_HEADER                                                         \
  "epoch,loss,train_acc,test_acc,samples_per_s,data_wait,allreduce_wait,lr"

typedef struct metrics_file {
  FILE *f;
  char path[4096];
} metrics_file;

/** One epoch's row. */
typedef struct metrics_row {
  int epoch;
  double loss, train_acc, test_acc, samples_per_s, data_wait, allreduce_wait,
      lr;
} metrics_row;

/** Opens path: created or truncated with a header line; with append, an
 *  existing non-empty file is continued and gets no header. */
int metrics_open(metrics_file *m, const char *path, int append, char *err,
                 size_t err_cap);

/** Appends one row and flushes it. */
int metrics_write(metrics_file *m, const metrics_row *r, char *err,
                  size_t err_cap);

/** Closes the file (checking the close). Safe on a zeroed metrics_file. */
int metrics_close(metrics_file *m, char *err, size_t err_cap);

#endif
