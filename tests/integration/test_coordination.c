/*
 * test_coordination - issue 4's behaviours end to end, through hkrun:
 * fusion and the response cache never change a result bit; the timeline
 * parses as JSON with every tensor's phases in order, also after the job
 * was killed; the stall inspector names the stalled tensors and missing
 * ranks, and with a shutdown time stops every rank (case C1).
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define W(name) WORKER_DIR "/" name

/* Steps of the fusion run: 500 by default (the figure); the
 * sanitizer stages of scripts/test.sh lower it with HKT_FUSION_STEPS. */
static const char *fusion_steps(void) {
  const char *s = getenv("HKT_FUSION_STEPS");
  return s && *s ? s : "500";
}

/* Runs w_fusion under one configuration on np ranks in hosts of `local`
 * (HK_LOCAL_RANK/SIZE given to the workers); returns the hash all ranks
 * agree on (malloc'd). log_line, unless NULL, must be on exactly one line
 * of stderr. */
static char *fusion_hash_on(int np, int local, const char *steps,
                            char *const env[], const char *log_line) {
  char cmd[512], n[16];
  snprintf(n, sizeof n, "%d", np);
  hkt_hosts_cmd(cmd, sizeof cmd, local, W("w_fusion"), steps);
  char *argv[] = {HKRUN_PATH, "-np", n, "sh", "-c", cmd, NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 280, &r);
  if (rc != 0 || r.exit_code != 0 ||
      hkt_count_lines(r.out, "fusion hash") != np ||
      (log_line && hkt_count_lines(r.err, log_line) != 1))
    fail_msg("w_fusion: rc=%d exit=%d (want '%s' in stderr)\nstdout:\n%.3000s"
             "\nstderr:\n%.3000s",
             rc, r.exit_code, log_line ? log_line : "", r.out, r.err);
  char *h = strstr(r.out, "fusion hash ");
  char *hash = strndup(h + 12, 16);
  for (char *p = r.out; (p = strstr(p, "fusion hash ")); p += 12)
    if (strncmp(p + 12, hash, 16) != 0)
      fail_msg("ranks disagree bitwise:\n%s", r.out);
  hkt_result_free(&r);
  return hash;
}

static char *fusion_hash(char *const env[]) {
  return fusion_hash_on(3, 3, fusion_steps(), env, NULL);
}

static void test_fusion_and_cache_are_invisible(void **s) {
  (void)s;
  char *on_env[] = {NULL};
  char *off_env[] = {"HK_FUSION_THRESHOLD=0", "HK_CACHE_CAPACITY=0", NULL};
  char *small_env[] = {"HK_FUSION_THRESHOLD=1048576", NULL};
  char *on = fusion_hash(on_env), *off = fusion_hash(off_env),
       *small = fusion_hash(small_env);
  assert_string_equal(on, off);
  assert_string_equal(on, small);
  free(on);
  free(off);
  free(small);
}

/* More tensors alive (41 a step) than HK_CACHE_CAPACITY=16: the least
 * recently used are evicted (no bit changes: the hash is the cache-off
 * run's), rank 0 warns once naming the capacity and how to raise it, and
 * says the cache's hit rate at HK_LOG_LEVEL=info. */
