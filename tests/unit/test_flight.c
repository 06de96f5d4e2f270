/*
 * test_flight.c - the flight recorder: the ring keeps the newest entries
 * in order when it wraps (common/flight_record.h), the record file reads
 * back as written (names with tabs, newlines and backslashes included),
 * malformed records give errors naming the line and fault, and the
 * recorder's hooks (observe/flight.h, through the dispatch of
 * observe/observe.h) record a round's collectives, wrap, list the tensors
 * in flight, and write on SIGUSR1 through the pipe.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/flight_record.h"
#include "common/status.h"
#include "coordinator/wire.h"
#include "observe/flight.h"

/* A fresh folder under $TMPDIR (scripts/test.sh gives each run one). */
static void make_dir(char *out, size_t cap) {
  const char *t = getenv("TMPDIR");
  snprintf(out, cap, "%s/hk-flight-test.XXXXXX", t && *t == '/' ? t : "/tmp");
  assert_non_null(mkdtemp(out));
}

/* Removes the folder's files and the folder. */
static void remove_dir(const char *dir, const char *job, int ranks) {
  for (int r = 0; r < ranks; r++) {
    char name[96], path[4400];
    hk_flight_file_name(job, r, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
  }
  char path[4400];
  snprintf(path, sizeof path, "%s/bad.txt", dir);
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

/* hk_flight_write into the folder named dir, mode 0600. */
static hk_status write_record(const char *dir, const hk_flight_header *h,
                              const hk_flight_ring *r,
                              const hk_flight_entry *pending, size_t n) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(fd >= 0);
  hk_status st = hk_flight_write(fd, dir, 0600, h, r, pending, n);
  close(fd);
  return st;
}

/* The folder the recorder of a process outside any launcher (its job id:
 * the pid's) makes in base, into out. */
static void own_job_dir(const char *base, char *out, size_t cap) {
  char job[17], name[32];
  hk_flight_job_id(NULL, job);
  hk_flight_job_folder(job, name, sizeof name);
  snprintf(out, cap, "%s/%s", base, name);
}

static void test_ring_wraps_keeping_newest(void **s) {
  (void)s;
  hk_flight_ring r;
  assert_int_equal(hk_flight_ring_init(&r, 5), HK_OK);
  assert_int_equal(hk_flight_ring_count(&r), 0);
  for (int i = 0; i < 3; i++)
    snprintf(hk_flight_ring_push(&r)->name, 8, "e%d", i);
  assert_int_equal(hk_flight_ring_count(&r), 3);
  assert_string_equal(hk_flight_ring_at(&r, 0)->name, "e0");
  for (int i = 3; i < 12; i++)
    snprintf(hk_flight_ring_push(&r)->name, 8, "e%d", i);
  assert_int_equal(hk_flight_ring_count(&r), 5);
  for (size_t i = 0; i < 5; i++) { /* the newest 5, oldest first */
    char want[8];
    snprintf(want, sizeof want, "e%zu", i + 7);
    assert_string_equal(hk_flight_ring_at(&r, i)->name, want);
    assert_int_equal(hk_flight_ring_at(&r, i)->seq, i + 8);
  }
  assert_null(hk_flight_ring_find(&r, 7)); /* overwritten */
  assert_null(hk_flight_ring_find(&r, 0));
  assert_null(hk_flight_ring_find(&r, 13)); /* not yet */
  assert_string_equal(hk_flight_ring_find(&r, 8)->name, "e7");
  assert_string_equal(hk_flight_ring_find(&r, 12)->name, "e11");
  hk_flight_ring_free(&r);
}

static void fill_header(hk_flight_header *h, int rank) {
  memset(h, 0, sizeof *h);
  memcpy(h->job, "0123456789abcdef", 17);
  h->rank = rank;
  h->size = 4;
  snprintf(h->host, sizeof h->host, "host\tone");
  h->pid = 4242;
  snprintf(h->reason, sizeof h->reason, "a reason\nover two lines");
  h->written_us = 1700000000000000;
  h->rounds = 9;
  h->capacity = 3;
  h->recorded = 4;
}

static void test_record_round_trip(void **s) {
  (void)s;
  char dir[4096];
  make_dir(dir, sizeof dir);
  hk_flight_ring r;
  assert_int_equal(hk_flight_ring_init(&r, 3), HK_OK);
  for (int i = 0; i < 4; i++) {
    hk_flight_entry *e = hk_flight_ring_push(&r);
    e->round = (uint64_t)i + 1;
    e->state = HK_FLIGHT_DONE;
    e->kind = HK_COLL_ALLGATHER;
    e->dtype = HK_BFLOAT16;
    e->bytes = 1000u + (unsigned)i;
    for (int k = 0; k < HK_FLIGHT_NTIMES; k++) {
      e->real_us[k] = 1700000000000000 + 10 * i + k;
      e->mono_us[k] = 5000 + 10 * i + k;
    }
    snprintf(e->name, sizeof e->name, "w\\%d\t\n", i);
  }
  hk_flight_entry pend = {.state = HK_FLIGHT_SUBMITTED,
                          .kind = HK_COLL_BROADCAST,
                          .set = 3,
                          .dtype = HK_INT64,
                          .bytes = 8};
  pend.real_us[0] = 17;
  snprintf(pend.name, sizeof pend.name, "pending one");
  hk_flight_header h;
  fill_header(&h, 2);
  h.pending_left_out = 99998; /* in flight, not listed */
  assert_int_equal(write_record(dir, &h, &r, &pend, 1), HK_OK);
  char path[4200];
  snprintf(path, sizeof path, "%s/hk-flight.0123456789abcdef.2.txt", dir);
  hk_flight_file f;
  assert_int_equal(hk_flight_read(path, &f), HK_OK);
  assert_string_equal(f.h.job, "0123456789abcdef");
  assert_int_equal(f.h.rank, 2);
  assert_int_equal(f.h.size, 4);
  assert_string_equal(f.h.host, "host\tone");
  assert_int_equal(f.h.pid, 4242);
  assert_string_equal(f.h.reason, "a reason\nover two lines");
  assert_int_equal(f.h.rounds, 9);
  assert_int_equal(f.h.recorded, 4);
  assert_int_equal(f.nentries, 3);
  for (size_t i = 0; i < 3; i++) {
    const hk_flight_entry *e = &f.entries[i];
    char want[16];
    snprintf(want, sizeof want, "w\\%zu\t\n", i + 1);
    assert_string_equal(e->name, want);
    assert_int_equal(e->seq, i + 2);
    assert_int_equal(e->round, i + 2);
    assert_int_equal(e->state, HK_FLIGHT_DONE);
    assert_int_equal(e->kind, HK_COLL_ALLGATHER);
    assert_int_equal(e->dtype, HK_BFLOAT16);
    assert_int_equal(e->bytes, 1001 + i);
    assert_int_equal(e->real_us[3], 1700000000000000 + 10 * (i + 1) + 3);
    assert_int_equal(e->mono_us[1], 5000 + 10 * (i + 1) + 1);
  }
  assert_int_equal(f.npending, 1);
  assert_string_equal(f.pending[0].name, "pending one");
  assert_int_equal(f.pending[0].kind, HK_COLL_BROADCAST);
  assert_int_equal(f.pending[0].set, 3);
  assert_int_equal(f.entries[0].set, 0);
  assert_int_equal(f.pending[0].real_us[0], 17);
  assert_int_equal(f.h.pending_left_out, 99998);
  hk_flight_file_free(&f);
  /* no temporary is left beside it */
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s/.hk-flight.0123456789abcdef.2.txt.%ld.tmp", dir,
           (long)getpid());
  assert_int_equal(access(tmp, F_OK), -1);
  hk_flight_ring_free(&r);
  remove_dir(dir, "0123456789abcdef", 4);
}

