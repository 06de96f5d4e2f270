/*
 * check.c - a run's measured step time from its timeline (check.h).
 */
#include "planner/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/strmap.h"
#include "planner/median.h"

hk_status hk_check_step(const hk_tl *tl, const hk_gradset *m, double *step_s,
                        double *span_s, unsigned *steps) {
  *step_s = 0;
  *span_s = 0;
  *steps = 0;
  hk_strmap *idx = NULL;
  size_t n = m->ntensors;
  size_t *seen = calloc(n, sizeof *seen); /* occurrences per tensor */
  size_t *done = calloc(n, sizeof *done); /* ALLREDUCEs per tensor */
  double *start = malloc((tl->n + 1) * sizeof *start);
  double *end = calloc(tl->n + 1, sizeof *end);
  size_t nstart = 0;
  hk_status st = hk_strmap_create(&idx);
  if (st != HK_OK || !seen || !done || !start || !end) {
    st = hk_fail(HK_ERR_NOMEM, "--check: out of memory");
    goto done;
  }
  for (size_t i = 0; i < n && st == HK_OK; i++)
    st = hk_strmap_put(idx, m->tensors[i].name, (void *)(i + 1));
  if (st != HK_OK)
    goto done;
  for (size_t s = 0; s < tl->n; s++) {
    const hk_tl_span *p = &tl->span[s];
    size_t i = (size_t)hk_strmap_get(idx, p->tensor);
    if (i && !strcmp(p->phase, "ALLREDUCE")) {
      size_t k = done[i - 1]++;
      end[k] = fmax(end[k], (p->ts_us + p->dur_us) * 1e-6);
    }
    if (!i || strcmp(p->phase, "NEGOTIATE"))
      continue;
    size_t k = seen[i - 1]++;
    if (k == nstart)
      start[nstart++] = INFINITY;
    start[k] = fmin(start[k], p->ts_us * 1e-6);
  }
  size_t whole = nstart;
  for (size_t i = 0; i < n; i++)
    whole = seen[i] < whole ? seen[i] : whole;
  if (whole < 2) {
    st = hk_fail(HK_ERR_CONFIG,
                 "--check: the timeline holds %zu whole step(s) of %s's "
                 "tensors; two or more are needed",
                 whole, m->label);
    goto done;
  }
  for (size_t i = 0; i < n; i++)
    if (done[i] < whole) {
      st = hk_fail(HK_ERR_CONFIG,
                   "--check: the timeline holds %zu ALLREDUCE span(s) of "
                   "tensor %s for %zu whole steps; one a step is needed",
                   done[i], m->tensors[i].name, whole);
      goto done;
    }
  size_t first = whole > 3 ? 1 : 0, nd = 0;
  for (size_t k = first; k + 1 < whole; k++) {
    end[nd] = end[k] - start[k];
    start[nd] = start[k + 1] - start[k];
    if (!(start[nd] > 0) || !(end[nd] > 0)) { /* NaN fails too */
      st = hk_fail(HK_ERR_CONFIG,
                   "--check: step %zu of the timeline lasts %.3f ms and its "
                   "exchange %.3f ms; both must be > 0 (are its NEGOTIATE "
                   "and ALLREDUCE spans in time order?)",
                   k + 1, start[nd] * 1e3, end[nd] * 1e3);
      goto done;
    }
    nd++;
  }
  *step_s = hk_median(start, nd);
  *span_s = hk_median(end, nd);
  *steps = (unsigned)nd;
done:
  hk_strmap_destroy(idx);
  free(seen);
  free(done);
  free(start);
  free(end);
  return st;
}
