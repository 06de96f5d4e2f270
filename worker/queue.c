#include "worker/queue.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/waiter.h"
#include "worker/devplane.h"

/* Moves ctx->settled up to n, never down: two waiters that read
 * `submits` before and after a submit must not store them out of order
 * (the later one's settle would be lost, and its wait held). Every access
 * is sequentially consistent, so the caller's later read of `held` is
 * ordered after this (settle(); no fence: ThreadSanitizer has none). */
static void settle_to(hk_ctx *ctx, uint64_t n) {
  uint64_t cur = __atomic_load_n(&ctx->settled, __ATOMIC_SEQ_CST);
  while (cur < n &&
         !__atomic_compare_exchange_n(&ctx->settled, &cur, n, 1,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
}

/* hk_queue_next_waits: this thread's next submit is waited for at once */
static __thread int next_waits;

void hk_queue_next_waits(int on) { next_waits = on; }

static void wake(hk_ctx *ctx) {
  uint64_t one = 1;
  ssize_t w = write(ctx->wake_fd, &one, sizeof one);
  (void)w; /* an eventfd write only fails when the counter saturates */
}

/* Requires ctx->mu held: the reason a submit must fail, or HK_OK. */
static hk_status refuse_locked(hk_ctx *ctx, const char *name) {
  if (ctx->failure != HK_OK)
    return hk_fail(ctx->failure, "cannot submit '%s': %s", name,
                   ctx->failure_reason);
  if (hk_strmap_get(ctx->inflight, name))
    return hk_fail(HK_ERR_DUPLICATE_NAME,
                   "tensor '%s' is already in flight on rank %d: wait for "
                   "it before submitting the name again",
                   name, ctx->rank);
  return HK_OK;
}

/* Requires ctx->mu held and the name free. */
static hk_status enqueue_locked(hk_ctx *ctx, hk_handle h) {
  hk_status st = hk_strmap_put(ctx->inflight, h->req.name, h);
  if (st != HK_OK)
    return st;
  const double now = hk_now(); /* the burst's clock (hk_queue_take) */
  if (hk_observe_wants_submit_time(&ctx->obs)) /* read-only after hk_init */
    h->t_submit = now;
  if (!ctx->queue_head)
    ctx->queue_since = now;
  ctx->last_submit = now;
  __atomic_store_n(&ctx->submits, ctx->submits + 1, __ATOMIC_SEQ_CST);
  if (next_waits) /* a blocking call: no burst to hold for */
    settle_to(ctx, ctx->submits);
  if (ctx->queue_tail)
    ctx->queue_tail->next = h;
  else
    ctx->queue_head = h;
  ctx->queue_tail = h;
  return HK_OK;
}

hk_status hk_queue_submit(hk_ctx *ctx, const hk_wire_request *req,
                          const void *sendbuf, void *recvbuf,
                          const struct hk_handle_s *outputs, hk_handle *out) {
  /* every field zero but the request, which is copied up to its names'
   * NULs (a calloc and a whole-struct copy wrote 2.4 KB per tensor) */
  hk_handle h = malloc(sizeof *h);
  if (!h)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a handle");
  _Static_assert(offsetof(struct hk_handle_s, req) == 0, "req comes first");
  memset((char *)h + sizeof h->req, 0, sizeof *h - sizeof h->req);
  hk_wire_request_copy(&h->req, req);
  h->sendbuf = sendbuf;
  h->recvbuf = recvbuf;
  hk_devplane_classify(ctx, &h->req, sendbuf, recvbuf);
  hk_status cst = hk_devplane_capture(ctx, h, hk_devplane_stream());
  if (cst != HK_OK) {
    free(outputs ? outputs->splits : NULL);
    free(outputs ? outputs->members : NULL);
    free(h);
    return cst;
  }
  if (outputs) { /* where results go; the splits and members become ours */
    h->out_buf = outputs->out_buf;
    h->out_counts = outputs->out_counts;
    h->out_rows = outputs->out_rows;
    h->splits = outputs->splits;
    h->members = outputs->members;
    h->nmembers = outputs->nmembers;
    h->members_problem = outputs->members_problem;
  }
  pthread_mutex_lock(&ctx->mu);
  /* one wake-up per batch: the background thread takes the whole queue,
   * so only the submit that finds it empty needs to write the eventfd */
  int was_empty = ctx->queue_head == NULL && !ctx->wake_muted;
  hk_status st = refuse_locked(ctx, req->name);
  if (st == HK_OK)
    st = enqueue_locked(ctx, h);
  pthread_mutex_unlock(&ctx->mu);
  next_waits = 0;
  if (st != HK_OK) {
    hk_devplane_release(ctx, h);
    free(h->splits);
    free(h->members);
    free(h);
    return st;
  }
  if (was_empty)
    wake(ctx);
  *out = h;
  return HK_OK;
}

hk_status hk_queue_submit_group(hk_ctx *ctx, hk_handle *members, size_t n,
                                hk_handle *out) {
  hk_handle parent = calloc(1, sizeof *parent);
  if (!parent)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a handle");
  parent->pending = (int)n;
  snprintf(parent->req.name, sizeof parent->req.name, "%s",
           members[0]->req.group);
  hk_status st = HK_OK;
  for (size_t i = 0; i < n && st == HK_OK; i++) {
    hk_devplane_classify(ctx, &members[i]->req, members[i]->sendbuf,
                         members[i]->recvbuf);
    st = hk_devplane_capture(ctx, members[i], hk_devplane_stream());
  }
  if (st != HK_OK) {
    for (size_t i = 0; i < n; i++)
      hk_devplane_release(ctx, members[i]);
    free(parent);
    return st;
  }
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < n && st == HK_OK; i++)
    st = refuse_locked(ctx, members[i]->req.name);
  for (size_t i = 0; i < n && st == HK_OK; i++) {
    members[i]->parent = parent;
    st = enqueue_locked(ctx, members[i]);
  }
  pthread_mutex_unlock(&ctx->mu);
  next_waits = 0;
  if (st != HK_OK) { /* only an allocation can fail after the checks */
    for (size_t i = 0; i < n; i++)
      hk_devplane_release(ctx, members[i]);
    free(parent);
    return st;
  }
  wake(ctx);
  *out = parent;
  return HK_OK;
}

/* Requires ctx->mu held: 1 when the queue is held because its burst goes
 * on (hk_queue_take), with ctx->held_until set. `held` and `settled` are
 * a Dekker pair with settle(): this side raises `held` before it reads
 * `settled`, a waiter moves `settled` before it reads `held`, so a waiter
 * that comes meanwhile is either seen here or, once the thread sleeps
 * (held = 2, hk_queue_hold_sleep, which looks again), wakes it; while it
 * polls, it looks (hk_queue_hold_over). */
static int hold_locked(hk_ctx *ctx) {
  const double gap = ctx->cfg.burst_gap_us * 1e-6,
               most = ctx->cfg.burst_max_us * 1e-6;
  if (!ctx->queue_head || gap <= 0 || most <= 0 || ctx->shutdown_requested)
    return 0;
  double until = ctx->last_submit + gap;
  if (ctx->queue_since + most < until)
    until = ctx->queue_since + most;
  if (hk_now() >= until)
    return 0;
  __atomic_store_n(&ctx->held, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&ctx->settled, __ATOMIC_SEQ_CST) >= ctx->submits)
    return 0; /* a trainer thread waited after the last submit */
  ctx->held_until = until;
  return 1;
}

