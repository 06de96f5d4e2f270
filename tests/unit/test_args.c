/*
 * test_args.c - hkrun's command-line parser, table-driven.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/strdist.h"
#include "launcher/args.h"

#define MAX_TOKENS 24

/* Parses {"hkrun", tokens..., NULL}; argv has room for MAX_TOKENS + 2. */
static int parse(const char *const *tokens, hkrun_args *out, char *err,
                 size_t cap, char **argv) {
  int argc = 0;
  argv[argc++] = "hkrun";
  for (int i = 0; tokens[i]; i++) {
    assert_true(i < MAX_TOKENS); /* a case longer than argv holds */
    argv[argc++] = (char *)tokens[i];
  }
  argv[argc] = NULL;
  return hkrun_args_parse(argc, argv, out, err, cap);
}

/* ---- accepted command lines ---- */

typedef struct good_case {
  const char *tokens[MAX_TOKENS];
  hkrun_action action;
  int np, tag_output, verbose;
  double grace;
  int prog_argc;
  const char *prog;      /* prog_argv[0] */
  const char *last_prog; /* prog_argv[prog_argc-1] */
} good_case;

static const good_case good[] = {
    {{"-np", "4", "prog", NULL}, HKRUN_RUN, 4, 1, 0, 2.0, 1, "prog", "prog"},
    {{"-n", "2", "--", "prog", "-np", "9", NULL},
     HKRUN_RUN,
     2,
     1,
     0,
     2.0,
     3,
     "prog",
     "9"},
    /* options after the program belong to the program */
    {{"--np", "3", "prog", "--no-tag-output", NULL},
     HKRUN_RUN,
     3,
     1,
     0,
     2.0,
     2,
     "prog",
     "--no-tag-output"},
    {{"--np=5", "--no-tag-output", "-v", "prog", NULL},
     HKRUN_RUN,
     5,
     0,
     1,
     2.0,
     1,
     "prog",
     "prog"},
    {{"--verbose", "-np", "1", "sh", "-c", "echo hi", NULL},
     HKRUN_RUN,
     1,
     1,
     1,
     2.0,
     3,
     "sh",
     "echo hi"},
    {{"--grace-period", "0.5", "-np", "1", "prog", NULL},
     HKRUN_RUN,
     1,
     1,
     0,
     0.5,
     1,
     "prog",
     "prog"},
    {{"--grace-period=0", "-np", "1", "prog", NULL},
     HKRUN_RUN,
     1,
     1,
     0,
     0.0,
     1,
     "prog",
     "prog"},
    {{"-np", "1", "--no-tag-output", "--tag-output", "prog", NULL},
     HKRUN_RUN,
     1,
     1,
     0,
     2.0,
     1,
     "prog",
     "prog"},
    {{"-np", "65536", "prog", NULL},
     HKRUN_RUN,
     65536,
     1,
     0,
     2.0,
     1,
     "prog",
     "prog"},
    {{"-np", "2", "-np", "7", "prog", NULL}, /* the last one wins */
     HKRUN_RUN,
     7,
     1,
     0,
     2.0,
     1,
     "prog",
     "prog"},
    {{"-np", "1", "-", NULL}, HKRUN_RUN, 1, 1, 0, 2.0, 1, "-", "-"},
    {{"-np", "1", "--", "--weird-name", NULL},
     HKRUN_RUN,
     1,
     1,
     0,
     2.0,
     1,
     "--weird-name",
     "--weird-name"},
    {{"-h", NULL}, HKRUN_HELP, 0, 1, 0, 2.0, 0, NULL, NULL},
    {{"--help", "-np", "abc", NULL}, HKRUN_HELP, 0, 1, 0, 2.0, 0, NULL, NULL},
    {{"--version", NULL}, HKRUN_VERSION, 0, 1, 0, 2.0, 0, NULL, NULL},
};

