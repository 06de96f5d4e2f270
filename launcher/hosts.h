/*
 * hosts.h - the hosts of a job and their slots, from `-H host:slots,...`
 * or from a host file. Pure parsers: no I/O, no globals (the caller reads
 * the file); errors through hk_fail() (common/status.h), one line that
 * names the bad token.
 *
 * What Open MPI's -H and host files accept, where it maps to hk's model
 * (a host and its slots); the rest is refused naming the token and why.
 *
 * -H syntax: entries separated by ',', each `host`, `host:SLOTS`, `[v6]`
 * or `[v6]:SLOTS` (an IPv6 address in brackets).
 * Host file syntax, one host per line (Open MPI's keywords):
 *   host                         (1 slot)
 *   host slots=N                 (count=N and cpu=N are the same; given
 *                                 twice, they add up, as in Open MPI)
 *   host slots=N max_slots=M     (M >= N; max_slots alone sets the slots;
 *                                 also max-slots, slots_max, max_cpu, ...)
 *   host:SLOTS                   (the -H spelling)
 * where host may also be a bare IPv6 address (`fe80::1 slots=2`) or one in
 * brackets. '#' starts a comment (a whole line or the end of one); blank
 * lines and spaces/tabs around tokens are ignored; CRLF line ends are
 * accepted.
 * Refused with the reason: a user name (`user@host`, username=; ssh's
 * config is the place), an excluded (`^host`) or relative (`+n0`, `+e`)
 * host, board/socket/core layout keywords, any other keyword.
 *
 * A host is a name or an IPv4 address: letters, digits, '-', '.', '_',
 * not starting with '-' or '.', at most HK_HOST_NAME_MAX bytes; or an IPv6
 * address (hex digits and ':', an IPv4 tail, a %zone), stored without
 * brackets. SLOTS is a whole decimal number in [1, HK_HOST_MAX_SLOTS]. A
 * host listed again adds its slots to its first entry (as Open MPI
 * aggregates it), at most HK_HOST_MAX_SLOTS in all. Names are kept as
 * written (no resolution, no case folding).
 */
#ifndef HK_LAUNCHER_HOSTS_H
#define HK_LAUNCHER_HOSTS_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** Longest host name accepted, in bytes, excluding the NUL. */
#define HK_HOST_NAME_MAX 253
/** Most slots one host may declare. */
#define HK_HOST_MAX_SLOTS 65536
/** Most hosts in one list. */
#define HK_HOSTS_MAX 65536

typedef struct hk_host {
  char name[HK_HOST_NAME_MAX + 1];
  int slots; /* >= 1 */
} hk_host;

/** Hosts in the order given. Owned: free with hk_hosts_free. */
typedef struct hk_hostlist {
  hk_host *v;
  int n;               /* >= 1 after a successful parse */
  int64_t total_slots; /* sum of v[i].slots */
} hk_hostlist;

/**
 * Parses a -H value into *out (which the caller zeroes or frees first).
 * `what` names the option in messages ("-H"). Errors (HK_ERR_INVALID_ARG,
 * *out left empty): an empty list or entry, a bad host name, a missing,
 * zero, non-numeric or too large slot count, more than one ':' outside
 * brackets, a form hk refuses (above), more than HK_HOST_MAX_SLOTS slots
 * for one host in all; HK_ERR_NOMEM. Example message: "-H: 'h:0': the slot
 * count must be a whole number from 1 to 65536, not '0'". Thread-safety:
 * reentrant (the error message is thread-local).
 */
hk_status hk_hosts_parse_list(const char *list, const char *what,
                              hk_hostlist *out);

/**
 * Parses len bytes of host-file text (need not be NUL-terminated; a NUL
 * byte is an error). `fname` names the file in messages, which start with
 * "FILE:LINE: 'TOKEN': ". A file without any host is an error too.
 * Errors as hk_hosts_parse_list, plus an unknown keyword ("max_slots=4").
 */
hk_status hk_hosts_parse_file(const char *text, size_t len, const char *fname,
                              hk_hostlist *out);

/**
 * Checks that np processes fit in the slots. Error (HK_ERR_INVALID_ARG):
 * exactly "<np> processes requested but only <total> slots".
 */
hk_status hk_hosts_check_np(const hk_hostlist *h, int np);

/**
 * Writes "h1:s1,h2:s2,..." (NUL-terminated; an IPv6 host in brackets,
 * "[fe80::1]:4") into a malloc'ed string, or returns NULL when memory runs
 * out. The caller frees it.
 */
char *hk_hosts_join(const hk_hostlist *h);

/** 1 if a host of the list is an IPv6 address. */
int hk_hosts_has_ipv6(const hk_hostlist *h);

/** The list as an Open MPI host file, "host slots=N\n" per host (IPv6 bare,
 *  as its host files take them), malloc'ed, or NULL when out of memory. */
char *hk_hosts_file_text(const hk_hostlist *h);

/** Frees the list and empties *h (safe on an empty or zeroed list). */
void hk_hosts_free(hk_hostlist *h);

#endif
