/*
 * blacklist.h - the hosts an elastic job of agents keeps out for a while
 * after a failure (hkrun --blacklist-cooldown-range A B; docs/elastic.md).
 *
 * A host is known by its agent's address (numeric IPv4, the address its
 * connection to the rendezvous came from: host names need not be unique,
 * as on machines cloned from one image). Each failure of a host (a worker
 * of it lost, or its agent's connection) blacklists it: for
 * min(B, A * 2^(n-1)) seconds at its n-th failure with a range, so that a
 * host failing again and again waits longer each time (Horovod's
 * resurrection of blacklisted hosts backs off so too, with jitter: here
 * without, so that the rule can be told and tested), and for the rest of
 * the job without one (Horovod's default).
 * Thread-safety: none (hkrun's loop thread).
 */
#ifndef HK_LAUNCHER_BLACKLIST_H
#define HK_LAUNCHER_BLACKLIST_H

#include <stddef.h>

/** The addresses it holds at most (more failures are logged, not kept). */
#define HK_BLACKLIST_CAP 1024

typedef struct hk_blacklist_entry {
  char ip[64];  /* the host's address */
  int failures; /* how many times it failed */
  double until; /* hk_now() seconds it stays out until; < 0: for ever */
} hk_blacklist_entry;

typedef struct hk_blacklist {
  double lo_s, hi_s; /* the cooldown range; lo_s < 0: none (for ever) */
  hk_blacklist_entry *e;
  int n, cap;
} hk_blacklist;

/** An empty blacklist with cooldown range [lo_s, hi_s] seconds (lo_s < 0:
 *  no range given). */
void hk_blacklist_init(hk_blacklist *b, double lo_s, double hi_s);

/**
 * Records a failure of host ip at now (hk_now() seconds). Returns the
 * cooldown it starts, in seconds, or -1 for the rest of the job (also
 * when out of memory or past HK_BLACKLIST_CAP, where nothing is kept and
 * 0 is returned).
 */
double hk_blacklist_fail(hk_blacklist *b, const char *ip, double now);

/** Seconds host ip stays blacklisted from now: 0 when it is not (never
 *  failed, or its cooldown is over), -1 for the rest of the job. */
double hk_blacklist_left(const hk_blacklist *b, const char *ip, double now);

/** The failures recorded for ip (0 when none). */
int hk_blacklist_failures(const hk_blacklist *b, const char *ip);

/** Frees what b holds; b is empty afterwards. */
void hk_blacklist_free(hk_blacklist *b);

#endif
