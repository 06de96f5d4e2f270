/*
 * test_placement.c - a rank's place from its launcher's environment, and
 * the per-host layout from host names (worker/placement.h), table driven.
 * The environment is set with setenv in the test, one case at a time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/status.h"
#include "worker/placement.h"

/* Every variable hk_placement_from_env may read. */
static const char *const all_vars[] = {"HK_RANK",
                                       "HK_SIZE",
                                       "HK_LOCAL_RANK",
                                       "HK_LOCAL_SIZE",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_NPROCS",
                                       "SLURM_LOCALID",
                                       "SLURM_NODEID",
                                       "SLURM_STEP_TASKS_PER_NODE",
                                       "SLURM_TASKS_PER_NODE",
                                       "SLURM_NTASKS_PER_NODE",
                                       NULL};

#define MAX_VARS 10

/* Clears every launcher variable, then sets "NAME=value" strings. */
static void set_env(const char *const *vars) {
  for (int i = 0; all_vars[i]; i++)
    unsetenv(all_vars[i]);
  for (int i = 0; i < MAX_VARS && vars[i]; i++) {
    char name[64];
    const char *eq = strchr(vars[i], '=');
    assert_non_null(eq);
    snprintf(name, sizeof name, "%.*s", (int)(eq - vars[i]), vars[i]);
    assert_int_equal(setenv(name, eq + 1, 1), 0);
  }
}

typedef struct env_case {
  const char *vars[MAX_VARS + 1];
  int rank, size, local_rank, local_size;
  hk_placement_source source;
} env_case;

static const env_case env_goods[] = {
    {{NULL}, 0, 1, 0, 1, HK_PLACEMENT_NONE},
    {{"HK_RANK=2", "HK_SIZE=4", "HK_LOCAL_RANK=2", "HK_LOCAL_SIZE=4"},
     2,
     4,
     2,
     4,
     HK_PLACEMENT_HKRUN},
    /* hkrun without HK_LOCAL_*: the whole job is local */
    {{"HK_RANK=1", "HK_SIZE=3"}, 1, 3, 1, 3, HK_PLACEMENT_HKRUN},
    {{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4"},
     5,
     8,
     1,
     4,
     HK_PLACEMENT_OMPI},
    /* priority: hkrun over Open MPI over Slurm */
    {{"HK_RANK=0", "HK_SIZE=2", "OMPI_COMM_WORLD_RANK=1",
      "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
      "OMPI_COMM_WORLD_LOCAL_SIZE=2", "SLURM_PROCID=1", "SLURM_NTASKS=2"},
     0,
     2,
     0,
     2,
     HK_PLACEMENT_HKRUN},
    {{"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
      "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0"},
     3,
     4,
     1,
     2,
     HK_PLACEMENT_OMPI},
    /* Slurm: node 2 of "4(x2),3" runs 3 tasks */
    {{"SLURM_PROCID=9", "SLURM_NTASKS=11", "SLURM_LOCALID=1", "SLURM_NODEID=2",
      "SLURM_STEP_TASKS_PER_NODE=4(x2),3", "SLURM_TASKS_PER_NODE=8(x2)"},
     9,
     11,
     1,
     3,
     HK_PLACEMENT_SLURM},
    /* ...the job's list when the step's is missing */
    {{"SLURM_PROCID=4", "SLURM_NTASKS=8", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_TASKS_PER_NODE=4(x2)"},
     4,
     8,
     0,
     4,
     HK_PLACEMENT_SLURM},
    {{"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
      "SLURM_NTASKS_PER_NODE=4"},
     5,
     8,
     1,
     4,
     HK_PLACEMENT_SLURM},
    /* Slurm without any per-node count: local_size unknown */
    {{"SLURM_PROCID=3", "SLURM_NPROCS=6", "SLURM_LOCALID=3"},
     3,
     6,
     3,
     -1,
     HK_PLACEMENT_SLURM},
};

static void test_env_accepted(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof env_goods / sizeof env_goods[0]; i++) {
    const env_case *c = &env_goods[i];
    set_env(c->vars);
    hk_placement p;
    hk_status st = hk_placement_from_env(&p);
    if (st != HK_OK)
      fail_msg("case %zu: %s", i, hk_last_error());
    if (p.rank != c->rank || p.size != c->size ||
        p.local_rank != c->local_rank || p.local_size != c->local_size ||
        p.source != c->source)
      fail_msg("case %zu: got %d/%d local %d/%d from %s", i, p.rank, p.size,
               p.local_rank, p.local_size, hk_placement_source_name(p.source));
  }
}

typedef struct env_bad {
  const char *vars[MAX_VARS + 1];
  const char *message;
} env_bad;

static const env_bad env_bads[] = {
    {{"HK_RANK=1"}, "HK_RANK is set but HK_SIZE is not"},
    {{"HK_RANK=4", "HK_SIZE=4"}, "HK_RANK='4' is not an integer in [0, 3]"},
    {{"HK_RANK=0", "HK_SIZE=0"}, "HK_SIZE='0' is not an integer in [1, 65536]"},
    {{"HK_RANK=0", "HK_SIZE=2", "HK_LOCAL_SIZE=0"},
     "HK_LOCAL_SIZE='0' is not an integer in [1, 2]"},
    {{"HK_RANK=3", "HK_SIZE=4", "HK_LOCAL_SIZE=2"},
     "HK_LOCAL_RANK is not set and HK_RANK=3 is not below HK_LOCAL_SIZE=2"},
    {{"OMPI_COMM_WORLD_RANK=7", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=1"},
     "OMPI_COMM_WORLD_RANK='7' is not an integer in [0, 3]"},
    {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=abc"},
     "OMPI_COMM_WORLD_SIZE='abc' is not an integer in [1, 65536]"},
    {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"},
     "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_LOCAL_SIZE is not"},
    {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
      "OMPI_COMM_WORLD_LOCAL_SIZE=2"},
     "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_LOCAL_RANK is not"},
    {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
      "OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=2"},
     "OMPI_COMM_WORLD_LOCAL_RANK='2' is not an integer in [0, 1]"},
    {{"HK_RANK=1", "HK_SIZE=4", "HK_LOCAL_RANK=1"},
     "HK_LOCAL_RANK is set but HK_LOCAL_SIZE is not: set both (the ranks of "
     "one host) or neither (every rank on this host)"},
    {{"SLURM_PROCID=0"}, "SLURM_PROCID is set but SLURM_NTASKS is not"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODEID=5",
      "SLURM_STEP_TASKS_PER_NODE=1(x2)"},
     "SLURM_STEP_TASKS_PER_NODE='1(x2)' does not give a task count in [1, 2] "
     "for SLURM_NODEID=5"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODEID=x"},
     "SLURM_NODEID='x' is not a node index"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2"},
     "SLURM_PROCID is set but SLURM_LOCALID is not"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
      "SLURM_NTASKS_PER_NODE=3"},
     "SLURM_NTASKS_PER_NODE='3' is not an integer in [1, 2]"},
};

