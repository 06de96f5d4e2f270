/*
 * strdist.h - how far apart two names are, for "did you mean ...?" hints
 * (hkrun's options, HK_* variables).
 */
#ifndef HK_COMMON_STRDIST_H
#define HK_COMMON_STRDIST_H

#include <stddef.h>

/**
 * The edit distance between a and b: insertions, deletions,
 * substitutions, and swaps of two neighbours each count 1 (the optimal
 * string alignment distance, Damerau's extension of Levenshtein's),
 * capped at 64; strings over 63 bytes compare as far apart. Pure; any
 * thread. Errors: none.
 */
int hk_edit_distance(const char *a, const char *b);

/**
 * Whether a name at distance d (hk_edit_distance) from a known name of
 * length len is close enough to suggest it: at most 2 edits (3 for names
 * of 12 bytes or more), and fewer than len - 1 (so that no short name is
 * "close" to everything). Pure.
 */
int hk_edit_close(int d, size_t len);

#endif
