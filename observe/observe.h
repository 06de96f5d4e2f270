/*
 * observe.h - how observers (the timeline, the flight recorder, the
 * monitor, introspection: this folder) watch the engine (worker/): one
 * table of hooks an observer fills (hk_observer_ops), the list of the
 * observers attached to a runtime context (hk_observers), and the one
 * dispatch the engine calls at each point (hk_observe_*). The engine never
 * names an observer, and an observer never sees the engine's state: it
 * keeps its own and is told what it needs in the events below (plain
 * structs: names, hk_now() times, ranks, bytes, the names of the
 * algorithm and transport that ran, the wire request and response).
 *
 * The hooks, in the order a tensor meets them (each observer takes the
 * ones it needs; NULL: not taken):
 *   taken          the background thread took a tensor from the submit
 *                  queue (every rank, each tensor once, submit order)
 *   sample         a rank > 0 builds a REQUESTS: a telemetry sample may
 *                  ride on it
 *   message        a negotiation message went out or came in (requests,
 *                  rounds, answers: hk_obs_msg_kind)
 *   round_started  this rank starts to apply a RESPONSES that runs n > 0
 *                  tensors (every rank sees the same rounds, in order)
 *   negotiated     a tensor was scheduled in that round (or its
 *                  negotiation failed there: resp->status)
 *   batch_started  the tensors of one batch (one collective, fused or
 *                  not) are about to run
 *   batch_done     that collective ended, well or not
 *   tensor_done    each tensor of a batch that ended well, after
 *                  batch_done (before the tensor completes)
 *   stall          rank 0's stall inspector warned
 *   tuned          this rank switched to the autotuner's next setting
 *                  (every rank at the same round, before running it)
 *   error          the job failed on this rank, before the tensors in
 *                  flight complete with the error
 *   poll_fd / readable  an fd the background thread polls for the
 *                  observer, and what runs when it is readable
 * and around them ready (the job is set up; before the background thread
 * starts) and detach (hk_shutdown, or a failed hk_init).
 *
 * Cost when no observer takes a hook: hk_observers.hooks holds one bit
 * per hook some attached observer takes, and every hk_observe_* below is
 * an inline test of that bit before anything else. Where building an
 * event costs more than a few stores (a clock reading, a loop), the
 * engine builds it under hk_observe_on().
 *
 * Threads: attach, ready and detach run on the thread of hk_init /
 * hk_shutdown while the background thread is not running; every hook runs
 * on the background thread (an observer's own threads, and what they
 * share with its hooks, are its business). The list does not change in
 * between, so dispatching takes no lock.
 */
#ifndef HK_OBSERVE_OBSERVE_H
#define HK_OBSERVE_OBSERVE_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"
#include "common/config.h"
#include "coordinator/wire.h"
#include "hk/hk.h"

struct hk_negotiator;

/** The hooks, as bit numbers of hk_observers.hooks. */
typedef enum hk_obs_hook {
  HK_OBS_TAKEN,
  HK_OBS_SAMPLE,
  HK_OBS_MESSAGE,
  HK_OBS_ROUND_STARTED,
  HK_OBS_NEGOTIATED,
  HK_OBS_BATCH_STARTED,
  HK_OBS_BATCH_DONE,
  HK_OBS_TENSOR_DONE,
  HK_OBS_STALL,
  HK_OBS_ERROR,
  HK_OBS_POLL,
  HK_OBS_TUNED,
  HK_OBS_NHOOKS
} hk_obs_hook;

#define HK_OBS_BIT(hook) (1u << (hook))

/** One tensor, as the tensor hooks see it. Borrowed: valid during the
 *  call. */
typedef struct hk_obs_tensor {
  const hk_wire_request *req;   /* name, collective, dtype, op, count,
                                   row_elems, memory */
  const hk_wire_response *resp; /* negotiated and the batch hooks: rank 0's
                                   response (status; on rank 0 first_seen,
                                   last_seen, last_rank); taken: NULL */
  double t_ready;               /* negotiated and the batch hooks: hk_now()
                                   when its round was made ready (rank 0's
                                   clock on rank 0, the arrival elsewhere) */
  double t_submit;              /* hk_now() at submit; 0 unless an observer
                                   asked for it (wants_submit_time) */
  uint64_t *slot; /* one word in the tensor's handle for observers, 0
                     until one writes it: the observer that declares
                     uses_slot may keep an O(1) key there (only one may) */
  int phantom;    /* made up for a rank that joined (hk_join): never
                     submitted here, in no queue, not in flight */
  uint32_t index; /* batch hooks: its place among its round's responses,
                     from 0 (the order rank 0 answered in); else 0 */
} hk_obs_tensor;