static void test_accepted(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    const good_case *c = &good[i];
    char *argv[MAX_TOKENS + 2];
    char err[HKRUN_ARGS_ERR_CAP];
    hkrun_args a;
    int rc = parse(c->tokens, &a, err, sizeof err, argv);
    if (rc != 0)
      fail_msg("case %zu rejected: %s", i, err);
    assert_int_equal(a.action, c->action);
    assert_string_equal(err, "");
    if (c->action != HKRUN_RUN)
      continue;
    assert_int_equal(a.np, c->np);
    assert_int_equal(a.tag_output, c->tag_output);
    assert_int_equal(a.verbose, c->verbose);
    assert_true(a.grace_period_s == c->grace);
    assert_int_equal(a.prog_argc, c->prog_argc);
    assert_string_equal(a.prog_argv[0], c->prog);
    assert_string_equal(a.prog_argv[a.prog_argc - 1], c->last_prog);
    assert_null(a.prog_argv[a.prog_argc]); /* NULL-terminated for exec */
  }
}

/* ---- rejected command lines: one message naming the bad token ---- */

typedef struct bad_case {
  const char *tokens[MAX_TOKENS];
  const char *error;
} bad_case;

static const bad_case bad[] = {
    {{"-np", "abc", "p", NULL}, "-np: 'abc' is not a positive integer"},
    {{"-np", "-1", "p", NULL}, "-np: '-1' is not a positive integer"},
    {{"-np", "3x", "p", NULL}, "-np: '3x' is not a positive integer"},
    {{"-np", " 3", "p", NULL}, "-np: ' 3' is not a positive integer"},
    {{"-n", "", "p", NULL}, "-n: '' is not a positive integer"},
    {{"--np=", "p", NULL}, "--np: '' is not a positive integer"},
    {{"-np", "65537", "p", NULL}, "-np: '65537' is too large (at most 65536)"},
    {{"-np", "1", "--hierarchical-allreduce=1", "p", NULL},
     "--hierarchical-allreduce: takes no value (in "
     "'--hierarchical-allreduce=1')"},
    {{"-np", "99999999999999999999999", "p", NULL},
     "-np: '99999999999999999999999' is too large (at most 65536)"},
    {{"-np", NULL}, "-np: missing value"},
    {{"-v", "--grace-period", NULL}, "--grace-period: missing value"},
    {{"--frobnicate", "-np", "2", "p", NULL}, "unknown option '--frobnicate'"},
    {{"-x", "p", NULL}, "no program given"},
    {{"-np", "1", "-x", "1A=2", "p", NULL},
     "-x: '1A=2' is not NAME or NAME=value (NAME: letters, digits and '_', "
     "not starting with a digit)"},
    {{"-np", "1", "-x", "=v", "p", NULL},
     "-x: '=v' is not NAME or NAME=value (NAME: letters, digits and '_', "
     "not starting with a digit)"},
    {{"-np", "1", "-x", "HK_RANK=3", "p", NULL},
     "-x: hkrun sets HK_RANK for each worker itself; it cannot be given"},
    {{"-np=2", "p", NULL}, "unknown option '-np=2' (did you mean -np?)"},
    {{"-np", "1", "--fusion-treshold-mb", "4", "p", NULL},
     "unknown option '--fusion-treshold-mb' (did you mean "
     "--fusion-threshold-mb?)"},
    {{"-np", "1", "--hierachical-allreduce", "p", NULL},
     "unknown option '--hierachical-allreduce' (did you mean "
     "--hierarchical-allreduce?)"},
    {{"-np", "1", "--timline-filename=t.json", "p", NULL},
     "unknown option '--timline-filename=t.json' (did you mean "
     "--timeline-filename?)"},
    {{"-np", "1", "--autotune-log-file", "f", "p", NULL},
     "--autotune-log-file needs --autotune"},
    {{"-np", "1", "--autotune-save", "f", "p", NULL},
     "--autotune-save needs --autotune"},
    {{"-np", "1", "--autotune", "--autotune-steps-per-sample", "0", "p", NULL},
     "--autotune-steps-per-sample: '0' is not a whole number from 1 to "
     "10000"},
    {{"-np", "1", "--autotune", "--autotune-warmup-samples=-1", "p", NULL},
     "--autotune-warmup-samples: '-1' is not a whole number from 0 to 1000"},
    {{"-np", "1", "--autotune", "--autotune-bayes-opt-max-samples", "65", "p",
      NULL},
     "--autotune-bayes-opt-max-samples: '65' is not a whole number from 1 to "
     "64"},
    {{"-np", "1", "--autotune", "--autotune-bayes-opt-max-samples", "2x", "p",
      NULL},
     "--autotune-bayes-opt-max-samples: '2x' is not a whole number from 1 to "
     "64"},
    {{"-np", "1", "--autotune", "--autotune-log-file", "t", "--autotune-save",
      "t", "p", NULL},
     "--autotune-log-file and --autotune-save name the same file 't' (the CSV "
     "and the saved settings would overwrite each other)"},
    {{"-np", "1", "--autotune", "--no-autotune", "--autotune-save", "t", "p",
      NULL},
     "--autotune-save needs --autotune"},
    {{"-np", "1", "--autotune", "--autotune-log-file=", "p", NULL},
     "--autotune-log-file: empty value"},
    {{"-np", "1", "--autotune", "--autotune-gaussian-process-noise", "0.8", "p",
      NULL},
     "--autotune-gaussian-process-noise: hk's autotuner has no Gaussian "
     "process to tell noise from gain: it measures the noise, repeating each "
     "setting until its score's uncertainty (from the samples' median "
     "absolute deviation) is under HK_AUTOTUNE_SPREAD (default 0.02) and "
     "keeping a setting only if it is faster by more than twice the "
     "combined uncertainty; drop the flag (-x HK_AUTOTUNE_SPREAD=... changes "
     "the bound)"},
    {{"-np", "1", "--autotune-compression", "p", NULL},
     "--autotune-compression needs --autotune"},
    {{"-np", "1", "--log-level", "LOUD", "p", NULL},
     "--log-level: 'LOUD' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, "
     "FATAL"},
    {{"-np", "1", "--start-timeout", "0", "p", NULL},
     "--start-timeout: '0' must be more than 0 seconds"},
    {{"-np", "1", "--start-timeout", "-5", "p", NULL},
     "--start-timeout: '-5' is not a number of seconds"},
    {{"-np", "1", "--stall-check-warning-time-seconds", "x", "p", NULL},
     "--stall-check-warning-time-seconds: 'x' is not a number of seconds"},
    {{"-np", "1", "-p", "0", "p", NULL}, "-p: '0' is not a positive integer"},
    {{"-np", "1", "--ssh-port", "70000", "p", NULL},
     "--ssh-port: '70000' is too large (at most 65535)"},
    {{"-np", "1", "--network-interfaces", "eth0,eth1", "p", NULL},
     "--network-interfaces: 'eth0,eth1': hk listens on one interface; give "
     "one name, or a CIDR subnet (10.0.0.0/16) that covers the hosts' "
     "addresses"},
    {{"-np", "1", "--output-filename=", "p", NULL},
     "--output-filename: empty value"},
    {{"--frob=1", "p", NULL}, "unknown option '--frob=1'"},
    {{"-np", "2", NULL}, "no program given"},
    {{"-np", "2", "--", NULL}, "no program given"},
    {{NULL}, "no program given"},
    {{"prog", NULL}, "-np N is required"},
    {{"--grace-period", "-1", "-np", "1", "p", NULL},
     "--grace-period: '-1' is not a number of seconds"},
    {{"--grace-period", "inf", "-np", "1", "p", NULL},
     "--grace-period: 'inf' is not a number of seconds"},
    {{"--grace-period", "1e3", "-np", "1", "p", NULL},
     "--grace-period: '1e3' is not a number of seconds"},
    {{"--grace-period", "1.2.3", "-np", "1", "p", NULL},
     "--grace-period: '1.2.3' is not a number of seconds"},
    {{"--grace-period", ".", "-np", "1", "p", NULL},
     "--grace-period: '.' is not a number of seconds"},
    {{"--grace-period", "86401", "-np", "1", "p", NULL},
     "--grace-period: '86401' is too large (at most 86400 seconds)"},
    {{"--verbose=1", "-np", "1", "p", NULL},
     "--verbose: takes no value (in '--verbose=1')"},
    /* elastic jobs */
    {{"-np", "4", "--min-np", "5", "p", NULL},
     "--min-np 5 is more than -np 4 (the workers to start)"},
    {{"-np", "4", "--max-np", "3", "--min-np", "2", "p", NULL},
     "--max-np 3 is less than -np 4 (the workers to start)"},
    {{"-np", "2", "--elastic-timeout", "5", "p", NULL},
     "--elastic-timeout is for elastic jobs: give --min-np (or --max-np, "
     "--host-discovery-script) too"},
    {{"-np", "2", "--blacklist-cooldown-range", "1", "2", "p", NULL},
     "--blacklist-cooldown-range is for elastic jobs: give --min-np (or "
     "--max-np, --host-discovery-script) too"},
    {{"--min-np", "2", "-H", "a:2,b:2", "p", NULL},
     "an elastic job (--min-np, --max-np, --host-discovery-script) runs on "
     "this host only: hkrun cannot start one across hosts (-H); run one "
     "hkrun agent per host with --rdzv-endpoint instead"},
    /* agents (--rdzv-endpoint) */
    {{"--rdzv-endpoint", "10.0.0.1", "-np", "2", "--max-np", "4", "p", NULL},
     "--rdzv-endpoint: '10.0.0.1' is not HOST:PORT (the rendezvous agent's "
     "address and a port 1..65535)"},
    {{"--rdzv-endpoint", "h:70000", "-np", "2", "--max-np", "4", "p", NULL},
     "--rdzv-endpoint: 'h:70000' is not HOST:PORT (the rendezvous agent's "
     "address and a port 1..65535)"},
    {{"--rdzv-endpoint", "h:29400", "-np", "2", "p", NULL},
     "--rdzv-endpoint: --max-np N is required (the job's workers over every "
     "agent; it starts when N have joined)"},
    {{"--rdzv-endpoint", "h:29400", "-np", "2", "--max-np", "4", "-H", "a:2",
      "p", NULL},
     "--rdzv-endpoint runs one hkrun agent per host, each starting its own "
     "host's workers: -H (a job hkrun starts through mpirun) cannot be "
     "given with it"},
    {{"-np", "0", "p", NULL},
     "-np: '0' is not a positive integer (-np 0 is for an agent without "
     "workers: --rdzv-endpoint)"},
    {{"--min-np", "2", "--blacklist-cooldown-range", "10", "5", "p", NULL},
     "--blacklist-cooldown-range: the least (10 s) is more than the most "
     "(5 s)"},
    {{"--min-np", "2", "--blacklist-cooldown-range=10", "p", NULL},
     "--blacklist-cooldown-range: takes two values, the least and the most "
     "seconds (--blacklist-cooldown-range 10 100)"},
    {{"--min-np", "2", "--elastic-timeout", "0", "p", NULL},
     "--elastic-timeout: '0' must be more than 0 seconds"},
    {{"--min-np", "0", "p", NULL}, "--min-np: '0' is not a positive integer"},
    {{"--max-np", "2", "--host-discovery-script", "", "p", NULL},
     "--host-discovery-script: empty value"},
    {{"--min-np", "2", "--agent-launcher", "ssh", "p", NULL},
     "--agent-launcher starts agents of a job over several hosts: give "
     "--rdzv-endpoint HOST:PORT and a --host-discovery-script too"},
    {{"--rdzv-endpoint", "h:29400", "-np", "2", "--max-np", "4",
      "--agent-launcher", "ssh", "p", NULL},
     "--agent-launcher starts agents on the hosts a --host-discovery-script "
     "lists: give one"},
    {{"--rdzv-endpoint", "h:29400", "-np", "2", "--max-np", "4",
      "--agent-launcher", "", "--host-discovery-script", "d.sh", "p", NULL},
     "--agent-launcher: empty value"},
};

