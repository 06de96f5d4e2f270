/*
 * ring.c - the ring collectives (see ring.h). Every ring collective is a
 * schedule of steps run by one pipelined engine, run_steps(): at each
 * step a rank sends a region to its right neighbour and receives a region
 * from its left one, either reducing it into a destination (reduce-scatter
 * steps) or landing it there (allgather steps).
 */
#include "collectives/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "device/host/reduce.h"

/* One step of a schedule. The engine requires that step k sends exactly
 * the region step k-1 received (true of every ring algorithm here), so a
 * byte may be forwarded as soon as it has arrived and been reduced. */
typedef struct hk_ring_step {
  const uint8_t *send;
  uint8_t *recv;
  const uint8_t *mine; /* reduce steps: recv = mine op incoming; else NULL */
  size_t send_len;     /* bytes sent (= recv_len of the step before) */
  size_t recv_len;     /* bytes received */
  int finish;          /* apply the finish to what this step reduces */
} hk_ring_step;

hk_status hk_ring_init(hk_ring *ring, int rank, int size, hk_link *left,
                       hk_link *right, const hk_io *io, size_t chunk_bytes,
                       const int *order) {
  memset(ring, 0, sizeof *ring);
  ring->ops = &hk_ring_link_ops;
  ring->size = size;
  ring->left = left;
  ring->right = right;
  ring->io = *io;
  ring->order = malloc((size_t)size * sizeof(int));
  ring->pos_of = malloc((size_t)size * sizeof(int));
  if (!ring->order || !ring->pos_of) {
    hk_ring_destroy(ring);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the ring order");
  }
  for (int p = 0; p < size; p++)
    ring->order[p] = order ? order[p] : p;
  for (int p = 0; p < size; p++)
    ring->pos_of[ring->order[p]] = p;
  ring->rank = ring->pos_of[rank];
  snprintf(ring->left_name, sizeof ring->left_name, "rank %d",
           ring->order[(ring->rank + size - 1) % size]);
  snprintf(ring->right_name, sizeof ring->right_name, "rank %d",
           ring->order[(ring->rank + 1) % size]);
  ring->stage_bytes = chunk_bytes;
  ring->steps = calloc(2 * (size_t)size, sizeof *ring->steps);
  ring->segs = calloc((size_t)size + 1, sizeof *ring->segs);
  if (size > 1)
    ring->stage = malloc(chunk_bytes);
  if (!ring->steps || !ring->segs || (size > 1 && !ring->stage)) {
    hk_ring_destroy(ring);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the ring's buffers");
  }
  if (ring->stage)
    memset(ring->stage, 0, chunk_bytes); /* fault it in now, not per call */
  return HK_OK;
}

void hk_ring_destroy(hk_ring *ring) {
  free(ring->order);
  free(ring->pos_of);
  ring->order = ring->pos_of = NULL;
  free(ring->stage);
  free(ring->scratch);
  free(ring->steps);
  free(ring->segs);
  ring->stage = ring->scratch = NULL;
  ring->steps = NULL;
  ring->segs = NULL;
}

void hk_ring_default_segments(size_t count, int n, size_t *seg) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  for (int j = 0; j <= n; j++)
    seg[j] = (size_t)j * base + ((size_t)j < rem ? (size_t)j : rem);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

void hk_ring_finish_apply(void *p, size_t ne, hk_dtype dtype, hk_op op,
                          const hk_ring_finish *fin, int size) {
  int divisor = fin && fin->divisor > 0 ? fin->divisor : size;
  if (op == HK_AVERAGE)
    hk_reduce_finish_average_pre(p, ne, dtype, divisor,
                                 fin && fin->pre > 1.0 ? fin->pre : 1.0);
  if (fin && fin->postscale != 1.0)
    hk_scale_copy(p, p, ne, dtype, fin->postscale);
}

