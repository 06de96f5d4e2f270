/* Unit tests of hierarchical allreduce and recursive doubling: N threads,
 * each a rank, joined by a full mesh of socket pairs; hosts are blocks of
 * L consecutive ranks. Results are compared BITWISE with a serial
 * computation in the reduction order each header documents (random
 * real-valued floats, where the association shows in the last bits), on
 * every rank; integer data must equal the flat ring's exactly; a tiny
 * pipeline chunk splits elements across receives; a lost peer is named.
 * Runs under TSan too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/hierarchical.h"
#include "collectives/rd.h"
#include "device/host/reduce.h"

#define MAXN 8

typedef struct rank_arg {
  int rank, n, L, H;
  hk_link links[MAXN];  /* to every other rank (links[rank] unused) */
  hk_link *peers[MAXN]; /* peers[j] = &links[j], as rd takes them */
  hk_ring flat, local, cross;
  int algo; /* 0 flat ring, 1 hierarchical, 2 recursive doubling */
  size_t count;
  hk_dtype dtype;
  hk_op op;
  hk_ring_finish fin;
  void *send, *recv;
  uint8_t *scratch;
  size_t scratch_bytes;
  hk_status st;
  char err[512];
} rank_arg;

static hk_io io = {-1, 20.0};

static void *rank_main(void *p) {
  rank_arg *a = p;
  size_t seg[MAXN + 1];
  hk_ring_default_segments(a->count, a->n, seg);
  if (a->algo == 0)
    a->st = hk_ring_allreduce_segmented(&a->flat, a->send, a->recv, seg,
                                        a->dtype, a->op, &a->fin);
  else if (a->algo == 1)
    a->st = hk_hier_allreduce(&a->local, &a->cross, a->send, a->recv, seg,
                              a->dtype, a->op, &a->fin);
  else
    a->st = hk_rd_allreduce(a->rank, a->n, a->peers, &io, a->send, a->recv,
                            a->count, a->dtype, a->op, &a->fin, &a->scratch,
                            &a->scratch_bytes);
  snprintf(a->err, sizeof a->err, "%s", hk_last_error());
  if (a->st != HK_OK) /* as a failing worker does: its peers see EOF */
    for (int j = 0; j < a->n; j++)
      if (hk_link_socket(&a->links[j], 0) >= 0)
        shutdown(hk_link_socket(&a->links[j], 0), SHUT_RDWR);
  return NULL;
}

/* A ring over members[0..m) for the rank at index me of it. */
static void ring_of(rank_arg *a, hk_ring *ring, const int *members, int m,
                    int me, size_t chunk) {
  hk_link *left = m > 1 ? &a->links[members[(me + m - 1) % m]] : NULL;
  hk_link *right = m > 1 ? &a->links[members[(me + 1) % m]] : NULL;
  assert_int_equal(hk_ring_init(ring, me, m, left, right, &io, chunk, NULL),
                   HK_OK);
  if (m > 1) { /* name neighbours by job rank, as worker/rings.c does */
    snprintf(ring->left_name, sizeof ring->left_name, "rank %d",
             members[(me + m - 1) % m]);
    snprintf(ring->right_name, sizeof ring->right_name, "rank %d",
             members[(me + 1) % m]);
  }
}

