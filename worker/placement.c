/*
 * placement.c - the launcher's environment and host names, turned into
 * rank/size/local/cross numbers (see placement.h).
 */
#include "worker/placement.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/status.h"
#include "coordinator/wire.h"

/* The variables one launcher sets; NULL where it has none. */
typedef struct launcher_vars {
  hk_placement_source source;
  const char *rank, *size, *size_alt, *local_rank, *local_size;
} launcher_vars;

static const launcher_vars launchers[] = {
    {HK_PLACEMENT_HKRUN, "HK_RANK", "HK_SIZE", NULL, "HK_LOCAL_RANK",
     "HK_LOCAL_SIZE"},
    {HK_PLACEMENT_OMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL,
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {HK_PLACEMENT_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS",
     "SLURM_LOCALID", NULL},
};

const char *hk_placement_source_name(hk_placement_source s) {
  switch (s) {
  case HK_PLACEMENT_HKRUN:
    return "hkrun";
  case HK_PLACEMENT_OMPI:
    return "Open MPI";
  case HK_PLACEMENT_SLURM:
    return "Slurm";
  default:
    return "no launcher";
  }
}

/* A launcher's variable: hkrun's (HK_*) through the table of settings
 * (common/config.h, the one reader of HK_* variables), the others' from
 * the environment. NULL when unset. */
static const char *env(const char *var) {
  return strncmp(var, "HK_", 3) == 0 ? hk_config_env(var) : getenv(var);
}

/* Parses a whole decimal integer in [lo, hi]; 0 on success. */
static int parse_int(const char *s, long lo, long hi, int *out) {
  if (!s || *s < '0' || *s > '9')
    return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

/* Reads variable var (which must be set) as an integer in [lo, hi]. */
static hk_status env_int(const char *var, long lo, long hi, int *out) {
  const char *s = env(var);
  if (parse_int(s, lo, hi, out) != 0)
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not an integer in [%ld, %ld]",
                   var, s, lo, hi);
  return HK_OK;
}

/* The variable a launcher's size is in (its alternative if only that is
 * set), or NULL. */
static const char *size_var(const launcher_vars *l) {
  if (env(l->size))
    return l->size;
  if (l->size_alt && env(l->size_alt))
    return l->size_alt;
  return NULL;
}

int hk_slurm_tasks_on_node(const char *list, int node) {
  if (!list || node < 0)
    return -1;
  const char *p = list;
  long seen = 0;
  for (;;) {
    char *end;
    if (*p < '0' || *p > '9')
      return -1;
    long tasks = strtol(p, &end, 10);
    long reps = 1;
    p = end;
    if (p[0] == '(') {
      if (p[1] != 'x' || p[2] < '0' || p[2] > '9')
        return -1;
      reps = strtol(p + 2, &end, 10);
      if (*end != ')' || reps < 1)
        return -1;
      p = end + 1;
    }
    if (tasks > INT_MAX || reps > INT_MAX)
      return -1;
    if (node < seen + reps)
      return (int)tasks;
    seen += reps;
    if (*p == '\0')
      return -1;
    if (*p++ != ',')
      return -1;
  }
}

/* Slurm's local size, or -1 when none of its variables gives it. */
static hk_status slurm_local_size(int size, int *out) {
  *out = -1;
  const char *node_s = env("SLURM_NODEID");
  int node = -1;
  if (node_s && parse_int(node_s, 0, INT_MAX, &node) != 0)
    return hk_fail(HK_ERR_CONFIG, "SLURM_NODEID='%s' is not a node index",
                   node_s);
  static const char *const lists[] = {"SLURM_STEP_TASKS_PER_NODE",
                                      "SLURM_TASKS_PER_NODE"};
  for (int i = 0; i < 2 && node >= 0; i++) {
    const char *v = env(lists[i]);
    if (!v)
      continue;
    int n = hk_slurm_tasks_on_node(v, node);
    if (n < 1 || n > size)
      return hk_fail(HK_ERR_CONFIG,
                     "%s='%s' does not give a task count in [1, %d] for "
                     "SLURM_NODEID=%d",
                     lists[i], v, size, node);
    *out = n;
    return HK_OK;
  }
  if (env("SLURM_NTASKS_PER_NODE"))
    return env_int("SLURM_NTASKS_PER_NODE", 1, size, out);
  return HK_OK;
}

static hk_status read_launcher(const launcher_vars *l, hk_placement *out) {
  const char *sv = size_var(l);
  if (!sv)
    return hk_fail(HK_ERR_CONFIG, "%s is set but %s is not", l->rank, l->size);
  out->source = l->source;
  hk_status st = env_int(sv, 1, HK_WIRE_MAX_RANKS, &out->size);
  if (st == HK_OK)
    st = env_int(l->rank, 0, out->size - 1, &out->rank);
  if (st != HK_OK)
    return st;
  if (l->local_size) {
    out->local_size = out->size; /* hkrun: unset means all local */
    if (env(l->local_size))
      st = env_int(l->local_size, 1, out->size, &out->local_size);
    else if (l->source != HK_PLACEMENT_HKRUN)
      return hk_fail(HK_ERR_CONFIG, "%s is set but %s is not", l->rank,
                     l->local_size);
    else if (env(l->local_rank)) /* a host's rank without its size */
      return hk_fail(HK_ERR_CONFIG,
                     "%s is set but %s is not: set both (the ranks of one "
                     "host) or neither (every rank on this host)",
                     l->local_rank, l->local_size);
  } else {
    st = slurm_local_size(out->size, &out->local_size);
  }
  if (st != HK_OK)
    return st;
  int lr_hi = out->local_size > 0 ? out->local_size - 1 : out->size - 1;
  if (env(l->local_rank))
    return env_int(l->local_rank, 0, lr_hi, &out->local_rank);
  if (l->source == HK_PLACEMENT_HKRUN) {
    out->local_rank = out->rank;
    if (out->local_rank > lr_hi)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_LOCAL_RANK is not set and HK_RANK=%d is not below "
                     "HK_LOCAL_SIZE=%d",
                     out->rank, out->local_size);
    return HK_OK;
  }
  return hk_fail(HK_ERR_CONFIG, "%s is set but %s is not", l->rank,
                 l->local_rank);
}

