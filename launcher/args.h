/*
 * args.h - hkrun's command line, parsed by one pure function.
 *
 *   hkrun -np N [options] [--] program [args...]
 *
 * Options end at `--` or at the first token that does not start with '-'
 * (that token is the program; everything after it belongs to the program).
 * Long options taking a value accept both `--opt VALUE` and `--opt=VALUE`.
 *
 * The names are horovodrun's (and mpirun's where horovodrun has none:
 * -x, --bind-to, --tag-output), with their meaning; hkrun_usage() lists
 * them grouped as `horovodrun --help` does and says where hk differs.
 * Flags horovodrun has and hk does not (--gloo,
 * --autotune-gaussian-process-noise...) are refused with a message saying
 * why and what to use instead; an unknown option's message names the
 * closest known one.
 *
 * Several hosts: `-H host:slots,...` or `--hostfile FILE` name the hosts
 * (launcher/hosts.h parses them; this parser only keeps the strings), and
 * -np may then be left out (it defaults to the slot total). With more
 * than one host, or --mpi, hkrun hands the job to Open MPI's mpirun
 * (launcher/delegate.h).
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
/** Default --elastic-timeout, in seconds (Horovod's). */
#define HKRUN_DEFAULT_ELASTIC_TIMEOUT_S 600.0
/** Capacity callers should give the error buffer, in bytes incl. NUL. */
#define HKRUN_ARGS_ERR_CAP 512
/** Most -x options one command line may carry. */
#define HKRUN_MAX_ENV_X 128

/** What the command line asks hkrun to do. */
typedef enum hkrun_action {
  HKRUN_RUN = 0,         /* start the job described by the other fields */
  HKRUN_HELP = 1,        /* -h/--help: print the usage text, exit 0 */
  HKRUN_VERSION = 2,     /* --version: print the version, exit 0 */
  HKRUN_TOPOLOGY = 3,    /* --topology [FILE]: run hktopo on FILE, exit */
  HKRUN_CHECK_BUILD = 4, /* -cb/--check-build: what this hk has, exit 0 */
  HKRUN_DUMP = 5,        /* --dump PID: the job of hkrun (or mpirun) PID
                            writes its flight records (launcher/dump.h) */
  HKRUN_DIAGNOSE = 6,    /* --diagnose DIR: merge the flight records in
                            DIR and name the divergence (diagnose.h) */
  HKRUN_PLAN = 7,        /* --plan ARGS...: run hkplan with ARGS, exit */
} hkrun_action;

/** --bind-to's policies (mpirun's names). */
typedef enum hkrun_bind {
  HKRUN_BIND_NONE = 0, /* the default: no binding */
  HKRUN_BIND_HWTHREAD = 1 /* one hardware thread (CPU) per local rank */,
  HKRUN_BIND_CORE = 2,   /* one core (all its hardware threads) */
  HKRUN_BIND_SOCKET = 3, /* every CPU of the core's socket (package) */
  HKRUN_BIND_NUMA = 4,   /* every CPU of the core's NUMA node */
} hkrun_bind;

