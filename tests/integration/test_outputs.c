/*
 * test_outputs.c - the files hk writes (docs/monitoring.md, "Output
 * files"; common/outfile.h), over hkrun:
 *   - a full disk, for each output: the timeline stays valid JSON up to
 *     its last whole event, the metrics file keeps its last whole
 *     contents, a flight record is not left half-written, an output file
 *     ends after its last whole line; each says so in one warning naming
 *     the file and the reason, and the job goes on;
 *   - an output that cannot be made at hk_init fails hk_init, naming it;
 *   - a link placed at an output's name is replaced, never written
 *     through, and a folder hkrun would use that is a link is refused;
 *   - the files are private (0600, folders 0700) unless HK_FILE_MODE
 *     says otherwise;
 *   - what hk_init leaves to the programs a rank starts: not the job's
 *     secret (HK_SECRET) nor hkrun's pipe (HK_DUMP_FD).
 * The full disk is a 64 KiB tmpfs mounted in a mount namespace of the
 * job's own (unshare -m, root only: skipped elsewhere), which goes with
 * the job's last process however the test ends; what the job left on it
 * is copied out before it goes.
 */
#include <dirent.h>
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
#include <jansson.h>

#include "harness.h"

#define W_OUTPUTS WORKER_DIR "/w_outputs"

static void expect(const char *text, const char *want) {
  if (!strstr(text, want))
    fail_msg("'%s' not in:\n%s", want, text);
}

/* A folder for one test: base/mnt (the tmpfs's mount point) and
 * base/copy (what the job left there). */
typedef struct bed {
  char base[4096], mnt[4200], copy[4200];
} bed;

static void bed_make(bed *b) {
  assert_int_equal(hkt_mkdtemp("hk-outputs.", b->base, sizeof b->base), 0);
  snprintf(b->mnt, sizeof b->mnt, "%s/mnt", b->base);
  snprintf(b->copy, sizeof b->copy, "%s/copy", b->base);
  assert_int_equal(mkdir(b->mnt, 0755), 0);
  assert_int_equal(mkdir(b->copy, 0755), 0);
}

static void bed_remove(bed *b) {
  assert_int_equal(hkt_remove_tree(b->base), 0);
}

/* Skips the test where a mount namespace cannot be made (not root). */
static void need_namespaces(void) {
  char *argv[] = {"unshare", "-m", "true", NULL};
  hkt_result r;
  int rc = hkt_run(argv, NULL, 30, &r);
  int ok = rc == 0 && r.exit_code == 0;
  hkt_result_free(&r);
  if (!ok) {
    fprintf(stderr, "no mount namespace here (root only): skipped\n");
    skip();
  }
}

/* The shell run inside the namespace: mounts the 64 KiB tmpfs on $1
 * (with $PREFILL_KB KiB of it taken by a file "fill", if set), runs the
 * rest (forwarding SIGTERM to it), copies what the tmpfs holds to $2 and
 * exits with the command's status. */
static const char *const in_namespace =
    "mnt=$1; out=$2; shift 2\n"
    "mount -t tmpfs -o size=64k,mode=0755 hk-test \"$mnt\" || exit 77\n"
    "[ -z \"$PREFILL_KB\" ] ||\n"
    "  dd if=/dev/zero of=\"$mnt/fill\" bs=1k count=$PREFILL_KB 2>/dev/null\n"
    "\"$@\" & pid=$!\n"
    "trap 'kill -TERM $pid' TERM INT HUP\n"
    "wait $pid; rc=$?\n"
    "while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done\n"
    "cp -a \"$mnt\"/. \"$out\"/\n"
    "exit $rc\n";

/* Starts hkrun with args (NULL-terminated, after "hkrun") and env on a
 * full-disk bed. */
