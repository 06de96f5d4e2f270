/*
 * stream.c - the emu's streams and events.
 *
 * A stream is a thread running a FIFO of operations (emu_op) in order; it
 * sleeps on a condition variable while the FIFO is empty. stream_destroy
 * waits for the queued work, then joins the thread.
 *
 * Errors: an operation that fails (a communicator op that was aborted or
 * hit an async error) leaves its stream "failed", like a CUDA stream after
 * a fault: the stream keeps running later operations, but every event
 * recorded on it afterwards completes with that first failure, and so does
 * every stream that waits on such an event (the failure travels with the
 * dependency). Create a new stream to start clean.
 *
 * Events follow CUDA's rules. Each event_record makes a new "mark" (the
 * capture point: everything queued on that stream so far) and makes it the
 * event's current one; the stream completes the mark when it reaches it,
 * noting a monotonic time and the stream's failure if any.
 * stream_wait_event enqueues a wait for the mark current at the time of the
 * call (a later re-record does not move it); an event never recorded makes
 * no wait. event_query looks at the current mark. Marks are
 * reference-counted, so events and streams may be destroyed in any order.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status.h"
#include "device/emu/emu.h"
#include "device/emu/internal.h"

struct hk_dev_stream_s {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the FIFO got an op, or stop */
  emu_op *head, *tail;
  int stop;
  pthread_t thread;
  /* touched only by the stream's thread: */
  hk_status err; /* first failure, HK_OK if none */
  char errmsg[EMU_MSG_CAP];
};

typedef struct emu_mark {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* done */
  atomic_int refs;
  int done;
  hk_status st; /* the failure the captured work carries */
  char msg[EMU_MSG_CAP];
  struct timespec t; /* CLOCK_MONOTONIC when the stream reached it */
} emu_mark;

struct hk_dev_event_s {
  pthread_mutex_t mu;
  int timed;      /* event_create_timed: event_elapsed takes it */
  emu_mark *mark; /* the latest record, NULL if never recorded */
};

/* ---- the stream thread ---- */

static void *stream_main(void *arg) {
  hk_dev_stream s = arg;
  char msg[EMU_MSG_CAP];
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop)
      pthread_cond_wait(&s->cv, &s->mu);
    emu_op *op = s->head;
    if (!op)
      break; /* stopped and drained */
    s->head = op->next;
    if (!s->head)
      s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    msg[0] = '\0';
    hk_status st = op->run(op, s, msg, sizeof msg);
    if (st != HK_OK && s->err == HK_OK) {
      s->err = st;
      snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    }
    op->destroy(op);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

hk_status emu_stream_new(hk_dev_stream *out) {
  *out = NULL;
  hk_dev_stream s = calloc(1, sizeof *s);
  if (!s)
    return hk_fail(HK_ERR_NOMEM, "emu: stream_create: out of host memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int e = pthread_create(&s->thread, NULL, stream_main, s);
  if (e) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return hk_fail_errno(HK_ERR_SYSTEM, e, "emu: stream_create: thread");
  }
  pthread_setname_np(s->thread, "hk-emu-stream");
  *out = s;
  return HK_OK;
}

void emu_stream_free(hk_dev_stream s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* The emulated driver: process-wide, as CUDA's is (emu.h). */
static struct {
  pthread_mutex_t mu;
  int opens;                    /* handles open */
  hk_dev_stream default_stream; /* NULL until first used */
} driver = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};

void emu_driver_open(void) {
  pthread_mutex_lock(&driver.mu);
  driver.opens++;
  pthread_mutex_unlock(&driver.mu);
}

void emu_driver_close(void) {
  hk_dev_stream last = NULL;
  pthread_mutex_lock(&driver.mu);
  if (--driver.opens == 0) {
    last = driver.default_stream;
    driver.default_stream = NULL;
  }
  pthread_mutex_unlock(&driver.mu);
  if (last)
    emu_stream_free(last); /* waits for its queued work */
}

hk_status emu_default_stream(hk_dev_stream *out) {
  hk_status st = HK_OK;
  pthread_mutex_lock(&driver.mu);
  if (!driver.default_stream)
    st = emu_stream_new(&driver.default_stream);
  *out = driver.default_stream;
  pthread_mutex_unlock(&driver.mu);
  return st;
}

hk_status emu_enqueue(hk_dev_stream s, emu_op *op) {
  if (!s) {
    hk_status st = emu_default_stream(&s);
    if (st != HK_OK) {
      op->destroy(op);
      return st;
    }
  }
  op->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return HK_OK;
}

hk_status emu_stream_create(hk_device *dev, hk_dev_stream *out) {
  *out = NULL;
  if (!emu_dev(dev, "stream_create"))
    return HK_ERR_INVALID_ARG;
  return emu_stream_new(out);
}

