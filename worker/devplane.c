/*
 * devplane.c - the worker's side of the GPU data plane (see devplane.h).
 */
#include "worker/devplane.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/dev_allreduce.h"
#include "collectives/ring.h"
#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/waiter.h"
#include "device/foreign.h"
#include "device/host/reduce.h"

/* Spare per-tensor events (a handle's ready and done) kept for reuse:
 * creating one per tensor and step costs a driver call each. */
#define EVENT_POOL 256

/* A device allreduce batch queued on hk's stream that the background
 * thread has not yet seen complete (hk_devplane_allreduce enqueues it,
 * hk_devplane_oldest_done retires it). */
struct hk_devflight {
  struct hk_devset *ds; /* the communicator it runs on */
  hk_dev_event ev[4];   /* timed, recorded on hk's stream: before the pack,
                           after it, after the schedule, after the unpack
                           (its end: what completes it) */
  double since;         /* hk_now() when the watchdog's HK_TIMEOUT_S began
                           for it: when it became the oldest in flight */
};

/* One process set's device communicator and what its schedules run on:
 * the world's streams, events and staging slots, its own communicator
 * among its members on this host. */
struct hk_devset {
  hk_ctx *ctx;
  hk_dev_sched sched;            /* wait_arg: this; segs: its own */
  uint8_t uid[HK_DEV_UID_BYTES]; /* its communicator's id on this host
                                    (exchange_uid) */
  int comm_tried;                /* comm_init was called (once) */
};

struct hk_devplane {
  struct hk_devset world;  /* the world's (process set 0's): owns the
                              streams, events and slots */
  pthread_mutex_t live_mu; /* making them (plane_live), once: */
  atomic_int live;         /* 1 once hk's streams and events exist */
  uint8_t *fusion;         /* device fusion buffer, grown on demand */
  size_t fusion_bytes;
  hk_dev_copy *items; /* pack/unpack work lists */
  size_t items_cap;
  size_t *seg; /* a tensor's own segments, nseg + 1 */
  size_t seg_cap;
  size_t *off; /* where the batch's segment j has reached, nseg */
  size_t off_cap;
  hk_dev_event ev_done; /* a staging copy's end, the fusion buffer's
                          last use: waited at once */
  /* the batches in flight, oldest first: fl[(head + i) % inflight] for i
   * in [0, nfl); inflight = HK_DEVICE_INFLIGHT of them have their events */
  struct hk_devflight fl[HK_DEV_INFLIGHT_MAX];
  int inflight, head, nfl;
  pthread_mutex_t pool_mu;       /* the spare per-tensor events: */
  hk_dev_event pool[EVENT_POOL]; /* made by event_create, kept for reuse */
  int npool;
};

/* ---- the watchdog ---- */

static void abort_comm(struct hk_devset *ds) {
  hk_dev_sched *s = &ds->sched;
  if (s->comm) {
    s->dev->ops->comm_abort(s->comm);
    s->comm = NULL;
  }
}

static int launcher_says_abort(const hk_ctx *ctx) {
  if (ctx->mesh.launcher_fd < 0)
    return 0;
  struct pollfd p = {.fd = ctx->mesh.launcher_fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* hk_device_options.stop: the backend's own waits (the CUDA
 * communicator's settle) end on hkrun's abort too. */
static int stop_requested(void *ctx) { return launcher_says_abort(ctx); }

/* The device work `what` failed (hk_last_error() says how, whether its
 * event or the communicator's async error told first): the communicator
 * is aborted, and one message names the rank and the cause. */
static hk_status comm_failed(struct hk_devset *ds, const char *what) {
  char msg[HK_ERROR_MSG_CAP];
  snprintf(msg, sizeof msg, "%s", hk_last_error());
  abort_comm(ds);
  return hk_fail(HK_ERR_DEVICE,
                 "%s failed on rank %d: %s; the device communicator (%s) "
                 "was aborted",
                 what, ds->ctx->rank, msg, ds->ctx->dev->ops->name);
}

/* One look at e under the watchdog: *done once it has completed; else
 * an error when the communicator reports an async error, hkrun aborts
 * the job, or `deadline` (hk_now()) has passed, the communicator then
 * aborted. */
static hk_status dev_check(struct hk_devset *ds, hk_dev_event e,
                           const char *what, double deadline, int *done) {
  hk_ctx *ctx = ds->ctx;
  const hk_device_ops *o = ctx->dev->ops;
  *done = 0;
  hk_status st = o->event_query(ctx->dev, e, done);
  if (st != HK_OK)
    return comm_failed(ds, what);
  if (*done)
    return HK_OK;
  if (ds->sched.comm) {
    int pending = 0;
    st = o->comm_async_error(ds->sched.comm, &pending);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "%s", hk_last_error());
      /* e may have completed since it was looked at: then the error is a
       * later batch's (in flight behind it), which finds it again */
      if (o->event_query(ctx->dev, e, done) == HK_OK && *done)
        return HK_OK;
      *done = 0;
      hk_fail(HK_ERR_DEVICE, "%s", msg);
      return comm_failed(ds, what);
    }
  }
  if (launcher_says_abort(ctx)) {
    abort_comm(ds);
    return hk_fail(HK_ERR_PEER_LOST,
                   "hkrun stopped the job while rank %d waited for %s",
                   ctx->rank, what);
  }
  if (hk_now() > deadline) {
    abort_comm(ds);
    return hk_fail(HK_ERR_TIMEOUT,
                   "%s did not complete within HK_TIMEOUT_S = %g s on rank "
                   "%d (device work hung: a rank stopped inside the device "
                   "communicator?); the communicator was aborted",
                   what, ctx->cfg.timeout_s, ctx->rank);
  }
  return HK_OK;
}

