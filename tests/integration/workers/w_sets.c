/*
 * w_sets - process sets end to end (include/hk/hk.h, "Process sets"), run
 * under hkrun by test_sets (and test_netbed_multihost's sets group). Every
 * result is compared element by element with a serial computation over the
 * set's members (inputs are small integers: every order of summing gives
 * the same bits).
 *
 *   w_sets collectives ITERS  sets of every rank (given in reverse order),
 *                             of ranks 1..np-1 (rank 0 coordinates it
 *                             without being in it) and of the even ranks;
 *                             on each, ITERS times (so the response cache
 *                             answers from the second on): allreduce (sum;
 *                             average with prescale and postscale), a
 *                             group, broadcast from the set's last rank,
 *                             allgather of rows varying by set rank,
 *                             reduce-scatter, alltoall, barrier, all at
 *                             once (fused per set); a join in the first
 *                             set; a rank outside a set is refused
 *   w_sets concurrent ITERS   np 4: sets {0,1} and {2,3}: {0,1} allreduces
 *                             while {2,3} allgathers, interleaved with
 *                             world allreduces; then {2,3} runs 20
 *                             allgathers while a tensor of {0,1} waits
 *                             for rank 1 (a waiting set holds up no other)
 *   w_sets errors             np >= 3: lists that differ, a duplicate
 *                             rank, an add against a remove, an unknown
 *                             set, a root outside the set, a removal while
 *                             an operation of the set is in flight, a
 *                             removed set, re-adding, removing the world,
 *                             removes that name different sets: every
 *                             rank's status and message
 *   w_sets stall              np 3: a tensor of set {1,2} that rank 2
 *                             never submits stops the job
 *                             (HK_STALL_SHUTDOWN_TIME_S); each rank prints
 *                             "wait gave <status>: <message>"
 *   w_sets static SPEC        HK_PROCESS_SETS=SPEC's sets exist with ids
 *                             1, 2, ... and run an allreduce each
 * Prints "sets ok: <mode> np=<np>" on success; exits 1 with a message
 * else.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wcommon.h"

static int rank, np;

/* A small integer input every rank can make for any rank. */
static int32_t val(int wr, size_t i, int salt) {
  return (int32_t)(hkt_mix(((uint64_t)wr << 40) ^ ((uint64_t)salt << 24) ^ i) %
                   17) -
         8;
}

/* The set's job ranks (ascending) and this rank's place in it. */
typedef struct set_info {
  hk_process_set id;
  int n, me;
  int ranks[64];
} set_info;

static set_info info(hk_process_set id) {
  set_info s = {.id = id};
  s.n = hk_process_set_size(id);
  s.me = hk_process_set_rank(id);
  HKT_CHECK(s.n >= 1 && s.n <= 64, "set %d: size %d", (int)id, s.n);
  HKT_OK(hk_process_set_ranks(id, s.ranks, 64));
  for (int j = 1; j < s.n; j++)
    HKT_CHECK(s.ranks[j] > s.ranks[j - 1], "set %d: ranks not ascending",
              (int)id);
  int me = -1;
  for (int j = 0; j < s.n; j++)
    if (s.ranks[j] == rank)
      me = j;
  HKT_CHECK(me == s.me, "set %d: rank %d is set rank %d, hk says %d", (int)id,
            rank, me, s.me);
  return s;
}

/* hk_submit(c), then hk_wait: either failing exits. */
static void submit_wait(const hk_collective *c) {
  hk_handle h;
  HKT_OK(hk_submit(c, &h));
  HKT_OK(hk_wait(h));
}

static hk_process_set add(const int *ranks, int n) {
  hk_process_set id = -1;
  HKT_OK(hk_process_set_add(ranks, n, &id));
  return id;
}

/* ---- collectives ---- */

/* Every collective on set s at once, iteration it, against serial
 * results. */
