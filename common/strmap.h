/*
 * strmap.h - a hash map from NUL-terminated strings (tensor names) to
 * pointers. Separate chaining, FNV-1a hash (Fowler/Noll/Vo, public
 * domain), grows at load factor 1. Keys are copied; values are not owned.
 * Thread-safety: none; the owner serialises access.
 */
#ifndef HK_COMMON_STRMAP_H
#define HK_COMMON_STRMAP_H

#include <stddef.h>

#include "hk/hk.h"

typedef struct hk_strmap hk_strmap;

/** Creates an empty map. Errors: HK_ERR_NOMEM. */
hk_status hk_strmap_create(hk_strmap **out);
/** Frees the map and its key copies (not the values). NULL is fine. */
void hk_strmap_destroy(hk_strmap *m);
/** The value stored under key, or NULL. */
void *hk_strmap_get(const hk_strmap *m, const char *key);
/** Stores value under key, replacing any previous one.
 *  Errors: HK_ERR_NOMEM. */
hk_status hk_strmap_put(hk_strmap *m, const char *key, void *value);
/** Removes key; returns its value, or NULL if absent. */
void *hk_strmap_remove(hk_strmap *m, const char *key);
/** Number of keys. */
size_t hk_strmap_size(const hk_strmap *m);
/** Calls fn(key, value, arg) for every entry (order unspecified); fn must
 *  not modify the map. */
void hk_strmap_each(const hk_strmap *m,
                    void (*fn)(const char *key, void *value, void *arg),
                    void *arg);

#endif
