/*
 * argv.h - a growable, NULL-terminated argument vector that owns its
 * strings, with the two conversions hkrun needs around mpirun: splitting
 * a string into words as sh would (--mpi-args) and printing a vector as
 * one line sh would read back (--verbose). Pure: no I/O, no globals.
 * Thread-safety: a vector has one owner at a time.
 */
#ifndef HK_LAUNCHER_ARGV_H
#define HK_LAUNCHER_ARGV_H

#include <stddef.h>

#include "hk/hk.h"

typedef struct hk_argv {
  char **v; /* n strings then NULL (v is NULL while n == 0 and never
               pushed); each malloc'ed, owned */
  int n;
  int cap; /* entries allocated in v, including the NULL */
} hk_argv;

/** Appends a copy of s. Errors: HK_ERR_NOMEM (a is unchanged). */
hk_status hk_argv_push(hk_argv *a, const char *s);

/** Appends copies of every string of the NULL-terminated list. */
hk_status hk_argv_push_all(hk_argv *a, const char *const *list);

/**
 * Appends the words of s, split as sh splits a command line without
 * expansions: blanks (space, tab, newline) separate words; '...' keeps
 * everything literally; "..." keeps everything but a backslash before
 * " \ $ ` or newline; a backslash outside quotes keeps the next character.
 * '$', '`', '*', ';' and the like have no special meaning. `what` names
 * the option in messages. Errors: HK_ERR_INVALID_ARG for an unterminated
 * quote or a trailing backslash ("--mpi-args: '\"abc': unterminated
 * double quote"); HK_ERR_NOMEM. On error a keeps the words pushed before.
 */
hk_status hk_argv_split(hk_argv *a, const char *s, const char *what);

/**
 * Formats the vector as one line, words separated by one space, each
 * word single-quoted when it holds anything but [A-Za-z0-9_@%+=:,./-]
 * (an empty word is ''). Returns a malloc'ed string, NULL if out of
 * memory. The caller frees it.
 */
char *hk_argv_format(const hk_argv *a);

/** Frees every string and the vector; *a becomes empty. */
void hk_argv_free(hk_argv *a);

#endif
