/*
 * sweep.c - the allreduce size sweep (see sweep.h).
 */
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "devbuf.h"
#include "stats.h"

/* What one size measured, max over ranks, medians over iterations. */
typedef struct result {
  size_t bytes, count;
  double time_s, raw_s, ctl_s;
  long long wrong;
  int iters;
} result;

/* Comma-joined names, e.g. "float,half", into buf. */
static void join_types(const hkb_opts *o, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int i = 0; i < o->ntypes; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "",
             hkb_type_name(o->types[i]));
}

static void join_ops(const hkb_opts *o, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int i = 0; i < o->nops; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "",
             hkb_op_name(o->ops[i]));
}

static void print_header(const hkb_opts *o, int nranks, int niters, int nwarm,
                         FILE *csv) {
  char types[128], ops[64];
  join_types(o, types, sizeof types);
  join_ops(o, ops, sizeof ops);
  printf("# peer=hk nranks=%d op=allreduce type=%s redop=%s inplace=1 "
         "api=public iters<=%d warmup<=%d budget=%zu device=%s\n",
         nranks, types, ops, niters, nwarm, o->budget_bytes,
         o->device ? "gpu" : "host");
  if (o->raw)
    printf("# raw(us): the ring collective alone, timed by the background "
           "thread; rawbusbw from it; ctl(us): from the last rank's submit "
           "to the last rank's start of the collective (one host's clock)\n");
  printf("#%11s %12s %8s %6s %12s", "size(B)", "count", "type", "redop",
         "time(us)");
  if (o->raw)
    printf(" %12s", "raw(us)");
  printf(" %12s %12s", "algbw(GB/s)", "busbw(GB/s)");
  if (o->raw)
    printf(" %12s", "rawbusbw");
  printf(" %8s %6s", "#wrong", "iters");
  if (o->raw)
    printf(" %12s", "ctl(us)");
  printf("\n");
  fflush(stdout);
  if (csv)
    fprintf(csv, "size_bytes,count,type,redop,time_us,algbw_gbs,busbw_gbs,"
                 "wrong,iters,nranks,raw_us,raw_busbw_gbs,ctl_us\n");
}

static void print_row(const hkb_opts *o, hk_dtype t, hk_op op, const result *r,
                      int nranks, FILE *csv) {
  double algbw = (double)r->bytes / r->time_s / 1e9;
  double busbw = algbw * 2.0 * (nranks - 1) / nranks;
  double rawbus =
      (double)r->bytes / r->raw_s / 1e9 * 2.0 * (nranks - 1) / nranks;
  printf(" %11zu %12zu %8s %6s %12.2f", r->bytes, r->count, hkb_type_name(t),
         hkb_op_name(op), r->time_s * 1e6);
  if (o->raw)
    printf(" %12.2f", r->raw_s * 1e6);
  printf(" %12.3f %12.3f", algbw, busbw);
  if (o->raw)
    printf(" %12.3f", rawbus);
  printf(" %8lld %6d", r->wrong, r->iters);
  if (o->raw)
    printf(" %12.2f", r->ctl_s * 1e6);
  printf("\n");
  fflush(stdout);
  if (csv)
    fprintf(csv, "%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%lld,%d,%d,%.3f,%.4f,%.3f\n",
            r->bytes, r->count, hkb_type_name(t), hkb_op_name(op),
            r->time_s * 1e6, algbw, busbw, r->wrong, r->iters, nranks,
            r->raw_s * 1e6, rawbus, r->ctl_s * 1e6);
}

/* Measures one size: warm-up, then iters timed iterations. t, raw, sub
 * and go hold at least iters entries. dbuf (--device gpu) or NULL. */
