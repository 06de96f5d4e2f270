/*
 * flight.c - the flight recorder: its hooks and triggers (flight.h).
 */
#include "observe/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/outfile.h"
#include "common/status.h"

/* The reasons a record gives for each way a dump is asked for. */
#define WHY_HKRUN                                                              \
  "asked through hkrun (hkrun --dump, or rank 0's stall warning)"
#define WHY_SIGNAL "SIGUSR1 (a dump was asked for)"

typedef struct hk_flight {
  hk_flight_ring ring;
  uint64_t round;   /* the world's rounds with responses applied so far */
  uint64_t *rounds; /* rounds[s]: process set s's (s >= 1; index 0 unused),
                       nrounds entries; grown as sets appear */
  size_t nrounds;
  int64_t off_us; /* CLOCK_REALTIME - CLOCK_MONOTONIC, us */
  int ep;         /* epoll set of the two below: what the background
                     thread polls (one fd per observer), or -1 */
  int hkrun_fd;   /* HK_DUMP_FD: hkrun's dump requests (read end), or -1 */
  int pipe_fd[2]; /* HK_FLIGHT_SIGNAL: SIGUSR1 -> background thread */
  struct sigaction old_usr1;
  int installed;   /* the handler is ours: restore old_usr1 at close */
  unsigned mode;   /* HK_FILE_MODE */
  char base[4096]; /* the records' base folder (hk_flight_base_dir) */
  int job_fd;      /* the job's folder in it, once made, or -1 */
  int dir_failed;  /* the job's folder could not be made: said once */
  char next_reason[HK_FLIGHT_REASON_LEN + 1]; /* the reason of the next
                                                 SIGUSR1 dump, or "" */
  int rank, size;
  int launcher_pid;        /* hkrun, our parent (hk_obs_setup), or 0 */
  const hk_secret *secret; /* the job's (borrowed), or NULL */
  hk_obs_pending pending;  /* the engine's tensors in flight */
} hk_flight;

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
static void refresh_offset(hk_flight *f) {
  f->off_us = clock_us(CLOCK_REALTIME) - clock_us(CLOCK_MONOTONIC);
}

/* hk_now() seconds (CLOCK_MONOTONIC) as both clocks, in e's slot k. */
static void stamp(const hk_flight *f, hk_flight_entry *e, int k, double t) {
  if (t <= 0)
    return;
  e->mono_us[k] = (int64_t)(t * 1e6);
  e->real_us[k] = e->mono_us[k] + f->off_us;
}

/* Fills an entry's description of t's request. */
static void describe(hk_flight_entry *e, const hk_obs_tensor *t) {
  const hk_wire_request *q = t->req;
  size_t rows = q->row_elems ? q->row_elems : 1;
  e->kind = (uint8_t)q->coll;
  e->set = q->set;
  e->dtype = (uint8_t)q->dtype;
  e->bytes = (uint64_t)q->count * rows * hk_dtype_size((hk_dtype)q->dtype);
  size_t len = strnlen(q->name, HK_FLIGHT_NAME_LEN); /* truncated */
  memcpy(e->name, q->name, len);
  e->name[len] = '\0';
}

/* t's entry, state submitted, unless a dump already gave it one. */
static void record_submit(hk_flight *f, const hk_obs_tensor *t) {
  if (*t->slot)
    return;
  hk_flight_entry *e = hk_flight_ring_push(&f->ring);
  describe(e, t);
  e->state = HK_FLIGHT_SUBMITTED;
  stamp(f, e, HK_FLIGHT_T_SUBMIT, t->t_submit);
  *t->slot = e->seq;
}

/* t's entry; a new one (submitted at no known time) when it has none or
 * the ring has overwritten it. */
static hk_flight_entry *entry_of(hk_flight *f, const hk_obs_tensor *t) {
  hk_flight_entry *e = hk_flight_ring_find(&f->ring, *t->slot);
  if (!e) {
    e = hk_flight_ring_push(&f->ring);
    describe(e, t);
    stamp(f, e, HK_FLIGHT_T_SUBMIT, t->t_submit);
    *t->slot = e->seq;
  }
  return e;
}

/* t's collective started (HK_FLIGHT_RUNNING, start time t), completed
 * (HK_FLIGHT_DONE) or failed (HK_FLIGHT_FAILED; end time t). */
static void mark(hk_flight *f, const hk_obs_tensor *t, hk_flight_state state,
                 double when) {
  hk_flight_entry *e = entry_of(f, t);
  e->state = (uint8_t)state;
  stamp(f, e, state == HK_FLIGHT_RUNNING ? HK_FLIGHT_T_START : HK_FLIGHT_T_END,
        when);
}