static void all_collectives(const set_info *s, int it) {
  const int n = s->n, me = s->me, salt = (int)s->id * 100 + it;
  char nm[16][64];
  for (int k = 0; k < 16; k++)
    snprintf(nm[k], sizeof nm[k], "set%d.t%d", (int)s->id, k);
  hk_handle h[16];
  int nh = 0;
  /* allreduce sum, float32 */
  const size_t c1 = 1000 + (size_t)it;
  float *a1 = malloc(c1 * sizeof *a1);
  for (size_t i = 0; i < c1; i++)
    a1[i] = (float)val(rank, i, salt);
  hk_collective d = {.kind = HK_ALLREDUCE,
                     .set = s->id,
                     .name = nm[0],
                     .dtype = HK_FLOAT32,
                     .op = HK_SUM,
                     .sendbuf = a1,
                     .recvbuf = a1,
                     .count = c1};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* average, float64, prescale 2 and postscale 0.5 */
  const size_t c2 = 77;
  double *a2 = malloc(c2 * sizeof *a2), *r2 = malloc(c2 * sizeof *r2);
  for (size_t i = 0; i < c2; i++)
    a2[i] = val(rank, i, salt + 1);
  d = (hk_collective){.kind = HK_ALLREDUCE,
                      .set = s->id,
                      .name = nm[1],
                      .dtype = HK_FLOAT64,
                      .op = HK_AVERAGE,
                      .sendbuf = a2,
                      .recvbuf = r2,
                      .count = c2,
                      .prescale = 2.0,
                      .postscale = 0.5};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* a group of three int32 sums */
  int32_t g[3][5];
  hk_collective gd[3];
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 5; i++)
      g[k][i] = val(rank, (size_t)i, salt + 10 + k);
    gd[k] = (hk_collective){.kind = HK_ALLREDUCE,
                            .set = s->id,
                            .name = nm[2 + k],
                            .dtype = HK_INT32,
                            .op = HK_SUM,
                            .sendbuf = g[k],
                            .recvbuf = g[k],
                            .count = 5};
  }
  HKT_OK(hk_submit_group(gd, 3, &h[nh++]));
  /* broadcast from the set's last rank */
  int64_t b[9];
  for (int i = 0; i < 9; i++)
    b[i] = val(rank, (size_t)i, salt + 20);
  d = (hk_collective){.kind = HK_BROADCAST,
                      .set = s->id,
                      .name = nm[5],
                      .dtype = HK_INT64,
                      .recvbuf = b,
                      .count = 9,
                      .root = n - 1};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* allgather: set rank j gives j + 1 rows of 3 */
  float ag_in[64 * 3];
  for (int i = 0; i < (me + 1) * 3; i++)
    ag_in[i] = (float)val(rank, (size_t)i, salt + 30);
  void *ag_out = NULL;
  size_t ag_rows[64];
  d = (hk_collective){.kind = HK_ALLGATHER,
                      .set = s->id,
                      .name = nm[6],
                      .dtype = HK_FLOAT32,
                      .sendbuf = ag_in,
                      .rows = (size_t)me + 1,
                      .row_elems = 3,
                      .recvbuf_out = &ag_out,
                      .rows_out = ag_rows};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* reduce-scatter: 2n + 1 rows of 2 */
  const size_t rs_rows = 2 * (size_t)n + 1;
  int32_t rs_in[(2 * 64 + 1) * 2], rs_out[3 * 2];
  for (size_t i = 0; i < rs_rows * 2; i++)
    rs_in[i] = val(rank, i, salt + 40);
  size_t rs_got = 0;
  d = (hk_collective){.kind = HK_REDUCESCATTER,
                      .set = s->id,
                      .name = nm[7],
                      .dtype = HK_INT32,
                      .op = HK_SUM,
                      .sendbuf = rs_in,
                      .recvbuf = rs_out,
                      .rows = rs_rows,
                      .row_elems = 2,
                      .rows_out = &rs_got};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* alltoall: (me + j) % 3 rows of 2 to set rank j */
  size_t splits[64], total = 0;
  for (int j = 0; j < n; j++)
    total += splits[j] = (size_t)((me + j) % 3);
  int32_t *at_in = malloc((total * 2 + 1) * sizeof *at_in);
  for (size_t i = 0; i < total * 2; i++)
    at_in[i] = val(rank, i, salt + 50);
  void *at_out = NULL;
  size_t at_rows[64];
  d = (hk_collective){.kind = HK_ALLTOALL,
                      .set = s->id,
                      .name = nm[8],
                      .dtype = HK_INT32,
                      .sendbuf = at_in,
                      .splits = splits,
                      .row_elems = 2,
                      .recvbuf_out = &at_out,
                      .rows_out = at_rows};
  HKT_OK(hk_submit(&d, &h[nh++]));
  /* a group of two allgathers (set rank j gives j + 2 rows of 1) and one of
   * two reduce-scatters (n + 2 rows of 1), each fused in the set */
  int64_t gg_in[2][66];
  void *gg_out[2] = {NULL, NULL};
  size_t gg_rows[2][64];
  int32_t gr_in[2][66], gr_out[2][66];
  size_t gr_got[2] = {0, 0};
  hk_collective ga[2], gr[2];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < me + 2; i++)
      gg_in[k][i] = val(rank, (size_t)i, salt + 60 + k);
    for (int i = 0; i < n + 2; i++)
      gr_in[k][i] = val(rank, (size_t)i, salt + 70 + k);
    ga[k] = (hk_collective){.kind = HK_ALLGATHER,
                            .set = s->id,
                            .name = nm[9 + k],
                            .dtype = HK_INT64,
                            .sendbuf = gg_in[k],
                            .rows = (size_t)me + 2,
                            .recvbuf_out = &gg_out[k],
                            .rows_out = gg_rows[k]};
    gr[k] = (hk_collective){.kind = HK_REDUCESCATTER,
                            .set = s->id,
                            .name = nm[11 + k],
                            .dtype = HK_INT32,
                            .op = HK_SUM,
                            .sendbuf = gr_in[k],
                            .recvbuf = gr_out[k],
                            .rows = (size_t)n + 2,
                            .rows_out = &gr_got[k]};
  }
  HKT_OK(hk_submit_group(ga, 2, &h[nh++]));
  HKT_OK(hk_submit_group(gr, 2, &h[nh++]));
  /* a barrier of the set */
  d = (hk_collective){.kind = HK_BARRIER, .set = s->id};
  HKT_OK(hk_submit(&d, &h[nh++]));
  for (int k = 0; k < nh; k++)
    HKT_OK(hk_wait(h[k]));

  /* the serial results, over the members */
  for (size_t i = 0; i < c1; i++) {
    float want = 0;
    for (int j = 0; j < n; j++)
      want += (float)val(s->ranks[j], i, salt);
    HKT_CHECK(a1[i] == want, "set %d: allreduce [%zu] = %g, want %g",
              (int)s->id, i, a1[i], want);
  }
  for (size_t i = 0; i < c2; i++) {
    double sum = 0;
    for (int j = 0; j < n; j++)
      sum += 2.0 * val(s->ranks[j], i, salt + 1);
    double want = sum / n * 0.5;
    HKT_CHECK(r2[i] == want, "set %d: average [%zu] = %.17g, want %.17g",
              (int)s->id, i, r2[i], want);
  }
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 5; i++) {
      int32_t want = 0;
      for (int j = 0; j < n; j++)
        want += val(s->ranks[j], (size_t)i, salt + 10 + k);
      HKT_CHECK(g[k][i] == want, "set %d: group %d [%d] = %d, want %d",
                (int)s->id, k, i, g[k][i], want);
    }
  for (int i = 0; i < 9; i++)
    HKT_CHECK(b[i] == val(s->ranks[n - 1], (size_t)i, salt + 20),
              "set %d: broadcast [%d] = %lld", (int)s->id, i, (long long)b[i]);
  const float *ag = ag_out;
  size_t at = 0;
  for (int j = 0; j < n; j++) {
    HKT_CHECK(ag_rows[j] == (size_t)j + 1, "set %d: allgather rows[%d] = %zu",
              (int)s->id, j, ag_rows[j]);
    for (int i = 0; i < (j + 1) * 3; i++, at++)
      HKT_CHECK(ag[at] == (float)val(s->ranks[j], (size_t)i, salt + 30),
                "set %d: allgather block %d [%d]", (int)s->id, j, i);
  }
  hk_free(ag_out);
  const size_t q = rs_rows / (size_t)n, m = rs_rows % (size_t)n;
  const size_t first = (size_t)me * q + ((size_t)me < m ? (size_t)me : m);
  const size_t mine = q + ((size_t)me < m);
  HKT_CHECK(rs_got == mine, "set %d: reduce-scatter gave %zu rows, want %zu",
            (int)s->id, rs_got, mine);
  for (size_t i = 0; i < mine * 2; i++) {
    int32_t want = 0;
    for (int j = 0; j < n; j++)
      want += val(s->ranks[j], first * 2 + i, salt + 40);
    HKT_CHECK(rs_out[i] == want, "set %d: reduce-scatter [%zu] = %d, want %d",
              (int)s->id, i, rs_out[i], want);
  }
  const int32_t *ao = at_out;
  at = 0;
  for (int j = 0; j < n; j++) { /* set rank j sent me (j + me) % 3 rows */
    size_t rows = (size_t)((j + me) % 3), off = 0;
    HKT_CHECK(at_rows[j] == rows, "set %d: alltoall rows[%d] = %zu, want %zu",
              (int)s->id, j, at_rows[j], rows);
    for (int k = 0; k < me; k++) /* where my block starts in j's input */
      off += (size_t)((j + k) % 3);
    for (size_t i = 0; i < rows * 2; i++, at++)
      HKT_CHECK(ao[at] == val(s->ranks[j], off * 2 + i, salt + 50),
                "set %d: alltoall from %d [%zu]", (int)s->id, j, i);
  }
  hk_free(at_out);
  for (int k = 0; k < 2; k++) {
    const int64_t *o = gg_out[k];
    at = 0;
    for (int j = 0; j < n; j++) {
      HKT_CHECK(gg_rows[k][j] == (size_t)j + 2,
                "set %d: group allgather %d "
                "rows[%d] = %zu",
                (int)s->id, k, j, gg_rows[k][j]);
      for (int i = 0; i < j + 2; i++, at++)
        HKT_CHECK(o[at] == val(s->ranks[j], (size_t)i, salt + 60 + k),
                  "set %d: group allgather %d block %d [%d]", (int)s->id, k, j,
                  i);
    }
    hk_free(gg_out[k]);
    const size_t rows = (size_t)n + 2, q2 = rows / (size_t)n,
                 m2 = rows % (size_t)n;
    const size_t first2 = (size_t)me * q2 + ((size_t)me < m2 ? (size_t)me : m2);
    const size_t mine2 = q2 + ((size_t)me < m2);
    HKT_CHECK(gr_got[k] == mine2, "set %d: group reduce-scatter %d: %zu rows",
              (int)s->id, k, gr_got[k]);
    for (size_t i = 0; i < mine2; i++) {
      int32_t want = 0;
      for (int j = 0; j < n; j++)
        want += val(s->ranks[j], first2 + i, salt + 70 + k);
      HKT_CHECK(gr_out[k][i] == want,
                "set %d: group reduce-scatter %d [%zu] = %d, want %d",
                (int)s->id, k, i, gr_out[k][i], want);
    }
  }
  free(a1);
  free(a2);
  free(r2);
  free(at_in);
}

