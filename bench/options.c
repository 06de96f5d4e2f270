/*
 * options.c - parsing hkbench's command line (see options.h).
 */
#include "options.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/host/reduce.h"

#ifndef HKB_MODEL_DIR /* the source tree's bench/models (CMake) */
#define HKB_MODEL_DIR "bench/models"
#endif
#ifndef HKB_MODEL_REL /* from the installed hkbench's folder (CMake) */
#define HKB_MODEL_REL "../share/hk/models"
#endif

/* --model-dir's default: next to an installed hkbench
 * (<prefix>/share/hk/models), else the source tree's. Static storage. */
static const char *default_model_dir(void) {
  static char dir[PATH_MAX];
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(dir, sizeof dir, "%.*s/%s", PATH_MAX - 64, exe, HKB_MODEL_REL);
      if (access(dir, R_OK) == 0)
        return dir;
    }
  }
  return HKB_MODEL_DIR;
}

/* Indexed by hk_dtype: nccl-tests' type names, printed in the type column
 * (float32 prints "float", as bench/peers does; nccl-tests has no int16 or
 * bool, which print as hk names them). */
static const char *const type_names[] = {"half",  "bfloat16", "float", "double",
                                         "int8",  "uint8",    "int32", "int64",
                                         "int16", "bool"};
#define NTYPES (int)(sizeof type_names / sizeof type_names[0])
/* Indexed by hk_op: nccl-tests' names (ncclSum, ncclProd, ..., ncclAvg). */
static const char *const op_names[] = {"sum", "avg", "min", "max", "prod"};

const char *hkb_type_name(hk_dtype t) {
  return (unsigned)t < (unsigned)NTYPES ? type_names[t] : "unknown";
}

const char *hkb_op_name(hk_op op) {
  return (unsigned)op <= HK_PRODUCT ? op_names[op] : "unknown";
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hkrun -np N hkbench [sweep options] [--raw] [--csv FILE]\n"
          "       hkrun -np N hkbench --model NAME|FILE.tsv [-n steps] [-w "
          "warmup]\n"
          "       hkbench --model list\n"
          "sweep: -b min -e max (bytes; K/M/G suffixes; default 8 .. 256M)\n"
          "       -f factor (4)  -n iters (50)  -w warmup (5)  -B budget "
          "bytes per size (1G)\n"
          "       -c 0|1 check results (1)\n"
          "       -d float32|float16|bfloat16|float64|int8|uint8|int16|int32|"
          "int64|all\n"
          "          (float32; nccl-tests' float, half, double, int are "
          "accepted too;\n"
          "          all: every dtype hk reduces, which bool is not)\n"
          "       -o sum|average|min|max|prod|all (sum; avg, product too)\n"
          "       --raw  also print raw(us): the ring collective alone, as "
          "timed by the\n"
          "              background thread (no enqueue, negotiation, "
          "completion)\n"
          "device: --device host|gpu  buffers in host (default) or device "
          "memory (HK_DEVICE's\n"
          "          backend: cuda on a GPU, emu without one)\n"
          "        --kernels  (with --device gpu) pack/unpack kernel "
          "bandwidth vs a device copy\n"
          "model: --model replays a gradient set (default -n 10 -w 2, "
          "float32 average);\n"
          "       --model-dir DIR (default %s)\n"
          "       --compute-ms MS  a synthetic backward pass: tensor k is "
          "submitted when\n"
          "          MS x (parameters up to k) / (all parameters) ms of the "
          "step have passed\n"
          "       --steps-only  no allreduce of the whole set as one buffer "
          "after each\n"
          "          step (so the job's steps are a trainer's: for "
          "hkrun --autotune)\n",
          default_model_dir());
}

/* Size in bytes from "64", "64K", "1.5M", "1G". Returns 0 if malformed. */
static int parse_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0)
    return 0;
  if (*end == 'k' || *end == 'K')
    v *= 1024.0, end++;
  else if (*end == 'm' || *end == 'M')
    v *= 1024.0 * 1024.0, end++;
  else if (*end == 'g' || *end == 'G')
    v *= 1024.0 * 1024.0 * 1024.0, end++;
  if (*end || v > 1e18)
    return 0;
  *out = (size_t)v;
  return 1;
}

static int parse_int(const char *s, int min, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < min || v > 1000000000L)
    return 0;
  *out = (int)v;
  return 1;
}

static int parse_types(const char *s, hkb_opts *o) {
  static const struct {
    const char *name;
    hk_dtype t;
  } alias[] = {{"float", HK_FLOAT32},
               {"half", HK_FLOAT16},
               {"double", HK_FLOAT64},
               {"int", HK_INT32}};
  o->ntypes = 0;
  int all = !strcmp(s, "all");
  for (int t = 0; t < NTYPES; t++)
    if (hk_reduce_supported((hk_dtype)t, HK_SUM) &&
        (all || !strcmp(s, hk_dtype_name((hk_dtype)t))))
      o->types[o->ntypes++] = (hk_dtype)t;
  if (all)
    return 1;
  for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
    if (!strcmp(s, alias[i].name))
      o->types[o->ntypes++] = alias[i].t;
  return o->ntypes == 1;
}

