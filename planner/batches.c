/*
 * batches.c - the simulator's fusion against a recorded run's
 * (batches.h).
 */
#include "planner/batches.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/strmap.h"

/* One allreduce the run recorded. */
typedef struct occ {
  uint32_t sub;       /* submission index (reverse file order) */
  double resp, ready; /* NEGOTIATE end, WAIT_FOR_DATA end (ns) */
  long index;         /* its place among the round's responses (-1:
                         not recorded: by ready, then submission) */
  double ts, dur;     /* its batch's ALLREDUCE span */
  uint32_t file_at;   /* position in the file, for the recorded order */
} occ;

static int by_ready(const void *a, const void *b) {
  const occ *x = a, *y = b;
  if (x->index >= 0 && y->index >= 0 && x->index != y->index)
    return x->index < y->index ? -1 : 1;
  if (x->ready != y->ready)
    return x->ready < y->ready ? -1 : 1;
  return (x->sub > y->sub) - (x->sub < y->sub);
}

/* Prints names of t[k] for k in idx[0..n) as "[a b c]". */
static void names(FILE *out, const hk_gradset *m, const occ *o,
                  const uint32_t *idx, uint32_t n) {
  fputc('[', out);
  for (uint32_t k = 0; k < n; k++)
    fprintf(out, "%s%s", k ? " " : "",
            m->tensors[m->ntensors - 1 - o[idx[k]].sub].name);
  fputc(']', out);
}

/* Compares one round o[0..n) (file order). */
static hk_status one_round(occ *o, uint32_t n, const hk_gradset *m,
                           const hk_allreduce_env *env, const hk_sim_job *j,
                           FILE *out, unsigned round, hk_batch_cmp *cmp) {
  hk_status st = HK_OK;
  uint32_t *rec = malloc(n * sizeof *rec), *pos = malloc(n * sizeof *pos),
           *starts = malloc((n + 1) * sizeof *starts),
           *sorted = malloc(n * sizeof *sorted);
  size_t *bytes = malloc(n * sizeof *bytes);
  occ *r = malloc(n * sizeof *r);
  if (!rec || !pos || !starts || !sorted || !bytes || !r) {
    st = hk_fail(HK_ERR_NOMEM, "comparing batches: %u tensors", n);
    goto done;
  }
  /* recorded: o in file order; batches where (ts, dur) changes */
  memcpy(r, o, n * sizeof *r);
  qsort(r, n, sizeof *r, by_ready);
  for (uint32_t k = 0; k < n; k++)
    bytes[k] = m->tensors[m->ntensors - 1 - r[k].sub].count *
               (j->dtype == HK_FLOAT16 || j->dtype == HK_BFLOAT16 ? 2 : 4);
  uint32_t g = hk_sim_plan_round(env, j, bytes, n, pos, starts, &st);
  if (st != HK_OK)
    goto done;
  uint32_t at = 0, b = 0, nrec = 0, round_same = 0;
  while (at < n) {
    uint32_t e = at + 1;
    while (e < n && o[e].ts == o[at].ts && o[e].dur == o[at].dur)
      e++;
    nrec++;
    int same = b < g && starts[b + 1] - starts[b] == e - at;
    for (uint32_t k = 0; same && k < e - at; k++)
      same = r[pos[starts[b] + k]].sub == o[at + k].sub;
    if (same) {
      round_same++;
    } else {
      for (uint32_t k = at; k < e; k++)
        rec[k - at] = k;
      for (uint32_t k = 0; b < g && k < starts[b + 1] - starts[b]; k++)
        sorted[k] = pos[starts[b] + k];
      fprintf(out, "round %u batch %u: recorded ", round, b);
      names(out, m, o, rec, e - at);
      fprintf(out, " simulated ");
      names(out, m, r, sorted, b < g ? starts[b + 1] - starts[b] : 0);
      fputc('\n', out);
    }
    at = e;
    b++;
  }
  if (b != g)
    fprintf(out, "round %u: recorded %u batches, simulated %u\n", round, b, g);
  cmp->recorded += nrec;
  cmp->same += round_same;
done:
  free(rec);
  free(pos);
  free(starts);
  free(sorted);
  free(bytes);
  free(r);
  return st;
}

static int by_resp(const void *a, const void *b) {
  const occ *x = a, *y = b;
  if (x->resp != y->resp)
    return x->resp < y->resp ? -1 : 1;
  return (x->file_at > y->file_at) - (x->file_at < y->file_at);
}

hk_status hk_batches_compare(const hk_tl *tl, const hk_gradset *m,
                             const hk_sim_job *j, FILE *out,
                             hk_batch_cmp *cmp) {
  memset(cmp, 0, sizeof *cmp);
  hk_strmap *idx = NULL;
  long *rix = calloc(m->ntensors, sizeof *rix);
  double *neg = calloc(m->ntensors, sizeof *neg),
         *wfd = calloc(m->ntensors, sizeof *wfd);
  occ *o = malloc((tl->n + 1) * sizeof *o);
  hk_allreduce_env env;
  memset(&env, 0, sizeof env);
  hk_status st = hk_strmap_create(&idx);
  if (st != HK_OK || !rix || !neg || !wfd || !o) {
    st = hk_fail(HK_ERR_NOMEM, "comparing batches: out of memory");
    goto done;
  }
  for (size_t i = 0; i < m->ntensors && st == HK_OK; i++)
    st = hk_strmap_put(idx, m->tensors[i].name, (void *)(i + 1));
  if (st != HK_OK)
    goto done;
  uint32_t n = 0;
  for (size_t s = 0; s < tl->n; s++) {
    const hk_tl_span *p = &tl->span[s];
    size_t i = (size_t)hk_strmap_get(idx, p->tensor);
    if (!i)
      continue;
    i--;
    if (!strcmp(p->phase, "NEGOTIATE")) {
      /* to the ns the file has: start + length differ in the last bit */
      neg[i] = (double)llround((p->ts_us + p->dur_us) * 1e3);
      rix[i] = p->response;
    } else if (!strcmp(p->phase, "WAIT_FOR_DATA"))
      wfd[i] = (double)llround((p->ts_us + p->dur_us) * 1e3);
    else if (!strcmp(p->phase, "ALLREDUCE")) {
      o[n] = (occ){.sub = (uint32_t)(m->ntensors - 1 - i),
                   .resp = neg[i],
                   .ready = wfd[i],
                   .index = rix[i],
                   .ts = p->ts_us,
                   .dur = p->dur_us,
                   .file_at = n};
      n++;
    }
  }
  if (n == 0) {
    st = hk_fail(HK_ERR_CONFIG,
                 "the timeline has no ALLREDUCE of the gradient set %s's "
                 "tensors",
                 m->label);
    goto done;
  }
  qsort(o, n, sizeof *o, by_resp);
  st = hk_sim_env(j, &env);
  for (uint32_t a = 0; a < n && st == HK_OK;) {
    uint32_t b = a + 1;
    while (b < n && o[b].resp == o[a].resp)
      b++;
    st = one_round(o + a, b - a, m, &env, j, out, cmp->rounds, cmp);
    cmp->rounds++;
    a = b;
  }
done:
  hk_allreduce_release(&env);
  hk_strmap_destroy(idx);
  free(rix);
  free(neg);
  free(wfd);
  free(o);
  return st;
}