/* A rank outside set s: refused at once, naming the set and the rank. */
static void outside(hk_process_set id) {
  HKT_CHECK(hk_process_set_rank(id) == -1, "rank %d: in set %d?", rank,
            (int)id);
  float x = 1;
  hk_collective d = {.kind = HK_ALLREDUCE,
                     .set = id,
                     .name = "outside",
                     .dtype = HK_FLOAT32,
                     .op = HK_SUM,
                     .sendbuf = &x,
                     .recvbuf = &x,
                     .count = 1};
  hk_handle h;
  hk_status st = hk_submit(&d, &h);
  char want[128];
  snprintf(want, sizeof want,
           "hk_submit: tensor 'outside': rank %d is not a member of process "
           "set %d",
           rank, (int)id);
  HKT_CHECK(st == HK_ERR_INVALID_ARG && strstr(hk_last_error(), want),
            "outside set %d: %s: %s", (int)id, hk_strerror(st),
            hk_last_error());
}

/* A join in set s: its last rank joins at once, the others allreduce
 * (the joined rank gives 0; the average divides by those who gave) and
 * join after it. */
static void join_in(const set_info *s) {
  const int n = s->n, last = n - 1;
  size_t who = 99;
  hk_collective j = {.kind = HK_JOIN, .set = s->id, .rows_out = &who};
  if (s->me != last) {
    double x[4];
    for (int i = 0; i < 4; i++)
      x[i] = val(rank, (size_t)i, 7);
    hk_collective d = {.kind = HK_ALLREDUCE,
                       .set = s->id,
                       .name = "joined.avg",
                       .dtype = HK_FLOAT64,
                       .op = HK_AVERAGE,
                       .sendbuf = x,
                       .recvbuf = x,
                       .count = 4};
    submit_wait(&d);
    for (int i = 0; i < 4; i++) {
      double sum = 0;
      for (int k = 0; k < last; k++)
        sum += val(s->ranks[k], (size_t)i, 7);
      HKT_CHECK(x[i] == sum / last, "join: average [%d] = %g, want %g", i, x[i],
                sum / last);
    }
  }
  submit_wait(&j);
  HKT_CHECK(n == 1 ? who == 0 : who < (size_t)last,
            "set %d: the last to join was set rank %zu", (int)s->id, who);
}