/* A trainer thread waits or polls: the burst of submits made so far is
 * over; wakes the background thread if it holds the queue
 * (hold_locked). */
static void settle(hk_ctx *ctx) {
  settle_to(ctx, __atomic_load_n(&ctx->submits, __ATOMIC_SEQ_CST));
  if (__atomic_load_n(&ctx->held, __ATOMIC_SEQ_CST) == 2)
    wake(ctx); /* it sleeps: the eventfd (while it polls, it looks) */
}

/* Takes the queue's head: every handle, or (cost not NULL) the longest
 * prefix whose costs add up to at most budget, and always the first;
 * nothing while the queue is held (hold_locked). */
static hk_handle take(hk_ctx *ctx, int quiet, size_t budget,
                      size_t (*cost)(void *arg, hk_handle h), void *arg) {
  pthread_mutex_lock(&ctx->mu);
  if (hold_locked(ctx)) {
    pthread_mutex_unlock(&ctx->mu);
    return NULL;
  }
  __atomic_store_n(&ctx->held, 0, __ATOMIC_RELAXED);
  ctx->held_until = 0;
  hk_handle list = ctx->queue_head, last = NULL;
  size_t spent = 0;
  for (hk_handle h = list; cost && h; last = h, h = h->next) {
    spent += cost(arg, h);
    if (last && spent > budget) { /* the rest stays queued, in order */
      last->next = NULL;
      ctx->queue_head = h;
      break;
    }
  }
  if (ctx->queue_head == list)
    ctx->queue_head = ctx->queue_tail = NULL;
  ctx->wake_muted = quiet && list != NULL;
  pthread_mutex_unlock(&ctx->mu);
  /* the background thread's own index of them (a failed insert only
   * sends hk_queue_find to the locked table); the observers see them */
  for (hk_handle h = list; h; h = h->next) {
    (void)hk_strmap_put(ctx->taken, h->req.name, h);
    hk_obs_tensor t = hk_observed(h, NULL, 0);
    hk_observe_taken(&ctx->obs, &t);
  }
  return list;
}