/* 1 when process pid has a file open in dir (a flight record being
 * written): one of its /proc/PID/fd links points into dir. */
static int writing_into(pid_t pid, const char *dir) {
  char fds[64];
  snprintf(fds, sizeof fds, "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(fds);
  int found = 0;
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    char link[320], target[4200];
    snprintf(link, sizeof link, "%s/%s", fds, e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) {
      target[n] = 0;
      found =
          strncmp(target, dir, strlen(dir)) == 0 && target[strlen(dir)] == '/';
    }
  }
  if (d)
    closedir(d);
  return found;
}

/* A process killed while it writes its flight record (as a rank is, or
 * exits, while its background thread writes one) leaves no temporary
 * file: only a whole record, or none. The child rewrites a record of
 * 20000 entries over and over; it is killed once it is seen with the
 * file open (mid-write), and the folder then holds nothing but a record
 * that reads back whole. */
static void test_killed_mid_write_leaves_nothing(void **s) {
  (void)s;
  char dir[4096];
  make_dir(dir, sizeof dir);
  for (int attempt = 0; attempt < 3; attempt++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      hk_flight_ring r;
      if (hk_flight_ring_init(&r, 20000) != HK_OK)
        _exit(3);
      for (int i = 0; i < 20000; i++) {
        hk_flight_entry *e = hk_flight_ring_push(&r);
        e->state = HK_FLIGHT_DONE;
        e->kind = HK_COLL_ALLREDUCE; /* a record reads back only with a kind */
        snprintf(e->name, sizeof e->name, "tensor %d", i);
      }
      hk_flight_header h;
      fill_header(&h, 1);
      for (;;)
        if (write_record(dir, &h, &r, NULL, 0) != HK_OK)
          _exit(4);
    }
    int st = 0;
    while (!writing_into(pid, dir) && waitpid(pid, &st, WNOHANG) == 0)
      ;
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st)); /* killed, not failed */
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
      if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 &&
          strcmp(e->d_name, "..") != 0)
        fail_msg("left in %s: %s", dir, e->d_name);
    closedir(d);
    char path[4200];
    snprintf(path, sizeof path, "%s/hk-flight.0123456789abcdef.1.txt", dir);
    if (access(path, F_OK) == 0) {
      hk_flight_file f;
      assert_int_equal(hk_flight_read(path, &f), HK_OK);
      assert_int_equal(f.nentries, 20000);
      hk_flight_file_free(&f);
    }
  }
  remove_dir(dir, "0123456789abcdef", 2);
}

