/*
 * iface.h - the IPv4 address hk binds and advertises for a network
 * interface chosen by the user (HK_SOCKET_IFNAME, hkrun's
 * --network-interface): an interface name ("eth0") or a CIDR subnet
 * ("10.214.7.0/24": the first interface with an address inside it, which
 * is how Open MPI's *_if_include also read it).
 */
#ifndef HK_TRANSPORT_IFACE_H
#define HK_TRANSPORT_IFACE_H

#include <stddef.h>

#include "hk/hk.h"

/** Room for a dotted IPv4 address and its NUL, in bytes. */
#define HK_IFACE_ADDR_CAP 16
/** Longest interface name (Linux IFNAMSIZ - 1), in bytes. */
#define HK_IFACE_NAME_MAX 15

/** One address of one interface, as getifaddrs reports it. */
typedef struct hk_iface_entry {
  char name[HK_IFACE_NAME_MAX + 1];
  int has_ipv4;                 /* 0: the interface has no IPv4 address */
  char addr[HK_IFACE_ADDR_CAP]; /* dotted IPv4 when has_ipv4 */
  int up;                       /* IFF_UP */
  int loopback;                 /* IFF_LOOPBACK */
} hk_iface_entry;

/**
 * Writes the IPv4 address of the interface `spec` names (see above) into
 * addr[cap] (cap >= HK_IFACE_ADDR_CAP). An interface with several IPv4
 * addresses gives the first getifaddrs lists.
 * Errors: HK_ERR_CONFIG when no interface matches, or it has no IPv4
 * address; the message names spec and lists every interface with its
 * addresses, e.g. "no network interface 'doesnotexist0' (interfaces here:
 * lo 127.0.0.1, eth0 192.0.2.2, ifb0 without IPv4)";
 * HK_ERR_INVALID_ARG (empty spec, bad CIDR, cap too small); HK_ERR_SYSTEM
 * (getifaddrs failed). Thread-safety: reentrant.
 */
hk_status hk_iface_address(const char *spec, char *addr, size_t cap);

/**
 * The choice itself, over a given list of entries (pure, for tests):
 * same contract as hk_iface_address. Entries of one interface may repeat
 * (one per address); an entry with has_ipv4 0 only says it exists.
 */
hk_status hk_iface_pick(const hk_iface_entry *v, int n, const char *spec,
                        char *addr, size_t cap);

/**
 * The address to use when the user named no interface: the first IPv4
 * address (in getifaddrs order) of an interface that is up and not a
 * loopback. Its name goes into name[HK_IFACE_NAME_MAX + 1], so that the
 * caller can say which it chose. On a machine with several networks this
 * may not be the one the other hosts reach: name one (hkrun
 * --network-interface) there.
 * Errors: HK_ERR_CONFIG when there is none ("no network interface is up
 * with an IPv4 address other than loopback (interfaces here: ...)"),
 * HK_ERR_INVALID_ARG (cap too small), HK_ERR_SYSTEM (getifaddrs).
 */
hk_status hk_iface_default_address(char *name, char *addr, size_t cap);

/** hk_iface_default_address over a given list (pure, for tests). */
hk_status hk_iface_pick_default(const hk_iface_entry *v, int n, char *name,
                                char *addr, size_t cap);

/**
 * The local IPv4 address this machine reaches host (numeric IPv4 or a
 * name) from: the source address the kernel's routing picks, found by
 * connect(2)ing a UDP socket (nothing is sent) and reading getsockname.
 * Into addr[cap] (cap >= HK_IFACE_ADDR_CAP). A loopback host gives
 * 127.0.0.1. Used where the workers of several hosts meet at one
 * rendezvous (hkrun --rdzv-endpoint): each listens on the address by
 * which it reaches it.
 * Errors: HK_ERR_CONFIG (host cannot be resolved, or no route to it,
 * naming it), HK_ERR_INVALID_ARG (cap too small). Reentrant.
 */
hk_status hk_iface_route_address(const char *host, char *addr, size_t cap);

/**
 * Fills v[0..max) with this machine's interfaces and their IPv4
 * addresses (one entry per address; interfaces without one get a single
 * entry with has_ipv4 0) and returns how many it wrote (at most max: the
 * rest is left out), or -1 with hk_last_error() set (HK_ERR_SYSTEM).
 */
int hk_iface_list(hk_iface_entry *v, int max);

#endif
