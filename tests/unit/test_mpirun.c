/*
 * test_mpirun.c - the mpirun command line hkrun builds (launcher/mpirun.h)
 * and the sh-style word splitting and quoting around it (launcher/argv.h),
 * table driven.
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
#include "launcher/argv.h"
#include "launcher/hosts.h"
#include "launcher/mpirun.h"

/* ---- hk_argv_split ---- */

typedef struct split_case {
  const char *input;
  const char *words[8]; /* NULL-terminated */
} split_case;

static const split_case splits[] = {
    {"", {NULL}},
    {"   \t\n ", {NULL}},
    {"--mca plm_rsh_agent /tmp/x/agent",
     {"--mca", "plm_rsh_agent", "/tmp/x/agent", NULL}},
    {"  a   b\tc\n", {"a", "b", "c", NULL}},
    {"'two words' \"and three  more\"", {"two words", "and three  more", NULL}},
    {"a'b c'd", {"ab cd", NULL}},
    {"\"\\\"q\\\" \\\\ \\$x \\n\"", {"\"q\" \\ $x \\n", NULL}},
    {"back\\ slash \\'", {"back slash", "'", NULL}},
    {"'' \"\"", {"", "", NULL}},
    {"$HOME `x` ;*", {"$HOME", "`x`", ";*", NULL}},
};

static void test_split(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    hk_argv a = {0};
    hk_status st = hk_argv_split(&a, splits[i].input, "--mpi-args");
    if (st != HK_OK)
      fail_msg("'%s': %s", splits[i].input, hk_last_error());
    int n = 0;
    while (splits[i].words[n])
      n++;
    if (a.n != n)
      fail_msg("'%s': %d words, expected %d", splits[i].input, a.n, n);
    for (int k = 0; k < n; k++)
      assert_string_equal(a.v[k], splits[i].words[k]);
    if (n > 0)
      assert_null(a.v[n]);
    hk_argv_free(&a);
  }
}