hk_status hk_placement_from_env(hk_placement *out) {
  *out = (hk_placement){0, 1, 0, 1, HK_PLACEMENT_NONE};
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    if (env(launchers[i].rank)) {
      hk_status st = read_launcher(&launchers[i], out);
      if (st != HK_OK)
        *out = (hk_placement){0, 1, 0, 1, HK_PLACEMENT_NONE};
      return st;
    }
  }
  return HK_OK;
}

/* ---- layout from host names ---- */

typedef struct by_host {
  const char *const *hosts;
} by_host;

static int cmp_rank_by_host(const void *a, const void *b, void *ctx) {
  const char *const *hosts = ((const by_host *)ctx)->hosts;
  int ra = *(const int *)a, rb = *(const int *)b;
  int c = strcmp(hosts[ra], hosts[rb]);
  return c ? c : (ra > rb) - (ra < rb);
}

hk_status hk_layout_from_hosts(const char *const *hosts, int size,
                               hk_rank_layout *out) {
  if (size < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "host layout: size %d is not positive",
                   size);
  for (int r = 0; r < size; r++)
    if (!hosts[r] || !hosts[r][0])
      return hk_fail(HK_ERR_INVALID_ARG,
                     "host layout: rank %d has no host name", r);
  int *order = malloc((size_t)size * sizeof *order);
  int *host_of = malloc((size_t)size * sizeof *host_of); /* group -> lowest */
  if (!order || !host_of) {
    free(order);
    free(host_of);
    return hk_fail(HK_ERR_NOMEM, "host layout: cannot allocate for %d ranks",
                   size);
  }
  for (int r = 0; r < size; r++)
    order[r] = r;
  by_host ctx = {hosts};
  qsort_r(order, (size_t)size, sizeof *order, cmp_rank_by_host, &ctx);
  /* Groups of equal names are runs in `order`, each in rank order, so a
   * group's first entry is its lowest rank. Mark each lowest rank, then
   * number the hosts by walking ranks upwards. */
  for (int r = 0; r < size; r++)
    host_of[r] = -1;
  for (int i = 0; i < size;) {
    int j = i;
    while (j < size && strcmp(hosts[order[j]], hosts[order[i]]) == 0)
      j++;
    for (int k = i; k < j; k++) {
      out[order[k]].local_rank = k - i;
      out[order[k]].local_size = j - i;
    }
    host_of[order[i]] = 0; /* order[i] is the lowest rank of its host */
    i = j;
  }
  int hosts_n = 0;
  for (int r = 0; r < size; r++)
    if (host_of[r] == 0)
      host_of[r] = hosts_n++ + 1; /* 1-based here; -1: not a lowest rank */
  /* Each rank takes its host's number from that host's lowest rank, which
   * is the first entry of its run in `order`. */
  for (int i = 0; i < size; i++) {
    int r = order[i];
    int lowest = order[i - out[r].local_rank];
    out[r].cross_rank = host_of[lowest] - 1;
    out[r].cross_size = hosts_n;
  }
  free(order);
  free(host_of);
  return HK_OK;
}

int hk_layout_uniform(const hk_rank_layout *layout, int size) {
  for (int r = 1; r < size; r++)
    if (layout[r].local_size != layout[0].local_size)
      return 0;
  return 1;
}