static int mode_collectives(int iters) {
  int rev[64] = {0}, odd[64] = {0}, even[64] = {0}, nodd = 0, neven = 0;
  HKT_CHECK(np <= 64, "collectives wants np <= 64, not %d", np);
  for (int r = 0; r < np; r++) {
    rev[r] = np - 1 - r;
    if (r > 0)
      odd[nodd++] = r;
    if (r % 2 == 0)
      even[neven++] = r;
  }
  hk_process_set ids[3];
  int nsets = 0;
  ids[nsets++] = add(rev, np);
  if (nodd)
    ids[nsets++] = add(odd, nodd);
  ids[nsets++] = add(even, neven);
  for (int k = 0; k < nsets; k++)
    HKT_CHECK(ids[k] == k + 1, "set %d got id %d", k + 1, (int)ids[k]);
  HKT_CHECK(hk_process_set_rank(HK_WORLD) == rank &&
                hk_process_set_size(HK_WORLD) == np,
            "the world: rank %d size %d", hk_process_set_rank(HK_WORLD),
            hk_process_set_size(HK_WORLD));
  for (int it = 0; it < iters; it++)
    for (int k = 0; k < nsets; k++) {
      if (hk_process_set_rank(ids[k]) < 0) {
        outside(ids[k]);
        continue;
      }
      set_info s = info(ids[k]);
      all_collectives(&s, it);
    }
  set_info a = info(ids[0]);
  join_in(&a);
  HKT_OK(hk_barrier()); /* and the world still runs */
  printf("sets ok: collectives np=%d sets=%d\n", np, nsets);
  return 0;
}