/* Writes text as dir/bad.txt and reads it: the error message. */
static void expect_bad(const char *dir, const char *text, const char *what) {
  char path[4200];
  snprintf(path, sizeof path, "%s/bad.txt", dir);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
  hk_flight_file f;
  assert_int_equal(hk_flight_read(path, &f), HK_ERR_INVALID_ARG);
  if (!strstr(hk_last_error(), what) || !strstr(hk_last_error(), path))
    fail_msg("for %s: got '%s'", what, hk_last_error());
  assert_null(f.entries);
}

static void test_record_errors(void **s) {
  (void)s;
  char dir[4096];
  make_dir(dir, sizeof dir);
  const char *head = "hk-flight\t2\njob\t0123456789abcdef\nrank\t1\nsize\t4\n"
                     "host\th\npid\t7\nreason\tr\nwritten_us\t5\nrounds\t2\n"
                     "capacity\t10\nrecorded\t1\n";
  char buf[2048];
  expect_bad(dir, "garbage\n",
             "line 1: expected 'hk-flight<TAB>value' (this is not an hk "
             "flight record)");
  expect_bad(dir, "", "line 1: the file is empty");
  snprintf(buf, sizeof buf, "%s", head);
  expect_bad(dir, buf, "line 12: the record is cut short (no 'end' line)");
  snprintf(buf, sizeof buf, "%sentry\t1\t1\tdone\tallreduce\n", head);
  expect_bad(dir, buf, "line 12: 'entry' has 5 fields, expected 17");
  snprintf(buf, sizeof buf,
           "%sentry\t1\t1\tdone\tallreduce\t0\tfloat33\t4\t0\t0\t0\t0\t0\t0\t0"
           "\t0\tx\n",
           head);
  expect_bad(dir, buf, "line 12: unknown dtype");
  snprintf(buf, sizeof buf,
           "%sentry\t1\t1\tdone\tallreduce\t-1\tfloat32\t4\t0\t0\t0\t0\t0\t0"
           "\t0\t0\tx\n",
           head);
  expect_bad(dir, buf, "line 12: the process set is not a number of one");
  snprintf(buf, sizeof buf,
           "%sentry\t1\t1\tdone\tallreduce\t0\tfloat32\t4\t0\t0\t0\t0\t0\t0\t0"
           "\t0\tx\nend\t2\t0\n",
           head);
  expect_bad(dir, buf,
             "line 13: 'end' counts 2 entries and 0 pending, the "
             "file has 1 and 0");
  snprintf(buf, sizeof buf, "%send\t0\t0\nmore\n", head);
  expect_bad(dir, buf, "line 13: text after the 'end' line");
  expect_bad(dir, "hk-flight\t1\njob\txyz\n",
             "line 1: unsupported format version");
  expect_bad(dir, "hk-flight\t2\njob\txyz\n",
             "line 2: the job id is not 16 hex digits");
  snprintf(buf, sizeof buf, "%send\t0\t0", head);
  expect_bad(dir, buf, "line 12: the line is cut short (no newline)");
  hk_flight_file f;
  char missing[4200];
  snprintf(missing, sizeof missing, "%s/none.txt", dir);
  assert_int_equal(hk_flight_read(missing, &f), HK_ERR_SYSTEM);
  assert_non_null(strstr(hk_last_error(), "none.txt"));
  remove_dir(dir, "0123456789abcdef", 0);
}

