/*
 * w_netbed - the worker of test_netbed_multihost: hk across the "hosts"
 * of a netns test bed (tests/netbed), started by `hkrun -H`.
 *
 *   w_netbed check PER_HOST
 *     Checks local_rank/local_size/cross_rank/cross_size against a layout
 *     of PER_HOST consecutive ranks per host; allreduces float32, float64,
 *     int32 and int64 with sum and average at several sizes (some not
 *     divisible by 8, in place and not), then a fused batch of float32
 *     tensors submitted together, and checks every element against the
 *     serial computation (inputs are small integers, so every summation
 *     order gives the exact result); then gathers every rank's hash of all
 *     its results with hk_allgather and checks they are all equal. Prints
 *       "netbed ok: rank R of S local L/LS cross C/CS host H
 *        hierarchical X transport T tensors N elements E hash H"
 *     and exits 0; a wrong value prints "FAIL ..." and exits 1.
 *
 *   w_netbed loop MARK_AFTER COUNT ERRDIR [GATE_FIFO GATE_HOST]
 *     Allreduces COUNT float32 elements (sum) in a loop, checking each
 *     result. After MARK_AFTER successful steps it submits the next step
 *     (hk_allreduce_async) and only then prints
 *       "netbed mid-allreduce: rank R step K in flight"
 *     so a test that sees the line knows an allreduce is under way. With a
 *     gate, the ranks of host GATE_HOST (cross_rank) first print
 *       "netbed gate: rank R step K waits"
 *     and read one byte from GATE_FIFO before they submit that step: the
 *     other ranks' step is then in flight in negotiation, waiting for them.
 *     When a step fails it prints
 *       "netbed failed: rank R step K: STATUS: MESSAGE"
 *     on stderr and writes the same line, then "time T" (CLOCK_REALTIME,
 *     seconds) to ERRDIR/rank-R (a host cut off the network cannot send
 *     its output through mpirun), then exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wcommon.h"

/* ---- check ---- */

/* The input of rank r at element i of tensor `salt`: a small integer in
 * [-8, 8], so sums over up to 2^20 ranks are exact in every type. It
 * depends on i and salt only through key(i, salt), in [0, 17). */
static unsigned key(size_t i, unsigned salt) {
  return (unsigned)((i * 11u + salt * 5u) % 17u);
}

static int64_t val(int rank, size_t i, unsigned salt) {
  return (int64_t)(((unsigned)rank * 37u + key(i, salt)) % 17u) - 8;
}

/* FNV-1a over bytes, folded into *h. */
static void hash_bytes(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    *h ^= b[i];
    *h *= 0x100000001b3ull;
  }
}

static void store(void *buf, hk_dtype t, size_t i, int64_t v) {
  switch (t) {
  case HK_FLOAT32:
    ((float *)buf)[i] = (float)v;
    break;
  case HK_FLOAT64:
    ((double *)buf)[i] = (double)v;
    break;
  case HK_INT32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  default:
    ((int64_t *)buf)[i] = v;
    break;
  }
}

/* Does element i of buf equal the serial result of op over sum (of np
 * ranks)? The expected value is computed in the type itself, as hk_op
 * documents: the exact sum, then for an average one division by np
 * (floats) or C's truncating division (integers). */
static int matches(const void *buf, hk_dtype t, size_t i, int64_t sum, hk_op op,
                   int np, double *got, double *want) {
  switch (t) {
  case HK_FLOAT32: {
    float e = (float)sum;
    if (op == HK_AVERAGE)
      e = e / (float)np;
    *got = ((const float *)buf)[i];
    *want = e;
    return memcmp(&((const float *)buf)[i], &e, sizeof e) == 0;
  }
  case HK_FLOAT64: {
    double e = (double)sum;
    if (op == HK_AVERAGE)
      e = e / (double)np;
    *got = ((const double *)buf)[i];
    *want = e;
    return memcmp(&((const double *)buf)[i], &e, sizeof e) == 0;
  }
  case HK_INT32: {
    int32_t e = (int32_t)(op == HK_AVERAGE ? sum / np : sum);
    *got = ((const int32_t *)buf)[i];
    *want = e;
    return ((const int32_t *)buf)[i] == e;
  }
  default: {
    int64_t e = op == HK_AVERAGE ? sum / np : sum;
    *got = (double)((const int64_t *)buf)[i];
    *want = (double)e;
    return ((const int64_t *)buf)[i] == e;
  }
  }
}

typedef struct tensor {
  char name[64];
  hk_dtype t;
  hk_op op;
  size_t count;
  unsigned salt;
  void *send, *recv; /* send == recv: in place */
  hk_handle h;
} tensor;

