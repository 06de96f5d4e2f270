/* Unit tests of the ring collectives: N threads, each a rank, joined into
 * a ring by links over socket pairs (one per link, or several striped).
 * Results against a serial computation, bitwise equality across ranks, a
 * tiny pipeline chunk (many partial elements per receive), a lost
 * neighbour and a stuck neighbour. Runs under TSan too. */
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

#include "collectives/ring.h"

#define MAXN 6

typedef struct rank_arg {
  hk_ring ring;
  hk_link left, right; /* the ring's links (owned here) */
  int rank, n, root;
  size_t count;
  hk_dtype dtype;
  hk_op op;
  int broadcast, in_place;
  void *send, *recv;
  hk_status st;
  char err[512];
} rank_arg;

static void *rank_main(void *p) {
  rank_arg *a = p;
  if (a->broadcast)
    a->st = hk_ring_broadcast(&a->ring, a->recv, a->count, a->dtype, a->root);
  else
    a->st = hk_ring_allreduce(&a->ring, a->send, a->recv, a->count, a->dtype,
                              a->op, NULL);
  snprintf(a->err, sizeof a->err, "%s", hk_last_error());
  return NULL;
}

/* Edge r joins rank r (its right link) to rank r+1 (its left link) over
 * k socket pairs striped in blocks of `block` bytes. */
static void make_ring_k(rank_arg *a, int n, size_t chunk, double timeout, int k,
                        size_t block) {
  hk_io io = {-1, timeout};
  for (int r = 0; r < n; r++) {
    a[r].rank = r;
    a[r].n = n;
  }
  for (int r = 0; r < n && n > 1; r++) {
    int send_ends[HK_LINK_MAX_SOCKETS], recv_ends[HK_LINK_MAX_SOCKETS];
    for (int i = 0; i < k; i++) {
      int sv[2];
      assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      send_ends[i] = sv[0];
      recv_ends[i] = sv[1];
    }
    int next = (r + 1) % n;
    assert_int_equal(hk_link_init_tcp(&a[r].right, next, send_ends, k, block),
                     HK_OK);
    assert_int_equal(hk_link_init_tcp(&a[next].left, r, recv_ends, k, block),
                     HK_OK);
  }
  for (int r = 0; r < n; r++)
    assert_int_equal(hk_ring_init(&a[r].ring, r, n, n > 1 ? &a[r].left : NULL,
                                  n > 1 ? &a[r].right : NULL, &io, chunk, NULL),
                     HK_OK);
}

static void make_ring(rank_arg *a, int n, size_t chunk, double timeout) {
  make_ring_k(a, n, chunk, timeout, 1, 0);
}

static void close_ring(rank_arg *a, int n) {
  for (int r = 0; r < n; r++) {
    hk_link_close(&a[r].right);
    hk_link_close(&a[r].left);
    hk_ring_destroy(&a[r].ring);
  }
}

static void run_all(rank_arg *a, int n) {
  pthread_t t[MAXN];
  for (int r = 0; r < n; r++)
    pthread_create(&t[r], NULL, rank_main, &a[r]);
  for (int r = 0; r < n; r++)
    pthread_join(t[r], NULL);
}

static double in(int r, size_t i) {
  return (double)((i * 5 + (size_t)r * 3) % 11) - 5;
}

static void check_allreduce(int n, size_t count, hk_dtype dtype, hk_op op,
                            int in_place, size_t chunk) {
  rank_arg a[MAXN];
  memset(a, 0, sizeof a);
  make_ring(a, n, chunk, 10);
  size_t esz = hk_dtype_size(dtype);
  for (int r = 0; r < n; r++) {
    a[r].count = count;
    a[r].dtype = dtype;
    a[r].op = op;
    a[r].send = malloc(count * esz + 1);
    a[r].recv = in_place ? a[r].send : malloc(count * esz + 1);
    for (size_t i = 0; i < count; i++) {
      if (dtype == HK_FLOAT64)
        ((double *)a[r].send)[i] = in(r, i);
      else if (dtype == HK_INT32)
        ((int32_t *)a[r].send)[i] = (int32_t)in(r, i);
      else
        ((float *)a[r].send)[i] = (float)in(r, i);
    }
  }
  run_all(a, n);
  for (int r = 0; r < n; r++) {
    if (a[r].st != HK_OK)
      fail_msg("rank %d: %s", r, a[r].err);
  }
  for (size_t i = 0; i < count; i++) {
    double acc = in(0, i);
    for (int r = 1; r < n; r++)
      acc = op == HK_MAX ? (in(r, i) > acc ? in(r, i) : acc) : acc + in(r, i);
    double got = dtype == HK_FLOAT64 ? ((double *)a[0].recv)[i]
                 : dtype == HK_INT32 ? ((int32_t *)a[0].recv)[i]
                                     : ((float *)a[0].recv)[i];
    if (op == HK_AVERAGE)
      acc = dtype == HK_FLOAT32 ? (double)((float)acc / (float)n) : acc / n;
    if (got != acc)
      fail_msg("n=%d count=%zu chunk=%zu element %zu: %g != serial %g", n,
               count, chunk, i, got, acc);
  }
  for (int r = 1; r < n; r++)
    assert_memory_equal(a[0].recv, a[r].recv, count * esz);
  for (int r = 0; r < n; r++) {
    if (a[r].recv != a[r].send)
      free(a[r].recv);
    free(a[r].send);
  }
  close_ring(a, n);
}