/* Waits for e until `deadline` under dev_check's watchdog, looking with
 * the wait policy's back-off (hk_waiter_nap): the event has no file
 * descriptor to sleep on. */
static hk_status dev_wait_until(struct hk_devset *ds, hk_dev_event e,
                                const char *what, double deadline) {
  long ns = HK_WAITER_NAP_MIN_NS;
  for (;;) {
    int done = 0;
    hk_status st = dev_check(ds, e, what, deadline, &done);
    if (st != HK_OK || done)
      return st;
    hk_waiter_nap(&ns);
  }
}

/* The schedules' watchdog (hk_dev_sched.wait): e within HK_TIMEOUT_S. */
static hk_status dev_wait(void *arg, hk_dev_event e, const char *what) {
  struct hk_devset *ds = arg;
  return dev_wait_until(ds, e, what, hk_now() + ds->ctx->cfg.timeout_s);
}

/* ---- per-tensor events, reused ---- */

/* An event for a handle (without timing): a spare one, else a new one.
 * Any thread. Errors: the backend's event_create. */
static hk_status event_get(hk_ctx *ctx, hk_dev_event *out) {
  struct hk_devplane *g = ctx->gpu;
  *out = NULL;
  if (g) {
    pthread_mutex_lock(&g->pool_mu);
    if (g->npool > 0)
      *out = g->pool[--g->npool];
    pthread_mutex_unlock(&g->pool_mu);
    if (*out)
      return HK_OK;
  }
  return ctx->dev->ops->event_create(ctx->dev, out);
}

/* Gives back what event_get gave (NULL is fine): kept while the pool has
 * room (a later record replaces its capture; a stream that waited on it
 * waited on the capture it had then), else destroyed. Any thread. */
static void event_put(hk_ctx *ctx, hk_dev_event e) {
  struct hk_devplane *g = ctx->gpu;
  if (!e)
    return;
  if (g) {
    pthread_mutex_lock(&g->pool_mu);
    int kept = g->npool < EVENT_POOL;
    if (kept)
      g->pool[g->npool++] = e;
    pthread_mutex_unlock(&g->pool_mu);
    if (kept)
      return;
  }
  ctx->dev->ops->event_destroy(ctx->dev, e);
}

/* ---- the caller's current device ---- */

/* The calling thread's current device (device.h: current), to be put back
 * by caller_restore: every backend call makes hk's device current, and a
 * trainer thread that chose another GPU must keep it (its next
 * allocation would land on hk's). Trainer-thread entries only; the
 * background thread is hk's own. -1 without a backend. */
static int caller_device(const hk_ctx *ctx) {
  return ctx->dev ? ctx->dev->ops->current(ctx->dev) : -1;
}

static void caller_restore(const hk_ctx *ctx, int cur) {
  if (ctx->dev)
    ctx->dev->ops->set_current(ctx->dev, cur);
}

/* ---- set-up ---- */

static const char *const backend_names[] = {"auto", "cuda", "emu", "none"};

static hk_status open_backend(hk_ctx *ctx) {
  const hk_config *c = &ctx->cfg;
  if (c->device == HK_DEVICE_NONE) {
    snprintf(ctx->dev_missing, sizeof ctx->dev_missing,
             "HK_DEVICE=none: this job takes host tensors only");
    return HK_OK;
  }
  /* HK_GPU as it is, else the local rank modulo the visible count */
  hk_device_options opts = {.device_index =
                                c->gpu >= 0 ? c->gpu : ctx->local_rank,
                            .by_local_rank = c->gpu < 0,
                            .fault = {.kind = c->emu_fault_kind,
                                      .rank = c->emu_fault_rank,
                                      .op_index = c->emu_fault_op,
                                      .delay_ms = c->emu_fault_ms},
                            .emu_devices = c->emu_devices,
                            .timeout_s = c->timeout_s,
                            .stop = stop_requested,
                            .stop_arg = ctx,
                            .job_rank = ctx->rank};
  /* auto is cuda where it opens; otherwise why not is kept for the error
   * a device tensor would get */
  const char *kind =
      c->device == HK_DEVICE_AUTO ? "cuda" : backend_names[c->device];
  hk_status st = hk_device_open(kind, &opts, &ctx->dev);
  if (st != HK_OK && c->device == HK_DEVICE_AUTO) {
    snprintf(ctx->dev_missing, sizeof ctx->dev_missing,
             "hk has no GPU backend here (HK_DEVICE=auto): %s",
             hk_last_error());
    hk_clear_error();
    ctx->dev = NULL;
    return HK_OK;
  }
  if (st != HK_OK)
    return st;
  else
    hk_log(HK_LOG_INFO, "device backend %s: %s", ctx->dev->ops->name,
           ctx->dev->ops->describe(ctx->dev));
  return HK_OK;
}

/* The world's schedule environment, without touching the device: what
 * the device entries of the allreduce table run on. */
