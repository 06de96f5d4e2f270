/*
 * test_diagnose.c - hkrun --diagnose on record files written here
 * (common/flight_record.h): a consistent job, a rank that stopped a round
 * early, a tensor pending on some ranks only (the first by submit time is
 * named), a missing rank, an unfinished collective, records of two jobs,
 * and the errors: no folder, no record, a malformed record, ranks
 * disagreeing on the world size.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/flight_record.h"
#include "coordinator/wire.h"
#include "launcher/diagnose.h"

#define JOB "00000000000000aa"

typedef struct fixture {
  char dir[4096];
} fixture;

static int setup(void **s) {
  fixture *fx = calloc(1, sizeof *fx);
  const char *t = getenv("TMPDIR");
  snprintf(fx->dir, sizeof fx->dir, "%s/hk-diag-test.XXXXXX",
           t && *t == '/' ? t : "/tmp");
  if (!mkdtemp(fx->dir))
    return -1;
  *s = fx;
  return 0;
}

static int teardown(void **s) {
  fixture *fx = *s;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
  int rc = system(cmd);
  free(fx);
  return rc == 0 ? 0 : -1;
}

/* hk_flight_write of one record into the folder named dir (mode 0600). */
static void write_record(const char *dir, const hk_flight_header *h,
                         const hk_flight_ring *ring,
                         const hk_flight_entry *pending, size_t npending) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(dfd >= 0);
  assert_int_equal(hk_flight_write(dfd, dir, 0600, h, ring, pending, npending),
                   HK_OK);
  close(dfd);
}

/* Rank r of a job of `size`: rounds 1..rounds each carrying "g<round>"
 * (done, or `last_state` for the last one), and pending tensors
 * pend[0..npend) submitted at their index's time. */
static void write_rank_left_out(const char *dir, const char *job, int r,
                                int size, int rounds, int last_state,
                                const char *const *pend, int npend,
                                uint64_t left_out) {
  hk_flight_ring ring;
  assert_int_equal(hk_flight_ring_init(&ring, 100), HK_OK);
  for (int i = 1; i <= rounds; i++) {
    hk_flight_entry *e = hk_flight_ring_push(&ring);
    e->round = (uint64_t)i;
    e->state = i == rounds ? (uint8_t)last_state : HK_FLIGHT_DONE;
    e->kind = HK_COLL_ALLREDUCE;
    e->dtype = HK_FLOAT32;
    e->bytes = 64;
    e->real_us[0] = 1000 + i;
    snprintf(e->name, sizeof e->name, "g%d", i);
  }
  hk_flight_entry p[8];
  memset(p, 0, sizeof p);
  for (int i = 0; i < npend; i++) {
    p[i].state = HK_FLIGHT_SUBMITTED;
    p[i].kind = HK_COLL_ALLREDUCE;
    p[i].dtype = HK_FLOAT32;
    p[i].bytes = 32;
    /* submitted later on higher ranks: the first is the earliest anyway */
    p[i].real_us[0] = 5000 + 100 * (strcmp(pend[i], "t7") ? 1 : 0) + r;
    snprintf(p[i].name, sizeof p[i].name, "%s", pend[i]);
  }
  hk_flight_header h;
  memset(&h, 0, sizeof h);
  snprintf(h.job, sizeof h.job, "%s", job);
  h.rank = r;
  h.size = size;
  snprintf(h.host, sizeof h.host, "hostA");
  h.pid = 100 + r;
  snprintf(h.reason, sizeof h.reason, "SIGUSR1");
  h.written_us = 9000 + r + (job[15] == 'b' ? -5000 : 0);
  h.rounds = (uint64_t)rounds;
  h.capacity = 100;
  h.recorded = (uint64_t)rounds;
  h.pending_left_out = left_out;
  write_record(dir, &h, &ring, p, (size_t)npend);
  hk_flight_ring_free(&ring);
}

/* write_rank_left_out with every tensor in flight listed. */
static void write_rank(const char *dir, const char *job, int r, int size,
                       int rounds, int last_state, const char *const *pend,
                       int npend) {
  write_rank_left_out(dir, job, r, size, rounds, last_state, pend, npend, 0);
}

/* Runs the diagnosis: its exit status; out/err into malloc'd strings. */
static int diagnose(const char *dir, char **out, char **err) {
  size_t no, ne;
  FILE *o = open_memstream(out, &no), *e = open_memstream(err, &ne);
  int rc = hkrun_diagnose(dir, o, e);
  fclose(o);
  fclose(e);
  return rc;
}

