/*
 * devflight.c - device allreduce batches in flight, the background
 * thread's records of them (see devflight.h).
 */
#include "worker/devflight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/status.h"
#include "worker/devplane.h"
#include "worker/queue.h"

/* One batch in flight. */
typedef struct record {
  hk_handle *hs;       /* k handles, in the batch's order */
  hk_handle *phantoms; /* nph of them, the batch's own (hk_join): a
                          dropped batch frees these without reading
                          the others, which the job's failure frees */
  uint32_t nph;
  hk_obs_tensor *obs;     /* k, each resp pointing at resp[i] */
  hk_wire_response *resp; /* k, copied without their owned pointers */
  uint32_t k;
  hk_obs_batch ob; /* tensors = obs */
  char algorithm[32], transport[32];
  double t0; /* hk_now() when its enqueue began */
} record;

/* The records, oldest first: r[(head + i) % HK_DEV_INFLIGHT_MAX]. */
struct hk_devflights {
  record r[HK_DEV_INFLIGHT_MAX];
  int head, n;
};

static void record_free(record *r) {
  free(r->hs);
  free(r->phantoms);
  free(r->obs);
  free(r->resp);
  memset(r, 0, sizeof *r);
}

hk_status hk_devflight_add(hk_ctx *ctx, hk_handle *hs, const hk_obs_tensor *obs,
                           uint32_t k, const hk_obs_batch *ob, double t0) {
  struct hk_devflights *q = ctx->devflight;
  if (!q && !(q = ctx->devflight = calloc(1, sizeof *q)))
    return hk_fail(HK_ERR_NOMEM, "cannot keep a device batch in flight");
  if (q->n >= HK_DEV_INFLIGHT_MAX) /* hk_devplane_allreduce refuses first */
    return hk_fail(HK_ERR_INVALID_ARG, "%d device batches kept already", q->n);
  record *r = &q->r[(q->head + q->n) % HK_DEV_INFLIGHT_MAX];
  r->hs = malloc(k * sizeof *r->hs);
  r->obs = malloc(k * sizeof *r->obs);
  r->resp = malloc(k * sizeof *r->resp);
  r->phantoms = malloc(k * sizeof *r->phantoms);
  if (!r->hs || !r->obs || !r->resp || !r->phantoms) {
    record_free(r);
    return hk_fail(HK_ERR_NOMEM, "cannot keep a device batch of %u tensors", k);
  }
  memcpy(r->hs, hs, k * sizeof *hs);
  for (uint32_t i = 0; i < k; i++) {
    if (hs[i]->phantom)
      r->phantoms[r->nph++] = hs[i];
    r->obs[i] = obs[i];
    if (obs[i].resp) { /* the round's message goes before the batch ends */
      r->resp[i] = *obs[i].resp;
      r->resp[i].reason = NULL;
      r->resp[i].params = NULL;
      r->resp[i].ncounts = 0;
      r->resp[i].counts = NULL;
      r->resp[i].agreed = NULL;
      r->obs[i].resp = &r->resp[i];
    }
  }
  r->k = k;
  r->ob = *ob;
  r->ob.tensors = r->obs;
  r->ob.n = k;
  if (ob->algorithm) {
    snprintf(r->algorithm, sizeof r->algorithm, "%s", ob->algorithm);
    r->ob.algorithm = r->algorithm;
  }
  if (ob->transport) {
    snprintf(r->transport, sizeof r->transport, "%s", ob->transport);
    r->ob.transport = r->transport;
  }
  r->t0 = t0;
  q->n++;
  return HK_OK;
}

int hk_devflight_count(const hk_ctx *ctx) {
  return ctx->devflight ? ctx->devflight->n : 0;
}

/* The oldest record's batch completed at `t_end` after phase_s on the
 * GPU: the observers see it end, then its tensors; its handles complete
 * under one lock (as hk_execute_responses does for a batch run at once). */
static void complete(hk_ctx *ctx, record *r, const double phase_s[3],
                     double t_end) {
  /* the phases on the GPU's clock, laid back from when it was seen done */
  double *t = r->ob.t;
  t[3] = t_end;
  t[2] = t[3] - phase_s[2];
  t[1] = t[2] - phase_s[1];
  t[0] = t[1] - phase_s[0] > r->t0 ? t[1] - phase_s[0] : r->t0;
  r->ob.t_end = t[3];
  r->ob.status = HK_OK;
  hk_observe_batch_done(&ctx->obs, &r->ob);
  uint32_t ndone = 0;
  for (uint32_t i = 0; i < r->k; i++) {
    hk_handle h = r->hs[i];
    hk_observe_tensor_done(&ctx->obs, &r->obs[i], &r->ob);
    if (h->phantom)
      hk_queue_free_phantom(ctx, h);
    else
      r->hs[ndone++] = h;
  }
  hk_queue_complete_ok(ctx, r->hs, ndone);
}

hk_status hk_devflight_retire(hk_ctx *ctx, int most, int *completed) {
  struct hk_devflights *q = ctx->devflight;
  if (completed)
    *completed = 0;
  while (q && q->n > 0) {
    record *r = &q->r[q->head];
    double phase[3];
    int done = 0;
    hk_status st = hk_devplane_oldest_done(ctx, q->n > most, &done, phase);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      r->ob.status = st;
      r->ob.t_end = hk_now();
      hk_observe_batch_done(&ctx->obs, &r->ob);
      st = hk_fail_tensor(st, r->hs[0]->req.name, msg);
      hk_devflight_drop(ctx);
      return st;
    }
    if (!done)
      break;
    complete(ctx, r, phase, hk_now());
    record_free(r);
    q->head = (q->head + 1) % HK_DEV_INFLIGHT_MAX;
    q->n--;
    if (completed)
      ++*completed;
  }
  return HK_OK;
}

void hk_devflight_drop(hk_ctx *ctx) {
  struct hk_devflights *q = ctx->devflight;
  hk_devplane_abandon(ctx);
  if (!q)
    return;
  for (int i = 0; i < q->n; i++) {
    record *r = &q->r[(q->head + i) % HK_DEV_INFLIGHT_MAX];
    for (uint32_t j = 0; j < r->nph; j++)
      hk_queue_free_phantom(ctx, r->phantoms[j]);
    record_free(r);
  }
  free(q);
  ctx->devflight = NULL;
}