static void plane_init(hk_ctx *ctx, struct hk_devplane *g) {
  hk_dev_sched *s = &g->world.sched;
  g->world.ctx = ctx;
  s->dev = ctx->dev;
  s->local_rank = ctx->local_rank;
  s->local_size = ctx->local_size;
  s->wait = dev_wait;
  s->wait_arg = &g->world;
  s->chunk_bytes = ctx->cfg.staging_chunk_bytes;
  ctx->ar.dev = s;
  ctx->sets[0]->dev = &g->world;
  g->inflight = ctx->cfg.device_inflight < 1 ? 1
                : ctx->cfg.device_inflight > HK_DEV_INFLIGHT_MAX
                    ? HK_DEV_INFLIGHT_MAX
                    : ctx->cfg.device_inflight;
}

/* hk's streams and events (those still missing: a failed attempt is
 * finished by the next). On CUDA the first of them makes the process's
 * context on hk's device (~0.3-2 s and ~500 MB), which is why this waits
 * for the first device tensor (plane_live). */
static hk_status make_streams(hk_ctx *ctx, struct hk_devplane *g) {
  hk_dev_sched *s = &g->world.sched;
  const hk_device_ops *o = ctx->dev->ops;
  hk_status st = HK_OK;
  hk_dev_stream *streams[3] = {&s->stream, &s->d2h, &s->h2d};
  for (int i = 0; i < 3 && st == HK_OK; i++)
    if (!*streams[i])
      st = o->stream_create(ctx->dev, streams[i]);
  for (int i = 0; i < HK_DEV_SLOTS && st == HK_OK; i++) {
    if (!s->ev_d2h[i])
      st = o->event_create(ctx->dev, &s->ev_d2h[i]);
    if (st == HK_OK && !s->ev_h2d[i])
      st = o->event_create(ctx->dev, &s->ev_h2d[i]);
  }
  if (st == HK_OK && !s->ev_ready)
    st = o->event_create(ctx->dev, &s->ev_ready);
  if (st == HK_OK && !g->ev_done)
    st = o->event_create(ctx->dev, &g->ev_done);
  /* the batches' events time the timeline's phases: timed; every other
   * event is made without timing (cheaper to record and wait on) */
  for (int i = 0; i < g->inflight && st == HK_OK; i++)
    for (int j = 0; j < 4 && st == HK_OK; j++)
      if (!g->fl[i].ev[j])
        st = o->event_create_timed(ctx->dev, &g->fl[i].ev[j]);
  return st;
}

/* Makes hk's streams and events at the first device tensor this process
 * sees (its capture on a trainer thread, or a batch the background
 * thread runs: a joined rank runs device batches without a tensor of its
 * own), once; then a load. Any thread (the caller's current device is put
 * back by the caller). Errors: the backend's. */
static hk_status plane_live(hk_ctx *ctx) {
  struct hk_devplane *g = ctx->gpu;
  if (atomic_load_explicit(&g->live, memory_order_acquire))
    return HK_OK;
  pthread_mutex_lock(&g->live_mu);
  hk_status st = HK_OK;
  if (!atomic_load_explicit(&g->live, memory_order_relaxed)) {
    st = make_streams(ctx, g);
    if (st == HK_OK)
      atomic_store_explicit(&g->live, 1, memory_order_release);
  }
  pthread_mutex_unlock(&g->live_mu);
  return st;
}

/* A set's schedule runs on the world's streams and events, made after the
 * set may have been opened: its copies of them, refreshed (background
 * thread, after plane_live). */
static void share_streams(struct hk_devplane *g, struct hk_devset *ds) {
  if (ds == &g->world)
    return;
  const hk_dev_sched *w = &g->world.sched;
  hk_dev_sched *s = &ds->sched;
  s->stream = w->stream;
  s->d2h = w->d2h;
  s->h2d = w->h2d;
  memcpy(s->ev_d2h, w->ev_d2h, sizeof s->ev_d2h);
  memcpy(s->ev_h2d, w->ev_h2d, sizeof s->ev_h2d);
  s->ev_ready = w->ev_ready;
}

hk_status hk_devplane_open(hk_ctx *ctx) {
  hk_status st = open_backend(ctx); /* makes no context, no current device */
  if (st == HK_OK && ctx->dev) {
    struct hk_devplane *g = calloc(1, sizeof *g);
    if (!g)
      return hk_fail(HK_ERR_NOMEM, "cannot allocate the device plane");
    pthread_mutex_init(&g->pool_mu, NULL);
    pthread_mutex_init(&g->live_mu, NULL);
    ctx->gpu = g;
    plane_init(ctx, g);
  }
  return st;
}

/* At close: may the job's communicators be destroyed (the job ended by
 * an agreed shutdown, or not at all), or must they be aborted (it failed:
 * peers may hang in them)? The background thread has stopped. */
static int comm_healthy(const hk_ctx *ctx) {
  return ctx->failure == HK_OK || ctx->failure == HK_ERR_SHUTDOWN;
}

