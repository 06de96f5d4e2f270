/*
 * test_hosts.c - the -H and host-file parsers (launcher/hosts.h), table
 * driven: reported case C7 (a host list that lost a host's slots) and its
 * neighbours.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/status.h"
#include "launcher/hosts.h"

#define MAX_HOSTS 4

typedef struct want_host {
  const char *name;
  int slots;
} want_host;

static void check_hosts(const hk_hostlist *l, const want_host *want,
                        const char *input) {
  int n = 0;
  int64_t total = 0;
  while (n < MAX_HOSTS && want[n].name)
    total += want[n++].slots;
  if (l->n != n)
    fail_msg("'%s': %d hosts, expected %d", input, l->n, n);
  for (int i = 0; i < n; i++) {
    assert_string_equal(l->v[i].name, want[i].name);
    assert_int_equal(l->v[i].slots, want[i].slots);
  }
  assert_int_equal(l->total_slots, total);
}

/* ---- -H lists ---- */

typedef struct list_good {
  const char *list;
  want_host hosts[MAX_HOSTS + 1];
} list_good;

static const list_good list_goods[] = {
    {"10.0.0.3:2", {{"10.0.0.3", 2}}},
    {"a.b-c:8", {{"a.b-c", 8}}},
    {"host1:8,host2:8", {{"host1", 8}, {"host2", 8}}},
    {"solo", {{"solo", 1}}},                             /* 1 slot */
    {" h1:2 , h2 ", {{"h1", 2}, {"h2", 1}}},             /* spaces */
    {"n_1:007,N-2:65536", {{"n_1", 7}, {"N-2", 65536}}}, /* bounds */
    {"a:1,b:2,c:3", {{"a", 1}, {"b", 2}, {"c", 3}}},
    /* IPv6 in brackets, as Open MPI's -H writes it */
    {"[fe80::1]:4", {{"fe80::1", 4}}},
    {"[::1],[2001:db8::7]:2", {{"::1", 1}, {"2001:db8::7", 2}}},
    {"[fe80::1%eth0]:2", {{"fe80::1%eth0", 2}}},
    /* a host listed again adds its slots, as Open MPI aggregates it */
    {"a:2,b:1,a:3", {{"a", 5}, {"b", 1}}},
    {"n,n,n", {{"n", 3}}},
};

static void test_list_accepted(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof list_goods / sizeof list_goods[0]; i++) {
    hk_hostlist l;
    hk_status st = hk_hosts_parse_list(list_goods[i].list, "-H", &l);
    if (st != HK_OK)
      fail_msg("'%s' rejected: %s", list_goods[i].list, hk_last_error());
    check_hosts(&l, list_goods[i].hosts, list_goods[i].list);
    hk_hosts_free(&l);
    assert_null(l.v);
    assert_int_equal(l.n, 0);
  }
}

typedef struct bad_case {
  const char *input;
  const char *message; /* the whole message */
} bad_case;

static const bad_case list_bads[] = {
    {"h:0", "-H: 'h:0': the slot count must be a whole number from 1 to "
            "65536, not '0'"},
    {"h:abc", "-H: 'h:abc': the slot count must be a whole number from 1 "
              "to 65536, not 'abc'"},
    {"h:", "-H: 'h:': no slot count after ':'"},
    {":4", "-H: ':4': no host name before ':'"},
    {"", "-H: the host list is empty"},
    {"  ", "-H: the host list is empty"},
    {"localhost:10.0.0.2:2",
     "-H: 'localhost:10.0.0.2:2': more than one ':' (write host:slots; an "
     "IPv6 address goes in brackets: [fe80::1]:4)"},
    {"fe80::1:4", "-H: 'fe80::1:4': more than one ':' (write host:slots; an "
                  "IPv6 address goes in brackets: [fe80::1]:4)"},
    {"[fe80::1", "-H: '[fe80::1': brackets hold an IPv6 address "
                 "('[fe80::1]:4')"},
    {"[host1]:2", "-H: '[host1]:2': brackets hold an IPv6 address "
                  "('[fe80::1]:4')"},
    {"[fe80::1]4", "-H: '[fe80::1]4': after ']' comes ':' and the slot "
                   "count"},
    {"[fe80::1]:0", "-H: '[fe80::1]:0': the slot count must be a whole "
                    "number from 1 to 65536, not '0'"},
    {"bob@h1:2", "-H: 'bob@h1:2': a user name before '@' is not supported "
                 "(give it to ssh: User in ~/.ssh/config)"},
    {"^h1", "-H: '^h1': excluding a host ('^') is not supported: list only "
            "the hosts to use"},
    {"+n0:2", "-H: '+n0:2': relative host names ('+n0', '+e') refer to an "
              "allocation hk does not have: name the hosts"},
    {"a:40000,a:30000", "host 'a' is listed with more than 65536 slots in "
                        "all"},
    {"a:2,,b:2", "-H: 'a:2,,b:2': empty entry in the list"},
    {"a:2,", "-H: 'a:2,': empty entry in the list"},
    {"h:65537", "-H: 'h:65537': the slot count must be a whole number from "
                "1 to 65536, not '65537'"},
    {"h:-1", "-H: 'h:-1': the slot count must be a whole number from 1 to "
             "65536, not '-1'"},
    {"h:+2", "-H: 'h:+2': the slot count must be a whole number from 1 to "
             "65536, not '+2'"},
    {"bad/host:2", "-H: 'bad/host:2': 'bad/host' is not a host name "
                   "(letters, digits, '-', '.', '_'; an IPv6 address in "
                   "brackets)"},
    {"-h:2", "-H: '-h:2': '-h' is not a host name (letters, digits, '-', "
             "'.', '_'; an IPv6 address in brackets)"},
};

