/*
 * test_bind.c - --bind-to's choice of CPUs (launcher/bind.h), on made-up
 * machines: two sockets of two cores with two hardware threads each, CPU
 * numbers interleaved as Linux numbers them (siblings far apart), and a
 * restricted affinity mask.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/bind.h"

/* 2 sockets x 2 cores x 2 threads: cpu = core + 4 * thread, cores 0-1 on
 * socket 0 (node 0), 2-3 on socket 1 (node 1). */
static int machine(hk_cpu *v) {
  int n = 0;
  for (int cpu = 0; cpu < 8; cpu++) {
    int core = cpu % 4;
    v[n++] = (hk_cpu){cpu, core / 2, core, core / 2};
  }
  return n;
}

static void expect(hkrun_bind policy, int rank, const char *want,
                   int want_shared) {
  hk_cpu v[8];
  int n = machine(v), out[8], shared = -1;
  int k = hk_bind_cpus(v, n, policy, rank, out, 8, &shared);
  char got[64];
  hk_bind_format(out, k, got, sizeof got);
  if (strcmp(got, want) != 0 || shared != want_shared)
    fail_msg("policy %d rank %d: got '%s' (shared %d), want '%s' (shared %d)",
             policy, rank, got, shared, want, want_shared);
}

static void test_policies(void **state) {
  (void)state;
  expect(HKRUN_BIND_NONE, 0, "", 0);
  /* core: the rank's core with both its threads; socket 0's cores first */
  expect(HKRUN_BIND_CORE, 0, "0,4", 0);
  expect(HKRUN_BIND_CORE, 1, "1,5", 0);
  expect(HKRUN_BIND_CORE, 2, "2,6", 0);
  expect(HKRUN_BIND_CORE, 3, "3,7", 0);
  expect(HKRUN_BIND_CORE, 4, "0,4", 1); /* wraps around */
  /* hwthread: one CPU, in socket, core order */
  expect(HKRUN_BIND_HWTHREAD, 0, "0", 0);
  expect(HKRUN_BIND_HWTHREAD, 1, "4", 0);
  expect(HKRUN_BIND_HWTHREAD, 2, "1", 0);
  expect(HKRUN_BIND_HWTHREAD, 7, "7", 0);
  expect(HKRUN_BIND_HWTHREAD, 8, "0", 1);
  /* socket / numa: the whole socket of the rank's core */
  expect(HKRUN_BIND_SOCKET, 0, "0-1,4-5", 0);
  expect(HKRUN_BIND_SOCKET, 1, "0-1,4-5", 0);
  expect(HKRUN_BIND_SOCKET, 2, "2-3,6-7", 0);
  expect(HKRUN_BIND_NUMA, 3, "2-3,6-7", 0);
  expect(HKRUN_BIND_NUMA, 4, "0-1,4-5", 0);
}

/* hkrun's own mask is kept: only the CPUs it may use are counted. */
static void test_restricted_mask(void **state) {
  (void)state;
  hk_cpu all[8], v[4];
  machine(all);
  int n = 0;
  for (int i = 0; i < 8; i++) /* taskset -c 2,3,6,7: socket 1 only */
    if (all[i].package == 1)
      v[n++] = all[i];
  int out[8];
  char got[64];
  int k = hk_bind_cpus(v, n, HKRUN_BIND_CORE, 1, out, 8, NULL);
  hk_bind_format(out, k, got, sizeof got);
  assert_string_equal(got, "3,7");
  assert_int_equal(hk_bind_count(v, n, HKRUN_BIND_CORE), 2);
  assert_int_equal(hk_bind_count(v, n, HKRUN_BIND_SOCKET), 1);
  assert_int_equal(hk_bind_count(v, n, HKRUN_BIND_HWTHREAD), 4);
  /* no CPUs at all: nothing to bind to */
  assert_int_equal(hk_bind_cpus(v, 0, HKRUN_BIND_CORE, 0, out, 8, NULL), 0);
}

/* This machine's CPUs: at least one, each once. */
static void test_read_cpus(void **state) {
  (void)state;
  hk_cpu *v;
  int n;
  assert_int_equal(hk_bind_read_cpus(&v, &n), HK_OK);
  assert_true(n >= 1);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      assert_int_not_equal(v[i].cpu, v[j].cpu);
  free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policies),
      cmocka_unit_test(test_restricted_mask),
      cmocka_unit_test(test_read_cpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