void hk_devplane_close(hk_ctx *ctx) {
  struct hk_devplane *g = ctx->gpu;
  const int cur = caller_device(ctx);
  ctx->ar.dev = NULL;
  if (ctx->sets)
    ctx->sets[0]->dev = NULL;
  if (g) {
    hk_dev_sched *s = &g->world.sched;
    const hk_device_ops *o = ctx->dev->ops;
    /* a job that failed (an elastic job's lost rank among them) may have
     * peers hanging in the communicator: abort it, never destroy it; an
     * agreed shutdown destroys it (an abort would reach peers still
     * finishing their last operations on it) */
    if (s->comm && !comm_healthy(ctx))
      o->comm_abort(s->comm);
    else if (s->comm)
      o->comm_destroy(s->comm);
    if (s->stream)
      o->stream_destroy(ctx->dev, s->stream);
    if (s->d2h)
      o->stream_destroy(ctx->dev, s->d2h);
    if (s->h2d)
      o->stream_destroy(ctx->dev, s->h2d);
    for (int i = 0; i < HK_DEV_SLOTS; i++) {
      if (s->ev_d2h[i])
        o->event_destroy(ctx->dev, s->ev_d2h[i]);
      if (s->ev_h2d[i])
        o->event_destroy(ctx->dev, s->ev_h2d[i]);
      o->host_free(ctx->dev, s->slot[i]);
    }
    if (s->ev_ready)
      o->event_destroy(ctx->dev, s->ev_ready);
    if (g->ev_done)
      o->event_destroy(ctx->dev, g->ev_done);
    for (int i = 0; i < HK_DEV_INFLIGHT_MAX; i++)
      for (int j = 0; j < 4; j++)
        if (g->fl[i].ev[j])
          o->event_destroy(ctx->dev, g->fl[i].ev[j]);
    for (int i = 0; i < g->npool; i++)
      o->event_destroy(ctx->dev, g->pool[i]);
    pthread_mutex_destroy(&g->pool_mu);
    pthread_mutex_destroy(&g->live_mu);
    o->mem_free(ctx->dev, g->fusion);
    free(s->segs);
    free(g->items);
    free(g->seg);
    free(g->off);
    free(g);
    ctx->gpu = NULL;
  }
  caller_restore(ctx, cur);
  hk_device_close(ctx->dev);
  ctx->dev = NULL;
}

/* ---- submit side ---- */

/* The trainer thread's producer stream (hk_set_stream): per-thread state
 * of the API, like hk_last_error's message. */
static _Thread_local void *tl_stream;

void *hk_devplane_stream(void) { return tl_stream; }
void hk_devplane_set_stream(void *stream) { tl_stream = stream; }

/* Whether p is device memory: the backend's answer, or without one the
 * answer of a CUDA driver the process loaded itself (device/foreign.h),
 * found once per tensor. *on receives the device of device memory (hk's
 * own without a backend: there is none to compare with). */
static int is_device(const hk_ctx *ctx, hk_foreign_driver drv, const void *p,
                     int *on) {
  *on = ctx->dev ? ctx->dev->index : 0;
  if (!p)
    return 0;
  if (ctx->dev)
    return ctx->dev->ops->pointer_kind(ctx->dev, p, on) == HK_MEM_DEVICE;
  return hk_foreign_is_device(drv, p);
}

void hk_devplane_classify(const hk_ctx *ctx, hk_wire_request *req,
                          const void *send, const void *recv) {
  hk_foreign_driver drv = {NULL};
  if (!ctx->dev && (send || recv))
    drv = hk_foreign_driver_find();
  const int cur = caller_device(ctx);
  int son, ron;
  int sd = is_device(ctx, drv, send, &son),
      rd = is_device(ctx, drv, recv, &ron);
  if (!send)
    sd = rd;
  if (!recv)
    rd = sd;
  caller_restore(ctx, cur);
  req->mem = sd && rd ? HK_WIRE_MEM_DEVICE
             : sd     ? HK_WIRE_MEM_SEND_DEVICE_RECV_HOST
             : rd     ? HK_WIRE_MEM_SEND_HOST_RECV_DEVICE
                      : HK_WIRE_MEM_HOST;
  /* a buffer on another GPU: hk's kernels would read peer memory (and
   * poison the context); refused by the negotiation on every rank, the
   * devices named here, where they are known */
  const int hk_gpu = ctx->dev ? ctx->dev->index : 0;
  const int other = sd && send && son != hk_gpu   ? son
                    : rd && recv && ron != hk_gpu ? ron
                                                  : -1;
  if (other >= 0) {
    req->mem = HK_WIRE_MEM_OTHER_DEVICE;
    hk_log(HK_LOG_ERROR,
           "tensor '%s': its buffer is on GPU %d, but hk uses GPU %d on rank "
           "%d (HK_GPU, or the local rank modulo the visible count): refused",
           req->name, other, hk_gpu, ctx->rank);
  }
}

hk_status hk_devplane_capture(hk_ctx *ctx, hk_handle h, void *producer) {
  if (h->req.mem == HK_WIRE_MEM_HOST || !ctx->dev)
    return HK_OK;
  const hk_device_ops *o = ctx->dev->ops;
  const int cur = caller_device(ctx);
  hk_status st = ctx->gpu ? plane_live(ctx) : HK_OK;
  if (st == HK_OK)
    st = event_get(ctx, &h->ready);
  if (st == HK_OK)
    st = o->event_record(ctx->dev, h->ready, (hk_dev_stream)producer);
  caller_restore(ctx, cur);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    hk_devplane_release(ctx, h);
    return hk_fail(HK_ERR_DEVICE,
                   "tensor '%s': cannot record the producer stream's event: "
                   "%s",
                   h->req.name, msg);
  }
  return HK_OK;
}

