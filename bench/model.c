/*
 * model.c - replaying a model's gradient set (see model.h).
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "devbuf.h"
#include "stats.h"

/* Tensor slices start on 64-byte boundaries (a cache line; what
 * framework allocators guarantee at least). */
#define ALIGN 64

typedef struct replay {
  const hk_gradset *m;
  double compute_s; /* --compute-ms / 1000: the synthetic backward pass */
  hk_dtype dtype;
  hk_op op;
  size_t esize;
  unsigned char *tensors; /* one mapping; tensor i at off[i] */
  size_t *off, tensors_bytes;
  unsigned char *fused; /* total elements */
  size_t fused_bytes;
  hk_handle *h;
  hkb_pattern pat;
  unsigned char *dtensors, *dfused; /* --device gpu: device copies */
} replay;

/* What a step's negotiation did on this rank (worker/internal.h). */
typedef struct step_counts {
  double rounds, batches; /* rounds with work; collectives run */
} step_counts;

/* One backward pass's worth of allreduces; returns its time (s) and adds
 * the ring seconds spent to *ring; *sc gets its rounds and batches. */
static double step(replay *r, double *ring, step_counts *sc) {
  const hk_gradset *m = r->m;
  for (size_t i = 0; i < m->ntensors; i++)
    hkb_fill(&r->pat, r->tensors + r->off[i], m->tensors[i].count);
  unsigned char *base = r->tensors;
  if (r->dtensors) { /* the inputs reach the device untimed */
    hkb_dev_upload(r->dtensors, r->tensors, r->tensors_bytes);
    base = r->dtensors;
  }
  hkb_ok(hk_barrier(), "hk_barrier");
  double busy0 = hkb_ring_busy();
  hk_negotiation_counts c0 = hkb_counts();
  double t0 = hkb_now();
  size_t covered = 0;
  for (size_t k = m->ntensors; k-- > 0;) {
    void *p = base + r->off[k];
    /* the synthetic backward pass: tensor k's gradient is ready when the
     * pass has covered its parameters (hkplan's default spread) */
    covered += m->tensors[k].count;
    if (r->compute_s > 0)
      hkb_sleep_until(t0 + r->compute_s * (double)covered / (double)m->total);
    hk_status st =
        hk_allreduce_async(m->tensors[k].name, p, p, m->tensors[k].count,
                           r->dtype, r->op, &r->h[k]);
    if (st != HK_OK)
      hkb_die(st, m->tensors[k].name);
  }
  for (size_t k = m->ntensors; k-- > 0;) {
    hk_status st = hk_wait(r->h[k]);
    if (st != HK_OK)
      hkb_die(st, m->tensors[k].name);
  }
  double dt = hkb_now() - t0;
  *ring = hkb_ring_busy() - busy0;
  hk_negotiation_counts c1 = hkb_counts();
  uint64_t fused_t = c1.fused_tensors - c0.fused_tensors;
  sc->rounds = (double)(c1.rounds - c0.rounds);
  sc->batches =
      (double)(c1.fused_batches - c0.fused_batches + m->ntensors - fused_t);
  return dt;
}

/* One allreduce of the whole gradient set as a single buffer. */
static double fused(replay *r, double *ring) {
  hkb_fill(&r->pat, r->fused, r->m->total);
  unsigned char *buf = r->fused;
  if (r->dfused) {
    hkb_dev_upload(r->dfused, r->fused, r->fused_bytes);
    buf = r->dfused;
  }
  hkb_ok(hk_barrier(), "hk_barrier");
  double t0 = hkb_now();
  hkb_ok(hk_allreduce("hkbench.fused", buf, buf, r->m->total, r->dtype, r->op),
         "hk_allreduce(fused)");
  double dt = hkb_now() - t0;
  *ring = hkb_ring_last("hkbench.fused");
  return dt;
}

static long long check_all(const replay *r, int check) {
  if (!check)
    return 0;
  long long wrong = 0;
  for (size_t i = 0; i < r->m->ntensors; i++)
    wrong += (long long)hkb_check(&r->pat, r->tensors + r->off[i],
                                  r->m->tensors[i].count);
  return wrong;
}

/* Median, min and max (ms) of v[0..n) after the max over ranks. */
typedef struct summary {
  double med, min, max;
} summary;

static summary summarize(double *v, int n, const char *what) {
  hkb_max_over_ranks(v, n, what);
  summary s = {0, hkb_min(v, n) * 1e3, hkb_max(v, n) * 1e3};
  s.med = hkb_median(v, n) * 1e3;
  return s;
}