static void measure(void *buf, void *dbuf, size_t count, hk_dtype type,
                    const hkb_pattern *pat, hk_op op, int iters, int warm,
                    int check, double *t, double *raw, double *sub, double *go,
                    result *r) {
  const size_t bytes = count * hk_dtype_size(type);
  void *target = dbuf ? dbuf : buf;
  for (int it = -warm; it < iters; it++) {
    hkb_fill(pat, buf, count);
    if (dbuf) /* --device gpu: the input reaches the device untimed */
      hkb_dev_upload(dbuf, buf, bytes);
    hkb_ok(hk_barrier(), "hk_barrier");
    double t0 = hkb_now();
    hkb_ok(hk_allreduce("hkbench", target, target, count, type, op),
           "hk_allreduce");
    double dt = hkb_now() - t0;
    if (it >= 0) {
      t[it] = dt;
      raw[it] = hkb_ring_last("hkbench");
      sub[it] = t0;
      go[it] = hkb_ring_last_start();
    }
  }
  if (dbuf && check)
    hkb_dev_download(buf, dbuf, bytes);
  long long wrong = check ? (long long)hkb_check(pat, buf, count) : 0;
  hkb_max_over_ranks(t, iters, "time");
  hkb_max_over_ranks(raw, iters, "raw");
  /* the control path: from the moment every rank had submitted to the
   * moment every rank had started the collective */
  hkb_max_over_ranks(sub, iters, "submit");
  hkb_max_over_ranks(go, iters, "start");
  for (int i = 0; i < iters; i++)
    sub[i] = go[i] - sub[i];
  r->ctl_s = hkb_median(sub, iters);
  r->wrong = hkb_sum_over_ranks(wrong, "wrong");
  r->time_s = hkb_median(t, iters);
  r->raw_s = hkb_median(raw, iters);
  r->iters = iters;
}

void hkb_sweep(const hkb_opts *o) {
  const int rank = hk_rank(), nranks = hk_size();
  const int niters = o->iters > 0 ? o->iters : 50;
  const int nwarm = o->warmup >= 0 ? o->warmup : 5;
  size_t maxb = o->max_bytes;
  void *buf = hkb_buffer_alloc(maxb);
  void *dbuf = o->device ? hkb_dev_alloc(maxb) : NULL;
  double *t = malloc(sizeof(double) * (size_t)niters);
  double *raw = malloc(sizeof(double) * (size_t)niters);
  double *sub = malloc(sizeof(double) * (size_t)niters);
  double *go = malloc(sizeof(double) * (size_t)niters);
  FILE *csv = NULL;
  if (!buf || !t || !raw || !sub || !go) {
    fprintf(stderr, "hkbench: cannot allocate %zu bytes\n", maxb);
    exit(1);
  }
  if (rank == 0 && o->csv_path && !(csv = fopen(o->csv_path, "w"))) {
    perror(o->csv_path);
    exit(1);
  }
  if (rank == 0)
    print_header(o, nranks, niters, nwarm, csv);
  for (int ti = 0; ti < o->ntypes; ti++) {
    const hk_dtype type = o->types[ti];
    const size_t esize = hk_dtype_size(type);
    for (int oi = 0; oi < o->nops; oi++) {
      const hk_op op = o->ops[oi];
      hkb_pattern pat;
      hkb_pattern_init(&pat, type, op, rank, nranks);
      size_t size = o->min_bytes < esize ? esize : o->min_bytes;
      for (; size <= maxb; size *= (size_t)o->factor) {
        result r = {.count = size / esize};
        r.bytes = r.count * esize;
        int iters = niters;
        if ((size_t)iters * r.bytes > o->budget_bytes)
          iters = (int)(o->budget_bytes / r.bytes);
        if (iters < 5)
          iters = niters < 5 ? niters : 5;
        int warm = nwarm < iters / 5 + 1 ? nwarm : iters / 5 + 1;
        measure(buf, dbuf, r.count, type, &pat, op, iters, warm, o->check, t,
                raw, sub, go, &r);
        if (rank == 0)
          print_row(o, type, op, &r, nranks, csv);
        if (size > maxb / (size_t)o->factor)
          break; /* the next size would pass -e (or overflow) */
      }
    }
  }
  if (csv && fclose(csv) != 0) {
    perror(o->csv_path);
    exit(1);
  }
  free(raw);
  free(t);
  free(sub);
  free(go);
  hkb_buffer_free(buf, maxb);
  hkb_dev_free(dbuf);
}
