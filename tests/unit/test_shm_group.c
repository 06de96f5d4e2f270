/* Unit tests of the shm ring collectives (collectives/shm_ring.h over
 * collectives/shm_group.h): N threads, each a rank, share a segment; every
 * collective (allreduce and its two halves, segmented (fused) allreduce,
 * reduce-scatter, allgatherv, broadcast), every dtype and op, on
 * real-valued inputs with NaNs and signed zeros, in a permuted ring
 * order, compared bitwise with the same ring run over TCP links
 * (socket pairs) and across ranks; tiny slots (many rounds) and large
 * ones; a member that dies (its sockets close) and one that never comes,
 * named in the errors. Runs under TSan too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collectives/shm_ring.h"
#include "device/host/reduce.h"

#define MAXN 8

/* C_PIECES: C_SEGMENTED's layout, over shm as pieces scattered in memory
 * (hk_ring_shm_allreduce_pieces, a fused batch in place) */
enum { C_ALLREDUCE, C_HALVES, C_SEGMENTED, C_RS, C_AGV, C_BCAST, C_PIECES };

typedef struct rank_arg {
  hk_ring links, shm;  /* the same ring over links and over shm */
  hk_link left, right; /* owned here */
  hk_shm_group group;
  int rank, n, root, coll, use_shm, quit_early;
  size_t count;
  size_t seg[MAXN + 1];
  hk_dtype dtype;
  hk_op op;
  void *send, *recv;
  hk_status st;
  char err[512];
  hk_shm_piece *pieces; /* C_PIECES over shm */
  size_t npieces;
} rank_arg;

typedef struct world {
  int n;
  rank_arg a[MAXN];
  hk_shm_seg seg[MAXN]; /* each rank maps the segment itself */
  int live[MAXN][MAXN]; /* liveness sockets: live[r][q] is r's end to q */
} world;

static const int perm8[MAXN] = {3, 0, 6, 1, 5, 7, 2, 4};

/* A ring of n ranks in a permuted order (ranks ordered by perm8 among
 * 0..n-1), over socket-pair links, and the same ring over a fresh
 * segment with slot halves of slot_bytes. */
static void make_world(world *w, int n, size_t slot_bytes, double timeout) {
  memset(w, 0, sizeof *w);
  w->n = n;
  int order[MAXN], k = 0;
  for (int i = 0; i < MAXN; i++)
    if (perm8[i] < n)
      order[k++] = perm8[i];
  hk_shm_layout lay = {n, slot_bytes, 4096, 0};
  hk_shm_seg creator;
  assert_int_equal(hk_shm_seg_create(&lay, &creator), HK_OK);
  for (int r = 0; r < n; r++)
    assert_int_equal(hk_shm_seg_open((long)getpid(), creator.fd, &w->seg[r]),
                     HK_OK);
  hk_shm_seg_close(&creator);
  for (int r = 0; r < n; r++)
    for (int q = 0; q < n; q++)
      w->live[r][q] = -1;
  for (int r = 0; r < n; r++)
    for (int q = r + 1; q < n; q++) {
      int sv[2];
      assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      w->live[r][q] = sv[0];
      w->live[q][r] = sv[1];
    }
  hk_io io = {-1, timeout};
  for (int p = 0; p < n && n > 1; p++) { /* position p -> p+1 */
    int r = order[p], next = order[(p + 1) % n], sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(hk_link_init_tcp(&w->a[r].right, next, &sv[0], 1, 0),
                     HK_OK);
    assert_int_equal(hk_link_init_tcp(&w->a[next].left, r, &sv[1], 1, 0),
                     HK_OK);
  }
  for (int r = 0; r < n; r++) {
    rank_arg *a = &w->a[r];
    a->rank = r;
    a->n = n;
    hk_link *l = n > 1 ? &a->left : NULL, *rt = n > 1 ? &a->right : NULL;
    assert_int_equal(hk_ring_init(&a->links, r, n, l, rt, &io, 4096, order),
                     HK_OK);
    assert_int_equal(hk_ring_init(&a->shm, r, n, l, rt, &io, 4096, order),
                     HK_OK);
    int local[MAXN], ranks[MAXN], fds[MAXN];
    for (int p = 0; p < n; p++) {
      local[p] = order[p]; /* local index = rank here */
      ranks[p] = order[p];
      fds[p] = w->live[r][order[p]];
    }
    assert_int_equal(hk_shm_group_init(&a->group, &w->seg[r], n, a->links.rank,
                                       local, ranks, fds, &io),
                     HK_OK);
    hk_ring_use_shm(&a->shm, &a->group);
  }
}