static void test_cache_evicts_when_full(void **s) {
  (void)s;
  /* (the first step already evicts: fewer steps under the sanitizers) */
  const char *steps = getenv("HKT_FUSION_STEPS") ? fusion_steps() : "60";
  char *off_env[] = {"HK_CACHE_CAPACITY=0", NULL};
  char *off = fusion_hash_on(3, 3, steps, off_env, NULL);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "exec %s %s", W("w_fusion"), steps);
  char *argv[] = {HKRUN_PATH, "-np", "3", "sh", "-c", cmd, NULL};
  char *env[] = {"HK_CACHE_CAPACITY=16", "HK_LOG_LEVEL=info", NULL};
  hkt_result r;
  int rc = hkt_run(argv, env, 280, &r);
  const char *full = "the response cache is full (HK_CACHE_CAPACITY=16 "
                     "tensors)";
  const char *w = strstr(r.err, full);
  if (rc != 0 || r.exit_code != 0 || !w || strstr(w + 1, full) ||
      !strstr(w, "set HK_CACHE_CAPACITY to at least") ||
      !strstr(r.err, "response cache: ") ||
      !strstr(r.err, "16 of 16 entries live") || !strstr(r.out, off))
    fail_msg("rc=%d exit=%d, cache-off hash %s\nstdout:\n%.2000s\nstderr "
             "(cache lines):\n%.3000s",
             rc, r.exit_code, off, r.out,
             strstr(r.err, "response cache") ? strstr(r.err, "response cache")
                                             : r.err);
  /* the hit-rate line names the evictions */
  const char *line = strstr(r.err, "response cache: ");
  assert_non_null(strstr(line, "% hits ("));
  assert_null(strstr(line, " 0 evicted"));
  hkt_result_free(&r);
  free(off);
}

static void timeline_file(char *path, char *env_tl);
static void every_allreduce_ran(const char *path, const char *algorithm);

/* The same with hierarchical allreduce over 2 hosts of 2, and with
 * recursive doubling and auto: each tensor's algorithm follows from its
 * own size and the job (hk_allreduce_for_tensor), never from the
 * threshold or its batch, so fusion still changes no bit. Under auto
 * every w_fusion tensor may be fused (at most 512 KiB, under the direct
 * size of 768 KiB), so each runs the schedule a batch of 768 KiB gets,
 * hierarchical, alone or fused, though rd is the choice for most of their
 * own sizes: the log line says so and the timeline shows it.
 * HKT_FUSION_ALGOS=auto (the TSan stage of scripts/test.sh) runs auto's
 * pair alone, its timeline then being the proof that it ran. */
static void test_fusion_invisible_every_algorithm(void **s) {
  (void)s;
  const char *steps = getenv("HKT_FUSION_STEPS") ? fusion_steps() : "100";
  const char *only = getenv("HKT_FUSION_ALGOS");
  const int auto_only = only && strcmp(only, "auto") == 0;
  const char *algos[] = {"HK_HIERARCHICAL_ALLREDUCE=1", "HK_ALLREDUCE_ALGO=rd",
                         "HK_ALLREDUCE_ALGO=auto"};
  char *ring_env[] = {"HK_ALLREDUCE_ALGO=ring", NULL};
  char *ring = auto_only ? NULL : fusion_hash_on(4, 2, steps, ring_env, NULL);
  char path[96], env_tl[128];
  timeline_file(path, env_tl);
  for (int a = auto_only ? 2 : 0; a < 3; a++) {
    const int is_auto = a == 2;
    /* auto's run also writes the timeline and logs its choice */
    char *on_env[] = {(char *)algos[a], is_auto ? env_tl : NULL,
                      "HK_LOG_LEVEL=info", NULL};
    char *off_env[] = {(char *)algos[a], "HK_FUSION_THRESHOLD=0",
                       "HK_CACHE_CAPACITY=0", NULL};
    char *on = fusion_hash_on(
             4, 2, steps, on_env,
             is_auto ? "tensors up to 786432 B (fused or not): hierarchical"
                     : NULL),
         *off = fusion_hash_on(4, 2, steps, off_env, NULL);
    if (strcmp(on, off) != 0)
      fail_msg("%s: fusion on %s, off %s", algos[a], on, off);
    /* real-valued floats: another association, other last bits */
    if (ring && strcmp(on, ring) == 0)
      fail_msg("%s gave the flat ring's hash %s: did it run?", algos[a], on);
    free(on);
    free(off);
  }
  every_allreduce_ran(path, "hierarchical");
  unlink(path);
  free(ring);
}

/* Every tensor row's phases, from a parsed timeline. */
typedef struct phases {
  double ts[6], dur[6];
  int seen[6];
  int fused;
} phases;

static const char *phase_names[6] = {"NEGOTIATE", "WAIT_FOR_DATA",
                                     "QUEUE",     "MEMCPY_IN_FUSION_BUFFER",
                                     "ALLREDUCE", "MEMCPY_OUT"};

