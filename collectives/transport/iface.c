/*
 * iface.c - interface name or subnet -> IPv4 address (see iface.h).
 */
#include "collectives/transport/iface.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/status.h"

/* Most entries read from getifaddrs. */
#define IFACE_MAX 256

/* Parses "a.b.c.d/len" into a network and mask (host byte order). Returns
 * 1 if spec is a CIDR subnet, 0 if it is not one (a name), -1 if it looks
 * like one but is malformed. */
static int parse_cidr(const char *spec, uint32_t *net, uint32_t *mask) {
  const char *slash = strchr(spec, '/');
  if (!slash)
    return 0;
  char ip[HK_IFACE_ADDR_CAP];
  size_t n = (size_t)(slash - spec);
  if (n == 0 || n >= sizeof ip)
    return -1;
  memcpy(ip, spec, n);
  ip[n] = '\0';
  struct in_addr a;
  if (inet_pton(AF_INET, ip, &a) != 1)
    return -1;
  const char *p = slash + 1;
  int bits = 0;
  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9' && bits <= 32; p++)
    bits = bits * 10 + (*p - '0');
  if (*p || bits > 32)
    return -1;
  *mask = bits == 0 ? 0 : ~(uint32_t)0 << (32 - bits);
  *net = ntohl(a.s_addr) & *mask;
  return 1;
}

/* "lo 127.0.0.1, eth0 192.0.2.2, ifb0 without IPv4" into buf. */
static void describe(const hk_iface_entry *v, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len + 1 < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s %s", i ? ", " : "", v[i].name,
                     v[i].has_ipv4 ? v[i].addr : "without IPv4");
    if (w < 0)
      break;
    len += (size_t)w;
  }
  if (n == 0)
    snprintf(buf, cap, "none");
}

hk_status hk_iface_pick(const hk_iface_entry *v, int n, const char *spec,
                        char *addr, size_t cap) {
  if (!spec || !*spec)
    return hk_fail(HK_ERR_INVALID_ARG, "empty network interface name");
  if (cap < HK_IFACE_ADDR_CAP)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "network interface '%s': address buffer of %zu bytes is "
                   "too small",
                   spec, cap);
  uint32_t net = 0, mask = 0;
  int cidr = parse_cidr(spec, &net, &mask);
  if (cidr < 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "'%s' is neither an interface name nor an IPv4 subnet "
                   "such as 10.0.0.0/24",
                   spec);
  int named = 0;
  for (int i = 0; i < n; i++) {
    if (!cidr && strcmp(v[i].name, spec) != 0)
      continue;
    named = 1;
    if (!v[i].has_ipv4)
      continue;
    if (cidr) {
      struct in_addr a;
      if (inet_pton(AF_INET, v[i].addr, &a) != 1 ||
          (ntohl(a.s_addr) & mask) != net)
        continue;
    }
    snprintf(addr, cap, "%s", v[i].addr);
    return HK_OK;
  }
  char list[1024];
  describe(v, n, list, sizeof list);
  if (cidr)
    return hk_fail(HK_ERR_CONFIG,
                   "no network interface has an address in '%s' "
                   "(interfaces here: %s)",
                   spec, list);
  if (named)
    return hk_fail(HK_ERR_CONFIG,
                   "network interface '%s' has no IPv4 address (interfaces "
                   "here: %s)",
                   spec, list);
  return hk_fail(HK_ERR_CONFIG,
                 "no network interface '%s' (interfaces here: %s)", spec, list);
}

hk_status hk_iface_pick_default(const hk_iface_entry *v, int n, char *name,
                                char *addr, size_t cap) {
  if (cap < HK_IFACE_ADDR_CAP)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "default network interface: address buffer of %zu bytes "
                   "is too small",
                   cap);
  for (int i = 0; i < n; i++) {
    if (v[i].has_ipv4 && v[i].up && !v[i].loopback) {
      snprintf(name, HK_IFACE_NAME_MAX + 1, "%s", v[i].name);
      snprintf(addr, cap, "%s", v[i].addr);
      return HK_OK;
    }
  }
  char list[1024];
  describe(v, n, list, sizeof list);
  return hk_fail(HK_ERR_CONFIG,
                 "no network interface is up with an IPv4 address other than "
                 "loopback (interfaces here: %s)",
                 list);
}

/* Index of the entry for interface name in v[0..n), or -1. */
static int find_name(const hk_iface_entry *v, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(v[i].name, name) == 0)
      return i;
  return -1;
}

int hk_iface_list(hk_iface_entry *v, int max) {
  struct ifaddrs *all;
  if (getifaddrs(&all) != 0) {
    hk_fail_errno(HK_ERR_SYSTEM, errno, "getifaddrs");
    return -1;
  }
  int n = 0;
  /* IPv4 addresses first, in getifaddrs order, then the interfaces
   * without one. */
  for (int pass = 0; pass < 2; pass++) {
    for (struct ifaddrs *i = all; i && n < max; i = i->ifa_next) {
      int v4 = i->ifa_addr && i->ifa_addr->sa_family == AF_INET;
      if (!i->ifa_name || (pass == 0) != v4)
        continue;
      if (pass == 1 && find_name(v, n, i->ifa_name) >= 0)
        continue;
      hk_iface_entry *e = &v[n++];
      snprintf(e->name, sizeof e->name, "%s", i->ifa_name);
      e->has_ipv4 = v4;
      e->up = (i->ifa_flags & IFF_UP) != 0;
      e->loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
      e->addr[0] = '\0';
      if (v4)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr,
                  e->addr, sizeof e->addr);
    }
  }
  freeifaddrs(all);
  return n;
}

/* Lists this machine's interfaces and applies pick (a name/subnet choice
 * when spec is not NULL, else the default one). */
static hk_status with_list(const char *spec, char *name, char *addr,
                           size_t cap) {
  hk_iface_entry *v = malloc(IFACE_MAX * sizeof *v);
  if (!v)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the interface list");
  int n = hk_iface_list(v, IFACE_MAX);
  hk_status st = HK_ERR_SYSTEM;
  if (n >= 0)
    st = spec ? hk_iface_pick(v, n, spec, addr, cap)
              : hk_iface_pick_default(v, n, name, addr, cap);
  free(v);
  return st;
}

hk_status hk_iface_default_address(char *name, char *addr, size_t cap) {
  return with_list(NULL, name, addr, cap);
}

hk_status hk_iface_address(const char *spec, char *addr, size_t cap) {
  if (!spec || !*spec)
    return hk_fail(HK_ERR_INVALID_ARG, "empty network interface name");
  return with_list(spec, NULL, addr, cap);
}

hk_status hk_iface_route_address(const char *host, char *addr, size_t cap) {
  if (cap < HK_IFACE_ADDR_CAP)
    return hk_fail(HK_ERR_INVALID_ARG, "address buffer of %zu bytes", cap);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM},
                  *ai = NULL;
  int rc = getaddrinfo(host, "9", &hints, &ai);
  if (rc != 0 || !ai)
    return hk_fail(HK_ERR_CONFIG, "cannot resolve '%s': %s", host,
                   gai_strerror(rc));
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in me;
  socklen_t len = sizeof me;
  int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
           getsockname(fd, (struct sockaddr *)&me, &len) == 0;
  int err = errno;
  freeaddrinfo(ai);
  if (fd >= 0)
    close(fd);
  if (!ok)
    return hk_fail(HK_ERR_CONFIG, "no route to '%s': %s", host, strerror(err));
  inet_ntop(AF_INET, &me.sin_addr, addr, (socklen_t)cap);
  return HK_OK;
}
