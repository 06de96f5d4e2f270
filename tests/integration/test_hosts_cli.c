/*
 * test_hosts_cli.c - hkrun with -H/--hostfile/--mpi, end to end:
 * - command lines that must fail before anything is started (case C7's
 *   "17 processes requested but only 16 slots" and its neighbours), table
 *   driven: hkrun exits 2 with the exact message, and neither mpirun nor
 *   the program ran;
 * - the mpirun path against a stand-in `mpirun` (a script first in PATH
 *   that records its argv, HK_* environment and pid) and a stand-in `ssh`
 *   (answers for some hosts, fails or hangs for others, records its
 *   arguments): the command line, the forwarded variables, the exit status
 *   passed through, a missing mpirun; hosts probed before anything starts
 *   (never prompting, bounded by HK_START_TIMEOUT_S, named as typed,
 *   nothing left behind); Ctrl-C through mpirun exits 130;
 * - one local host given with -H runs through hkrun's own launcher.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#ifndef HKRUN_PATH
#error "HKRUN_PATH must name the hkrun binary"
#endif

#define FAST_S 20.0

/* The scratch directory: fake mpirun, host files, markers. The stand-in
 * writes its arguments after argv[0], one per line, to argv_file. */
static char dir[96];
static char path_env[4200];  /* "PATH=<dir>:<PATH>" */
static char argv_file[128];  /* what the fake mpirun got */
static char env_file[128];   /* its HK_* variables */
static char pid_file[128];   /* its pid */
static char marker[128];     /* the program touches it if it ever runs */
static char ssh_log[128];    /* the stand-in ssh's arguments, one line each */
static char agent_path[128]; /* a stand-in plm_rsh_agent */

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static int setup_dir(void **state) {
  (void)state;
  if (hkt_mkdtemp("hk-hosts-cli.", dir, sizeof dir) != 0)
    return -1;
  snprintf(argv_file, sizeof argv_file, "%s/argv", dir);
  snprintf(env_file, sizeof env_file, "%s/env", dir);
  snprintf(pid_file, sizeof pid_file, "%s/pid", dir);
  snprintf(marker, sizeof marker, "%s/program-ran", dir);
  char path[160];
  snprintf(path, sizeof path, "%s/mpirun", dir);
  write_file(path,
             "#!/bin/sh\n"
             "# stand-in for Open MPI's mpirun: records what hkrun gave it\n"
             "d=$(dirname \"$0\")\n"
             "echo $$ > \"$d/pid\"\n"
             "for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$d/argv\"\n"
             "env | grep -E '^(HK_|HKT_X)' | sort > \"$d/env\"\n"
             "prev=; for a in \"$@\"; do [ \"$prev\" = --hostfile ] && "
             "cp \"$a\" \"$d/hostfile.copy\"; prev=$a; done\n"
             "[ -n \"$FAKE_MPIRUN_SLEEP\" ] && exec sleep $FAKE_MPIRUN_SLEEP\n"
             "exit ${FAKE_MPIRUN_STATUS:-0}\n",
             0755);
  /* stand-in ssh: hosts "h*"/"a"/"b"/"good*" answer, "unreachable*" is
   * unknown (as ssh says it), "blackhole*" never answers */
  snprintf(ssh_log, sizeof ssh_log, "%s/ssh.log", dir);
  snprintf(path, sizeof path, "%s/ssh", dir);
  write_file(path,
             "#!/bin/sh\n"
             "d=$(dirname \"$0\")\n"
             "echo \"$*\" >> \"$d/ssh.log\"\n"
             "while [ $# -gt 0 ]; do case $1 in -o) shift 2;; -*) shift;; "
             "*) break;; esac; done\n"
             "case $1 in\n"
             "  unreachable*) echo \"ssh: Could not resolve hostname $1: "
             "Name or service not known\" >&2; exit 255;;\n"
             "  blackhole*) exec sleep 1000;;\n"
             "esac\n"
             "exit 0\n",
             0755);
  snprintf(agent_path, sizeof agent_path, "%s/agent", dir);
  write_file(agent_path,
             "#!/bin/sh\n"
             "echo \"agent $*\" >> \"$(dirname \"$0\")/ssh.log\"\n"
             "exit 0\n",
             0755);
  snprintf(path, sizeof path, "%s/hosts16", dir);
  write_file(path, "# two 8-slot servers\n\nh1 slots=8\nh2:8   \n", 0644);
  snprintf(path, sizeof path, "%s/hostsbad", dir);
  write_file(path, "h1 slots=8\nh2 slots=x\n", 0644);
  const char *p = getenv("PATH");
  snprintf(path_env, sizeof path_env, "PATH=%s:%s", dir,
           p ? p : "/usr/bin:/bin");
  return 0;
}

