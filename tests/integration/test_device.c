/*
 * test_device - GPU tensors end to end on the emulated device
 * (HK_DEVICE=emu): w_device's modes under hkrun at np 1-4, pseudo-hosts
 * for the hierarchical and staged paths, compression, mismatches, and
 * injected device faults. Every result is checked bitwise against a
 * serial model inside w_device; here the exit statuses, the lines each
 * rank prints, the errors' wording, the time a fault takes, and that no
 * process or shared-memory segment is left behind.
 */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* The job's own emu segments still in /dev/shm: every "/hk-emu-<hex>"
 * its rank 0s named at HK_LOG_LEVEL=debug ("creating ..."). Other jobs
 * (another test running at the same time) have segments of their own,
 * with other names: those are not this job's and are not counted. */
static int own_segments_left(const char *err) {
  static const char key[] = "emu communicator: creating /";
  int n = 0, named = 0;
  for (const char *p = err; p && (p = strstr(p, key)); p += sizeof key - 1) {
    char name[64];
    size_t len = strspn(p + sizeof key - 1,
                        "hk-emu0123456789abcdef"); /* the name's alphabet */
    if (len == 0 || len >= sizeof name - 10)
      continue;
    snprintf(name, sizeof name, "/dev/shm/%.*s", (int)len, p + sizeof key - 1);
    named++;
    if (access(name, F_OK) == 0) {
      fprintf(stderr, "test_device: the job left %s\n", name);
      n++;
    }
  }
  return named > 0 ? n : -1; /* -1: the job named none (no debug log?) */
}

/* env with HK_LOG_LEVEL=debug added (so that rank 0 names its segments);
 * out holds cap entries. */
static char **with_debug(char *const env[], char **out, int cap) {
  int n = 0;
  out[n++] = "HK_LOG_LEVEL=debug";
  for (int i = 0; env && env[i] && n < cap - 1; i++)
    out[n++] = env[i];
  out[n] = NULL;
  return out;
}

/* Runs `w_device args` under hkrun -np np, ranks in blocks of `local`
 * per pseudo-host (0: one host), with extra env; expects exit 0 and one
 * "device ok: <mode>" line per rank. */