/* Collects the tensors in flight (under the engine's lock) for the dump;
 * the queued ones get their entries first. */
typedef struct pending_list {
  hk_flight *f;
  hk_flight_entry *e;
  size_t n, cap;
  size_t lost;     /* no memory to list these */
  size_t left_out; /* past the ring's capacity: counted, not listed */
} pending_list;

static void visit_pending(void *arg, const hk_obs_tensor *t, int queued) {
  pending_list *pl = arg;
  if (queued) { /* still in the queue: recorded now, in submit order, so
                   the record shows every submit */
    record_submit(pl->f, t);
    return;
  }
  if (pl->n >= pl->f->ring.cap) { /* a record stays small (a burst of
                                     100 000 tensors would make it MBs) */
    pl->left_out++;
    return;
  }
  if (pl->n == pl->cap) {
    size_t cap = pl->cap ? 2 * pl->cap : 64;
    hk_flight_entry *e = realloc(pl->e, cap * sizeof *e);
    if (!e) {
      pl->lost++;
      return;
    }
    pl->e = e;
    pl->cap = cap;
  }
  hk_flight_entry *e = &pl->e[pl->n++];
  const hk_flight_entry *r = hk_flight_ring_find(&pl->f->ring, *t->slot);
  if (r) {
    *e = *r;
  } else { /* still in the queue, or overwritten in the ring */
    memset(e, 0, sizeof *e);
    describe(e, t);
    stamp(pl->f, e, HK_FLIGHT_T_SUBMIT, t->t_submit);
  }
}

/* The job's folder of records, made (privately: common/outfile.h) by the
 * first record; its fd, or -1 after saying why not (once). */
