/*
 * test_shm - the shared-memory transport end to end (HK_INTRA_TRANSPORT),
 * through hkrun:
 *  - every collective, dtype and op on real-valued inputs gives the same
 *    bits over shm as over TCP for the same algorithm (ring, rd), at
 *    np 2..5 and 8, and the same on every rank (w_shm hash);
 *  - 2 pseudo-hosts x 2 ranks (HK_LOCAL_RANK/SIZE blocks): shm inside,
 *    TCP between, flat and hierarchical: exact serial results and TCP's
 *    bits;
 *  - kill -9 of a rank mid-transfer at np 4: every survivor fails within
 *    HK_TIMEOUT_S naming it, hkrun exits non-zero, nothing of the job is
 *    left in /dev/shm; the same after kill -9 of hkrun;
 *  - kill -9 of the creating rank as its set-up begins;
 *  - nothing is ever named in /dev/shm, during the set-up either (so no
 *    kill -9 at any moment can leave a segment): the job runs with a
 *    /dev/shm of its own (a tmpfs in a mount namespace, root only) that
 *    the test watches with inotify from before the job starts;
 *  - two jobs at once both give the solo run's bits;
 *  - a /dev/shm too small for the segment: auto falls back to TCP and
 *    says so, shm fails hk_init saying why;
 *  - ranks that disagree on HK_INTRA_TRANSPORT fail hk_init naming it.
 * (The exact serial checks of every collective at np 1-5 and 8 run over
 * shm in test_runtime.)
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define W(name) WORKER_DIR "/" name

/* A job with a /dev/shm of its own: a tmpfs of `size` mounted on /dev/shm
 * in a mount namespace of the job's own (unshare -m), which the test
 * watches (inotify) before the job starts. */
typedef struct shm_bed {
  char dir[4096], fifo[4200];
  int watch; /* inotify descriptor, -1 without a bed */
  hkt_proc p;
  pid_t hkrun;
} shm_bed;

/* The shell in the namespace: mounts the tmpfs, says so, waits for the
 * test's watch (a line on the fifo $2), runs hkrun (the rest), forwarding
 * SIGTERM, then lists what /dev/shm holds and exits with hkrun's status. */
static const char *const in_namespace =
    "size=$1; fifo=$2; shift 2\n"
    "mount -t tmpfs -o size=$size,mode=1777 hk-shm /dev/shm || exit 77\n"
    "echo \"own /dev/shm\"\n"
    "read go < \"$fifo\"\n"
    "\"$@\" & pid=$!\n"
    "echo \"hkrun pid=$pid\"\n"
    "trap 'kill -TERM $pid' TERM INT HUP\n"
    "wait $pid; rc=$?\n"
    "while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done\n"
    "echo \"left in /dev/shm: [$(ls -A /dev/shm | tr '\\n' ' ')]\"\n"
    "exit $rc\n";

/* 1 where a mount namespace can be made (root). */
static int have_namespaces(void) {
  char *probe[] = {"unshare", "-m", "true", NULL};
  hkt_result r;
  int ok = hkt_run(probe, NULL, 30, &r) == 0 && r.exit_code == 0;
  hkt_result_free(&r);
  return ok;
}

/* Starts hkrun with args (NULL-terminated, after "hkrun") and env in a
 * bed with a /dev/shm of `size`; where no mount namespace can be made
 * (not root), hkrun runs as it is and b->watch is -1. */