void emu_stream_destroy(hk_device *dev, hk_dev_stream s) {
  if (!emu_dev(dev, "stream_destroy") || !s)
    return;
  emu_stream_free(s);
}

/* ---- marks ---- */

static emu_mark *mark_new(void) {
  emu_mark *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  atomic_init(&m->refs, 1);
  return m;
}

static emu_mark *mark_ref(emu_mark *m) {
  atomic_fetch_add(&m->refs, 1);
  return m;
}

static void mark_unref(emu_mark *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
  }
}

/* ---- record and wait operations ---- */

typedef struct mark_op {
  emu_op base;
  emu_mark *m;
} mark_op;

static void mark_op_destroy(emu_op *op) {
  mark_op *o = (mark_op *)op;
  mark_unref(o->m);
  free(o);
}

static hk_status record_run(emu_op *op, hk_dev_stream s, char *msg,
                            size_t cap) {
  (void)msg;
  (void)cap;
  emu_mark *m = ((mark_op *)op)->m;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  pthread_mutex_lock(&m->mu);
  m->t = t;
  m->st = s->err;
  snprintf(m->msg, sizeof m->msg, "%s", s->errmsg);
  m->done = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return HK_OK;
}

static hk_status wait_run(emu_op *op, hk_dev_stream s, char *msg, size_t cap) {
  (void)s;
  emu_mark *m = ((mark_op *)op)->m;
  pthread_mutex_lock(&m->mu);
  while (!m->done)
    pthread_cond_wait(&m->cv, &m->mu);
  hk_status st = m->st;
  if (st != HK_OK)
    snprintf(msg, cap, "%s", m->msg);
  pthread_mutex_unlock(&m->mu);
  return st; /* the waited-for failure becomes this stream's */
}

static hk_status mark_op_new(emu_mark *m,
                             hk_status (*run)(emu_op *, hk_dev_stream, char *,
                                              size_t),
                             mark_op **out) {
  mark_op *o = calloc(1, sizeof *o);
  if (!o)
    return hk_fail(HK_ERR_NOMEM, "emu: event op: out of host memory");
  o->base.run = run;
  o->base.destroy = mark_op_destroy;
  o->m = m;
  *out = o;
  return HK_OK;
}

/* ---- events ---- */

/* Events made so far in the process (hk_emu_events_created). */
static atomic_size_t events_created;

size_t hk_emu_events_created(void) { return atomic_load(&events_created); }

static hk_status event_new(hk_device *dev, int timed, hk_dev_event *out) {
  const char *what = timed ? "event_create_timed" : "event_create";
  *out = NULL;
  if (!emu_dev(dev, what))
    return HK_ERR_INVALID_ARG;
  hk_dev_event e = calloc(1, sizeof *e);
  if (!e)
    return hk_fail(HK_ERR_NOMEM, "emu: %s: out of host memory", what);
  pthread_mutex_init(&e->mu, NULL);
  e->timed = timed;
  atomic_fetch_add(&events_created, 1);
  *out = e;
  return HK_OK;
}

hk_status emu_event_create(hk_device *dev, hk_dev_event *out) {
  return event_new(dev, 0, out);
}

hk_status emu_event_create_timed(hk_device *dev, hk_dev_event *out) {
  return event_new(dev, 1, out);
}

void emu_event_destroy(hk_device *dev, hk_dev_event e) {
  if (!emu_dev(dev, "event_destroy") || !e)
    return;
  mark_unref(e->mark); /* a queued record keeps its own reference */
  pthread_mutex_destroy(&e->mu);
  free(e);
}

hk_status emu_event_record(hk_device *dev, hk_dev_event e, hk_dev_stream s) {
  if (!emu_dev(dev, "event_record"))
    return HK_ERR_INVALID_ARG;
  if (!e)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: event_record: NULL event");
  if (!s) { /* resolved first, so that the enqueue below cannot fail */
    hk_status st = emu_default_stream(&s);
    if (st != HK_OK)
      return st;
  }
  emu_mark *m = mark_new();
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "emu: event_record: out of host memory");
  mark_op *o = NULL;
  hk_status st = mark_op_new(mark_ref(m), record_run, &o);
  if (st != HK_OK) {
    mark_unref(m);
    mark_unref(m);
    return st;
  }
  /* the event points at the new mark before the stream can reach it, so a
   * query right after sees "not done" */
  pthread_mutex_lock(&e->mu);
  emu_mark *old = e->mark;
  e->mark = m;
  pthread_mutex_unlock(&e->mu);
  mark_unref(old);
  return emu_enqueue(s, &o->base);
}