static void test_allreduce_sizes(void **state) {
  (void)state;
  for (int n = 1; n <= MAXN; n++) {
    size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n, 1000, 100003};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      check_allreduce(n, counts[c], HK_FLOAT32, HK_SUM, (int)c % 2, 1 << 16);
      check_allreduce(n, counts[c], HK_INT32, HK_MAX, 1, 1 << 16);
    }
  }
}

/* A 4 KiB+3 stage cut across element boundaries of 8-byte doubles. */
static void test_small_chunks(void **state) {
  (void)state;
  check_allreduce(3, 50001, HK_FLOAT64, HK_SUM, 0, 4096 + 3);
  check_allreduce(4, 50001, HK_FLOAT32, HK_AVERAGE, 1, 4096);
  check_allreduce(5, 7, HK_FLOAT64, HK_AVERAGE, 1, 4096);
}

static void test_broadcast_every_root(void **state) {
  (void)state;
  for (int n = 1; n <= 5; n++)
    for (int root = 0; root < n; root++) {
      rank_arg a[MAXN];
      memset(a, 0, sizeof a);
      make_ring(a, n, 4096, 10);
      size_t count = 30011;
      for (int r = 0; r < n; r++) {
        a[r].broadcast = 1;
        a[r].root = root;
        a[r].count = count;
        a[r].dtype = HK_INT32;
        int32_t *b = malloc(count * 4);
        for (size_t i = 0; i < count; i++)
          b[i] = r == root ? (int32_t)(i * 3 + (size_t)root) : -1;
        a[r].recv = b;
      }
      run_all(a, n);
      for (int r = 0; r < n; r++) {
        assert_int_equal(a[r].st, HK_OK);
        for (size_t i = 0; i < count; i++)
          assert_int_equal(((int32_t *)a[r].recv)[i],
                           (int32_t)(i * 3 + (size_t)root));
        free(a[r].recv);
      }
      close_ring(a, n);
    }
}

/* A neighbour whose connection is closed: PEER_LOST naming it. */
static void test_lost_neighbour(void **state) {
  (void)state;
  rank_arg a[2];
  memset(a, 0, sizeof a);
  make_ring(a, 2, 4096, 10);
  hk_link_close(&a[1].right); /* rank 1 -> rank 0 */
  hk_link_close(&a[1].left);
  float buf[64] = {0};
  a[0].count = 64;
  a[0].dtype = HK_FLOAT32;
  a[0].op = HK_SUM;
  a[0].send = a[0].recv = buf;
  rank_main(&a[0]);
  assert_int_equal(a[0].st, HK_ERR_PEER_LOST);
  assert_non_null(strstr(a[0].err, "rank 1"));
  close_ring(a, 2);
}

/* A neighbour that never sends: HK_ERR_TIMEOUT after the io timeout. */
static void test_stuck_neighbour(void **state) {
  (void)state;
  rank_arg a[2];
  memset(a, 0, sizeof a);
  make_ring(a, 2, 4096, 0.2);
  float buf[64] = {0};
  a[0].count = 64;
  a[0].dtype = HK_FLOAT32;
  a[0].op = HK_SUM;
  a[0].send = a[0].recv = buf;
  rank_main(&a[0]); /* rank 1 never runs */
  assert_int_equal(a[0].st, HK_ERR_TIMEOUT);
  assert_non_null(strstr(a[0].err, "timed out after 0.2 s in ring allreduce"));
  close_ring(a, 2);
}

/* Generic per-rank job for the tests below. */
typedef struct job {
  rank_arg *a;
  hk_status (*fn)(struct job *j);
  const size_t *seg;
  void *send, *recv;
  hk_status st;
} job;

static void *job_main(void *p) {
  job *j = p;
  j->st = j->fn(j);
  return NULL;
}

static void run_jobs(job *jobs, int n) {
  pthread_t t[MAXN];
  for (int r = 0; r < n; r++)
    pthread_create(&t[r], NULL, job_main, &jobs[r]);
  for (int r = 0; r < n; r++)
    pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++)
    assert_int_equal(jobs[r].st, HK_OK);
}