hk_handle hk_queue_take(hk_ctx *ctx) { return take(ctx, 0, 0, NULL, NULL); }

double hk_queue_held_until(const hk_ctx *ctx) {
  return __atomic_load_n(&ctx->held, __ATOMIC_RELAXED) ? ctx->held_until : 0;
}

int hk_queue_hold_over(hk_ctx *ctx) {
  return __atomic_load_n(&ctx->settled, __ATOMIC_SEQ_CST) >=
         __atomic_load_n(&ctx->submits, __ATOMIC_SEQ_CST);
}

void hk_queue_hold_drop(hk_ctx *ctx) {
  __atomic_store_n(&ctx->held, 0, __ATOMIC_SEQ_CST);
  ctx->held_until = 0;
}

int hk_queue_hold_sleep(hk_ctx *ctx, int on) {
  __atomic_store_n(&ctx->held, on ? 2 : 1, __ATOMIC_SEQ_CST);
  return on && !hk_queue_hold_over(ctx);
}

hk_handle hk_queue_take_bounded(hk_ctx *ctx, size_t budget,
                                size_t (*cost)(void *arg, hk_handle h),
                                void *arg) {
  return take(ctx, 1, budget, cost, arg);
}

hk_handle hk_queue_find(hk_ctx *ctx, const char *name) {
  hk_handle h = hk_strmap_get(ctx->taken, name);
  if (h)
    return h;
  pthread_mutex_lock(&ctx->mu);
  h = hk_strmap_get(ctx->inflight, name);
  pthread_mutex_unlock(&ctx->mu);
  return h;
}

typedef struct each_args {
  void (*fn)(void *arg, hk_handle h, int queued);
  void *arg;
} each_args;

static void each_inflight(const char *key, void *value, void *arg) {
  (void)key;
  const each_args *a = arg;
  a->fn(a->arg, value, 0);
}

void hk_queue_each(hk_ctx *ctx, void (*fn)(void *arg, hk_handle h, int queued),
                   void *arg) {
  each_args a = {fn, arg};
  pthread_mutex_lock(&ctx->mu);
  for (hk_handle q = ctx->queue_head; q; q = q->next)
    fn(arg, q, 1);
  hk_strmap_each(ctx->inflight, each_inflight, &a);
  pthread_mutex_unlock(&ctx->mu);
}

