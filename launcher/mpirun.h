/*
 * mpirun.h - the Open MPI command line hkrun runs for a job on several
 * hosts (or with --mpi). One pure function builds it from the parsed
 * options, the hosts and an environment; launcher/delegate.c execs it.
 *
 * The command, in this order (words in [] only when they apply):
 *
 *   mpirun [--allow-run-as-root] -np N [-H h1:s1,h2:s2,... | --hostfile F]
 *          --map-by slot --bind-to POLICY [--oversubscribe] [--tag-output]
 *          [--output-filename DIR]
 *          [--mca btl_tcp_if_include IF --mca oob_tcp_if_include IF]
 *          [--mca plm_rsh_args "RSH_ARGS -p PORT -i FILE"]
 *          [--mca pml ob1 --mca btl ^openib]
 *          -x HK_A -x HK_B ... [-x NAME ...]  [MPI_ARGS...]  -- program args...
 *
 * - -H lists every host with its slots (--hostfile F instead when the
 *   caller wrote them into F: Open MPI reads IPv6 addresses there, where
 *   its -H would take their ':' for the slot count), and --map-by slot fills
 * each host's slots in rank order, so a host's ranks are contiguous (hosts in
 *   the order given: ranks 0..s1-1 on h1, and so on).
 * - --bind-to none by default: a worker runs the trainer's threads, hk's
 *   background thread and often a BLAS or data-loader pool; Open MPI's
 *   default (bind each rank to one core or socket when np > 2) would crowd
 *   them all onto that core. Horovod does the same.
 * - --oversubscribe only without -H and when np exceeds this machine's
 *   CPUs (with -H the slots are declared, and np <= their total is checked
 *   before this is built).
 * - -x NAME (the value comes from mpirun's environment, so the secret
 *   never appears on a command line) for every HK_* (and HOROVOD_*)
 *   variable of `envp`
 *   except those that describe one process of one launch, which Open MPI
 *   provides instead (hk reads OMPI_COMM_WORLD_*): see hk_mpirun_forwarded.
 *   The caller puts HK_SECRET (and HK_SOCKET_IFNAME for --network-
 *   interface) into the environment first; names are sorted, each once.
 * - -x NAME for every name hkrun's own -x options gave (after the HK_*
 *   ones, in command-line order, each once): the caller sets
 *   NAME=value in the environment for -x NAME=value.
 * - --network-interface IF (an interface name or a CIDR subnet) becomes
 *   Open MPI's btl_tcp_if_include and oob_tcp_if_include.
 * - plm_rsh_args, the arguments of the ssh Open MPI starts its daemons
 *   with (hk_mpirun_rsh_args): RSH_ARGS, the options hkrun gives ssh
 *   (remote.h: never prompt, give up connecting after the start timeout;
 *   the caller leaves it NULL when --mpi-args names an agent or its own
 *   plm_rsh_args), then -p/--ssh-port and -i/--ssh-identity-file as
 *   horovodrun passes them.
 * - --tcp: Open MPI's TCP only, as horovodrun's --tcp does.
 * - --output-filename DIR: mpirun's (files DIR/1/rank.N/stdout...).
 * - MPI_ARGS: the words of --mpi-args, split as sh would (argv.h), after
 *   hkrun's own, so they can add to them (e.g. --mca plm_rsh_agent PATH).
 */
#ifndef HK_LAUNCHER_MPIRUN_H
#define HK_LAUNCHER_MPIRUN_H

#include "hk/hk.h"
#include "launcher/argv.h"
#include "launcher/hosts.h"

typedef struct hk_mpirun_spec {
  const char *mpirun;       /* program to run: "mpirun" (searched in PATH) */
  int np;                   /* ranks, >= 1 */
  const hk_hostlist *hosts; /* NULL or empty: no -H (mpirun's host only) */
  const char *hostfile;     /* NULL, or a host file holding `hosts`, given
                               as --hostfile instead of -H (IPv6 hosts) */
  const char *bind_to;      /* --bind-to value; NULL means "none" */
  const char *network_interface; /* NULL, or an interface name / CIDR */
  const char *mpi_args;          /* NULL, or extra words (sh-split) */
  const char *rsh_args;          /* NULL, or Open MPI's plm_rsh_args */
  int as_root;                   /* 1: add --allow-run-as-root (euid 0) */
  int tag_output;                /* 1: add --tag-output */
  int ncpus;                     /* CPUs of this machine, for --oversubscribe */
  const char *output_filename;   /* NULL, or mpirun's --output-filename */
  const char *ssh_port;          /* NULL, or ssh's -p */
  const char *ssh_identity_file; /* NULL, or ssh's -i */
  int tcp_only;                  /* 1: --mca pml ob1 --mca btl ^openib */
  const char *const *env_x;      /* hkrun's -x values: "NAME" or
                                    "NAME=value" (only NAME is used) */
  int n_env_x;
  char *const *envp;      /* "NAME=value" strings, NULL-terminated */
  char *const *prog_argv; /* program and its arguments */
  int prog_argc;          /* >= 1 */
} hk_mpirun_spec;

/**
 * Builds the command line into *out (empty on entry; the caller frees it
 * with hk_argv_free, also after an error). Borrowed strings are copied.
 * Errors: HK_ERR_INVALID_ARG (a bad --mpi-args, see hk_argv_split; np < 1;
 * no program), HK_ERR_NOMEM. Pure; reentrant.
 */
hk_status hk_mpirun_build(const hk_mpirun_spec *s, hk_argv *out);

/**
 * The arguments of the ssh Open MPI runs (plm_rsh_args), also what hkrun's
 * probes give ssh (remote.h): "RSH_ARGS -p PORT -i FILE", each part only
 * when given (any may be NULL); "" when none is. Written into buf (cap
 * bytes, cut to fit); returns buf. Pure; reentrant.
 */
const char *hk_mpirun_rsh_args(const char *rsh_args, const char *port,
                               const char *identity, char *buf, size_t cap);

/**
 * 1 if the environment variable NAME (the part before '=') is forwarded
 * with -x: it starts with "HK_" (or "HOROVOD_": Horovod's variables, which
 * common/config.h reads where hk's are unset), has only [A-Z0-9_], and
 * is not one of
 * HK_RANK, HK_SIZE, HK_LOCAL_RANK, HK_LOCAL_SIZE, HK_CROSS_RANK,
 * HK_CROSS_SIZE, HK_RENDEZVOUS, HK_LAUNCHER_PID (one process's place, or
 * a local hkrun's address, all wrong on another host). len is NAME's
 * length in bytes.
 */
int hk_mpirun_forwarded(const char *name, size_t len);

/** The names hk_mpirun_forwarded refuses, NULL-terminated (static). */
const char *const *hk_mpirun_per_process_vars(void);

/**
 * Whether hkrun hands the job to mpirun: with --mpi, with more than one
 * host, or with one host that is not this one (a name other than
 * "localhost", "127.0.0.1" and local_hostname, compared as written, and
 * also against local_hostname's first label). hosts may be NULL.
 */
int hk_mpirun_wanted(int mpi_flag, const hk_hostlist *hosts,
                     const char *local_hostname);

#endif