static void make_job(rank_arg *a, int L, int H, size_t chunk) {
  int n = L * H;
  for (int i = 0; i < n; i++) {
    memset(a[i].links, 0, sizeof a[i].links);
    for (int j = 0; j < MAXN; j++)
      a[i].peers[j] = &a[i].links[j];
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      int sv[2];
      assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      for (int k = 0; k < 2; k++)
        fcntl(sv[k], F_SETFL, fcntl(sv[k], F_GETFL) | O_NONBLOCK);
      assert_int_equal(hk_link_init_tcp(&a[i].links[j], j, &sv[0], 1, 0),
                       HK_OK);
      assert_int_equal(hk_link_init_tcp(&a[j].links[i], i, &sv[1], 1, 0),
                       HK_OK);
    }
  for (int r = 0; r < n; r++) {
    int all[MAXN], local[MAXN], cross[MAXN];
    for (int i = 0; i < n; i++)
      all[i] = i;
    for (int i = 0; i < L; i++)
      local[i] = (r / L) * L + i;
    for (int h = 0; h < H; h++)
      cross[h] = h * L + r % L;
    a[r].rank = r;
    a[r].n = n;
    a[r].L = L;
    a[r].H = H;
    ring_of(&a[r], &a[r].flat, all, n, r, chunk);
    ring_of(&a[r], &a[r].local, local, L, r % L, chunk);
    ring_of(&a[r], &a[r].cross, cross, H, r / L, chunk);
  }
}

static void close_job(rank_arg *a, int n) {
  for (int r = 0; r < n; r++) {
    for (int j = 0; j < n; j++)
      hk_link_close(&a[r].links[j]);
    hk_ring_destroy(&a[r].flat);
    hk_ring_destroy(&a[r].local);
    hk_ring_destroy(&a[r].cross);
    free(a[r].scratch);
    free(a[r].send);
    free(a[r].recv);
  }
}

static void run_all(rank_arg *a, int n) {
  pthread_t t[MAXN];
  for (int r = 0; r < n; r++)
    pthread_create(&t[r], NULL, rank_main, &a[r]);
  for (int r = 0; r < n; r++)
    pthread_join(t[r], NULL);
}

/* x op acc, as the kernels compute it (reduce.h): one element. */
static void combine(void *acc, const void *x, hk_dtype d, hk_op op) {
  hk_reduce(acc, x, acc, 1, d, op);
}

/* The documented hierarchical order for element e of segment j = b*H+c:
 * each host folds its ranks from local position b, then the host partials
 * are folded from host c. */
static void serial_hier(void *out, void *const *in, int L, int H, size_t count,
                        hk_dtype d, hk_op op, int divisor) {
  size_t esz = hk_dtype_size(d), seg[MAXN + 1];
  hk_ring_default_segments(count, L * H, seg);
  uint8_t part[MAXN][8], acc[8];
  for (int j = 0; j < L * H; j++) {
    int b = j / H, c = j % H;
    for (size_t e = seg[j]; e < seg[j + 1]; e++) {
      for (int h = 0; h < H; h++) {
        memcpy(part[h], (uint8_t *)in[h * L + b] + e * esz, esz);
        for (int k = 1; k < L; k++)
          combine(part[h], (uint8_t *)in[h * L + (b + k) % L] + e * esz, d, op);
      }
      memcpy(acc, part[c], esz);
      for (int k = 1; k < H; k++)
        combine(acc, part[(c + k) % H], d, op);
      if (op == HK_AVERAGE)
        hk_reduce_finish_average(acc, 1, d, divisor);
      memcpy((uint8_t *)out + e * esz, acc, esz);
    }
  }
}

/* The documented recursive-doubling order: pairs (2i, 2i+1) of the first
 * 2e ranks, then a balanced tree over the p survivors, each combination
 * (lower rank's partial) op (higher rank's). */