/** One batch: the tensors that run as one collective (fused or alone). */
typedef struct hk_obs_batch {
  const hk_obs_tensor *tensors; /* n, in the batch's order (borrowed) */
  uint32_t n;
  hk_status status; /* batch_done, tensor_done: HK_OK or why the
                       collective failed */
  double t_start;   /* batch_started: hk_now() just before it started
                       (0 unless an observer takes batch_started) */
  double t[4];      /* batch_done (HK_OK), tensor_done: hk_now() at its
                       start, after the copies into the fusion buffer
                       (== t[0] without), at the collective's end, after
                       the copies out (== t[2] without) */
  double t_end;     /* batch_done: when it ended (t[3], or hk_now() at
                       the failure) */
  uint32_t fused;   /* host allreduces reduced as one (fusion buffer, or
                       in place over shared memory): n; else 0 */
  int staged;       /* copies in and out around the collective (fusion
                       buffer, device plane): t[0..1] and t[2..3] */
  /* tensor_done only: filled when an observer takes tensor_done */
  const char *algorithm; /* ring, hierarchical, rd, chain, pairwise, a
                            device plane's, or negotiation (barrier, join:
                            no data moved) */
  const char *transport; /* this rank's links: "tcp", "shm+tcp", ...;
                            "none" in a job of one rank */
  size_t bytes;          /* input bytes of all n tensors */
} hk_obs_batch;

/** The negotiation messages the message hook counts. */
typedef enum hk_obs_msg_kind {
  HK_OBS_MSG_REQUESTS, /* a REQUESTS went out (rank > 0, once sent) or came
                          in (rank 0, once fed to the negotiator) */
  HK_OBS_MSG_ROUND,    /* a RESPONSES with something to run (or a shutdown
                          or an abort) went to every rank (rank 0, once
                          per broadcast) or came in (rank > 0) */
  HK_OBS_MSG_ANSWER,   /* an empty RESPONSES that only answered a REQUESTS
                          went out (rank 0, per rank) or came in */
} hk_obs_msg_kind;

typedef struct hk_obs_message {
  hk_obs_msg_kind kind;
  int rank; /* rank 0: the rank it came from or went to (-1: every rank);
               ranks > 0: 0 */
  const hk_wire_sample *sample; /* a REQUESTS rank 0 read: the telemetry
                                   sample it carried, or NULL */
} hk_obs_message;

/** A RESPONSES this rank starts to apply. */
typedef struct hk_obs_round {
  uint32_t n;     /* responses it holds (> 0) */
  double t_ready; /* as hk_obs_tensor.t_ready */
  int32_t set;    /* the process set whose responses they are (0: the
                     world; its members only see a set's rounds) */
} hk_obs_round;

/** Calls visit(arg, t, queued) for the engine's tensors, for an
 *  observer's dump: under the engine's lock, first every tensor still in
 *  the submit queue (queued 1, in submit order), then every tensor in
 *  flight (queued 0: submitted and not complete; the queued ones again).
 *  Background thread only; visit must not call into the engine. */
typedef void (*hk_obs_visit)(void *arg, const hk_obs_tensor *t, int queued);
typedef struct hk_obs_pending {
  void (*each)(void *engine, hk_obs_visit visit, void *arg);
  void *engine;
} hk_obs_pending;

/** What an observer's attach is given (hk_init, before bootstrap). */
typedef struct hk_obs_setup {
  const hk_config *cfg;    /* the settings; borrowed until detach */
  int rank, size;          /* this rank, the job's ranks */
  int launcher_pid;        /* hkrun's pid when it is this process's parent
                              (SIGUSR1 to it asks every rank for a flight
                              record), else 0 */
  const hk_secret *secret; /* the job's secret, read when a flight record is
                              written (bootstrap may fill it in after
                              attach); NULL outside any launcher */
  hk_obs_pending pending;  /* the tensors in flight, for dumps */
} hk_obs_setup;

/** What ready is given: what exists once the job is set up. Borrowed:
 *  valid during the call. */
