/*
 * flight.c - the flight recorder's hooks and triggers (flight.h).
 */
#include "worker/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

struct hk_flight {
  hk_flight_ring ring;
  uint64_t round; /* rounds with responses applied so far */
  int64_t off_us; /* CLOCK_REALTIME - CLOCK_MONOTONIC, us */
  int pipe_fd[2]; /* SIGUSR1 -> background thread */
  struct sigaction old_usr1;
  int installed;  /* the handler is ours: restore old_usr1 at close */
  char dir[4096]; /* where records go */
  char next_reason[HK_FLIGHT_REASON_LEN + 1]; /* the reason of the next
                                                 SIGUSR1 dump, or "" */
};

/* The write end of the wake-up pipe for the SIGUSR1 handler, which cannot
 * be given an argument: set before the handler is installed, reset after
 * it is removed. */
static int g_dump_fd = -1;

static void on_usr1(int sig) {
  (void)sig;
  int saved = errno;
  char b = 'd';
  if (g_dump_fd >= 0) {
    ssize_t w = write(g_dump_fd, &b, 1); /* async-signal-safe */
    (void)w; /* a full pipe already holds a request */
  }
  errno = saved;
}

static int64_t clock_us(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Refreshes the realtime offset (NTP may step or slew the wall clock). */
static void refresh_offset(struct hk_flight *f) {
  f->off_us = clock_us(CLOCK_REALTIME) - clock_us(CLOCK_MONOTONIC);
}

/* hk_now() seconds (CLOCK_MONOTONIC) as both clocks, in e's slot k. */
static void stamp(const struct hk_flight *f, hk_flight_entry *e, int k,
                  double t) {
  if (t <= 0)
    return;
  e->mono_us[k] = (int64_t)(t * 1e6);
  e->real_us[k] = e->mono_us[k] + f->off_us;
}

/* Fills an entry's description of h's request. */
static void describe(hk_flight_entry *e, hk_handle h) {
  const hk_wire_request *q = &h->req;
  size_t rows = q->row_elems ? q->row_elems : 1;
  e->kind = (uint8_t)q->coll;
  e->dtype = (uint8_t)q->dtype;
  e->bytes = (uint64_t)q->count * rows * hk_dtype_size((hk_dtype)q->dtype);
  size_t len = strnlen(q->name, HK_FLIGHT_NAME_LEN); /* truncated */
  memcpy(e->name, q->name, len);
  e->name[len] = '\0';
}

hk_status hk_flight_open(hk_ctx *ctx) {
  ctx->flight = NULL;
  if (ctx->cfg.flight_recorder == 0)
    return HK_OK;
  struct hk_flight *f = calloc(1, sizeof *f);
  if (!f)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the flight recorder");
  f->pipe_fd[0] = f->pipe_fd[1] = -1;
  ctx->flight = f;
  hk_status st = hk_flight_ring_init(&f->ring, ctx->cfg.flight_recorder);
  if (st != HK_OK)
    return st;
  const char *dir = ctx->cfg.flight_dir;
  if (!dir[0] && ctx->cfg.timeline[0]) { /* beside the timeline */
    const char *slash = strrchr(ctx->cfg.timeline, '/');
    snprintf(f->dir, sizeof f->dir, "%.*s",
             slash ? (int)(slash - ctx->cfg.timeline) : 1,
             slash ? ctx->cfg.timeline : ".");
    if (!f->dir[0])
      snprintf(f->dir, sizeof f->dir, "/");
  } else {
    snprintf(f->dir, sizeof f->dir, "%s", dir[0] ? dir : ".");
  }
  if (pipe2(f->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot make the flight recorder's pipe");
  g_dump_fd = f->pipe_fd[1];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, &f->old_usr1) != 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot install the SIGUSR1 handler");
  f->installed = 1;
  refresh_offset(f);
  return HK_OK;
}

void hk_flight_close(hk_ctx *ctx) {
  struct hk_flight *f = ctx->flight;
  if (!f)
    return;
  if (f->installed) { /* the program's own; a late request to dump (one
                        on its way from hkrun) must not kill the process */
    if (f->old_usr1.sa_handler == SIG_DFL &&
        !(f->old_usr1.sa_flags & SA_SIGINFO))
      f->old_usr1.sa_handler = SIG_IGN;
    sigaction(SIGUSR1, &f->old_usr1, NULL);
  }
  g_dump_fd = -1;
  for (int i = 0; i < 2; i++)
    if (f->pipe_fd[i] >= 0)
      close(f->pipe_fd[i]);
  hk_flight_ring_free(&f->ring);
  free(f);
  ctx->flight = NULL;
}

int hk_flight_fd(const hk_ctx *ctx) {
  return ctx->flight ? ctx->flight->pipe_fd[0] : -1;
}

void hk_flight_signalled(hk_ctx *ctx) {
  if (!ctx->flight)
    return;
  char sink[64];
  while (read(ctx->flight->pipe_fd[0], sink, sizeof sink) > 0)
    ;
  char *next = ctx->flight->next_reason;
  hk_flight_dump(ctx, next[0] ? next : "SIGUSR1 (a dump was asked for)");
  next[0] = '\0';
}

void hk_flight_stall(hk_ctx *ctx, const char *what) {
  struct hk_flight *f = ctx->flight;
  if (!f)
    return;
  char why[HK_FLIGHT_REASON_LEN + 1];
  snprintf(why, sizeof why, "stall warning: %s", what);
  /* hkrun only: its pid still our parent's (not a re-parenting) */
  if (ctx->launcher_parent && getppid() == ctx->launcher_parent &&
      kill(ctx->launcher_parent, SIGUSR1) == 0) {
    snprintf(f->next_reason, sizeof f->next_reason,
             "%.960s (every rank was asked to write through hkrun)", why);
    return; /* hkrun's SIGUSR1 comes back to this rank too */
  }
  hk_flight_dump(ctx, why);
}

/* h's entry, state submitted, unless a dump already gave it one. */
static void record_submit(struct hk_flight *f, hk_handle h) {
  if (h->obs_slot)
    return;
  hk_flight_entry *e = hk_flight_ring_push(&f->ring);
  describe(e, h);
  e->state = HK_FLIGHT_SUBMITTED;
  stamp(f, e, HK_FLIGHT_T_SUBMIT, h->t_submit);
  h->obs_slot = e->seq;
}

void hk_flight_taken(hk_ctx *ctx, hk_handle list) {
  struct hk_flight *f = ctx->flight;
  if (!f || !list)
    return; /* the offset is the last round's: no clock read here */
  for (hk_handle h = list; h; h = h->next)
    record_submit(f, h);
}

void hk_flight_round(hk_ctx *ctx, double t_ready) {
  (void)t_ready;
  if (!ctx->flight)
    return;
  ctx->flight->round++;
  refresh_offset(ctx->flight);
}

/* h's entry; a new one (submitted at no known time) when it has none or
 * the ring has overwritten it. */
static hk_flight_entry *entry_of(struct hk_flight *f, hk_handle h) {
  hk_flight_entry *e = hk_flight_ring_find(&f->ring, h->obs_slot);
  if (!e) {
    e = hk_flight_ring_push(&f->ring);
    describe(e, h);
    stamp(f, e, HK_FLIGHT_T_SUBMIT, h->t_submit);
    h->obs_slot = e->seq;
  }
  return e;
}

void hk_flight_negotiated(hk_ctx *ctx, hk_handle h, double t_ready) {
  struct hk_flight *f = ctx->flight;
  if (!f)
    return;
  hk_flight_entry *e = entry_of(f, h);
  e->round = f->round;
  e->state = HK_FLIGHT_NEGOTIATED;
  stamp(f, e, HK_FLIGHT_T_NEGOTIATED, t_ready);
}

void hk_flight_mark(hk_ctx *ctx, hk_handle h, hk_flight_state state, double t) {
  struct hk_flight *f = ctx->flight;
  if (!f)
    return;
  hk_flight_entry *e = entry_of(f, h);
  e->state = (uint8_t)state;
  stamp(f, e, state == HK_FLIGHT_RUNNING ? HK_FLIGHT_T_START : HK_FLIGHT_T_END,
        t);
}

/* Collects the in-flight handles (under ctx->mu) for the dump. */
typedef struct pending_list {
  struct hk_flight *f;
  hk_flight_entry *e;
  size_t n, cap;
} pending_list;

static void add_pending(const char *key, void *value, void *arg) {
  (void)key;
  pending_list *pl = arg;
  hk_handle h = value;
  if (pl->n == pl->cap)
    return; /* counted before; more cannot appear under the lock */
  hk_flight_entry *e = &pl->e[pl->n++];
  const hk_flight_entry *r = hk_flight_ring_find(&pl->f->ring, h->obs_slot);
  if (r) {
    *e = *r;
  } else { /* still in the queue, or overwritten in the ring */
    memset(e, 0, sizeof *e);
    describe(e, h);
    stamp(pl->f, e, HK_FLIGHT_T_SUBMIT, h->t_submit);
  }
}

/* The job id in the file name: the same on every rank of a job and known
 * to nobody outside it (derived from the job's secret); a process outside
 * any launcher uses its pid. */
static void job_id(const hk_ctx *ctx, char out[17]) {
  if (ctx->placement == HK_PLACEMENT_NONE) {
    snprintf(out, 17, "%016lx", (unsigned long)getpid());
    return;
  }
  uint8_t mac[HK_PROOF_LEN];
  hk_secret_derive(&ctx->secret, "hk flight recorder job", NULL, 0, mac);
  for (int i = 0; i < 8; i++)
    snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

void hk_flight_dump(hk_ctx *ctx, const char *reason) {
  struct hk_flight *f = ctx->flight;
  if (!f)
    return;
  hk_flight_header h;
  memset(&h, 0, sizeof h);
  job_id(ctx, h.job);
  h.rank = ctx->rank;
  h.size = ctx->size;
  if (gethostname(h.host, sizeof h.host - 1) != 0)
    snprintf(h.host, sizeof h.host, "?");
  h.pid = (long)getpid();
  snprintf(h.reason, sizeof h.reason, "%s", reason);
  h.written_us = clock_us(CLOCK_REALTIME);
  refresh_offset(f);
  pending_list pl = {f, NULL, 0, 0};
  pthread_mutex_lock(&ctx->mu);
  /* what the trainer submitted and this thread has not taken from the
   * queue yet (a dump asked for just after a submit, or a rank whose
   * request is still unanswered) is recorded now, in submit order:
   * a record shows every submit */
  for (hk_handle q = ctx->queue_head; q; q = q->next)
    record_submit(f, q);
  h.rounds = f->round;
  h.capacity = f->ring.cap;
  h.recorded = f->ring.next;
  size_t n = hk_strmap_size(ctx->inflight);
  pl.e = n ? malloc(n * sizeof *pl.e) : NULL;
  pl.cap = pl.e ? n : 0;
  hk_strmap_each(ctx->inflight, add_pending, &pl);
  pthread_mutex_unlock(&ctx->mu);
  if (n && !pl.e)
    hk_log(HK_LOG_WARNING,
           "flight record: no memory to list %zu pending tensors", n);
  if (hk_flight_write(f->dir, &h, &f->ring, pl.e, pl.n) != HK_OK)
    hk_log(HK_LOG_WARNING, "%s", hk_last_error());
  else
    hk_log(HK_LOG_INFO, "flight record written to %s (%s)", f->dir, reason);
  free(pl.e);
}
