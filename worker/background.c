/*
 * background.c - the background thread's loop and the negotiation
 * protocol (see background.h).
 *
 * The protocol. Every rank r > 0 has one control connection to rank 0.
 * A round is one exchange on it: rank r sends one REQUESTS (the tensors
 * its trainer threads queued since its last one, by response-cache bit or
 * by name, possibly with the shutdown flag; a quarter of the socket's
 * send buffer at most, the rest in the next rounds: worker_send says
 * why), rank 0 answers it with one
 * RESPONSES whose `answer` byte is 1. Rank 0 also sends RESPONSES with
 * answer = 0, to every rank at once, when tensors become ready: those are
 * what every rank runs, in the same order everywhere.
 *
 * Rank r > 0 (two states):
 *   IDLE --queue not empty, or hk_shutdown called--> send REQUESTS --> SENT
 *   SENT --RESPONSES answer=1--> IDLE (and at once SENT again if the queue
 *        filled meanwhile: that REQUESTS leaves before the responses run,
 *        so the next negotiation overlaps this round's collectives)
 *   any  --RESPONSES answer=0--> run it; stay
 *   IDLE --RESPONSES answer=1--> protocol error
 * Submits during SENT wait in the queue: tensors batch together only while
 * a round is in flight (fusion under load), never for a timer. During
 * SENT the trainer's submits do not even wake the thread (hk_queue_take's
 * wake mute), the answer makes it look.
 *
 * Rank 0 (per rank r: waiting[r] = r's REQUESTS was read and not answered):
 *   on wake-up: feed its own queue to the negotiator (no message), read
 *     each readable control connection (at most one REQUESTS can be there)
 *     and feed it, waiting[r] = 1; then
 *   a tensor ready on every rank, a shutdown, or the job must stop
 *     --> one RESPONSES to every rank, answer = waiting[r]; waiting[] = 0;
 *         then run it (this is the round that moves data)
 *   else --> answer each waiting rank alone with an empty RESPONSES
 *         (answer = 1, nothing to run: it changes no rank's state, so all
 *         ranks still see the same sequence of non-empty RESPONSES). With
 *         HK_CYCLE_TIME_MS > 0 an answer is held until the request has
 *         waited that long (so batches can grow), never longer; 0 (the
 *         default): at once.
 * Rank 0 thus never waits for a rank that has nothing to say: a rank only
 * speaks when it has something, and every REQUESTS is answered at once
 * (or within HK_CYCLE_TIME_MS) whether or not its tensors are ready, so a
 * rank blocked on a tensor that another rank holds queued behind an
 * unanswered request cannot happen. A job of one rank sends nothing and
 * counts no round: its thread feeds its own negotiator and runs.
 *
 * Idle, every rank blocks in poll(2) on the wake fd, the control
 * connections and the launcher fd; the timeouts are rank 0's stall
 * inspector (while tensors are pending), a held answer, and liveness
 * (round.h: a rank quiet for HK_TIMEOUT_S / 4 sends an empty REQUESTS,
 * a ping; a request unanswered for HK_TIMEOUT_S fails naming rank 0; rank
 * 0 fails naming a rank that tensors wait for and that said nothing for
 * HK_TIMEOUT_S), so a stopped process (SIGSTOP: its sockets stay open) is
 * named within HK_TIMEOUT_S and a quarter. A dead peer is noticed by TCP
 * keepalive within HK_TIMEOUT_S (collectives/transport/tcp.h).
 * Rank 0's side lives in worker/round.c; every message is told to the
 * observers (observe/observe.h: the message hook), which count them.
 */
#include "worker/background.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/strmap.h"
#include "common/waiter.h"
#include "coordinator/cache.h"
#include "coordinator/channel.h"
#include "worker/devflight.h"
#include "worker/devplane.h"
#include "worker/elastic.h"
#include "worker/execute.h"
#include "worker/queue.h"
#include "worker/round.h"
#include "worker/sets.h"
#include "worker/tune.h"