typedef struct hk_obs_ready {
  int local_rank;                   /* this rank's place on its host */
  int launcher_fd;                  /* the connection to hkrun, or -1 */
  struct hk_negotiator *negotiator; /* rank 0's; NULL on other ranks */
  const char *hosts; /* rank r's host name at hosts + r * host_stride,
                        or NULL: every rank on this host */
  size_t host_stride;
  const int *local_ranks; /* rank r's local rank, size entries */
} hk_obs_ready;

/**
 * An observer: its table of operations. Every operation takes the state
 * (`self`) given to hk_observe_attach. The hooks (see the top) may be
 * NULL; ready and detach may be NULL.
 */
typedef struct hk_observer_ops {
  const char *name;      /* for messages: "timeline", "flight recorder" */
  int uses_slot;         /* keeps its key in hk_obs_tensor.slot */
  int wants_submit_time; /* reads hk_obs_tensor.t_submit */
  /** The job is set up (mesh, rings, negotiator, settings agreed); the
   *  background thread starts next. Errors end hk_init. */
  hk_status (*ready)(void *self, const hk_obs_ready *e);
  /** Frees self; `final` 1 at hk_shutdown (the background thread has
   *  stopped: last words such as a report), 0 when hk_init failed. */
  void (*detach)(void *self, int final);
  void (*taken)(void *self, const hk_obs_tensor *t);
  /** Puts a sample into *out and returns 1, or returns 0. */
  int (*sample)(void *self, hk_wire_sample *out);
  void (*message)(void *self, const hk_obs_message *m);
  void (*round_started)(void *self, const hk_obs_round *r);
  void (*negotiated)(void *self, const hk_obs_tensor *t);
  void (*batch_started)(void *self, const hk_obs_batch *b);
  void (*batch_done)(void *self, const hk_obs_batch *b);
  void (*tensor_done)(void *self, const hk_obs_tensor *t,
                      const hk_obs_batch *b);
  /** `what`: the warning's list of stalled tensors and missing ranks. */
  void (*stall)(void *self, const char *what);
  /** st: the job's failure (never HK_ERR_SHUTDOWN); reason: its text. */
  void (*error)(void *self, hk_status st, const char *reason);
  /** `what`: the setting now in force and why ("AUTOTUNE trial 3: fusion
   *  threshold 4 MiB, cycle time 0 ms"); t: when, hk_now() seconds. */
  void (*tuned)(void *self, const char *what, double t);
  /** The fd to poll for POLLIN, or -1; asked once, after ready. */
  int (*poll_fd)(void *self);
  void (*readable)(void *self);
} hk_observer_ops;

#define HK_OBSERVE_MAX 8 /* observers one context holds */

/** The attached observers. All zero (as in a calloc'd context): none.
 *  Owned by the runtime context; see "Threads" above. */
typedef struct hk_observers {
  unsigned hooks;  /* HK_OBS_BIT(h): some observer takes hook h */
  int submit_time; /* some observer reads t_submit */
  int n;
  struct {
    const hk_observer_ops *ops;
    void *self;
  } at[HK_OBSERVE_MAX];
  int npolled;                   /* fds hk_observe_poll_fds gave out */
  int polled_by[HK_OBSERVE_MAX]; /* the observer of each */
} hk_observers;

/**
 * Attaches an observer (at hk_init, before ready). On success the list
 * owns self (ops->detach frees it). Errors: HK_ERR_INVALID_ARG (the list
 * is full, or a second observer declares uses_slot); self is then the
 * caller's.
 */
hk_status hk_observe_attach(hk_observers *o, const hk_observer_ops *ops,
                            void *self);

/** The state of the attached observer whose table is ops, or NULL. Any
 *  thread between hk_init and hk_shutdown (the list does not change). */
void *hk_observe_find(const hk_observers *o, const hk_observer_ops *ops);

/** Calls every observer's ready in attach order; stops at the first
 *  error, which it returns. */
hk_status hk_observe_ready(hk_observers *o, const hk_obs_ready *e);

/** Detaches and frees every observer, the last attached first; the list
 *  is empty afterwards (calling it again does nothing). */
void hk_observe_detach(hk_observers *o, int final);

/** 1 if some attached observer takes one of the hooks in `bits`
 *  (HK_OBS_BIT values or'ed). */
static inline int hk_observe_on(const hk_observers *o, unsigned bits) {
  return (o->hooks & bits) != 0;
}