static void setup(replay *r, const hkb_opts *o, const hk_gradset *m) {
  memset(r, 0, sizeof *r);
  r->m = m;
  r->compute_s = o->compute_ms / 1000.0;
  r->dtype = o->types[0]; /* options.c: one of each with --model */
  r->op = o->ops[0];
  r->esize = hk_dtype_size(r->dtype);
  r->off = malloc(m->ntensors * sizeof *r->off);
  r->h = malloc(m->ntensors * sizeof *r->h);
  if (!r->off || !r->h) {
    fprintf(stderr, "hkbench: out of memory\n");
    exit(1);
  }
  size_t at = 0;
  for (size_t i = 0; i < m->ntensors; i++) {
    r->off[i] = at;
    at += (m->tensors[i].count * r->esize + ALIGN - 1) / ALIGN * ALIGN;
  }
  r->tensors_bytes = at;
  r->fused_bytes = m->total * r->esize;
  r->tensors = hkb_buffer_alloc(r->tensors_bytes);
  r->fused = hkb_buffer_alloc(r->fused_bytes);
  if (!r->tensors || !r->fused) {
    fprintf(stderr, "hkbench: cannot map %zu + %zu bytes for %s\n",
            r->tensors_bytes, r->fused_bytes, m->label);
    exit(1);
  }
  hkb_pattern_init(&r->pat, r->dtype, r->op, hk_rank(), hk_size());
  if (o->device) {
    r->dtensors = hkb_dev_alloc(r->tensors_bytes);
    r->dfused = hkb_dev_alloc(r->fused_bytes);
  }
}

void hkb_model_run(const hkb_opts *o, const hk_gradset *m) {
  const int steps = o->iters > 0 ? o->iters : 10;
  const int warm = o->warmup >= 0 ? o->warmup : 2;
  replay r;
  setup(&r, o, m);
  double *ts = malloc(6 * sizeof(double) * (size_t)steps);
  if (!ts) {
    fprintf(stderr, "hkbench: out of memory\n");
    exit(1);
  }
  double *ring = ts + steps, *tf = ts + 2 * steps, *ringf = ts + 3 * steps;
  double *rounds = ts + 4 * steps, *batches = ts + 5 * steps;
  for (int s = -warm; s < steps; s++) {
    double step_ring, fused_ring = 0;
    step_counts sc;
    double step_s = step(&r, &step_ring, &sc);
    double fused_s = o->steps_only ? 0 : fused(&r, &fused_ring);
    if (s >= 0) {
      ts[s] = step_s;
      ring[s] = step_ring;
      tf[s] = fused_s;
      ringf[s] = fused_ring;
      rounds[s] = sc.rounds;
      batches[s] = sc.batches;
    }
  }
  if (r.dtensors && o->check) { /* the last step's results, to the host */
    hkb_dev_download(r.tensors, r.dtensors, r.tensors_bytes);
    hkb_dev_download(r.fused, r.dfused, r.fused_bytes);
  }
  /* every rank runs the same rounds and batches: rank 0's are the job's */
  double med_rounds = hkb_median(rounds, steps),
         med_batches = hkb_median(batches, steps);
  long long wrong = hkb_sum_over_ranks(check_all(&r, o->check), "wrong");
  long long wrongf =
      hkb_sum_over_ranks(o->check && !o->steps_only
                             ? (long long)hkb_check(&r.pat, r.fused, m->total)
                             : 0,
                         "wrong.fused");
  summary st = summarize(ts, steps, "step"),
          sr = summarize(ring, steps, "ring");
  summary ft = {0, 0, 0}, fr = {0, 0, 0};
  if (!o->steps_only) {
    ft = summarize(tf, steps, "fused");
    fr = summarize(ringf, steps, "ring.fused");
  }
  if (hk_rank() == 0) {
    printf("# model=%s file=%s nranks=%d type=%s redop=%s steps=%d "
           "warmup=%d device=%s\n",
           m->label, m->path, hk_size(), hkb_type_name(r.dtype),
           hkb_op_name(r.op), steps, warm, o->device ? "gpu" : "host");
    if (o->steps_only)
      printf("# step: %zu hk_allreduce_async in reverse file order, then "
             "hk_wait each (--steps-only: nothing else)\n",
             m->ntensors);
    else
      printf("# step: %zu hk_allreduce_async in reverse file order, then "
             "hk_wait each; fused: one hk_allreduce of %zu elements\n",
             m->ntensors, m->total);
    printf("#%9s %12s %12s %12s %12s %8s\n", "what", "median(ms)", "min(ms)",
           "max(ms)", "ring(ms)", "#wrong");
    printf(" %9s %12.2f %12.2f %12.2f %12.2f %8lld\n", "step", st.med, st.min,
           st.max, sr.med, wrong);
    if (!o->steps_only)
      printf(" %9s %12.2f %12.2f %12.2f %12.2f %8lld\n", "fused", ft.med,
             ft.min, ft.max, fr.med, wrongf);
    printf("# per step (median): %.0f negotiation rounds, %.0f collectives "
           "(fused batches and lone tensors)\n",
           med_rounds, med_batches);
    if (o->steps_only)
      printf("%s: %zu tensors, %zu params, %zu bytes, step %.1f ms, no "
             "fused buffer (--steps-only)\n",
             m->label, m->ntensors, m->total, r.fused_bytes, st.med);
    else
      printf("%s: %zu tensors, %zu params, %zu bytes, step %.1f ms, one "
             "fused buffer %.1f ms, ratio %.2f\n",
             m->label, m->ntensors, m->total, r.fused_bytes, st.med, ft.med,
             st.med / ft.med);
    fflush(stdout);
  }
  free(ts);
  free(r.off);
  free(r.h);
  hkb_buffer_free(r.tensors, r.tensors_bytes);
  hkb_buffer_free(r.fused, r.fused_bytes);
  hkb_dev_free(r.dtensors);
  hkb_dev_free(r.dfused);
}