static int parse_ops(const char *s, hkb_opts *o) {
  o->nops = 0;
  if (!strcmp(s, "all")) {
    for (int p = HK_SUM; p <= HK_PRODUCT; p++)
      o->ops[o->nops++] = (hk_op)p;
    return 1;
  }
  for (int p = HK_SUM; p <= HK_PRODUCT; p++)
    if (!strcmp(s, hk_op_name((hk_op)p)) || !strcmp(s, op_names[p]))
      o->ops[o->nops++] = (hk_op)p;
  return o->nops == 1;
}

int hkb_parse_options(int argc, char **argv, hkb_opts *o) {
  *o = (hkb_opts){.min_bytes = 8,
                  .max_bytes = (size_t)256 << 20,
                  .budget_bytes = (size_t)1 << 30,
                  .factor = 4,
                  .iters = -1,
                  .warmup = -1,
                  .check = 1,
                  .model_dir = default_model_dir()};
  enum {
    OPT_CSV = 256,
    OPT_RAW,
    OPT_MODEL,
    OPT_MODEL_DIR,
    OPT_DEVICE,
    OPT_KERNELS,
    OPT_COMPUTE,
    OPT_STEPS_ONLY
  };
  static const struct option longopts[] = {
      {"csv", required_argument, 0, OPT_CSV},
      {"raw", no_argument, 0, OPT_RAW},
      {"model", required_argument, 0, OPT_MODEL},
      {"model-dir", required_argument, 0, OPT_MODEL_DIR},
      {"device", required_argument, 0, OPT_DEVICE},
      {"kernels", no_argument, 0, OPT_KERNELS},
      {"compute-ms", required_argument, 0, OPT_COMPUTE},
      {"steps-only", no_argument, 0, OPT_STEPS_ONLY},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int opt, ok = 1;
  while (ok && (opt = getopt_long(argc, argv, "b:e:f:n:w:B:c:d:o:h", longopts,
                                  NULL)) != -1) {
    switch (opt) {
    case 'b':
      ok = parse_size(optarg, &o->min_bytes);
      break;
    case 'e':
      ok = parse_size(optarg, &o->max_bytes);
      break;
    case 'B':
      ok = parse_size(optarg, &o->budget_bytes);
      break;
    case 'f':
      ok = parse_int(optarg, 2, &o->factor);
      break;
    case 'n':
      ok = parse_int(optarg, 1, &o->iters);
      break;
    case 'w':
      ok = parse_int(optarg, 0, &o->warmup);
      break;
    case 'c':
      ok = parse_int(optarg, 0, &o->check);
      break;
    case 'd':
      ok = parse_types(optarg, o);
      break;
    case 'o':
      ok = parse_ops(optarg, o);
      break;
    case OPT_CSV:
      o->csv_path = optarg;
      break;
    case OPT_RAW:
      o->raw = 1;
      break;
    case OPT_MODEL:
      o->model = optarg;
      break;
    case OPT_MODEL_DIR:
      o->model_dir = optarg;
      break;
    case OPT_COMPUTE:
      ok = parse_int(optarg, 0, &o->compute_ms);
      break;
    case OPT_STEPS_ONLY:
      o->steps_only = 1;
      break;
    case OPT_DEVICE:
      ok = !strcmp(optarg, "gpu") || !strcmp(optarg, "host");
      o->device = !strcmp(optarg, "gpu");
      break;
    case OPT_KERNELS:
      o->kernels = 1;
      break;
    case 'h':
      usage(stdout);
      return 1;
    default:
      usage(stderr);
      return 2;
    }
    if (!ok)
      fprintf(stderr, "hkbench: bad value '%s' for -%c\n", optarg, opt);
  }
  if (!ok)
    return 2;
  if (optind < argc) {
    fprintf(stderr, "hkbench: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (o->model && (o->ntypes > 1 || o->nops > 1)) {
    fprintf(stderr, "hkbench: --model takes one -d type and one -o op\n");
    return 2;
  }
  if (o->steps_only && !o->model) {
    fprintf(stderr, "hkbench: --steps-only needs --model\n");
    return 2;
  }
  if (o->kernels && !o->device) {
    fprintf(stderr, "hkbench: --kernels needs --device gpu\n");
    return 2;
  }
  if (o->ntypes == 0) /* the defaults: the peers' float32 */
    o->types[o->ntypes++] = HK_FLOAT32;
  if (o->nops == 0) /* sum for the sweep, as the peers; average for a model,
                       as a trainer */
    o->ops[o->nops++] = o->model ? HK_AVERAGE : HK_SUM;
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "hkbench: -b %zu is above -e %zu\n", o->min_bytes,
            o->max_bytes);
    return 2;
  }
  return 0;
}