/* The most bytes one REQUESTS may take (see worker_send), and the least:
 * a quarter of the send buffer the kernel granted, within these. */
#define HK_CTRL_REQUEST_MAX (256u << 10)
#define HK_CTRL_REQUEST_MIN (4u << 10)
/* A REQUESTS's bytes besides its requests: header, counts, the runs'
 * count, the telemetry sample. */
#define HK_CTRL_REQUEST_FIXED 256u

/*
 * Rank 0: the job failed here (a rank's control connection broke, say).
 * The other ranks would only see rank 0 disappear and blame it, so tell
 * them why first, as a RESPONSES that aborts the job. Best effort: a rank
 * may be gone too; a short timeout.
 */
static void relay_failure(hk_ctx *ctx, hk_status st, const char *reason) {
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = -1;
  m.u.responses.abort_status = (uint16_t)st;
  m.u.responses.abort_reason = (char *)reason; /* borrowed, not freed */
  hk_io io = {-1, 1.0};
  for (int r = 1; r < ctx->size; r++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    if (ctx->mesh.ctrl[r].ops &&
        hk_channel_send_on(&ctx->mesh.ctrl[r], &m, &ctx->scratch, &io, who) !=
            HK_OK)
      hk_log(HK_LOG_DEBUG, "could not tell %s why the job failed: %s", who,
             hk_last_error());
  }
}

/*
 * The job is over for this rank: find the best reason. A peer's dropped
 * connection is usually the echo of a rank that died, and hkrun tells every
 * rank which one and how; wait briefly for that ABORT to name the cause.
 * With relay (rank 0, a failure it found itself), the other ranks are told
 * that reason.
 */
static void fail_job(hk_ctx *ctx, hk_status st, const char *what, int relay) {
  char reason[HK_WIRE_MAX_REASON_LEN + 1];
  snprintf(reason, sizeof reason, "%s", what);
  /* elastic jobs: hkrun tells of a lost rank (RESET: the job re-forms,
   * HK_ERR_RANKS_CHANGED) once it has reaped it, which may take longer
   * than a peer's dropped connection; wait for that as long as any
   * transfer would */
  const int ask =
      st == HK_ERR_PEER_LOST || (ctx->cfg.elastic && st == HK_ERR_TIMEOUT);
  if (ask &&
      hk_elastic_hkrun_word(ctx, ctx->cfg.elastic ? ctx->cfg.timeout_s : 2.0,
                            &st, reason, sizeof reason))
    relay = relay || st == HK_ERR_RANKS_CHANGED;
  hk_log(st == HK_ERR_SHUTDOWN        ? HK_LOG_INFO
         : st == HK_ERR_RANKS_CHANGED ? HK_LOG_WARNING
                                      : HK_LOG_ERROR,
         "%s", reason);
  /* (an elastic job's lost rank is no error of the job: no flight
   * record, which every survivor would write at every loss) */
  if (st != HK_ERR_SHUTDOWN && st != HK_ERR_RANKS_CHANGED)
    hk_observe_error(&ctx->obs, st, reason); /* handles still pending */
  if (relay && ctx->rank == 0 && ctx->size > 1)
    relay_failure(ctx, st, reason);
  hk_queue_fail_all(ctx, st, reason);
}

/* Rank 0's watch is readable: HK_MSG_JOIN says how many workers wait to
 * join (rank 0 then tells every rank in its next world round,
 * worker/round.c). Returns 0 when the watch ended (closed here). */
static int read_watch(hk_ctx *ctx) {
  hk_msg m;
  hk_io io = {-1, ctx->cfg.timeout_s};
  if (hk_channel_recv(ctx->mesh.watch_fd, &m, &ctx->scratch, &io, "hkrun") !=
      HK_OK) {
    hk_log(HK_LOG_DEBUG, "the rendezvous watch ended: %s", hk_last_error());
    hk_tcp_close(&ctx->mesh.watch_fd);
    return 0;
  }
  if (m.type == HK_MSG_JOIN && m.u.abort.rank != ctx->joiners) {
    ctx->joiners = m.u.abort.rank;
    if (ctx->joiners > 0)
      hk_log(HK_LOG_INFO,
             "%d worker%s on %s wait%s to join: admitted at the next commit "
             "(hk_elastic_hosts_updated)",
             ctx->joiners, ctx->joiners == 1 ? "" : "s", m.u.abort.reason,
             ctx->joiners == 1 ? "s" : "");
  }
  hk_msg_free(&m);
  return 1;
}