static int job_dir(hk_flight *f, const char *job, char *path, size_t cap) {
  char name[32];
  hk_flight_job_folder(job, name, sizeof name);
  snprintf(path, cap, "%s/%s", f->base, name);
  if (f->job_fd >= 0)
    return f->job_fd;
  int base = open(f->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  hk_status st =
      base < 0
          ? hk_fail_errno(HK_ERR_SYSTEM, errno,
                          "flight record: cannot open the folder '%s'", f->base)
          : hk_outdir_make(base, f->base, name, f->mode, 1, "flight record",
                           &f->job_fd);
  if (base >= 0)
    close(base);
  if (st != HK_OK && !f->dir_failed) {
    f->dir_failed = 1;
    hk_log(HK_LOG_WARNING, "%s; no flight record is written", hk_last_error());
  }
  return f->job_fd;
}

/* Writes this rank's record now, with `reason` on its reason line; the
 * tensors still waiting in the queue get their entries first, so the
 * record holds every submit. Failures are logged (a warning naming the
 * file), never returned: the job's own error matters more. */
static void dump(hk_flight *f, const char *reason) {
  hk_flight_header h;
  memset(&h, 0, sizeof h);
  hk_flight_job_id(f->secret, h.job);
  h.rank = f->rank;
  h.size = f->size;
  if (gethostname(h.host, sizeof h.host - 1) != 0)
    snprintf(h.host, sizeof h.host, "?");
  h.pid = (long)getpid();
  snprintf(h.reason, sizeof h.reason, "%s", reason);
  h.written_us = clock_us(CLOCK_REALTIME);
  refresh_offset(f);
  pending_list pl = {f, NULL, 0, 0, 0, 0};
  f->pending.each(f->pending.engine, visit_pending, &pl);
  h.pending_left_out = pl.left_out;
  h.rounds = f->round;
  h.capacity = f->ring.cap;
  h.recorded = f->ring.next;
  if (pl.lost)
    hk_log(HK_LOG_WARNING,
           "flight record: no memory to list %zu pending tensors", pl.lost);
  char dir[4200];
  int dfd = job_dir(f, h.job, dir, sizeof dir);
  if (dfd >= 0 &&
      hk_flight_write(dfd, dir, f->mode, &h, &f->ring, pl.e, pl.n) != HK_OK)
    hk_log(HK_LOG_WARNING, "%s", hk_last_error());
  else if (dfd >= 0)
    hk_log(HK_LOG_INFO, "flight record written to %s (%s)", dir, reason);
  free(pl.e);
}

/* The hooks (observe/observe.h). */

static void on_taken(void *self, const hk_obs_tensor *t) {
  record_submit(self, t); /* the offset is the last round's: no clock read */
}

/* Process set s's round counter (the world's: f->round); NULL when there
 * is no memory to count a new set's (its entries then say round 0). */
static uint64_t *round_of(hk_flight *f, int32_t s) {
  if (s <= 0)
    return &f->round;
  if ((size_t)s >= f->nrounds) {
    size_t n = (size_t)s + 8;
    uint64_t *p = realloc(f->rounds, n * sizeof *p);
    if (!p)
      return NULL;
    memset(p + f->nrounds, 0, (n - f->nrounds) * sizeof *p);
    f->rounds = p;
    f->nrounds = n;
  }
  return &f->rounds[s];
}

static void on_round_started(void *self, const hk_obs_round *r) {
  hk_flight *f = self;
  uint64_t *n = round_of(f, r->set);
  if (n)
    (*n)++;
  refresh_offset(f);
}

/* Scheduled in the current round of its set at t_ready; a failed
 * negotiation ends there too. */
static void on_negotiated(void *self, const hk_obs_tensor *t) {
  hk_flight *f = self;
  hk_flight_entry *e = entry_of(f, t);
  const uint64_t *n = round_of(f, t->req->set);
  e->round = n ? *n : 0;
  e->state = HK_FLIGHT_NEGOTIATED;
  stamp(f, e, HK_FLIGHT_T_NEGOTIATED, t->t_ready);
  if (t->resp->status != HK_OK)
    mark(f, t, HK_FLIGHT_FAILED, t->t_ready);
}

static void on_batch_started(void *self, const hk_obs_batch *b) {
  for (uint32_t i = 0; i < b->n; i++)
    mark(self, &b->tensors[i], HK_FLIGHT_RUNNING, b->t_start);
}

static void on_batch_done(void *self, const hk_obs_batch *b) {
  hk_flight_state state =
      b->status == HK_OK ? HK_FLIGHT_DONE : HK_FLIGHT_FAILED;
  for (uint32_t i = 0; i < b->n; i++)
    mark(self, &b->tensors[i], state, b->t_end);
}

static void on_stall(void *self, const char *what) {
  hk_flight *f = self;
  char why[HK_FLIGHT_REASON_LEN + 1];
  snprintf(why, sizeof why, "stall warning: %s", what);
  /* hkrun only (its pid still our parent's, not a re-parenting), which
   * asks every rank through its pipe, this one included */
  if (f->launcher_pid && f->hkrun_fd >= 0 && getppid() == f->launcher_pid &&
      kill(f->launcher_pid, SIGUSR1) == 0) {
    snprintf(f->next_reason, sizeof f->next_reason,
             "%.960s (every rank was asked to write through hkrun)", why);
    return; /* hkrun's request comes back to this rank too */
  }
  dump(f, why);
}

static void on_error(void *self, hk_status st, const char *reason) {
  (void)st;
  dump(self, reason);
}

static int on_poll_fd(void *self) { return ((hk_flight *)self)->ep; }

/* Reads what fd holds (non-blocking): 1 if it held anything. */
static int drain(int fd) {
  char sink[64];
  int any = 0;
  while (read(fd, sink, sizeof sink) > 0)
    any = 1;
  return any;
}

/* A request came (hkrun's pipe, or SIGUSR1's): writes the record, once
 * however many requests were waiting. */
static void on_readable(void *self) {
  hk_flight *f = self;
  int hkrun = f->hkrun_fd >= 0 && drain(f->hkrun_fd);
  int signal = f->pipe_fd[0] >= 0 && drain(f->pipe_fd[0]);
  if (!hkrun && !signal)
    return;
  char *next = f->next_reason;
  dump(f, next[0] ? next : hkrun ? WHY_HKRUN : WHY_SIGNAL);
  next[0] = '\0';
}

static void on_detach(void *self, int final) {
  (void) final;
  hk_flight *f = self;
  if (f->installed) { /* the program's own; a late request to dump (one
                        on its way from mpirun) must not kill the process */
    if (f->old_usr1.sa_handler == SIG_DFL &&
        !(f->old_usr1.sa_flags & SA_SIGINFO))
      f->old_usr1.sa_handler = SIG_IGN;
    sigaction(SIGUSR1, &f->old_usr1, NULL);
  }
  g_dump_fd = -1;
  int fds[] = {f->pipe_fd[0], f->pipe_fd[1], f->hkrun_fd, f->ep, f->job_fd};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  hk_flight_ring_free(&f->ring);
  free(f->rounds);
  free(f);
}

static const hk_observer_ops flight_ops = {
    .name = "flight recorder",
    .uses_slot = 1,
    .wants_submit_time = 1,
    .detach = on_detach,
    .taken = on_taken,
    .round_started = on_round_started,
    .negotiated = on_negotiated,
    .batch_started = on_batch_started,
    .batch_done = on_batch_done,
    .stall = on_stall,
    .error = on_error,
    .poll_fd = on_poll_fd,
    .readable = on_readable,
};

/* The records' base folder: HK_FLIGHT_DIR must be a folder this process
 * can write into (an output asked for that cannot be made fails hk_init,
 * naming it); the default ($TMPDIR, else /tmp) only warns. */
static hk_status check_base(hk_flight *f, const hk_config *cfg) {
  hk_flight_base_dir(cfg->flight_dir, f->base, sizeof f->base);
  struct stat sb;
  int e = stat(f->base, &sb) != 0             ? errno
          : !S_ISDIR(sb.st_mode)              ? ENOTDIR
          : access(f->base, W_OK | X_OK) != 0 ? errno
                                              : 0;
  if (!e)
    return HK_OK;
  if (cfg->flight_dir[0])
    return hk_fail_errno(HK_ERR_CONFIG, e,
                         "HK_FLIGHT_DIR: '%s' is not a folder this process "
                         "can write into",
                         f->base);
  hk_log(HK_LOG_WARNING,
         "flight records: '%s' is not a folder this process can write into "
         "(%s); set HK_FLIGHT_DIR",
         f->base, strerror(e));
  return HK_OK;
}

/* HK_DUMP_FD: the read end of hkrun's pipe, if the number holds one (a
 * pipe open for reading; the program may have closed and reused it). */
static void take_hkrun_pipe(hk_flight *f, int fd) {
  struct stat sb;
  int fl = fd > 2 ? fcntl(fd, F_GETFL) : -1;
  if (fl < 0 || (fl & O_ACCMODE) != O_RDONLY || fstat(fd, &sb) != 0 ||
      !S_ISFIFO(sb.st_mode)) {
    if (fd > 2)
      hk_log(HK_LOG_INFO,
             "HK_DUMP_FD=%d holds no pipe from hkrun: hkrun --dump cannot "
             "reach this rank",
             fd);
    return;
  }
  /* ours now: not inherited by the programs this one starts */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  f->hkrun_fd = fd;
}

/* HK_FLIGHT_SIGNAL=1: makes the pipe and installs the SIGUSR1 handler. */
static hk_status install(hk_flight *f) {
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
  return HK_OK;
}

/* The one fd the background thread polls: an epoll set of the request
 * pipes (hkrun's, SIGUSR1's), or none. */
static hk_status watch(hk_flight *f) {
  if (f->hkrun_fd < 0 && f->pipe_fd[0] < 0)
    return HK_OK;
  f->ep = epoll_create1(EPOLL_CLOEXEC);
  if (f->ep < 0)
    return hk_fail_errno(HK_ERR_SYSTEM, errno,
                         "cannot make the flight recorder's epoll set");
  int fds[2] = {f->hkrun_fd, f->pipe_fd[0]};
  for (int i = 0; i < 2; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
    if (fds[i] >= 0 && epoll_ctl(f->ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
      return hk_fail_errno(HK_ERR_SYSTEM, errno,
                           "cannot watch the flight recorder's pipe");
  }
  return HK_OK;
}

hk_status hk_flight_attach(hk_observers *o, const hk_obs_setup *s) {
  if (s->cfg->flight_recorder == 0)
    return HK_OK;
  hk_flight *f = calloc(1, sizeof *f);
  if (!f)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the flight recorder");
  f->pipe_fd[0] = f->pipe_fd[1] = f->hkrun_fd = f->ep = f->job_fd = -1;
  f->rank = s->rank;
  f->size = s->size;
  f->launcher_pid = s->launcher_pid;
  f->secret = s->secret;
  f->pending = s->pending;
  f->mode = s->cfg->file_mode;
  hk_status st = check_base(f, s->cfg);
  if (st == HK_OK)
    st = hk_flight_ring_init(&f->ring, s->cfg->flight_recorder);
  if (st == HK_OK)
    take_hkrun_pipe(f, s->cfg->dump_fd);
  if (st == HK_OK && s->cfg->flight_signal)
    st = install(f);
  if (st == HK_OK)
    st = watch(f);
  if (st == HK_OK) {
    refresh_offset(f);
    st = hk_observe_attach(o, &flight_ops, f);
  }
  if (st != HK_OK)
    on_detach(f, 0);
  return st;
}
