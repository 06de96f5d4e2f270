/*
 * args.c - hkrun's command-line parser (see args.h). Pure: it only reads
 * argv and writes *out and the error buffer.
 */
#include "launcher/args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Parses a whole decimal token as an integer in [1, HKRUN_MAX_NP]. */
static int parse_np(const char *opt, const char *s, int *out, char *err,
                    size_t err_cap) {
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
  if (errno == ERANGE || v > HKRUN_MAX_NP)
    return fail(err, err_cap, "%s: '%s' is too large (at most %d)", opt, s,
                HKRUN_MAX_NP);
  *out = (int)v;
  return 0;
}

/* Parses a whole token as seconds in [0, HKRUN_MAX_GRACE_S]. */
static int parse_seconds(const char *opt, const char *s, double *out, char *err,
                         size_t err_cap) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* strtod also accepts "inf", "nan" and hex floats; require plain digits. */
  int plain = *s != '\0' && strspn(s, "0123456789.") == strlen(s);
  if (!plain || end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
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

/* Options that take a value, in every spelling hkrun accepts. */
enum {
  OPT_NP,
  OPT_GRACE,
  OPT_HOSTS,
  OPT_HOSTFILE,
  OPT_IFACE,
  OPT_MPI_ARGS,
  OPT_BIND_TO,
  OPT_FUSION_MB,
  OPT_CYCLE_MS,
  OPT_CACHE,
  OPT_TIMELINE,
  OPT_NONE
};

static int value_option(const char *name) {
  static const struct {
    const char *name;
    int opt;
  } table[] = {
      {"-np", OPT_NP},
      {"-n", OPT_NP},
      {"--np", OPT_NP},
      {"--grace-period", OPT_GRACE},
      {"-H", OPT_HOSTS},
      {"--host", OPT_HOSTS},
      {"--hostfile", OPT_HOSTFILE},
      {"-hostfile", OPT_HOSTFILE},
      {"--network-interface", OPT_IFACE},
      {"--mpi-args", OPT_MPI_ARGS},
      {"--bind-to", OPT_BIND_TO},
      {"--fusion-threshold-mb", OPT_FUSION_MB},
      {"--cycle-time-ms", OPT_CYCLE_MS},
      {"--cache-capacity", OPT_CACHE},
      {"--timeline-filename", OPT_TIMELINE},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(name, table[i].name) == 0)
      return table[i].opt;
  return OPT_NONE;
}

static int parse_value(int opt, const char *name, const char *value,
                       hkrun_args *out, char *err, size_t err_cap) {
  switch (opt) {
  case OPT_NP:
    return parse_np(name, value, &out->np, err, err_cap);
  case OPT_GRACE:
    return parse_seconds(name, value, &out->grace_period_s, err, err_cap);
  case OPT_HOSTS:
    /* an empty list is the host parser's error, which names it */
    out->hosts = value;
    return 0;
  case OPT_HOSTFILE:
    return parse_string(name, value, &out->hostfile, err, err_cap);
  case OPT_IFACE:
    return parse_string(name, value, &out->network_interface, err, err_cap);
  case OPT_MPI_ARGS:
    out->mpi_args = value;
    return 0;
  case OPT_FUSION_MB:
  case OPT_CYCLE_MS:
  case OPT_CACHE: {
    double ignored;
    if (parse_seconds(name, value, &ignored, err, err_cap) != 0)
      return fail(err, err_cap, "%s: '%s' is not a non-negative number", name,
                  value);
    const char **slot = opt == OPT_FUSION_MB  ? &out->fusion_threshold_mb
                        : opt == OPT_CYCLE_MS ? &out->cycle_time_ms
                                              : &out->cache_capacity;
    *slot = value;
    return 0;
  }
  case OPT_TIMELINE:
    return parse_string(name, value, &out->timeline, err, err_cap);
  default:
    if (parse_string(name, value, &out->bind_to, err, err_cap) != 0)
      return -1;
    if (strcspn(value, " \t\n") != strlen(value))
      return fail(err, err_cap, "%s: '%s' is not one word", name, value);
    return 0;
  }
}

int hkrun_args_parse(int argc, char **argv, hkrun_args *out, char *err,
                     size_t err_cap) {
  memset(out, 0, sizeof *out);
  out->action = HKRUN_RUN;
  out->tag_output = 1;
  out->grace_period_s = HKRUN_DEFAULT_GRACE_S;
  out->bind_to = "none";
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

    int vopt = value_option(name);
    if (vopt != OPT_NONE) {
      const char *value = inline_value;
      if (!value) {
        if (i + 1 >= argc)
          return fail(err, err_cap, "%s: missing value", name);
        value = argv[++i];
      }
      int rc = parse_value(vopt, name, value, out, err, err_cap);
      if (rc != 0)
        return rc;
      i++;
      continue;
    }
    int *flag = NULL, flag_value = 1;
    if (strcmp(name, "--tag-output") == 0) {
      flag = &out->tag_output;
    } else if (strcmp(name, "--no-tag-output") == 0) {
      flag = &out->tag_output;
      flag_value = 0;
    } else if (strcmp(name, "-v") == 0 || strcmp(name, "--verbose") == 0) {
      flag = &out->verbose;
    } else if (strcmp(name, "--mpi") == 0) {
      flag = &out->mpi;
    } else if (strcmp(name, "--topology") == 0) {
      out->action = HKRUN_TOPOLOGY; /* an optional FILE may follow */
      if (i + 1 < argc && argv[i + 1][0] != '-')
        out->topology = argv[++i];
      return 0; /* the rest does not matter */
    } else if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
      out->action = HKRUN_HELP;
    } else if (strcmp(name, "--version") == 0) {
      out->action = HKRUN_VERSION;
    } else {
      return fail(err, err_cap, "unknown option '%s'", tok);
    }
    if (inline_value)
      return fail(err, err_cap, "%s: takes no value (in '%s')", name, tok);
    if (out->action != HKRUN_RUN)
      return 0; /* --help/--version: the rest does not matter */
    *flag = flag_value;
    i++;
  }

  if (i >= argc)
    return fail(err, err_cap, "no program given");
  if (out->hosts && out->hostfile)
    return fail(err, err_cap, "give -H or --hostfile, not both");
  if (out->np == 0 && !out->hosts && !out->hostfile)
    return fail(err, err_cap, "-np N is required");
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
         "\n"
         "Starts N copies of program on this host, one per rank, and\n"
         "coordinates them (rendezvous, output, failure handling). With\n"
         "more than one host (or --mpi) it runs Open MPI's mpirun instead,\n"
         "which starts the ranks on the hosts.\n"
         "\n"
         "options:\n"
         "  -np N, -n N, --np N  number of workers (1..65536; with hosts,\n"
         "                       default: the total of their slots)\n"
         "  -H, --host LIST      hosts and slots: host1:8,host2:8\n"
         "  --hostfile FILE      one host per line: 'host slots=8' or\n"
         "                       'host:8'; '#' starts a comment\n"
         "  --mpi                start through mpirun even on one host\n"
         "  --network-interface IF\n"
         "                       the interface (or CIDR subnet) hk and\n"
         "                       Open MPI use between hosts; sets\n"
         "                       HK_SOCKET_IFNAME for the workers\n"
         "  --mpi-args \"ARGS\"    more mpirun arguments (split like sh)\n"
         "  --bind-to POLICY     mpirun's --bind-to (default none)\n"
         "  --tag-output         prefix each output line with \"[rank] \" "
         "(default;\n"
         "                       through mpirun: its --tag-output)\n"
         "  --no-tag-output      pass worker output through unprefixed\n"
         "  --grace-period S     seconds between a failure and SIGTERM to\n"
         "                       the other workers (default 2); SIGKILL\n"
         "                       follows 2 s after SIGTERM\n"
         "  -v, --verbose        report the rendezvous address and each\n"
         "                       worker's pid (or the mpirun command) on\n"
         "                       stderr\n"
         "  --fusion-threshold-mb N   HK_FUSION_THRESHOLD in MiB (default\n"
         "                       128; 0 disables tensor fusion)\n"
         "  --cycle-time-ms X    HK_CYCLE_TIME_MS: the longest a batch of\n"
         "                       tensors may wait to grow, ms (default 0:\n"
         "                       negotiation is event-driven, none waits)\n"
         "  --cache-capacity N   HK_CACHE_CAPACITY (default 1024; 0: off)\n"
         "  --timeline-filename F  HK_TIMELINE: rank 0 writes a Chrome\n"
         "                       trace of every tensor's phases to F\n"
         "  --topology [FILE]    print a server's GPU layout, rings and\n"
         "                       predicted busbw (hktopo) and exit\n"
         "  -h, --help           print this help and exit\n"
         "  --version            print the version and exit\n"
         "  --                   end of options\n"
         "\n"
         "Each worker gets HK_RANK, HK_SIZE, HK_LOCAL_RANK, HK_LOCAL_SIZE,\n"
         "HK_RENDEZVOUS, HK_SECRET and HK_LAUNCHER_PID in its environment.\n"
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
  const struct {
    const char *var, *value;
    int megabytes;
  } t[] = {
      {"HK_FUSION_THRESHOLD", a->fusion_threshold_mb, 1},
      {"HK_CYCLE_TIME_MS", a->cycle_time_ms, 0},
      {"HK_CACHE_CAPACITY", a->cache_capacity, 0},
      {"HK_TIMELINE", a->timeline, 0},
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