static json_t *load_timeline(const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root)
    fail_msg("%s does not parse as JSON: line %d: %s", path, err.line,
             err.text);
  assert_true(json_is_array(root));
  return root;
}

/* A temporary timeline file (path, 96 bytes; the test unlinks it) and
 * the HK_TIMELINE=path setting naming it (env_tl, 128 bytes). */
static void timeline_file(char *path, char *env_tl) {
  assert_int_equal(hkt_mkstemp("hk_timeline_", path, 96), 0);
  snprintf(env_tl, 128, "HK_TIMELINE=%s", path);
}

static void test_timeline_phases(void **s) {
  (void)s;
  char path[96], env_tl[128];
  timeline_file(path, env_tl);
  /* the timeline names the algorithm that ran: force one to check it */
  char *env[] = {env_tl, "HK_ALLREDUCE_ALGO=rd", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_fusion"), "5", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 120, &r), 0);
  assert_int_equal(r.exit_code, 0);
  hkt_result_free(&r);
  json_t *root = load_timeline(path);
  /* rows: tid -> tensor name (metadata), then phases per (tid) */
  phases ph[64];
  memset(ph, 0, sizeof ph);
  int cycles = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *name = json_string_value(json_object_get(ev, "name"));
    const char *type = json_string_value(json_object_get(ev, "ph"));
    int tid = (int)json_integer_value(json_object_get(ev, "tid"));
    assert_non_null(name);
    assert_non_null(type);
    if (!strcmp(type, "i") && !strcmp(name, "CYCLE_START"))
      cycles++;
    if (strcmp(type, "X") || tid <= 0 || tid >= 64)
      continue;
    for (int k = 0; k < 6; k++)
      if (!strcmp(name, phase_names[k])) {
        /* the last step's occurrence wins: all steps have the same shape */
        ph[tid].seen[k] = 1;
        ph[tid].ts[k] = json_number_value(json_object_get(ev, "ts"));
        ph[tid].dur[k] = json_number_value(json_object_get(ev, "dur"));
        if (k == 4) {
          json_t *args = json_object_get(ev, "args");
          assert_string_equal(
              json_string_value(json_object_get(args, "algorithm")), "rd");
          assert_string_equal(
              json_string_value(json_object_get(args, "transport")), "shm");
          ph[tid].fused =
              json_integer_value(json_object_get(args, "fused_tensors")) > 1;
        }
      }
  }
  int rows = 0, fused_rows = 0;
  for (int t = 1; t < 64; t++) {
    if (!ph[t].seen[4])
      continue;
    rows++;
    for (int k = 0; k < 6; k++)
      if ((k != 3 && k != 5) || ph[t].fused)
        assert_true(ph[t].seen[k]);
    /* NEGOTIATE ends where QUEUE starts; then copy in, reduce, copy out */
    double end_neg = ph[t].ts[0] + ph[t].dur[0];
    assert_true(end_neg <= ph[t].ts[2] + 1);
    double t_q = ph[t].ts[2] + ph[t].dur[2];
    if (ph[t].fused) {
      fused_rows++;
      assert_true(t_q <= ph[t].ts[3] + 1);
      assert_true(ph[t].ts[3] + ph[t].dur[3] <= ph[t].ts[4] + 1);
      assert_true(ph[t].ts[4] + ph[t].dur[4] <= ph[t].ts[5] + 1);
    } else {
      assert_true(t_q <= ph[t].ts[4] + 1);
    }
  }
  assert_int_equal(rows, 41); /* 40 grad tensors + grad.shape */
  assert_true(fused_rows > 0);
  assert_int_equal(cycles, 0); /* only with HK_TIMELINE_MARK_CYCLES=1 */
  json_decref(root);
  unlink(path);
}

/* Every allreduce span of the timeline at path ran `algorithm`, and some
 * of them were fused batches. */