/* ---- two sets at once ---- */

static int mode_concurrent(int iters) {
  HKT_CHECK(np == 4, "concurrent wants np 4, not %d", np);
  const int lo[2] = {0, 1}, hi[2] = {2, 3};
  hk_process_set a = add(lo, 2), b = add(hi, 2);
  const int in_a = rank < 2;
  for (int it = 0; it < iters; it++) {
    int32_t x[100], w[50];
    float y[3];
    hk_handle hs, hw;
    void *out = NULL;
    for (int i = 0; i < 100; i++)
      x[i] = val(rank, (size_t)i, it);
    for (int i = 0; i < 3; i++)
      y[i] = (float)val(rank, (size_t)i, it + 1000);
    for (int i = 0; i < 50; i++)
      w[i] = val(rank, (size_t)i, it + 2000);
    hk_collective d = in_a ? (hk_collective){.kind = HK_ALLREDUCE,
                                             .set = a,
                                             .name = "a.sum",
                                             .dtype = HK_INT32,
                                             .op = HK_SUM,
                                             .sendbuf = x,
                                             .recvbuf = x,
                                             .count = 100}
                           : (hk_collective){.kind = HK_ALLGATHER,
                                             .set = b,
                                             .name = "b.gather",
                                             .dtype = HK_FLOAT32,
                                             .sendbuf = y,
                                             .rows = 3,
                                             .recvbuf_out = &out};
    HKT_OK(hk_submit(&d, &hs));
    HKT_OK(hk_allreduce_async("world.sum", w, w, 50, HK_INT32, HK_SUM, &hw));
    if (it % 2) { /* either order of waiting */
      HKT_OK(hk_wait(hw));
      HKT_OK(hk_wait(hs));
    } else {
      HKT_OK(hk_wait(hs));
      HKT_OK(hk_wait(hw));
    }
    for (int i = 0; i < 50; i++) {
      int32_t want = 0;
      for (int r = 0; r < 4; r++)
        want += val(r, (size_t)i, it + 2000);
      HKT_CHECK(w[i] == want, "world [%d] = %d, want %d", i, w[i], want);
    }
    if (in_a)
      for (int i = 0; i < 100; i++)
        HKT_CHECK(x[i] == val(0, (size_t)i, it) + val(1, (size_t)i, it),
                  "set a [%d] = %d", i, x[i]);
    else
      for (int j = 0; j < 2; j++)
        for (int i = 0; i < 3; i++)
          HKT_CHECK(((float *)out)[j * 3 + i] ==
                        (float)val(hi[j], (size_t)i, it + 1000),
                    "set b block %d [%d]", j, i);
    hk_free(out);
  }
  /* {2,3} runs while a tensor of {0,1} waits for rank 1, which submits it
   * only after the world allreduce that ranks 2 and 3 reach once their 20
   * allgathers are done: were sets to hold each other up, this would hang */
  int32_t late = rank, sync = 1;
  hk_handle hl;
  hk_collective d = {.kind = HK_ALLREDUCE,
                     .set = a,
                     .name = "a.late",
                     .dtype = HK_INT32,
                     .op = HK_SUM,
                     .sendbuf = &late,
                     .recvbuf = &late,
                     .count = 1};
  if (rank == 0)
    HKT_OK(hk_submit(&d, &hl));
  if (!in_a)
    for (int k = 0; k < 20; k++) {
      float y = (float)(rank + k);
      void *out = NULL;
      char nm[32];
      snprintf(nm, sizeof nm, "b.more%d", k);
      hk_collective g = {.kind = HK_ALLGATHER,
                         .set = b,
                         .name = nm,
                         .dtype = HK_FLOAT32,
                         .sendbuf = &y,
                         .rows = 1,
                         .recvbuf_out = &out};
      submit_wait(&g);
      HKT_CHECK(((float *)out)[0] == (float)(2 + k) &&
                    ((float *)out)[1] == (float)(3 + k),
                "set b: allgather %d", k);
      hk_free(out);
    }
  HKT_OK(hk_allreduce("world.sync", &sync, &sync, 1, HK_INT32, HK_SUM));
  HKT_CHECK(sync == 4, "world.sync = %d", (int)sync);
  if (rank == 1)
    HKT_OK(hk_submit(&d, &hl));
  if (in_a) {
    HKT_OK(hk_wait(hl));
    HKT_CHECK(late == 1, "a.late = %d", (int)late);
  }
  HKT_OK(hk_barrier()); /* a rank's hk_shutdown ends the job's sets too */
  printf("sets ok: concurrent np=%d\n", np);
  return 0;
}