static hk_status do_segmented(job *j) {
  return hk_ring_allreduce_segmented(&j->a->ring, j->send, j->recv, j->seg,
                                     HK_FLOAT32, HK_AVERAGE, NULL);
}
static hk_status do_plain(job *j) {
  return hk_ring_allreduce(&j->a->ring, j->send, j->recv, j->seg[0], HK_FLOAT32,
                           HK_AVERAGE, NULL);
}
static hk_status do_reducescatter(job *j) {
  return hk_ring_reducescatter(&j->a->ring, j->send, j->recv, j->seg,
                               HK_FLOAT64, HK_SUM, NULL);
}
static hk_status do_allgatherv(job *j) {
  size_t r = (size_t)j->a->rank;
  return hk_ring_allgatherv(&j->a->ring, (const double *)j->send + j->seg[r],
                            j->recv, j->seg, HK_FLOAT64);
}

static float real_value(int r, int t, size_t i) {
  uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + t * 977);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (float)h / 4294967296.0f - 0.5f;
}

/* Two tensors laid out segment-major in one buffer reduce to exactly the
 * bits each gets alone: the fusion guarantee, with real-valued floats. */
static void test_segmented_equals_separate(void **state) {
  (void)state;
  for (int n = 3; n <= 5; n += 2) {
    size_t counts[2] = {1001, 37};
    rank_arg a[MAXN];
    memset(a, 0, sizeof a);
    make_ring(a, n, 4096 + 4, 10);
    float *alone[2][MAXN], *fused[MAXN];
    size_t total = counts[0] + counts[1];
    /* layout: segment j = tensor 0's segment j then tensor 1's */
    size_t seg[MAXN + 1], s0[MAXN + 1], s1[MAXN + 1];
    hk_ring_default_segments(counts[0], n, s0);
    hk_ring_default_segments(counts[1], n, s1);
    for (int j = 0; j <= n; j++)
      seg[j] = s0[j] + s1[j];
    for (int r = 0; r < n; r++) {
      fused[r] = malloc(total * sizeof(float));
      for (int t = 0; t < 2; t++) {
        alone[t][r] = malloc(counts[t] * sizeof(float));
        for (size_t i = 0; i < counts[t]; i++)
          alone[t][r][i] = real_value(r, t, i);
      }
      for (int j = 0; j < n; j++) {
        memcpy(fused[r] + seg[j], alone[0][r] + s0[j],
               (s0[j + 1] - s0[j]) * sizeof(float));
        memcpy(fused[r] + seg[j] + (s0[j + 1] - s0[j]), alone[1][r] + s1[j],
               (s1[j + 1] - s1[j]) * sizeof(float));
      }
    }
    job jobs[MAXN];
    for (int r = 0; r < n; r++)
      jobs[r] = (job){&a[r], do_segmented, seg, fused[r], fused[r], 0};
    run_jobs(jobs, n);
    for (int t = 0; t < 2; t++) {
      size_t cnt[1] = {counts[t]};
      for (int r = 0; r < n; r++)
        jobs[r] = (job){&a[r], do_plain, cnt, alone[t][r], alone[t][r], 0};
      run_jobs(jobs, n);
    }
    for (int r = 0; r < n; r++) {
      for (int j = 0; j < n; j++) {
        assert_memory_equal(fused[r] + seg[j], alone[0][r] + s0[j],
                            (s0[j + 1] - s0[j]) * sizeof(float));
        assert_memory_equal(fused[r] + seg[j] + (s0[j + 1] - s0[j]),
                            alone[1][r] + s1[j],
                            (s1[j + 1] - s1[j]) * sizeof(float));
      }
      free(fused[r]);
      free(alone[0][r]);
      free(alone[1][r]);
    }
    close_ring(a, n);
  }
}

static void test_reducescatter_and_allgatherv(void **state) {
  (void)state;
  for (int n = 1; n <= MAXN; n++) {
    rank_arg a[MAXN];
    memset(a, 0, sizeof a);
    make_ring(a, n, 4096, 10);
    /* uneven segments, one empty */
    size_t seg[MAXN + 1] = {0};
    for (int j = 0; j < n; j++)
      seg[j + 1] = seg[j] + (j == 1 ? 0 : (size_t)(j * 700 + 3));
    size_t total = seg[n];
    double *inp[MAXN], *out[MAXN];
    job jobs[MAXN];
    for (int r = 0; r < n; r++) {
      inp[r] = malloc((total + 1) * sizeof(double));
      out[r] = malloc((total + 1) * sizeof(double));
      for (size_t i = 0; i < total; i++)
        inp[r][i] = in(r, i);
      jobs[r] = (job){&a[r], do_reducescatter, seg, inp[r], out[r], 0};
    }
    run_jobs(jobs, n);
    for (int r = 0; r < n; r++)
      for (size_t i = seg[r]; i < seg[r + 1]; i++) {
        double e = 0;
        for (int q = 0; q < n; q++)
          e += in(q, i);
        assert_true(out[r][i - seg[r]] == e);
      }
    for (int r = 0; r < n; r++)
      jobs[r] = (job){&a[r], do_allgatherv, seg, inp[r], out[r], 0};
    run_jobs(jobs, n);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++)
        for (size_t i = seg[q]; i < seg[q + 1]; i++)
          assert_true(out[r][i] == in(q, i));
    for (int r = 0; r < n; r++) {
      free(inp[r]);
      free(out[r]);
    }
    close_ring(a, n);
  }
}