/* The engine a test plays: its tensors in flight (none queued). */
typedef struct fake_engine {
  const hk_obs_tensor *inflight[4];
  size_t n;
} fake_engine;

static void each_pending(void *engine, hk_obs_visit visit, void *arg) {
  fake_engine *e = engine;
  for (size_t i = 0; i < e->n; i++)
    visit(arg, e->inflight[i], 0);
}

/* A rank 0 of one with a recorder of cap entries writing into dir,
 * attached to o as hk_init attaches it. */
static hk_config *attach(hk_observers *o, fake_engine *e, const char *dir,
                         size_t cap) {
  hk_config *cfg = calloc(1, sizeof *cfg);
  assert_non_null(cfg);
  cfg->flight_recorder = cap;
  cfg->flight_signal = 1; /* HK_FLIGHT_SIGNAL=1 */
  cfg->dump_fd = -1;
  cfg->file_mode = 0600;
  snprintf(cfg->flight_dir, sizeof cfg->flight_dir, "%s", dir);
  memset(o, 0, sizeof *o);
  hk_obs_setup s = {
      .cfg = cfg, .rank = 0, .size = 1, .pending = {each_pending, e}};
  assert_int_equal(hk_flight_attach(o, &s), HK_OK);
  return cfg;
}

static void detach(hk_observers *o, hk_config *cfg) {
  hk_observe_detach(o, 0);
  free(cfg);
}

/* Reads the record rank 0 wrote into its job's folder in dir. */
static void read_own(const char *dir, hk_flight_file *f) {
  char job[17], name[96], sub[4200], path[4400];
  snprintf(job, sizeof job, "%016lx", (unsigned long)getpid());
  hk_flight_file_name(job, 0, name, sizeof name);
  own_job_dir(dir, sub, sizeof sub);
  snprintf(path, sizeof path, "%s/%s", sub, name);
  assert_int_equal(hk_flight_read(path, f), HK_OK);
}

/* A tensor of the test: its request, slot and view. */
typedef struct tensor {
  hk_wire_request req;
  uint64_t slot;
  hk_obs_tensor t;
} tensor;

static void make_tensor(tensor *x, const char *name, unsigned coll,
                        unsigned dtype, size_t count, double t_submit) {
  memset(x, 0, sizeof *x);
  snprintf(x->req.name, sizeof x->req.name, "%s", name);
  x->req.coll = (uint8_t)coll;
  x->req.dtype = (uint8_t)dtype;
  x->req.count = count;
  x->t =
      (hk_obs_tensor){.req = &x->req, .t_submit = t_submit, .slot = &x->slot};
}