/* ---- errors ---- */

/* st and this thread's message are what was expected. */
static void expect(hk_status st, hk_status want, const char *text,
                   const char *what) {
  HKT_CHECK(st == want && strstr(hk_last_error(), text),
            "%s: got %s: '%s'; want %s with '%s'", what, hk_strerror(st),
            hk_last_error(), hk_strerror(want), text);
}

static int mode_errors(void) {
  HKT_CHECK(np >= 3, "errors wants np >= 3, not %d", np);
  hk_process_set id = -1;
  char want[256];
  /* lists that differ: no set, on every rank */
  const int l01[2] = {0, 1}, l02[2] = {2, 0};
  hk_status st = hk_process_set_add(rank == 0 ? l01 : l02, 2, &id);
  snprintf(want, sizeof want,
           "hk_process_set_add: ranks disagree on the members: rank 0 gives "
           "[0, 1]; ranks 1, 2%s give [0, 2]; no process set was added",
           np > 3 ? ", 3" : "");
  expect(st, HK_ERR_MISMATCH, want, "differing lists");
  /* a duplicate on rank 1 */
  const int dup[2] = {0, 0};
  st = hk_process_set_add(rank == 1 ? dup : l01, 2, &id);
  expect(st, HK_ERR_INVALID_ARG,
         "hk_process_set_add: rank 1 passed rank 0 twice; no process set was "
         "added",
         "duplicate rank");
  /* a rank outside the job on rank 2, n = 0 on rank 1: rank 1 is named */
  const int far[2] = {0, 1000};
  st = hk_process_set_add(rank == 2 ? far : l01, rank == 1 ? 0 : 2, &id);
  snprintf(want, sizeof want,
           "rank 1 passed n = 0 (a process set has 1 to %d ranks)", np);
  expect(st, HK_ERR_INVALID_ARG, want, "bad count");
  /* an add where another rank removes */
  st = rank == 2 ? hk_process_set_remove(1) : hk_process_set_add(l01, 2, &id);
  expect(st, HK_ERR_MISMATCH, "collective differs", "add against remove");
  /* none of these made a set: the next is 1 */
  hk_process_set s = add(l01, 2);
  HKT_CHECK(s == 1, "the first set added got id %d", (int)s);
  int ranks[2];
  st = hk_process_set_ranks(s, ranks, 1);
  expect(st, HK_ERR_INVALID_ARG, "process set 1 has 2 ranks", "small array");
  /* unknown set; a root outside the set (members) */
  float x[4] = {1, 2, 3, 4};
  hk_handle h;
  hk_collective d = {.kind = HK_BROADCAST,
                     .set = 7,
                     .name = "b",
                     .dtype = HK_FLOAT32,
                     .recvbuf = x,
                     .count = 4,
                     .root = 2};
  expect(hk_submit(&d, &h), HK_ERR_INVALID_ARG,
         "hk_submit: tensor 'b': process set 7 does not exist", "unknown set");
  d.set = s;
  if (rank < 2)
    expect(hk_submit(&d, &h), HK_ERR_INVALID_ARG,
           "hk_submit: tensor 'b': root 2 is not a rank of process set 1, "
           "whose ranks are [0, 2)",
           "root outside");
  else {
    snprintf(want, sizeof want,
             "hk_submit: tensor 'b': rank %d is not a member of process set "
             "1, whose ranks are [0, 1]",
             rank);
    expect(hk_submit(&d, &h), HK_ERR_INVALID_ARG, want, "non-member");
  }
  /* removed while in flight: rank 0's allreduce fails, naming the set */
  d = (hk_collective){.kind = HK_ALLREDUCE,
                      .set = s,
                      .name = "inflight",
                      .dtype = HK_FLOAT32,
                      .op = HK_SUM,
                      .sendbuf = x,
                      .recvbuf = x,
                      .count = 4};
  if (rank == 0)
    HKT_OK(hk_submit(&d, &h));
  HKT_OK(hk_process_set_remove(s));
  if (rank == 0)
    expect(hk_wait(h), HK_ERR_SHUTDOWN,
           "tensor 'inflight': process set 1 was removed "
           "(hk_process_set_remove) while the operation was in flight on "
           "rank 0",
           "removed in flight");
  /* the removed set: refused; its id is not given again */
  HKT_CHECK(hk_process_set_size(s) == -1 && hk_process_set_rank(s) == -1,
            "removed set: size %d rank %d", hk_process_set_size(s),
            hk_process_set_rank(s));
  expect(hk_submit(&d, &h), HK_ERR_INVALID_ARG,
         "hk_submit: tensor 'inflight': process set 1 was removed",
         "removed set");
  expect(hk_process_set_remove(s), HK_ERR_INVALID_ARG,
         "process set 1 was removed already", "removed twice");
  hk_process_set again = add(l01, 2);
  HKT_CHECK(again == 2, "re-added: id %d", (int)again);
  d.set = again;
  if (rank < 2) {
    HKT_OK(hk_submit(&d, &h)); /* "inflight" again, on the new set */
    HKT_OK(hk_wait(h));
    HKT_CHECK(x[3] == 8, "re-added set: %g", x[3]);
  }
  /* removing the world; removes that name different sets */
  expect(hk_process_set_remove(HK_WORLD), HK_ERR_INVALID_ARG,
         "hk_process_set_remove: the world (process set 0) cannot be removed",
         "world");
  st = hk_process_set_remove(rank == 0 ? again : 9);
  snprintf(want, sizeof want,
           "process set differs: process set 2 on rank 0; process set 9 on "
           "ranks 1, 2%s",
           np > 3 ? ", 3" : "");
  expect(st, HK_ERR_MISMATCH, want, "different removes");
  HKT_CHECK(hk_process_set_size(again) == 2, "set 2 survived a failed remove");
  HKT_OK(hk_process_set_remove(again));
  float sum = 1;
  HKT_OK(hk_allreduce("world.after", &sum, &sum, 1, HK_FLOAT32, HK_SUM));
  HKT_CHECK(sum == (float)np, "world after the errors: %g", sum);
  printf("sets ok: errors np=%d\n", np);
  return 0;
}