static void test_split_errors(void **state) {
  (void)state;
  static const struct {
    const char *input, *message;
  } cases[] = {
      {"a 'bc", "--mpi-args: ''bc': unterminated single quote"},
      {"x\"bc d", "--mpi-args: 'x\"bc d': unterminated double quote"},
      {"ab\\", "--mpi-args: 'ab\\': trailing backslash"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hk_argv a = {0};
    assert_int_equal(hk_argv_split(&a, cases[i].input, "--mpi-args"),
                     HK_ERR_INVALID_ARG);
    assert_string_equal(hk_last_error(), cases[i].message);
    hk_argv_free(&a);
  }
}

/* ---- hk_argv_format: quoting, and that split reads it back ---- */

static void test_format_round_trip(void **state) {
  (void)state;
  static const struct {
    const char *words[6];
    const char *line;
  } cases[] = {
      {{"mpirun", "-np", "4", "-H", "a:2,b:2", NULL},
       "mpirun -np 4 -H a:2,b:2"},
      {{"sh", "-c", "echo $OMPI_COMM_WORLD_RANK", NULL},
       "sh -c 'echo $OMPI_COMM_WORLD_RANK'"},
      {{"it's", "", "a b", NULL}, "'it'\\''s' '' 'a b'"},
      {{"/p/x.y_z@1%+=:,-", NULL}, "/p/x.y_z@1%+=:,-"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hk_argv a = {0};
    assert_int_equal(hk_argv_push_all(&a, cases[i].words), HK_OK);
    char *line = hk_argv_format(&a);
    assert_string_equal(line, cases[i].line);
    hk_argv back = {0};
    assert_int_equal(hk_argv_split(&back, line, "x"), HK_OK);
    assert_int_equal(back.n, a.n);
    for (int k = 0; k < a.n; k++)
      assert_string_equal(back.v[k], a.v[k]);
    free(line);
    hk_argv_free(&a);
    hk_argv_free(&back);
  }
}

/* ---- hk_mpirun_build ---- */

static char *const test_env[] = {
    "PATH=/usr/bin",
    "HK_SECRET=00ff",
    "HK_TIMEOUT_S=5",
    "HK_RANK=3", /* from an enclosing hkrun job: never forwarded */
    "HK_SIZE=4",
    "HK_LOCAL_RANK=3",
    "HK_LOCAL_SIZE=4",
    "HK_RENDEZVOUS=127.0.0.1:4000",
    "HK_LAUNCHER_PID=77",
    "HK_CYCLE_TIME_MS=2",
    "HK_lower=1", /* not a name hk uses: not forwarded */
    "HKX=1",
    "HK_=1",
    "HK_TIMEOUT_S=6", /* twice: forwarded once */
    "NOEQUALS",
    NULL};

static char *prog[] = {"/bin/sh", "-c", "echo $OMPI_COMM_WORLD_RANK", NULL};

typedef struct build_case {
  const char *hosts; /* -H list, or NULL */
  int np, as_root, tag_output, ncpus;
  const char *bind_to, *iface, *mpi_args;
  const char *line; /* the expected command, as hk_argv_format prints it */
} build_case;

static const build_case builds[] = {
    /* the 2-host example of the report */
    {"a:2,b:2", 4, 1, 1, 2, NULL, "eth1", "--mca plm_rsh_agent /tmp/agent",
     "mpirun --allow-run-as-root -np 4 -H a:2,b:2 --map-by slot --bind-to "
     "none --tag-output --mca btl_tcp_if_include eth1 --mca "
     "oob_tcp_if_include eth1 -x HK_CYCLE_TIME_MS -x HK_SECRET -x "
     "HK_TIMEOUT_S --mca plm_rsh_agent /tmp/agent -- /bin/sh -c 'echo "
     "$OMPI_COMM_WORLD_RANK'"},
    /* not root, no tags, no interface, a host file's hosts */
    {"h1:8,h2:8", 16, 0, 0, 64, "core", NULL, NULL,
     "mpirun -np 16 -H h1:8,h2:8 --map-by slot --bind-to core -x "
     "HK_CYCLE_TIME_MS -x HK_SECRET -x HK_TIMEOUT_S -- /bin/sh -c 'echo "
     "$OMPI_COMM_WORLD_RANK'"},
    /* --mpi on this host: more ranks than CPUs oversubscribes */
    {NULL, 3, 1, 0, 2, NULL, NULL, NULL,
     "mpirun --allow-run-as-root -np 3 --map-by slot --bind-to none "
     "--oversubscribe -x HK_CYCLE_TIME_MS -x HK_SECRET -x HK_TIMEOUT_S -- "
     "/bin/sh -c 'echo $OMPI_COMM_WORLD_RANK'"},
    /* ...and not when they fit; with hosts never (their slots are given) */
    {NULL, 2, 0, 0, 2, NULL, NULL, "",
     "mpirun -np 2 --map-by slot --bind-to none -x HK_CYCLE_TIME_MS -x "
     "HK_SECRET -x HK_TIMEOUT_S -- /bin/sh -c 'echo $OMPI_COMM_WORLD_RANK'"},
    {"a:64", 64, 0, 0, 2, NULL, "10.214.7.0/24", "-x 'LD_LIBRARY_PATH'",
     "mpirun -np 64 -H a:64 --map-by slot --bind-to none --mca "
     "btl_tcp_if_include 10.214.7.0/24 --mca oob_tcp_if_include "
     "10.214.7.0/24 -x HK_CYCLE_TIME_MS -x HK_SECRET -x HK_TIMEOUT_S -x "
     "LD_LIBRARY_PATH -- /bin/sh -c 'echo $OMPI_COMM_WORLD_RANK'"},
};

/* The ssh options hkrun gives Open MPI come before the forwarded
 * variables and --mpi-args. */
static void test_build_rsh_args(void **state) {
  (void)state;
  hk_hostlist hosts = {0};
  assert_int_equal(hk_hosts_parse_list("a:1,b:1", "-H", &hosts), HK_OK);
  hk_mpirun_spec spec = {.mpirun = "mpirun",
                         .np = 2,
                         .hosts = &hosts,
                         .rsh_args = "-o BatchMode=yes -o ConnectTimeout=7",
                         .envp = test_env,
                         .prog_argv = prog,
                         .prog_argc = 3};
  hk_argv cmd = {0};
  assert_int_equal(hk_mpirun_build(&spec, &cmd), HK_OK);
  char *line = hk_argv_format(&cmd);
  assert_string_equal(
      line, "mpirun -np 2 -H a:1,b:1 --map-by slot --bind-to none "
            "--mca plm_rsh_args '-o BatchMode=yes -o "
            "ConnectTimeout=7' -x HK_CYCLE_TIME_MS -x HK_SECRET -x "
            "HK_TIMEOUT_S -- /bin/sh -c 'echo $OMPI_COMM_WORLD_RANK'");
  free(line);
  hk_argv_free(&cmd);
  hk_hosts_free(&hosts);
}

/* plm_rsh_args joins hkrun's ssh options and horovodrun's -p/-i, each
 * part only when given, one space between. */
static void test_rsh_args_join(void **state) {
  (void)state;
  static const struct {
    const char *rsh, *port, *id, *want;
  } cases[] = {
      {NULL, NULL, NULL, ""},
      {"-o BatchMode=yes", NULL, NULL, "-o BatchMode=yes"},
      {NULL, "2222", NULL, "-p 2222"},
      {NULL, NULL, "/k/id", "-i /k/id"},
      {NULL, "2222", "/k/id", "-p 2222 -i /k/id"},
      {"-o A=1", "22", NULL, "-o A=1 -p 22"},
      {"-o A=1", NULL, "/k", "-o A=1 -i /k"},
      {"-o A=1", "22", "/k", "-o A=1 -p 22 -i /k"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[128];
    assert_string_equal(hk_mpirun_rsh_args(cases[i].rsh, cases[i].port,
                                           cases[i].id, buf, sizeof buf),
                        cases[i].want);
  }
  char small[8]; /* cut to fit, terminated */
  assert_string_equal(
      hk_mpirun_rsh_args("-o BatchMode=yes", "22", NULL, small, sizeof small),
      "-o Batc");
  /* in the command: one plm_rsh_args holding both */
  hk_hostlist hosts = {0};
  assert_int_equal(hk_hosts_parse_list("a:1,b:1", "-H", &hosts), HK_OK);
  hk_mpirun_spec spec = {.mpirun = "mpirun",
                         .np = 2,
                         .hosts = &hosts,
                         .rsh_args = "-o BatchMode=yes",
                         .ssh_port = "2222",
                         .ssh_identity_file = "/k/id",
                         .envp = test_env,
                         .prog_argv = prog,
                         .prog_argc = 3};
  hk_argv cmd = {0};
  assert_int_equal(hk_mpirun_build(&spec, &cmd), HK_OK);
  char *line = hk_argv_format(&cmd);
  assert_non_null(strstr(line, " --mca plm_rsh_args '-o BatchMode=yes -p 2222 "
                               "-i /k/id' -x "));
  assert_null(strstr(strstr(line, "plm_rsh_args") + 1, "plm_rsh_args"));
  free(line);
  hk_argv_free(&cmd);
  hk_hosts_free(&hosts);
}

static void test_build(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
    const build_case *c = &builds[i];
    hk_hostlist hosts = {0};
    if (c->hosts)
      assert_int_equal(hk_hosts_parse_list(c->hosts, "-H", &hosts), HK_OK);
    hk_mpirun_spec spec = {
        .mpirun = "mpirun",
        .np = c->np,
        .hosts = c->hosts ? &hosts : NULL,
        .bind_to = c->bind_to,
        .network_interface = c->iface,
        .mpi_args = c->mpi_args,
        .as_root = c->as_root,
        .tag_output = c->tag_output,
        .ncpus = c->ncpus,
        .envp = test_env,
        .prog_argv = prog,
        .prog_argc = 3,
    };
    hk_argv cmd = {0};
    hk_status st = hk_mpirun_build(&spec, &cmd);
    if (st != HK_OK)
      fail_msg("case %zu: %s", i, hk_last_error());
    char *line = hk_argv_format(&cmd);
    if (strcmp(line, c->line) != 0)
      fail_msg("case %zu:\n got  %s\n want %s", i, line, c->line);
    assert_null(cmd.v[cmd.n]);
    /* the program's words come last, exactly, after "--" */
    assert_string_equal(cmd.v[cmd.n - 4], "--");
    assert_string_equal(cmd.v[cmd.n - 1], prog[2]);
    free(line);
    hk_argv_free(&cmd);
    hk_hosts_free(&hosts);
  }
}

static void test_build_errors(void **state) {
  (void)state;
  hk_mpirun_spec spec = {.np = 2,
                         .envp = test_env,
                         .prog_argv = prog,
                         .prog_argc = 3,
                         .mpi_args = "--mca 'x"};
  hk_argv cmd = {0};
  assert_int_equal(hk_mpirun_build(&spec, &cmd), HK_ERR_INVALID_ARG);
  assert_string_equal(hk_last_error(),
                      "--mpi-args: ''x': unterminated single quote");
  hk_argv_free(&cmd);
  spec.mpi_args = NULL;
  spec.np = 0;
  assert_int_equal(hk_mpirun_build(&spec, &cmd), HK_ERR_INVALID_ARG);
  hk_argv_free(&cmd);
  spec.np = 1;
  spec.prog_argc = 0;
  assert_int_equal(hk_mpirun_build(&spec, &cmd), HK_ERR_INVALID_ARG);
  assert_string_equal(hk_last_error(), "mpirun: no program given");
  hk_argv_free(&cmd);
}

static void test_forwarded(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int forwarded;
  } cases[] = {
      {"HK_SECRET", 1},
      {"HK_SOCKET_IFNAME", 1},
      {"HK_TIMEOUT_S", 1},
      {"HK_HIERARCHICAL_ALLREDUCE", 1},
      {"HK_RANK", 0},
      {"HK_SIZE", 0},
      {"HK_LOCAL_RANK", 0},
      {"HK_LOCAL_SIZE", 0},
      {"HK_CROSS_RANK", 0},
      {"HK_CROSS_SIZE", 0},
      {"HK_RENDEZVOUS", 0},
      {"HK_LAUNCHER_PID", 0},
      {"HK_", 0},
      {"HK_a", 0},
      {"PATH", 0},
      {"XHK_RANK", 0},
      {"HK_RANKS", 1}, /* only exact names are per-process */
      /* Horovod's, which hk reads where its own are unset */
      {"HOROVOD_FUSION_THRESHOLD", 1},
      {"HOROVOD_", 0},
      {"HOROVOD_x", 0},
      {"XHOROVOD_TIMELINE", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (hk_mpirun_forwarded(cases[i].name, strlen(cases[i].name)) !=
        cases[i].forwarded)
      fail_msg("%s: expected %d", cases[i].name, cases[i].forwarded);
}

static void test_wanted(void **state) {
  (void)state;
  static const struct {
    int mpi;
    const char *hosts; /* NULL: no -H */
    const char *me;
    int wanted;
  } cases[] = {
      {0, NULL, "box", 0},
      {1, NULL, "box", 1},
      {0, "localhost:4", "box", 0},
      {0, "127.0.0.1:4", "box", 0},
      {0, "box:4", "box", 0},
      {0, "box:4", "box.example.com", 0}, /* the first label */
      {0, "box.example.com:4", "box.example.com", 0},
      {0, "boxer:4", "box", 1},
      {0, "other:4", "box", 1},
      {0, "localhost:2,box:2", "box", 1}, /* two hosts */
      {1, "localhost:4", "box", 1},
      {0, "other:4", "", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hk_hostlist h = {0};
    if (cases[i].hosts)
      assert_int_equal(hk_hosts_parse_list(cases[i].hosts, "-H", &h), HK_OK);
    int got =
        hk_mpirun_wanted(cases[i].mpi, cases[i].hosts ? &h : NULL, cases[i].me);
    if (got != cases[i].wanted)
      fail_msg("case %zu (%s on %s): got %d", i, cases[i].hosts, cases[i].me,
               got);
    hk_hosts_free(&h);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_split_errors),
      cmocka_unit_test(test_format_round_trip),
      cmocka_unit_test(test_build),
      cmocka_unit_test(test_build_rsh_args),
      cmocka_unit_test(test_rsh_args_join),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_forwarded),
      cmocka_unit_test(test_wanted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