void hk_devplane_release(hk_ctx *ctx, hk_handle h) {
  if (ctx && ctx->dev && (h->ready || h->done_ev)) {
    const int cur = caller_device(ctx);
    event_put(ctx, h->ready);
    event_put(ctx, h->done_ev);
    caller_restore(ctx, cur);
  }
  h->ready = h->done_ev = NULL;
}

hk_status hk_devplane_order_after(hk_ctx *ctx, void *stream, hk_dev_event e) {
  const int cur = caller_device(ctx);
  hk_status st =
      ctx->dev->ops->stream_wait_event(ctx->dev, (hk_dev_stream)stream, e);
  caller_restore(ctx, cur);
  if (st != HK_OK)
    return hk_fail(HK_ERR_DEVICE, "hk_wait_stream: %s", hk_last_error());
  return HK_OK;
}

void *hk_devplane_work_stream(hk_ctx *ctx) {
  if (!ctx || !ctx->gpu)
    return NULL;
  /* asked before any device tensor: made now (plane_live) */
  const int cur = caller_device(ctx);
  hk_status st = plane_live(ctx);
  caller_restore(ctx, cur);
  if (st != HK_OK) {
    hk_clear_error();
    return NULL;
  }
  return (void *)ctx->gpu->world.sched.stream;
}

/* Each tensor's own event after the unpack, then tells hk_wait_stream
 * callers that they may order their streams after it. A tensor whose
 * event cannot be made is simply waited on the host. */
static void publish(hk_ctx *ctx, hk_handle *hs, uint32_t k) {
  const hk_device_ops *o = ctx->dev->ops;
  hk_dev_stream s = ctx->gpu->world.sched.stream;
  for (uint32_t i = 0; i < k; i++) {
    if (hs[i]->phantom || hs[i]->parent)
      continue; /* nobody waits on it alone */
    if (event_get(ctx, &hs[i]->done_ev) != HK_OK) {
      hs[i]->done_ev = NULL;
      continue;
    }
    if (o->event_record(ctx->dev, hs[i]->done_ev, s) != HK_OK) {
      event_put(ctx, hs[i]->done_ev);
      hs[i]->done_ev = NULL;
    }
  }
  pthread_mutex_lock(&ctx->mu);
  for (uint32_t i = 0; i < k; i++)
    hs[i]->enqueued = hs[i]->done_ev != NULL;
  pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->mu);
}

/* ---- the background thread's side ---- */

static hk_status need_device(hk_ctx *ctx, const char *name) {
  if (ctx->dev)
    return HK_OK;
  return hk_fail(HK_ERR_DEVICE, "tensor '%s' is in device memory, but %s", name,
                 ctx->dev_missing);
}

static hk_status ensure_comm(hk_ctx *ctx, struct hk_devset *ds) {
  hk_dev_sched *s = &ds->sched;
  if (s->comm || s->local_size == 1)
    return HK_OK;
  if (ds->comm_tried)
    return hk_fail(HK_ERR_DEVICE,
                   "the device communicator was aborted after an earlier "
                   "failure");
  ds->comm_tried = 1;
  /* non-blocking: the first operation's wait watches its progress */
  return ctx->dev->ops->comm_init(ctx->dev, ds->uid, s->local_size,
                                  s->local_rank, &s->comm);
}

/* The world's staging slots, made on first use, lent to ds. */
static hk_status ensure_slots(hk_ctx *ctx, struct hk_devset *ds) {
  hk_dev_sched *s = &ctx->gpu->world.sched;
  for (int i = 0; i < HK_DEV_SLOTS; i++)
    if (!s->slot[i]) {
      void *p;
      hk_status st = ctx->dev->ops->host_alloc(ctx->dev, HK_DEV_SLOT_BYTES, &p);
      if (st != HK_OK)
        return st;
      s->slot[i] = p;
    }
  memcpy(ds->sched.slot, s->slot, sizeof s->slot);
  return HK_OK;
}

static hk_status grow(void **p, size_t *cap, size_t want, size_t esz) {
  if (*cap >= want)
    return HK_OK;
  size_t n = want > 2 * *cap ? want : 2 * *cap;
  void *q = realloc(*p, n * esz);
  if (!q)
    return hk_fail(HK_ERR_NOMEM, "cannot grow a device work list to %zu", n);
  *p = q;
  *cap = n;
  return HK_OK;
}

static hk_status ensure_fusion(hk_ctx *ctx, size_t bytes) {
  struct hk_devplane *g = ctx->gpu;
  if (g->fusion_bytes >= bytes)
    return HK_OK;
  const hk_device_ops *o = ctx->dev->ops;
  if (g->fusion) { /* the old one may still be read by queued work */
    hk_status st = o->event_record(ctx->dev, g->ev_done, g->world.sched.stream);
    if (st == HK_OK)
      st = dev_wait(&g->world, g->ev_done,
                    "the device fusion buffer's last use");
    if (st != HK_OK)
      return st;
    o->mem_free(ctx->dev, g->fusion);
    g->fusion = NULL;
    g->fusion_bytes = 0;
  }
  size_t want =
      bytes > ctx->cfg.fusion_threshold ? bytes : ctx->cfg.fusion_threshold;
  void *p;
  hk_status st = o->mem_alloc(ctx->dev, want, &p);
  if (st != HK_OK)
    return st;
  g->fusion = p;
  g->fusion_bytes = want;
  return HK_OK;
}

