/*
 * args.h - hkrun's command line, parsed by one pure function.
 *
 *   hkrun -np N [options] [--] program [args...]
 *
 * Options end at `--` or at the first token that does not start with '-'
 * (that token is the program; everything after it belongs to the program).
 * Long options taking a value accept both `--opt VALUE` and `--opt=VALUE`.
 *
 * Several hosts: `-H host:slots,...` or `--hostfile FILE` name the hosts
 * (launcher/hosts.h parses them; this parser only keeps the strings), and
 * -np may then be left out (it defaults to the slot total). With more
 * than one host, or --mpi, hkrun hands the job to Open MPI's mpirun
 * (launcher/delegate.h); --mpi-args and --bind-to apply to that path only.
 */
#ifndef HK_LAUNCHER_ARGS_H
#define HK_LAUNCHER_ARGS_H

#include <stddef.h>

/** Largest -np hkrun accepts (the wire format's rank limit). */
#define HKRUN_MAX_NP 65536
/** Largest --grace-period accepted, in seconds. */
#define HKRUN_MAX_GRACE_S 86400.0
/** Default --grace-period, in seconds. */
#define HKRUN_DEFAULT_GRACE_S 2.0
/** Capacity callers should give the error buffer, in bytes incl. NUL. */
#define HKRUN_ARGS_ERR_CAP 512

/** What the command line asks hkrun to do. */
typedef enum hkrun_action {
  HKRUN_RUN = 0,      /* start the job described by the other fields */
  HKRUN_HELP = 1,     /* -h/--help: print the usage text, exit 0 */
  HKRUN_VERSION = 2,  /* --version: print the version, exit 0 */
  HKRUN_TOPOLOGY = 3, /* --topology [FILE]: run hktopo on FILE, exit */
} hkrun_action;

typedef struct hkrun_args {
  hkrun_action action;
  int np;         /* number of workers, 1..HKRUN_MAX_NP; 0 when not given with
                     -H/--hostfile (then: the slot total) */
  int tag_output; /* 1 (default): prefix worker lines with "[rank] " */
  int verbose;    /* 1: report rendezvous address and pids */
  double grace_period_s; /* seconds from a failure to SIGTERM, >= 0 */
  /* Several hosts (strings point into argv; NULL when not given): */
  const char *hosts;             /* -H/--host: "host:slots,..." */
  const char *hostfile;          /* --hostfile/-hostfile: a file name */
  int mpi;                       /* --mpi: start through mpirun anyway */
  const char *network_interface; /* --network-interface: IF name or CIDR */
  const char *mpi_args;          /* --mpi-args: extra mpirun arguments */
  const char *bind_to;           /* --bind-to: mpirun's policy, "none" */
  /* Tunables as flags: each sets its HK_* variable for the workers
   * (hkrun_tunable_env). Checked here to be plain non-negative numbers
   * (the timeline's a non-empty path); the runtime checks ranges. */
  const char *fusion_threshold_mb; /* --fusion-threshold-mb -> HK_FUSION_
                                      THRESHOLD (x 1048576 bytes) */
  const char *cycle_time_ms;       /* --cycle-time-ms -> HK_CYCLE_TIME_MS */
  const char *cache_capacity;      /* --cache-capacity -> HK_CACHE_CAPACITY */
  const char *timeline;            /* --timeline-filename -> HK_TIMELINE */
  const char *topology; /* --topology FILE (may be NULL: HK_TOPO_FILE) */
  /* The program and its arguments: prog_argc entries followed by the NULL
   * that ends the caller's argv. Points into argv; not owned. */
  int prog_argc;
  char **prog_argv;
} hkrun_args;

/**
 * Parses argv[1..argc-1] (argv[argc] must be NULL, as main() gets it) into
 * *out. On success returns 0; for HKRUN_RUN np and prog_argv are set.
 * On a bad command line returns -1 and writes one line (no trailing
 * newline) into err[err_cap] that names the offending token, e.g.
 * "-np: 'abc' is not a positive integer"; *out is then unspecified.
 * Pure: no I/O, no allocation, no globals. Thread-safety: reentrant.
 */
int hkrun_args_parse(int argc, char **argv, hkrun_args *out, char *err,
                     size_t err_cap);

/**
 * The HK_* assignments the tunable flags ask for, as "NAME=value" strings
 * written into buf (cap bytes, one after another, NUL-separated); *count
 * receives how many. Returns 0, or -1 if buf is too small.
 */
int hkrun_tunable_env(const hkrun_args *a, char *buf, size_t cap,
                      const char **vars, int max_vars, int *count);

/** The usage text printed by --help (static storage, ends in newline). */
const char *hkrun_usage(void);

/** The one-line hint printed after an error (static, ends in newline). */
const char *hkrun_usage_hint(void);

#endif