/* The pipelined engine: runs nsteps steps of the schedule. */
static hk_status run_steps(hk_ring *ring, const hk_ring_step *steps, int nsteps,
                           hk_dtype dtype, hk_op op, const hk_ring_finish *fin,
                           const char *what) {
  const size_t esz = hk_dtype_size(dtype);
  const size_t cap = ring->stage_bytes - ring->stage_bytes % esz;
  int ks = 0, kr = 0; /* current send / receive step */
  size_t soff = 0;    /* bytes of step ks sent */
  size_t roff = 0;    /* bytes of step kr received */
  size_t rdone = 0;   /* bytes of step kr reduced or landed (<= roff) */
  size_t fill = 0;    /* bytes waiting in the stage (reduce steps) */
  hk_status st;
  while (ks < nsteps || kr < nsteps) {
    int progress = 0;
    /* ---- send side: step ks may send what step ks-1 has finished ---- */
    size_t savail = 0;
    if (ks < nsteps) {
      const hk_ring_step *s = &steps[ks];
      if (ks == 0 || kr > ks - 1)
        savail = s->send_len;
      else if (kr == ks - 1)
        savail = rdone;
      if (soff < savail) {
        size_t want = savail - soff, done;
        if (want > ring->stage_bytes)
          want = ring->stage_bytes;
        st = hk_link_send_some(ring->right, s->send + soff, want, &done);
        if (st != HK_OK)
          return st;
        soff += done;
        progress |= done > 0;
      }
      if (soff == s->send_len) {
        ks++;
        soff = 0;
        progress = 1;
        continue; /* the next step may be sendable at once */
      }
    }
    /* ---- receive side ---- */
    if (kr < nsteps) {
      const hk_ring_step *s = &steps[kr];
      size_t done = 0;
      if (roff < s->recv_len && s->mine) {
        size_t want = s->recv_len - roff;
        if (want > cap - fill)
          want = cap - fill;
        st = hk_link_recv_some(ring->left, ring->stage + fill, want, &done);
        if (st != HK_OK)
          return st;
        roff += done;
        fill += done;
        size_t whole = fill - fill % esz;
        if (whole) {
          size_t ne = whole / esz;
          hk_reduce(s->recv + rdone, s->mine + rdone, ring->stage, ne, dtype,
                    op);
          if (s->finish)
            hk_ring_finish_apply(s->recv + rdone, ne, dtype, op, fin,
                                 ring->size);
          rdone += whole;
          fill -= whole;
          if (fill)
            memmove(ring->stage, ring->stage + whole, fill);
        }
      } else if (roff < s->recv_len) {
        st = hk_link_recv_some(ring->left, s->recv + roff, s->recv_len - roff,
                               &done);
        if (st != HK_OK)
          return st;
        roff += done;
        rdone = roff;
      }
      progress |= done > 0;
      if (rdone == s->recv_len) {
        kr++;
        roff = rdone = 0;
        progress = 1;
      }
    }
    if (!progress) {
      int want_send = ks < nsteps && soff < savail;
      st = hk_link_wait(ring->right, want_send, ring->left, kr < nsteps,
                        &ring->io, what);
      if (st != HK_OK)
        return st;
    }
  }
  return hk_link_drain(ring->right, &ring->io, what);
}

static hk_status link_allreduce_part(hk_ring *ring, const void *sendbuf,
                                     void *recvbuf, const size_t *seg,
                                     hk_dtype dtype, hk_op op,
                                     const hk_ring_finish *fin,
                                     hk_ring_part part) {
  const int n = ring->size, r = ring->rank;
  const size_t esz = hk_dtype_size(dtype), count = seg[n];
  const uint8_t *src = sendbuf;
  uint8_t *dst = recvbuf;
  if (n == 1 || count == 0) {
    if ((part & HK_RING_REDUCE_SCATTER) && count && src != dst)
      memcpy(dst, src, count * esz);
    if (part == HK_RING_BOTH && count)
      hk_ring_finish_apply(dst, count, dtype, op, fin, n);
    return HK_OK;
  }
  hk_ring_step *s = ring->steps;
  int first = part & HK_RING_REDUCE_SCATTER ? 0 : n - 1;
  int last = part & HK_RING_ALLGATHER ? 2 * (n - 1) : n - 1;
#define SEG_AT(base, j) ((base) + seg[(j)] * esz)
#define SEG_LEN(j) ((seg[(j) + 1] - seg[(j)]) * esz)
  for (int k = 0; k < n - 1; k++) { /* reduce-scatter */
    int js = mod(r - k, n), jr = mod(r - k - 1, n);
    s[k] = (hk_ring_step){k == 0 ? SEG_AT(src, js) : SEG_AT(dst, js),
                          SEG_AT(dst, jr),
                          SEG_AT(src, jr),
                          SEG_LEN(js),
                          SEG_LEN(jr),
                          k == n - 2 && part == HK_RING_BOTH};
  }
  for (int k = 0; k < n - 1; k++) { /* allgather */
    int jr = mod(r - k, n), js = mod(r + 1 - k, n);
    s[n - 1 + k] = (hk_ring_step){SEG_AT(dst, js), SEG_AT(dst, jr), NULL,
                                  SEG_LEN(js),     SEG_LEN(jr),     0};
  }
  return run_steps(ring, s + first, last - first, dtype, op, fin,
                   part == HK_RING_ALLGATHER ? "in ring allgather"
                                             : "in ring allreduce");
}