static hk_dtype wire_dtype(const hk_ctx *ctx, hk_dtype d) {
  if (d != HK_FLOAT32)
    return d;
  return ctx->cfg.compression == HK_COMPRESS_FP16   ? HK_FLOAT16
         : ctx->cfg.compression == HK_COMPRESS_BF16 ? HK_BFLOAT16
                                                    : d;
}

/* Lays tensors hs[0..k) out in nseg padded segments; fills g->items with
 * the pack (to_dev) or unpack copies. Returns the padded segment length
 * through *seglen. */
static hk_status layout(hk_ctx *ctx, hk_handle *hs, uint32_t k, size_t nseg,
                        int pack, int32_t divisor, int size, size_t wsz,
                        size_t *seglen, size_t *nitems) {
  struct hk_devplane *g = ctx->gpu;
  hk_status st = grow((void **)&g->items, &g->items_cap, (size_t)k * nseg,
                      sizeof *g->items);
  if (st == HK_OK)
    st = grow((void **)&g->seg, &g->seg_cap, nseg + 1, sizeof *g->seg);
  if (st == HK_OK)
    st = grow((void **)&g->off, &g->off_cap, nseg, sizeof *g->off);
  if (st != HK_OK)
    return st;
  memset(g->off, 0, nseg * sizeof *g->off);
  /* segment j of the batch = segment j of every tensor, in order */
  for (uint32_t i = 0; i < k; i++) {
    hk_ring_default_segments(hs[i]->req.count, (int)nseg, g->seg);
    for (size_t j = 0; j < nseg; j++)
      g->off[j] += g->seg[j + 1] - g->seg[j];
  }
  size_t L = 0;
  for (size_t j = 0; j < nseg; j++)
    L = g->off[j] > L ? g->off[j] : L;
  *seglen = L;
  memset(g->off, 0, nseg * sizeof *g->off);
  /* a 16-bit average (as it travels: compression too) divides by a power
   * of two in the pack and multiplies it back in the unpack, so the sum
   * cannot overflow where the average would not (device/host/reduce.h) */
  const double pre = hk_average_pre_divisor(
      wire_dtype(ctx, (hk_dtype)hs[0]->req.dtype), (hk_op)hs[0]->req.op,
      divisor > 0 ? divisor : size);
  size_t n = 0;
  for (uint32_t i = 0; i < k; i++) {
    const hk_wire_request *q = &hs[i]->req;
    const size_t esz = hk_dtype_size((hk_dtype)q->dtype);
    hk_ring_default_segments(q->count, (int)nseg, g->seg);
    for (size_t j = 0; j < nseg; j++) {
      size_t len = g->seg[j + 1] - g->seg[j];
      if (!len)
        continue;
      uint8_t *dev = g->fusion + (j * L + g->off[j]) * wsz;
      g->off[j] += len;
      hk_dev_copy *c = &g->items[n++];
      if (pack)
        *c = (hk_dev_copy){
            dev, (const uint8_t *)hs[i]->sendbuf + g->seg[j] * esz,
            len, q->prescale / pre,
            1,   1.0};
      else
        *c = (hk_dev_copy){
            (uint8_t *)hs[i]->recvbuf + g->seg[j] * esz, dev, len, q->postscale,
            q->op == HK_AVERAGE ? divisor : 1,           pre};
    }
  }
  *nitems = n;
  return HK_OK;
}

/* One member's record in the id exchange: its job rank and what it made
 * (zero unless it is its host's first member). */
typedef struct uid_record {
  int32_t rank;
  uint8_t uid[HK_DEV_UID_BYTES];
} uid_record;

/*
 * Set `set`'s communicator id for this rank's host (ds->uid; ds NULL on a
 * rank without a device, which still takes part), exchanged among the
 * set's members over the set's ring at the set's first device batch that
 * needs the communicator: every member runs that batch at the same point
 * of the same round (the allreduce table's choice is the same on each).
 * The set's first member on each host (in the set's rank order) makes the
 * id when the set has others there. Made here, not at hk_init or at the
 * set's add, so that a job of host tensors starts no communicator's
 * listener (NCCL's ncclGetUniqueId starts one). Background thread.
 * Errors: the backend's (the exchange is still run, so no peer waits), the
 * ring's, HK_ERR_NOMEM.
 */
static hk_status exchange_uid(hk_ctx *ctx, hk_set *set, struct hk_devset *ds) {
  set->dev_uid_done = 1;
  const int n = set->size;
  if (n == 1)
    return HK_OK;
  const int host = ctx->layout ? ctx->layout[ctx->rank].cross_rank : 0;
  int first = -1, here = 0;
  for (int j = 0; j < n; j++)
    if (!ctx->layout || ctx->layout[set->ranks[j]].cross_rank == host) {
      if (first < 0)
        first = set->ranks[j];
      here++;
    }
  uid_record *all = calloc((size_t)n + 1, sizeof *all);
  if (!all)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the communicator ids");
  uid_record *mine = all + n;
  mine->rank = ctx->rank;
  hk_status made = HK_OK;
  char msg[HK_ERROR_MSG_CAP] = "";
  if (ds && first == ctx->rank && here > 1) {
    made = ctx->dev->ops->comm_unique_id(ctx->dev, mine->uid);
    if (made != HK_OK)
      snprintf(msg, sizeof msg, "%s", hk_last_error());
  }
  /* every member takes part, with or without an id */
  hk_status st = hk_ring_allgather_records(set->ring, mine, sizeof *mine, all);
  for (int j = 0; st == HK_OK && ds && j < n; j++)
    if (all[j].rank == first)
      memcpy(ds->uid, all[j].uid, HK_DEV_UID_BYTES);
  free(all);
  if (made != HK_OK)
    return hk_fail(made, "%s", msg);
  return st;
}

