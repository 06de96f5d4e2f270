/*
 * progress.c - the epoch progress display (see progress.h).
 */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 30

double progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_start(progress *p, int enabled, int epoch, long total) {
  p->tty = isatty(STDERR_FILENO);
  p->enabled = enabled && p->tty && total > 0;
  p->epoch = epoch;
  p->total = total;
  p->last_s = 0.0;
}

void progress_update(progress *p, long done, double loss) {
  if (!p->enabled)
    return;
  double now = progress_now();
  if (done < p->total && now - p->last_s < PROGRESS_REDRAW_S)
    return;
  p->last_s = now;
  int fill = (int)(done * BAR_WIDTH / p->total);
  char bar[BAR_WIDTH + 1];
  for (int i = 0; i < BAR_WIDTH; i++)
    bar[i] = i < fill ? '#' : '.';
  bar[BAR_WIDTH] = '\0';
  fprintf(stderr, "\repoch %d [%s] %ld/%ld loss %.4f", p->epoch, bar, done,
          p->total, loss);
  fflush(stderr);
}

void progress_end(progress *p) {
  if (p->enabled)
    fprintf(stderr, "\r\033[K"); /* carriage return, erase the line */
  p->enabled = 0;
}
