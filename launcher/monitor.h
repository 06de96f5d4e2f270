/*
 * monitor.h - hkrun --monitor's display (issue 15, item 4): the table
 * rank 0 sends over its rendezvous connection every
 * HK_TELEMETRY_INTERVAL_S (HK_MSG_MONITOR; observe/monitor.h), one line
 * per rank. On a terminal each refresh redraws the table in place (ANSI
 * "cursor up" and "erase line"; worker output printed in between scrolls
 * it, and the next refresh draws it again below); otherwise each refresh
 * appends its lines, whole, prefixed "monitor: ", in one write(2).
 *
 * Why the launcher connection and not a file rank 0 rewrites: the
 * connection exists already (authenticated, watched by hkrun), reaches
 * hkrun wherever rank 0 runs, and leaves nothing to clean up; hkrun reads
 * it on its event loop like REGISTER and GOODBYE.
 */
#ifndef HK_LAUNCHER_MONITOR_H
#define HK_LAUNCHER_MONITOR_H

typedef struct hk_live {
  int fd;    /* where the table goes (hkrun: 1) */
  int tty;   /* 1: fd is a terminal: redraw in place */
  int shown; /* lines of the table drawn last (tty) */
} hk_live;

/** Starts a display on fd (isatty decides the mode). */
void hk_live_init(hk_live *l, int fd);

/** Shows one table: text is lines ending in '\n' (a last line without
 *  one is shown too). Write errors are ignored (a closed stdout must not
 *  fail the job). Thread-safety: one thread (hkrun's loop). */
void hk_live_show(hk_live *l, const char *text);

#endif