/* ---- a set's stall ---- */

static int mode_stall(void) {
  const int members[2] = {1, 2};
  hk_process_set s = add(members, 2);
  float x = 1;
  hk_handle h = NULL;
  hk_status st;
  if (rank == 1) { /* rank 2 never submits it */
    hk_collective d = {.kind = HK_ALLREDUCE,
                       .set = s,
                       .name = "stuck",
                       .dtype = HK_FLOAT32,
                       .op = HK_SUM,
                       .sendbuf = &x,
                       .recvbuf = &x,
                       .count = 1};
    HKT_OK(hk_submit(&d, &h));
  }
  HKT_OK(hk_barrier());
  st = rank == 1 ? hk_wait(h) : hk_barrier(); /* rank 1 is never there */
  fprintf(stderr, "rank %d: wait gave %s: %s\n", rank, hk_strerror(st),
          hk_last_error());
  return st == HK_OK ? 0 : 1;
}

/* ---- HK_PROCESS_SETS ---- */

static int mode_static(const char *spec) {
  int id = 1;
  for (const char *p = spec; *p; id++) {
    int want[64], n = 0;
    while (*p && *p != ';') {
      want[n++] = (int)strtol(p, (char **)&p, 10);
      if (*p == ',')
        p++;
    }
    if (*p == ';')
      p++;
    set_info s = info(id);
    HKT_CHECK(s.n == n, "set %d: %d ranks, want %d", id, s.n, n);
    for (int j = 0; j < n; j++) { /* spec lists them ascending */
      HKT_CHECK(s.ranks[j] == want[j], "set %d: rank %d is %d, want %d", id, j,
                s.ranks[j], want[j]);
    }
    if (s.me >= 0) {
      int32_t v = rank;
      hk_collective d = {.kind = HK_ALLREDUCE,
                         .set = id,
                         .name = "static",
                         .dtype = HK_INT32,
                         .op = HK_SUM,
                         .sendbuf = &v,
                         .recvbuf = &v,
                         .count = 1};
      submit_wait(&d);
      int32_t sum = 0;
      for (int j = 0; j < n; j++)
        sum += want[j];
      HKT_CHECK(v == sum, "set %d: %d, want %d", id, (int)v, (int)sum);
    }
  }
  HKT_CHECK(hk_process_set_size(id) == -1, "set %d exists too", id);
  HKT_OK(hk_barrier()); /* a rank's hk_shutdown ends the job's sets too */
  printf("sets ok: static np=%d sets=%d\n", np, id - 1);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: w_sets MODE [ARG]\n");
    return 2;
  }
  HKT_OK(hk_init());
  rank = hk_rank();
  np = hk_size();
  const char *mode = argv[1];
  int rc;
  if (!strcmp(mode, "collectives"))
    rc = mode_collectives(argc > 2 ? atoi(argv[2]) : 2);
  else if (!strcmp(mode, "concurrent"))
    rc = mode_concurrent(argc > 2 ? atoi(argv[2]) : 10);
  else if (!strcmp(mode, "errors"))
    rc = mode_errors();
  else if (!strcmp(mode, "stall"))
    rc = mode_stall();
  else if (!strcmp(mode, "static"))
    rc = mode_static(argc > 2 ? argv[2] : "");
  else {
    fprintf(stderr, "w_sets: unknown mode '%s'\n", mode);
    rc = 2;
  }
  hk_status st = hk_shutdown();
  if (rc == 0 && st != HK_OK) {
    fprintf(stderr, "hk_shutdown: %s: %s\n", hk_strerror(st), hk_last_error());
    rc = 1;
  }
  return rc;
}