static int teardown_dir(void **state) {
  (void)state;
  return hkt_remove_tree(dir);
}

static void reset_records(void) {
  unlink(ssh_log);
  unlink(argv_file);
  unlink(env_file);
  unlink(pid_file);
  unlink(marker);
}

static void dump(const hkt_result *r) {
  fprintf(stderr,
          "--- exit %d signal %d timed_out %d\n--- stdout:\n%.4000s\n"
          "--- stderr:\n%.4000s\n",
          r->exit_code, r->signal, r->timed_out, r->out, r->err);
}

/* ---- refused before anything starts ---- */

typedef struct refused_case {
  const char *args[10]; /* between hkrun and "--" */
  const char *message;  /* the whole stderr line, after "hkrun: " */
} refused_case;

static const refused_case refused[] = {
    {{"-np", "17", "-H", "a:8,b:8"},
     "17 processes requested but only 16 slots"},
    {{"-np", "17", "--hostfile", "@/hosts16"},
     "17 processes requested but only 16 slots"},
    {{"-np", "3", "-H", "localhost:2"},
     "3 processes requested but only 2 slots"},
    {{"-np", "2", "-H", "h:0"},
     "-H: 'h:0': the slot count must be a whole number from 1 to 65536, not "
     "'0'"},
    {{"-H", "localhost:10.0.0.2:2"},
     "-H: 'localhost:10.0.0.2:2': more than one ':' (write host:slots; an "
     "IPv6 address goes in brackets: [fe80::1]:4)"},
    {{"-H", ""}, "-H: the host list is empty"},
    {{"--hostfile", "@/hostsbad"},
     "@/hostsbad:2: 'slots=x': the slot count must be a whole number from 1 "
     "to 65536, not 'x'"},
    {{"--hostfile", "@/absent"},
     "--hostfile: cannot open '@/absent': No such file or directory"},
    {{"-H", "a:2,b:2", "--mpi-args", "--mca 'x"},
     "--mpi-args: ''x': unterminated single quote"},
    {{"-H", "localhost:2", "--mpi-args", "-x FOO"},
     "--mpi-args applies only when hkrun starts mpirun (several hosts, or "
     "--mpi)"},
};

/* Copies in to out with every "@" replaced by the scratch directory. */
static void expand(const char *in, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (; *in && n + 1 < cap; in++) {
    int w = *in == '@' ? snprintf(out + n, cap - n, "%s", dir)
                       : snprintf(out + n, cap - n, "%c", *in);
    n += (size_t)w;
  }
}

static void test_refused_before_start(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    reset_records();
    char buf[10][256], script[200], want[1024];
    char *argv[20];
    int n = 0;
    argv[n++] = HKRUN_PATH;
    for (int k = 0; refused[i].args[k]; k++) {
      expand(refused[i].args[k], buf[k], sizeof buf[k]);
      argv[n++] = buf[k];
    }
    snprintf(script, sizeof script, "touch '%s'", marker);
    argv[n++] = "--";
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = script;
    argv[n] = NULL;
    char *env[] = {path_env, NULL};
    hkt_result r;
    hkt_run(argv, env, FAST_S, &r);
    char msg[512];
    expand(refused[i].message, msg, sizeof msg);
    snprintf(want, sizeof want, "hkrun: %s\n", msg);
    if (!r.exited || r.exit_code != 2 || strcmp(r.err, want) != 0) {
      dump(&r);
      fail_msg("case %zu: expected exit 2 and stderr '%s'", i, want);
    }
    assert_string_equal(r.out, "");
    if (exists(argv_file) || exists(marker))
      fail_msg("case %zu: something was started", i);
    hkt_result_free(&r);
  }
}

/* ---- the mpirun path, against the stand-in ---- */