/* The ring over links striped across 3 socket pairs: real-valued float32
 * sums equal, bit for bit, the serial sum in the ring's order (segment j
 * starts at rank j and adds ranks j+1, j+2, ...), on every rank; then an
 * allgatherv and a broadcast over the same links. */
static void test_striped_links(void **state) {
  (void)state;
  const size_t blocks[] = {4099, HK_LINK_BLOCK_BYTES};
  for (int n = 3; n <= 4; n++)
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
      rank_arg a[MAXN];
      memset(a, 0, sizeof a);
      make_ring_k(a, n, 1 << 16, 10, 3, blocks[b]);
      const size_t count = 300007;
      for (int r = 0; r < n; r++) {
        float *v = malloc(count * sizeof(float));
        for (size_t i = 0; i < count; i++)
          v[i] = real_value(r, 0, i);
        a[r].send = a[r].recv = v;
        a[r].count = count;
        a[r].dtype = HK_FLOAT32;
        a[r].op = HK_SUM;
      }
      run_all(a, n);
      size_t seg[MAXN + 1];
      hk_ring_default_segments(count, n, seg);
      for (int r = 0; r < n; r++)
        if (a[r].st != HK_OK)
          fail_msg("n=%d rank %d: %s", n, r, a[r].err);
      for (int j = 0; j < n; j++)
        for (size_t i = seg[j]; i < seg[j + 1]; i++) {
          float acc = real_value(j, 0, i);
          for (int t = 1; t < n; t++)
            acc = real_value((j + t) % n, 0, i) + acc;
          float got = ((float *)a[0].recv)[i];
          if (memcmp(&got, &acc, sizeof acc) != 0)
            fail_msg("n=%d block=%zu element %zu: %a != serial %a", n,
                     blocks[b], i, (double)got, (double)acc);
        }
      for (int r = 1; r < n; r++)
        assert_memory_equal(a[0].recv, a[r].recv, count * sizeof(float));
      /* allgatherv of uneven blocks, then a broadcast from the last rank */
      size_t gseg[MAXN + 1] = {0};
      for (int j = 0; j < n; j++)
        gseg[j + 1] = gseg[j] + (size_t)(j * 70001 + 5);
      double *inp[MAXN], *out[MAXN];
      job jobs[MAXN];
      for (int r = 0; r < n; r++) {
        inp[r] = malloc(gseg[n] * sizeof(double));
        out[r] = malloc(gseg[n] * sizeof(double));
        for (size_t i = 0; i < gseg[n]; i++)
          inp[r][i] = in(r, i);
        jobs[r] = (job){&a[r], do_allgatherv, gseg, inp[r], out[r], 0};
      }
      run_jobs(jobs, n);
      for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++)
          for (size_t i = gseg[q]; i < gseg[q + 1]; i++)
            assert_true(out[r][i] == in(q, i));
      for (int r = 0; r < n; r++) {
        a[r].broadcast = 1;
        a[r].root = n - 1;
        a[r].dtype = HK_FLOAT64;
        a[r].count = gseg[n];
        a[r].recv = r == n - 1 ? inp[r] : out[r];
      }
      run_all(a, n);
      for (int r = 0; r < n; r++) {
        assert_int_equal(a[r].st, HK_OK);
        assert_memory_equal(a[r].recv, inp[n - 1], gseg[n] * sizeof(double));
      }
      for (int r = 0; r < n; r++) {
        free(a[r].send);
        free(inp[r]);
        free(out[r]);
      }
      close_ring(a, n);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_sizes),
      cmocka_unit_test(test_small_chunks),
      cmocka_unit_test(test_broadcast_every_root),
      cmocka_unit_test(test_segmented_equals_separate),
      cmocka_unit_test(test_reducescatter_and_allgatherv),
      cmocka_unit_test(test_striped_links),
      cmocka_unit_test(test_lost_neighbour),
      cmocka_unit_test(test_stuck_neighbour),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
