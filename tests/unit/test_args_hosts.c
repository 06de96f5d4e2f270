/*
 * test_args_hosts.c - hkrun's options for several hosts (-H, --hostfile,
 * --mpi, --network-interface, --mpi-args, --bind-to) in the command-line
 * parser (launcher/args.h), table driven.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/args.h"

#define MAX_TOKENS 12

static int parse(const char *const *tokens, hkrun_args *out, char *err,
                 size_t cap, char **argv) {
  int argc = 0;
  argv[argc++] = "hkrun";
  for (int i = 0; tokens[i]; i++)
    argv[argc++] = (char *)tokens[i];
  argv[argc] = NULL;
  return hkrun_args_parse(argc, argv, out, err, cap);
}

static int same(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

typedef struct good_case {
  const char *tokens[MAX_TOKENS];
  int np; /* 0: left to the slots */
  const char *hosts, *hostfile;
  int mpi;
  const char *iface, *mpi_args, *bind_to;
  const char *prog;
} good_case;

static const good_case good[] = {
    {{"-np", "16", "-H", "hk1:8,hk2:8", "./train", NULL},
     16,
     "hk1:8,hk2:8",
     NULL,
     0,
     NULL,
     NULL,
     "none",
     "./train"},
    {{"-H", "a:2", "prog", NULL},
     0,
     "a:2",
     NULL,
     0,
     NULL,
     NULL,
     "none",
     "prog"},
    {{"--host=a:2,b:2", "--", "prog", NULL},
     0,
     "a:2,b:2",
     NULL,
     0,
     NULL,
     NULL,
     "none",
     "prog"},
    {{"--hostfile", "hosts.txt", "prog", NULL},
     0,
     NULL,
     "hosts.txt",
     0,
     NULL,
     NULL,
     "none",
     "prog"},
    {{"-hostfile", "h", "-np", "3", "prog", NULL},
     3,
     NULL,
     "h",
     0,
     NULL,
     NULL,
     "none",
     "prog"},
    {{"--mpi", "-np", "2", "prog", NULL},
     2,
     NULL,
     NULL,
     1,
     NULL,
     NULL,
     "none",
     "prog"},
    {{"-H", "a:1,b:1", "--network-interface", "eth1", "--mpi-args",
      "--mca plm_rsh_agent /x", "--bind-to", "core", "prog", NULL},
     0,
     "a:1,b:1",
     NULL,
     0,
     "eth1",
     "--mca plm_rsh_agent /x",
     "core",
     "prog"},
    {{"--network-interface=10.0.0.0/24", "--mpi-args=", "-np", "1", "p", NULL},
     1,
     NULL,
     NULL,
     0,
     "10.0.0.0/24",
     "",
     "none",
     "p"},
    /* -H with an empty value: kept for the host parser, which names it */
    {{"-H", "", "prog", NULL}, 0, "", NULL, 0, NULL, NULL, "none", "prog"},
};

static void test_accepted(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    const good_case *c = &good[i];
    hkrun_args a;
    char err[HKRUN_ARGS_ERR_CAP];
    char *argv[MAX_TOKENS + 2];
    if (parse(c->tokens, &a, err, sizeof err, argv) != 0)
      fail_msg("case %zu rejected: %s", i, err);
    assert_int_equal(a.action, HKRUN_RUN);
    assert_int_equal(a.np, c->np);
    assert_true(same(a.hosts, c->hosts));
    assert_true(same(a.hostfile, c->hostfile));
    assert_int_equal(a.mpi, c->mpi);
    assert_true(same(a.network_interface, c->iface));
    assert_true(same(a.mpi_args, c->mpi_args));
    assert_string_equal(a.bind_to, c->bind_to);
    assert_string_equal(a.prog_argv[0], c->prog);
  }
}

typedef struct bad_case {
  const char *tokens[MAX_TOKENS];
  const char *message;
} bad_case;

static const bad_case bad[] = {
    {{"-H", "a:1", "--hostfile", "f", "prog", NULL},
     "give -H or --hostfile, not both"},
    {{"--mpi", "prog", NULL}, "-np N is required"},
    {{"-H", NULL}, "-H: missing value"},
    {{"--hostfile=", "prog", NULL}, "--hostfile: empty value"},
    {{"--network-interface", "", "-np", "1", "prog", NULL},
     "--network-interface: empty value"},
    {{"--bind-to", "core numa", "-np", "1", "prog", NULL},
     "--bind-to: 'core numa' is not one of none, hwthread, core, socket, "
     "numa"},
    {{"--bind-to", "banana", "-np", "1", "prog", NULL},
     "--bind-to: 'banana' is not one of none, hwthread, core, socket, numa"},
    {{"--mpi=1", "-np", "1", "prog", NULL},
     "--mpi: takes no value (in "
     "'--mpi=1')"},
    {{"-H", "a:1", NULL}, "no program given"},
};

static void test_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    hkrun_args a;
    char err[HKRUN_ARGS_ERR_CAP];
    char *argv[MAX_TOKENS + 2];
    if (parse(bad[i].tokens, &a, err, sizeof err, argv) != -1)
      fail_msg("case %zu accepted", i);
    assert_string_equal(err, bad[i].message);
  }
}

static void test_usage_mentions_hosts(void **state) {
  (void)state;
  const char *u = hkrun_usage();
  assert_non_null(strstr(u, "-H, --hosts, --host LIST"));
  assert_non_null(strstr(u, "--hostfile FILE"));
  assert_non_null(strstr(u, "--network-interface IF"));
  assert_non_null(strstr(u, "--mpi-args"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepted),
      cmocka_unit_test(test_rejected),
      cmocka_unit_test(test_usage_mentions_hosts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