static void test_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[MAX_TOKENS + 2];
    char err[HKRUN_ARGS_ERR_CAP];
    hkrun_args a;
    int rc = parse(bad[i].tokens, &a, err, sizeof err, argv);
    if (rc != -1)
      fail_msg("case %zu ('%s') was accepted", i, bad[i].error);
    assert_string_equal(err, bad[i].error);
  }
}

/* An over-long option is reported whole, not cut at an internal limit. */
static void test_long_unknown_option(void **state) {
  (void)state;
  char opt[200];
  memset(opt, 'z', sizeof opt - 1);
  opt[0] = opt[1] = '-';
  opt[sizeof opt - 1] = '\0';
  const char *tokens[] = {opt, "p", NULL};
  char *argv[4];
  char err[HKRUN_ARGS_ERR_CAP], expect[HKRUN_ARGS_ERR_CAP];
  hkrun_args a;
  assert_int_equal(parse(tokens, &a, err, sizeof err, argv), -1);
  snprintf(expect, sizeof expect, "unknown option '%s'", opt);
  assert_string_equal(err, expect);
}

/* A small error buffer gets a truncated, NUL-terminated message. */
static void test_small_error_buffer(void **state) {
  (void)state;
  const char *tokens[] = {"-np", "abc", "p", NULL};
  char *argv[5];
  char err[9];
  memset(err, 'Q', sizeof err);
  hkrun_args a;
  assert_int_equal(parse(tokens, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "-np: 'ab");
  /* and none at all is allowed */
  assert_int_equal(parse(tokens, &a, NULL, 0, argv), -1);
}

/* Tunable flags become HK_* assignments for the workers; --topology
 * takes an optional file and needs no program. */
static void test_tunable_flags(void **state) {
  (void)state;
  const char *tok[] = {"-np",
                       "2",
                       "--fusion-threshold-mb",
                       "0.5",
                       "--cycle-time-ms=3",
                       "--cache-capacity",
                       "0",
                       "--timeline-filename",
                       "/tmp/t.json",
                       "prog",
                       NULL};
  hkrun_args a;
  char *argv[MAX_TOKENS + 2];
  char err[HKRUN_ARGS_ERR_CAP];
  assert_int_equal(parse(tok, &a, err, sizeof err, argv), 0);
  char buf[512];
  const char *vars[8];
  int n;
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 8, &n), 0);
  assert_int_equal(n, 4);
  assert_string_equal(vars[0], "HK_FUSION_THRESHOLD=524288");
  assert_string_equal(vars[1], "HK_CYCLE_TIME_MS=3");
  assert_string_equal(vars[2], "HK_CACHE_CAPACITY=0");
  assert_string_equal(vars[3], "HK_TIMELINE=/tmp/t.json");
  const char *bad[] = {"-np", "2", "--cycle-time-ms", "-1", "p", NULL};
  assert_int_equal(parse(bad, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "--cycle-time-ms: '-1' is not a non-negative "
                           "number");
  const char *topo[] = {"--topology", "configs/t4.xml", NULL};
  assert_int_equal(parse(topo, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.action, HKRUN_TOPOLOGY);
  assert_string_equal(a.topology, "configs/t4.xml");
  const char *topo0[] = {"--topology", NULL};
  assert_int_equal(parse(topo0, &a, err, sizeof err, argv), 0);
  assert_null(a.topology);
  /* --plan: everything after it is hkplan's (argv[0] is "hkrun") */
  const char *plan[] = {"--plan", "--model", "resnet50", "-np", NULL};
  assert_int_equal(parse(plan, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.action, HKRUN_PLAN);
  assert_string_equal(argv[a.plan_argi], "--model");
  assert_string_equal(argv[a.plan_argi + 2], "-np");
  /* the flight recorder's commands (launcher/dump.h, diagnose.h) */
  const char *dump[] = {"--dump", "4242", NULL};
  assert_int_equal(parse(dump, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.action, HKRUN_DUMP);
  assert_int_equal(a.dump_pid, 4242);
  const char *dump_bad[] = {"--dump", "hkrun", NULL};
  assert_int_equal(parse(dump_bad, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "--dump: 'hkrun' is not a positive integer");
  const char *dump_none[] = {"--dump", NULL};
  assert_int_equal(parse(dump_none, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "--dump: missing value");
  const char *dump_two[] = {"--dump", "4242", "4243", NULL};
  assert_int_equal(parse(dump_two, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "--dump takes one pid; '4243' is one too many");
  const char *diag_two[] = {"--diagnose", "a", "b", NULL};
  assert_int_equal(parse(diag_two, &a, err, sizeof err, argv), -1);
  assert_string_equal(err, "--diagnose takes one folder; 'b' is one too many");
  const char *diag[] = {"--diagnose=records", NULL};
  assert_int_equal(parse(diag, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.action, HKRUN_DIAGNOSE);
  assert_string_equal(a.diagnose_dir, "records");
}

/* --autotune and its flags become HK_AUTOTUNE_* for the workers;
 * --autotune-load is hkrun's own (no variable). */
static void test_autotune_flags(void **state) {
  (void)state;
  const char *tok[] = {"-np",
                       "2",
                       "--autotune",
                       "--autotune-log-file",
                       "/tmp/l.csv",
                       "--autotune-save=/tmp/s.env",
                       "--autotune-load",
                       "/tmp/old.env",
                       "--autotune-warmup-samples",
                       "0",
                       "--autotune-steps-per-sample",
                       "7",
                       "--autotune-bayes-opt-max-samples",
                       "64",
                       "--autotune-compression",
                       "prog",
                       NULL};
  hkrun_args a;
  char *argv[MAX_TOKENS + 2];
  char err[HKRUN_ARGS_ERR_CAP];
  assert_int_equal(parse(tok, &a, err, sizeof err, argv), 0);
  assert_string_equal(a.autotune_load, "/tmp/old.env");
  char buf[1024];
  const char *vars[16];
  int n;
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  assert_int_equal(n, 7);
  assert_string_equal(vars[0], "HK_AUTOTUNE=1");
  assert_string_equal(vars[1], "HK_AUTOTUNE_LOG=/tmp/l.csv");
  assert_string_equal(vars[2], "HK_AUTOTUNE_SAVE=/tmp/s.env");
  assert_string_equal(vars[3], "HK_AUTOTUNE_WARMUP_STEPS=0");
  assert_string_equal(vars[4], "HK_AUTOTUNE_STEPS_PER_SAMPLE=7");
  assert_string_equal(vars[5], "HK_AUTOTUNE_MAX_TRIALS=64");
  assert_string_equal(vars[6], "HK_AUTOTUNE_COMPRESSION=1");
  /* the last of --autotune and --no-autotune wins */
  const char *off[] = {"-np", "2", "--autotune", "--no-autotune", "prog", NULL};
  assert_int_equal(parse(off, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.autotune, 0);
  const char *on[] = {"-np", "2", "--no-autotune", "--autotune", "prog", NULL};
  assert_int_equal(parse(on, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.autotune, 1);
  const char *load[] = {"-np", "2", "--autotune-load", "f", "prog", NULL};
  assert_int_equal(parse(load, &a, err, sizeof err, argv), 0);
  assert_int_equal(a.autotune, 0);
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  assert_int_equal(n, 0);
}

/* Horovod's and mpirun's flags: what each asks for, as HK_* assignments
 * and fields; refusals name what to use instead. */
static void test_horovodrun_flags(void **state) {
  (void)state;
  const char *tok[] = {"-np",
                       "2",
                       "-x",
                       "FOO=bar",
                       "-x",
                       "PATH",
                       "--start-timeout",
                       "30",
                       "--log-level",
                       "TRACE",
                       "--hierarchical-allreduce",
                       "--timeline-mark-cycles",
                       "--stall-check-warning-time-seconds",
                       "5",
                       "--stall-check-shutdown-time-seconds=9",
                       "--gloo-timeout-seconds",
                       "7",
                       "--disable-cache",
                       "-p",
                       "2222",
                       "-i",
                       "/k",
                       "--output-filename",
                       "/tmp/out",
                       "--tcp",
                       "--bind-to",
                       "socket",
                       "--hosts=localhost:2",
                       "--no-autotune",
                       "--log-without-timestamp",
                       "prog",
                       NULL};
  int argc = 0;
  char *argv[40];
  argv[argc++] = "hkrun";
  for (int i = 0; tok[i]; i++)
    argv[argc++] = (char *)tok[i];
  argv[argc] = NULL;
  hkrun_args a;
  char err[HKRUN_ARGS_ERR_CAP];
  assert_int_equal(hkrun_args_parse(argc, argv, &a, err, sizeof err), 0);
  assert_int_equal(a.n_env_x, 2);
  assert_string_equal(a.env_x[0], "FOO=bar");
  assert_string_equal(a.env_x[1], "PATH");
  assert_int_equal(a.disable_cache, 1);
  assert_string_equal(a.ssh_port, "2222");
  assert_string_equal(a.ssh_identity_file, "/k");
  assert_string_equal(a.output_filename, "/tmp/out");
  assert_int_equal(a.bind, HKRUN_BIND_SOCKET);
  assert_string_equal(a.bind_to, "socket");
  assert_string_equal(a.hosts, "localhost:2");
  char buf[1024];
  const char *vars[16];
  int n;
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  const char *want[] = {"HK_TIMELINE_MARK_CYCLES=1",
                        "HK_START_TIMEOUT_S=30",
                        "HK_LOG_LEVEL=debug",
                        "HK_HIERARCHICAL_ALLREDUCE=1",
                        "HK_STALL_CHECK_TIME_S=5",
                        "HK_STALL_SHUTDOWN_TIME_S=9",
                        "HK_TIMEOUT_S=7",
                        "HK_CROSS_TRANSPORT=tcp"};
  assert_int_equal(n, (int)(sizeof want / sizeof want[0]));
  for (int i = 0; i < n; i++)
    assert_string_equal(vars[i], want[i]);
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 3, &n), -1);

  /* the "no" forms, and --no-stall-check over the times */
  const char *no[] = {"-np",
                      "1",
                      "--no-hierarchical-allreduce",
                      "--no-timeline-mark-cycles",
                      "--stall-check-warning-time-seconds",
                      "5",
                      "--no-stall-check",
                      "--log-level=fatal",
                      "--monitor",
                      "p",
                      NULL};
  argc = 0;
  argv[argc++] = "hkrun";
  for (int i = 0; no[i]; i++)
    argv[argc++] = (char *)no[i];
  argv[argc] = NULL;
  assert_int_equal(hkrun_args_parse(argc, argv, &a, err, sizeof err), 0);
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  const char *want_no[] = {
      "HK_TIMELINE_MARK_CYCLES=0",   "HK_LOG_LEVEL=error",
      "HK_HIERARCHICAL_ALLREDUCE=0", "HK_STALL_CHECK_TIME_S=0",
      "HK_STALL_SHUTDOWN_TIME_S=0",  "HK_MONITOR_LIVE=1"};
  assert_int_equal(a.monitor, 1);
  assert_int_equal(n, (int)(sizeof want_no / sizeof want_no[0]));
  for (int i = 0; i < n; i++)
    assert_string_equal(vars[i], want_no[i]);

  /* --check-build needs no -np (as horovodrun's) */
  const char *cb[] = {"hkrun", "-cb", NULL};
  assert_int_equal(hkrun_args_parse(2, (char **)cb, &a, err, sizeof err), 0);
  assert_int_equal(a.action, HKRUN_CHECK_BUILD);
  const char *cb2[] = {"hkrun", "--check-build", NULL};
  assert_int_equal(hkrun_args_parse(2, (char **)cb2, &a, err, sizeof err), 0);
  assert_int_equal(a.action, HKRUN_CHECK_BUILD);

  /* every refused horovodrun flag says "hk" and gives no bare "unknown" */
  const char *refused[] = {"--gloo",
                           "--jsrun",
                           "--config-file",
                           "--mpi-threads-disable",
                           "--hierarchical-allgather",
                           "--num-nccl-streams",
                           "--thread-affinity",
                           "--prefix-output-with-timestamp",
                           "--binding-args",
                           "--map-by"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const char *r[] = {"hkrun", "-np", "1", refused[i], "x", "prog", NULL};
    assert_int_equal(hkrun_args_parse(6, (char **)r, &a, err, sizeof err), -1);
    if (strncmp(err, refused[i], strlen(refused[i])) != 0 ||
        strstr(err, "unknown") || !strstr(err, "hk"))
      fail_msg("%s: %s", refused[i], err);
  }
}

/* The elastic flags: what they set, what they imply, and the workers'
 * variables. */
static void test_elastic_flags(void **state) {
  (void)state;
  hkrun_args a;
  char err[HKRUN_ARGS_ERR_CAP];
  const char *full[] = {"hkrun",      "--min-np",
                        "2",          "--max-np",
                        "6",          "--host-discovery-script",
                        "./hosts.sh", "--slots-per-host",
                        "4",          "--elastic-timeout",
                        "30",         "--reset-limit",
                        "3",          "--blacklist-cooldown-range",
                        "10",         "100",
                        "prog",       NULL};
  assert_int_equal(hkrun_args_parse(17, (char **)full, &a, err, sizeof err), 0);
  assert_int_equal(a.elastic, 1);
  assert_int_equal(a.np, 2); /* -np defaults to --min-np */
  assert_int_equal(a.min_np, 2);
  assert_int_equal(a.max_np, 6);
  assert_string_equal(a.discovery_script, "./hosts.sh");
  assert_int_equal(a.slots_per_host, 4);
  assert_true(a.elastic_timeout_s == 30.0);
  assert_int_equal(a.reset_limit, 3);
  assert_true(a.cooldown_lo_s == 10.0 && a.cooldown_hi_s == 100.0);
  assert_string_equal(a.prog_argv[0], "prog");
  char buf[1024];
  const char *vars[16];
  int n;
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(vars[0], "HK_ELASTIC=1");
  assert_string_equal(vars[1], "HK_ELASTIC_TIMEOUT_S=30");

  /* a discovery script alone is elastic; -np then given; --max-np = np */
  const char *disc[] = {"hkrun", "-np",  "3", "--host-discovery-script",
                        "d.sh",  "prog", NULL};
  assert_int_equal(hkrun_args_parse(6, (char **)disc, &a, err, sizeof err), 0);
  assert_int_equal(a.elastic, 1);
  assert_int_equal(a.np, 3);
  assert_int_equal(a.min_np, 1);
  assert_int_equal(a.max_np, 3);
  assert_true(a.elastic_timeout_s == 600.0);
  assert_int_equal(hkrun_tunable_env(&a, buf, sizeof buf, vars, 16, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(vars[0], "HK_ELASTIC=1");

  /* no elastic flag: not elastic */
  const char *plain[] = {"hkrun", "-np", "2", "prog", NULL};
  assert_int_equal(hkrun_args_parse(4, (char **)plain, &a, err, sizeof err), 0);
  assert_int_equal(a.elastic, 0);
}

static void test_edit_distance(void **state) {
  (void)state;
  assert_int_equal(hk_edit_distance("", ""), 0);
  assert_int_equal(hk_edit_distance("abc", "abc"), 0);
  assert_int_equal(hk_edit_distance("abc", "acb"), 1); /* a swap */
  assert_int_equal(hk_edit_distance("kitten", "sitting"), 3);
  assert_int_equal(hk_edit_distance("--np", ""), 4);
  char longer[100];
  memset(longer, 'a', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  assert_int_equal(hk_edit_distance(longer, "a"), 64);
}

static void test_usage_texts(void **state) {
  (void)state;
  const char *u = hkrun_usage();
  assert_non_null(strstr(u, "usage: hkrun -np N"));
  const char *opts[] = {"-np N",
                        "--tag-output",
                        "--no-tag-output",
                        "--grace-period",
                        "--verbose",
                        "--help",
                        "--version",
                        "-x NAME=VALUE",
                        "--start-timeout S",
                        "--output-filename DIR",
                        "--log-level LEVEL",
                        "--disable-cache",
                        "--hierarchical-allreduce",
                        "--timeline-mark-cycles",
                        "--stall-check-warning-time-seconds",
                        "--stall-check-shutdown-time-seconds",
                        "--check-build",
                        "--dump HKRUN_PID",
                        "--diagnose DIR",
                        "-p, --ssh-port",
                        "--bind-to POLICY",
                        "SSH arguments",
                        "tuneable parameter arguments",
                        "timeline arguments",
                        "stall check arguments",
                        "library arguments",
                        "logging arguments",
                        "host arguments",
                        "controller arguments",
                        "--autotune"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    if (!strstr(u, opts[i]))
      fail_msg("usage does not mention %s", opts[i]);
  assert_int_equal(u[strlen(u) - 1], '\n');
  const char *h = hkrun_usage_hint();
  assert_non_null(strstr(h, "hkrun --help"));
  assert_int_equal(h[strlen(h) - 1], '\n');
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepted),
      cmocka_unit_test(test_rejected),
      cmocka_unit_test(test_long_unknown_option),
      cmocka_unit_test(test_small_error_buffer),
      cmocka_unit_test(test_usage_texts),
      cmocka_unit_test(test_tunable_flags),
      cmocka_unit_test(test_autotune_flags),
      cmocka_unit_test(test_horovodrun_flags),
      cmocka_unit_test(test_edit_distance),
      cmocka_unit_test(test_elastic_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