static void test_list_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof list_bads / sizeof list_bads[0]; i++) {
    hk_hostlist l = {0};
    hk_status st = hk_hosts_parse_list(list_bads[i].input, "-H", &l);
    if (st != HK_ERR_INVALID_ARG)
      fail_msg("'%s' gave status %d", list_bads[i].input, st);
    assert_string_equal(hk_last_error(), list_bads[i].message);
    assert_null(l.v); /* nothing left allocated */
    assert_int_equal(l.n, 0);
  }
}

static void test_long_name(void **state) {
  (void)state;
  char list[HK_HOST_NAME_MAX + 8];
  memset(list, 'a', HK_HOST_NAME_MAX);
  strcpy(list + HK_HOST_NAME_MAX, ":2");
  hk_hostlist l;
  assert_int_equal(hk_hosts_parse_list(list, "-H", &l), HK_OK);
  assert_int_equal(strlen(l.v[0].name), HK_HOST_NAME_MAX);
  hk_hosts_free(&l);
  memset(list, 'a', HK_HOST_NAME_MAX + 1);
  strcpy(list + HK_HOST_NAME_MAX + 1, ":2");
  assert_int_equal(hk_hosts_parse_list(list, "-H", &l), HK_ERR_INVALID_ARG);
  assert_non_null(strstr(hk_last_error(), "longer than 253 bytes"));
}

/* ---- host files ---- */

typedef struct file_good {
  const char *text;
  want_host hosts[MAX_HOSTS + 1];
} file_good;

static const file_good file_goods[] = {
    {"# two 8-GPU servers\n"
     "\n"
     "h1 slots=8\n"
     "   \n"
     "h2:8   \n",
     {{"h1", 8}, {"h2", 8}}},
    {"h1 slots=8  # the first\n\th2\tslots=4\t\n10.0.0.3", /* no final \n */
     {{"h1", 8}, {"h2", 4}, {"10.0.0.3", 1}}},
    {"a.b-c:8\r\nb slots=2\r\n", {{"a.b-c", 8}, {"b", 2}}}, /* CRLF */
    {"#only\nsolo\n#comment\n", {{"solo", 1}}},
    /* Open MPI's own host-file syntax */
    {"h2 slots=8 max_slots=8\nh3 max_slots=4\nh4 count=2 cpu=1\n",
     {{"h2", 8}, {"h3", 4}, {"h4", 3}}},
    {"h1 slots=2 slots=3\nh5 slots=2 max-slots=6\n", /* slots add up */
     {{"h1", 5}, {"h5", 2}}},
    {"fe80::1 slots=2\n[fe80::2]:3\n::1\n",
     {{"fe80::1", 2}, {"fe80::2", 3}, {"::1", 1}}},
    {"h1 slots=2\nh2\nh1:4\n", {{"h1", 6}, {"h2", 1}}}, /* aggregated */
};

static void test_file_accepted(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof file_goods / sizeof file_goods[0]; i++) {
    hk_hostlist l;
    const char *t = file_goods[i].text;
    hk_status st = hk_hosts_parse_file(t, strlen(t), "hosts", &l);
    if (st != HK_OK)
      fail_msg("file %zu rejected: %s", i, hk_last_error());
    check_hosts(&l, file_goods[i].hosts, t);
    hk_hosts_free(&l);
  }
}