static void bed_start(shm_bed *b, const char *size, char *const env[],
                      char *const args[]) {
  const int ok = have_namespaces();
  char *argv[64];
  int n = 0;
  b->watch = -1;
  if (ok) {
    assert_int_equal(hkt_mkdtemp("hk_shm_bed_", b->dir, sizeof b->dir), 0);
    snprintf(b->fifo, sizeof b->fifo, "%s/go", b->dir);
    assert_int_equal(mkfifo(b->fifo, 0600), 0);
    char *pre[] = {"unshare", "-m",         "sh",    "-c", (char *)in_namespace,
                   "sh",      (char *)size, b->fifo, NULL};
    for (; pre[n]; n++)
      argv[n] = pre[n];
  } else {
    fprintf(stderr, "no mount namespace here (root only): /dev/shm not "
                    "watched\n");
  }
  argv[n++] = HKRUN_PATH;
  for (int i = 0; args[i]; i++) {
    assert_true(n < 63);
    argv[n++] = args[i];
  }
  argv[n] = NULL;
  assert_int_equal(hkt_start(argv, env, &b->p), 0);
  b->hkrun = b->p.pid;
  if (!ok)
    return;
  assert_int_equal(hkt_wait_line(&b->p, "own /dev/shm", 60, NULL), 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/root/dev/shm", (int)b->p.pid);
  b->watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  assert_true(b->watch >= 0);
  assert_true(inotify_add_watch(b->watch, path,
                                IN_CREATE | IN_MOVED_TO | IN_ONLYDIR) >= 0);
  int fd = open(b->fifo, O_WRONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "go\n", 3), 3);
  close(fd);
  /* the shell has the fifo open: its folder can go now, so that a test
   * that fails from here on leaves nothing in the temporary folder */
  assert_int_equal(unlink(b->fifo), 0);
  assert_int_equal(hkt_remove_tree(b->dir), 0);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(&b->p, "hkrun pid=", 60, &line), 0);
  b->hkrun = (pid_t)atol(strstr(line, "hkrun pid=") + 10);
  free(line);
  assert_true(b->hkrun > 1);
}

/* The names created in the job's /dev/shm so far (inotify), into
 * out[cap] separated by spaces; how many. */
static int bed_named(shm_bed *b, char *out, size_t cap) {
  out[0] = '\0';
  if (b->watch < 0)
    return 0;
  int n = 0;
  char buf[4096] __attribute__((aligned(8)));
  ssize_t got;
  while ((got = read(b->watch, buf, sizeof buf)) > 0)
    for (char *q = buf; q < buf + got;) {
      const struct inotify_event *e = (const struct inotify_event *)q;
      if (e->len) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s ", e->name);
        n++;
      }
      q += sizeof *e + e->len;
    }
  return n;
}

/* Ends the bed once hkrun has: nothing was ever named in the job's
 * /dev/shm and nothing is left there. r is hkt_finish's. */
static void bed_finish(shm_bed *b, double timeout_s, hkt_result *r) {
  assert_int_equal(hkt_finish(&b->p, timeout_s, r), 0);
  if (b->watch < 0)
    return;
  if (r->exit_code == 77)
    fail_msg("no tmpfs could be mounted on /dev/shm:\n%s", r->err);
  char named[1024];
  if (bed_named(b, named, sizeof named) != 0)
    fail_msg("named in the job's /dev/shm: %s(a kill -9 before their "
             "unlink leaves them)",
             named);
  if (!strstr(r->out, "left in /dev/shm: []"))
    fail_msg("the job left something in /dev/shm:\n%s", r->out);
  close(b->watch);
}

/* Runs `w_shm MODE` (hash or batch) under env on np ranks (in hosts of
 * `local` ranks when local > 0); returns the hash every rank printed
 * ("shm MODE <hex>", malloc'd). */
static char *mode_hash_of(const char *mode, const char *np, int local,
                          char *const env[]) {
  char cmd[512], tag[32];
  snprintf(tag, sizeof tag, "shm %s ", mode);
  const size_t tl = strlen(tag);
  if (local > 0)
    snprintf(cmd, sizeof cmd,
             "HK_LOCAL_RANK=$((HK_RANK %% %d)) HK_LOCAL_SIZE=%d exec %s %s",
             local, local, W("w_shm"), mode);
  else
    snprintf(cmd, sizeof cmd, "exec %s %s", W("w_shm"), mode);
  char *argv[] = {HKRUN_PATH, "-np", (char *)np, "sh", "-c", cmd, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 280, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, tag) != atoi(np))
    fail_msg("np %s, %s: exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", np, mode,
             r.exit_code, r.out, r.err);
  char *h = strstr(r.out, tag);
  char *hash = strndup(h + tl, 16);
  for (char *p = r.out; (p = strstr(p, tag)); p += tl)
    if (strncmp(p + tl, hash, 16) != 0)
      fail_msg("np %s: ranks printed different hashes:\n%s", np, r.out);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  return hash;
}