static void start_on_tmpfs(bed *b, char *const env[], char *const args[],
                           hkt_proc *p) {
  need_namespaces();
  char *argv[64] = {"unshare", "-m",   "sh",    "-c",      (char *)in_namespace,
                    "sh",      b->mnt, b->copy, HKRUN_PATH};
  int n = 9;
  for (int i = 0; args[i]; i++) {
    assert_true(n < 63);
    argv[n++] = args[i];
  }
  argv[n] = NULL;
  assert_int_equal(hkt_start(argv, env, p), 0);
}

static void run_on_tmpfs(bed *b, char *const env[], char *const args[],
                         hkt_result *r) {
  hkt_proc p;
  start_on_tmpfs(b, env, args, &p);
  assert_int_equal(hkt_finish(&p, 120, r), 0);
  if (r->exit_code == 77)
    skip(); /* no tmpfs could be mounted */
  if (r->exit_code != 0)
    fprintf(stderr, "job exit %d:\n%s\n%s\n", r->exit_code, r->out, r->err);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* Names in dir other than those in keep (NULL-terminated) fail the test. */
static void only(const char *dir, const char *const keep[]) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    int kept = 0;
    for (int i = 0; keep[i]; i++)
      kept |= !strcmp(e->d_name, keep[i]);
    if (!kept)
      fail_msg("left in %s: %s", dir, e->d_name);
  }
  closedir(d);
}

static void test_timeline_full_disk(void **s) {
  (void)s;
  bed b;
  bed_make(&b);
  char tl[4300], env_tl[4400], warn[4600];
  snprintf(tl, sizeof tl, "%s/tl.json", b.mnt);
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", tl);
  char *env[] = {env_tl, NULL};
  char *args[] = {"-np", "2", W_OUTPUTS, "-", "steps", "1.5", NULL};
  hkt_result r;
  run_on_tmpfs(&b, env, args, &r);
  assert_int_equal(r.exit_code, 0); /* the job goes on */
  char copy[4300];
  snprintf(copy, sizeof copy, "%s/tl.json", b.copy);
  json_error_t err;
  json_t *root = json_load_file(copy, 0, &err);
  if (!root)
    fail_msg("%s is not JSON: %s (line %d)", copy, err.text, err.line);
  assert_true(json_is_array(root));
  size_t n = json_array_size(root);
  assert_true(n > 20);
  for (size_t i = 0; i < n; i++) /* every event whole */
    assert_non_null(json_object_get(json_array_get(root, i), "ph"));
  json_decref(root);
  snprintf(warn, sizeof warn,
           "HK_TIMELINE: cannot write '%s': No space left on device; the "
           "timeline stops here, valid JSON up to its last whole event",
           tl);
  expect(r.err, warn);
  assert_int_equal(hkt_count_lines(r.err, "HK_TIMELINE:"), 1); /* once */
  hkt_result_free(&r);
  const char *keep[] = {"tl.json", NULL};
  only(b.copy, keep);
  bed_remove(&b);
}

static void test_metrics_full_disk(void **s) {
  (void)s;
  bed b;
  bed_make(&b);
  char m[4300], env_m[4400], warn[4600];
  snprintf(m, sizeof m, "%s/m.prom", b.mnt);
  snprintf(env_m, sizeof env_m, "HK_METRICS_FILE=%s", m);
  char *env[] = {env_m, "HK_METRICS_INTERVAL_S=0.02",
                 "HK_NVML_LIBRARY=libhk-no-such-nvml.so.1", NULL};
  /* rank 0 fills the disk once hk_init has made the file */
  char *args[] = {"-np", "2", W_OUTPUTS, b.mnt, "steps", "0.5", NULL};
  hkt_result r;
  run_on_tmpfs(&b, env, args, &r);
  assert_int_equal(r.exit_code, 0);
  expect(r.out, "filled ");
  /* the file hk_init made, whole; nothing else left beside it */
  char copy[4300];
  snprintf(copy, sizeof copy, "%s/m.prom", b.copy);
  FILE *f = fopen(copy, "r");
  if (!f)
    fail_msg("no %s: HK_METRICS_FILE was not made at hk_init", copy);
  char text[65536];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  assert_true(len > 0 && text[len - 1] == '\n');
  expect(text, "# TYPE hk_rounds_total counter\nhk_rounds_total 0\n");
  expect(text, "hk_host_cpus{rank=\"1\",");
  snprintf(warn, sizeof warn,
           "HK_METRICS_FILE: cannot write '%s': No space left on device; "
           "the file keeps its last whole contents (warned once)",
           m);
  expect(r.err, warn);
  assert_int_equal(hkt_count_lines(r.err, "HK_METRICS_FILE:"), 1);
  hkt_result_free(&r);
  const char *keep[] = {"m.prom", "fill", NULL};
  only(b.copy, keep);
  bed_remove(&b);
}