static void serial_rd(void *out, void *const *in, int n, size_t count,
                      hk_dtype d, hk_op op, int divisor) {
  size_t esz = hk_dtype_size(d);
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  int e = n - p;
  uint8_t v[MAXN][8], t[8];
  for (size_t x = 0; x < count; x++) {
    for (int vr = 0; vr < p; vr++) {
      int r = vr < e ? 2 * vr + 1 : vr + e;
      memcpy(v[vr], (uint8_t *)in[r] + x * esz, esz);
      if (vr < e) /* (rank 2vr) op (rank 2vr+1) */
        hk_reduce(v[vr], (uint8_t *)in[r - 1] + x * esz, v[vr], 1, d, op);
    }
    for (int mask = 1; mask < p; mask <<= 1)
      for (int lo = 0; lo < p; lo++)
        if (!(lo & mask)) {
          hk_reduce(t, v[lo], v[lo | mask], 1, d, op);
          memcpy(v[lo], t, esz);
          memcpy(v[lo | mask], t, esz);
        }
    if (op == HK_AVERAGE)
      hk_reduce_finish_average(v[0], 1, d, divisor);
    memcpy((uint8_t *)out + x * esz, v[0], esz);
  }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd(void) { /* xorshift64*: [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  uint64_t x = rng_state * 2685821657736338717ull;
  return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

static void fill(void *buf, size_t count, hk_dtype d, int integers) {
  for (size_t i = 0; i < count; i++) {
    double v = integers ? (double)(int)(rnd() * 1000) : rnd() * 1e3;
    if (d == HK_FLOAT32)
      ((float *)buf)[i] = (float)v;
    else if (d == HK_FLOAT64)
      ((double *)buf)[i] = v;
    else
      ((int32_t *)buf)[i] = (int32_t)v;
  }
}

/* One case: algo over L x H ranks; every rank's result must equal the
 * serial model bit for bit. Returns nothing; fails the test. */
static void check_case(int algo, int L, int H, size_t count, hk_dtype d,
                       hk_op op, size_t chunk, int in_place) {
  int n = L * H;
  rank_arg a[MAXN];
  memset(a, 0, sizeof a);
  make_job(a, L, H, chunk);
  size_t bytes = count * hk_dtype_size(d);
  void *in[MAXN];
  for (int r = 0; r < n; r++) {
    a[r].algo = algo;
    a[r].count = count;
    a[r].dtype = d;
    a[r].op = op;
    a[r].fin = (hk_ring_finish){0, 1.0, 1.0};
    a[r].send = malloc(bytes + 1);
    a[r].recv = malloc(bytes + 1);
    fill(a[r].send, count, d, 0);
    in[r] = malloc(bytes + 1);
    memcpy(in[r], a[r].send, bytes);
    if (in_place)
      memcpy(a[r].recv, a[r].send, bytes);
    if (in_place) {
      free(a[r].send);
      a[r].send = a[r].recv;
    }
  }
  uint8_t *want = malloc(bytes + 1);
  if (algo == 2)
    serial_rd(want, in, n, count, d, op, n);
  else /* with L == 1 or H == 1 this is the flat ring's order too */
    serial_hier(want, in, algo == 1 ? L : n, algo == 1 ? H : 1, count, d, op,
                n);
  run_all(a, n);
  for (int r = 0; r < n; r++) {
    if (a[r].st != HK_OK)
      fail_msg("algo %d L=%d H=%d count=%zu rank %d: %s", algo, L, H, count, r,
               a[r].err);
    if (bytes && memcmp(a[r].recv, want, bytes) != 0)
      fail_msg("algo %d L=%d H=%d count=%zu dtype %d op %d: rank %d differs "
               "from the documented order",
               algo, L, H, count, d, op, r);
  }
  for (int r = 0; r < n; r++) {
    free(in[r]);
    if (in_place)
      a[r].send = NULL;
  }
  free(want);
  close_job(a, n);
}

static const int shapes[][2] = {{2, 2}, {3, 2}, {2, 3}, {1, 4},
                                {4, 1}, {2, 4}, {4, 2}};
static const size_t counts[] = {0, 1, 5, 7, 1000, 40009};

static void test_hier_bits(void **s) {
  (void)s;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      check_case(1, shapes[i][0], shapes[i][1], counts[c], HK_FLOAT32, HK_SUM,
                 1 << 16, c % 2);
      check_case(1, shapes[i][0], shapes[i][1], counts[c], HK_FLOAT64,
                 HK_AVERAGE, 4096 + 4, 0); /* chunk splits elements */
    }
}

static void test_flat_bits(void **s) {
  (void)s; /* the flat ring's documented order, by the same model */
  for (int n = 2; n <= 6; n++)
    check_case(0, n, 1, 1001, HK_FLOAT32, HK_SUM, 1 << 16, 0);
}

static void test_rd_bits(void **s) {
  (void)s;
  for (int n = 1; n <= MAXN; n++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      check_case(2, n, 1, counts[c], HK_FLOAT32, HK_SUM, 1 << 16, c % 2);
      check_case(2, n, 1, counts[c], HK_FLOAT64, HK_AVERAGE, 1 << 16, 0);
      check_case(2, n, 1, counts[c], HK_FLOAT32, HK_MIN, 1 << 16, 0);
    }
  /* larger buffers (400 and 512 KiB): the same order, the same bits */
  for (int n = 1; n <= MAXN; n++) {
    check_case(2, n, 1, 100003, HK_FLOAT32, HK_SUM, 1 << 16, 1);
    check_case(2, n, 1, 65536 + 3, HK_FLOAT64, HK_AVERAGE, 1 << 16, 0);
  }
}

/* Integers: every algorithm gives the flat ring's (exact) result. */
static void test_integers_agree(void **s) {
  (void)s;
  const int L = 2, H = 3, n = 6;
  const size_t count = 12345;
  int32_t *res[3];
  for (int algo = 0; algo < 3; algo++) {
    rank_arg a[MAXN];
    memset(a, 0, sizeof a);
    make_job(a, L, H, 4096);
    rng_state = 12345; /* the same inputs for every algorithm */
    for (int r = 0; r < n; r++) {
      a[r].algo = algo;
      a[r].count = count;
      a[r].dtype = HK_INT32;
      a[r].op = HK_SUM;
      a[r].fin = (hk_ring_finish){0, 1.0, 1.0};
      a[r].send = malloc(count * 4);
      a[r].recv = malloc(count * 4);
      fill(a[r].send, count, HK_INT32, 1);
    }
    run_all(a, n);
    for (int r = 0; r < n; r++) {
      assert_int_equal(a[r].st, HK_OK);
      assert_memory_equal(a[r].recv, a[0].recv, count * 4);
    }
    res[algo] = malloc(count * 4);
    memcpy(res[algo], a[0].recv, count * 4);
    close_job(a, n);
  }
  assert_memory_equal(res[0], res[1], count * 4);
  assert_memory_equal(res[0], res[2], count * 4);
  for (int i = 0; i < 3; i++)
    free(res[i]);
}

/* A rank that is gone: its partners fail naming it, nobody hangs. */
static void test_lost_peer(void **s) {
  (void)s;
  for (int algo = 1; algo <= 2; algo++) {
    const int L = 2, H = 2, n = 4;
    rank_arg a[MAXN];
    memset(a, 0, sizeof a);
    make_job(a, L, H, 4096);
    for (int r = 0; r < n; r++) {
      a[r].algo = algo;
      a[r].count = 100000;
      a[r].dtype = HK_FLOAT32;
      a[r].op = HK_SUM;
      a[r].fin = (hk_ring_finish){0, 1.0, 1.0};
      a[r].send = calloc(100000, 4);
      a[r].recv = calloc(100000, 4);
    }
    for (int j = 0; j < n; j++) /* rank 3 vanishes */
      hk_link_close(&a[3].links[j]);
    pthread_t t[3];
    for (int r = 0; r < 3; r++)
      pthread_create(&t[r], NULL, rank_main, &a[r]);
    for (int r = 0; r < 3; r++)
      pthread_join(t[r], NULL);
    int named = 0;
    for (int r = 0; r < 3; r++) {
      assert_int_not_equal(a[r].st, HK_OK);
      named += strstr(a[r].err, "rank 3") != NULL;
    }
    if (named == 0)
      fail_msg("algo %d: no rank named rank 3: '%s' / '%s' / '%s'", algo,
               a[0].err, a[1].err, a[2].err);
    close_job(a, n);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hier_bits), cmocka_unit_test(test_flat_bits),
      cmocka_unit_test(test_rd_bits),   cmocka_unit_test(test_integers_agree),
      cmocka_unit_test(test_lost_peer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