/* Applies a RESPONSES message on this rank: retire, then run, in the
 * process set it is of (worker/sets.h). */
static hk_status apply_responses(hk_ctx *ctx, hk_round *R, const hk_msg *m,
                                 double t_ready) {
  hk_set *s = hk_sets_live(ctx, m->u.responses.set);
  if (!s || s->rank < 0)
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 sent responses of process set %d, which rank %d "
                   "%s",
                   (int)m->u.responses.set, ctx->rank,
                   s ? "is not a member of" : "does not have");
  const int world_round = m->u.responses.set == 0 && m->u.responses.n > 0;
  if (m->u.responses.joiners && !world_round)
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 said workers wait to join with responses of "
                   "process set %d running %u tensors (only a world round "
                   "that runs tensors says so)",
                   (int)m->u.responses.set, m->u.responses.n);
  if (m->u.responses.joiners) /* before the round's handles complete */
    __atomic_store_n(&ctx->hosts_updated, 1, __ATOMIC_RELEASE);
  if (m->u.responses.has_tune && !world_round)
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 sent a change of settings with responses of "
                   "process set %d running %u tensors (only a world round "
                   "that runs tensors carries one)",
                   (int)m->u.responses.set, m->u.responses.n);
  for (uint32_t i = 0; i < m->u.responses.ninval; i++)
    hk_cache_retire(s->cache, m->u.responses.inval[i]);
  hk_status st = HK_OK;
  if (world_round) /* every rank switches here, before running it */
    st = hk_tune_apply(ctx,
                       m->u.responses.has_tune ? &m->u.responses.tune : NULL);
  if (st == HK_OK)
    st = hk_execute_responses(ctx, s, m->u.responses.resps, m->u.responses.n,
                              t_ready);
  R->shutdown_rank = m->u.responses.shutdown_rank;
  if (st == HK_OK && m->u.responses.abort_status) {
    R->abort_status = (hk_status)m->u.responses.abort_status;
    snprintf(R->abort_reason, sizeof R->abort_reason, "%s",
             m->u.responses.abort_reason ? m->u.responses.abort_reason
                                         : "rank 0 stopped the job");
  }
  return st;
}

/*
 * Rank > 0, hkrun has aborted the job: if rank 0 stopped it first (a
 * stall), its RESPONSES may still be on the way (rank 0 tells the ranks
 * one after another, and a rank told first can exit, and make hkrun
 * abort, before a later one is told). Waits up to 1 s for a RESPONSES
 * and takes its stop (abort or shutdown) without running anything.
 */
static void late_stop(hk_ctx *ctx, hk_round *R) {
  if (ctx->rank == 0 || ctx->size == 1)
    return;
  hk_io io = {-1, 1.0};
  hk_msg m;
  if (!hk_ctrl_wait_readable(&ctx->mesh.ctrl[0], 1.0) ||
      hk_channel_recv_on(&ctx->mesh.ctrl[0], &m, &ctx->scratch, &io,
                         "rank 0") != HK_OK)
    return;
  if (m.type == HK_MSG_RESPONSES && m.u.responses.abort_status) {
    R->abort_status = (hk_status)m.u.responses.abort_status;
    snprintf(R->abort_reason, sizeof R->abort_reason, "%s",
             m.u.responses.abort_reason ? m.u.responses.abort_reason
                                        : "rank 0 stopped the job");
  } else if (m.type == HK_MSG_RESPONSES) {
    R->shutdown_rank = m.u.responses.shutdown_rank;
  }
  hk_msg_free(&m);
}