static char *hash_of(const char *np, int local, char *const env[]) {
  return mode_hash_of("hash", np, local, env);
}

/* shm's and TCP's results of every collective are the same bits, with
 * algo_env and (if not NULL) one more setting in both runs. */
static void same_bits_with(const char *np, int local, const char *algo_env,
                           const char *more) {
  char *shm_env[] = {"HK_INTRA_TRANSPORT=shm", (char *)algo_env,
                     "HK_CYCLE_TIME_MS=0", (char *)more, NULL};
  char *tcp_env[] = {"HK_INTRA_TRANSPORT=tcp", (char *)algo_env,
                     "HK_CYCLE_TIME_MS=0", (char *)more, NULL};
  char *a = hash_of(np, local, shm_env), *b = hash_of(np, local, tcp_env);
  if (strcmp(a, b) != 0)
    fail_msg("np %s (hosts of %d), %s: shm gave %s, tcp %s", np, local,
             algo_env, a, b);
  free(a);
  free(b);
}

static void same_bits(const char *np, int local, const char *algo_env) {
  same_bits_with(np, local, algo_env, NULL);
}

/* The ring (the shm engine on one host) and rd (over shm links) give
 * TCP's bits for every collective, dtype and op. The sanitizer stages of
 * scripts/test.sh (which set HKT_ALLREDUCE_BIG) hunt memory errors and
 * races: two world sizes do for them. */
static void test_bits_match_tcp(void **s) {
  (void)s;
  const char *nps[] = {"2", "3", "5", "8"}; /* np 4: test_mixed_hosts */
  const int sanitizer = getenv("HKT_ALLREDUCE_BIG") != NULL;
  for (int i = sanitizer ? 1 : 0; i < 4; i += sanitizer ? 2 : 1)
    same_bits(nps[i], 0, "HK_ALLREDUCE_ALGO=ring");
  same_bits("5", 0, "HK_ALLREDUCE_ALGO=rd");
  /* the smallest slots: every fused batch runs in many rounds of small
   * slices instead of one-shot (the in-place pieces, a 16-bit average's
   * pre-division as the engine reads its inputs, against TCP's fusion
   * buffer) */
  same_bits_with("3", 0, "HK_ALLREDUCE_ALGO=ring", "HK_SHM_SLOT_BYTES=4096");
}

/* Mixed fused batches (1, 2, 3 elements, primes, one large tensor and
 * 150 tiny ones, in and out of place, all at once; float16/bfloat16
 * averages near the type's largest value): every element the serial
 * result (w_shm batch checks), and shm's bits TCP's, at np 2, 3, 5, 7,
 * with the smallest slots (many rounds of the in-place pieces) and the
 * default ones (one-shot for the small batches). */
static void test_batches_serial_and_tcp(void **s) {
  (void)s;
  const char *nps[] = {"2", "3", "5", "7"};
  const int sanitizer = getenv("HKT_ALLREDUCE_BIG") != NULL;
  for (int i = sanitizer ? 1 : 0; i < 4; i += sanitizer ? 2 : 1)
    for (int small = 0; small < 2; small++) {
      if (!small && (i == 0 || i == 2))
        continue; /* default slots: np 3 and 7 */
      const char *slot = small ? "HK_SHM_SLOT_BYTES=4096" : NULL;
      char *shm_env[] = {"HK_INTRA_TRANSPORT=shm",
                         "HK_ALLREDUCE_ALGO=ring",
                         "HK_CYCLE_TIME_MS=0",
                         "HK_CACHE_CAPACITY=4096",
                         (char *)slot,
                         NULL};
      char *tcp_env[] = {"HK_INTRA_TRANSPORT=tcp",
                         "HK_ALLREDUCE_ALGO=ring",
                         "HK_CYCLE_TIME_MS=0",
                         "HK_CACHE_CAPACITY=4096",
                         (char *)slot,
                         NULL};
      char *a = mode_hash_of("batch", nps[i], 0, shm_env);
      char *b = mode_hash_of("batch", nps[i], 0, tcp_env);
      if (strcmp(a, b) != 0)
        fail_msg("np %s, %s: shm gave %s, tcp %s", nps[i],
                 slot ? slot : "default slots", a, b);
      free(a);
      free(b);
    }
}