hk_status hk_devplane_allreduce(hk_ctx *ctx, hk_set *set, hk_handle *hs,
                                uint32_t k, int32_t divisor,
                                const hk_allreduce_impl *a) {
  struct hk_devset *ds = set->dev; /* NULL without a device */
  hk_status st = HK_OK;
  /* first, so that a member without a device (it fails below) does not
   * leave the others waiting in the exchange */
  if ((a->needs & HK_ALLREDUCE_NEEDS_COMM) && !set->dev_uid_done)
    st = exchange_uid(ctx, set, ds);
  if (st == HK_OK)
    st = need_device(ctx, hs[0]->req.name);
  if (st == HK_OK)
    st = plane_live(ctx);
  if (st != HK_OK)
    return st;
  struct hk_devplane *g = ctx->gpu;
  share_streams(g, ds);
  if (g->nfl >= g->inflight)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%d device batches are in flight already "
                   "(HK_DEVICE_INFLIGHT): the oldest must complete first",
                   g->nfl);
  struct hk_devflight *f = &g->fl[(g->head + g->nfl) % g->inflight];
  hk_dev_sched *s = &ds->sched;
  const hk_device_ops *o = ctx->dev->ops;
  const hk_dtype dtype = (hk_dtype)hs[0]->req.dtype;
  const hk_dtype wdt = wire_dtype(ctx, dtype);
  const size_t wsz = hk_dtype_size(wdt);
  size_t total = 0;
  for (uint32_t i = 0; i < k; i++)
    total += hs[i]->req.count;
  const size_t nseg = a->segments(set->ar);
  /* the padded layout is at most nseg elements per tensor longer */
  size_t bound = (total + (size_t)k * nseg) * wsz;
  if (a->needs & HK_ALLREDUCE_NEEDS_COMM)
    st = ensure_comm(ctx, ds);
  if (st == HK_OK && (a->needs & HK_ALLREDUCE_NEEDS_SLOTS))
    st = ensure_slots(ctx, ds);
  if (st == HK_OK)
    st = ensure_fusion(ctx, bound ? bound : 1);
  for (uint32_t i = 0; i < k && st == HK_OK; i++) /* wait for producers */
    if (hs[i]->ready)
      st = o->stream_wait_event(ctx->dev, s->stream, hs[i]->ready);
  size_t seglen = 0, n = 0;
  if (st == HK_OK)
    st = o->event_record(ctx->dev, f->ev[0], s->stream);
  if (st == HK_OK)
    st = layout(ctx, hs, k, nseg, 1, divisor, set->size, wsz, &seglen, &n);
  if (st == HK_OK && n)
    st = o->batch_copy(ctx->dev, g->items, n, dtype, wdt, s->stream);
  if (st == HK_OK)
    st = o->event_record(ctx->dev, f->ev[1], s->stream);
  if (st == HK_OK) {
    hk_allreduce_call call = {.dst = g->fusion,
                              .nseg = nseg,
                              .seglen = seglen,
                              .dtype = wdt,
                              .op = (hk_op)hs[0]->req.op};
    st = a->run(set->ar, &call);
  }
  if (st == HK_OK)
    st = o->event_record(ctx->dev, f->ev[2], s->stream);
  if (st == HK_OK)
    st = layout(ctx, hs, k, nseg, 0, divisor, set->size, wsz, &seglen, &n);
  if (st == HK_OK && n)
    st = o->batch_copy(ctx->dev, g->items, n, wdt, dtype, s->stream);
  if (st == HK_OK)
    st = o->event_record(ctx->dev, f->ev[3], s->stream);
  if (st != HK_OK) { /* any failure, the watchdog's or an enqueue's: the
                        peers' operations end too, and nothing waits again */
    abort_comm(ds);
    return st;
  }
  publish(ctx, hs, k);
  /* in flight: hk_devplane_oldest_done sees it complete */
  f->ds = ds;
  f->since = hk_now();
  g->nfl++;
  return HK_OK;
}

void hk_devplane_abandon(hk_ctx *ctx) {
  struct hk_devplane *g = ctx->gpu;
  if (!g)
    return;
  for (int i = 0; i < g->nfl; i++)
    abort_comm(g->fl[(g->head + i) % g->inflight].ds);
  g->head = 0;
  g->nfl = 0;
}

int hk_devplane_inflight(const hk_ctx *ctx) {
  const struct hk_devplane *g = ctx->gpu;
  return g ? g->nfl : 0;
}

int hk_devplane_inflight_max(const hk_ctx *ctx) {
  const struct hk_devplane *g = ctx->gpu;
  return g ? g->inflight : 1;
}

int hk_devplane_oldest_ended(hk_ctx *ctx) {
  struct hk_devplane *g = ctx->gpu;
  if (!g || g->nfl == 0)
    return 0;
  int done = 0;
  return ctx->dev->ops->event_query(ctx->dev, g->fl[g->head].ev[3], &done) !=
             HK_OK ||
         done;
}