static void every_allreduce_ran(const char *path, const char *algorithm) {
  json_t *root = load_timeline(path);
  int spans = 0, fused = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *name = json_string_value(json_object_get(ev, "name"));
    const char *type = json_string_value(json_object_get(ev, "ph"));
    if (!name || !type || strcmp(type, "X") || strcmp(name, "ALLREDUCE"))
      continue;
    json_t *args = json_object_get(ev, "args");
    const char *algo = json_string_value(json_object_get(args, "algorithm"));
    if (!algo || strcmp(algo, algorithm) != 0)
      fail_msg("an allreduce ran '%s', not %s", algo ? algo : "?", algorithm);
    spans++;
    fused += json_integer_value(json_object_get(args, "fused_tensors")) > 1;
  }
  assert_true(spans >= 40); /* a step's 40 tensors and grad.shape, each */
  assert_true(fused > 0);
  json_decref(root);
}

/* What one row (tensor) of the timeline holds. */
typedef struct row {
  char tensor[64];
  char coll[32], algorithm[32]; /* the collective's span and its args */
  int colls;                    /* collective spans on the row */
  double wait_us;               /* WAIT_FOR_DATA's duration */
  int last_rank;                /* its args.last_rank */
  int negotiate, wait;          /* NEGOTIATE / WAIT_FOR_DATA spans seen */
  double neg_ts, neg_dur, wait_ts;
} row;

/* Every collective is labelled with its own name and the algorithm that
 * ran; WAIT_FOR_DATA spans the first rank's request to the last's, so a
 * rank that submits 400 ms late shows (and is named); hkrun
 * --timeline-mark-cycles marks rounds with CYCLE_START. */
static void test_timeline_names_every_collective(void **s) {
  (void)s;
  char path[96];
  assert_int_equal(hkt_mkstemp("hk_timeline_", path, sizeof path), 0);
  char *argv[] = {HKRUN_PATH,
                  "-np",
                  "2",
                  "--timeline-filename",
                  path,
                  "--timeline-mark-cycles",
                  W("w_timeline"),
                  NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, NULL, 120, &r), 0);
  if (r.exit_code != 0)
    fail_msg("w_timeline failed:\n%s", r.err);
  hkt_result_free(&r);
  json_t *root = load_timeline(path);
  row rows[64];
  memset(rows, 0, sizeof rows);
  int cycles = 0;
  static const char *const colls[] = {"ALLREDUCE",     "BROADCAST", "ALLGATHER",
                                      "REDUCESCATTER", "ALLTOALL",  "BARRIER",
                                      "JOIN"};
  size_t i;
  json_t *ev;
  json_array_foreach(root, i, ev) {
    const char *name = json_string_value(json_object_get(ev, "name"));
    const char *type = json_string_value(json_object_get(ev, "ph"));
    int tid = (int)json_integer_value(json_object_get(ev, "tid"));
    json_t *args = json_object_get(ev, "args");
    if (!strcmp(type, "i") && !strcmp(name, "CYCLE_START"))
      cycles++;
    if (tid <= 0 || tid >= 64)
      continue;
    row *w = &rows[tid];
    if (!strcmp(type, "M")) {
      snprintf(w->tensor, sizeof w->tensor, "%s",
               json_string_value(json_object_get(args, "name")));
      continue;
    }
    double ts = json_number_value(json_object_get(ev, "ts"));
    double dur = json_number_value(json_object_get(ev, "dur"));
    if (!strcmp(name, "NEGOTIATE")) {
      w->negotiate++;
      w->neg_ts = ts;
      w->neg_dur = dur;
    } else if (!strcmp(name, "WAIT_FOR_DATA")) {
      w->wait++;
      w->wait_ts = ts;
      w->wait_us = dur;
      w->last_rank =
          (int)json_integer_value(json_object_get(args, "last_rank"));
    }
    for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++)
      if (!strcmp(name, colls[k])) {
        w->colls++;
        snprintf(w->coll, sizeof w->coll, "%s", name);
        snprintf(w->algorithm, sizeof w->algorithm, "%s",
                 json_string_value(json_object_get(args, "algorithm")));
      }
  }
  /* tensor -> the collective and algorithm it must show (np 2 on one
   * host over shared memory: auto chooses the ring, which the shm engine
   * runs, for every allreduce size) */
  static const struct {
    const char *tensor, *coll, *algorithm;
  } want[] = {
      {"t.allreduce", "ALLREDUCE", "ring"},
      {"t.broadcast", "BROADCAST", "chain"},
      {"t.allgather", "ALLGATHER", "ring"},
      {"t.reducescatter", "REDUCESCATTER", "ring"},
      {"t.alltoall", "ALLTOALL", "pairwise"},
      {"hk.barrier.0", "BARRIER", "negotiation"},
      {"t.late", "ALLREDUCE", "ring"},
      {"hk.join.0", "JOIN", "negotiation"},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    const row *w = NULL;
    for (int t = 1; t < 64 && !w; t++)
      if (!strcmp(rows[t].tensor, want[k].tensor))
        w = &rows[t];
    if (!w)
      fail_msg("no timeline row for %s", want[k].tensor);
    if (w->colls != 1 || strcmp(w->coll, want[k].coll) ||
        strcmp(w->algorithm, want[k].algorithm))
      fail_msg("%s: %d collective spans, the last %s (%s); expected one %s "
               "(%s)",
               want[k].tensor, w->colls, w->coll, w->algorithm, want[k].coll,
               want[k].algorithm);
    assert_int_equal(w->negotiate, 1);
    assert_int_equal(w->wait, 1);
    /* WAIT_FOR_DATA starts with NEGOTIATE and lies inside it */
    assert_true(fabs(w->wait_ts - w->neg_ts) < 1);
    assert_true(w->wait_us <= w->neg_dur + 1);
    if (!strcmp(want[k].tensor, "t.late")) {
      if (w->wait_us < 300e3 || w->last_rank != 1)
        fail_msg("t.late: WAIT_FOR_DATA %.0f us, last rank %d; expected >= "
                 "300 ms and rank 1 (it submits 400 ms late)",
                 w->wait_us, w->last_rank);
    }
  }
  assert_true(cycles >= 1);
  json_decref(root);
  unlink(path);
}