typedef struct hkrun_args {
  hkrun_action action;
  int np;         /* number of workers, 1..HKRUN_MAX_NP; 0 when not given with
                     -H/--hostfile (then: the slot total) */
  int tag_output; /* 1 (default): prefix worker lines with "[rank] " */
  int verbose;    /* 1: report rendezvous address and pids */
  double grace_period_s; /* seconds from a failure to SIGTERM, >= 0 */
  /* Several hosts (strings point into argv; NULL when not given): */
  const char *hosts;             /* -H/--host/--hosts: "host:slots,..." */
  const char *hostfile;          /* --hostfile/-hostfile: a file name */
  int mpi;                       /* --mpi: start through mpirun anyway */
  const char *network_interface; /* --network-interface(s): IF or CIDR */
  const char *mpi_args;          /* --mpi-args: extra mpirun arguments */
  const char *bind_to;           /* --bind-to's word ("none" by default) */
  hkrun_bind bind;               /* ... as a policy */
  const char *ssh_port;          /* -p/--ssh-port: 1..65535 (mpirun's ssh) */
  const char *ssh_identity_file; /* -i/--ssh-identity-file */
  int tcp;                       /* --tcp: TCP links only (no MPI links) */
  const char *output_filename;   /* --output-filename DIR: also write each
                                    rank's output to DIR/rank.N/std{out,err} */
  int disable_cache; /* --disable-cache: accepted; hkrun caches no start-up
                        checks between runs (horovodrun does) */
  /* mpirun's -x: "NAME=value" (set NAME for the workers) or "NAME"
   * (forward hkrun's NAME), in command-line order; argv strings */
  const char *env_x[HKRUN_MAX_ENV_X];
  int n_env_x;
  /* Tunables as flags: each sets its HK_* variable for the workers
   * (hkrun_tunable_env). Checked here to be plain non-negative numbers
   * (the timeline's a non-empty path); the runtime checks ranges. */
  const char *fusion_threshold_mb; /* --fusion-threshold-mb -> HK_FUSION_
                                      THRESHOLD (x 1048576 bytes) */
  const char *cycle_time_ms;       /* --cycle-time-ms -> HK_CYCLE_TIME_MS */
  const char *cache_capacity;      /* --cache-capacity -> HK_CACHE_CAPACITY */
  const char *timeline;            /* --timeline-filename -> HK_TIMELINE */
  int timeline_mark_cycles;     /* --timeline-mark-cycles -> HK_TIMELINE_MARK_
                                   CYCLES=1; 0 with --no-...; -1 unset */
  const char *start_timeout;    /* --start-timeout S -> HK_START_TIMEOUT_S */
  const char *log_level;        /* --log-level, as hk's word: "debug", "info",
                                   "warning", "error" (static) -> HK_LOG_LEVEL */
  int hierarchical;             /* --[no-]hierarchical-allreduce -> HK_
                                   HIERARCHICAL_ALLREDUCE 1/0; -1 unset */
  int no_stall_check;           /* --no-stall-check: HK_STALL_CHECK_TIME_S=0 and
                                   HK_STALL_SHUTDOWN_TIME_S=0; -1 unset */
  const char *stall_warning_s;  /* --stall-check-warning-time-seconds */
  const char *stall_shutdown_s; /* --stall-check-shutdown-time-seconds */
  const char *gloo_timeout_s;   /* --gloo-timeout-seconds -> HK_TIMEOUT_S */
  const char *topology;     /* --topology FILE (may be NULL: HK_TOPO_FILE) */
  int plan_argi;            /* --plan: argv[plan_argi..] are hkplan's */
  long dump_pid;            /* --dump PID: a positive process id */
  const char *diagnose_dir; /* --diagnose DIR */
  int monitor;              /* --monitor -> HK_MONITOR_LIVE=1; hkrun shows
                               the table rank 0 sends (launcher/monitor.h) */
  /* Elastic jobs (docs/elastic.md), on this host only: elastic is 1 when
   * --min-np, --max-np or --host-discovery-script is given; then np is
   * the workers started (default: min_np), min_np <= np <= max_np
   * (defaults 1 and np), and -H/--hostfile/--mpi are refused. The other
   * elastic flags without elastic mode are an error. */
  int elastic;
  int min_np, max_np;           /* --min-np/--max-np; 0 when not elastic */
  const char *discovery_script; /* --host-discovery-script FILE (argv) */
  int slots_per_host;           /* --slots-per-host N; 0: not given */
  const char *elastic_timeout;  /* --elastic-timeout S as given, or NULL */
  double elastic_timeout_s;     /* ... in seconds (> 0; default 600) */
  int reset_limit;              /* --reset-limit N; 0: no limit */
  /* Agent mode (--rdzv-endpoint HOST:PORT; launcher/agent.h): one hkrun
   * per host, elastic; np is this host's workers (0 allowed: -np 0 is
   * given as np_zero), max_np is required (the job's workers over every
   * agent), min_np <= max_np. -H/--hostfile/--mpi are refused. */
  const char *rdzv_endpoint;           /* as given, or NULL */
  char rdzv_host[256];                 /* its HOST */
  int rdzv_port;                       /* its PORT, 1..65535 */
  int np_zero;                         /* -np 0 was given */
  double cooldown_lo_s, cooldown_hi_s; /* --blacklist-cooldown-range A B,
                                          seconds; -1 when not given */
  const char *agent_launcher; /* --agent-launcher CMD (argv), or NULL: the
                                 command that starts an agent on a host a
                                 --host-discovery-script lists (the
                                 endpoint's agent; launcher/launch.h) */
  /* The autotuner (worker/tune.h). Numbers are checked here against the
   * ranges of their HK_* variables; the --autotune-* flags that need
   * --autotune are refused without it. */
  int autotune;                /* --autotune -> HK_AUTOTUNE=1 */
  const char *autotune_log;    /* --autotune-log-file -> HK_AUTOTUNE_LOG */
  const char *autotune_save;   /* --autotune-save -> HK_AUTOTUNE_SAVE */
  const char *autotune_load;   /* --autotune-load FILE: hkrun sets what it
                                  holds (launcher/tuned.h) */
  const char *autotune_warmup; /* --autotune-warmup-samples -> HK_AUTOTUNE_
                                  WARMUP_STEPS (0..1000) */
  const char *autotune_steps;  /* --autotune-steps-per-sample -> HK_AUTOTUNE_
                                  STEPS_PER_SAMPLE (1..10000) */
  int autotune_compression;    /* --autotune-compression ->
                                  HK_AUTOTUNE_COMPRESSION=1 */
  const char *autotune_trials; /* --autotune-bayes-opt-max-samples -> HK_
                                  AUTOTUNE_MAX_TRIALS (1..64) */
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
 * "-np: 'abc' is not a positive integer", "unknown option '--fusion-
 * treshold-mb' (did you mean --fusion-threshold-mb?)", or for a flag hk
 * does not have, why and what to use instead; *out is then unspecified.
 * Pure: no I/O, no allocation, no globals. Thread-safety: reentrant.
 */
int hkrun_args_parse(int argc, char **argv, hkrun_args *out, char *err,
                     size_t err_cap);

/**
 * The HK_* assignments the tunable flags ask for, as "NAME=value" strings
 * written into buf (cap bytes, one after another, NUL-separated); *count
 * receives how many (in the order of args.h's fields: fusion threshold,
 * cycle time, cache capacity, timeline, then the rest). -x assignments
 * are not among them (the caller applies those first, so flags win).
 * Returns 0, or -1 if buf or max_vars is too small.
 */
int hkrun_tunable_env(const hkrun_args *a, char *buf, size_t cap,
                      const char **vars, int max_vars, int *count);

/** The usage text printed by --help (static storage, ends in newline). */
const char *hkrun_usage(void);

/** The one-line hint printed after an error (static, ends in newline). */
const char *hkrun_usage_hint(void);

#endif
