/*
 * timeline_hooks.c - the timeline observer (timeline.h): what rank 0's
 * hooks write into the trace-event file.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/status.h"
#include "observe/timeline.h"

typedef struct timeline_obs {
  hk_timeline *tl;
  int mark_cycles; /* HK_TIMELINE_MARK_CYCLES */
} timeline_obs;

/* The timeline's name of a collective (Horovod's names), indexed by
 * hk_wire_coll; any other is a barrier's. */
static const char *const coll_labels[] = {
    [HK_COLL_ALLREDUCE] = "ALLREDUCE",
    [HK_COLL_BROADCAST] = "BROADCAST",
    [HK_COLL_ALLGATHER] = "ALLGATHER",
    [HK_COLL_REDUCESCATTER] = "REDUCESCATTER",
    [HK_COLL_ALLTOALL] = "ALLTOALL",
    [HK_COLL_JOIN] = "JOIN",
    [HK_COLL_BARRIER] = "BARRIER",
    [HK_COLL_SET_ADD] = "PROCESS_SET_ADD",
    [HK_COLL_SET_REMOVE] = "PROCESS_SET_REMOVE",
};

static const char *coll_label(unsigned c) {
  return c < sizeof coll_labels / sizeof coll_labels[0] && coll_labels[c]
             ? coll_labels[c]
             : coll_labels[HK_COLL_BARRIER];
}

static void on_round_started(void *self, const hk_obs_round *r) {
  timeline_obs *t = self;
  if (t->mark_cycles)
    hk_timeline_mark(t->tl, "CYCLE_START", r->t_ready);
}

/* One tensor that ran in batch b: NEGOTIATE from the first rank's request
 * to the response (args: response, its place among the round's
 * responses); inside it WAIT_FOR_DATA, from the first rank's request
 * to the last's (the straggler is last_rank); QUEUE until its batch
 * started; the copies in and out of the fusion buffer; the collective
 * itself. */
static void on_tensor_done(void *self, const hk_obs_tensor *t,
                           const hk_obs_batch *b) {
  hk_timeline *tl = ((timeline_obs *)self)->tl;
  if (t->phantom)
    return;
  const hk_wire_response *r = t->resp;
  const char *name = t->req->name;
  char wait[96], args[192];
  snprintf(wait, sizeof wait,
           "\"last_rank\":%d,\"memory\":\"%s\",\"process_set\":%d",
           (int)r->last_rank,
           t->req->mem == HK_WIRE_MEM_DEVICE ? "device" : "host",
           (int)t->req->set);
  snprintf(args, sizeof args,
           "\"algorithm\":\"%s\",\"transport\":\"%s\","
           "\"fused_tensors\":%u,\"bytes\":%zu,\"process_set\":%d",
           b->algorithm, b->transport, b->n, b->bytes, (int)t->req->set);
  char resp[32];
  snprintf(resp, sizeof resp, "\"response\":%u", t->index);
  hk_timeline_span(tl, name, "NEGOTIATE", r->first_seen, t->t_ready, resp);
  hk_timeline_span(tl, name, "WAIT_FOR_DATA", r->first_seen, r->last_seen,
                   wait);
  hk_timeline_span(tl, name, "QUEUE", t->t_ready, b->t[0], NULL);
  if (b->staged)
    hk_timeline_span(tl, name, "MEMCPY_IN_FUSION_BUFFER", b->t[0], b->t[1],
                     NULL);
  hk_timeline_span(tl, name, coll_label(t->req->coll), b->t[1], b->t[2], args);
  if (b->staged)
    hk_timeline_span(tl, name, "MEMCPY_OUT", b->t[2], b->t[3], NULL);
}

/* Each setting the autotuner switches to: an instant marker named by the
 * trial and the setting. */
static void on_tuned(void *self, const char *what, double t) {
  hk_timeline_mark(((timeline_obs *)self)->tl, what, t);
}

static void on_detach(void *self, int final) {
  (void) final;
  timeline_obs *t = self;
  hk_timeline_close(t->tl);
  free(t);
}

static const hk_observer_ops timeline_ops = {
    .name = "timeline",
    .detach = on_detach,
    .round_started = on_round_started,
    .tensor_done = on_tensor_done,
    .tuned = on_tuned,
};

hk_status hk_timeline_attach(hk_observers *o, const hk_obs_setup *s) {
  if (s->rank != 0 || !s->cfg->timeline[0])
    return HK_OK;
  timeline_obs *t = calloc(1, sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the timeline");
  t->mark_cycles = s->cfg->timeline_mark_cycles;
  hk_status st = hk_timeline_open(s->cfg->timeline, s->cfg->file_mode, &t->tl);
  if (st == HK_OK) {
    hk_timeline_set_limit(t->tl, (size_t)(s->cfg->timeline_max_mb * 1048576.0));
    st = hk_observe_attach(o, &timeline_ops, t);
  }
  if (st != HK_OK)
    on_detach(t, 0);
  return st;
}