/* HK_TIMELINE_MAX_MB bounds the file: a run that writes more stops at the
 * bound with a valid file whose last event says what was cut; the events
 * before it are whole. A bound the run stays under changes nothing. */
static void test_timeline_bounded(void **s) {
  (void)s;
  char path[] = "/tmp/hk_timeline_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char env_tl[128];
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", path);
  /* 0.25 MiB: 30 steps of 41 tensors write about 1.4 MB */
  char *env[] = {env_tl, "HK_TIMELINE_MAX_MB=0.25", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_fusion"), "30", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 120, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "HK_TIMELINE: the file reached "
                                "HK_TIMELINE_MAX_MB (262144 bytes)"));
  hkt_result_free(&r);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_true(sb.st_size <= 262144 && sb.st_size > 200000);
  json_t *root = load_timeline(path);
  size_t n = json_array_size(root);
  assert_true(n > 500);
  json_t *last = json_array_get(root, n - 1);
  assert_string_equal(json_string_value(json_object_get(last, "name")),
                      "TIMELINE_TRUNCATED");
  json_t *args = json_object_get(last, "args");
  assert_true(json_integer_value(json_object_get(args, "events_not_written")) >
              1000);
  assert_non_null(
      strstr(json_string_value(json_object_get(args, "note")), "262144 bytes"));
  for (size_t i = 0; i + 1 < n; i++) /* nothing else was cut short */
    assert_non_null(json_object_get(json_array_get(root, i), "ph"));
  json_decref(root);
  /* a bound far above: the whole timeline, no note */
  char *env2[] = {env_tl, "HK_TIMELINE_MAX_MB=64", NULL};
  char *argv2[] = {HKRUN_PATH, "-np", "2", W("w_fusion"), "3", NULL};
  assert_int_equal(hkt_run(argv2, env2, 120, &r), 0);
  assert_int_equal(r.exit_code, 0);
  hkt_result_free(&r);
  root = load_timeline(path);
  json_t *ev;
  size_t i;
  json_array_foreach(root, i, ev) assert_string_not_equal(
      json_string_value(json_object_get(ev, "name")), "TIMELINE_TRUNCATED");
  json_decref(root);
  unlink(path);
}

