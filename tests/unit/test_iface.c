/*
 * test_iface.c - interface name or subnet -> IPv4 address
 * (collectives/transport/iface.h): the choice over given lists, table
 * driven, and this machine's `lo` and a name that does not exist (case
 * reported case C8); the default choice when none is
 * named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collectives/transport/iface.h"
#include "common/status.h"

static const hk_iface_entry machine[] = {
    {"lo", 1, "127.0.0.1", 1, 1},
    {"eth0", 1, "192.0.2.2", 1, 0},
    {"eth1", 1, "10.214.7.3", 1, 0},
    {"eth1", 1, "10.9.0.1", 1, 0}, /* a second address */
    {"ifb0", 0, "", 0, 0},
};
#define MACHINE_N ((int)(sizeof machine / sizeof machine[0]))
#define LIST                                                                   \
  "lo 127.0.0.1, eth0 192.0.2.2, eth1 10.214.7.3, eth1 10.9.0.1, ifb0 "        \
  "without IPv4"

typedef struct pick_case {
  const char *spec;
  hk_status status;
  const char *result; /* the address, or the whole error message */
} pick_case;

static const pick_case picks[] = {
    {"lo", HK_OK, "127.0.0.1"},
    {"eth0", HK_OK, "192.0.2.2"},
    {"eth1", HK_OK, "10.214.7.3"}, /* the first of two */
    {"10.214.7.0/24", HK_OK, "10.214.7.3"},
    {"10.9.0.0/16", HK_OK, "10.9.0.1"},
    {"127.0.0.1/32", HK_OK, "127.0.0.1"},
    {"0.0.0.0/0", HK_OK, "127.0.0.1"},
    {"doesnotexist0", HK_ERR_CONFIG,
     "no network interface 'doesnotexist0' (interfaces here: " LIST ")"},
    {"ifb0", HK_ERR_CONFIG,
     "network interface 'ifb0' has no IPv4 address (interfaces here: " LIST
     ")"},
    {"10.215.0.0/24", HK_ERR_CONFIG,
     "no network interface has an address in '10.215.0.0/24' (interfaces "
     "here: " LIST ")"},
    {"10.214.7.0/33", HK_ERR_INVALID_ARG,
     "'10.214.7.0/33' is neither an interface name nor an IPv4 subnet such "
     "as 10.0.0.0/24"},
    {"10.214.7/24", HK_ERR_INVALID_ARG,
     "'10.214.7/24' is neither an interface name nor an IPv4 subnet such as "
     "10.0.0.0/24"},
    {"10.0.0.0/", HK_ERR_INVALID_ARG,
     "'10.0.0.0/' is neither an interface name nor an IPv4 subnet such as "
     "10.0.0.0/24"},
    {"", HK_ERR_INVALID_ARG, "empty network interface name"},
};

static void test_pick(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
    char addr[HK_IFACE_ADDR_CAP] = "";
    hk_status st =
        hk_iface_pick(machine, MACHINE_N, picks[i].spec, addr, sizeof addr);
    if (st != picks[i].status)
      fail_msg("'%s': status %d, expected %d (%s)", picks[i].spec, st,
               picks[i].status, hk_last_error());
    assert_string_equal(st == HK_OK ? addr : hk_last_error(), picks[i].result);
  }
}

static void test_pick_small_buffer(void **state) {
  (void)state;
  char addr[8];
  assert_int_equal(hk_iface_pick(machine, MACHINE_N, "lo", addr, sizeof addr),
                   HK_ERR_INVALID_ARG);
}

static void test_pick_no_interfaces(void **state) {
  (void)state;
  char addr[HK_IFACE_ADDR_CAP];
  assert_int_equal(hk_iface_pick(NULL, 0, "eth0", addr, sizeof addr),
                   HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "no network interface 'eth0' (interfaces here: none)");
}