/* Requires ctx->mu held; the background thread only (ctx->taken). */
static void complete_locked(hk_ctx *ctx, hk_handle h, hk_status status,
                            const char *reason) {
  hk_devplane_release(ctx, h);
  if (!h->phantom) {
    hk_strmap_remove(ctx->inflight, h->req.name);
    hk_strmap_remove(ctx->taken, h->req.name);
  }
  hk_handle p = h->parent;
  if (p) { /* a group member: report to the group, then go */
    if (status != HK_OK && p->status == HK_OK) {
      p->status = status;
      p->reason = reason ? strdup(reason) : NULL;
    }
    if (--p->pending == 0) /* release: hk_queue_wait polls it unlocked */
      __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
    free(h->splits);
    free(h->members);
    free(h);
    return;
  }
  if (h->detached) { /* hk_wait_stream has returned: nobody waits */
    if (status != HK_OK)
      hk_log(HK_LOG_ERROR, "tensor '%s', already handed to a stream: %s",
             h->req.name, reason ? reason : hk_strerror(status));
    free(h->splits);
    free(h);
    return;
  }
  h->status = status;
  if (status != HK_OK && reason)
    h->reason = strdup(reason);
  __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE); /* after status, reason */
}

void hk_queue_complete(hk_ctx *ctx, hk_handle h, hk_status status,
                       const char *reason) {
  pthread_mutex_lock(&ctx->mu);
  complete_locked(ctx, h, status, reason);
  pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->mu);
}

void hk_queue_complete_ok(hk_ctx *ctx, hk_handle *hs, size_t n) {
  if (n == 0)
    return;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < n; i++)
    complete_locked(ctx, hs[i], HK_OK, NULL);
  pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->mu);
}

typedef struct fail_args {
  hk_handle list;
  int all; /* every handle, or only those of `set` */
  int32_t set;
} fail_args;

static void collect(const char *key, void *value, void *arg) {
  (void)key;
  fail_args *a = arg;
  hk_handle h = value;
  if (!a->all && h->req.set != a->set)
    return;
  h->next = a->list;
  a->list = h;
}

/* "tensor '<name>': <reason>" into out, the prefix left out when reason
 * already begins with it. */
static void tensor_reason(char *out, size_t cap, const char *name,
                          const char *reason) {
  char own[HK_MAX_NAME_LEN + 16];
  snprintf(own, sizeof own, "tensor '%s': ", name);
  if (strncmp(reason, own, strlen(own)) == 0)
    snprintf(out, cap, "%s", reason);
  else
    snprintf(out, cap, "%s%s", own, reason);
}

hk_status hk_fail_tensor(hk_status st, const char *name, const char *reason) {
  char msg[HK_WIRE_MAX_REASON_LEN + HK_MAX_NAME_LEN + 32];
  tensor_reason(msg, sizeof msg, name, reason);
  return hk_fail(st, "%s", msg);
}

/* Requires ctx->mu held: completes the handles a->list with status and
 * "tensor '<name>': <reason>" (the reason alone when it is about that very
 * tensor already). */
static void fail_listed(hk_ctx *ctx, const fail_args *a, hk_status status,
                        const char *reason) {
  for (hk_handle h = a->list, next; h; h = next) {
    next = h->next;
    char msg[HK_WIRE_MAX_REASON_LEN + HK_MAX_NAME_LEN + 32];
    tensor_reason(msg, sizeof msg, h->req.name, reason);
    complete_locked(ctx, h, status, msg);
  }
}