static void test_execs_mpirun(void **state) {
  (void)state;
  reset_records();
  char agent_arg[200];
  snprintf(agent_arg, sizeof agent_arg, "--mca plm_rsh_agent '%s'", agent_path);
  char *argv[] = {HKRUN_PATH,
                  "-v",
                  "-np",
                  "4",
                  "-H",
                  "a:2,b:2",
                  "--network-interface",
                  "eth9",
                  "--mpi-args",
                  agent_arg,
                  "--",
                  "/bin/sh",
                  "-c",
                  "echo $OMPI_COMM_WORLD_RANK",
                  NULL};
  /* an enclosing job's per-process variables, a tunable, a stale secret */
  char *env[] = {path_env,
                 "HK_RANK=3",
                 "HK_SIZE=9",
                 "HK_LOCAL_RANK=3",
                 "HK_RENDEZVOUS=x",
                 "HK_LAUNCHER_PID=1",
                 "HK_TIMEOUT_S=7",
                 "HK_SECRET=stale",
                 "FAKE_MPIRUN_STATUS=0",
                 NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  pid_t hkrun_pid = p.pid;
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun -H a:2,b:2 with the stand-in mpirun failed");
  }
  /* mpirun ran as hkrun's child, after the agent it names answered for
   * both hosts (and no ssh options were imposed on that agent) */
  char *pid = read_file(pid_file);
  assert_non_null(pid);
  assert_int_not_equal(strtol(pid, NULL, 10), hkrun_pid);
  char *probed = read_file(ssh_log);
  assert_non_null(probed);
  assert_non_null(strstr(probed, "agent a true\n"));
  assert_non_null(strstr(probed, "agent b true\n"));

  char want[2048];
  snprintf(want, sizeof want,
           "%s-np\n4\n-H\na:2,b:2\n--map-by\nslot\n--bind-to\nnone\n"
           "--tag-output\n--mca\nbtl_tcp_if_include\neth9\n--mca\n"
           "oob_tcp_if_include\neth9\n-x\nHK_SECRET\n-x\nHK_SOCKET_IFNAME\n"
           "-x\nHK_TIMEOUT_S\n--mca\nplm_rsh_agent\n%s\n--\n"
           "/bin/sh\n-c\necho $OMPI_COMM_WORLD_RANK\n",
           geteuid() == 0 ? "--allow-run-as-root\n" : "", agent_path);
  assert_string_equal(read_file(argv_file), want);

  /* what mpirun's environment holds: a fresh secret, the interface, the
   * tunable; none of the enclosing job's per-process variables */
  char *e = read_file(env_file);
  assert_non_null(e);
  const char *s = strstr(e, "HK_SECRET=");
  assert_non_null(s);
  assert_int_equal(strspn(s + 10, "0123456789abcdef"), 64);
  assert_int_equal(s[74], '\n');
  char secret[65];
  memcpy(secret, s + 10, 64);
  secret[64] = '\0';
  assert_non_null(strstr(e, "HK_SOCKET_IFNAME=eth9\n"));
  assert_non_null(strstr(e, "HK_TIMEOUT_S=7\n"));
  assert_null(strstr(e, "HK_RANK="));
  assert_null(strstr(e, "HK_SIZE="));
  assert_null(strstr(e, "HK_LOCAL_RANK="));
  assert_null(strstr(e, "HK_RENDEZVOUS="));
  assert_null(strstr(e, "HK_LAUNCHER_PID="));

  /* --verbose printed the command, without the secret's value */
  assert_non_null(strstr(r.err, "hkrun: exec: mpirun "));
  char shown[256];
  snprintf(shown, sizeof shown,
           "--mca plm_rsh_agent %s -- /bin/sh -c 'echo "
           "$OMPI_COMM_WORLD_RANK'\n",
           agent_path);
  assert_non_null(strstr(r.err, shown));
  assert_null(strstr(r.err, secret));
  hkt_result_free(&r);
}

/* horovodrun's and mpirun's flags on the mpirun path: -x (the value
 * set in mpirun's environment, the name on its command line), ssh's port
 * and identity through plm_rsh_args, --output-filename, --tcp, --bind-to,
 * and the tunables as HK_* variables. */