/* 2 pseudo-hosts of 2: shm inside each, TCP between. */
static void test_mixed_hosts(void **s) {
  (void)s;
  char *env[] = {"HK_INTRA_TRANSPORT=shm", "HK_LOG_LEVEL=info", NULL};
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "HK_LOCAL_RANK=$((HK_RANK %% 2)) HK_LOCAL_SIZE=2 exec %s",
           W("w_allreduce 0 1 3 4 100003"));
  char *argv[] = {HKRUN_PATH, "-np", "4", "sh", "-c", cmd, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 280, &r), 0);
  if (r.exit_code != 0 ||
      hkt_count_lines(r.out, "allreduce ok: np=4 cases=225") != 4 ||
      hkt_count_lines(r.err, "shared memory with the 1 other rank(s)") != 4)
    fail_msg("exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", r.exit_code, r.out,
             r.err);
  hkt_result_free(&r);
  snprintf(cmd, sizeof cmd,
           "HK_LOCAL_RANK=$((HK_RANK %% 2)) HK_LOCAL_SIZE=2 exec %s",
           W("w_collectives"));
  char *hier[] = {"HK_INTRA_TRANSPORT=shm", "HK_HIERARCHICAL_ALLREDUCE=1",
                  NULL};
  assert_int_equal(hkt_run(argv, hier, 280, &r), 0);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "collectives ok: np=4") != 4)
    fail_msg("exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", r.exit_code, r.out,
             r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  /* the flat ring crosses hosts (shm and TCP links in one ring) */
  same_bits("4", 2, "HK_ALLREDUCE_ALGO=ring");
  same_bits("4", 2, "HK_HIERARCHICAL_ALLREDUCE=1");
}

/* Parses "[r] ready pid=P" lines into pids[r]. */
static void ready_pids(const char *out, int n, long *pids) {
  for (int r = 0; r < n; r++) {
    char key[32];
    snprintf(key, sizeof key, "[%d] ready pid=", r);
    const char *p = strstr(out, key);
    assert_non_null(p);
    pids[r] = atol(p + strlen(key));
    assert_true(pids[r] > 1);
  }
}

/* kill -9 of rank 2 while the ranks allreduce 16 MiB over shm in a loop:
 * the survivors fail within HK_TIMEOUT_S, naming it; hkrun exits with
 * the victim's signal; nothing of the job was ever in /dev/shm. */