static void close_world(world *w) {
  for (int r = 0; r < w->n; r++) {
    rank_arg *a = &w->a[r];
    hk_link_close(&a->right);
    hk_link_close(&a->left);
    hk_ring_destroy(&a->links);
    hk_ring_destroy(&a->shm);
    hk_shm_group_destroy(&a->group);
    hk_shm_seg_close(&w->seg[r]);
    for (int q = 0; q < w->n; q++)
      if (w->live[r][q] >= 0)
        close(w->live[r][q]);
  }
}

static void *rank_main(void *p) {
  rank_arg *a = p;
  hk_ring *ring = a->use_shm ? &a->shm : &a->links;
  hk_ring_finish fin = {0, a->dtype <= HK_FLOAT64 ? 0.5 : 1.0, 1.0};
  if (a->quit_early) {
    a->st = HK_OK;
    return NULL;
  }
  switch (a->coll) {
  case C_ALLREDUCE:
    a->st = hk_ring_allreduce(ring, a->send, a->recv, a->count, a->dtype, a->op,
                              &fin);
    break;
  case C_HALVES:
    a->st = hk_ring_allreduce_part(ring, a->send, a->recv, a->seg, a->dtype,
                                   a->op, NULL, HK_RING_REDUCE_SCATTER);
    if (a->st == HK_OK)
      a->st = hk_ring_allreduce_part(ring, NULL, a->recv, a->seg, a->dtype,
                                     a->op, NULL, HK_RING_ALLGATHER);
    break;
  case C_SEGMENTED:
    a->st = hk_ring_allreduce_segmented(ring, a->send, a->recv, a->seg,
                                        a->dtype, a->op, &fin);
    break;
  case C_PIECES:
    a->st = a->use_shm
                ? hk_ring_shm_allreduce_pieces(ring, a->pieces, a->npieces,
                                               a->seg, a->dtype, a->op, &fin)
                : hk_ring_allreduce_segmented(ring, a->send, a->recv, a->seg,
                                              a->dtype, a->op, &fin);
    break;
  case C_RS:
    a->st = hk_ring_reducescatter(ring, a->send, a->recv, a->seg, a->dtype,
                                  a->op, &fin);
    break;
  case C_AGV:
    a->st = hk_ring_allgatherv(ring, a->send, a->recv, a->seg, a->dtype);
    break;
  default:
    a->st = hk_ring_broadcast(ring, a->recv, a->count, a->dtype, a->root);
  }
  snprintf(a->err, sizeof a->err, "%s", hk_last_error());
  return NULL;
}

static void run_all(world *w, int use_shm) {
  pthread_t t[MAXN];
  for (int r = 0; r < w->n; r++) {
    w->a[r].use_shm = use_shm;
    pthread_create(&t[r], NULL, rank_main, &w->a[r]);
  }
  for (int r = 0; r < w->n; r++)
    pthread_join(t[r], NULL);
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Element i of rank r: real values whose sums round (so the order shows
 * in the bits), some NaNs and signed zeros; any integer. */
static void fill(void *buf, size_t count, hk_dtype d, hk_op op, int r) {
  const size_t esz = hk_dtype_size(d);
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix((uint64_t)r << 48 ^ i ^ (uint64_t)d << 40);
    double v = ((double)(h >> 11) / 9007199254740992.0 - 0.5) *
               ldexp(1.0, (int)(h % 24) - 12);
    if (op == HK_PRODUCT)
      v = 1.0 + v / 64;
    if (h % 97 == 0)
      v = NAN;
    else if (h % 89 == 0)
      v = (h & 1) ? 0.0 : -0.0;
    uint8_t *p = (uint8_t *)buf + i * esz;
    if (d == HK_FLOAT32) {
      float f = (float)v;
      memcpy(p, &f, 4);
    } else if (d == HK_FLOAT64) {
      memcpy(p, &v, 8);
    } else if (d == HK_FLOAT16 || d == HK_BFLOAT16) {
      uint16_t x = (uint16_t)(h >> 16);
      if (((x >> (d == HK_FLOAT16 ? 10 : 7)) & (d == HK_FLOAT16 ? 31 : 255)) ==
          (d == HK_FLOAT16 ? 31 : 255))
        x ^= (uint16_t)(d == HK_FLOAT16 ? 0x4000 : 0x4000); /* finite */
      if (h % 97 == 0)
        x = d == HK_FLOAT16 ? 0x7e01 : 0x7fc1;
      memcpy(p, &x, 2);
    } else {
      memcpy(p, &h, esz);
    }
  }
}