static void tensor_make(tensor *x, const char *name, hk_dtype t, hk_op op,
                        size_t count, unsigned salt, int in_place, int rank) {
  snprintf(x->name, sizeof x->name, "%s", name);
  x->t = t;
  x->op = op;
  x->count = count;
  x->salt = salt;
  size_t bytes = (count + 1) * hk_dtype_size(t);
  x->send = malloc(bytes);
  x->recv = in_place ? x->send : malloc(bytes);
  HKT_CHECK(x->send && x->recv, "out of memory for %s", name);
  for (size_t i = 0; i < count; i++)
    store(x->send, t, i, val(rank, i, salt));
}

/* Checks every element of x against the serial computation; folds the
 * result bytes into *h; frees the buffers. */
static void tensor_check(tensor *x, int np, uint64_t *h) {
  int64_t sums[17] = {0}; /* the serial sum over ranks, by key */
  for (unsigned k = 0; k < 17; k++)
    for (int r = 0; r < np; r++)
      sums[k] += (int64_t)(((unsigned)r * 37u + k) % 17u) - 8;
  for (size_t i = 0; i < x->count; i++) {
    int64_t sum = sums[key(i, x->salt)];
    double got, want;
    HKT_CHECK(matches(x->recv, x->t, i, sum, x->op, np, &got, &want),
              "%s (%s %s, %zu elements): element %zu = %.17g, serial %.17g",
              x->name, hk_dtype_name(x->t), hk_op_name(x->op), x->count, i, got,
              want);
  }
  hash_bytes(h, x->recv, x->count * hk_dtype_size(x->t));
  if (x->recv != x->send)
    free(x->recv);
  free(x->send);
}

static int mode_check(int per_host) {
  HKT_OK(hk_init());
  int rank = hk_rank(), np = hk_size();
  HKT_CHECK(per_host >= 1 && np % per_host == 0,
            "%d ranks do not fill hosts of %d", np, per_host);
  HKT_CHECK(hk_local_rank() == rank % per_host && hk_local_size() == per_host &&
                hk_cross_rank() == rank / per_host &&
                hk_cross_size() == np / per_host,
            "rank %d: local %d/%d cross %d/%d, expected local %d/%d cross "
            "%d/%d",
            rank, hk_local_rank(), hk_local_size(), hk_cross_rank(),
            hk_cross_size(), rank % per_host, per_host, rank / per_host,
            np / per_host);

  static const hk_dtype types[] = {HK_FLOAT32, HK_FLOAT64, HK_INT32, HK_INT64};
  static const hk_op ops[] = {HK_SUM, HK_AVERAGE};
  /* 1 element, fewer than ranks, odd, a multiple of 8, and sizes over the
   * ring's 1 MiB chunk that no power of two divides (the largest for
   * float32 only, to keep the run short) */
  static const size_t sizes[] = {1, 7, 8, 1001, 65536, 262147, 1048583};
  enum { NT = 4, NO = 2, NS = 7, NF = 24 };
  uint64_t h = 0xcbf29ce484222325ull;
  size_t elements = 0;
  int tensors = 0;
  unsigned salt = 0;
  for (int ti = 0; ti < NT; ti++)
    for (int oi = 0; oi < NO; oi++) {
      /* one size after another: each runs alone */
      for (int si = 0; si < NS; si++) {
        if (si == NS - 1 && types[ti] != HK_FLOAT32)
          continue;
        tensor x;
        char name[64];
        snprintf(name, sizeof name, "%s.%s.%zu", hk_dtype_name(types[ti]),
                 hk_op_name(ops[oi]), sizes[si]);
        tensor_make(&x, name, types[ti], ops[oi], sizes[si], ++salt, si % 2,
                    rank);
        HKT_OK(hk_allreduce(x.name, x.send, x.recv, x.count, x.t, x.op));
        tensor_check(&x, np, &h);
        elements += sizes[si];
        tensors++;
      }
    }
  /* a batch submitted together, last layer first, as a backward pass does:
   * fused into one buffer per cycle */
  tensor f[NF];
  for (int k = NF - 1; k >= 0; k--) {
    char name[64];
    snprintf(name, sizeof name, "fused.%d", k);
    size_t count = (size_t)k * 4099 + 3;
    tensor_make(&f[k], name, HK_FLOAT32, k % 3 ? HK_SUM : HK_AVERAGE, count,
                ++salt, k % 2, rank);
    HKT_OK(hk_allreduce_async(f[k].name, f[k].send, f[k].recv, count,
                              HK_FLOAT32, f[k].op, &f[k].h));
  }
  for (int k = NF - 1; k >= 0; k--) {
    HKT_OK(hk_wait(f[k].h));
    elements += f[k].count;
    tensors++;
  }
  for (int k = 0; k < NF; k++)
    tensor_check(&f[k], np, &h);

  /* every rank's results hash the same */
  int64_t mine = (int64_t)h;
  void *all = NULL;
  size_t *rows = calloc((size_t)np, sizeof *rows);
  HKT_OK(hk_allgather("hashes", &mine, 1, 1, HK_INT64, &all, rows));
  for (int r = 0; r < np; r++) {
    HKT_CHECK(rows[r] == 1, "allgather: %zu hashes from rank %d", rows[r], r);
    HKT_CHECK(((int64_t *)all)[r] == mine,
              "rank %d's results hash %016llx, rank %d's %016llx", r,
              (unsigned long long)((int64_t *)all)[r], rank,
              (unsigned long long)mine);
  }
  free(all);
  free(rows);

  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const char *hier = getenv("HK_HIERARCHICAL_ALLREDUCE");
  const char *tr = getenv("HK_CROSS_TRANSPORT");
  printf("netbed ok: rank %d of %d local %d/%d cross %d/%d host %s "
         "hierarchical %s transport %s tensors %d elements %zu hash %016llx\n",
         rank, np, hk_local_rank(), hk_local_size(), hk_cross_rank(),
         hk_cross_size(), host, hier ? hier : "unset", tr ? tr : "unset",
         tensors, elements, (unsigned long long)h);
  fflush(stdout);
  HKT_OK(hk_shutdown());
  return 0;
}