static void test_records_full_disk(void **s) {
  (void)s;
  bed b;
  bed_make(&b);
  char env_dir[4400];
  snprintf(env_dir, sizeof env_dir, "HK_FLIGHT_DIR=%s", b.mnt);
  char *env[] = {env_dir, "HK_STALL_CHECK_TIME_S=0", NULL};
  char *args[] = {"-np", "2", W_OUTPUTS, b.mnt, "hang", NULL};
  hkt_proc p;
  start_on_tmpfs(&b, env, args, &p);
  assert_int_equal(hkt_wait_lines(&p, "full pid=", 2, 120), 0);
  const char *pp = strstr(p.out.data, "ppid=");
  assert_non_null(pp);
  char hkrun_pid[32];
  snprintf(hkrun_pid, sizeof hkrun_pid, "%d", atoi(pp + 5));
  char *dump[] = {HKRUN_PATH, "--dump", hkrun_pid, NULL};
  hkt_result r;
  assert_int_equal(hkt_run(dump, NULL, 30, &r), 0);
  assert_int_equal(r.exit_code, 0);
  hkt_result_free(&r);
  /* each rank says it could not write its record, and why */
  assert_int_equal(hkt_wait_lines(&p, "flight record: cannot write '", 2, 60),
                   0);
  assert_int_equal(kill(p.pid, SIGTERM), 0);
  assert_int_equal(hkt_finish(&p, 60, &r), 0);
  /* (a rank that hears of hkrun's abort before SIGTERM ends it tries
   * once more, and says so too) */
  char name[4400];
  snprintf(name, sizeof name, "flight record: cannot write '%s/hk-", b.mnt);
  int tries = hkt_count_lines(r.err, "flight record: cannot write");
  assert_true(tries >= 2);
  assert_int_equal(hkt_count_lines(r.err, name), tries);
  assert_int_equal(hkt_count_lines(r.err, ".txt': No space left on device"),
                   tries);
  assert_null(strstr(r.err, "flight records of this job in"));
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  /* no part of a record, no temporary; the empty job folder removed */
  const char *keep[] = {"fill", NULL};
  only(b.copy, keep);
  bed_remove(&b);
}

/* Every line of the file is whole: 100 characters and its newline. */
static void whole_lines(const char *path, int rank) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[256];
  char head[32];
  snprintf(head, sizeof head, "rank %d line ", rank);
  while (fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    if (!strncmp(line, "filled ", 7))
      continue;
    if (len != 101 || line[100] != '\n' || strncmp(line, head, strlen(head)))
      fail_msg("%s: a line cut short: '%s'", path, line);
  }
  fclose(f);
}