hk_status emu_stream_wait_event(hk_device *dev, hk_dev_stream s,
                                hk_dev_event e) {
  if (!emu_dev(dev, "stream_wait_event"))
    return HK_ERR_INVALID_ARG;
  if (!e)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: stream_wait_event: NULL event");
  pthread_mutex_lock(&e->mu);
  emu_mark *m = e->mark ? mark_ref(e->mark) : NULL;
  pthread_mutex_unlock(&e->mu);
  if (!m)
    return HK_OK; /* never recorded: no wait */
  mark_op *o = NULL;
  hk_status st = mark_op_new(m, wait_run, &o);
  if (st != HK_OK) {
    mark_unref(m);
    return st;
  }
  return emu_enqueue(s, &o->base);
}

hk_status emu_event_query(hk_device *dev, hk_dev_event e, int *done) {
  *done = 0;
  if (!emu_dev(dev, "event_query"))
    return HK_ERR_INVALID_ARG;
  if (!e)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: event_query: NULL event");
  pthread_mutex_lock(&e->mu);
  emu_mark *m = e->mark ? mark_ref(e->mark) : NULL;
  pthread_mutex_unlock(&e->mu);
  if (!m) {
    *done = 1; /* never recorded */
    return HK_OK;
  }
  hk_status st = HK_OK;
  pthread_mutex_lock(&m->mu);
  *done = m->done;
  if (m->done && m->st != HK_OK)
    st = hk_fail(m->st, "%s", m->msg);
  pthread_mutex_unlock(&m->mu);
  mark_unref(m);
  return st;
}

/* A completed mark's time into *t, or an error naming which (*t is
 * zero then). */
static hk_status done_time(hk_dev_event e, const char *which,
                           struct timespec *t) {
  *t = (struct timespec){0};
  if (!e)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: event_elapsed: NULL %s event",
                   which);
  hk_status st = HK_OK;
  pthread_mutex_lock(&e->mu);
  emu_mark *m = e->mark;
  if (!m) {
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "emu: event_elapsed: the %s event was never recorded", which);
  } else {
    pthread_mutex_lock(&m->mu);
    if (!m->done)
      st = hk_fail(HK_ERR_INVALID_ARG,
                   "emu: event_elapsed: the %s event has not completed", which);
    *t = m->t;
    pthread_mutex_unlock(&m->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return st;
}

hk_status emu_event_elapsed(hk_device *dev, hk_dev_event start,
                            hk_dev_event end, float *ms) {
  *ms = 0;
  if (!emu_dev(dev, "event_elapsed"))
    return HK_ERR_INVALID_ARG;
  if (!start || !end || !start->timed || !end->timed) /* as CUDA refuses */
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: event_elapsed: the %s event was made without timing "
                   "(event_create; event_create_timed makes one with)",
                   !start || !start->timed ? "start" : "end");
  struct timespec a, b;
  hk_status st = done_time(start, "start", &a);
  if (st == HK_OK)
    st = done_time(end, "end", &b);
  if (st != HK_OK)
    return st;
  *ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 +
                (double)(b.tv_nsec - a.tv_nsec) / 1e6);
  return HK_OK;
}

/* ---- test hooks (emu.h): delay and host callbacks ---- */

typedef struct hostfn_op {
  emu_op base;
  void (*fn)(void *);
  void *arg;
  int ms; /* delay op */
} hostfn_op;

static void hostfn_destroy(emu_op *op) { free(op); }

static hk_status hostfn_run(emu_op *op, hk_dev_stream s, char *msg,
                            size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  hostfn_op *o = (hostfn_op *)op;
  o->fn(o->arg);
  return HK_OK;
}

static hk_status delay_run(emu_op *op, hk_dev_stream s, char *msg, size_t cap) {
  (void)s;
  (void)msg;
  (void)cap;
  int ms = ((hostfn_op *)op)->ms;
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR)
    ;
  return HK_OK;
}

static hk_status hostfn_enqueue(hk_dev_stream s, void (*fn)(void *), void *arg,
                                int ms) {
  hostfn_op *o = calloc(1, sizeof *o);
  if (!o)
    return hk_fail(HK_ERR_NOMEM, "emu: host op: out of host memory");
  o->base.run = fn ? hostfn_run : delay_run;
  o->base.destroy = hostfn_destroy;
  o->fn = fn;
  o->arg = arg;
  o->ms = ms;
  return emu_enqueue(s, &o->base);
}

hk_status hk_emu_stream_delay(hk_device *dev, hk_dev_stream s, int ms) {
  if (!emu_dev(dev, "hk_emu_stream_delay"))
    return HK_ERR_INVALID_ARG;
  if (ms < 0)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: hk_emu_stream_delay: %d ms", ms);
  return hostfn_enqueue(s, NULL, NULL, ms);
}

hk_status hk_emu_stream_host_fn(hk_device *dev, hk_dev_stream s,
                                void (*fn)(void *arg), void *arg) {
  if (!emu_dev(dev, "hk_emu_stream_host_fn"))
    return HK_ERR_INVALID_ARG;
  if (!fn)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: hk_emu_stream_host_fn: NULL fn");
  return hostfn_enqueue(s, fn, arg, 0);
}