static void test_horovodrun_flags_to_mpirun(void **state) {
  (void)state;
  reset_records();
  char *argv[] = {HKRUN_PATH,
                  "-H",
                  "a:1,b:1",
                  "-x",
                  "HKT_X_FOO=bar baz",
                  "-x",
                  "HK_X=1",
                  "-x",
                  "HKT_X_SET",
                  "-p",
                  "2222",
                  "-i",
                  "/k/id",
                  "--output-filename",
                  "/tmp/o",
                  "--tcp",
                  "--bind-to",
                  "socket",
                  "--start-timeout",
                  "9",
                  "--log-level",
                  "INFO",
                  "--",
                  "true",
                  NULL};
  char *env[] = {path_env, "HKT_X_SET=here", NULL};
  hkt_result r;
  hkt_run(argv, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun -H a:1,b:1 with horovodrun's flags failed");
  }
  char want[2048];
  snprintf(want, sizeof want,
           "%s-np\n2\n-H\na:1,b:1\n--map-by\nslot\n--bind-to\nsocket\n"
           "--tag-output\n--output-filename\n/tmp/o\n--mca\nplm_rsh_args\n"
           "-o BatchMode=yes -o ConnectTimeout=9 -p 2222 -i "
           "/k/id\n--mca\npml\nob1\n--mca\nbtl\n^openib\n"
           "-x\nHK_CROSS_TRANSPORT\n-x\nHK_LOG_LEVEL\n-x\nHK_SECRET\n"
           "-x\nHK_START_TIMEOUT_S\n-x\nHK_X\n-x\nHKT_X_FOO\n-x\nHKT_X_SET\n"
           "--\ntrue\n",
           geteuid() == 0 ? "--allow-run-as-root\n" : "");
  assert_string_equal(read_file(argv_file), want);
  char *e = read_file(env_file);
  assert_non_null(e);
  assert_non_null(strstr(e, "HKT_X_FOO=bar baz\n"));
  assert_non_null(strstr(e, "HKT_X_SET=here\n"));
  assert_non_null(strstr(e, "HK_X=1\n"));
  assert_non_null(strstr(e, "HK_CROSS_TRANSPORT=tcp\n"));
  assert_non_null(strstr(e, "HK_LOG_LEVEL=info\n"));
  assert_non_null(strstr(e, "HK_START_TIMEOUT_S=9\n"));
  /* hkrun's probes reached the hosts as mpirun's ssh will */
  char *probed = read_file(ssh_log);
  assert_non_null(probed);
  assert_non_null(strstr(probed, "-o BatchMode=yes -o ConnectTimeout=9 -p 2222 "
                                 "-i /k/id a true\n"));
  assert_non_null(strstr(probed, "-o BatchMode=yes -o ConnectTimeout=9 -p 2222 "
                                 "-i /k/id b true\n"));
  hkt_result_free(&r);
}

static void test_exit_status_passed_through(void **state) {
  (void)state;
  static const int statuses[] = {0, 1, 7, 137};
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
    reset_records();
    char status_env[64];
    snprintf(status_env, sizeof status_env, "FAKE_MPIRUN_STATUS=%d",
             statuses[i]);
    char *argv[] = {HKRUN_PATH, "--mpi", "-np", "2", "true", NULL};
    char *env[] = {path_env, status_env, NULL};
    hkt_result r;
    hkt_run(argv, env, FAST_S, &r);
    if (!r.exited || r.exit_code != statuses[i]) {
      dump(&r);
      fail_msg("mpirun exited %d", statuses[i]);
    }
    assert_true(exists(argv_file));
    hkt_result_free(&r);
  }
}

static void test_hostfile_to_mpirun(void **state) {
  (void)state;
  reset_records();
  char hostfile[128];
  snprintf(hostfile, sizeof hostfile, "%s/hosts16", dir);
  /* -np left out: the slot total */
  char *argv[] = {HKRUN_PATH,  "--hostfile", hostfile,  "--no-tag-output",
                  "--bind-to", "core",       "./train", NULL};
  char *env[] = {path_env, NULL};
  hkt_result r;
  hkt_run(argv, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun --hostfile failed");
  }
  /* Open MPI's ssh never prompts and gives up connecting within the start
   * timeout (60 s by default); hkrun's probes used the same options */
  char want[512];
  snprintf(want, sizeof want,
           "%s-np\n16\n-H\nh1:8,h2:8\n--map-by\nslot\n--bind-to\n"
           "core\n--mca\nplm_rsh_args\n-o BatchMode=yes -o "
           "ConnectTimeout=60\n-x\nHK_SECRET\n--\n./train\n",
           geteuid() == 0 ? "--allow-run-as-root\n" : "");
  assert_string_equal(read_file(argv_file), want);
  char *probed = read_file(ssh_log);
  assert_non_null(probed);
  assert_non_null(strstr(probed, "-o BatchMode=yes -o ConnectTimeout=60 h1 "
                                 "true\n"));
  assert_non_null(strstr(probed, "-o BatchMode=yes -o ConnectTimeout=60 h2 "
                                 "true\n"));
  hkt_result_free(&r);
}

