/*
 * delegate.c - hands a multi-host job to mpirun (see delegate.h). The
 * decisions are the pure functions of hosts.c and mpirun.c; this file
 * only does their I/O: reading the host file, the environment, running
 * mpirun (remote.c probes the hosts first and supervises it).
 */
#include "launcher/delegate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/transport/iface.h"
#include "common/auth.h"
#include "common/config.h"
#include "common/status.h"
#include "launcher/argv.h"
#include "launcher/hosts.h"
#include "launcher/mpirun.h"
#include "launcher/output.h"
#include "launcher/remote.h"

extern char **environ;

/* Largest host file read, in bytes. */
#define HOSTFILE_MAX (1u << 20)

/* Reads the whole host file into *text (malloc'ed) and parses it. */
static hk_status load_hostfile(const char *path, hk_hostlist *out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return hk_fail_errno(HK_ERR_INVALID_ARG, errno,
                         "--hostfile: cannot open '%s'", path);
  char *text = malloc(HOSTFILE_MAX + 1);
  if (!text) {
    fclose(f);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate for the host file");
  }
  size_t len = fread(text, 1, HOSTFILE_MAX + 1, f);
  int read_error = ferror(f);
  fclose(f);
  hk_status st;
  if (read_error)
    st = hk_fail(HK_ERR_INVALID_ARG, "--hostfile: cannot read '%s'", path);
  else if (len > HOSTFILE_MAX)
    st = hk_fail(HK_ERR_INVALID_ARG, "--hostfile: '%s' is larger than %u bytes",
                 path, HOSTFILE_MAX);
  else
    st = hk_hosts_parse_file(text, len, path, out);
  free(text);
  return st;
}

/* Exit status for a failed step: 1 when out of memory, else 2. */
static int fail_status(hk_status st) {
  hk_out_say("%s", hk_last_error());
  return st == HK_ERR_NOMEM ? 1 : 2;
}

/* Whether --mpi-args sets Open MPI's parameter `name` itself. */
static int mpi_args_set(const char *mpi_args, const char *name) {
  hk_argv w = {0};
  int found = 0;
  if (mpi_args && hk_argv_split(&w, mpi_args, "--mpi-args") == HK_OK)
    for (int i = 0; i + 1 < w.n && !found; i++)
      found = strcmp(w.v[i + 1], name) == 0 &&
              (!strcmp(w.v[i], "--mca") || !strcmp(w.v[i], "-mca") ||
               !strcmp(w.v[i], "--gmca") || !strcmp(w.v[i], "-gmca"));
  hk_argv_free(&w);
  return found;
}

/* Sets up the environment, checks every host answers, builds the command
 * and runs mpirun under hkrun's supervision (remote.h). Returns hkrun's
 * exit status. */
