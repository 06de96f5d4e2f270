/*
 * progress.h - rank 0's view of an epoch in progress, on stderr.
 *
 * On a terminal (isatty(2)) only: one bar redrawn in place with '\r', at
 * most every PROGRESS_REDRAW_S seconds, erased at the end of the epoch.
 * When stderr is not a terminal (a file, a pipe - under hkrun, which pipes
 * every worker's output to tag it) nothing at all is printed: a bar's
 * redraws would only fill logs, and the epoch lines say the same.
 * Thread-safety: none (the training thread only).
 */
#ifndef HK_TRAIN_PROGRESS_H
#define HK_TRAIN_PROGRESS_H

/** Seconds between two redraws of the bar (10 per second at most). */
#define PROGRESS_REDRAW_S 0.1

typedef struct progress {
  int enabled;
  int tty;       /* stderr is a terminal */
  int epoch;     /* 1-based, for the text */
  long total;    /* steps in the epoch */
  double last_s; /* monotonic time of the last redraw */
} progress;

/** Starts an epoch of `total` steps; the display is on when `enabled` and
 *  stderr is a terminal. */
void progress_start(progress *p, int enabled, int epoch, long total);

/** After `done` steps, with the mean loss so far on this rank. */
void progress_update(progress *p, long done, double loss);

/** Ends the epoch (erases the bar on a terminal). */
void progress_end(progress *p);

/** Monotonic clock in seconds (CLOCK_MONOTONIC). */
double progress_now(void);

#endif