static void test_env_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof env_bads / sizeof env_bads[0]; i++) {
    set_env(env_bads[i].vars);
    hk_placement p;
    if (hk_placement_from_env(&p) != HK_ERR_CONFIG)
      fail_msg("case %zu accepted", i);
    assert_string_equal(hk_last_error(), env_bads[i].message);
    /* on error *out is the harmless world of one */
    assert_int_equal(p.size, 1);
    assert_int_equal(p.source, HK_PLACEMENT_NONE);
  }
  set_env((const char *const[]){NULL});
}

static void test_slurm_lists(void **state) {
  (void)state;
  static const struct {
    const char *list;
    int node, tasks;
  } cases[] = {
      {"4", 0, 4},
      {"4", 1, -1},
      {"2(x3),1", 0, 2},
      {"2(x3),1", 2, 2},
      {"2(x3),1", 3, 1},
      {"2(x3),1", 4, -1},
      {"1,2,3", 1, 2},
      {"16(x1000)", 999, 16},
      {"2(x3", 0, -1},
      {"2(3)", 0, -1},
      {"", 0, -1},
      {"a", 0, -1},
      {"1,,2", 1, -1},
      {"3(x0)", 0, -1},
      {"1,2", -1, -1},
      {"1,2,", 1, 2}, /* beyond the malformed tail: never read */
      {"1,2,", 2, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (hk_slurm_tasks_on_node(cases[i].list, cases[i].node) != cases[i].tasks)
      fail_msg("'%s' node %d: expected %d", cases[i].list, cases[i].node,
               cases[i].tasks);
  assert_int_equal(hk_slurm_tasks_on_node(NULL, 0), -1);
}

/* ---- layout from host names ---- */

#define MAX_RANKS 8

typedef struct layout_case {
  const char *hosts[MAX_RANKS];
  int size;
  int local_rank[MAX_RANKS], local_size[MAX_RANKS], cross_rank[MAX_RANKS];
  int cross_size, uniform;
} layout_case;

static const layout_case layouts[] = {
    {{"solo"}, 1, {0}, {1}, {0}, 1, 1},
    {{"a", "a", "b", "b"}, 4, {0, 1, 0, 1}, {2, 2, 2, 2}, {0, 0, 1, 1}, 2, 1},
    /* not contiguous: hosts numbered by their lowest rank (h2 first) */
    {{"h2", "h1", "h2", "h1"},
     4,
     {0, 0, 1, 1},
     {2, 2, 2, 2},
     {0, 1, 0, 1},
     2,
     1},
    /* uneven */
    {{"x", "y", "y", "y", "z"},
     5,
     {0, 0, 1, 2, 0},
     {1, 3, 3, 3, 1},
     {0, 1, 1, 1, 2},
     3,
     0},
    /* names sort differently from their first appearance */
    {{"zz", "aa", "mm", "aa", "zz", "mm"},
     6,
     {0, 0, 0, 1, 1, 1},
     {2, 2, 2, 2, 2, 2},
     {0, 1, 2, 1, 0, 2},
     3,
     1},
    {{"h", "h", "h"}, 3, {0, 1, 2}, {3, 3, 3}, {0, 0, 0}, 1, 1},
    /* case matters: names are compared byte for byte */
    {{"Host", "host"}, 2, {0, 0}, {1, 1}, {0, 1}, 2, 1},
};

static void test_layout(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    const layout_case *c = &layouts[i];
    hk_rank_layout out[MAX_RANKS];
    assert_int_equal(hk_layout_from_hosts(c->hosts, c->size, out), HK_OK);
    for (int r = 0; r < c->size; r++) {
      if (out[r].local_rank != c->local_rank[r] ||
          out[r].local_size != c->local_size[r] ||
          out[r].cross_rank != c->cross_rank[r] ||
          out[r].cross_size != c->cross_size)
        fail_msg("case %zu rank %d: local %d/%d cross %d/%d", i, r,
                 out[r].local_rank, out[r].local_size, out[r].cross_rank,
                 out[r].cross_size);
    }
    assert_int_equal(hk_layout_uniform(out, c->size), c->uniform);
  }
}

static void test_layout_errors(void **state) {
  (void)state;
  hk_rank_layout out[3];
  const char *with_null[] = {"a", NULL, "b"};
  assert_int_equal(hk_layout_from_hosts(with_null, 3, out), HK_ERR_INVALID_ARG);
  assert_string_equal(hk_last_error(), "host layout: rank 1 has no host name");
  const char *with_empty[] = {"a", "b", ""};
  assert_int_equal(hk_layout_from_hosts(with_empty, 3, out),
                   HK_ERR_INVALID_ARG);
  assert_string_equal(hk_last_error(), "host layout: rank 2 has no host name");
  assert_int_equal(hk_layout_from_hosts(with_empty, 0, out),
                   HK_ERR_INVALID_ARG);
}

/* The largest job: 65536 ranks, 8 per host, hosts interleaved in name
 * order against rank order. */
static void test_layout_large(void **state) {
  (void)state;
  enum { N = 65536, PER = 8 };
  char(*names)[16] = malloc((size_t)N * sizeof *names);
  const char **hosts = malloc((size_t)N * sizeof *hosts);
  hk_rank_layout *out = malloc((size_t)N * sizeof *out);
  assert_non_null(names);
  assert_non_null(hosts);
  assert_non_null(out);
  for (int r = 0; r < N; r++) {
    snprintf(names[r], sizeof names[r], "n%05d", (N / PER - 1) - r / PER);
    hosts[r] = names[r];
  }
  assert_int_equal(hk_layout_from_hosts(hosts, N, out), HK_OK);
  for (int r = 0; r < N; r++) {
    if (out[r].local_rank != r % PER || out[r].local_size != PER ||
        out[r].cross_rank != r / PER || out[r].cross_size != N / PER)
      fail_msg("rank %d: local %d/%d cross %d/%d", r, out[r].local_rank,
               out[r].local_size, out[r].cross_rank, out[r].cross_size);
  }
  free(names);
  free(hosts);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_env_accepted),  cmocka_unit_test(test_env_rejected),
      cmocka_unit_test(test_slurm_lists),   cmocka_unit_test(test_layout),
      cmocka_unit_test(test_layout_errors), cmocka_unit_test(test_layout_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
