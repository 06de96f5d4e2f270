/*
 * tuned.h - hkrun --autotune-load FILE: the settings an earlier
 * `hkrun --autotune --autotune-save FILE` chose, set for the workers.
 *
 * The file (worker/tune.h writes it) holds lines NAME=value, where NAME
 * is HK_FUSION_THRESHOLD, HK_CYCLE_TIME_MS or HK_HIERARCHICAL_ALLREDUCE;
 * blank lines and lines
 * starting with '#' are skipped. Each value is checked as the workers
 * will check it (common/config.c's table), so a bad file fails hkrun
 * before any worker starts.
 */
#ifndef HK_LAUNCHER_TUNED_H
#define HK_LAUNCHER_TUNED_H

#include <stddef.h>

/** What hkrun_load_tuned set, for hkrun -v: "HK_FUSION_THRESHOLD=2097152,
 *  HK_CYCLE_TIME_MS=3 (set already: that wins)". */
typedef struct hk_tuned_shown {
  char text[1024];
} hk_tuned_shown;

/**
 * Reads `path` and sets each of its variables in hkrun's environment
 * (which the workers inherit; through mpirun, hkrun forwards HK_*),
 * except one already set there (the user's environment, or -x when
 * called after it), which wins; the file's value is checked all the same.
 * Returns 0, or -1 with one line in err[cap] naming the file, the line
 * and what is wrong: "cannot read 'F': No such file or directory",
 * "'F' line 2: 'HK_RING_CHUNK_BYTES' is not a setting --autotune saves
 * (HK_FUSION_THRESHOLD, HK_CYCLE_TIME_MS, HK_HIERARCHICAL_ALLREDUCE)",
 * "'F' line 1: HK_CYCLE_TIME_MS
 * 'x' is not a number...", "'F' line 1: HK_CYCLE_TIME_MS= has no value",
 * "'F' line 3: a NUL byte (not a text file?)", "cannot read 'F': Is a
 * directory", "'F': no setting in it". Lines may be of any length. Variables
 * set before an error stay set (hkrun then exits). Thread-safety: as setenv.
 */
int hkrun_load_tuned(const char *path, hk_tuned_shown *shown, char *err,
                     size_t cap);

/**
 * hkrun --autotune-log-file / --autotune-save F (`flag` names it): rank 0
 * will write F by making a file in its folder and renaming it over F
 * (common/outfile.h), so hkrun makes and removes one there now, and
 * refuses a directory. hkrun checks them when it starts the workers
 * itself (through mpirun rank 0 may run on another host). Returns 0, or
 * -1 with one line in err[cap]: "--autotune-log-file: '/x' is a
 * directory", or outfile's "--autotune-log-file: cannot create ...:
 * Permission denied". Nothing is left behind. Thread-safety: reentrant.
 */
int hkrun_check_tune_file(const char *path, const char *flag, char *err,
                          size_t cap);

#endif