/* C_PIECES: cuts rank a's logical buffer of `total` elements into runs of
 * 1..37 elements laid out in memory in reverse order (so no two runs that
 * follow each other in the buffer are adjacent in memory), copies the
 * input there: sh[0] the inputs, sh[1] the outputs (the same in place). */
static void scatter_pieces(rank_arg *a, size_t total, size_t esz,
                           uint8_t **sh) {
  a->pieces = calloc(total + 1, sizeof *a->pieces);
  sh[0] = malloc(total * esz + 8);
  sh[1] = a->send == a->recv ? sh[0] : calloc(1, total * esz + 8);
  assert_non_null(a->pieces);
  a->npieces = 0;
  for (size_t off = 0, len; off < total; off += len) {
    len = 1 + (off * 7 + 3) % 37;
    len = len < total - off ? len : total - off;
    size_t at = (total - off - len) * esz; /* reversed placement */
    memcpy(sh[0] + at, (uint8_t *)a->send + off * esz, len * esz);
    a->pieces[a->npieces++] = (hk_shm_piece){off, len, sh[0] + at, sh[1] + at};
  }
}

/* C_PIECES: the outputs back into a->recv in the buffer's order. */
static void gather_pieces(rank_arg *a, size_t esz, uint8_t **sh) {
  for (size_t i = 0; i < a->npieces; i++)
    memcpy((uint8_t *)a->recv + a->pieces[i].off * esz, a->pieces[i].dst,
           a->pieces[i].count * esz);
  if (sh[1] != sh[0])
    free(sh[1]);
  free(sh[0]);
  free(a->pieces);
  a->pieces = NULL;
}

/* Runs coll over links, then over shm, from the same inputs; every rank's
 * output must match bitwise. out_elems: elements of each rank's output. */
