/*
 * prices.h - hkplan's price table: what a server costs per hour, a file
 * the user edits (configs/prices.tsv is an example). One server per line,
 * `name<whitespace>price`: the name is the server's topology file's base
 * name without .xml ("a100-sxm4-8gpu-nvswitch"), the price in the user's
 * currency per server-hour (a non-negative decimal); '#' starts a comment
 * line. Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_PRICES_H
#define HK_PLANNER_PRICES_H

#include <stddef.h>

#include "hk/hk.h"

typedef struct hk_prices {
  char path[512];
  struct hk_price {
    char name[128];
    double per_hour;
  } * e; /* owned */
  size_t n;
} hk_prices;

/* The largest price per server-hour accepted. */
#define HK_PRICE_MAX 1e6

/**
 * Reads path. Errors: HK_ERR_SYSTEM (cannot read, as a folder, naming the
 * file and why), HK_ERR_CONFIG ("FILE:LINE: ..." for a line that is not
 * `name price`, a price that is not a decimal number in 0 ..
 * HK_PRICE_MAX, a name given twice),
 * HK_ERR_NOMEM.
 */
hk_status hk_prices_load(const char *path, hk_prices *out);

/**
 * The price of server `name`. Errors: HK_ERR_CONFIG ("the price table FILE
 * has no price for server 'NAME' (add a line 'NAME <price per hour>')").
 */
hk_status hk_prices_get(const hk_prices *p, const char *name, double *out);

/** Frees what hk_prices_load allocated; a zeroed table is fine. */
void hk_prices_free(hk_prices *p);

#endif