static void test_kill9_rank_mid_transfer(void **s) {
  (void)s;
  char *env[] = {"HK_INTRA_TRANSPORT=shm", "HK_TIMEOUT_S=8", NULL};
  char *args[] = {"-np", "4", W("w_fail"), "kill", NULL};
  shm_bed b;
  bed_start(&b, "256m", env, args);
  hkt_proc *p = &b.p;
  assert_int_equal(hkt_wait_lines(p, "ready pid=", 4, 120), 0);
  long pids[4];
  ready_pids(p->out.data, 4, pids);
  char named[1024]; /* the set-up is over: never named */
  if (bed_named(&b, named, sizeof named) != 0)
    fail_msg("named in the job's /dev/shm during the set-up: %s", named);
  assert_int_equal(kill((pid_t)pids[2], SIGKILL), 0);
  double killed = hkt_now();
  hkt_result r;
  bed_finish(&b, 20, &r);
  double took = hkt_now() - killed;
  if (!r.exited || r.exit_code != 128 + 9 || took >= 8)
    fail_msg("hkrun: exit=%d signal=%d after %.1f s\nstderr:\n%s", r.exit_code,
             r.signal, took, r.err);
  char who[64];
  snprintf(who, sizeof who, "rank 2 (pid %ld) was killed by signal 9", pids[2]);
  /* every survivor says so: hkrun's line plus three ranks' */
  if (hkt_count_lines(r.err, "allreduce failed: peer lost") < 3 ||
      hkt_count_lines(r.err, who) < 4)
    fail_msg("survivors did not all name rank 2:\n%s", r.err);
  for (int i = 0; i < 4; i++)
    if (hkt_pid_alive((pid_t)pids[i])) { /* hkrun waits for every worker */
      char path[64], stat[512] = "";
      snprintf(path, sizeof path, "/proc/%ld/stat", pids[i]);
      FILE *f = fopen(path, "r");
      if (f) {
        if (!fgets(stat, sizeof stat, f))
          stat[0] = 0;
        fclose(f);
      }
      fail_msg("rank %d (pid %ld) outlived hkrun: %s", i, pids[i], stat);
    }
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* kill -9 of hkrun itself mid-transfer: its workers die with it
 * (PR_SET_PDEATHSIG), and nothing of the job was ever in /dev/shm. */
static void test_kill9_hkrun(void **s) {
  (void)s;
  char *env[] = {"HK_INTRA_TRANSPORT=shm", NULL};
  char *args[] = {"-np", "4", W("w_fail"), "kill", NULL};
  shm_bed b;
  bed_start(&b, "256m", env, args);
  assert_int_equal(hkt_wait_lines(&b.p, "ready pid=", 4, 120), 0);
  long pids[4];
  ready_pids(b.p.out.data, 4, pids);
  assert_int_equal(kill(b.hkrun, SIGKILL), 0);
  hkt_result r;
  bed_finish(&b, 20, &r);
  for (int i = 0; i < 4; i++)
    assert_int_equal(hkt_wait_gone((pid_t)pids[i], 10), 0);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* kill -9 of the rank that creates the segment (rank 0, the host's first)
 * as soon as it says its data links are up, the step before the shared
 * memory's set-up: the job fails and ends (no rank left), and nothing of
 * it was ever named in /dev/shm or is left there. */
static void test_kill9_creator_in_setup(void **s) {
  (void)s;
  char *env[] = {"HK_INTRA_TRANSPORT=shm", "HK_LOG_LEVEL=info",
                 "HK_TIMEOUT_S=8", NULL};
  char *args[] = {"-np", "4", W("w_fail"), "kill", NULL};
  shm_bed b;
  bed_start(&b, "256m", env, args);
  char *line = NULL;
  assert_int_equal(hkt_wait_line(&b.p, "rank 0 (pid ", 60, &line), 0);
  long pid0 = atol(strstr(line, "rank 0 (pid ") + 12);
  free(line);
  assert_true(pid0 > 1);
  assert_int_equal(hkt_wait_line(&b.p, "[0] hk[0] info: data links:", 60, NULL),
                   0);
  assert_int_equal(kill((pid_t)pid0, SIGKILL), 0);
  hkt_result r;
  bed_finish(&b, 30, &r);
  /* the first failure hkrun sees decides its status: rank 0's signal, or
   * a rank whose hk_init lost rank 0 (exit 1) */
  if (!r.exited || (r.exit_code != 128 + 9 && r.exit_code != 1) ||
      hkt_count_lines(r.out, "ready pid=") == 4)
    fail_msg("hkrun: exit=%d signal=%d\nstdout:\n%s\nstderr:\n%s", r.exit_code,
             r.signal, r.out, r.err);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* Two jobs at once (each holds until both have started), each over its
 * own segment: both give the bits of a job run alone. */
static void test_concurrent_jobs(void **s) {
  (void)s;
  char *env[] = {"HK_INTRA_TRANSPORT=shm", "HK_CYCLE_TIME_MS=0", NULL};
  char *solo = hash_of("3", 0, env);
  char file[] = "/tmp/hk_shm_hold_XXXXXX";
  int fd = mkstemp(file);
  assert_true(fd >= 0);
  close(fd);
  unlink(file); /* created again once both jobs hold */
  char *argv[] = {HKRUN_PATH, "-np", "3", W("w_shm"), "hold", file, NULL};
  hkt_proc a, b;
  assert_int_equal(hkt_start(argv, env, &a), 0);
  assert_int_equal(hkt_start(argv, env, &b), 0);
  assert_int_equal(hkt_wait_lines(&a, "holding", 3, 120), 0);
  assert_int_equal(hkt_wait_lines(&b, "holding", 3, 120), 0);
  fd = open(file, O_CREAT | O_WRONLY, 0600);
  assert_true(fd >= 0);
  close(fd);
  hkt_result ra, rb;
  assert_int_equal(hkt_finish(&a, 200, &ra), 0);
  assert_int_equal(hkt_finish(&b, 200, &rb), 0);
  unlink(file);
  hkt_result *res[2] = {&ra, &rb};
  for (int j = 0; j < 2; j++) {
    if (res[j]->exit_code != 0 ||
        hkt_count_lines(res[j]->out, "shm hash ") != 3)
      fail_msg("job %d: exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", j,
               res[j]->exit_code, res[j]->out, res[j]->err);
    for (char *p = res[j]->out; (p = strstr(p, "shm hash ")); p += 9)
      if (strncmp(p + 9, solo, 16) != 0)
        fail_msg("job %d gave %.16s, alone %s", j, p + 9, solo);
    hkt_result_free(res[j]);
  }
  free(solo);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* A /dev/shm too small for the segment (a 64 KiB tmpfs of the job's own):
 * auto runs over TCP and says so at info level; shm fails hk_init (rank 0
 * says why, the others are told so or stopped by hkrun, whichever comes
 * first). Skipped without a mount namespace (not root). */
static void test_no_room(void **s) {
  (void)s;
  char *args[] = {"-np", "3", W("w_collectives"), NULL};
  char *autoenv[] = {"HK_LOG_LEVEL=info", NULL};
  if (!have_namespaces())
    skip();
  shm_bed b;
  bed_start(&b, "64k", autoenv, args);
  hkt_result r;
  bed_finish(&b, 120, &r);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "collectives ok: np=3") != 3 ||
      hkt_count_lines(r.err, "no shared memory on this host") != 1 ||
      hkt_count_lines(r.err, "is /dev/shm large enough?") != 1)
    fail_msg("auto: exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", r.exit_code,
             r.out, r.err);
  hkt_result_free(&r);
  char *shmenv[] = {"HK_INTRA_TRANSPORT=shm", NULL};
  bed_start(&b, "64k", shmenv, args);
  bed_finish(&b, 120, &r);
  if (r.exit_code == 0 ||
      hkt_count_lines(r.err, "HK_INTRA_TRANSPORT=shm: cannot set up shared "
                             "memory on this host: cannot size the "
                             "shared-memory segment") != 1)
    fail_msg("shm: exit %d\nstderr:\n%.3000s", r.exit_code, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* Ranks of a host that disagree fail hk_init naming both values. */
static void test_setting_mismatch(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "3",
                  "sh",
                  "-c",
                  "if [ $HK_RANK = 1 ]; then export HK_INTRA_TRANSPORT=tcp; "
                  "fi; exec \"$0\"",
                  W("w_collectives"),
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  if (r.exit_code == 0 ||
      hkt_count_lines(r.err, "HK_INTRA_TRANSPORT is auto on rank 0 but tcp on "
                             "rank 1: every rank must use the same value") < 1)
    fail_msg("exit %d\nstderr:\n%.3000s", r.exit_code, r.err);
  assert_true(r.elapsed_s < 30);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bits_match_tcp),
      cmocka_unit_test(test_batches_serial_and_tcp),
      cmocka_unit_test(test_mixed_hosts),
      cmocka_unit_test(test_kill9_rank_mid_transfer),
      cmocka_unit_test(test_kill9_hkrun),
      cmocka_unit_test(test_kill9_creator_in_setup),
      cmocka_unit_test(test_concurrent_jobs),
      cmocka_unit_test(test_no_room),
      cmocka_unit_test(test_setting_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