static void compare(int n, int coll, size_t count, hk_dtype d, hk_op op,
                    size_t slot_bytes, int in_place) {
  world w;
  make_world(&w, n, slot_bytes, 20);
  const size_t esz = hk_dtype_size(d);
  size_t seg[MAXN + 1];
  /* uneven segments/blocks: rank j's block j*count/(n+1) ... (coll AGV
   * takes the lengths as blocks; C_SEGMENTED as a fused layout) */
  size_t total = 0;
  for (int j = 0; j < n; j++) {
    seg[j] = total;
    total += (count * (size_t)(j + 1) * 2) / (size_t)(n * (n + 1)) +
             (j == 1 ? 3 : 0);
  }
  seg[n] = total;
  if (coll == C_ALLREDUCE || coll == C_BCAST || coll == C_HALVES) {
    hk_ring_default_segments(count, n, seg);
    total = count;
  }
  if (coll == C_RS) /* the reduce-scatter's blocks: rows per rank */
    hk_ring_default_segments(count, n, seg), total = count;
  void *res[2][MAXN];
  for (int pass = 0; pass < 2; pass++) {
    for (int r = 0; r < n; r++) {
      rank_arg *a = &w.a[r];
      a->coll = coll;
      a->count = count;
      a->dtype = d;
      a->op = op;
      a->root = n - 1;
      memcpy(a->seg, seg, sizeof seg);
      size_t in_elems = coll == C_AGV ? seg[r + 1] - seg[r] : total;
      size_t out_elems = coll == C_RS ? seg[r + 1] - seg[r] : total;
      a->send = malloc(in_elems * esz + 8);
      fill(a->send, in_elems, d, op, r);
      a->recv = in_place && coll != C_RS && coll != C_AGV
                    ? a->send
                    : calloc(1, out_elems * esz + 8);
      if (coll == C_BCAST && a->recv != a->send)
        memcpy(a->recv, a->send, total * esz);
      res[pass][r] = a->recv;
    }
    uint8_t *shadow[MAXN][2] = {{NULL}};
    if (coll == C_PIECES && pass == 1)
      for (int r = 0; r < n; r++)
        scatter_pieces(&w.a[r], total, esz, shadow[r]);
    run_all(&w, pass);
    if (coll == C_PIECES && pass == 1)
      for (int r = 0; r < n; r++)
        gather_pieces(&w.a[r], esz, shadow[r]);
    for (int r = 0; r < n; r++) {
      if (w.a[r].st != HK_OK)
        fail_msg("n=%d coll %d %s %s count %zu pass %d rank %d: %s", n, coll,
                 hk_dtype_name(d), hk_op_name(op), count, pass, r, w.a[r].err);
      if (w.a[r].send != w.a[r].recv)
        free(w.a[r].send);
    }
  }
  for (int r = 0; r < n; r++) {
    size_t out_elems = coll == C_RS ? seg[r + 1] - seg[r] : total;
    if (memcmp(res[0][r], res[1][r], out_elems * esz) != 0) {
      size_t i = 0;
      while (memcmp((uint8_t *)res[0][r] + i * esz,
                    (uint8_t *)res[1][r] + i * esz, esz) == 0)
        i++;
      uint64_t x0 = 0, x1 = 0;
      memcpy(&x0, (uint8_t *)res[0][r] + i * esz, esz);
      memcpy(&x1, (uint8_t *)res[1][r] + i * esz, esz);
      fail_msg("n=%d coll %d %s %s count %zu slot %zu: rank %d's element %zu "
               "differs between links (%#llx) and shm (%#llx)",
               n, coll, hk_dtype_name(d), hk_op_name(op), count, slot_bytes, r,
               i, (unsigned long long)x0, (unsigned long long)x1);
    }
    if (coll != C_RS && memcmp(res[1][r], res[1][0], out_elems * esz) != 0)
      fail_msg("n=%d coll %d: rank %d differs from rank 0 over shm", n, coll,
               r);
  }
  for (int r = 0; r < n; r++) {
    free(res[0][r]);
    free(res[1][r]);
  }
  close_world(&w);
}

/* Every dtype x op of the allreduce at several sizes, small slots (many
 * rounds, partial slices) and large, in and out of place. */
static void test_allreduce_matches_ring(void **s) {
  (void)s;
  const int ns[] = {1, 2, 3, 4, 5, 8};
  for (int k = 0; k < 6; k++)
    for (int d = HK_FLOAT16; d <= HK_INT16; d++)
      for (int op = HK_SUM; op <= HK_PRODUCT; op++) {
        compare(ns[k], C_ALLREDUCE, 1 + (size_t)ns[k] * 700 + 13, (hk_dtype)d,
                (hk_op)op, 4096, op & 1);
        compare(ns[k], C_ALLREDUCE, (size_t)ns[k] - 1, (hk_dtype)d, (hk_op)op,
                4096, 0);
      }
  compare(4, C_ALLREDUCE, 300007, HK_FLOAT32, HK_SUM, 1 << 20, 1);
  /* one-shot at its largest (np 2: up to 256 KiB), and just above */
  compare(2, C_ALLREDUCE, 65536, HK_FLOAT32, HK_SUM, 1 << 20, 0);
  compare(2, C_ALLREDUCE, 65537, HK_FLOAT32, HK_SUM, 1 << 20, 0);
  compare(3, C_SEGMENTED, 50000, HK_FLOAT64, HK_AVERAGE, 1 << 20, 1);
  /* a fused batch in place (pieces): one-shot and rounds, every n */
  for (int k = 1; k < 6; k++) {
    compare(ns[k], C_PIECES, 20011, HK_FLOAT32, HK_SUM, 4096, 0);
    compare(ns[k], C_PIECES, 5003, HK_BFLOAT16, HK_AVERAGE, 4096, 1);
    compare(ns[k], C_PIECES, 777, HK_FLOAT64, HK_MAX, 1 << 20, 0);
  }
  compare(3, C_ALLREDUCE, 0, HK_FLOAT32, HK_SUM, 4096, 1);
}