/* Open MPI's host-file syntax and IPv6 hosts end to end: max_slots and
 * count= are read as Open MPI reads them; an IPv6 host reaches mpirun in a
 * host file (its -H would take the address's ':' for the slot count),
 * removed when mpirun has ended. */
static void test_ompi_host_forms(void **state) {
  (void)state;
  reset_records();
  char hostfile[128], copy[160];
  snprintf(hostfile, sizeof hostfile, "%s/hosts_ompi", dir);
  snprintf(copy, sizeof copy, "%s/hostfile.copy", dir);
  write_file(hostfile, "h1 slots=8 max_slots=8\nh2 count=4\nfe80::1 slots=2\n",
             0644);
  char *argv[] = {HKRUN_PATH, "--hostfile", hostfile, "-np",
                  "14",       "true",       NULL};
  char *env[] = {path_env, NULL};
  hkt_result r;
  hkt_run(argv, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun --hostfile (Open MPI forms) failed");
  }
  char *got = strdup(read_file(argv_file)); /* read_file's buffer is reused */
  assert_non_null(strstr(got, "-np\n14\n--hostfile\n"));
  assert_null(strstr(got, "\n-H\n"));
  assert_string_equal(read_file(copy),
                      "h1 slots=8\nh2 slots=4\nfe80::1 slots=2\n");
  const char *hf = strstr(got, "--hostfile\n") + strlen("--hostfile\n");
  char path[256];
  snprintf(path, sizeof path, "%.*s", (int)strcspn(hf, "\n"), hf);
  assert_false(exists(path)); /* removed */
  free(got);
  assert_non_null(strstr(read_file(ssh_log), "fe80::1 true\n"));
  hkt_result_free(&r);
  /* -H in brackets; a host given twice adds up */
  reset_records();
  unlink(copy);
  char *argv2[] = {HKRUN_PATH, "-H", "[fe80::1]:4,h1:1,h1:1", "true", NULL};
  hkt_run(argv2, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun -H [fe80::1]:4 failed");
  }
  assert_non_null(strstr(read_file(argv_file), "-np\n6\n--hostfile\n"));
  assert_string_equal(read_file(copy), "fe80::1 slots=4\nh1 slots=2\n");
  hkt_result_free(&r);
}

/* A host that cannot be reached (unknown, or silently dropping packets)
 * fails the job within HK_START_TIMEOUT_S, named as it was typed (Open MPI
 * would strip the domain), before mpirun starts, leaving no ssh behind. */