hk_status hk_ring_allreduce_segmented(hk_ring *ring, const void *sendbuf,
                                      void *recvbuf, const size_t *seg,
                                      hk_dtype dtype, hk_op op,
                                      const hk_ring_finish *fin) {
  return hk_ring_allreduce_part(ring, sendbuf, recvbuf, seg, dtype, op, fin,
                                HK_RING_BOTH);
}

hk_status hk_ring_allreduce(hk_ring *ring, const void *sendbuf, void *recvbuf,
                            size_t count, hk_dtype dtype, hk_op op,
                            const hk_ring_finish *fin) {
  hk_ring_default_segments(count, ring->size, ring->segs);
  return hk_ring_allreduce_segmented(ring, sendbuf, recvbuf, ring->segs, dtype,
                                     op, fin);
}

static hk_status link_reducescatter(hk_ring *ring, const void *sendbuf,
                                    void *recvbuf, const size_t *seg,
                                    hk_dtype dtype, hk_op op,
                                    const hk_ring_finish *fin) {
  const int n = ring->size, r = ring->rank;
  const size_t esz = hk_dtype_size(dtype), count = seg[n];
  const uint8_t *src = sendbuf;
  uint8_t *out = recvbuf;
  if (n == 1) {
    if (count) {
      memcpy(out, src, count * esz);
      hk_ring_finish_apply(out, count, dtype, op, fin, 1);
    }
    return HK_OK;
  }
  /* Column chunks of at most `per` elements of every block: each chunk
   * is a reduce-scatter of its own through a work buffer of n x per
   * elements (not the whole input), every element in the same order. */
  size_t longest = 0;
  for (int j = 0; j < n; j++)
    if (seg[j + 1] - seg[j] > longest)
      longest = seg[j + 1] - seg[j];
  size_t per = ring->stage_bytes / esz ? ring->stage_bytes / esz : 1;
  if (per > longest)
    per = longest ? longest : 1;
  const size_t work = (size_t)n * per * esz;
  if (ring->scratch_bytes < work) {
    uint8_t *p = realloc(ring->scratch, work);
    if (!p)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a %zu-byte work buffer",
                     work);
    ring->scratch = p;
    ring->scratch_bytes = work;
  }
  uint8_t *w = ring->scratch;
  hk_ring_step *s = ring->steps;
  const int *ord = ring->order; /* blocks belong to ranks, not positions */
  hk_status st = HK_OK;
  for (size_t c = 0; c * per < longest && st == HK_OK; c++) {
#define PIECE_AT(base, j) ((base) + (seg[(j)] + c * per) * esz)
#define PIECE_LEN(j)                                                           \
  (seg[(j)] + c * per >= seg[(j) + 1]                                          \
       ? 0                                                                     \
       : (seg[(j) + 1] - seg[(j)] - c * per < per                              \
              ? seg[(j) + 1] - seg[(j)] - c * per                              \
              : per) *                                                         \
             esz)
#define WORK_AT(j) (w + (size_t)(j)*per * esz)
    for (int k = 0; k < n - 1; k++) {
      int js = ord[mod(r - k - 1, n)], jr = ord[mod(r - k - 2, n)];
      int last = k == n - 2; /* jr is this rank's block: the output */
      s[k] = (hk_ring_step){k == 0 ? PIECE_AT(src, js) : WORK_AT(js),
                            last ? out + c * per * esz : WORK_AT(jr),
                            PIECE_AT(src, jr),
                            PIECE_LEN(js),
                            PIECE_LEN(jr),
                            last};
    }
#undef PIECE_AT
#undef PIECE_LEN
#undef WORK_AT
    st = run_steps(ring, s, n - 1, dtype, op, fin, "in ring reducescatter");
  }
  return st;
}

