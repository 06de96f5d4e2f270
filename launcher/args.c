/*
 * args.c - hkrun's command-line parser (see args.h). Pure: it only reads
 * argv and writes *out and the error buffer.
 */
#include "launcher/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/strdist.h"

static int fail(char *err, size_t err_cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_cap, const char *fmt, ...) {
  if (err && err_cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_cap, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Parses a whole decimal token as an integer in [1, max]. */
static int parse_int(const char *opt, const char *s, long max, long *out,
                     char *err, size_t err_cap) {
  const char *p = s;
  if (*p == '+')
    p++;
  if (*p < '0' || *p > '9')
    return fail(err, err_cap, "%s: '%s' is not a positive integer", opt, s);
  errno = 0;
  char *end;
  long v = strtol(p, &end, 10);
  if (*end != '\0')
    return fail(err, err_cap, "%s: '%s' is not a positive integer", opt, s);
  if (v == 0)
    return fail(err, err_cap, "%s: '%s' is not a positive integer", opt, s);
  if (errno == ERANGE || v > max)
    return fail(err, err_cap, "%s: '%s' is too large (at most %ld)", opt, s,
                max);
  *out = v;
  return 0;
}

/* Parses a whole token as a plain non-negative decimal number (digits
 * and one point: no sign, exponent, "inf" or hex). */
static int plain_number(const char *s, double *out) {
  char *end;
  errno = 0;
  int points = 0;
  for (const char *p = s; *p; p++)
    points += *p == '.';
  int plain =
      *s != '\0' && strspn(s, "0123456789.") == strlen(s) && points <= 1;
  double v = plain ? strtod(s, &end) : 0;
  if (!plain || end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
    return -1;
  *out = v;
  return 0;
}

/* Parses a whole token as seconds in [0, HKRUN_MAX_GRACE_S]. */
static int parse_seconds(const char *opt, const char *s, double *out, char *err,
                         size_t err_cap) {
  double v;
  if (plain_number(s, &v) != 0)
    return fail(err, err_cap, "%s: '%s' is not a number of seconds", opt, s);
  if (v > HKRUN_MAX_GRACE_S)
    return fail(err, err_cap, "%s: '%s' is too large (at most %.0f seconds)",
                opt, s, HKRUN_MAX_GRACE_S);
  *out = v;
  return 0;
}

/* Takes a string value: it must not be empty (a missing value). */
static int parse_string(const char *opt, const char *s, const char **out,
                        char *err, size_t err_cap) {
  if (*s == '\0')
    return fail(err, err_cap, "%s: empty value", opt);
  *out = s;
  return 0;
}

/* Every option hkrun knows, in every spelling. */
typedef enum opt_id {
  /* taking a value */
  O_NP,
  O_GRACE,
  O_HOSTS,
  O_HOSTFILE,
  O_IFACE,
  O_IFACES,
  O_MPI_ARGS,
  O_BIND_TO,
  O_FUSION_MB,
  O_CYCLE_MS,
  O_CACHE,
  O_TIMELINE,
  O_START_TIMEOUT,
  O_OUTPUT_FILENAME,
  O_LOG_LEVEL,
  O_STALL_WARNING,
  O_STALL_SHUTDOWN,
  O_GLOO_TIMEOUT,
  O_SSH_PORT,
  O_SSH_IDENTITY,
  O_ENV_X,
  O_DUMP,
  O_DIAGNOSE,
  O_MIN_NP,
  O_MAX_NP,
  O_DISCOVERY,
  O_SLOTS_PER_HOST,
  O_ELASTIC_TIMEOUT,
  O_RESET_LIMIT,
  O_COOLDOWN, /* takes two values: A B */
  O_RDZV,
  O_AGENT_LAUNCHER,
  O_TUNE_LOG,
  O_TUNE_SAVE,
  O_TUNE_LOAD,
  O_TUNE_WARMUP,
  O_TUNE_STEPS,
  O_TUNE_TRIALS,
  /* flags */
  O_TUNE_COMPRESSION,
  O_TAG_OUTPUT,
  O_NO_TAG_OUTPUT,
  O_VERBOSE,
  O_MPI,
  O_TCP,
  O_DISABLE_CACHE,
  O_HIERARCHICAL,
  O_NO_HIERARCHICAL,
  O_NO_HIER_ALLGATHER,
  O_MARK_CYCLES,
  O_NO_MARK_CYCLES,
  O_NO_STALL_CHECK,
  O_STALL_CHECK,
  O_NO_AUTOTUNE,
  O_LOG_NO_TIMESTAMP,
  O_MONITOR,
  O_AUTOTUNE,
  O_NOOP, /* mpirun flags with nothing to do locally */
  O_TOPOLOGY,
  O_PLAN,
  O_HELP,
  O_VERSION,
  O_CHECK_BUILD,
  O_REFUSED, /* horovodrun's or mpirun's, not hk's: see `why` */
} opt_id;

typedef struct opt_def {
  const char *name;
  opt_id id;
  int takes_value;
  const char *why; /* O_REFUSED: the message after "NAME: " */
} opt_def;

static const opt_def options[] = {
    {"-np", O_NP, 1, NULL},
    {"-n", O_NP, 1, NULL},
    {"--np", O_NP, 1, NULL},
    {"--num-proc", O_NP, 1, NULL},
    {"--grace-period", O_GRACE, 1, NULL},
    {"-H", O_HOSTS, 1, NULL},
    {"--host", O_HOSTS, 1, NULL},
    {"--hosts", O_HOSTS, 1, NULL},
    {"--hostfile", O_HOSTFILE, 1, NULL},
    {"-hostfile", O_HOSTFILE, 1, NULL},
    {"--network-interface", O_IFACE, 1, NULL},
    {"--network-interfaces", O_IFACES, 1, NULL},
    {"--mpi-args", O_MPI_ARGS, 1, NULL},
    {"--bind-to", O_BIND_TO, 1, NULL},
    {"--fusion-threshold-mb", O_FUSION_MB, 1, NULL},
    {"--cycle-time-ms", O_CYCLE_MS, 1, NULL},
    {"--cache-capacity", O_CACHE, 1, NULL},
    {"--timeline-filename", O_TIMELINE, 1, NULL},
    {"--start-timeout", O_START_TIMEOUT, 1, NULL},
    {"--output-filename", O_OUTPUT_FILENAME, 1, NULL},
    {"--log-level", O_LOG_LEVEL, 1, NULL},
    {"--stall-check-warning-time-seconds", O_STALL_WARNING, 1, NULL},
    {"--stall-check-shutdown-time-seconds", O_STALL_SHUTDOWN, 1, NULL},
    {"--gloo-timeout-seconds", O_GLOO_TIMEOUT, 1, NULL},
    {"-p", O_SSH_PORT, 1, NULL},
    {"--ssh-port", O_SSH_PORT, 1, NULL},
    {"-i", O_SSH_IDENTITY, 1, NULL},
    {"--ssh-identity-file", O_SSH_IDENTITY, 1, NULL},
    {"-x", O_ENV_X, 1, NULL},
    /* elastic jobs (docs/elastic.md) */
    {"--min-np", O_MIN_NP, 1, NULL},
    {"--min-num-proc", O_MIN_NP, 1, NULL},
    {"--max-np", O_MAX_NP, 1, NULL},
    {"--max-num-proc", O_MAX_NP, 1, NULL},
    {"--host-discovery-script", O_DISCOVERY, 1, NULL},
    {"--slots-per-host", O_SLOTS_PER_HOST, 1, NULL},
    {"--elastic-timeout", O_ELASTIC_TIMEOUT, 1, NULL},
    {"--reset-limit", O_RESET_LIMIT, 1, NULL},
    {"--blacklist-cooldown-range", O_COOLDOWN, 1, NULL},
    {"--rdzv-endpoint", O_RDZV, 1, NULL},
    {"--agent-launcher", O_AGENT_LAUNCHER, 1, NULL},
    {"--tag-output", O_TAG_OUTPUT, 0, NULL},
    {"--no-tag-output", O_NO_TAG_OUTPUT, 0, NULL},
    {"-v", O_VERBOSE, 0, NULL},
    {"--verbose", O_VERBOSE, 0, NULL},
    {"--mpi", O_MPI, 0, NULL},
    {"--tcp", O_TCP, 0, NULL},
    {"--disable-cache", O_DISABLE_CACHE, 0, NULL},
    {"--hierarchical-allreduce", O_HIERARCHICAL, 0, NULL},
    {"--no-hierarchical-allreduce", O_NO_HIERARCHICAL, 0, NULL},
    {"--no-hierarchical-allgather", O_NO_HIER_ALLGATHER, 0, NULL},
    {"--timeline-mark-cycles", O_MARK_CYCLES, 0, NULL},
    {"--no-timeline-mark-cycles", O_NO_MARK_CYCLES, 0, NULL},
    {"--no-stall-check", O_NO_STALL_CHECK, 0, NULL},
    {"--stall-check", O_STALL_CHECK, 0, NULL},
    {"--no-autotune", O_NO_AUTOTUNE, 0, NULL},
    {"--log-without-timestamp", O_LOG_NO_TIMESTAMP, 0, NULL},
    {"--monitor", O_MONITOR, 0, NULL},
    {"--log-hide-timestamp", O_LOG_NO_TIMESTAMP, 0, NULL},
    {"--oversubscribe", O_NOOP, 0, NULL},
    {"--allow-run-as-root", O_NOOP, 0, NULL},
    {"--topology", O_TOPOLOGY, 0, NULL},
    {"--plan", O_PLAN, 0, NULL},
    {"--dump", O_DUMP, 1, NULL},
    {"--diagnose", O_DIAGNOSE, 1, NULL},
    {"--autotune", O_AUTOTUNE, 0, NULL},
    {"--autotune-log-file", O_TUNE_LOG, 1, NULL},
    {"--autotune-save", O_TUNE_SAVE, 1, NULL},
    {"--autotune-load", O_TUNE_LOAD, 1, NULL},
    {"--autotune-warmup-samples", O_TUNE_WARMUP, 1, NULL},
    {"--autotune-steps-per-sample", O_TUNE_STEPS, 1, NULL},
    {"--autotune-bayes-opt-max-samples", O_TUNE_TRIALS, 1, NULL},
    {"-h", O_HELP, 0, NULL},
    {"--help", O_HELP, 0, NULL},
    {"--version", O_VERSION, 0, NULL},
    {"-cb", O_CHECK_BUILD, 0, NULL},
    {"--check-build", O_CHECK_BUILD, 0, NULL},
    /* horovodrun's flags that hk does not have */
    {"--autotune-gaussian-process-noise", O_REFUSED, 1,
     "hk's autotuner has no Gaussian process to tell noise from gain: it "
     "measures the noise, repeating each setting until its score's "
     "uncertainty (from the samples' median absolute deviation) is under "
     "HK_AUTOTUNE_SPREAD (default 0.02) and keeping a setting only if it "
     "is faster by more than twice the combined uncertainty; drop the "
     "flag (-x "
     "HK_AUTOTUNE_SPREAD=... changes the bound)"},
    {"--autotune-compression", O_TUNE_COMPRESSION, 0, NULL},
    {"--gloo", O_REFUSED, 0,
     "hk has no Gloo controller: on one host hkrun's own rendezvous and "
     "TCP rings are what Gloo is to Horovod, and the default; across "
     "hosts hk starts through mpirun and still moves tensors over its own "
     "TCP rings; drop --gloo"},
    {"--jsrun", O_REFUSED, 0,
     "hk does not start jobs with jsrun: use -H/--hostfile (hkrun runs "
     "mpirun), or start the ranks with mpirun or srun yourself"},
    {"--hierarchical-allgather", O_REFUSED, 0,
     "hk's allgather is one ring over every rank; it has no hierarchical "
     "allgather (--hierarchical-allreduce exists)"},
    {"--mpi-threads-disable", O_REFUSED, 0,
     "hk's background thread makes the MPI calls, so MPI must support "
     "threads (hk asks for MPI_THREAD_MULTIPLE and needs at least "
     "MPI_THREAD_SERIALIZED); a program that must call MPI itself can "
     "initialise MPI at the level it wants before hk_init"},
    {"--num-nccl-streams", O_REFUSED, 1,
     "hk does not take a number of NCCL streams"},
    {"--thread-affinity", O_REFUSED, 1,
     "hk does not pin its background thread; bind whole workers with "
     "--bind-to"},
    {"--config-file", O_REFUSED, 1,
     "hk reads no YAML configuration file: give the flags on the command "
     "line, or the HK_* variables in the environment (hkrun forwards them)"},
    {"--binding-args", O_REFUSED, 1,
     "hkrun binds with --bind-to none|hwthread|core|socket|numa (on one "
     "host and through mpirun); give other mpirun binding options with "
     "--mpi-args"},
    {"-prefix-timestamp", O_REFUSED, 0,
     "hkrun does not timestamp output lines; pipe its output through a "
     "timestamping filter such as moreutils' ts"},
    {"--prefix-output-with-timestamp", O_REFUSED, 0,
     "hkrun does not timestamp output lines; pipe its output through a "
     "timestamping filter such as moreutils' ts"},
    {"--log-with-timestamp", O_REFUSED, 0,
     "hk's log lines carry no timestamp; pipe stderr through a "
     "timestamping filter such as moreutils' ts"},
    /* mpirun's that hkrun does not take itself */
    {"--map-by", O_REFUSED, 1,
     "hkrun maps ranks to slots in order (mpirun's --map-by slot), so that "
     "each host's ranks are consecutive; pass other mappings to mpirun "
     "with --mpi-args"},
    {"--mca", O_REFUSED, 1,
     "pass Open MPI's --mca settings with --mpi-args \"--mca NAME VALUE\""},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static const opt_def *find_option(const char *name) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (strcmp(name, options[i].name) == 0)
      return &options[i];
  return NULL;
}

/* "unknown option 'TOK'", with the closest known name if one is close:
 * at most 2 edits (3 for names of 12 bytes or more), or the known name
 * with one dash more or less (-verbose, --np=...). */
static int unknown(const char *name, const char *tok, char *err,
                   size_t err_cap) {
  const char *best = NULL;
  int best_d = 64;
  for (size_t i = 0; i < N_OPTIONS; i++) {
    const char *k = options[i].name;
    int d = hk_edit_distance(name, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (best && hk_edit_close(best_d, strlen(name)))
    return fail(err, err_cap, "unknown option '%s' (did you mean %s?)", tok,
                best);
  return fail(err, err_cap, "unknown option '%s'", tok);
}

/* --log-level: Horovod's TRACE, DEBUG, INFO, WARNING, ERROR, FATAL (any
 * case) and hk's own words; the result is hk's word (static). */
static const char *log_word(const char *s) {
  static const struct {
    const char *in, *out;
  } t[] = {{"trace", "debug"},     {"debug", "debug"},  {"info", "info"},
           {"warning", "warning"}, {"warn", "warning"}, {"error", "error"},
           {"fatal", "error"}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcasecmp(s, t[i].in) == 0)
      return t[i].out;
  return NULL;
}

/* --bind-to's words (mpirun's names), in the order of hkrun_bind. */
static const char *const bind_words[] = {"none", "hwthread", "core", "socket",
                                         "numa"};

/* -x NAME or -x NAME=value: NAME as a shell variable name. */
static int check_env_x(const char *opt, const char *v, char *err,
                       size_t err_cap) {
  size_t n = strcspn(v, "=");
  int ok = n > 0 && (isalpha((unsigned char)v[0]) || v[0] == '_');
  for (size_t i = 0; ok && i < n; i++)
    ok = isalnum((unsigned char)v[i]) || v[i] == '_';
  if (!ok)
    return fail(err, err_cap,
                "%s: '%s' is not NAME or NAME=value (NAME: letters, digits "
                "and '_', not starting with a digit)",
                opt, v);
  static const char *const own[] = {
      "HK_RANK",         "HK_SIZE",       "HK_LOCAL_RANK",
      "HK_LOCAL_SIZE",   "HK_RENDEZVOUS", "HK_SECRET",
      "HK_LAUNCHER_PID", "HK_CROSS_RANK", "HK_CROSS_SIZE"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (strlen(own[i]) == n && strncmp(v, own[i], n) == 0)
      return fail(err, err_cap,
                  "%s: hkrun sets %s for each worker itself; it cannot be "
                  "given",
                  opt, own[i]);
  return 0;
}

static int parse_value(const opt_def *o, const char *name, const char *value,
                       hkrun_args *out, char *err, size_t err_cap) {
  long v;
  double d;
  switch (o->id) {
  case O_NP:
    if (strcmp(value, "0") == 0) { /* an agent without workers, only */
      out->np = 0;
      out->np_zero = 1;
      return 0;
    }
    out->np_zero = 0;
    if (parse_int(name, value, HKRUN_MAX_NP, &v, err, err_cap) != 0)
      return -1;
    out->np = (int)v;
    return 0;
  case O_GRACE:
    return parse_seconds(name, value, &out->grace_period_s, err, err_cap);
  case O_HOSTS:
    /* an empty list is the host parser's error, which names it */
    out->hosts = value;
    return 0;
  case O_HOSTFILE:
    return parse_string(name, value, &out->hostfile, err, err_cap);
  case O_IFACES:
  case O_IFACE:
    if (strchr(value, ','))
      return fail(err, err_cap,
                  "%s: '%s': hk listens on one interface; give one name, or "
                  "a CIDR subnet (10.0.0.0/16) that covers the hosts' "
                  "addresses",
                  name, value);
    if (out->network_interface && *value &&
        strcmp(out->network_interface, value) != 0)
      return fail(err, err_cap,
                  "%s: '%s' and '%s': hk listens on one interface; give one "
                  "name or a CIDR subnet",
                  name, out->network_interface, value);
    return parse_string(name, value, &out->network_interface, err, err_cap);
  case O_MPI_ARGS:
    out->mpi_args = value;
    return 0;
  case O_FUSION_MB:
  case O_CYCLE_MS:
  case O_CACHE: {
    if (plain_number(value, &d) != 0)
      return fail(err, err_cap, "%s: '%s' is not a non-negative number", name,
                  value);
    const char **slot = o->id == O_FUSION_MB  ? &out->fusion_threshold_mb
                        : o->id == O_CYCLE_MS ? &out->cycle_time_ms
                                              : &out->cache_capacity;
    *slot = value;
    return 0;
  }
  case O_START_TIMEOUT:
  case O_STALL_WARNING:
  case O_STALL_SHUTDOWN:
  case O_GLOO_TIMEOUT: {
    if (plain_number(value, &d) != 0)
      return fail(err, err_cap, "%s: '%s' is not a number of seconds", name,
                  value);
    if ((o->id == O_START_TIMEOUT || o->id == O_GLOO_TIMEOUT) && d <= 0)
      return fail(err, err_cap, "%s: '%s' must be more than 0 seconds", name,
                  value);
    const char **slot = o->id == O_START_TIMEOUT   ? &out->start_timeout
                        : o->id == O_STALL_WARNING ? &out->stall_warning_s
                        : o->id == O_GLOO_TIMEOUT  ? &out->gloo_timeout_s
                                                   : &out->stall_shutdown_s;
    *slot = value;
    return 0;
  }
  case O_MIN_NP:
  case O_MAX_NP:
  case O_SLOTS_PER_HOST:
  case O_RESET_LIMIT:
    if (parse_int(name, value, HKRUN_MAX_NP, &v, err, err_cap) != 0)
      return -1;
    *(o->id == O_MIN_NP           ? &out->min_np
      : o->id == O_MAX_NP         ? &out->max_np
      : o->id == O_SLOTS_PER_HOST ? &out->slots_per_host
                                  : &out->reset_limit) = (int)v;
    return 0;
  case O_DISCOVERY:
    return parse_string(name, value, &out->discovery_script, err, err_cap);
  case O_AGENT_LAUNCHER:
    return parse_string(name, value, &out->agent_launcher, err, err_cap);
  case O_ELASTIC_TIMEOUT:
    if (parse_seconds(name, value, &out->elastic_timeout_s, err, err_cap) != 0)
      return -1;
    if (out->elastic_timeout_s <= 0)
      return fail(err, err_cap, "%s: '%s' must be more than 0 seconds", name,
                  value);
    out->elastic_timeout = value;
    return 0;
  case O_RDZV: {
    const char *colon = strrchr(value, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    size_t hl = colon ? (size_t)(colon - value) : 0;
    if (!colon || hl == 0 || hl >= sizeof out->rdzv_host || !colon[1] || *end ||
        port < 1 || port > 65535)
      return fail(err, err_cap,
                  "%s: '%s' is not HOST:PORT (the rendezvous agent's address "
                  "and a port 1..65535)",
                  name, value);
    memcpy(out->rdzv_host, value, hl);
    out->rdzv_host[hl] = '\0';
    out->rdzv_port = (int)port;
    out->rdzv_endpoint = value;
    return 0;
  }
  case O_COOLDOWN: /* the first of its two values; the caller reads B */
    return parse_seconds(name, value, &out->cooldown_lo_s, err, err_cap);
  case O_TIMELINE:
    return parse_string(name, value, &out->timeline, err, err_cap);
  case O_DUMP:
    out->action = HKRUN_DUMP;
    return parse_int(name, value, 0x7fffffffL, &out->dump_pid, err, err_cap);
  case O_DIAGNOSE:
    out->action = HKRUN_DIAGNOSE;
    return parse_string(name, value, &out->diagnose_dir, err, err_cap);
  case O_TUNE_LOG:
    return parse_string(name, value, &out->autotune_log, err, err_cap);
  case O_TUNE_SAVE:
    return parse_string(name, value, &out->autotune_save, err, err_cap);
  case O_TUNE_LOAD:
    return parse_string(name, value, &out->autotune_load, err, err_cap);
  case O_TUNE_WARMUP:
  case O_TUNE_STEPS:
  case O_TUNE_TRIALS: {
    const long lo = o->id == O_TUNE_WARMUP ? 0 : 1;
    const long hi = o->id == O_TUNE_WARMUP  ? 1000
                    : o->id == O_TUNE_STEPS ? 10000
                                            : 64;
    char *end;
    errno = 0;
    long n = value[0] >= '0' && value[0] <= '9' ? strtol(value, &end, 10) : -1;
    if (n < 0 || *end != '\0' || errno == ERANGE || n < lo || n > hi)
      return fail(err, err_cap,
                  "%s: '%s' is not a whole number from %ld to %ld", name, value,
                  lo, hi);
    const char **slot = o->id == O_TUNE_WARMUP  ? &out->autotune_warmup
                        : o->id == O_TUNE_STEPS ? &out->autotune_steps
                                                : &out->autotune_trials;
    *slot = value;
    return 0;
  }
  case O_OUTPUT_FILENAME:
    return parse_string(name, value, &out->output_filename, err, err_cap);
  case O_LOG_LEVEL:
    out->log_level = log_word(value);
    if (!out->log_level)
      return fail(err, err_cap,
                  "%s: '%s' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, "
                  "FATAL",
                  name, value);
    return 0;
  case O_SSH_PORT:
    if (parse_int(name, value, 65535, &v, err, err_cap) != 0)
      return -1;
    out->ssh_port = value;
    return 0;
  case O_SSH_IDENTITY:
    return parse_string(name, value, &out->ssh_identity_file, err, err_cap);
  case O_ENV_X:
    if (check_env_x(name, value, err, err_cap) != 0)
      return -1;
    if (out->n_env_x >= HKRUN_MAX_ENV_X)
      return fail(err, err_cap, "%s: more than %d -x options", name,
                  HKRUN_MAX_ENV_X);
    out->env_x[out->n_env_x++] = value;
    return 0;
  default: /* O_BIND_TO */
    for (size_t i = 0; i < sizeof bind_words / sizeof bind_words[0]; i++)
      if (strcmp(value, bind_words[i]) == 0) {
        out->bind_to = bind_words[i];
        out->bind = (hkrun_bind)i;
        return 0;
      }
    return fail(err, err_cap,
                "%s: '%s' is not one of none, hwthread, core, socket, numa",
                name, value);
  }
}

/* Applies a flag (an option without a value). Returns 1 when parsing
 * stops here with success (--help, --version, --check-build). */
static int apply_flag(const opt_def *o, hkrun_args *out) {
  switch (o->id) {
  case O_TAG_OUTPUT:
    out->tag_output = 1;
    break;
  case O_NO_TAG_OUTPUT:
    out->tag_output = 0;
    break;
  case O_VERBOSE:
    out->verbose = 1;
    break;
  case O_MPI:
    out->mpi = 1;
    break;
  case O_TCP:
    out->tcp = 1;
    break;
  case O_DISABLE_CACHE:
    out->disable_cache = 1;
    break;
  case O_HIERARCHICAL:
    out->hierarchical = 1;
    break;
  case O_NO_HIERARCHICAL:
    out->hierarchical = 0;
    break;
  case O_MARK_CYCLES:
    out->timeline_mark_cycles = 1;
    break;
  case O_MONITOR:
    out->monitor = 1;
    break;
  case O_AUTOTUNE:
    out->autotune = 1;
    break;
  case O_TUNE_COMPRESSION:
    out->autotune_compression = 1;
    break;
  case O_NO_AUTOTUNE: /* the last of the two wins */
    out->autotune = 0;
    break;
  case O_NO_MARK_CYCLES:
    out->timeline_mark_cycles = 0;
    break;
  case O_NO_STALL_CHECK:
    out->no_stall_check = 1;
    break;
  case O_STALL_CHECK:
    out->no_stall_check = 0;
    break;
  case O_HELP:
    out->action = HKRUN_HELP;
    return 1;
  case O_VERSION:
    out->action = HKRUN_VERSION;
    return 1;
  case O_CHECK_BUILD:
    out->action = HKRUN_CHECK_BUILD;
    return 1;
  default: /* what hk does anyway: --no-hierarchical-
              allgather, --log-without-timestamp, --oversubscribe... */
    break;
  }
  return 0;
}

/* Agent mode (--rdzv-endpoint): an elastic job over several hosts, this
 * hkrun starting its own host's -np workers (0 allowed). */
static int check_agent(hkrun_args *out, char *err, size_t err_cap) {
  out->elastic = 1;
  if (out->hosts || out->hostfile || out->mpi)
    return fail(err, err_cap,
                "--rdzv-endpoint runs one hkrun agent per host, each "
                "starting its own host's workers: %s (a job hkrun starts "
                "through mpirun) cannot be given with it",
                out->hosts      ? "-H"
                : out->hostfile ? "--hostfile"
                                : "--mpi");

  if (out->agent_launcher && !out->discovery_script)
    return fail(err, err_cap,
                "--agent-launcher starts agents on the hosts a "
                "--host-discovery-script lists: give one");
  if (out->np == 0 && !out->np_zero)
    return fail(err, err_cap,
                "--rdzv-endpoint: -np N is required (this host's workers; "
                "0 for an agent that only holds the rendezvous)");
  if (out->max_np == 0)
    return fail(err, err_cap,
                "--rdzv-endpoint: --max-np N is required (the job's workers "
                "over every agent; it starts when N have joined)");
  if (out->min_np == 0)
    out->min_np = 1;
  if (out->min_np > out->max_np)
    return fail(err, err_cap, "--min-np %d is more than --max-np %d",
                out->min_np, out->max_np);
  if (out->np > out->max_np)
    return fail(err, err_cap,
                "-np %d is more than --max-np %d (the job's workers over "
                "every agent)",
                out->np, out->max_np);
  return 0;
}

/* The elastic flags together (after the loop): elastic mode is implied by
 * --min-np, --max-np or --host-discovery-script; the other elastic flags
 * need it; -np defaults to --min-np and must lie in [min, max]. */
static int check_elastic(hkrun_args *out, char *err, size_t err_cap) {
  if (out->np_zero && !out->rdzv_endpoint)
    return fail(err, err_cap,
                "-np: '0' is not a positive integer (-np 0 is for an agent "
                "without workers: --rdzv-endpoint)");
  if (out->rdzv_endpoint)
    return check_agent(out, err, err_cap);
  if (out->agent_launcher)
    return fail(err, err_cap,
                "--agent-launcher starts agents of a job over several hosts: "
                "give --rdzv-endpoint HOST:PORT and a "
                "--host-discovery-script too");
  out->elastic = out->min_np > 0 || out->max_np > 0 || out->discovery_script;
  const char *only = out->slots_per_host       ? "--slots-per-host"
                     : out->elastic_timeout    ? "--elastic-timeout"
                     : out->reset_limit        ? "--reset-limit"
                     : out->cooldown_hi_s >= 0 ? "--blacklist-cooldown-range"
                                               : NULL;
  if (!out->elastic) {
    if (only)
      return fail(err, err_cap,
                  "%s is for elastic jobs: give --min-np (or --max-np, "
                  "--host-discovery-script) too",
                  only);
    return 0;
  }
  if (out->hosts || out->hostfile || out->mpi)
    return fail(err, err_cap,
                "an elastic job (--min-np, --max-np, "
                "--host-discovery-script) runs on this host only: hkrun "
                "cannot start one across hosts (%s); run one hkrun agent "
                "per host with --rdzv-endpoint instead",
                out->hosts      ? "-H"
                : out->hostfile ? "--hostfile"
                                : "--mpi");
  if (out->np == 0)
    out->np = out->min_np > 0 ? out->min_np : out->max_np;
  if (out->np == 0)
    return fail(err, err_cap,
                "-np N is required (or --min-np N: the workers to start)");
  if (out->min_np == 0)
    out->min_np = 1;
  if (out->min_np > out->np)
    return fail(err, err_cap,
                "--min-np %d is more than -np %d (the workers to start)",
                out->min_np, out->np);
  if (out->max_np && out->max_np < out->np)
    return fail(err, err_cap,
                "--max-np %d is less than -np %d (the workers to start)",
                out->max_np, out->np);
  if (out->max_np == 0)
    out->max_np = out->np;
  return 0;
}

int hkrun_args_parse(int argc, char **argv, hkrun_args *out, char *err,
                     size_t err_cap) {
  memset(out, 0, sizeof *out);
  out->action = HKRUN_RUN;
  out->tag_output = 1;
  out->grace_period_s = HKRUN_DEFAULT_GRACE_S;
  out->bind_to = "none";
  out->bind = HKRUN_BIND_NONE;
  out->hierarchical = -1;
  out->timeline_mark_cycles = -1;
  out->no_stall_check = -1;
  out->elastic_timeout_s = HKRUN_DEFAULT_ELASTIC_TIMEOUT_S;
  out->cooldown_lo_s = out->cooldown_hi_s = -1;
  if (err && err_cap > 0)
    err[0] = '\0';

  int i = 1;
  while (i < argc) {
    const char *tok = argv[i];
    if (strcmp(tok, "--") == 0) {
      i++;
      break;
    }
    if (tok[0] != '-' || tok[1] == '\0')
      break; /* the program ("-" alone is a program name too) */

    /* --opt=value for long options */
    char name[64];
    const char *inline_value = NULL;
    const char *eq = strchr(tok, '=');
    if (tok[1] == '-' && eq) {
      size_t n = (size_t)(eq - tok);
      if (n >= sizeof name)
        return fail(err, err_cap, "unknown option '%s'", tok);
      memcpy(name, tok, n);
      name[n] = '\0';
      inline_value = eq + 1;
    } else {
      if (strlen(tok) >= sizeof name)
        return fail(err, err_cap, "unknown option '%s'", tok);
      memcpy(name, tok, strlen(tok) + 1);
    }

    const opt_def *o = find_option(name);
    if (!o)
      return unknown(name, tok, err, err_cap);
    if (o->id == O_REFUSED)
      return fail(err, err_cap, "%s: %s", name, o->why);
    if (o->takes_value) {
      const char *value = inline_value;
      if (!value) {
        if (i + 1 >= argc)
          return fail(err, err_cap, "%s: missing value", name);
        value = argv[++i];
      }
      if (parse_value(o, name, value, out, err, err_cap) != 0)
        return -1;
      if (o->id == O_COOLDOWN) { /* Horovod's two values: A B */
        if (inline_value || i + 1 >= argc)
          return fail(err, err_cap,
                      "%s: takes two values, the least and the most seconds "
                      "(%s 10 100)",
                      name, name);
        if (parse_seconds(name, argv[++i], &out->cooldown_hi_s, err, err_cap) !=
            0)
          return -1;
        if (out->cooldown_hi_s < out->cooldown_lo_s)
          return fail(err, err_cap,
                      "%s: the least (%s s) is more than the most (%s s)", name,
                      argv[i - 1], argv[i]);
      }
      if (out->action == HKRUN_DUMP || out->action == HKRUN_DIAGNOSE) {
        /* a command of its own, with one value: a second pid (pgrep
         * finding two hkruns) would otherwise be dropped unseen */
        if (i + 1 < argc)
          return fail(err, err_cap, "%s takes one %s; '%s' is one too many",
                      name, out->action == HKRUN_DUMP ? "pid" : "folder",
                      argv[i + 1]);
        return 0;
      }
      i++;
      continue;
    }
    if (o->id == O_PLAN) {
      out->action = HKRUN_PLAN; /* everything after it is hkplan's */
      out->plan_argi = i + 1;
      return 0;
    }
    if (o->id == O_TOPOLOGY) {
      out->action = HKRUN_TOPOLOGY; /* an optional FILE may follow */
      if (i + 1 < argc && argv[i + 1][0] != '-')
        out->topology = argv[++i];
      return 0; /* the rest does not matter */
    }
    if (inline_value)
      return fail(err, err_cap, "%s: takes no value (in '%s')", name, tok);
    if (apply_flag(o, out))
      return 0; /* --help/--version/--check-build: the rest does not matter */
    i++;
  }

  if (i >= argc)
    return fail(err, err_cap, "no program given");
  if (out->hosts && out->hostfile)
    return fail(err, err_cap, "give -H or --hostfile, not both");
  if (check_elastic(out, err, err_cap) != 0)
    return -1;
  if (out->np == 0 && !out->hosts && !out->hostfile && !out->rdzv_endpoint)
    return fail(err, err_cap, "-np N is required");
  const char *needs = out->autotune_log      ? "--autotune-log-file"
                      : out->autotune_save   ? "--autotune-save"
                      : out->autotune_warmup ? "--autotune-warmup-samples"
                      : out->autotune_steps  ? "--autotune-steps-per-sample"
                      : out->autotune_compression ? "--autotune-compression"
                      : out->autotune_trials
                          ? "--autotune-bayes-opt-max-samples"
                          : NULL;
  if (needs && !out->autotune)
    return fail(err, err_cap, "%s needs --autotune", needs);
  if (out->autotune_log && out->autotune_save &&
      strcmp(out->autotune_log, out->autotune_save) == 0)
    return fail(err, err_cap,
                "--autotune-log-file and --autotune-save name the same file "
                "'%s' (the CSV and the saved settings would overwrite each "
                "other)",
                out->autotune_log);
  out->prog_argc = argc - i;
  out->prog_argv = argv + i;
  return 0;
}

const char *hkrun_usage(void) {
  return "usage: hkrun -np N [options] [--] program [args...]\n"
         "       hkrun [-np N] -H host:slots,... [options] [--] program "
         "[args...]\n"
         "       hkrun [-np N] --hostfile FILE [options] [--] program "
         "[args...]\n"
         "       hkrun --check-build | --version | --topology [FILE]\n"
         "       hkrun --plan HKPLAN_ARGS...\n"
         "       hkrun --dump HKRUN_PID | --diagnose DIR\n"
         "\n"
         "Starts N copies of program on this host, one per rank, and\n"
         "coordinates them (rendezvous, output, failure handling). With\n"
         "more than one host (or --mpi) it runs Open MPI's mpirun instead,\n"
         "which starts the ranks on the hosts. The flags are horovodrun's\n"
         "(grouped as `horovodrun --help` groups them) and a few of\n"
         "mpirun's; \"hk:\" marks where hk differs from them.\n"
         "\n"
         "general:\n"
         "  -np N, -n N, --np N, --num-proc N\n"
         "                       number of workers (1..65536; with hosts,\n"
         "                       default: the total of their slots)\n"
         "  -cb, --check-build   print what this hk was built with (MPI\n"
         "                       module, CUDA module, NCCL) and exit\n"
         "  --version            print the version and the optional parts\n"
         "                       present, and exit (hk: horovodrun's -v is\n"
         "                       --version; hkrun's -v is mpirun's\n"
         "                       --verbose)\n"
         "  --disable-cache      accepted: hkrun keeps no cache of start-up\n"
         "                       checks between runs (horovodrun's flag\n"
         "                       turns its 60-minute cache off; it is not\n"
         "                       the response cache: --cache-capacity 0)\n"
         "  --start-timeout S    HK_START_TIMEOUT_S: every rank must have\n"
         "                       joined within S seconds (hk: default 60,\n"
         "                       horovodrun's 30)\n"
         "  --network-interface IF, --network-interfaces IF\n"
         "                       the interface (name, or CIDR subnet) hk\n"
         "                       listens on and Open MPI uses; sets\n"
         "                       HK_SOCKET_IFNAME. Checked at start on one\n"
         "                       host too: a missing one fails, listing\n"
         "                       those that exist (hk: one interface, not\n"
         "                       a list)\n"
         "  --output-filename DIR\n"
         "                       also write each rank's output to\n"
         "                       DIR/rank.<r>/stdout and .../stderr (<r>\n"
         "                       zero-padded), as horovodrun does; through\n"
         "                       mpirun, mpirun's --output-filename\n"
         "  -v, --verbose        report the rendezvous address and each\n"
         "                       worker's pid (or the mpirun command) on\n"
         "                       stderr\n"
         "  -h, --help           print this help and exit\n"
         "\n"
         "SSH arguments (used by mpirun's ssh to the hosts):\n"
         "  -p, --ssh-port PORT  ssh port on every host\n"
         "  -i, --ssh-identity-file FILE\n"
         "                       ssh's identity (private key) file\n"
         "\n"
         "tuneable parameter arguments (each sets an HK_* variable):\n"
         "  --fusion-threshold-mb N   HK_FUSION_THRESHOLD in MiB (default\n"
         "                       128; 0 disables tensor fusion)\n"
         "  --cycle-time-ms X    HK_CYCLE_TIME_MS: the longest a batch of\n"
         "                       tensors may wait to grow, ms (default 0:\n"
         "                       negotiation is event-driven, none waits)\n"
         "  --cache-capacity N   HK_CACHE_CAPACITY: response cache entries\n"
         "                       (default 1024; 0: off)\n"
         "  --hierarchical-allreduce, --no-hierarchical-allreduce\n"
         "                       HK_HIERARCHICAL_ALLREDUCE=1/0: always/never\n"
         "                       (default: the cost model chooses per\n"
         "                       tensor)\n"
         "\n"
         "timeline arguments:\n"
         "  --timeline-filename F  HK_TIMELINE: rank 0 writes a Chrome\n"
         "                       trace of every tensor's phases to F\n"
         "  --timeline-mark-cycles  HK_TIMELINE_MARK_CYCLES=1: also mark\n"
         "                       each negotiation round that ran something\n"
         "                       (an instant CYCLE_START event; hk's\n"
         "                       \"cycle\" is one round of negotiation)\n"
         "\n"
         "autotune arguments:\n"
         "  --autotune           HK_AUTOTUNE=1: rank 0 measures the job's\n"
         "                       training steps and searches the fusion\n"
         "                       threshold, cycle time, (where they\n"
         "                       apply) hierarchical vs flat allreduce,\n"
         "                       the TCP sockets per peer and the device\n"
         "                       staging chunk\n"
         "                       (a sweep of each knob's ladder, each\n"
         "                       setting measured until its score's\n"
         "                       uncertainty is under 2 %);\n"
         "                       every rank switches at the same round; at\n"
         "                       the end rank 0 logs the choice and the\n"
         "                       gain over the starting setting\n"
         "  --autotune-log-file F  HK_AUTOTUNE_LOG: one CSV row per trial\n"
         "  --autotune-save F    HK_AUTOTUNE_SAVE: write the choice to F\n"
         "  --autotune-load F    start from the settings F holds (written\n"
         "                       by --autotune-save; flags, -x and the\n"
         "                       environment win)\n"
         "  --autotune-warmup-samples N  HK_AUTOTUNE_WARMUP_STEPS: steps\n"
         "                       dropped after each change (default 3; hk:\n"
         "                       steps, not samples)\n"
         "  --autotune-steps-per-sample N  HK_AUTOTUNE_STEPS_PER_SAMPLE\n"
         "                       (default 5)\n"
         "  --autotune-compression  HK_AUTOTUNE_COMPRESSION=1: let the\n"
         "                       search try HK_COMPRESSION none, fp16 and\n"
         "                       bf16 for float32 device gradients (it\n"
         "                       changes the results)\n"
         "  --autotune-bayes-opt-max-samples N  HK_AUTOTUNE_MAX_TRIALS:\n"
         "                       the most trials (default 30;\n"
         "                       hk: no Bayesian optimisation)\n"
         "\n"
         "monitoring arguments:\n"
         "  --monitor            HK_MONITOR_LIVE=1: while the job runs, one\n"
         "                       line per rank (host, GPU, utilisation,\n"
         "                       temperature, SM clock, throttle reasons,\n"
         "                       lateness, wait), refreshed in place on a\n"
         "                       terminal, appended otherwise\n"
         "\n"
         "stall check arguments:\n"
         "  --no-stall-check     HK_STALL_CHECK_TIME_S=0 and\n"
         "                       HK_STALL_SHUTDOWN_TIME_S=0\n"
         "  --stall-check-warning-time-seconds S\n"
         "                       HK_STALL_CHECK_TIME_S (default 60)\n"
         "  --stall-check-shutdown-time-seconds S\n"
         "                       HK_STALL_SHUTDOWN_TIME_S (default 0: never)\n"
         "\n"
         "library arguments:\n"
         "  --mpi-args \"ARGS\"    more mpirun arguments (split like sh)\n"
         "  --tcp                HK_CROSS_TRANSPORT=tcp (hk's default), and\n"
         "                       Open MPI's TCP only (--mca pml ob1\n"
         "                       --mca btl ^openib)\n"
         "  --gloo-timeout-seconds S\n"
         "                       HK_TIMEOUT_S: a transfer making no\n"
         "                       progress this long fails (hk: default 60,\n"
         "                       Horovod's Gloo 30)\n"
         "\n"
         "logging arguments:\n"
         "  --log-level LEVEL    HK_LOG_LEVEL (default WARNING): TRACE and\n"
         "                       DEBUG are hk's debug, FATAL its error\n"
         "  --log-without-timestamp  accepted: hk's log lines have none\n"
         "\n"
         "host arguments:\n"
         "  -H, --hosts, --host LIST   hosts and slots: host1:8,host2:8\n"
         "  --hostfile FILE      one host per line: 'host slots=8' or\n"
         "                       'host:8'; '#' starts a comment\n"
         "\n"
         "controller arguments:\n"
         "  --mpi                start through mpirun even on one host\n"
         "\n"
         "mpirun's arguments that hkrun takes too (hk's own on one host):\n"
         "  -x NAME=VALUE, -x NAME\n"
         "                       set NAME for every worker, or pass hkrun's\n"
         "                       own NAME on (through mpirun: its -x NAME);\n"
         "                       every HK_* variable is passed on anyway\n"
         "  --bind-to POLICY     none (default), hwthread, core, socket,\n"
         "                       numa: local rank r gets the (r mod C)-th\n"
         "                       core of those hkrun may use (socket by\n"
         "                       socket), its CPU (hwthread), or all CPUs\n"
         "                       of that core's socket / NUMA node; more\n"
         "                       ranks than cores share them (a warning;\n"
         "                       mpirun refuses). Through mpirun:\n"
         "                       mpirun's --bind-to\n"
         "  --tag-output         prefix each output line with \"[rank] \"\n"
         "                       (default; through mpirun: its\n"
         "                       --tag-output)\n"
         "  --no-tag-output      pass worker output through unprefixed\n"
         "  --oversubscribe, --allow-run-as-root   accepted (hkrun never\n"
         "                       refuses either)\n"
         "\n"
         "elastic (docs/elastic.md):\n"
         "  --min-np N           an elastic job: a lost worker does not end\n"
         "                       it while N are left; the survivors get\n"
         "                       HK_ERR_RANKS_CHANGED and re-form with\n"
         "                       hk_elastic_reset (-np defaults to N)\n"
         "  --max-np N           at most N workers (default: -np)\n"
         "  --host-discovery-script FILE\n"
         "                       prints host:slots lines; below --min-np\n"
         "                       hkrun names what it lists when it fails\n"
         "  --slots-per-host N   slots of a listed host without :slots\n"
         "  --elastic-timeout S  below --min-np, wait this long before\n"
         "                       failing every rank (default 600)\n"
         "  --reset-limit N      fail the job at the (N+1)th re-forming\n"
         "  --agent-launcher CMD  with --rdzv-endpoint and a discovery\n"
         "                       script: hkrun starts an agent on each\n"
         "                       listed host as CMD HOST 'hkrun ...'\n"
         "                       (default: ssh -o BatchMode=yes -o\n"
         "                       SendEnv=HK_SECRET)\n"
         "  --blacklist-cooldown-range A B\n"
         "                       agents: a host that failed is refused\n"
         "                       for min(B, A*2^(n-1)) s at its n-th\n"
         "                       failure (default: for the rest of the\n"
         "                       job); one host has nothing to blacklist\n"
         "  --rdzv-endpoint HOST:PORT\n"
         "                       an agent: this hkrun starts -np workers\n"
         "                       (0: none) of a job over several hosts,\n"
         "                       one agent per host, meeting at HOST:PORT\n"
         "                       (the agent on HOST holds it); needs\n"
         "                       --max-np and the same HK_SECRET on each\n"
         "\n"
         "hk's own:\n"
         "  --grace-period S     seconds between a failure and SIGTERM to\n"
         "                       the other workers (default 2); SIGKILL\n"
         "                       follows 2 s after SIGTERM\n"
         "  --topology [FILE]    print a server's GPU layout, rings and\n"
         "                       predicted busbw (hktopo) and exit\n"
         "  --plan ARGS...       predict step time, scaling and cost of\n"
         "                       candidate servers (hkplan ARGS; hkplan\n"
         "                       --help) and exit\n"
         "  --dump HKRUN_PID     ask the running job of that hkrun (or\n"
         "                       mpirun) to write its flight records: it\n"
         "                       sends SIGUSR1, which hkrun forwards to\n"
         "                       every rank; each writes\n"
         "                       HK_FLIGHT_DIR/hk-flight.JOB.RANK.txt\n"
         "  --diagnose DIR       merge the flight records in DIR: the world\n"
         "                       size, missing ranks, and the first tensor\n"
         "                       and round on which the ranks diverged\n"
         "  --                   end of options\n"
         "\n"
         "horovodrun's flags hk does not have (each is refused saying why\n"
         "and what to use): --gloo, --jsrun,\n"
         "--autotune-gaussian-process-noise,\n"
         "--hierarchical-allgather, --mpi-threads-disable,\n"
         "--num-nccl-streams, --thread-affinity, --config-file,\n"
         "--binding-args, --prefix-output-with-timestamp.\n"
         "\n"
         "Each worker gets HK_RANK, HK_SIZE, HK_LOCAL_RANK, HK_LOCAL_SIZE,\n"
         "HK_RENDEZVOUS, HK_SECRET and HK_LAUNCHER_PID in its environment.\n"
         "A worker's stdout is a pipe: C's stdio buffers it in blocks until\n"
         "exit or fflush (call setvbuf(stdout, NULL, _IOLBF, 0) for lines);\n"
         "stderr is unbuffered. hkrun prints each line whole.\n"
         "SIGINT, SIGTERM and SIGHUP are forwarded to every worker.\n"
         "hkrun exits with the status of the first worker that failed\n"
         "(128+signal if it was killed; 1 if it called hk_init and exited\n"
         "0 without hk_shutdown), 0 if all exited 0, 2 on a bad command\n"
         "line, 127 if the program cannot be started.\n"
         "Through mpirun, Open MPI sets each rank's place (hk reads\n"
         "OMPI_COMM_WORLD_*), hkrun forwards HK_SECRET and the other HK_*\n"
         "variables with -x, and the exit status is mpirun's.\n";
}

const char *hkrun_usage_hint(void) {
  return "usage: hkrun -np N [options] [--] program [args...] "
         "(see hkrun --help)\n";
}

int hkrun_tunable_env(const hkrun_args *a, char *buf, size_t cap,
                      const char **vars, int max_vars, int *count) {
  *count = 0;
  size_t used = 0;
  const char *hier = a->hierarchical < 0 ? NULL : a->hierarchical ? "1" : "0";
  const char *marks = a->timeline_mark_cycles < 0 ? NULL
                      : a->timeline_mark_cycles   ? "1"
                                                  : "0";
  const char *warn = a->no_stall_check == 1 ? "0" : a->stall_warning_s;
  const char *stop = a->no_stall_check == 1 ? "0" : a->stall_shutdown_s;
  const struct {
    const char *var, *value;
    int megabytes;
  } t[] = {
      {"HK_FUSION_THRESHOLD", a->fusion_threshold_mb, 1},
      {"HK_CYCLE_TIME_MS", a->cycle_time_ms, 0},
      {"HK_CACHE_CAPACITY", a->cache_capacity, 0},
      {"HK_TIMELINE", a->timeline, 0},
      {"HK_TIMELINE_MARK_CYCLES", marks, 0},
      {"HK_START_TIMEOUT_S", a->start_timeout, 0},
      {"HK_LOG_LEVEL", a->log_level, 0},
      {"HK_HIERARCHICAL_ALLREDUCE", hier, 0},
      {"HK_STALL_CHECK_TIME_S", warn, 0},
      {"HK_STALL_SHUTDOWN_TIME_S", stop, 0},
      {"HK_TIMEOUT_S", a->gloo_timeout_s, 0},
      {"HK_CROSS_TRANSPORT", a->tcp ? "tcp" : NULL, 0},
      {"HK_MONITOR_LIVE", a->monitor ? "1" : NULL, 0},
      {"HK_ELASTIC", a->elastic ? "1" : NULL, 0},
      {"HK_ELASTIC_TIMEOUT_S", a->elastic ? a->elastic_timeout : NULL, 0},
      {"HK_AUTOTUNE", a->autotune ? "1" : NULL, 0},
      {"HK_AUTOTUNE_LOG", a->autotune_log, 0},
      {"HK_AUTOTUNE_SAVE", a->autotune_save, 0},
      {"HK_AUTOTUNE_WARMUP_STEPS", a->autotune_warmup, 0},
      {"HK_AUTOTUNE_STEPS_PER_SAMPLE", a->autotune_steps, 0},
      {"HK_AUTOTUNE_MAX_TRIALS", a->autotune_trials, 0},
      {"HK_AUTOTUNE_COMPRESSION", a->autotune_compression ? "1" : NULL, 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    if (!t[i].value)
      continue;
    if (*count >= max_vars)
      return -1;
    int n =
        t[i].megabytes
            ? snprintf(buf + used, cap - used, "%s=%.0f", t[i].var,
                       strtod(t[i].value, NULL) * 1048576.0)
            : snprintf(buf + used, cap - used, "%s=%s", t[i].var, t[i].value);
    if (n < 0 || (size_t)n >= cap - used)
      return -1;
    vars[(*count)++] = buf + used;
    used += (size_t)n + 1;
  }
  return 0;
}