static void run_mode(int np, int local, char *const env[], const char *args,
                     const char *mode, double timeout) {
  char cmd[1024], npb[8], ok[64];
  snprintf(npb, sizeof npb, "%d", np);
  hkt_hosts_cmd(cmd, sizeof cmd, local, W_DEVICE, args);
  char *argv[] = {HKRUN_PATH, "-np", npb, "sh", "-c", cmd, NULL};
  char *denv[16];
  hkt_result r;
  int rc = hkt_run(argv, with_debug(env, denv, 16), timeout, &r);
  snprintf(ok, sizeof ok, "device ok: %s", mode);
  if (rc != 0 || r.exit_code != 0 || hkt_count_lines(r.out, ok) != np)
    fail_msg("%s (np %d): rc %d exit %d, %d x '%s'\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             cmd, np, rc, r.exit_code, hkt_count_lines(r.out, ok), ok, r.out,
             r.err);
  int left = own_segments_left(r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  assert_true(left <= 0); /* -1: a mode without a communicator */
}

static char *emu_env[] = {"HK_DEVICE=emu", NULL};

/* Flight records (hk-flight.*.txt) below a folder. */
static int records;
static int count_record(const char *path, const struct stat *sb, int type,
                        struct FTW *ftw) {
  (void)sb;
  records += type == FTW_F && !strncmp(path + ftw->base, "hk-flight.", 10);
  return 0;
}

/* A failing job's ranks write flight records: into a folder of the
 * test's own (HK_FLIGHT_DIR, *env_out), not the machine's temporary
 * folder. fault_dir_end checks that at least `want` were written, and
 * removes the folder. */
static void fault_dir(char *dir, size_t cap, char *env_out, size_t env_cap) {
  assert_int_equal(hkt_mkdtemp("hkt-flight-", dir, cap), 0);
  snprintf(env_out, env_cap, "HK_FLIGHT_DIR=%s", dir);
}

static void fault_dir_end(const char *dir, int want) {
  records = 0;
  assert_int_equal(nftw(dir, count_record, 8, FTW_PHYS), 0);
  if (records < want)
    fail_msg("%d flight records in %s, expected %d or more", records, dir,
             want);
  assert_int_equal(hkt_remove_tree(dir), 0);
}

/* The counts {0, 1, np+1, 1000003} (the sanitizer stages lower
 * the big one with HKT_ALLREDUCE_BIG). */
static void dtypes_np(int np, const char *mode, char *const env[]) {
  const char *big = getenv("HKT_ALLREDUCE_BIG");
  char args[128];
  snprintf(args, sizeof args, "%s 0 1 %d %s", mode, np + 1,
           big && *big ? big : "1000003");
  run_mode(np, 0, env, args, mode, 280);
}

static void test_dtypes_np1(void **s) {
  (void)s;
  dtypes_np(1, "dtypes", emu_env);
}
static void test_dtypes_np2(void **s) {
  (void)s;
  dtypes_np(2, "dtypes", emu_env);
}
static void test_dtypes_np3(void **s) {
  (void)s;
  dtypes_np(3, "dtypes", emu_env);
}
static void test_dtypes_np4(void **s) {
  (void)s;
  dtypes_np(4, "dtypes", emu_env);
}

/* HK_ALLREDUCE_ALGO=ring: staged through hk's ring, the same bits as the
 * host tensors'. */
static void test_ring_equals_host(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  dtypes_np(3, "ring", env);
}

/* Hierarchical on 2 and 3 pseudo-hosts x 2 emulated GPUs. */
static void test_hier_2x2(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_HIERARCHICAL_ALLREDUCE=1", NULL};
  run_mode(4, 2, env, "hier 0 1 5 40009", "hier", 280);
}
static void test_hier_3x2(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_HIERARCHICAL_ALLREDUCE=1",
                 "HK_FUSION_THRESHOLD=65536", NULL};
  run_mode(6, 2, env, "hier 0 1 7 30011", "hier", 280);
}

/* One GPU per host: the staged path, the flat ring's bits; also in
 * 64 KiB staging chunks (HK_STAGING_CHUNK_BYTES: several chunks a
 * tensor, all four slots in turn), which change no bit. */
static void test_staged_one_gpu_per_host(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", NULL};
  run_mode(3, 1, env, "hier 0 1 4 20011", "hier", 280);
  char *small[] = {"HK_DEVICE=emu", "HK_STAGING_CHUNK_BYTES=65536", NULL};
  run_mode(3, 1, small, "hier 0 1 4 200011", "hier", 280);
}