/** 1 if the engine should stamp hk_obs_tensor.t_submit at submit. */
static inline int hk_observe_wants_submit_time(const hk_observers *o) {
  return o->submit_time;
}

/**
 * Fills out[0..cap) with the observers' fds (POLLIN) and returns how
 * many; hk_observe_polled takes the same entries back after poll(2).
 * Background thread, once before its loop.
 */
int hk_observe_poll_fds(hk_observers *o, struct pollfd *out, int cap);

/* The dispatch: each calls the hook of every observer that takes it, in
 * attach order. The engine calls these, never an observer. */
void hk_observe_taken_(hk_observers *o, const hk_obs_tensor *t);
int hk_observe_sample_(hk_observers *o, hk_wire_sample *out);
void hk_observe_message_(hk_observers *o, const hk_obs_message *m);
void hk_observe_round_started_(hk_observers *o, const hk_obs_round *r);
void hk_observe_negotiated_(hk_observers *o, const hk_obs_tensor *t);
void hk_observe_batch_started_(hk_observers *o, const hk_obs_batch *b);
void hk_observe_batch_done_(hk_observers *o, const hk_obs_batch *b);
void hk_observe_tensor_done_(hk_observers *o, const hk_obs_tensor *t,
                             const hk_obs_batch *b);
void hk_observe_stall_(hk_observers *o, const char *what);
void hk_observe_error_(hk_observers *o, hk_status st, const char *reason);
void hk_observe_tuned_(hk_observers *o, const char *what, double t);
void hk_observe_polled_(hk_observers *o, const struct pollfd *p);

#define HK_OBS_IF(o, hook) if ((o)->hooks & HK_OBS_BIT(hook))

static inline void hk_observe_taken(hk_observers *o, const hk_obs_tensor *t) {
  HK_OBS_IF(o, HK_OBS_TAKEN) hk_observe_taken_(o, t);
}
/** Returns 1 when an observer put a sample into *out. */
static inline int hk_observe_sample(hk_observers *o, hk_wire_sample *out) {
  return o->hooks & HK_OBS_BIT(HK_OBS_SAMPLE) ? hk_observe_sample_(o, out) : 0;
}
static inline void hk_observe_message(hk_observers *o,
                                      const hk_obs_message *m) {
  HK_OBS_IF(o, HK_OBS_MESSAGE) hk_observe_message_(o, m);
}
static inline void hk_observe_round_started(hk_observers *o,
                                            const hk_obs_round *r) {
  HK_OBS_IF(o, HK_OBS_ROUND_STARTED) hk_observe_round_started_(o, r);
}
static inline void hk_observe_negotiated(hk_observers *o,
                                         const hk_obs_tensor *t) {
  HK_OBS_IF(o, HK_OBS_NEGOTIATED) hk_observe_negotiated_(o, t);
}
static inline void hk_observe_batch_started(hk_observers *o,
                                            const hk_obs_batch *b) {
  HK_OBS_IF(o, HK_OBS_BATCH_STARTED) hk_observe_batch_started_(o, b);
}
static inline void hk_observe_batch_done(hk_observers *o,
                                         const hk_obs_batch *b) {
  HK_OBS_IF(o, HK_OBS_BATCH_DONE) hk_observe_batch_done_(o, b);
}
static inline void hk_observe_tensor_done(hk_observers *o,
                                          const hk_obs_tensor *t,
                                          const hk_obs_batch *b) {
  HK_OBS_IF(o, HK_OBS_TENSOR_DONE) hk_observe_tensor_done_(o, t, b);
}
static inline void hk_observe_stall(hk_observers *o, const char *what) {
  HK_OBS_IF(o, HK_OBS_STALL) hk_observe_stall_(o, what);
}
static inline void hk_observe_tuned(hk_observers *o, const char *what,
                                    double t) {
  HK_OBS_IF(o, HK_OBS_TUNED) hk_observe_tuned_(o, what, t);
}
static inline void hk_observe_error(hk_observers *o, hk_status st,
                                    const char *reason) {
  HK_OBS_IF(o, HK_OBS_ERROR) hk_observe_error_(o, st, reason);
}
/** After poll(2): p = where hk_observe_poll_fds wrote, now with revents;
 *  calls readable for each fd that has them. */
static inline void hk_observe_polled(hk_observers *o, const struct pollfd *p) {
  if (o->npolled)
    hk_observe_polled_(o, p);
}

#endif