static void test_hooks_record_wrap_and_pending(void **s) {
  (void)s;
  char dir[4096];
  make_dir(dir, sizeof dir);
  fake_engine eng = {0};
  hk_observers o;
  hk_config *cfg = attach(&o, &eng, dir, 4);
  hk_wire_response ok;
  memset(&ok, 0, sizeof ok);
  tensor hs[7];
  for (int i = 0; i < 7; i++) { /* one round per tensor, all done */
    char name[16];
    snprintf(name, sizeof name, "grad.%d", i);
    make_tensor(&hs[i], name, HK_COLL_ALLREDUCE, HK_FLOAT32, 10, 100.0 + i);
    hk_obs_tensor *t = &hs[i].t;
    hk_observe_taken(&o, t);
    hk_observe_round_started(&o, &(hk_obs_round){1, 100.5 + i, 0});
    t->resp = &ok;
    t->t_ready = 100.5 + i;
    hk_observe_negotiated(&o, t);
    hk_obs_batch b = {.tensors = t, .n = 1, .t_start = 100.6 + i};
    hk_observe_batch_started(&o, &b);
    b.status = HK_OK;
    b.t_end = 100.7 + i;
    hk_observe_batch_done(&o, &b);
  }
  /* one taken and in flight, one still in the queue (no entry yet) */
  tensor late, queued;
  make_tensor(&late, "late", HK_COLL_BROADCAST, HK_INT32, 3, 200);
  hk_observe_taken(&o, &late.t);
  make_tensor(&queued, "queued", HK_COLL_BROADCAST, HK_INT32, 3, 200);
  eng.inflight[eng.n++] = &late.t;
  eng.inflight[eng.n++] = &queued.t;
  hk_observe_error(&o, HK_ERR_TIMEOUT, "unit test");
  hk_flight_file f;
  read_own(dir, &f);
  assert_string_equal(f.h.reason, "unit test");
  assert_int_equal(f.h.rounds, 7);
  assert_int_equal(f.h.recorded, 8);
  assert_int_equal(f.nentries, 4); /* grad.4, grad.5, grad.6, late */
  for (int i = 0; i < 3; i++) {
    const hk_flight_entry *e = &f.entries[i];
    char want[16];
    snprintf(want, sizeof want, "grad.%d", i + 4);
    assert_string_equal(e->name, want);
    assert_int_equal(e->round, i + 5);
    assert_int_equal(e->state, HK_FLIGHT_DONE);
    assert_int_equal(e->bytes, 40);
    assert_int_equal(e->mono_us[HK_FLIGHT_T_SUBMIT], (104 + i) * 1000000);
    assert_int_equal(e->mono_us[HK_FLIGHT_T_END],
                     (int64_t)((100.7 + (i + 4)) * 1e6));
    /* the wall clock is the monotonic one moved by an offset read once
     * per round (two readings a few microseconds apart) */
    int64_t d =
        (e->real_us[3] - e->mono_us[3]) - (e->real_us[0] - e->mono_us[0]);
    assert_true(d > -1000 && d < 1000);
    assert_true(e->real_us[0] > 1600000000000000); /* after 2020 */
  }
  assert_string_equal(f.entries[3].name, "late");
  assert_int_equal(f.entries[3].state, HK_FLIGHT_SUBMITTED);
  assert_int_equal(f.entries[3].round, 0);
  assert_int_equal(f.npending, 2);
  int seen_late = 0, seen_queued = 0;
  for (size_t i = 0; i < 2; i++) {
    seen_late += !strcmp(f.pending[i].name, "late");
    seen_queued += !strcmp(f.pending[i].name, "queued");
    assert_int_equal(f.pending[i].kind, HK_COLL_BROADCAST);
    assert_int_equal(f.pending[i].bytes, 12);
    assert_int_equal(f.pending[i].mono_us[0], 200000000);
  }
  assert_int_equal(seen_late + seen_queued, 2);
  hk_flight_file_free(&f);
  /* SIGUSR1 only makes the pipe readable; the "background thread" (this
   * test) writes the record when it sees it */
  assert_int_equal(raise(SIGUSR1), 0);
  struct pollfd p;
  assert_int_equal(hk_observe_poll_fds(&o, &p, 1), 1);
  assert_int_equal(poll(&p, 1, 10000), 1);
  hk_observe_polled(&o, &p);
  read_own(dir, &f);
  assert_string_equal(f.h.reason, "SIGUSR1 (a dump was asked for)");
  hk_flight_file_free(&f);
  assert_int_equal(poll(&p, 1, 0), 0); /* drained */
  detach(&o, cfg);
  char job[17], sub[4200];
  snprintf(job, sizeof job, "%016lx", (unsigned long)getpid());
  own_job_dir(dir, sub, sizeof sub);
  remove_dir(sub, job, 1);
  assert_int_equal(rmdir(dir), 0);
}

static void test_off_records_nothing(void **s) {
  (void)s;
  fake_engine eng = {0};
  hk_observers o;
  hk_config *cfg = attach(&o, &eng, ".", 0);
  assert_int_equal(o.n, 0); /* not attached */
  struct pollfd p;
  assert_int_equal(hk_observe_poll_fds(&o, &p, 1), 0);
  tensor h;
  make_tensor(&h, "", HK_COLL_ALLREDUCE, HK_FLOAT32, 0, 0);
  hk_wire_response ok;
  memset(&ok, 0, sizeof ok);
  hk_observe_taken(&o, &h.t);
  h.t.resp = &ok;
  h.t.t_ready = 1.0;
  hk_observe_negotiated(&o, &h.t);
  hk_observe_error(&o, HK_ERR_TIMEOUT, "nothing");
  assert_int_equal(h.slot, 0);
  detach(&o, cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_wraps_keeping_newest),
      cmocka_unit_test(test_record_round_trip),
      cmocka_unit_test(test_killed_mid_write_leaves_nothing),
      cmocka_unit_test(test_record_errors),
      cmocka_unit_test(test_hooks_record_wrap_and_pending),
      cmocka_unit_test(test_off_records_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