static void test_fusion_300(void **s) {
  (void)s;
  run_mode(3, 0, emu_env, "fusion 300", "fusion", 280);
  char *env[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  run_mode(2, 0, env, "fusion 300", "fusion", 280);
}

/* Integer prescale/postscale on device tensors give the host's bits:
 * one host (the communicator), and the staged ring. */
static void test_integer_scales(void **s) {
  (void)s;
  run_mode(2, 0, emu_env, "intscale", "intscale", 280);
  run_mode(3, 0, emu_env, "intscale", "intscale", 280);
  char *env[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  run_mode(3, 0, env, "intscale", "intscale", 280);
}

static void test_producer_stream_delay(void **s) {
  (void)s;
  run_mode(2, 0, emu_env, "delay", "delay", 120);
}

/* A write ordered after hk_device_stream() waits for hk's read of the
 * tensor, on the device communicator and on the staged ring. */
static void test_device_stream_orders_reuse(void **s) {
  (void)s;
  run_mode(2, 0, emu_env, "reuse", "reuse", 120);
  char *env[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  run_mode(2, 0, env, "reuse staged", "reuse", 120);
}

/* Two device batches in flight at once (w_device overlap: the second is
 * enqueued while the first's producer is held), results bit for bit; at
 * np 1 and 3, and under HK_DEVICE_INFLIGHT=2, the least that overlaps.
 * Batches waited for one at a time fail here: the first never completes
 * while the second is not enqueued (HK_TIMEOUT_S). */
static void test_overlap(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_TIMEOUT_S=10", NULL};
  run_mode(1, 0, env, "overlap", "overlap np=1 in flight at once: 2", 60);
  run_mode(3, 0, env, "overlap", "overlap np=3 in flight at once: 2", 60);
  char *two[] = {"HK_DEVICE=emu", "HK_TIMEOUT_S=10", "HK_DEVICE_INFLIGHT=2",
                 NULL};
  run_mode(3, 0, two, "overlap", "overlap np=3 in flight at once: 2", 60);
}

/* HK_DEVICE_INFLIGHT=1 bounds it to one: the second batch is not enqueued
 * while the first is held, so the first times out (HK_TIMEOUT_S = 2 s)
 * and hk_wait_stream on the second fails with it; nothing stays. */
static void test_overlap_bounded(void **s) {
  (void)s;
  char fdir[256], fdenv[300];
  fault_dir(fdir, sizeof fdir, fdenv, sizeof fdenv);
  char *env[] = {"HK_DEVICE=emu", "HK_TIMEOUT_S=2", "HK_DEVICE_INFLIGHT=1",
                 fdenv, NULL};
  char *argv[] = {HKRUN_PATH, "-np", "1", W_DEVICE, "overlap", NULL};
  hkt_result r;
  hkt_run(argv, env, 60, &r);
  fault_dir_end(fdir, 1);
  const char *want = "hk_wait_stream(b, sb) -> timed out: tensor 'overlap.b': "
                     "tensor 'overlap.a': the device allreduce did not "
                     "complete within HK_TIMEOUT_S = 2 s on rank 0";
  if (r.timed_out || r.exit_code == 0 || hkt_count_lines(r.err, want) != 1 ||
      hkt_count_lines(r.out, "device ok") != 0)
    fail_msg("HK_DEVICE_INFLIGHT=1: exit %d, want one '%s'\nstdout:\n"
             "%.2000s\nstderr:\n%.3000s",
             r.exit_code, want, r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void test_compression(void **s) {
  (void)s;
  char *fp16[] = {"HK_DEVICE=emu", "HK_COMPRESSION=fp16", NULL};
  run_mode(3, 0, fp16, "compress 3001 fp16", "compress", 120);
  char *bf16[] = {"HK_DEVICE=emu", "HK_COMPRESSION=bf16", NULL};
  run_mode(2, 0, bf16, "compress 3001 bf16", "compress", 120);
}

/* 16-bit averages whose sum overflows float16 (8 x 60000 > 65504): finite
 * and near the value on the communicator's path, the staged ring's, and
 * float32 compressed to float16 (issue 13 item 6 on device tensors). */
static void test_half16_average(void **s) {
  (void)s;
  run_mode(8, 0, emu_env, "half16 1001", "half16", 240);
  char *ring[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  run_mode(8, 0, ring, "half16 1001", "half16", 240);
  char *fp16[] = {"HK_DEVICE=emu", "HK_COMPRESSION=fp16", NULL};
  run_mode(8, 0, fp16, "half16 1001", "half16", 240);
}

static void test_mismatch(void **s) {
  (void)s;
  run_mode(3, 0, emu_env, "mismatch", "mismatch", 120);
}

static void test_grouped_cache_join(void **s) {
  (void)s;
  run_mode(3, 0, emu_env, "features", "features", 120);
  char *env[] = {"HK_DEVICE=emu", "HK_HIERARCHICAL_ALLREDUCE=1", NULL};
  run_mode(4, 2, env, "features", "features", 120);
}

/* A communicator operation that starts late (HK_EMU_FAULT=delay) only
 * delays: the results are still right. */
static void test_fault_delay_only_delays(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_EMU_FAULT=delay:1:0:300", NULL};
  run_mode(3, 0, env, "dtypes 5", "dtypes", 120);
}

/* One visible device per process (a per-rank CUDA_VISIBLE_DEVICES): every
 * local rank takes it (the local rank modulo the count), and the results
 * are right; an explicit HK_GPU outside the visible devices fails hk_init
 * on that rank, naming the index and the count. */
static void test_one_visible_device(void **s) {
  (void)s;
  char *one[] = {"HK_DEVICE=emu", "HK_EMU_DEVICES=1", NULL};
  run_mode(3, 0, one, "dtypes 5", "dtypes", 120);
  char *three[] = {"HK_DEVICE=emu", "HK_EMU_DEVICES=2", NULL};
  run_mode(3, 0, three, "dtypes 5", "dtypes", 120);
  char *bad[] = {"HK_DEVICE=emu", "HK_EMU_DEVICES=1", "HK_GPU=1", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "1", W_DEVICE, "dtypes", "5", NULL};
  hkt_result r;
  hkt_run(argv, bad, 60, &r);
  const char *want = "device 1 requested (HK_GPU), but 1 visible";
  if (r.timed_out || r.exit_code == 0 || hkt_count_lines(r.err, want) != 1)
    fail_msg("HK_GPU=1 of 1: exit %d, want one '%s'\nstdout:\n%.2000s\n"
             "stderr:\n%.2000s",
             r.exit_code, want, r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* A tensor on another GPU than hk's is refused on every rank; the rank
 * that has it logs both devices. */
static void test_other_device(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_EMU_DEVICES=2", "HK_GPU=0", NULL};
  char *argv[] = {HKRUN_PATH, "-np", "3", W_DEVICE, "otherdev", NULL};
  hkt_result r;
  hkt_run(argv, env, 120, &r);
  const char *both = "tensor 'otherdev': its buffer is on GPU 1, but hk uses "
                     "GPU 0 on rank 2";
  if (r.timed_out || r.exit_code != 0 ||
      hkt_count_lines(r.out, "device ok: otherdev") != 3 ||
      hkt_count_lines(r.err, both) != 1)
    fail_msg("otherdev: exit %d, want 3 ok and one '%s'\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             r.exit_code, both, r.out, r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

/* hk puts back the calling thread's current device (w_device current
 * checks it after hk_init, a submit, hk_wait_stream and hk_free). */
static void test_current_device_kept(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", "HK_EMU_DEVICES=2", "HK_GPU=0", NULL};
  run_mode(2, 0, env, "current", "current", 120);
}

/* A job of host tensors makes no device context and no communicator id
 * (as HK_DEVICE=auto on a GPU machine); the first device allreduce makes
 * the id on the host's first rank (w_device lazy counts them). */
static void test_lazy_context(void **s) {
  (void)s;
  char *env[] = {"HK_DEVICE=emu", NULL};
  run_mode(2, 0, env, "lazy", "lazy", 120);
}

static void test_collectives(void **s) {
  (void)s;
  run_mode(3, 0, emu_env, "collectives", "collectives", 120);
  run_mode(4, 2, emu_env, "collectives", "collectives", 120);
  run_mode(3, 0, emu_env, "moves", "moves", 120); /* int16 and bool */
}

/* Device tensors on process sets: one host (each set's own communicator,
 * bit for bit against its fold in set-rank order; two pairs at once, each
 * on its own), the ring forced (staged over the set's ring), and
 * pseudo-hosts of 2 (sets across hosts: staged; pairs inside a host: their
 * communicator). */
static void test_sets(void **s) {
  (void)s;
  run_mode(4, 0, emu_env, "sets fold", "sets np=4", 120);
  run_mode(3, 0, emu_env, "sets fold", "sets np=3", 120);
  char *ring[] = {"HK_DEVICE=emu", "HK_ALLREDUCE_ALGO=ring", NULL};
  run_mode(4, 0, ring, "sets", "sets np=4", 120);
  run_mode(4, 2, emu_env, "sets", "sets np=4", 120);
}

/* A faulty device job's environment: the emu with HK_EMU_FAULT=spec, a
 * 5 s HK_TIMEOUT_S, debug logs, and flight records into a folder of the
 * test's own (dir: fault_dir_end checks and removes it). */
typedef struct fault_job {
  char fault[64], dir[256], flight[300];
  char *env[6];
} fault_job;

static void fault_job_init(fault_job *f, const char *spec) {
  snprintf(f->fault, sizeof f->fault, "HK_EMU_FAULT=%s", spec);
  fault_dir(f->dir, sizeof f->dir, f->flight, sizeof f->flight);
  char *env[] = {"HK_DEVICE=emu", "HK_TIMEOUT_S=5", "HK_LOG_LEVEL=debug",
                 f->fault,        f->flight,        NULL};
  memcpy(f->env, env, sizeof env);
}

/* An injected fault on rank 1: every rank fails within HK_TIMEOUT_S (5 s)
 * plus start-up, naming the cause; hkrun exits non-zero; nothing stays. */
static void fault(const char *spec, const char *cause) {
  fault_job f;
  fault_job_init(&f, spec);
  char *argv[] = {HKRUN_PATH, "-np", "3", W_DEVICE, "fault", NULL};
  hkt_result r;
  double t0 = hkt_now();
  hkt_run(argv, f.env, 60, &r);
  double took = hkt_now() - t0;
  fault_dir_end(f.dir, 1);
  int named = hkt_count_lines(r.out, cause);
  if (r.timed_out || r.exit_code == 0 || named < 1 || took > 30)
    fail_msg("%s: exit %d after %.1f s, %d ranks named '%s'\nstdout:\n"
             "%.3000s\nstderr:\n%.3000s",
             spec, r.exit_code, took, named, cause, r.out, r.err);
  int left = own_segments_left(r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  assert_true(left <= 0);
}

/* A fault (HK_EMU_FAULT=spec) in the second of two batches in flight
 * (rank 1's communicator operation #1, overlap.b): every rank fails,
 * `named` ranks or more naming `cause` and `nsecond` lines saying
 * `second`, within HK_TIMEOUT_S (5 s) plus start-up; nothing stays. */
static void second_in_flight(const char *spec, const char *cause, int named,
                             const char *second, int nsecond) {
  fault_job f;
  fault_job_init(&f, spec);
  char dir[256];
  assert_int_equal(hkt_mkdtemp("hkt-overlap-", dir, sizeof dir), 0);
  char *argv[] = {HKRUN_PATH, "-np",   "3", W_DEVICE,
                  "overlap",  "fault", dir, NULL};
  hkt_result r;
  double t0 = hkt_now();
  hkt_run(argv, f.env, 60, &r);
  double took = hkt_now() - t0;
  assert_int_equal(hkt_remove_tree(dir), 0);
  fault_dir_end(f.dir, 1);
  int got = hkt_count_lines(r.out, cause);
  int failed = hkt_count_lines(r.out, " failed: ");
  int said = hkt_count_lines(r.out, second);
  if (r.timed_out || r.exit_code == 0 || failed != 3 || got < named ||
      said != nsecond || took > 30)
    fail_msg("overlap %s: exit %d after %.1f s, %d ranks failed, %d named "
             "'%s', %d said '%s'\nstdout:\n%.3000s\nstderr:\n%.3000s",
             spec, r.exit_code, took, failed, got, cause, said, second, r.out,
             r.err);
  int left = own_segments_left(r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  assert_true(left <= 0);
}

/* An async error: rank 1 names its own in overlap.b, the peers rank 1's
 * abort of it (in overlap.b, or overlap.a on a peer that had not yet seen
 * overlap.a end when the communicator was aborted: it cannot tell that
 * its work was whole). A hang: every rank fails in overlap.b (overlap.a
 * ended long before), the watchdog of the rank that times out first
 * naming HK_TIMEOUT_S, counted from when overlap.b became the oldest in
 * flight; the others its abort. */
static void test_fault_second_in_flight(void **s) {
  (void)s;
  second_in_flight("error:1:1",
                   "injected async error (HK_EMU_FAULT) in allreduce #1 on "
                   "rank 1",
                   3,
                   "tensor 'overlap.b': the device allreduce failed on rank "
                   "1: injected",
                   1);
  second_in_flight("hang:1:1", "within HK_TIMEOUT_S = 5 s", 1,
                   "tensor 'overlap.b'", 3);
}

static void test_fault_async_error(void **s) {
  (void)s;
  fault("error:1:2", "injected");
}

static void test_fault_hang(void **s) {
  (void)s;
  fault("hang:1:2", "HK_TIMEOUT_S");
}

/* A communicator operation whose call fails on rank 1 (outside the
 * watchdog's wait): hk aborts the communicator at once, so every rank
 * fails naming the cause (the peers: "aborted by rank 1: injected enqueue
 * failure ..."), long before HK_TIMEOUT_S (60 s here), while rank 1 stays
 * alive without hk_shutdown (which would abort it too) until hkrun ends
 * the job for the peers' failures. */
static void test_fault_enqueue_aborts(void **s) {
  (void)s;
  char fdir[256], fdenv[300];
  fault_dir(fdir, sizeof fdir, fdenv, sizeof fdenv);
  char *env[] = {"HK_DEVICE=emu",
                 "HK_TIMEOUT_S=60",
                 "HK_LOG_LEVEL=debug",
                 "HK_EMU_FAULT=enqueue:1:2",
                 fdenv,
                 NULL};
  char *argv[] = {HKRUN_PATH, "-np",    "3", W_DEVICE,
                  "fault",    "linger", "1", NULL};
  hkt_result r;
  hkt_run(argv, env, 50, &r);
  fault_dir_end(fdir, 1);
  const char *cause = "injected enqueue failure (HK_EMU_FAULT) in allreduce "
                      "#2 on rank 1";
  int named = hkt_count_lines(r.out, cause);
  if (r.timed_out || r.exit_code == 0 || named != 3)
    fail_msg("enqueue:1:2: exit %d, %d ranks named '%s'\nstdout:\n%.3000s\n"
             "stderr:\n%.3000s",
             r.exit_code, named, cause, r.out, r.err);
  int left = own_segments_left(r.err);
  hkt_result_free(&r);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
  assert_true(left <= 0);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtypes_np1),
      cmocka_unit_test(test_dtypes_np2),
      cmocka_unit_test(test_dtypes_np3),
      cmocka_unit_test(test_dtypes_np4),
      cmocka_unit_test(test_ring_equals_host),
      cmocka_unit_test(test_sets),
      cmocka_unit_test(test_hier_2x2),
      cmocka_unit_test(test_hier_3x2),
      cmocka_unit_test(test_staged_one_gpu_per_host),
      cmocka_unit_test(test_fusion_300),
      cmocka_unit_test(test_integer_scales),
      cmocka_unit_test(test_producer_stream_delay),
      cmocka_unit_test(test_device_stream_orders_reuse),
      cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_overlap_bounded),
      cmocka_unit_test(test_compression),
      cmocka_unit_test(test_half16_average),
      cmocka_unit_test(test_mismatch),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_one_visible_device),
      cmocka_unit_test(test_other_device),
      cmocka_unit_test(test_current_device_kept),
      cmocka_unit_test(test_lazy_context),
      cmocka_unit_test(test_grouped_cache_join),
      cmocka_unit_test(test_fault_delay_only_delays),
      cmocka_unit_test(test_fault_second_in_flight),
      cmocka_unit_test(test_fault_async_error),
      cmocka_unit_test(test_fault_hang),
      cmocka_unit_test(test_fault_enqueue_aborts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