static int run_mpirun(const hkrun_args *args, const hk_hostlist *hosts,
                      const char *me) {
  hk_secret secret;
  char hex[2 * HK_SECRET_LEN + 1];
  if (hk_secret_generate(&secret) != HK_OK) {
    hk_out_say("%s", hk_last_error());
    return 1;
  }
  hk_secret_format(&secret, hex);
  memset(secret.bytes, 0, sizeof secret.bytes);
  if (setenv("HK_SECRET", hex, 1) != 0 ||
      (args->network_interface &&
       setenv("HK_SOCKET_IFNAME", args->network_interface, 1) != 0)) {
    hk_out_say("setenv: %s", strerror(errno));
    return 1;
  }
  memset(hex, 0, sizeof hex);
  /* An enclosing hkrun job's per-process variables would tell every rank
   * the wrong place (and take priority over Open MPI's). */
  for (const char *const *v = hk_mpirun_per_process_vars(); *v; v++)
    unsetenv(*v);

  /* Open MPI reaches the hosts over ssh (or the agent given): check that
   * each answers within the start timeout first, never prompting */
  hk_config cfg;
  double start_s = hk_config_load(&cfg) == HK_OK ? cfg.start_timeout_s : 60;
  char *agent = hk_remote_agent(args->mpi_args);
  char ssh_opts[96], probe_ssh[4400];
  const char *rsh_args = NULL;
  if (hk_remote_uses_rsh()) {
    hk_remote_ssh_options(start_s, ssh_opts, sizeof ssh_opts);
    hk_mpirun_rsh_args(ssh_opts, args->ssh_port, args->ssh_identity_file,
                       probe_ssh, sizeof probe_ssh);
    if (hk_remote_probe(hosts, me, agent, probe_ssh, start_s) != 0) {
      free(agent);
      return 1;
    }
    if (!agent && !getenv("OMPI_MCA_plm_rsh_args") &&
        !mpi_args_set(args->mpi_args, "plm_rsh_args"))
      rsh_args = ssh_opts;
  }
  free(agent);
  /* IPv6 hosts reach Open MPI through a host file (its -H would read the
   * address's ':' as the slot count); removed when mpirun has ended */
  char hostfile[64] = "";
  if (hosts->n > 0 && hk_hosts_has_ipv6(hosts)) {
    const char *tmp = getenv("TMPDIR");
    snprintf(hostfile, sizeof hostfile, "%s/hkrun-hosts.XXXXXX",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    int fd = mkstemp(hostfile);
    char *text = hk_hosts_file_text(hosts);
    int ok = fd >= 0 && text && hk_out_write_all(fd, text, strlen(text)) == 0;
    free(text);
    if (fd >= 0)
      close(fd);
    if (!ok) {
      hk_out_say("cannot write the host file for mpirun (%s): %s", hostfile,
                 strerror(errno));
      if (fd >= 0)
        unlink(hostfile);
      return 1;
    }
  }
  long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
  hk_mpirun_spec spec = {
      .mpirun = "mpirun",
      .np = args->np,
      .hosts = hosts,
      .hostfile = hostfile[0] ? hostfile : NULL,
      .bind_to = args->bind_to,
      .network_interface = args->network_interface,
      .mpi_args = args->mpi_args,
      .rsh_args = rsh_args,
      .as_root = geteuid() == 0,
      .tag_output = args->tag_output,
      .ncpus = ncpus > 0 ? (int)ncpus : 1,
      .output_filename = args->output_filename,
      .ssh_port = args->ssh_port,
      .ssh_identity_file = args->ssh_identity_file,
      .tcp_only = args->tcp,
      .env_x = args->env_x,
      .n_env_x = args->n_env_x,
      .envp = environ,
      .prog_argv = args->prog_argv,
      .prog_argc = args->prog_argc,
  };
  hk_argv cmd = {0};
  hk_status st = hk_mpirun_build(&spec, &cmd);
  if (st != HK_OK) {
    hk_argv_free(&cmd);
    if (hostfile[0])
      unlink(hostfile);
    return fail_status(st);
  }
  if (args->verbose) {
    char *line = hk_argv_format(&cmd);
    hk_out_say("exec: %s", line ? line : "(out of memory)");
    free(line);
  }
  int rc = hk_remote_run(&cmd, args->grace_period_s);
  hk_argv_free(&cmd);
  if (hostfile[0])
    unlink(hostfile);
  return rc;
}

/* One host: the interface --network-interface or HK_SOCKET_IFNAME names
 * must exist here, as on many hosts (each rank checks it again at
 * hk_init); checked before anything starts. */
static int check_local_interface(const hkrun_args *args) {
  hk_config cfg;
  if (hk_config_load_var(&cfg, "HK_SOCKET_IFNAME") != HK_OK) {
    hk_out_say("%s", hk_last_error()); /* longer than an interface name */
    return 2;
  }
  const char *ifname = cfg.socket_ifname;
  if (!*ifname)
    return HKRUN_RUN_LOCALLY;
  char addr[HK_IFACE_ADDR_CAP];
  if (hk_iface_address(ifname, addr, sizeof addr) == HK_OK)
    return HKRUN_RUN_LOCALLY;
  hk_out_say("%s: %s",
             args->network_interface ? "--network-interface"
                                     : "HK_SOCKET_IFNAME",
             hk_last_error());
  return 2;
}

int hkrun_delegate(hkrun_args *args) {
  if (!args->hosts && !args->hostfile && !args->mpi) {
    if (args->mpi_args) {
      hk_out_say(
          "--mpi-args applies only when hkrun starts mpirun (several hosts, "
          "or --mpi)");
      return 2;
    }
    if (args->network_interface &&
        setenv("HK_SOCKET_IFNAME", args->network_interface, 1) != 0) {
      hk_out_say("setenv: %s", strerror(errno));
      return 1;
    }
    return check_local_interface(args);
  }
  hk_hostlist hosts = {0};
  hk_status st = HK_OK;
  if (args->hosts)
    st = hk_hosts_parse_list(args->hosts, "-H", &hosts);
  else if (args->hostfile)
    st = load_hostfile(args->hostfile, &hosts);
  if (st != HK_OK)
    return fail_status(st);
  if (hosts.n > 0 && args->np == 0)
    args->np = hosts.total_slots > HKRUN_MAX_NP ? HKRUN_MAX_NP
                                                : (int)hosts.total_slots;
  if (hosts.n > 0 && (st = hk_hosts_check_np(&hosts, args->np)) != HK_OK) {
    hk_hosts_free(&hosts);
    return fail_status(st);
  }
  char me[256] = "";
  if (gethostname(me, sizeof me - 1) != 0)
    me[0] = '\0';
  int rc = HKRUN_RUN_LOCALLY;
  if (hk_mpirun_wanted(args->mpi, &hosts, me)) {
    rc = run_mpirun(args, &hosts, me);
  } else if (args->mpi_args) {
    hk_out_say(
        "--mpi-args applies only when hkrun starts mpirun (several hosts, or "
        "--mpi)");
    rc = 2;
  } else if (args->network_interface &&
             setenv("HK_SOCKET_IFNAME", args->network_interface, 1) != 0) {
    hk_out_say("setenv: %s", strerror(errno));
    rc = 1;
  } else {
    rc = check_local_interface(args);
  }
  hk_hosts_free(&hosts);
  return rc;
}
