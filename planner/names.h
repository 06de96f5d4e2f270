/*
 * names.h - the names a folder offers (bench/models' gradient sets,
 * configs/' topologies), for a message that lists them when the one asked
 * for is not there, and the one a near miss meant.
 * Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_NAMES_H
#define HK_PLANNER_NAMES_H

#include <stddef.h>

/**
 * The names of dir's files that end in ext (".tsv"; ext taken off),
 * sorted, joined by ", " into list (cap bytes > 0; "" when there is none or
 * dir cannot be read; ending in "..." when cut short). near (ncap bytes >
 * 0) gets the name that equals want when case and every character other
 * than a letter or digit are ignored ("vit-b16" for "vit_b_16"), "" when
 * none does. Errors: none (an unreadable folder lists nothing).
 */
void hk_names_in(const char *dir, const char *ext, const char *want, char *list,
                 size_t cap, char *near, size_t ncap);

#endif