/* The bytes handle h adds to this rank's REQUESTS (the cost of
 * hk_queue_take_bounded, under ctx->mu; the background thread's own
 * caches): its cache bit, or the request by name. */
static size_t request_bytes(void *arg, hk_handle h) {
  hk_ctx *ctx = arg;
  const hk_set *s = hk_sets_live(ctx, h->req.set);
  if (s && hk_cache_lookup(s->cache, &h->req) != HK_WIRE_NO_BIT)
    return HK_WIRE_BIT_BYTES;
  return hk_wire_request_size(&h->req);
}

/*
 * Rank > 0 in IDLE: sends what is queued (and a shutdown) as REQUESTS.
 *
 * One REQUESTS is at most R->request_cap bytes (a quarter of the control
 * socket's send buffer); what does not fit stays queued for the next
 * round, which starts as soon as this one is answered. The blocking send
 * thus never blocks: the rank has one REQUESTS in flight at most, and
 * rank 0 reads a REQUESTS whole before it answers, so the socket holds
 * nothing else of ours. It must not block: rank 0 may be inside a
 * collective that needs this rank (the responses it sent with its
 * answer, which this rank runs after this send) and reads nothing until
 * it ends. Horovod sends every request each cycle, but over MPI or Gloo,
 * which buffer; a bounded message is what a byte stream allows.
 */
static hk_status worker_send(hk_ctx *ctx, hk_round *R) {
  if (R->sent) { /* the answer makes it look at the queue */
    hk_queue_hold_drop(ctx);
    return HK_OK;
  }
  int shut = !R->shutdown_sent && hk_round_shutdown_requested(ctx);
  /* mutes wakes if it took any */
  hk_handle list = hk_queue_take_bounded(
      ctx, R->request_cap - HK_CTRL_REQUEST_FIXED, request_bytes, ctx);
  if (!list && !shut && !hk_round_ping_due(ctx, R))
    return HK_OK; /* (a ping: an empty REQUESTS, round.h) */
  uint32_t n, nbits;
  hk_status st = hk_round_split(ctx, R, list, 1, &n, &nbits);
  if (st != HK_OK)
    return st;
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.shutdown = (uint8_t)shut;
  m.u.requests.n = n;
  m.u.requests.reqs = R->reqs;
  m.u.requests.nbits = nbits;
  m.u.requests.bits = R->bits;
  m.u.requests.bit_sets = R->bit_sets;
  /* telemetry may ride on the request (observe/monitor.h) */
  m.u.requests.has_sample =
      (uint8_t)hk_observe_sample(&ctx->obs, &m.u.requests.sample);
  st = hk_channel_send_on(&ctx->mesh.ctrl[0], &m, &ctx->scratch, &ctx->io,
                          "rank 0");
  if (st != HK_OK)
    return st;
  R->sent = 1;
  R->shutdown_sent |= shut;
  R->quiet_since = hk_now();
  hk_obs_message sent = {.kind = HK_OBS_MSG_REQUESTS, .rank = 0};
  hk_observe_message(&ctx->obs, &sent);
  return HK_OK;
}

/* Rank > 0: the control connection is readable: one RESPONSES. */
static hk_status worker_receive(hk_ctx *ctx, hk_round *R) {
  hk_msg m;
  hk_status st = hk_channel_recv_on(&ctx->mesh.ctrl[0], &m, &ctx->scratch,
                                    &ctx->io, "rank 0");
  if (st != HK_OK)
    return st;
  R->quiet_since = hk_now();
  if (m.type != HK_MSG_RESPONSES) {
    hk_msg_free(&m);
    return hk_fail(HK_ERR_PROTOCOL,
                   "rank 0 sent message type %u, expected responses", m.type);
  }
  const int empty = m.u.responses.n == 0 && m.u.responses.ninval == 0 &&
                    m.u.responses.shutdown_rank < 0 &&
                    !m.u.responses.abort_status;
  if (m.u.responses.answer) {
    if (!R->sent) {
      hk_msg_free(&m);
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank 0 answered a request rank %d "
                     "did not send",
                     ctx->rank);
    }
    R->sent = 0;
    if (!m.u.responses.abort_status && m.u.responses.shutdown_rank < 0)
      st = worker_send(ctx, R); /* before running: overlap */
  }
  hk_obs_message got = {.kind = empty ? HK_OBS_MSG_ANSWER : HK_OBS_MSG_ROUND};
  hk_observe_message(&ctx->obs, &got);
  if (st == HK_OK)
    st = apply_responses(ctx, R, &m, hk_now());
  hk_round_ran(ctx, R);
  hk_msg_free(&m);
  return st;
}