static void expect(const char *text, const char *want) {
  if (!strstr(text, want))
    fail_msg("'%s' not in:\n%s", want, text);
}

static void test_consistent(void **s) {
  fixture *fx = *s;
  for (int r = 0; r < 3; r++)
    write_rank(fx->dir, JOB, r, 3, 5, HK_FLIGHT_DONE, NULL, 0);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "world size 3, 3 of 3 ranks present");
  expect(out, "missing: none");
  expect(out, "rank 1: hostA pid 101, 5 rounds, 5 collectives recorded");
  expect(out, "no divergence: every rank present ran rounds up to 5");
  assert_string_equal(err, "");
  free(out);
  free(err);
}

static void test_pending_on_some_ranks(void **s) {
  fixture *fx = *s;
  const char *const most[] = {"t8", "t7"}, *const last[] = {"t8"};
  for (int r = 0; r < 4; r++)
    write_rank(fx->dir, JOB, r, 4, 7, HK_FLIGHT_DONE, r == 3 ? last : most,
               r == 3 ? 1 : 2);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "first divergence: tensor 't7' (allreduce, float32, 32 bytes), "
              "after round 7 (the last round every rank ran): submitted by "
              "ranks 0-2; never submitted by rank 3");
  expect(out, "pending on every rank present (submitted, not yet "
              "negotiated): 1 tensor(s), the first 't8'");
  free(out);
  free(err);
  /* rank 2's record is missing: named, and left out of both lists */
  char path[4300];
  snprintf(path, sizeof path, "%s/hk-flight." JOB ".2.txt", fx->dir);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "3 of 4 ranks present");
  expect(out, "missing: rank 2 (no hk-flight." JOB ".RANK.txt)");
  expect(out, "submitted by ranks 0, 1; never submitted by rank 3");
  free(out);
  free(err);
}

/* A record that listed only part of what was in flight (its ring's
 * capacity): the count says so, and a tensor it does not list is not taken
 * for one the rank never submitted. */
static void test_pending_left_out(void **s) {
  fixture *fx = *s;
  const char *const both[] = {"t7", "t8"}, *const first[] = {"t7"};
  write_rank_left_out(fx->dir, JOB, 0, 2, 7, HK_FLIGHT_DONE, both, 2, 0);
  write_rank_left_out(fx->dir, JOB, 1, 2, 7, HK_FLIGHT_DONE, first, 1, 40);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "rank 1: hostA pid 101, 7 rounds, 7 collectives recorded (7 "
              "kept), 41 in flight (1 listed); written on: SIGUSR1");
  expect(out, "rank 0: hostA pid 100, 7 rounds, 7 collectives recorded (7 "
              "kept), 2 in flight; written on");
  assert_null(strstr(out, "divergence: tensor"));
  expect(out, "pending on every rank present (submitted, not yet "
              "negotiated): 2 tensor(s), the first 't7'");
  free(out);
  free(err);
}

/* A name with control bytes (a tab, a newline, an escape) cannot forge
 * lines of the report: they print as '?'. */
static void test_names_printable(void **s) {
  fixture *fx = *s;
  const char *const odd[] = {"x\tentry\n\x1b[2Jrank 9"};
  write_rank(fx->dir, JOB, 0, 2, 3, HK_FLIGHT_DONE, odd, 1);
  write_rank(fx->dir, JOB, 1, 2, 3, HK_FLIGHT_DONE, NULL, 0);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "first divergence: tensor 'x?entry??[2Jrank 9' (allreduce");
  assert_null(strchr(out, '\x1b'));
  free(out);
  free(err);
}

static void test_round_gap(void **s) {
  fixture *fx = *s;
  const char *const waiting[] = {"g6"};
  for (int r = 0; r < 4; r++)
    write_rank(fx->dir, JOB, r, 4, r == 1 ? 5 : 6, HK_FLIGHT_DONE, waiting,
               r == 1);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "first divergence: round 6 ('g6'): run by ranks 0, 2, 3; never "
              "reached by rank 1 (they stopped after round 5)");
  expect(out, "rank 1 was waiting for 'g6' (submitted)");
  free(out);
  free(err);
}

static void test_unfinished_collective(void **s) {
  fixture *fx = *s;
  for (int r = 0; r < 2; r++)
    write_rank(fx->dir, JOB, r, 2, 4, r ? HK_FLIGHT_RUNNING : HK_FLIGHT_DONE,
               NULL, 0);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "round 4: 'g4' (allreduce) is running on rank 1; done on rank 0");
  assert_null(strstr(out, "no divergence"));
  free(out);
  free(err);
}

