/*
 * test_sets - process sets end to end (include/hk/hk.h, "Process sets"):
 * workers/w_sets.c under hkrun, checked for each rank's report, its exit
 * status, the messages every rank gets, and processes left behind.
 *
 *  - every collective on sets of every rank, of ranks 1..np-1 (rank 0
 *    coordinates without being a member) and of the even ranks, at np 1 to
 *    4, over shared memory and TCP, with recursive doubling forced, against
 *    serial results; a rank outside a set is refused;
 *  - two disjoint sets running different collectives at once, interleaved
 *    with the world's, and a set running while another's tensor waits;
 *  - membership that differs, bad arguments, removal (in flight too) and
 *    re-adding, unknown and removed sets, roots outside the set: the same
 *    status and message on every rank, and the job goes on;
 *  - the stall inspector naming a set's missing rank, and the flight
 *    records (hkrun --diagnose) listing the set's tensor with its set;
 *  - the timeline naming each tensor's set;
 *  - HK_PROCESS_SETS: sets at hk_init, and hk_init failing on every rank
 *    when ranks were given different ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"

#define W(name) WORKER_DIR "/" name

/* Runs argv (env may be NULL) and expects every one of np ranks to print
 * `ok`, hkrun to exit 0 and nothing left behind. */
static void run_ok(char *const argv[], char *const env[], int np,
                   const char *ok) {
  hkt_result r;
  int rc = hkt_run(argv, env, 120, &r);
  if (rc != 0 || !r.exited || r.exit_code != 0 ||
      hkt_count_lines(r.out, ok) != np)
    fail_msg("%s %s: rc=%d exit=%d timed_out=%d, %d x '%s' (want %d)\n"
             "stdout:\n%.4000s\nstderr:\n%.4000s",
             argv[3], argv[4], rc, r.exit_code, r.timed_out,
             hkt_count_lines(r.out, ok), ok, np, r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void collectives(const char *np, char *const env[]) {
  char ok[64];
  snprintf(ok, sizeof ok, "sets ok: collectives np=%s", np);
  char *argv[] = {HKRUN_PATH,    "-np", (char *)np, W("w_sets"),
                  "collectives", "3",   NULL};
  run_ok(argv, env, atoi(np), ok);
}

/* Every collective on a set, np 1 to 4: the default transport (shared
 * memory inside the host) and TCP; the cache answers from iteration 2. */
static void test_collectives(void **s) {
  (void)s;
  const char *nps[] = {"1", "2", "3", "4"};
  for (int i = 0; i < 4; i++)
    collectives(nps[i], NULL);
  char *tcp[] = {"HK_INTRA_TRANSPORT=tcp", NULL};
  collectives("3", tcp);
  collectives("4", tcp);
}

/* Recursive doubling over a set's links (sets of 3: not a power of two),
 * and the ring forced. */
static void test_collectives_algorithms(void **s) {
  (void)s;
  char *rd[] = {"HK_ALLREDUCE_ALGO=rd", NULL};
  collectives("4", rd);
  char *ring[] = {"HK_ALLREDUCE_ALGO=ring", "HK_FUSION_THRESHOLD=0", NULL};
  collectives("4", ring);
}

static void test_concurrent(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH,   "-np", "4", W("w_sets"),
                  "concurrent", "30",  NULL};
  run_ok(argv, NULL, 4, "sets ok: concurrent np=4");
}

/* w_sets checks each rank's status and message itself. */
static void test_errors(void **s) {
  (void)s;
  char *np3[] = {HKRUN_PATH, "-np", "3", W("w_sets"), "errors", NULL};
  run_ok(np3, NULL, 3, "sets ok: errors np=3");
  char *np4[] = {HKRUN_PATH, "-np", "4", W("w_sets"), "errors", NULL};
  run_ok(np4, NULL, 4, "sets ok: errors np=4");
}

/* A tensor of set {1,2} that rank 2 never submits: rank 0 warns naming the
 * set and its missing rank, then stops the job; every rank's wait says
 * why; the flight records say which set rank 1's pending tensor is of. */
static void test_stall(void **s) {
  (void)s;
  char dir[96], env_dir[128];
  assert_int_equal(hkt_mkdtemp("hk_sets_", dir, sizeof dir), 0);
  snprintf(env_dir, sizeof env_dir, "HK_FLIGHT_DIR=%s", dir);
  char *env[] = {"HK_STALL_CHECK_TIME_S=1", "HK_STALL_SHUTDOWN_TIME_S=3",
                 env_dir, NULL};
  char *argv[] = {HKRUN_PATH, "-np", "3", W("w_sets"), "stall", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  const char *warn = strstr(r.err, "warning: stall:");
  const char *named = "tensor 'stuck' in process set 1 (waiting ";
  const char *missing = "missing on rank 2, submitted by rank 1";
  if (r.exit_code == 0 || r.elapsed_s > 20 || !warn || !strstr(warn, named) ||
      !strstr(warn, missing) ||
      hkt_count_lines(r.err, "wait gave stalled") != 3)
    fail_msg("exit %d after %.1f s\nstderr:\n%.4000s", r.exit_code, r.elapsed_s,
             r.err);
  for (const char *p = r.err; (p = strstr(p, "wait gave stalled"));) {
    const char *end = strchr(p, '\n');
    const char *n = strstr(p, named), *m = strstr(p, missing);
    if (!n || !m || (end && (n > end || m > end)))
      fail_msg("a wait without the set's stall:\n%.4000s", r.err);
    p += 1;
  }
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  char job[4200]; /* the records are in the job's folder */
  assert_int_equal(hkt_flight_folder(dir, job, sizeof job), 0);
  char *diag[] = {HKRUN_PATH, "--diagnose", job, NULL};
  assert_int_equal(hkt_run(diag, NULL, 30, &r), 0);
  if (!strstr(r.out, "pending in process set 1 on rank 1: 'stuck' "
                     "(allreduce, submitted)"))
    fail_msg("hkrun --diagnose:\n%s\n%s", r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* Rank 0's timeline: each collective's span says its process set (rank 0
 * is in sets 1 and 3 of w_sets collectives at np 3, not in set 2), and the
 * adds are there. */
static void test_timeline(void **s) {
  (void)s;
  char dir[96], path[160], env_tl[192];
  assert_int_equal(hkt_mkdtemp("hk_sets_", dir, sizeof dir), 0);
  snprintf(path, sizeof path, "%s/timeline.json", dir);
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", path);
  char *env[] = {env_tl, NULL};
  char *argv[] = {HKRUN_PATH,    "-np", "3", W("w_sets"),
                  "collectives", "1",   NULL};
  run_ok(argv, env, 3, "sets ok: collectives np=3");
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root || !json_is_array(root))
    fail_msg("%s does not parse: line %d: %s", path, err.line, err.text);
  int adds = 0, spans[4] = {0, 0, 0, 0};
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *name = json_string_value(json_object_get(ev, "name"));
    json_t *args = json_object_get(ev, "args");
    const char *tensor = json_string_value(json_object_get(args, "tensor"));
    adds += name && !strcmp(name, "PROCESS_SET_ADD");
    if (!name || !tensor || strcmp(name, "ALLREDUCE") ||
        strncmp(tensor, "set", 3))
      continue;
    int set = atoi(tensor + 3); /* "set<id>.t<k>" */
    json_t *ps = json_object_get(args, "process_set");
    if (set < 1 || set > 3 || !json_is_integer(ps) ||
        json_integer_value(ps) != set)
      fail_msg("ALLREDUCE of '%s' says process_set %lld", tensor,
               ps ? (long long)json_integer_value(ps) : -1LL);
    spans[set]++;
  }
  json_decref(root);
  assert_int_equal(adds, 3);
  assert_true(spans[1] > 0 && spans[3] > 0);
  assert_int_equal(spans[2], 0); /* rank 0 is not in set 2 */
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* hkrun whose ranks get HK_PROCESS_SETS=`mine`, and rank 3 `rank3`. */
static void run_static(const char *mine, const char *rank3, hkt_result *r) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "if [ \"$HK_RANK\" = 3 ]; then HK_PROCESS_SETS='%s'; fi; "
           "HK_PROCESS_SETS=\"${HK_PROCESS_SETS-%s}\" exec %s static '%s'",
           rank3, mine, W("w_sets"), "1,3;0,2;2");
  char *argv[] = {HKRUN_PATH, "-np", "4", "sh", "-c", cmd, NULL};
  char env_sets[128];
  snprintf(env_sets, sizeof env_sets, "HK_PROCESS_SETS=%s", mine);
  char *env[] = {env_sets, NULL};
  assert_int_equal(hkt_run(argv, env, 60, r), 0);
}

/* HK_PROCESS_SETS: the sets, in order, their ranks sorted; given
 * differently on one rank: hk_init fails on every rank, naming who gave
 * what; a rank outside the job and bad text likewise. */
static void test_static(void **s) {
  (void)s;
  hkt_result r;
  run_static("3,1;0,2;2", "3,1;0,2;2", &r);
  if (r.exit_code != 0 || hkt_count_lines(r.out, "sets ok: static np=4 "
                                                 "sets=3") != 4)
    fail_msg("exit %d\nstdout:\n%.3000s\nstderr:\n%.3000s", r.exit_code, r.out,
             r.err);
  hkt_result_free(&r);
  run_static("3,1;0,2;2", "3,1;0,3;2", &r);
  const char *want = "HK_PROCESS_SETS: set 2: ranks disagree on the members: "
                     "ranks 0, 1, 2 give [0, 2]; rank 3 gives [0, 3]";
  if (r.exit_code == 0 || hkt_count_lines(r.err, want) != 4)
    fail_msg("exit %d, %d x '%s'\nstderr:\n%.3000s", r.exit_code,
             hkt_count_lines(r.err, want), want, r.err);
  hkt_result_free(&r);
  run_static("0,9", "0,9", &r);
  want = "HK_PROCESS_SETS: set 1: rank 0 passed rank 9, which is not a rank "
         "of this job (0 to 3)";
  if (r.exit_code == 0 || hkt_count_lines(r.err, want) != 4)
    fail_msg("exit %d\nstderr:\n%.3000s", r.exit_code, r.err);
  hkt_result_free(&r);
  run_static("0,,1", "0,,1", &r);
  want = "HK_PROCESS_SETS: ',1' is not a rank";
  if (r.exit_code == 0 || hkt_count_lines(r.err, want) != 4)
    fail_msg("exit %d\nstderr:\n%.3000s", r.exit_code, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_collectives_algorithms),
      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_stall),
      cmocka_unit_test(test_timeline),
      cmocka_unit_test(test_static),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