/*
 * Closes the control channel politely: our side stops writing, then we read
 * until the peer closes too (at most 2 s), so a last message in flight
 * towards us never turns into a reset that destroys the shutdown response
 * still unread on the other side.
 */
static void linger(hk_ctx *ctx) {
  int *fds = ctx->rank == 0 ? ctx->mesh.ctrl_fds : &ctx->mesh.ctrl_fd;
  int first = ctx->rank == 0 ? 1 : 0, end = ctx->rank == 0 ? ctx->size : 1;
  if (ctx->size == 1)
    return;
  for (int i = first; i < end; i++)
    if (fds[i] >= 0)
      shutdown(fds[i], SHUT_WR);
  double deadline = hk_now() + 2.0;
  for (int i = first; i < end; i++) {
    char sink[4096];
    while (fds[i] >= 0 && hk_now() < deadline) {
      struct pollfd p = {.fd = fds[i], .events = POLLIN};
      if (poll(&p, 1, (int)((deadline - hk_now()) * 1000) + 1) <= 0)
        break;
      if (read(fds[i], sink, sizeof sink) <= 0)
        break;
    }
  }
}

/* The control endpoint of the poll set's entry first_ctrl + i: rank 0's
 * to rank i + 1, another rank's to rank 0. */
static hk_ctrl *ctrl_at(hk_ctx *ctx, int i) {
  return &ctx->mesh.ctrl[ctx->rank == 0 ? i + 1 : 0];
}

/* ORs POLLIN into the revents of the control endpoints whose bytes can be
 * read without poll(2) (an shm ring holds some); returns how many. */
static int mark_pending(hk_ctx *ctx, struct pollfd *p, int first, int n) {
  int k = 0;
  for (int i = first; i < n; i++)
    if (hk_ctrl_pending(ctrl_at(ctx, i - first))) {
      p[i].revents |= POLLIN;
      k++;
    }
  return k;
}

/* poll(2) without blocking, and the endpoints' own pending bytes. */
static int poll_now(hk_ctx *ctx, struct pollfd *p, int n, int first) {
  int rc = poll(p, (nfds_t)n, 0);
  return rc < 0 ? rc : rc + mark_pending(ctx, p, first, n);
}

/* Every control endpoint is told the loop sleeps (on = 1: an shm reader
 * sets its flag, so that its writer rings the socket) or woke (0). */
static void arm_all(hk_ctx *ctx, int first, int n, int on) {
  for (int i = first; i < n; i++)
    hk_ctrl_arm(ctrl_at(ctx, i - first), on);
}

/* poll(2) on the set for at most timeout_ms (-1: no limit), polling
 * first without blocking as hk's wait policy says (common/waiter.h):
 * while tensors this thread took are in flight (their answer, or a peer's
 * message, is due soon), for the budget learned from recent waits, and
 * until HK_SPIN_US after the last event (*last_event, moved to now by
 * every event: a step's next tensor, or the next hop of a round, finds
 * the thread awake), except where each rank has a core but its two
 * threads share it: there the polling after the last event took the
 * trainer's core (small allreduces at 4x their time), while where every
 * thread has a core it takes nothing from anyone, and where ranks
 * outnumber cores it yields (the policy's few yields), which hands the
 * core to the rank whose turn it is instead of paying its wake-up (4
 * ranks on 2 cores: ~3x faster small allreduces with it). Past that it
 * sleeps, so an idle job uses no CPU. While the submit queue is held (a
 * burst goes on: hk_queue_take), the wait ends when the hold does, and
 * counts as in flight. The
 * control endpoints from first_ctrl on are tested beside the descriptors
 * (an shm ring's bytes show as POLLIN) and armed before the loop sleeps
 * (ctrl.h). Returns poll's result plus the endpoints found pending, 0
 * when the time ran out. */
