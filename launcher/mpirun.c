/*
 * mpirun.c - builds hkrun's mpirun command line (see mpirun.h). Pure.
 */
#include "launcher/mpirun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

static const char *const per_process[] = {
    "HK_RANK",       "HK_SIZE",         "HK_LOCAL_RANK",
    "HK_LOCAL_SIZE", "HK_CROSS_RANK",   "HK_CROSS_SIZE",
    "HK_RENDEZVOUS", "HK_LAUNCHER_PID", NULL};

const char *const *hk_mpirun_per_process_vars(void) { return per_process; }

int hk_mpirun_forwarded(const char *name, size_t len) {
  /* hk's variables, and Horovod's that hk reads in their place */
  size_t prefix = len > 3 && strncmp(name, "HK_", 3) == 0        ? 3
                  : len > 8 && strncmp(name, "HOROVOD_", 8) == 0 ? 8
                                                                 : 0;
  if (!prefix)
    return 0;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  for (int i = 0; per_process[i]; i++)
    if (strlen(per_process[i]) == len && memcmp(per_process[i], name, len) == 0)
      return 0;
  return 1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Pushes "-x NAME" for every forwarded variable of envp, sorted, once. */
static hk_status push_env(hk_argv *out, char *const *envp) {
  hk_argv names = {0};
  hk_status st = HK_OK;
  for (char *const *e = envp; e && *e && st == HK_OK; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || !hk_mpirun_forwarded(*e, (size_t)(eq - *e)))
      continue;
    char *name = strndup(*e, (size_t)(eq - *e));
    if (!name)
      st = hk_fail(HK_ERR_NOMEM, "cannot copy an environment name");
    else
      st = hk_argv_push(&names, name);
    free(name);
  }
  if (st == HK_OK && names.n > 0)
    qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);
  for (int i = 0; i < names.n && st == HK_OK; i++) {
    if (i > 0 && strcmp(names.v[i], names.v[i - 1]) == 0)
      continue;
    st = hk_argv_push(out, "-x");
    if (st == HK_OK)
      st = hk_argv_push(out, names.v[i]);
  }
  hk_argv_free(&names);
  return st;
}

const char *hk_mpirun_rsh_args(const char *rsh_args, const char *port,
                               const char *identity, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s%s%s%s%s", rsh_args ? rsh_args : "",
           rsh_args && (port || identity) ? " " : "", port ? "-p " : "",
           port ? port : "",
           port && identity ? " -i "
           : identity       ? "-i "
                            : "",
           identity ? identity : "");
  return buf;
}

hk_status hk_mpirun_build(const hk_mpirun_spec *s, hk_argv *out) {
  if (s->np < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "mpirun: -np %d is not positive", s->np);
  if (s->prog_argc < 1 || !s->prog_argv || !s->prog_argv[0])
    return hk_fail(HK_ERR_INVALID_ARG, "mpirun: no program given");
  char np[16];
  snprintf(np, sizeof np, "%d", s->np);
  int have_hosts = s->hosts && s->hosts->n > 0;

  hk_status st = hk_argv_push(out, s->mpirun ? s->mpirun : "mpirun");
  if (st == HK_OK && s->as_root)
    st = hk_argv_push(out, "--allow-run-as-root");
  if (st == HK_OK)
    st = hk_argv_push_all(out, (const char *const[]){"-np", np, NULL});
  if (st == HK_OK && have_hosts && s->hostfile) {
    st = hk_argv_push_all(
        out, (const char *const[]){"--hostfile", s->hostfile, NULL});
  } else if (st == HK_OK && have_hosts) {
    char *joined = hk_hosts_join(s->hosts);
    st = joined
             ? hk_argv_push_all(out, (const char *const[]){"-H", joined, NULL})
             : hk_fail(HK_ERR_NOMEM, "cannot format the host list");
    free(joined);
  }
  if (st == HK_OK)
    st = hk_argv_push_all(
        out, (const char *const[]){"--map-by", "slot", "--bind-to",
                                   s->bind_to ? s->bind_to : "none", NULL});
  if (st == HK_OK && !have_hosts && s->ncpus > 0 && s->np > s->ncpus)
    st = hk_argv_push(out, "--oversubscribe");
  if (st == HK_OK && s->tag_output)
    st = hk_argv_push(out, "--tag-output");
  if (st == HK_OK && s->output_filename)
    st = hk_argv_push_all(out, (const char *const[]){"--output-filename",
                                                     s->output_filename, NULL});
  if (st == HK_OK && s->network_interface) {
    const char *i = s->network_interface;
    st = hk_argv_push_all(
        out, (const char *const[]){"--mca", "btl_tcp_if_include", i, "--mca",
                                   "oob_tcp_if_include", i, NULL});
  }
  char ssh[4400];
  if (st == HK_OK &&
      hk_mpirun_rsh_args(s->rsh_args, s->ssh_port, s->ssh_identity_file, ssh,
                         sizeof ssh)[0])
    st = hk_argv_push_all(
        out, (const char *const[]){"--mca", "plm_rsh_args", ssh, NULL});
  if (st == HK_OK && s->tcp_only)
    st = hk_argv_push_all(out,
                          (const char *const[]){"--mca", "pml", "ob1", "--mca",
                                                "btl", "^openib", NULL});
  if (st == HK_OK)
    st = push_env(out, s->envp);
  for (int i = 0; i < s->n_env_x && st == HK_OK; i++) {
    size_t n = strcspn(s->env_x[i], "=");
    int seen = hk_mpirun_forwarded(s->env_x[i], n); /* pushed above */
    for (int j = 0; j < i && !seen; j++)
      seen = strcspn(s->env_x[j], "=") == n &&
             strncmp(s->env_x[j], s->env_x[i], n) == 0;
    if (seen)
      continue;
    char *name = strndup(s->env_x[i], n);
    st = name ? hk_argv_push_all(out, (const char *const[]){"-x", name, NULL})
              : hk_fail(HK_ERR_NOMEM, "cannot copy a -x name");
    free(name);
  }
  if (st == HK_OK && s->mpi_args)
    st = hk_argv_split(out, s->mpi_args, "--mpi-args");
  if (st == HK_OK)
    st = hk_argv_push(out, "--");
  for (int i = 0; i < s->prog_argc && st == HK_OK; i++)
    st = hk_argv_push(out, s->prog_argv[i]);
  return st;
}

int hk_mpirun_wanted(int mpi_flag, const hk_hostlist *hosts,
                     const char *local_hostname) {
  if (mpi_flag)
    return 1;
  if (!hosts || hosts->n == 0)
    return 0;
  if (hosts->n > 1)
    return 1;
  const char *h = hosts->v[0].name;
  if (strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0)
    return 0;
  if (local_hostname && *local_hostname) {
    if (strcmp(h, local_hostname) == 0)
      return 0;
    size_t label = strcspn(local_hostname, ".");
    if (strlen(h) == label && strncmp(h, local_hostname, label) == 0)
      return 0;
  }
  return 1;
}