void hk_queue_fail_set(hk_ctx *ctx, int32_t set, hk_status status,
                       const char *reason) {
  pthread_mutex_lock(&ctx->mu);
  hk_handle *pp = &ctx->queue_head;
  ctx->queue_tail = NULL;
  while (*pp) { /* (still in flight: failed below) */
    if ((*pp)->req.set == set) {
      *pp = (*pp)->next;
    } else {
      ctx->queue_tail = *pp;
      pp = &(*pp)->next;
    }
  }
  fail_args a = {NULL, 0, set};
  hk_strmap_each(ctx->inflight, collect, &a);
  fail_listed(ctx, &a, status, reason);
  pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->mu);
}

void hk_queue_fail_all(hk_ctx *ctx, hk_status status, const char *reason) {
  pthread_mutex_lock(&ctx->mu);
  if (ctx->failure == HK_OK) {
    ctx->failure = status;
    snprintf(ctx->failure_reason, sizeof ctx->failure_reason, "%s", reason);
  }
  ctx->queue_head = ctx->queue_tail = NULL;
  fail_args a = {NULL, 1, 0};
  hk_strmap_each(ctx->inflight, collect, &a);
  fail_listed(ctx, &a, ctx->failure, ctx->failure_reason);
  pthread_cond_broadcast(&ctx->done_cv);
  pthread_mutex_unlock(&ctx->mu);
}

hk_status hk_queue_wait(hk_ctx *ctx, hk_handle h) {
  if (ctx) {
    /* polled, as hk's wait policy says (common/waiter.h), before
     * sleeping on the condition variable; polled without the lock, which
     * the background thread needs to complete it (a polling waiter
     * holding it made the background thread sleep on the lock and cost a
     * futex wake per unlock) */
    settle(ctx);
    /* a handle already complete (a step's later handles, completed in
     * one batch with the first) costs no wait: the policy neither polls
     * nor learns a zero-length wait */
    if (!__atomic_load_n(&h->done, __ATOMIC_ACQUIRE)) {
      hk_waiter w;
      hk_waiter_begin(&w, HK_WAIT_HANDLE, 1);
      int done;
      while (!(done = __atomic_load_n(&h->done, __ATOMIC_ACQUIRE)) &&
             hk_waiter_spin(&w)) {
      }
      if (!done) {
        pthread_mutex_lock(&ctx->mu);
        while (!h->done)
          pthread_cond_wait(&ctx->done_cv, &ctx->mu);
        pthread_mutex_unlock(&ctx->mu);
      }
      hk_waiter_end(&w);
    }
  }
  hk_status st = h->status;
  if (st != HK_OK)
    hk_set_last_error(h->reason ? h->reason : hk_strerror(st));
  else
    hk_clear_error();
  free(h->reason);
  free(h->splits);
  free(h->members);
  free(h);
  return st;
}

void hk_queue_free_phantom(hk_ctx *ctx, hk_handle h) {
  hk_devplane_free(ctx, h->recvbuf); /* host or device */
  free(h->splits);
  free(h);
}

void hk_queue_poll(hk_ctx *ctx, hk_handle h, int *done) {
  pthread_mutex_lock(&ctx->mu);
  *done = h->done;
  pthread_mutex_unlock(&ctx->mu);
  if (!*done)
    settle(ctx);
}

hk_status hk_queue_wait_stream(hk_ctx *ctx, hk_handle h, void *stream) {
  settle(ctx);
  pthread_mutex_lock(&ctx->mu);
  while (!h->done && !h->enqueued)
    pthread_cond_wait(&ctx->done_cv, &ctx->mu);
  if (h->done) { /* completed: the result is in place already */
    pthread_mutex_unlock(&ctx->mu);
    return hk_queue_wait(ctx, h);
  }
  /* Under mu: completion (which destroys done_ev) cannot run meanwhile;
   * the wait is only queued, it does not block. */
  hk_status st = hk_devplane_order_after(ctx, stream, h->done_ev);
  h->detached = st == HK_OK;
  pthread_mutex_unlock(&ctx->mu);
  if (st != HK_OK)
    return hk_queue_wait(ctx, h);
  hk_clear_error();
  return HK_OK;
}