static int wait_events(hk_ctx *ctx, struct pollfd *p, int n, int first_ctrl,
                       int timeout_ms, double *last_event) {
  int rc = poll_now(ctx, p, n, first_ctrl);
  if (rc != 0 || timeout_ms == 0) {
    if (rc > 0)
      *last_event = hk_now();
    return rc;
  }
  /* in flight: tensors it took and has not completed; or a step going
   * on, whose next tensor is due: an event less than HK_SPIN_US ago (the
   * polling then ends HK_SPIN_US after that event) */
  const double held = hk_queue_held_until(ctx);
  const int busy = hk_strmap_size(ctx->taken) > 0 || held > 0;
  const int lingers = hk_waiter_fits() != HK_WAITER_FIT_RANKS;
  const double linger = *last_event + ctx->cfg.spin_us * 1e-6;
  hk_waiter w;
  hk_waiter_begin(&w, HK_WAIT_EVENTS, busy || (lingers && hk_now() < linger));
  if (!busy)
    hk_waiter_until(&w, linger);
  else if (lingers)
    hk_waiter_extend(&w, linger);
  if (held > 0) /* the burst's end is due */
    hk_waiter_extend(&w, held);
  double end = timeout_ms > 0 ? hk_now() + timeout_ms * 1e-3 : 0;
  if (held > 0 && (end == 0 || held < end))
    end = held;
  while (hk_waiter_spin(&w)) {
    if ((rc = poll_now(ctx, p, n, first_ctrl)) != 0)
      break;
    if ((end > 0 && hk_now() >= end) || (held > 0 && hk_queue_hold_over(ctx))) {
      hk_waiter_end(&w);
      return 0; /* time, or the burst is over: look at the queue */
    }
  }
  if (rc == 0) {
    struct timespec ts, *tp = NULL; /* to the microsecond: a hold's end */
    if (end > 0) {
      double left = end - hk_now();
      left = left > 0 ? left : 0;
      ts.tv_sec = (time_t)left;
      ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
      tp = &ts;
    }
    arm_all(ctx, first_ctrl, n, 1);
    rc = poll_now(ctx, p, n, first_ctrl); /* re-tested once armed */
    if (rc == 0 && (held == 0 || hk_queue_hold_sleep(ctx, 1))) {
      rc = ppoll(p, (nfds_t)n, tp, NULL);
      if (rc >= 0)
        rc += mark_pending(ctx, p, first_ctrl, n);
    }
    if (held > 0)
      hk_queue_hold_sleep(ctx, 0);
    arm_all(ctx, first_ctrl, n, 0);
  }
  hk_waiter_end(&w);
  if (rc > 0)
    *last_event = hk_now();
  return rc;
}

/* wait_events while device batches are in flight (their end events have
 * no file descriptor): looks at the set, the control endpoints from
 * first_ctrl on (never armed: looked at, not slept on) and the oldest
 * batch's end event, sleeping between looks with the wait policy's
 * back-off (hk_waiter_nap: *ns, kept from one call to the next and reset
 * when something happened, as the device plane's own waits do), for at
 * most timeout_ms
 * (-1: no limit); while the submit queue is held, until the hold ends or a
 * waiter ends the burst, napping no more than the back-off's first step.
 * Returns poll_now's result: 0 also when the batch has ended. */
