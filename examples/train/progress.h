/*
 * progress.h - rank 0's view of an epoch in progress, on stderr.
 *
 * On a terminal (isatty(2)): one bar redrawn in place with '\r', at most
 * every PROGRESS_REDRAW_S seconds, erased at the end of the epoch. Not on
 * a terminal (e.g. under hkrun, which pipes every worker's output to tag
 * it): one plain line per tenth of the epoch, so logs stay readable.
 * Thread-safety: none (the training thread only).
 */
#ifndef HK_TRAIN_PROGRESS_H
#define HK_TRAIN_PROGRESS_H

/** Seconds between two redraws of the bar (10 per second at most). */
#define PROGRESS_REDRAW_S 0.1

typedef struct progress {
  int enabled;
  int tty;        /* stderr is a terminal */
  int epoch;      /* 1-based, for the text */
  long total;     /* steps in the epoch */
  double last_s;  /* monotonic time of the last redraw */
  int last_tenth; /* plain mode: the last tenth printed */
} progress;

/** Starts an epoch of `total` steps; does nothing unless enabled. */
void progress_start(progress *p, int enabled, int epoch, long total);

/** After `done` steps, with the mean loss so far on this rank. */
void progress_update(progress *p, long done, double loss);

/** Ends the epoch (erases the bar on a terminal). */
void progress_end(progress *p);

/** Monotonic clock in seconds (CLOCK_MONOTONIC). */
double progress_now(void);

#endif