static void test_output_files_full_disk(void **s) {
  (void)s;
  bed b;
  bed_make(&b);
  char out[4300];
  snprintf(out, sizeof out, "%s/out", b.mnt);
  /* one 4 KiB page left: a line is cut at its end (a short write) */
  char *env[] = {"PREFILL_KB=60", NULL};
  char *args[] = {"--output-filename", out, "-np",   "2",
                  W_OUTPUTS,           "-", "lines", NULL};
  hkt_result r;
  run_on_tmpfs(&b, env, args, &r);
  assert_int_equal(r.exit_code, 0);
  /* hkrun's own output has every line */
  assert_int_equal(hkt_count_lines(r.out, " line "), 400);
  for (int k = 0; k < 2; k++) { /* each file ends after a whole line */
    char copy[4400];
    snprintf(copy, sizeof copy, "%s/out/rank.%d/stdout", b.copy, k);
    whole_lines(copy, k);
  }
  for (int k = 0; k < 2; k++) {
    char warn[4600];
    snprintf(warn, sizeof warn,
             "--output-filename: cannot write '%s/rank.%d/stdout': No space "
             "left on device; rank %d's stdout stops there, after its last "
             "whole line",
             out, k, k);
    expect(r.err, warn);
  }
  assert_int_equal(hkt_count_lines(r.err, "--output-filename: cannot write"),
                   2);
  hkt_result_free(&r);
  bed_remove(&b);
}