static int wait_device(hk_ctx *ctx, struct pollfd *p, int n, int first_ctrl,
                       int timeout_ms, long *ns) {
  const double end = timeout_ms >= 0 ? hk_now() + timeout_ms * 1e-3 : 0;
  const double held = hk_queue_held_until(ctx);
  for (;;) {
    int rc = poll_now(ctx, p, n, first_ctrl);
    if (rc != 0 || hk_devplane_oldest_ended(ctx)) {
      *ns = HK_WAITER_NAP_MIN_NS;
      return rc;
    }
    if (timeout_ms >= 0 && hk_now() >= end)
      return 0;
    if (held > 0 && (hk_queue_hold_over(ctx) || hk_now() >= held))
      return 0; /* look at the queue */
    if (held > 0)
      *ns = HK_WAITER_NAP_MIN_NS;
    hk_waiter_nap(ns);
  }
}

void *hk_background_main(void *arg) {
  hk_ctx *ctx = arg;
  hk_round R;
  ctx->next_stall_check = ctx->next_stall_warning = hk_now();
  /* poll set: wake fd, launcher fd, the observers' fds (the flight
   * recorder's SIGUSR1 pipe, the monitor's live table), then control
   * fd(s) */
  struct pollfd *pfds =
      calloc((size_t)ctx->size + 2 + HK_OBSERVE_MAX, sizeof *pfds);
  hk_status st0 = hk_round_init(ctx, &R);
  if (!pfds || st0 != HK_OK) {
    fail_job(ctx, HK_ERR_NOMEM, "cannot allocate the poll set", 1);
    goto out;
  }
  if ((st0 = hk_tune_start(ctx)) != HK_OK) {
    char what[HK_ERROR_MSG_CAP];
    snprintf(what, sizeof what, "%s", hk_last_error());
    fail_job(ctx, st0, what, 1);
    goto out;
  }
  int npfd = 0, wake_i, launcher_i = -1, watch_i = -1, obs_i, first_ctrl;
  pfds[npfd++] = (struct pollfd){.fd = ctx->wake_fd, .events = POLLIN};
  wake_i = 0;
  if (ctx->mesh.launcher_fd >= 0) {
    launcher_i = npfd;
    pfds[npfd++] =
        (struct pollfd){.fd = ctx->mesh.launcher_fd, .events = POLLIN};
  }
  if (ctx->mesh.watch_fd >= 0) { /* elastic, rank 0: workers to admit */
    watch_i = npfd;
    pfds[npfd++] = (struct pollfd){.fd = ctx->mesh.watch_fd, .events = POLLIN};
  }
  obs_i = npfd;
  npfd += hk_observe_poll_fds(&ctx->obs, pfds + npfd, HK_OBSERVE_MAX);
  first_ctrl = npfd;
  /* the control endpoints' sockets: bytes (tcp), or liveness and
   * doorbells (shm) */
  for (int i = 0; ctx->size > 1 && i < (ctx->rank == 0 ? ctx->size - 1 : 1);
       i++)
    pfds[npfd++] = (struct pollfd){.fd = ctrl_at(ctx, i)->fd, .events = POLLIN};
  /* room for a whole round's message (tcp: hk_tcp_set_send_buffer; shm:
   * the ring, as large); without it, a best effort. A rank's REQUESTS
   * takes a quarter of the least room at most (worker_send). */
  size_t granted = 0;
  for (int i = first_ctrl; i < npfd; i++) {
    size_t room =
        hk_ctrl_room(ctrl_at(ctx, i - first_ctrl), HK_CTRL_SEND_BUFFER);
    if (room && (!granted || room < granted))
      granted = room;
  }
  R.request_cap = granted / 4;
  if (R.request_cap > HK_CTRL_REQUEST_MAX)
    R.request_cap = HK_CTRL_REQUEST_MAX;
  if (R.request_cap < HK_CTRL_REQUEST_MIN)
    R.request_cap = HK_CTRL_REQUEST_MIN;
  double last_event = hk_now();
  long dev_ns = HK_WAITER_NAP_MIN_NS; /* wait_device's back-off */
  for (;;) {
    /* with device batches in flight, the watchdog (their communicator's
     * errors, HK_TIMEOUT_S) looks at the oldest every millisecond */
    int timeout_ms = hk_round_timeout_ms(ctx, &R);
    int rc;
    if (hk_devflight_count(ctx) > 0) {
      rc = wait_device(ctx, pfds, npfd, first_ctrl,
                       timeout_ms < 0 || timeout_ms > 1 ? 1 : timeout_ms,
                       &dev_ns);
      if (rc > 0)
        last_event = hk_now();
    } else {
      rc = wait_events(ctx, pfds, npfd, first_ctrl, timeout_ms, &last_event);
    }
    if (rc < 0)
      continue; /* EINTR */
    if (pfds[wake_i].revents) {
      uint64_t v;
      ssize_t rd = read(ctx->wake_fd, &v, sizeof v);
      (void)rd;
    }
    /* a flight record asked for by SIGUSR1, hkrun --monitor's table */
    hk_observe_polled(&ctx->obs, pfds + obs_i);
    if (watch_i >= 0 && pfds[watch_i].revents && !read_watch(ctx))
      pfds[watch_i].fd = -1; /* closed: hkrun's end shows on launcher_fd */
    /* device batches whose work has completed complete their handles */
    hk_status st = hk_devflight_retire(ctx, hk_devflight_count(ctx), NULL);
    if (st == HK_OK && ctx->rank == 0) {
      st = hk_round_coordinate(ctx, &R, pfds, first_ctrl);
    } else if (st == HK_OK) {
      int readable = 0;
      if (pfds[first_ctrl].revents)
        st = hk_ctrl_polled(ctrl_at(ctx, 0), pfds[first_ctrl].revents,
                            &readable, "rank 0");
      if (st == HK_OK && readable)
        st = worker_receive(ctx, &R);
      if (st == HK_OK && R.shutdown_rank < 0 && !R.abort_status)
        st = worker_send(ctx, &R);
      if (st == HK_OK)
        st = hk_round_check_silence(ctx, &R);
    }
    if (st != HK_OK) {
      char what[HK_ERROR_MSG_CAP];
      snprintf(what, sizeof what, "%s", hk_last_error());
      fail_job(ctx, st, what, 1);
      break;
    }
    /* hkrun speaks only to abort (or by closing, when it died); what rank 0
     * said in the same wake-up was handled first, so its reason wins, and
     * so does a stop rank 0 sent just before (hkrun's abort is often the
     * echo of a rank that obeyed it) */
    if (launcher_i >= 0 && pfds[launcher_i].revents && !R.abort_status &&
        R.shutdown_rank < 0)
      late_stop(ctx, &R);
    if (launcher_i >= 0 && pfds[launcher_i].revents && !R.abort_status &&
        R.shutdown_rank < 0) {
      fail_job(ctx, HK_ERR_PEER_LOST, "lost connection to hkrun (did it die?)",
               0);
      break;
    }
    if (R.abort_status) {
      fail_job(ctx, R.abort_status, R.abort_reason, 0);
      break;
    }
    if (R.shutdown_rank >= 0 &&
        (st = hk_devflight_retire(ctx, 0, NULL)) != HK_OK) {
      char what[HK_ERROR_MSG_CAP]; /* the last batches failed */
      snprintf(what, sizeof what, "%s", hk_last_error());
      fail_job(ctx, st, what, 1);
      break;
    }
    if (R.shutdown_rank >= 0) {
      char why[64];
      snprintf(why, sizeof why, "rank %d called hk_shutdown", R.shutdown_rank);
      fail_job(ctx, HK_ERR_SHUTDOWN, why, 0);
      break;
    }
  }
  if (R.shutdown_rank >= 0)
    linger(ctx);
out:
  hk_tune_finish(ctx);    /* rank 0: a search cut short reports */
  hk_devflight_drop(ctx); /* what the job's failure completed */
  free(pfds);
  hk_round_free(&R);
  pthread_mutex_lock(&ctx->mu);
  ctx->stopped = 1;
  pthread_mutex_unlock(&ctx->mu);
  return NULL;
}
