/*
 * observe.c - the list of observers and the dispatch (observe.h).
 */
#include "observe/observe.h"

#include "common/status.h"

/* Calls ops->op(self, ...) for every observer that takes op. */
#define EACH(o, op, ...)                                                       \
  for (int i_ = 0; i_ < (o)->n; i_++)                                          \
    if ((o)->at[i_].ops->op)                                                   \
  (o)->at[i_].ops->op((o)->at[i_].self, __VA_ARGS__)

/* The hooks ops takes, as HK_OBS_BIT values. */
static unsigned hooks_of(const hk_observer_ops *ops) {
  const int taken[HK_OBS_NHOOKS] = {
      [HK_OBS_TAKEN] = ops->taken != NULL,
      [HK_OBS_SAMPLE] = ops->sample != NULL,
      [HK_OBS_MESSAGE] = ops->message != NULL,
      [HK_OBS_ROUND_STARTED] = ops->round_started != NULL,
      [HK_OBS_NEGOTIATED] = ops->negotiated != NULL,
      [HK_OBS_BATCH_STARTED] = ops->batch_started != NULL,
      [HK_OBS_BATCH_DONE] = ops->batch_done != NULL,
      [HK_OBS_TENSOR_DONE] = ops->tensor_done != NULL,
      [HK_OBS_STALL] = ops->stall != NULL,
      [HK_OBS_ERROR] = ops->error != NULL,
      [HK_OBS_POLL] = ops->poll_fd != NULL && ops->readable != NULL,
      [HK_OBS_TUNED] = ops->tuned != NULL,
  };
  unsigned bits = 0;
  for (int h = 0; h < HK_OBS_NHOOKS; h++)
    bits |= taken[h] ? HK_OBS_BIT(h) : 0u;
  return bits;
}

hk_status hk_observe_attach(hk_observers *o, const hk_observer_ops *ops,
                            void *self) {
  if (o->n == HK_OBSERVE_MAX)
    return hk_fail(HK_ERR_INVALID_ARG, "cannot attach observer '%s': %d are",
                   ops->name, HK_OBSERVE_MAX);
  for (int i = 0; ops->uses_slot && i < o->n; i++)
    if (o->at[i].ops->uses_slot)
      return hk_fail(HK_ERR_INVALID_ARG,
                     "observers '%s' and '%s' both keep state in the "
                     "tensor's slot",
                     o->at[i].ops->name, ops->name);
  o->at[o->n].ops = ops;
  o->at[o->n].self = self;
  o->n++;
  o->hooks |= hooks_of(ops);
  o->submit_time |= ops->wants_submit_time;
  return HK_OK;
}

void *hk_observe_find(const hk_observers *o, const hk_observer_ops *ops) {
  for (int i = 0; i < o->n; i++)
    if (o->at[i].ops == ops)
      return o->at[i].self;
  return NULL;
}

hk_status hk_observe_ready(hk_observers *o, const hk_obs_ready *e) {
  hk_status st = HK_OK;
  for (int i = 0; i < o->n && st == HK_OK; i++)
    if (o->at[i].ops->ready)
      st = o->at[i].ops->ready(o->at[i].self, e);
  return st;
}

void hk_observe_detach(hk_observers *o, int final) {
  while (o->n > 0) {
    o->n--;
    if (o->at[o->n].ops->detach)
      o->at[o->n].ops->detach(o->at[o->n].self, final);
  }
  *o = (hk_observers){0};
}

int hk_observe_poll_fds(hk_observers *o, struct pollfd *out, int cap) {
  o->npolled = 0;
  for (int i = 0; i < o->n && o->npolled < cap; i++) {
    const hk_observer_ops *ops = o->at[i].ops;
    int fd = ops->poll_fd && ops->readable ? ops->poll_fd(o->at[i].self) : -1;
    if (fd < 0)
      continue;
    out[o->npolled] = (struct pollfd){.fd = fd, .events = POLLIN};
    o->polled_by[o->npolled++] = i;
  }
  return o->npolled;
}

void hk_observe_polled_(hk_observers *o, const struct pollfd *p) {
  for (int k = 0; k < o->npolled; k++)
    if (p[k].revents) {
      int i = o->polled_by[k];
      o->at[i].ops->readable(o->at[i].self);
    }
}

void hk_observe_taken_(hk_observers *o, const hk_obs_tensor *t) {
  EACH(o, taken, t);
}

int hk_observe_sample_(hk_observers *o, hk_wire_sample *out) {
  for (int i = 0; i < o->n; i++)
    if (o->at[i].ops->sample && o->at[i].ops->sample(o->at[i].self, out))
      return 1;
  return 0;
}

void hk_observe_message_(hk_observers *o, const hk_obs_message *m) {
  EACH(o, message, m);
}

void hk_observe_round_started_(hk_observers *o, const hk_obs_round *r) {
  EACH(o, round_started, r);
}

void hk_observe_negotiated_(hk_observers *o, const hk_obs_tensor *t) {
  EACH(o, negotiated, t);
}

void hk_observe_batch_started_(hk_observers *o, const hk_obs_batch *b) {
  EACH(o, batch_started, b);
}

void hk_observe_batch_done_(hk_observers *o, const hk_obs_batch *b) {
  EACH(o, batch_done, b);
}

void hk_observe_tensor_done_(hk_observers *o, const hk_obs_tensor *t,
                             const hk_obs_batch *b) {
  EACH(o, tensor_done, t, b);
}

void hk_observe_stall_(hk_observers *o, const char *what) {
  EACH(o, stall, what);
}

void hk_observe_tuned_(hk_observers *o, const char *what, double t) {
  EACH(o, tuned, what, t);
}

void hk_observe_error_(hk_observers *o, hk_status st, const char *reason) {
  EACH(o, error, st, reason);
}
