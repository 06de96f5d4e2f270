/*
 * introspect.c - the introspection observer (introspect.h): written by the
 * background thread's hooks, read by anyone.
 */
#include "observe/introspect.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/status.h"

typedef struct hk_introspect {
  pthread_mutex_t mu;
  hk_collective_timing timing;  /* [mu] */
  hk_negotiation_counts counts; /* [mu] */
} hk_introspect;

static void on_message(void *self, const hk_obs_message *m) {
  hk_introspect *ir = self;
  hk_negotiation_counts *c = &ir->counts;
  uint64_t *v[] = {[HK_OBS_MSG_REQUESTS] = &c->requests,
                   [HK_OBS_MSG_ROUND] = &c->rounds,
                   [HK_OBS_MSG_ANSWER] = &c->answers};
  pthread_mutex_lock(&ir->mu);
  (*v[m->kind])++;
  pthread_mutex_unlock(&ir->mu);
}

/* The tensor the batch's collective is recorded under: the last one that
 * moves data, or NULL (barriers and joins only). */
static const char *data_mover(const hk_obs_batch *b) {
  const char *ran = NULL;
  for (uint32_t i = 0; i < b->n; i++) {
    unsigned c = b->tensors[i].req->coll;
    if (c != HK_COLL_BARRIER && c != HK_COLL_JOIN)
      ran = b->tensors[i].req->name;
  }
  return ran;
}

static void on_batch_done(void *self, const hk_obs_batch *b) {
  hk_introspect *ir = self;
  const char *ran = b->status == HK_OK ? data_mover(b) : NULL;
  if (!ran && !(b->status == HK_OK && b->fused))
    return;
  pthread_mutex_lock(&ir->mu);
  if (ran) {
    hk_collective_timing *t = &ir->timing;
    const double start_s = b->t[1], end_s = b->t[2];
    /* busy_s counts time, not records; collectives run one after
     * another, so only an overlap with the last one is possible */
    double from = t->seq && start_s < t->end_s ? t->end_s : start_s;
    if (end_s > from)
      t->busy_s += end_s - from;
    t->seq++;
    t->start_s = start_s;
    t->end_s = end_s;
    snprintf(t->name, sizeof t->name, "%s", ran);
  }
  if (b->status == HK_OK && b->fused) {
    ir->counts.fused_batches++;
    ir->counts.fused_tensors += b->fused;
  }
  pthread_mutex_unlock(&ir->mu);
}

static void on_detach(void *self, int final) {
  (void) final;
  hk_introspect *ir = self;
  pthread_mutex_destroy(&ir->mu);
  free(ir);
}

static const hk_observer_ops introspect_ops = {
    .name = "introspection",
    .detach = on_detach,
    .message = on_message,
    .batch_done = on_batch_done,
};

hk_status hk_introspect_attach(hk_observers *o, const hk_obs_setup *s) {
  (void)s;
  hk_introspect *ir = calloc(1, sizeof *ir);
  if (!ir)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the introspection record");
  pthread_mutex_init(&ir->mu, NULL);
  hk_status st = hk_observe_attach(o, &introspect_ops, ir);
  if (st != HK_OK)
    on_detach(ir, 0);
  return st;
}

hk_status hk_introspect_read(const hk_observers *o,
                             hk_collective_timing *timing,
                             hk_negotiation_counts *counts) {
  hk_introspect *ir = hk_observe_find(o, &introspect_ops);
  if (!ir)
    return hk_fail(HK_ERR_NOT_INITIALIZED, "no introspection record");
  pthread_mutex_lock(&ir->mu);
  if (timing)
    *timing = ir->timing;
  if (counts)
    *counts = ir->counts;
  pthread_mutex_unlock(&ir->mu);
  return HK_OK;
}