/* ---- loop ---- */

static int fail_step(int rank, long step, hk_status st, const char *errdir) {
  char line[1024];
  snprintf(line, sizeof line, "netbed failed: rank %d step %ld: %s: %s\n", rank,
           step, hk_strerror(st), hk_last_error());
  fputs(line, stderr);
  fflush(stderr);
  char path[512];
  snprintf(path, sizeof path, "%s/rank-%d", errdir, rank);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%stime %.3f\n", line,
            (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
    fclose(f);
  } else {
    fprintf(stderr, "rank %d: cannot write %s: %s\n", rank, path,
            strerror(errno));
  }
  hk_shutdown();
  return 1;
}

/* Blocks until one byte can be read from the FIFO at path. */
static void pass_gate(int rank, long step, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  HKT_CHECK(fd >= 0, "cannot open %s: %s", path, strerror(errno));
  printf("netbed gate: rank %d step %ld waits\n", rank, step);
  fflush(stdout);
  char c;
  ssize_t n;
  do
    n = read(fd, &c, 1);
  while (n < 0 && errno == EINTR);
  HKT_CHECK(n == 1, "%s: no byte to pass the gate", path);
  close(fd);
}

static int mode_loop(long mark_after, size_t count, const char *errdir,
                     const char *gate, int gate_host) {
  HKT_OK(hk_init());
  int rank = hk_rank(), np = hk_size();
  float *g = malloc(count * sizeof *g);
  HKT_CHECK(g, "out of memory");
  float want[5] = {0}; /* the sum over ranks of element i depends on i % 5 */
  for (int k = 0; k < 5; k++)
    for (int r = 0; r < np; r++)
      want[k] += (float)((r + k) % 4);
  for (long step = 1;; step++) {
    for (size_t i = 0; i < count; i++)
      g[i] = (float)((rank + (int)(i % 5)) % 4);
    if (gate && step == mark_after + 1 && hk_cross_rank() == gate_host)
      pass_gate(rank, step, gate);
    hk_handle h;
    hk_status st =
        hk_allreduce_async("grad", g, g, count, HK_FLOAT32, HK_SUM, &h);
    if (st != HK_OK)
      return fail_step(rank, step, st, errdir);
    if (step == mark_after + 1) {
      printf("netbed mid-allreduce: rank %d step %ld in flight\n", rank, step);
      fflush(stdout);
    }
    st = hk_wait(h);
    if (st != HK_OK)
      return fail_step(rank, step, st, errdir);
    for (size_t i = 0; i < count; i++)
      HKT_CHECK(g[i] == want[i % 5], "step %ld element %zu = %g, want %g", step,
                i, (double)g[i], (double)want[i % 5]);
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && !strcmp(argv[1], "check"))
    return mode_check(atoi(argv[2]));
  if ((argc == 5 || argc == 7) && !strcmp(argv[1], "loop"))
    return mode_loop(atol(argv[2]), (size_t)atol(argv[3]), argv[4],
                     argc == 7 ? argv[5] : NULL,
                     argc == 7 ? atoi(argv[6]) : -1);
  fprintf(
      stderr,
      "usage: w_netbed check PER_HOST\n"
      "       w_netbed loop MARK_AFTER COUNT ERRDIR [GATE_FIFO GATE_HOST]\n");
  return 2;
}