static hk_status link_allgatherv(hk_ring *ring, const void *sendbuf,
                                 void *recvbuf, const size_t *seg,
                                 hk_dtype dtype) {
  const int n = ring->size, r = ring->rank, me = ring->order[r];
  const size_t esz = hk_dtype_size(dtype);
  uint8_t *dst = recvbuf;
  if (seg[me + 1] > seg[me] && SEG_AT(dst, me) != (const uint8_t *)sendbuf)
    memcpy(SEG_AT(dst, me), sendbuf, SEG_LEN(me));
  if (n == 1)
    return HK_OK;
  hk_ring_step *s = ring->steps;
  const int *ord = ring->order; /* blocks belong to ranks, not positions */
  for (int k = 0; k < n - 1; k++) {
    int js = ord[mod(r - k, n)], jr = ord[mod(r - k - 1, n)];
    s[k] = (hk_ring_step){SEG_AT(dst, js), SEG_AT(dst, jr), NULL,
                          SEG_LEN(js),     SEG_LEN(jr),     0};
  }
  return run_steps(ring, s, n - 1, dtype, HK_SUM, NULL, "in ring allgather");
#undef SEG_AT
#undef SEG_LEN
}

static hk_status link_broadcast(hk_ring *ring, void *buf, size_t count,
                                hk_dtype dtype, int root) {
  const int n = ring->size;
  const size_t len = count * hk_dtype_size(dtype);
  if (n == 1 || len == 0)
    return HK_OK;
  /* distance from the root along the ring */
  const int pos = mod(ring->rank - ring->pos_of[root], n);
  const int sends = pos<n - 1, recvs = pos> 0;
  uint8_t *p = buf;
  size_t sent = sends ? 0 : len, got = recvs ? 0 : len;
  while (sent < len || got < len) {
    int progress = 0;
    hk_status st;
    size_t done;
    if (got < len) {
      st = hk_link_recv_some(ring->left, p + got, len - got, &done);
      if (st != HK_OK)
        return st;
      got += done;
      progress |= done > 0;
    }
    if (sent < got) {
      size_t want = got - sent;
      if (want > ring->stage_bytes)
        want = ring->stage_bytes;
      st = hk_link_send_some(ring->right, p + sent, want, &done);
      if (st != HK_OK)
        return st;
      sent += done;
      progress |= done > 0;
    }
    if (!progress) {
      st = hk_link_wait(ring->right, sent < got, ring->left, got < len,
                        &ring->io, "in ring broadcast");
      if (st != HK_OK)
        return st;
    }
  }
  return hk_link_drain(ring->right, &ring->io, "in ring broadcast");
}

hk_status hk_ring_allgather_records(hk_ring *ring, const void *mine,
                                    size_t bytes, void *all) {
  const int n = ring->size;
  size_t *seg = malloc(((size_t)n + 1) * sizeof *seg);
  if (!seg)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %d record offsets", n + 1);
  for (int r = 0; r <= n; r++) /* blocks are ranks, not ring positions */
    seg[r] = (size_t)r * bytes;
  hk_status st = hk_ring_allgatherv(ring, mine, all, seg, HK_UINT8);
  free(seg);
  return st;
}

const hk_ring_ops hk_ring_link_ops = {"links", link_allreduce_part,
                                      link_reducescatter, link_allgatherv,
                                      link_broadcast};

hk_status hk_ring_allreduce_part(hk_ring *ring, const void *sendbuf,
                                 void *recvbuf, const size_t *seg,
                                 hk_dtype dtype, hk_op op,
                                 const hk_ring_finish *fin, hk_ring_part part) {
  return ring->ops->allreduce_part(ring, sendbuf, recvbuf, seg, dtype, op, fin,
                                   part);
}

hk_status hk_ring_reducescatter(hk_ring *ring, const void *sendbuf,
                                void *recvbuf, const size_t *seg,
                                hk_dtype dtype, hk_op op,
                                const hk_ring_finish *fin) {
  return ring->ops->reducescatter(ring, sendbuf, recvbuf, seg, dtype, op, fin);
}

hk_status hk_ring_allgatherv(hk_ring *ring, const void *sendbuf, void *recvbuf,
                             const size_t *seg, hk_dtype dtype) {
  return ring->ops->allgatherv(ring, sendbuf, recvbuf, seg, dtype);
}

hk_status hk_ring_broadcast(hk_ring *ring, void *buf, size_t count,
                            hk_dtype dtype, int root) {
  return ring->ops->broadcast(ring, buf, count, dtype, root);
}