static void test_unreachable_hosts_named(void **state) {
  (void)state;
  static const struct {
    const char *hosts, *named, *why;
    double min_s, max_s;
  } cases[] = {
      {"good:1,unreachable.invalid:1", "'unreachable.invalid'",
       "ssh exited with status 255: ssh: Could not resolve hostname "
       "unreachable.invalid",
       0, 2},
      {"good:1,blackhole.example.com:1", "'blackhole.example.com'",
       "no answer within HK_START_TIMEOUT_S=2 s", 1.8, 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    reset_records();
    char *argv[] = {HKRUN_PATH, "-np", "2", "-H", (char *)cases[i].hosts,
                    "true",     NULL};
    char *env[] = {path_env, "HK_START_TIMEOUT_S=2", NULL};
    hkt_result r;
    hkt_run(argv, env, FAST_S, &r);
    char want[256];
    snprintf(want, sizeof want, "hkrun: cannot reach host %s: %s",
             cases[i].named, cases[i].why);
    if (!r.exited || r.exit_code != 1 || !strstr(r.err, want) ||
        !strstr(r.err, "nothing was started") || r.elapsed_s < cases[i].min_s ||
        r.elapsed_s > cases[i].max_s) {
      dump(&r);
      fail_msg("case %zu: wanted '%s'", i, want);
    }
    assert_false(exists(argv_file));           /* mpirun never ran */
    assert_int_equal(hkt_orphans(NULL, 0), 0); /* the hung ssh is gone */
    hkt_result_free(&r);
  }
}

/* Ctrl-C to hkrun while mpirun runs: forwarded, mpirun's group is gone,
 * and hkrun exits 130 as it does on one host. */
static void test_sigint_through_mpirun(void **state) {
  (void)state;
  reset_records();
  char *argv[] = {HKRUN_PATH, "-np", "2",  "-H",   "a:1,b:1", "--grace-period",
                  "1",        "sh",  "-c", "true", NULL};
  char *env[] = {path_env, "FAKE_MPIRUN_SLEEP=1000", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  for (int i = 0; i < 200 && !exists(pid_file); i++)
    usleep(20000);
  assert_true(exists(pid_file));
  long mpirun_pid = strtol(read_file(pid_file), NULL, 10);
  assert_int_equal(kill(p.pid, SIGINT), 0);
  hkt_result r;
  hkt_finish(&p, FAST_S, &r);
  if (!r.exited || r.exit_code != 130 || r.elapsed_s > 1 + 1 + 2) {
    dump(&r);
    fail_msg("expected exit 130 within grace + 1 s");
  }
  assert_int_equal(hkt_wait_gone((pid_t)mpirun_pid, 5.0), 0);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

static void test_mpirun_missing(void **state) {
  (void)state;
  char *argv[] = {HKRUN_PATH, "--mpi", "-np", "2", "true", NULL};
  char *env[] = {"PATH=/nonexistent", NULL};
  hkt_result r;
  hkt_run(argv, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 127) {
    dump(&r);
    fail_msg("expected 127 without mpirun");
  }
  assert_string_equal(r.err,
                      "hkrun: cannot run 'mpirun': No such file or directory "
                      "(hk starts jobs on several hosts through Open MPI: "
                      "install openmpi-bin)\n");
  hkt_result_free(&r);
}

/* One host that is this one: hkrun's own launcher, np from the slots. */
static void test_local_host_runs_locally(void **state) {
  (void)state;
  reset_records();
  char *argv[] = {HKRUN_PATH,
                  "-H",
                  "localhost:3",
                  "--network-interface",
                  "lo",
                  "--",
                  "sh",
                  "-c",
                  "echo rank=$HK_RANK size=$HK_SIZE if=$HK_SOCKET_IFNAME",
                  NULL};
  char *env[] = {path_env, NULL};
  hkt_result r;
  hkt_run(argv, env, FAST_S, &r);
  if (!r.exited || r.exit_code != 0) {
    dump(&r);
    fail_msg("hkrun -H localhost:3 failed");
  }
  assert_false(exists(argv_file)); /* mpirun was not used */
  assert_int_equal(hkt_count_lines(r.out, "size=3 if=lo"), 3);
  for (int k = 0; k < 3; k++) {
    char line[64];
    snprintf(line, sizeof line, "[%d] rank=%d size=3 if=lo", k, k);
    assert_int_equal(hkt_count_lines(r.out, line), 1);
  }
  hkt_result_free(&r);
}

/* The mpirun lines checked here forward every HK_* variable of the
 * environment (-x NAME): one the caller has set (scripts/test.sh sets
 * HK_FLIGHT_DIR, a user may set HK_LOG_LEVEL) would change them, so the
 * tests start from none. */
static void clear_hk_environment(void) {
  extern char **environ;
  char name[256];
  for (int i = 0; environ[i];) {
    const char *eq = strchr(environ[i], '=');
    size_t n = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    if (strncmp(environ[i], "HK_", 3) == 0 && n < sizeof name) {
      memcpy(name, environ[i], n);
      name[n] = 0;
      unsetenv(name); /* environ shifts: look at index i again */
      continue;
    }
    i++;
  }
}

int main(void) {
  clear_hk_environment();
  if (hkt_setup() != 0)
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused_before_start),
      cmocka_unit_test(test_execs_mpirun),
      cmocka_unit_test(test_horovodrun_flags_to_mpirun),
      cmocka_unit_test(test_exit_status_passed_through),
      cmocka_unit_test(test_hostfile_to_mpirun),
      cmocka_unit_test(test_unreachable_hosts_named),
      cmocka_unit_test(test_ompi_host_forms),
      cmocka_unit_test(test_sigint_through_mpirun),
      cmocka_unit_test(test_mpirun_missing),
      cmocka_unit_test(test_local_host_runs_locally),
  };
  int failed = cmocka_run_group_tests(tests, setup_dir, teardown_dir);
  hkt_kill_orphans();
  return failed;
}