/* An output that cannot be made fails hk_init, naming it. */
static void test_made_at_init(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-outputs.", dir, sizeof dir), 0);
  static const struct {
    const char *var, *file, *said;
  } cases[] = {
      {"HK_METRICS_FILE", "/no/m.prom",
       "HK_METRICS_FILE: cannot create '%s/no/m.prom': its folder '%s/no': "
       "No such file or directory"},
      {"HK_FLIGHT_DIR", "/no",
       "HK_FLIGHT_DIR: '%s/no' is not a folder this process can write "
       "into: No such file or directory"},
      {"HK_TIMELINE", "/no/t.json",
       "HK_TIMELINE: cannot create '%s/no/t.json': its folder '%s/no': No "
       "such file or directory"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char env_v[4400], said[9000];
    snprintf(env_v, sizeof env_v, "%s=%s%s", cases[i].var, dir, cases[i].file);
    char *env[] = {env_v, NULL};
    char *argv[] = {HKRUN_PATH, "-np", "2", W_OUTPUTS, "-", "steps", "0", NULL};
    hkt_result r;
    assert_int_equal(hkt_run(argv, env, 60, &r), 0);
    assert_int_not_equal(r.exit_code, 0);
    snprintf(said, sizeof said, cases[i].said, dir, dir);
    expect(r.err, said);
    expect(r.err, "hk_init()");
    hkt_result_free(&r);
    assert_int_equal(hkt_orphans(NULL, 0), 0);
  }
  assert_int_equal(hkt_remove_tree(dir), 0);
}

static mode_t mode_of(const char *path) {
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  return sb.st_mode;
}

/* A link at an output's name is replaced, never written through: the
 * timeline, the metrics file, hkrun's output files; the files are 0600
 * (folders hkrun makes 0700), or HK_FILE_MODE's. */
static void test_no_link_followed(void **s) {
  (void)s;
  char dir[4096];
  assert_int_equal(hkt_mkdtemp("hk-outputs.", dir, sizeof dir), 0);
  char victim[4200], tl[4200], m[4200], out[4200], rank0[4300], so[4400];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(tl, sizeof tl, "%s/tl.json", dir);
  snprintf(m, sizeof m, "%s/m.prom", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(rank0, sizeof rank0, "%s/rank.0", out);
  snprintf(so, sizeof so, "%s/stdout", rank0);
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("precious\n", f);
  fclose(f);
  assert_int_equal(mkdir(out, 0755), 0);
  assert_int_equal(mkdir(rank0, 0700), 0);
  assert_int_equal(symlink(victim, tl), 0);
  assert_int_equal(symlink(victim, m), 0);
  assert_int_equal(symlink(victim, so), 0);
  char env_tl[4300], env_m[4300];
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", tl);
  snprintf(env_m, sizeof env_m, "HK_METRICS_FILE=%s", m);
  char *env[] = {env_tl, env_m, "HK_NVML_LIBRARY=libhk-no-such-nvml.so.1",
                 NULL};
  char *argv[] = {HKRUN_PATH, "--output-filename",
                  out,        "-np",
                  "2",        W_OUTPUTS,
                  "-",        "steps",
                  "0",        NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  if (r.exit_code != 0)
    fail_msg("job failed:\n%s", r.err);
  hkt_result_free(&r);
  f = fopen(victim, "r");
  char text[64] = "";
  assert_non_null(fgets(text, sizeof text, f));
  fclose(f);
  assert_string_equal(text, "precious\n");
  assert_true(S_ISREG(mode_of(tl)));
  assert_true(S_ISREG(mode_of(m)));
  assert_true(S_ISREG(mode_of(so)));
  json_error_t err;
  json_t *root = json_load_file(tl, 0, &err);
  assert_non_null(root);
  json_decref(root);
  /* private: 0600, the folder hkrun made 0700 */
  assert_int_equal(mode_of(tl) & 07777, 0600);
  assert_int_equal(mode_of(m) & 07777, 0600);
  assert_int_equal(mode_of(so) & 07777, 0600);
  char r1[4300];
  snprintf(r1, sizeof r1, "%s/rank.1", out);
  assert_int_equal(mode_of(r1) & 07777, 0700);
  /* HK_FILE_MODE=0644 for a reader of another user (node_exporter) */
  char *env2[] = {env_m, "HK_FILE_MODE=0644",
                  "HK_NVML_LIBRARY=libhk-no-such-nvml.so.1", NULL};
  char *argv2[] = {HKRUN_PATH, "-np", "2", W_OUTPUTS, "-", "steps", "0", NULL};
  assert_int_equal(hkt_run(argv2, env2, 60, &r), 0);
  assert_int_equal(r.exit_code, 0);
  hkt_result_free(&r);
  assert_int_equal(mode_of(m) & 07777, 0644);
  /* a folder hkrun would write into that is a link: refused, named */
  assert_int_equal(hkt_remove_tree(r1), 0);
  assert_int_equal(symlink(dir, r1), 0);
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  char said[9000];
  snprintf(said, sizeof said,
           "--output-filename: '%s' is not a folder hk made (a link or a "
           "file is there): refusing to write into it",
           r1);
  expect(r.err, said);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* HK_SECRET and HK_DUMP_FD are hk_init's alone: gone from the
 * environment once it succeeded, so a program the rank starts (a data
 * loader, a shell) never sees the job's secret. */
static void test_secret_gone(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "-np", "2", W_OUTPUTS, "-", "env", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 60, &r), 0);
  if (r.exit_code != 0)
    fail_msg("job failed:\n%s", r.err);
  assert_int_equal(
      hkt_count_lines(r.out, "before: HK_SECRET set, HK_DUMP_FD set"), 2);
  assert_int_equal(
      hkt_count_lines(r.out, "after: HK_SECRET unset, HK_DUMP_FD unset"), 2);
  assert_int_equal(
      hkt_count_lines(r.out, "child: HK_SECRET unset, HK_DUMP_FD unset"), 2);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* After each test: one that failed half-way leaves its job running; it
 * must not fail the next ones (their checks that nothing is left). */
static int end_leftovers(void **s) {
  (void)s;
  hkt_kill_orphans();
  return 0;
}

int main(void) {
  hkt_setup();
  umask(022); /* the modes asserted: HK_FILE_MODE less this */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_timeline_full_disk, end_leftovers),
      cmocka_unit_test_teardown(test_metrics_full_disk, end_leftovers),
      cmocka_unit_test_teardown(test_records_full_disk, end_leftovers),
      cmocka_unit_test_teardown(test_output_files_full_disk, end_leftovers),
      cmocka_unit_test_teardown(test_made_at_init, end_leftovers),
      cmocka_unit_test_teardown(test_no_link_followed, end_leftovers),
      cmocka_unit_test_teardown(test_secret_gone, end_leftovers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
