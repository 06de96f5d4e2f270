/*
 * bind.c - --bind-to's CPU sets (bind.h): the pure choice, and reading
 * this machine's CPUs from sched_getaffinity and sysfs.
 */
#include "launcher/bind.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

static int cmp_cpu(const void *a, const void *b) {
  const hk_cpu *x = a, *y = b;
  if (x->package != y->package)
    return x->package < y->package ? -1 : 1;
  if (x->core != y->core)
    return x->core < y->core ? -1 : 1;
  return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int same_core(const hk_cpu *a, const hk_cpu *b) {
  return a->package == b->package && a->core == b->core;
}

int hk_bind_count(const hk_cpu *v, int n, hkrun_bind policy) {
  int count = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++)
      seen = policy == HKRUN_BIND_HWTHREAD ? 0
             : policy == HKRUN_BIND_SOCKET ? v[j].package == v[i].package
             : policy == HKRUN_BIND_NUMA   ? v[j].node == v[i].node
                                           : same_core(&v[j], &v[i]);
    count += !seen;
  }
  return count;
}

int hk_bind_cpus(hk_cpu *v, int n, hkrun_bind policy, int rank, int *out,
                 int cap, int *shared) {
  if (shared)
    *shared = 0;
  if (policy == HKRUN_BIND_NONE || n <= 0 || rank < 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_cpu);
  int k = 0;
  if (policy == HKRUN_BIND_HWTHREAD) {
    if (shared)
      *shared = rank >= n;
    if (cap > 0)
      out[k++] = v[rank % n].cpu;
    return k;
  }
  /* the (rank mod C)-th core: the index of its first CPU in v */
  int cores = hk_bind_count(v, n, HKRUN_BIND_CORE);
  int want = rank % cores, first = 0;
  for (int i = 0, c = -1; i < n; i++) {
    if (i == 0 || !same_core(&v[i], &v[i - 1]))
      c++;
    if (c == want) {
      first = i;
      break;
    }
  }
  if (shared)
    *shared = rank >= cores;
  const hk_cpu *mine = &v[first];
  for (int i = 0; i < n && k < cap; i++) {
    int take = policy == HKRUN_BIND_SOCKET ? v[i].package == mine->package
               : policy == HKRUN_BIND_NUMA ? v[i].node == mine->node
                                           : same_core(&v[i], mine);
    if (take)
      out[k++] = v[i].cpu;
  }
  qsort(out, (size_t)k, sizeof *out, cmp_int);
  if (shared && policy != HKRUN_BIND_CORE)
    *shared = 0; /* ranks share sockets and nodes by design */
  return k;
}

void hk_bind_format(const int *cpus, int n, char *buf, size_t cap) {
  size_t used = 0;
  if (cap)
    buf[0] = '\0';
  for (int i = 0; i < n && used < cap; i++) {
    int j = i;
    while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
      j++;
    int w =
        j > i ? snprintf(buf + used, cap - used, "%s%d-%d", i ? "," : "",
                         cpus[i], cpus[j])
              : snprintf(buf + used, cap - used, "%s%d", i ? "," : "", cpus[i]);
    if (w < 0)
      break;
    used += (size_t)w;
    i = j;
  }
}

/* An integer from a one-line sysfs file, or def. */
static int read_int_file(const char *path, int def) {
  FILE *f = fopen(path, "r");
  if (!f)
    return def;
  int v = def;
  if (fscanf(f, "%d", &v) != 1)
    v = def;
  fclose(f);
  return v;
}

/* Does the kernel list "0-3,8" (sysfs cpulist) hold cpu? */
static int list_has(const char *list, int cpu) {
  const char *p = list;
  while (*p) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p)
      return 0;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      p = end;
    }
    if (cpu >= a && cpu <= b)
      return 1;
    if (*p == ',')
      p++;
    else
      break;
  }
  return 0;
}

/* Sets v[i].node from /sys/devices/system/node/node<N>/cpulist (read
 * once per node; CPUs no node lists stay on node 0). */
static void read_nodes(hk_cpu *v, int n) {
  DIR *d = opendir("/sys/devices/system/node");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    int node;
    char tail;
    if (sscanf(e->d_name, "node%d%c", &node, &tail) != 1 || node < 0)
      continue;
    char path[300], list[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/%s/cpulist",
             e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    if (fgets(list, sizeof list, f))
      for (int i = 0; i < n; i++)
        if (list_has(list, v[i].cpu))
          v[i].node = node;
    fclose(f);
  }
  if (d)
    closedir(d);
}

hk_status hk_bind_read_cpus(hk_cpu **out, int *n) {
  *out = NULL;
  *n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "sched_getaffinity");
  int count = CPU_COUNT(&set);
  hk_cpu *v = calloc((size_t)(count > 0 ? count : 1), sizeof *v);
  if (!v)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %d CPUs", count);
  int k = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && k < count; cpu++) {
    if (!CPU_ISSET(cpu, &set))
      continue;
    char path[128];
    snprintf(path, sizeof path,
             "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    v[k].cpu = cpu;
    v[k].package = read_int_file(path, 0);
    if (v[k].package < 0)
      v[k].package = 0;
    snprintf(path, sizeof path,
             "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
    v[k].core = read_int_file(path, cpu);
    v[k].node = 0;
    k++;
  }
  read_nodes(v, k);
  *out = v;
  *n = k;
  return HK_OK;
}