/* Process sets: rank 1 and 2 (a set's members) ran more of their set's
 * rounds and hold a set's tensor in flight; the world's rounds agree. The
 * set's entries neither make a round gap nor a divergence: its tensor is
 * listed with its set. */
static void test_process_set_entries(void **s) {
  fixture *fx = *s;
  for (int r = 0; r < 3; r++) {
    hk_flight_ring ring;
    assert_int_equal(hk_flight_ring_init(&ring, 10), HK_OK);
    for (int i = 1; i <= 4; i++) {
      hk_flight_entry *e = hk_flight_ring_push(&ring);
      e->round = (uint64_t)i;
      e->state = HK_FLIGHT_DONE;
      e->kind = HK_COLL_ALLREDUCE;
      e->dtype = HK_FLOAT32;
      snprintf(e->name, sizeof e->name, "g%d", i);
    }
    hk_flight_entry p = {.state = HK_FLIGHT_SUBMITTED,
                         .kind = HK_COLL_ALLGATHER,
                         .set = 2,
                         .dtype = HK_FLOAT32};
    snprintf(p.name, sizeof p.name, "s.x");
    if (r > 0) { /* the set's: round 9 of set 2, unfinished */
      hk_flight_entry *e = hk_flight_ring_push(&ring);
      e->round = 9;
      e->set = 2;
      e->state = HK_FLIGHT_RUNNING;
      e->kind = HK_COLL_ALLREDUCE;
      e->dtype = HK_FLOAT32;
      snprintf(e->name, sizeof e->name, "s.y");
    }
    hk_flight_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.job, sizeof h.job, "%s", JOB);
    h.rank = r;
    h.size = 3;
    snprintf(h.host, sizeof h.host, "hostA");
    h.rounds = 4;
    h.capacity = 10;
    h.recorded = r > 0 ? 5 : 4;
    write_record(fx->dir, &h, &ring, &p, r > 0 ? 1 : 0);
    hk_flight_ring_free(&ring);
  }
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "pending in process set 2 on rank 1: 's.x' (allgather, "
              "submitted)");
  expect(out, "pending in process set 2 on rank 2: 's.x'");
  if (strstr(out, "divergence") || strstr(out, "round 9") ||
      strstr(out, "round 4: 's.y'"))
    fail_msg("a set's entries taken for the world's:\n%s", out);
  free(out);
  free(err);
}

static void test_newest_job_chosen(void **s) {
  fixture *fx = *s;
  write_rank(fx->dir, "00000000000000bb", 0, 2, 3, HK_FLIGHT_DONE, NULL, 0);
  for (int r = 0; r < 2; r++)
    write_rank(fx->dir, JOB, r, 2, 3, HK_FLIGHT_DONE, NULL, 0);
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 0);
  expect(out, "note: job 00000000000000bb (older records, ignored)");
  expect(out, "flight records of job " JOB);
  expect(out, "2 of 2 ranks present");
  free(out);
  free(err);
}

static void test_errors(void **s) {
  fixture *fx = *s;
  char *out, *err;
  assert_int_equal(diagnose(fx->dir, &out, &err), 1);
  expect(err, "hkrun --diagnose: no flight records (hk-flight.JOB.RANK.txt) "
              "in '");
  free(out);
  free(err);
  char none[4200];
  snprintf(none, sizeof none, "%s/none", fx->dir);
  assert_int_equal(diagnose(none, &out, &err), 1);
  expect(err, "cannot open '");
  expect(err, "No such file or directory");
  free(out);
  free(err);
  /* sizes that disagree */
  write_rank(fx->dir, JOB, 0, 2, 3, HK_FLIGHT_DONE, NULL, 0);
  write_rank(fx->dir, JOB, 1, 3, 3, HK_FLIGHT_DONE, NULL, 0);
  assert_int_equal(diagnose(fx->dir, &out, &err), 1);
  expect(err, "disagree on the world size");
  free(out);
  free(err);
  /* garbage in a record */
  char path[4300];
  snprintf(path, sizeof path, "%s/hk-flight." JOB ".1.txt", fx->dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("hk-flight\t2\njob\t" JOB "\nrank\t1\nsize\tfour\n", f);
  fclose(f);
  assert_int_equal(diagnose(fx->dir, &out, &err), 1);
  expect(err, path);
  expect(err, "line 4: size is not a positive number");
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_consistent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pending_on_some_ranks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_pending_left_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_names_printable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_gap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unfinished_collective, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_process_set_entries, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_newest_job_chosen, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