static const bad_case file_bads[] = {
    {"h1 slots=8\nh2 slots=0\n",
     "hosts:2: 'slots=0': the slot count must be a whole number from 1 to "
     "65536, not '0'"},
    {"h1 slots=abc", "hosts:1: 'slots=abc': the slot count must be a whole "
                     "number from 1 to 65536, not 'abc'"},
    {"h1 slots=", "hosts:1: 'slots=': no slot count after '='"},
    {"\n\nh:\n", "hosts:3: 'h:': no slot count after ':'"},
    {":4\n", "hosts:1: ':4': no host name before ':'"},
    {"# nothing\n\n", "hosts: no hosts in the file"},
    {"", "hosts: no hosts in the file"},
    {"h1 maxslots=16\n",
     "hosts:1: 'maxslots=16': unknown keyword (a line is 'host', 'host:N' or "
     "'host slots=N max_slots=M', with count= or cpu= for slots=)"},
    {"h1 slots=8 max_slots=4\n",
     "hosts:1: 'max_slots=4': max_slots is below the host's 8 slots"},
    {"h1 max_slots=x\n", "hosts:1: 'max_slots=x': the slot count must be a "
                         "whole number from 1 to 65536, not 'x'"},
    {"h1:2 slots=2\n", "hosts:1: 'h1:2 slots=2': the slot count is given "
                       "twice"},
    {"h1 username=bob\n", "hosts:1: 'username=bob': a user name per host is "
                          "not supported (give it to ssh: User in "
                          "~/.ssh/config)"},
    {"h1 slots=4 sockets=2\n",
     "hosts:1: 'sockets=2': hk does not place ranks by board, socket or core "
     "(--bind-to is passed to mpirun)"},
    {"rank 0=h1 slot=0\n",
     "hosts:1: '0=h1': unknown keyword (a line is 'host', 'host:N' or 'host "
     "slots=N max_slots=M', with count= or cpu= for slots=)"},
    {"^h1\n", "hosts:1: '^h1': excluding a host ('^') is not supported: list "
              "only the hosts to use"},
    {"localhost:10.0.0.2:2\n",
     "hosts:1: 'localhost:10.0.0.2:2': more than one ':' (write host:slots; "
     "an IPv6 address goes in brackets: [fe80::1]:4)"},
};

static void test_file_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof file_bads / sizeof file_bads[0]; i++) {
    hk_hostlist l = {0};
    const char *t = file_bads[i].input;
    hk_status st = hk_hosts_parse_file(t, strlen(t), "hosts", &l);
    if (st != HK_ERR_INVALID_ARG)
      fail_msg("file %zu ('%s') gave status %d", i, t, st);
    assert_string_equal(hk_last_error(), file_bads[i].message);
    assert_null(l.v);
  }
}

static void test_file_nul_byte(void **state) {
  (void)state;
  hk_hostlist l;
  assert_int_equal(hk_hosts_parse_file("h1\n\0h2\n", 7, "f", &l),
                   HK_ERR_INVALID_ARG);
  assert_string_equal(hk_last_error(), "f:2: a NUL byte (not a text file?)");
}

/* ---- slots against -np, and joining for mpirun -H ---- */

static void test_np_against_slots(void **state) {
  (void)state;
  static const struct {
    const char *list;
    int np;
    const char *message; /* NULL: fits */
  } cases[] = {
      {"a:8,b:8", 17, "17 processes requested but only 16 slots"},
      {"a:8,b:8", 16, NULL},
      {"a:8,b:8", 1, NULL},
      {"a", 2, "2 processes requested but only 1 slots"},
      {"a:65536,b:65536", 65536, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hk_hostlist l;
    assert_int_equal(hk_hosts_parse_list(cases[i].list, "-H", &l), HK_OK);
    hk_status st = hk_hosts_check_np(&l, cases[i].np);
    if (cases[i].message) {
      assert_int_equal(st, HK_ERR_INVALID_ARG);
      assert_string_equal(hk_last_error(), cases[i].message);
    } else {
      assert_int_equal(st, HK_OK);
    }
    hk_hosts_free(&l);
  }
}

static void test_join(void **state) {
  (void)state;
  hk_hostlist l;
  const char *text = "# c\nh1 slots=8\nh2:4\n10.0.0.3\n";
  assert_int_equal(hk_hosts_parse_file(text, strlen(text), "f", &l), HK_OK);
  char *s = hk_hosts_join(&l);
  assert_string_equal(s, "h1:8,h2:4,10.0.0.3:1");
  free(s);
  assert_false(hk_hosts_has_ipv6(&l));
  hk_hosts_free(&l);
  hk_hosts_free(&l); /* twice is fine */
  /* IPv6 hosts: in brackets when joined (so that they parse back), and as
   * Open MPI's host file has them */
  assert_int_equal(hk_hosts_parse_list("[fe80::1]:4,h1:2", "-H", &l), HK_OK);
  assert_true(hk_hosts_has_ipv6(&l));
  s = hk_hosts_join(&l);
  assert_string_equal(s, "[fe80::1]:4,h1:2");
  free(s);
  s = hk_hosts_file_text(&l);
  assert_string_equal(s, "fe80::1 slots=4\nh1 slots=2\n");
  free(s);
  hk_hosts_free(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_list_accepted),
      cmocka_unit_test(test_list_rejected),
      cmocka_unit_test(test_long_name),
      cmocka_unit_test(test_file_accepted),
      cmocka_unit_test(test_file_rejected),
      cmocka_unit_test(test_file_nul_byte),
      cmocka_unit_test(test_np_against_slots),
      cmocka_unit_test(test_join),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