/* This machine: lo is 127.0.0.1, and a bogus name lists what exists. */
static void test_this_machine(void **state) {
  (void)state;
  char addr[HK_IFACE_ADDR_CAP];
  assert_int_equal(hk_iface_address("lo", addr, sizeof addr), HK_OK);
  assert_string_equal(addr, "127.0.0.1");
  assert_int_equal(hk_iface_address("127.0.0.0/8", addr, sizeof addr), HK_OK);
  assert_string_equal(addr, "127.0.0.1");

  assert_int_equal(hk_iface_address("doesnotexist0", addr, sizeof addr),
                   HK_ERR_CONFIG);
  const char *msg = hk_last_error();
  assert_non_null(strstr(msg, "no network interface 'doesnotexist0' "
                              "(interfaces here: "));
  assert_non_null(strstr(msg, "lo 127.0.0.1"));
  /* every interface getifaddrs lists appears in the message */
  hk_iface_entry v[64];
  int n = hk_iface_list(v, 64);
  assert_true(n >= 1);
  for (int i = 0; i < n && i < 64; i++) {
    char item[64];
    snprintf(item, sizeof item, "%.15s %.15s", v[i].name,
             v[i].has_ipv4 ? v[i].addr : "without IPv4");
    if (!strstr(msg, item))
      fail_msg("'%s' missing from: %s", item, msg);
  }
}

static void test_default(void **state) {
  (void)state;
  static const hk_iface_entry down_first[] = {
      {.name = "lo",
       .has_ipv4 = 1,
       .addr = "127.0.0.1",
       .up = 1,
       .loopback = 1},
      {.name = "eth0", .has_ipv4 = 1, .addr = "10.0.0.9", .up = 0},
      {.name = "ib0", .has_ipv4 = 0, .up = 1},
      {.name = "eth1", .has_ipv4 = 1, .addr = "10.214.7.2", .up = 1},
      {.name = "eth2", .has_ipv4 = 1, .addr = "10.9.9.9", .up = 1},
  };
  char name[HK_IFACE_NAME_MAX + 1] = "", addr[HK_IFACE_ADDR_CAP] = "";
  assert_int_equal(
      hk_iface_pick_default(down_first, 5, name, addr, sizeof addr), HK_OK);
  assert_string_equal(name, "eth1");
  assert_string_equal(addr, "10.214.7.2");
  /* only loopback and a down interface: none */
  assert_int_equal(
      hk_iface_pick_default(down_first, 2, name, addr, sizeof addr),
      HK_ERR_CONFIG);
  assert_string_equal(hk_last_error(),
                      "no network interface is up with an IPv4 address "
                      "other than loopback (interfaces here: lo 127.0.0.1, "
                      "eth0 10.0.0.9)");
  /* this machine: whatever it finds is up, not loopback, and listed */
  if (hk_iface_default_address(name, addr, sizeof addr) == HK_OK) {
    char again[HK_IFACE_ADDR_CAP];
    assert_int_equal(hk_iface_address(name, again, sizeof again), HK_OK);
    assert_string_equal(again, addr);
    assert_string_not_equal(name, "lo");
  }
}

static void test_list_stops_at_max(void **state) {
  (void)state;
  hk_iface_entry v[64];
  int n = hk_iface_list(v, 64);
  assert_true(n >= 1);
  hk_iface_entry one[1];
  assert_int_equal(hk_iface_list(one, 1), 1);
  assert_string_equal(one[0].name, v[0].name);
  assert_int_equal(hk_iface_list(one, 0), 0);
}

/* hk_iface_route_address: loopback answers from loopback; an address of
 * this machine's own interface answers from itself (the kernel routes it
 * locally); a name that does not resolve and a small buffer are refused
 * saying so. */
static void test_route_address(void **state) {
  (void)state;
  char addr[HK_IFACE_ADDR_CAP];
  assert_int_equal(hk_iface_route_address("127.0.0.1", addr, sizeof addr),
                   HK_OK);
  assert_string_equal(addr, "127.0.0.1");
  hk_iface_entry v[32];
  int n = hk_iface_list(v, 32);
  for (int i = 0; i < n && i < 32; i++)
    if (v[i].has_ipv4 && v[i].up && !v[i].loopback) {
      assert_int_equal(hk_iface_route_address(v[i].addr, addr, sizeof addr),
                       HK_OK);
      assert_string_equal(addr, v[i].addr);
      break;
    }
  assert_int_equal(
      hk_iface_route_address("no-such-host.invalid", addr, sizeof addr),
      HK_ERR_CONFIG);
  assert_non_null(
      strstr(hk_last_error(), "cannot resolve 'no-such-host.invalid': "));
  assert_int_equal(hk_iface_route_address("127.0.0.1", addr, 8),
                   HK_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pick),
      cmocka_unit_test(test_pick_small_buffer),
      cmocka_unit_test(test_pick_no_interfaces),
      cmocka_unit_test(test_this_machine),
      cmocka_unit_test(test_default),
      cmocka_unit_test(test_list_stops_at_max),
      cmocka_unit_test(test_route_address),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
