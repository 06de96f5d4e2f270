/*
 * outfile.h - the one way hk creates a file it writes: the timeline, the
 * metrics file, flight records and their folders, hkrun's
 * --output-filename files (docs/monitoring.md, "Output files").
 *
 * Every such file is
 *   - made without following a link: it is created without a name in its
 *     folder (O_TMPFILE) or, where the file system cannot do that, under a
 *     random name made with O_CREAT|O_EXCL|O_NOFOLLOW (".NAME.<16 hex
 *     digits>.tmp"), and renamed over its name: rename(2) replaces what
 *     has the name, a symbolic link included, without following it (in a
 *     sticky folder such as /tmp another user's file there is not replaced:
 *     the call fails). A link someone placed at the name so that a job
 *     run as root overwrites the link's target is replaced, never written
 *     through. (The folder's own path is the user's: links in it are
 *     followed, as they name it.)
 *   - private: created with mode HK_FILE_MODE (0600 by default; the umask
 *     still applies), folders hk makes with that mode plus search (x) where
 *     it grants read (0700 by default);
 *   - complete before it has its name: hk_outfile_publish gives it the
 *     name once what is written so far is whole (a file written once, the
 *     metrics or a flight record, at its end; a file that grows, the
 *     timeline or an output file, once it is valid: "[]", empty), so a
 *     reader sees the old file or the new one, never a part, and a writer
 *     that dies before leaves nothing (an unnamed file vanishes with its
 *     descriptor; a random name is removed by hk_outfile_close).
 * Errors name the setting or flag (`what`), the file and the system's
 * reason: "HK_TIMELINE: cannot create '/x/t.json': No such file or
 * directory". Thread-safety: reentrant (each call touches only its
 * arguments and the file system); an hk_outfile has one owner.
 */
#ifndef HK_COMMON_OUTFILE_H
#define HK_COMMON_OUTFILE_H

#include <stddef.h>

#include "hk/hk.h"

/** A file being written. All fields read-only for callers but fd. */
typedef struct hk_outfile {
  int fd;           /* write here (O_WRONLY); -1 once closed */
  int dir_fd;       /* its folder */
  int published;    /* 1 once it has its name */
  char tmp[96];     /* its random name, or "" (unnamed: O_TMPFILE) */
  char name[256];   /* its name in the folder */
  char path[4096];  /* folder/name, for messages */
  const char *what; /* the setting or flag it is for (static string) */
} hk_outfile;

/**
 * Starts the file `path` (its folder must exist): an unnamed file in the
 * folder, or a random name (see above), mode `mode` (HK_FILE_MODE, file
 * bits only) less the umask. Nothing has the name `path` changed yet.
 * Errors: HK_ERR_INVALID_ARG (path ends in '/' or its last part is longer
 * than 255 bytes), HK_ERR_SYSTEM (the folder cannot be opened, or no file
 * can be made in it), naming `what`, the path and the reason. On error
 * *f is closed (hk_outfile_close is a no-op).
 */
hk_status hk_outfile_open(hk_outfile *f, const char *path, unsigned mode,
                          const char *what);

/** As hk_outfile_open, for the file `name` in the open folder dir_fd
 *  (which f duplicates; the caller keeps its own). dir_path names the
 *  folder in messages. */
hk_status hk_outfile_openat(hk_outfile *f, int dir_fd, const char *dir_path,
                            const char *name, unsigned mode, const char *what);

/**
 * Writes all len bytes at the file's current offset (retrying short
 * writes and EINTR). Errors: HK_ERR_SYSTEM naming `what`, the file and
 * the reason (ENOSPC: "No space left on device"); some bytes may have
 * been written then.
 */
hk_status hk_outfile_write(hk_outfile *f, const void *data, size_t len);

/** How a published file replaces the one that had its name. */
typedef enum hk_out_replace {
  /* a reader always finds a whole file, old or new (metrics: a scrape
   * never misses it): linked under a random name, renamed over; a writer
   * killed between those two calls leaves the random name behind */
  HK_OUT_ATOMIC = 0,
  /* the old one is removed, then the new one linked (flight records,
   * written while a failing process exits): a reader may find no file
   * for a moment, and a killed writer leaves no name behind */
  HK_OUT_UNLINK_FIRST = 1,
} hk_out_replace;

/**
 * Gives the file its name, replacing whatever had it (a link is replaced,
 * never followed), as `how` says. The descriptor stays open for more
 * writes. Errors: HK_ERR_SYSTEM naming `what`, the path and the reason (a
 * folder whose sticky bit keeps another user's file: EPERM); with
 * HK_OUT_ATOMIC the old file is then untouched.
 */
hk_status hk_outfile_publish(hk_outfile *f, hk_out_replace how);

/** Closes the file; one never published is gone (its random name
 *  removed). NULL or closed: nothing. Never fails (a close error of a
 *  published file is not reported: its bytes were written). */
void hk_outfile_close(hk_outfile *f);

/**
 * The whole file at once: open, write text[0..len), publish (`how`),
 * close. Errors: those of the three; on an error before the publish,
 * `path` is as it was.
 */
hk_status hk_outfile_replace(const char *path, unsigned mode, const void *text,
                             size_t len, hk_out_replace how, const char *what);

/**
 * Opens the folder `name` inside the open folder parent_fd (AT_FDCWD: the
 * current one), making it (mode `mode` plus x where it grants r) if it is
 * missing. With `own` (a folder hk keeps its own files in: a job's flight
 * records, hkrun's rank.N) it must be a folder, not a link to one, and
 * belong to this process's effective user, or it is refused (someone else
 * made it to catch what hk writes); without (a folder the user named:
 * --output-filename's) name may be a path and links in it are followed.
 * *out_fd: the folder (O_DIRECTORY, close-on-exec); the caller closes it.
 * parent_path names the parent in messages ("" for none). Errors:
 * HK_ERR_SYSTEM naming `what`, the folder and the reason or the owner.
 */
hk_status hk_outdir_make(int parent_fd, const char *parent_path,
                         const char *name, unsigned mode, int own,
                         const char *what, int *out_fd);

/** The folder mode for a file mode: the file's bits, plus x where r is
 *  set (0600 -> 0700, 0644 -> 0755). */
unsigned hk_outdir_mode(unsigned file_mode);

#endif