/* The halves (hierarchical's in-host phases), a fused (segmented) layout
 * with uneven segments, reduce-scatter, allgatherv, broadcast. */
static void test_other_collectives_match_ring(void **s) {
  (void)s;
  const int ns[] = {2, 3, 5, 8};
  const int colls[] = {C_HALVES, C_SEGMENTED, C_RS, C_AGV, C_BCAST};
  for (int k = 0; k < 4; k++)
    for (int c = 0; c < 5; c++) {
      compare(ns[k], colls[c], 20011, HK_FLOAT32, HK_SUM, 4096, 0);
      compare(ns[k], colls[c], 5003, HK_BFLOAT16, HK_MAX, 4096, 1);
      compare(ns[k], colls[c], 777, HK_FLOAT64, HK_AVERAGE, 8192, 0);
      compare(ns[k], colls[c], 3, HK_INT8, HK_PRODUCT, 4096, 1);
    }
}

/* Rank `victim` never runs; after the others wait, its liveness sockets
 * close (as a killed process's do): each survivor fails naming it. */
static void test_dead_member_named(void **s) {
  (void)s;
  world w;
  make_world(&w, 3, 4096, 20);
  for (int r = 0; r < 3; r++) {
    rank_arg *a = &w.a[r];
    a->coll = C_ALLREDUCE;
    a->count = 100000;
    a->dtype = HK_FLOAT32;
    a->op = HK_SUM;
    a->send = a->recv = calloc(100000, 4);
    a->use_shm = 1;
    a->quit_early = r == 2;
  }
  pthread_t t[3];
  for (int r = 0; r < 3; r++)
    pthread_create(&t[r], NULL, rank_main, &w.a[r]);
  usleep(100000); /* let the survivors block: the test is about that */
  for (int q = 0; q < 3; q++)
    if (w.live[2][q] >= 0) {
      close(w.live[2][q]);
      w.live[2][q] = -1;
    }
  for (int r = 0; r < 3; r++)
    pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(w.a[r].st, HK_ERR_PEER_LOST);
    if (!strstr(w.a[r].err, "rank 2 closed the connection"))
      fail_msg("rank %d: %s", r, w.a[r].err);
    free(w.a[r].send);
  }
  free(w.a[2].send);
  close_world(&w);
}

/* A member that never comes but stays alive: a timeout naming it. */
static void test_stuck_member_times_out(void **s) {
  (void)s;
  world w;
  make_world(&w, 3, 4096, 0.3);
  pthread_t t[3];
  for (int r = 0; r < 3; r++) {
    rank_arg *a = &w.a[r];
    a->coll = C_ALLREDUCE;
    a->count = 10;
    a->dtype = HK_INT32;
    a->op = HK_SUM;
    a->send = a->recv = calloc(10, 4);
    a->quit_early = r == 1;
    a->use_shm = 1;
    pthread_create(&t[r], NULL, rank_main, a);
  }
  for (int r = 0; r < 3; r++)
    pthread_join(t[r], NULL);
  for (int r = 0; r < 3; r += 2) {
    assert_int_equal(w.a[r].st, HK_ERR_TIMEOUT);
    if (!strstr(w.a[r].err, "no progress from rank 1"))
      fail_msg("rank %d: %s", r, w.a[r].err);
  }
  for (int r = 0; r < 3; r++)
    free(w.a[r].send);
  close_world(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_matches_ring),
      cmocka_unit_test(test_other_collectives_match_ring),
      cmocka_unit_test(test_dead_member_named),
      cmocka_unit_test(test_stuck_member_times_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