hk_status hk_devplane_oldest_done(hk_ctx *ctx, int wait, int *done,
                                  double phase_s[3]) {
  struct hk_devplane *g = ctx->gpu;
  *done = 0;
  phase_s[0] = phase_s[1] = phase_s[2] = 0;
  if (!g || g->nfl == 0)
    return HK_OK;
  const hk_device_ops *o = ctx->dev->ops;
  struct hk_devflight *f = &g->fl[g->head];
  /* its HK_TIMEOUT_S runs from when it became the oldest: a batch queued
   * behind a slow one is not blamed for that one's time */
  const double deadline = f->since + ctx->cfg.timeout_s;
  const char *what = "the device allreduce";
  hk_status st = wait ? dev_wait_until(f->ds, f->ev[3], what, deadline)
                      : dev_check(f->ds, f->ev[3], what, deadline, done);
  if (st != HK_OK) {
    /* the communicator is aborted: every later batch fails too, and the
     * job with them; nothing of them is waited for again */
    hk_devplane_abandon(ctx);
    return st;
  }
  if (wait)
    *done = 1;
  if (!*done)
    return HK_OK;
  /* the GPU's own clock for the timeline: pack, schedule, unpack */
  for (int i = 0; i < 3; i++) {
    float ms = 0;
    if (o->event_elapsed(ctx->dev, f->ev[i], f->ev[i + 1], &ms) != HK_OK)
      ms = 0;
    phase_s[i] = ms * 1e-3;
  }
  g->head = (g->head + 1) % g->inflight;
  g->nfl--;
  if (g->nfl)
    g->fl[g->head].since = hk_now();
  return HK_OK;
}

hk_status hk_devplane_copy(hk_ctx *ctx, hk_handle h, void *dst, const void *src,
                           size_t bytes) {
  hk_status st = need_device(ctx, h ? h->req.name : "(output)");
  if (st == HK_OK && bytes)
    st = plane_live(ctx);
  if (st != HK_OK || bytes == 0)
    return st;
  struct hk_devplane *g = ctx->gpu;
  const hk_device_ops *o = ctx->dev->ops;
  if (h && h->ready)
    st = o->stream_wait_event(ctx->dev, g->world.sched.stream, h->ready);
  if (st == HK_OK)
    st = o->memcpy_async(ctx->dev, dst, src, bytes, g->world.sched.stream);
  if (st == HK_OK)
    st = o->event_record(ctx->dev, g->ev_done, g->world.sched.stream);
  if (st == HK_OK)
    st = dev_wait(&g->world, g->ev_done, "a staging copy");
  if (st != HK_OK)
    abort_comm(&g->world);
  return st;
}

/* ---- process sets ---- */

hk_status hk_devplane_set_open(hk_ctx *ctx, hk_set *s) {
  struct hk_devplane *g = ctx->gpu;
  if (!g)
    return HK_OK;
  struct hk_devset *ds = calloc(1, sizeof *ds);
  if (!ds)
    return hk_fail(HK_ERR_NOMEM,
                   "cannot allocate process set %d's device "
                   "communicator",
                   (int)s->id);
  ds->ctx = ctx;
  ds->sched = g->world.sched; /* the world's streams, events, slots */
  ds->sched.comm = NULL;
  ds->sched.segs = NULL;
  ds->sched.segs_cap = 0;
  ds->sched.wait_arg = ds;
  /* its members on this host, in rank order */
  const int host = ctx->cross_rank;
  ds->sched.local_size = 0;
  for (int j = 0; j < s->size; j++)
    if (ctx->layout[s->ranks[j]].cross_rank == host) {
      if (s->ranks[j] == ctx->rank)
        ds->sched.local_rank = ds->sched.local_size;
      ds->sched.local_size++;
    }
  s->dev = ds;
  s->own_ar.dev = &ds->sched;
  return HK_OK;
}

void hk_devplane_set_staging(hk_set *s, size_t bytes) {
  if (s->dev) /* (the world's is the plane's own: sets opened later copy
                 it) */
    s->dev->sched.chunk_bytes = bytes;
}

void hk_devplane_set_close(hk_ctx *ctx, hk_set *s) {
  struct hk_devset *ds = s->dev;
  if (!ds || s->id == 0) /* the world's goes with the plane */
    return;
  if (ds->sched.comm && !comm_healthy(ctx))
    ctx->dev->ops->comm_abort(ds->sched.comm); /* peers may hang in it */
  else if (ds->sched.comm)
    ctx->dev->ops->comm_destroy(ds->sched.comm);
  free(ds->sched.segs);
  free(ds);
  s->dev = NULL;
  s->own_ar.dev = NULL;
}

hk_status hk_devplane_alloc(hk_ctx *ctx, size_t bytes, void **out) {
  hk_status st = need_device(ctx, "(output)");
  return st != HK_OK ? st : ctx->dev->ops->mem_alloc(ctx->dev, bytes, out);
}

void hk_devplane_free(hk_ctx *ctx, void *p) {
  if (!p)
    return;
  if (!ctx || !ctx->dev) {
    free(p);
    return;
  }
  const int cur = caller_device(ctx);
  if (ctx->dev->ops->pointer_kind(ctx->dev, p, NULL) == HK_MEM_DEVICE)
    ctx->dev->ops->mem_free(ctx->dev, p);
  else
    free(p);
  caller_restore(ctx, cur);
}