/* A job killed mid-run (hkrun SIGKILLed: its workers die with it) leaves a
 * timeline that still parses. */
static void test_timeline_survives_kill(void **s) {
  (void)s;
  /* a directory of its own: a rank that sees hkrun die before it dies
   * writes its flight record beside the timeline (observe/flight.h) */
  char dir[96], path[128];
  assert_int_equal(hkt_mkdtemp("hk_timeline_", dir, sizeof dir), 0);
  snprintf(path, sizeof path, "%s/timeline.json", dir);
  char env_tl[160];
  snprintf(env_tl, sizeof env_tl, "HK_TIMELINE=%s", path);
  char *env[] = {env_tl, NULL};
  char *argv[] = {HKRUN_PATH, "-np", "2", W("w_fail"), "kill", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  assert_int_equal(hkt_wait_lines(&p, "ready pid=", 2, 120), 0);
  assert_int_equal(kill(p.pid, SIGKILL), 0);
  hkt_result r;
  hkt_finish(&p, 20, &r);
  assert_int_equal(r.signal, SIGKILL);
  hkt_result_free(&r);
  /* its workers die with it (PR_SET_PDEATHSIG); reap them before reading */
  for (int i = 0; i < 100 && hkt_orphans(NULL, 0) > 0; i++) {
    hkt_kill_orphans();
  }
  json_t *root = load_timeline(path);
  assert_true(json_array_size(root) > 3);
  json_decref(root);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* Case C1 with a shutdown time: warnings name both tensors and the
 * missing ranks; every rank's wait fails; hkrun exits non-zero; ~6 s. */
static void test_stall_shutdown(void **s) {
  (void)s;
  char *env[] = {"HK_STALL_CHECK_TIME_S=2", "HK_STALL_SHUTDOWN_TIME_S=5", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", W("w_fail"), "stall", NULL};
  hkt_result r;
  assert_int_equal(hkt_run(argv, env, 60, &r), 0);
  assert_int_not_equal(r.exit_code, 0);
  assert_true(r.elapsed_s < 15);
  const char *warn = strstr(r.err, "warning: stall:");
  if (!warn)
    fail_msg("no stall warning:\n%s", r.err);
  assert_non_null(
      strstr(warn, "tensor 'grad.b' (waiting 2 s): missing on rank 1,"));
  assert_non_null(strstr(warn, "'grad.B' (waiting"));
  assert_non_null(
      strstr(warn, "missing on ranks 0, 2, 3, submitted by rank 1"));
  /* every rank's wait ended with the stall error */
  assert_int_equal(hkt_count_lines(r.err, "wait gave stalled"), 4);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  hkt_result_free(&r);
}

/* Without a shutdown time the warning repeats and the job waits. */
static void test_stall_warning_repeats(void **s) {
  (void)s;
  char *env[] = {"HK_STALL_CHECK_TIME_S=1", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "4", W("w_fail"), "stall", NULL};
  hkt_proc p;
  assert_int_equal(hkt_start(argv, env, &p), 0);
  assert_int_equal(hkt_wait_lines(&p, "warning: stall:", 3, 30), 0);
  assert_int_equal(kill(p.pid, SIGTERM), 0);
  hkt_result r;
  hkt_finish(&p, 20, &r);
  assert_int_equal(r.exit_code, 128 + SIGTERM);
  assert_int_equal(hkt_count_lines(r.err, "wait gave stalled"), 0);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fusion_and_cache_are_invisible),
      cmocka_unit_test(test_cache_evicts_when_full),
      cmocka_unit_test(test_fusion_invisible_every_algorithm),
      cmocka_unit_test(test_timeline_phases),
      cmocka_unit_test(test_timeline_names_every_collective),
      cmocka_unit_test(test_timeline_survives_kill),
      cmocka_unit_test(test_timeline_bounded),
      cmocka_unit_test(test_stall_shutdown),
      cmocka_unit_test(test_stall_warning_repeats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
