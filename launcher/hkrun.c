/*
 * hkrun.c - the local launcher: `hkrun -np N [options] [--] prog args...`.
 *
 * This file is the job's policy; the mechanisms live beside it:
 *   args.c        the command line
 *   delegate.c    several hosts (-H, --hostfile, --mpi): mpirun, checked
 *                 and supervised (remote.c)
 *   spawn.c       the worker processes and their output
 *   output.c      splitting output into prefixed lines
 *   rendezvous.c  the TCP server workers register with
 *   bind.c        --bind-to's CPU sets
 *   build_info.c  --version and --check-build
 *
 * Policy:
 * - The first worker that exits non-zero or is killed by a signal fails
 *   the job: hkrun reports it at once, sends HK_MSG_ABORT to every other
 *   registered worker, waits --grace-period seconds, SIGTERMs the process
 *   groups of the workers still running and SIGKILLs them 2 s later.
 * - So does a worker that registered with the rendezvous (called hk_init)
 *   and exits with status 0 without having said GOODBYE (hk_shutdown):
 *   "rank N (pid P) exited with status 0 without calling hk_shutdown".
 *   The exit may be reported before hkrun has read the worker's last
 *   bytes, so the verdict on an exit 0 waits until that rank's rendezvous
 *   connection has ended (GOODBYE read, or EOF); if the connection stays
 *   open with nothing to read for GOODBYE_WAIT_MS after the exit (another
 *   process holds it), no GOODBYE is coming. A worker that never
 *   registered (a plain program) is judged by its exit status alone.
 * - SIGUSR1 to hkrun (`hkrun --dump PID`, or rank 0's stall warning) asks
 *   every worker for its flight record through the worker's dump pipe
 *   (spawn.h; observe/flight.h), not by a signal, which would interrupt
 *   the trainer's blocking calls; the job goes on. At exit hkrun names the
 *   job's folder of flight records, if any rank wrote one, and the
 *   command that reads them (hkrun --diagnose), and removes it if empty.
 * - SIGINT/SIGTERM/SIGHUP to hkrun are forwarded to every worker's process
 *   group, as mpirun and horovodrun do; workers still running after the
 *   grace period get SIGTERM, and SIGKILL SIGNAL_KILL_AFTER_TERM_MS after
 *   that, so every worker is gone within grace + 1 s (a second signal sends
 *   SIGKILL at once).
 * - A job whose workers call hk_init (one registered with the rendezvous)
 *   but not all of them within HK_START_TIMEOUT_S of the start fails: hkrun
 *   names the ranks that did not join, tells the others (their hk_init
 *   fails naming them) and tears the job down as for a failure, exit 1.
 *   Plain programs (no rank registers) are not timed.
 * - The exit status is decided by the first of those events: the failed
 *   worker's exit status (128+signal if it was killed; 1 if it exited 0
 *   without hk_shutdown), or 128+signo if hkrun was signalled; 0 if every
 *   worker exited 0 (after hk_shutdown, if it called hk_init). 2 for a bad
 * command line, 127 if the program cannot be started, 1 for hkrun's own errors.
 * - hkrun returns only after every worker it started was reaped.
 * - Elastic jobs (--min-np, --max-np, --host-discovery-script; docs/
 *   elastic.md): a worker that fails (as above) does not fail the job
 *   while at least --min-np are left: hkrun says so, and the rendezvous
 *   tells every other worker (HK_MSG_RESET: their calls fail with
 *   HK_ERR_RANKS_CHANGED) and forms the next generation from those that
 *   register again (hk_elastic_reset). Below --min-np, with a
 *   --host-discovery-script, hkrun waits --elastic-timeout for more (it
 *   starts none itself yet, so none come); without one it does not wait;
 *   then it fails the job naming the workers lost, what is missing and what
 *   the discovery script lists: every rank gets HK_MSG_ABORT with that
 *   text, and the exit status is the last lost worker's. A job with
 *   enough workers that has not re-formed HK_START_TIMEOUT_S after a loss
 *   (a survivor never called hk_elastic_reset) fails naming those, exit 1.
 *   A worker that leaves through hk_shutdown and exits 0 is no loss (no
 *   RESET); a generation forming then does not wait for it. A discovery
 *   script that fails (cannot run, exits non-zero) is found at the start:
 *   hkrun says how and exits 2, starting nothing. The
 * job fails the same way when it would re-form more than --reset-limit times,
 * or when no worker is left. A job that finishes after losses exits 0.
 * - Agents (--rdzv-endpoint HOST:PORT; docs/elastic.md): where HOST is
 *   this machine's, hkrun holds the job's rendezvous there (--max-np
 *   slots, HK_SECRET given) and runs its -np workers as slots 0..np-1;
 *   other hosts' agents (agent.c) take the next slots and report their
 *   workers' exits, which are judged here as local exits are (slot_worker
 *   holds their records); an agent's connection that ends loses its
 *   workers still running ("was lost with its host"). The job ends when
 *   every slot's worker has exited, and every agent is sent its status.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>

#include "collectives/transport/iface.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/flight_record.h"
#include "common/log.h"
#include "common/status.h"
#include "launcher/agent.h"
#include "launcher/args.h"
#include "launcher/bind.h"
#include "launcher/bind_masks.h"
#include "launcher/blacklist.h"
#include "launcher/build_info.h"
#include "launcher/delegate.h"
#include "launcher/diagnose.h"
#include "launcher/discover.h"
#include "launcher/dump.h"
#include "launcher/launch.h"
#include "launcher/monitor.h"
#include "launcher/output.h"
#include "launcher/rendezvous.h"
#include "launcher/spawn.h"
#include "launcher/tuned.h"

/* Between SIGTERM and SIGKILL, in milliseconds: after a worker failed,
 * and after hkrun was signalled (where everything must be gone within
 * grace + 1 s). */
#define KILL_AFTER_TERM_MS 2000
#define SIGNAL_KILL_AFTER_TERM_MS 500
/* How long an exited worker's rendezvous connection may stay open with
 * nothing to read before hkrun stops waiting for its GOODBYE, ms. Only a
 * connection some other process holds open lasts that long: a worker's
 * own socket is closed (after its GOODBYE was written) before its exit is
 * reported. */
#define GOODBYE_WAIT_MS 2000

typedef struct job {
  uv_loop_t loop;
  const hkrun_args *args;
  hk_workers workers;
  hk_rdv *rdv;
  uv_signal_t sig[3];   /* SIGINT, SIGTERM, SIGHUP */
  uv_signal_t dump_sig; /* SIGUSR1: forwarded (flight records) */
  uv_timer_t term_timer, kill_timer;
  uv_timer_t goodbye_timer;
  uv_timer_t start_timer;     /* HK_START_TIMEOUT_S after the start */
  uv_timer_t elastic_timer;   /* --elastic-timeout below --min-np */
  uv_timer_t form_timer;      /* elastic: HK_START_TIMEOUT_S to re-form */
  int below_code;             /* elastic: the exit status to fail with */
  char lost[1024];            /* elastic: the workers lost, for messages */
  int host_pending;           /* a host's loss: its slots judged after this */
  double start_timeout_s;     /* HK_START_TIMEOUT_S as the workers read it */
  uint64_t kill_after_term;   /* ms from SIGTERM to SIGKILL */
  uint64_t *goodbye_deadline; /* np entries: uv_now() after which rank r's
                                 exit 0 is judged without its GOODBYE; 0
                                 when no verdict waits for rank r */
  int waiting;                /* verdicts waiting for the rendezvous */
  int size;                   /* the job's slots: -np, or with
                                 --rdzv-endpoint --max-np (every agent's) */
  hk_worker *remote;          /* agents: size entries, the records of the
                                 other agents' workers (slots from -np on;
                                 set from their EXIT) */
  char (*remote_why)[200];    /* agents: size entries; "" or how a remote
                                 worker was lost with its host */
  int remote_running;         /* agents: their workers not yet exited */
  hk_blacklist blacklist;     /* agents: hosts kept out after a failure */
  hk_launch *launch;          /* agents hkrun starts (discovery), or NULL */
  int expected;               /* with launch: the slots the first
                                 generation awaits */
  hk_live live;               /* --monitor's display (launcher/monitor.h) */
  int failing;   /* a failure or a signal has started the teardown */
  int exit_code; /* decided by the first such event */
  int signals_received;
  int closed; /* close_job ran */
} job;

/* The record of slot's worker: one of ours, or (agents) another host's. */
static hk_worker *slot_worker(job *j, int slot) {
  return slot < j->args->np ? &j->workers.w[slot] : &j->remote[slot];
}

static uint64_t grace_ms(const job *j) {
  return (uint64_t)(j->args->grace_period_s * 1000.0 + 0.5);
}

/* Every worker has exited: close our own handles so uv_run can return
 * (the worker set closes its own). */
static void close_job(job *j) {
  if (j->closed)
    return;
  j->closed = 1;
  uv_close((uv_handle_t *)&j->term_timer, NULL);
  uv_close((uv_handle_t *)&j->kill_timer, NULL);
  uv_close((uv_handle_t *)&j->goodbye_timer, NULL);
  uv_close((uv_handle_t *)&j->start_timer, NULL);
  uv_close((uv_handle_t *)&j->elastic_timer, NULL);
  uv_close((uv_handle_t *)&j->form_timer, NULL);
  for (int i = 0; i < 3; i++)
    uv_close((uv_handle_t *)&j->sig[i], NULL);
  uv_close((uv_handle_t *)&j->dump_sig, NULL);
  hk_rdv_close(j->rdv);
  j->rdv = NULL;
  hk_launch_stop(j->launch);
  j->launch = NULL;
}

static void kill_timeout(uv_timer_t *t) {
  job *j = t->data;
  int n = hk_workers_signal(&j->workers, SIGKILL);
  if (n > 0 && j->args->verbose)
    hk_out_say("sent SIGKILL to %d worker(s)", n);
}

static void term_timeout(uv_timer_t *t) {
  job *j = t->data;
  int n = hk_workers_signal(&j->workers, SIGTERM);
  if (n > 0 && j->args->verbose)
    hk_out_say("sent SIGTERM to %d worker(s)", n);
  if (!uv_is_active((uv_handle_t *)&j->kill_timer))
    uv_timer_start(&j->kill_timer, kill_timeout, j->kill_after_term, 0);
}

static void stop_waiting(job *j);

/* The job is over once every worker has exited and been judged. */
static void maybe_close_job(job *j) {
  if (j->workers.running > 0 || j->remote_running > 0 || j->waiting > 0)
    return;
  if (j->args->rdzv_endpoint) { /* every slot's worker has exited */
    if (!j->failing && (j->launch ? hk_launch_pending(j->launch) > 0
                                  : hk_rdv_claimed(j->rdv) < j->size))
      return; /* an agent is still to come */
    hk_rdv_agents_end(j->rdv, j->exit_code);
  }
  close_job(j);
}

/* Elastic: fails the job (every registered worker is told reason). */
static void fail_elastic(job *j, int code, const char *reason) {
  j->failing = 1;
  j->exit_code = code;
  hk_out_say("%s", reason);
  hk_rdv_abort(j->rdv, -1, -1, 0, reason);
  uv_timer_stop(&j->elastic_timer);
  uv_timer_stop(&j->form_timer);
  if (j->workers.running > 0)
    uv_timer_start(&j->term_timer, term_timeout, grace_ms(j), 0);
  stop_waiting(j);
}

/* How long the discovery script may take: --elastic-timeout, at most
 * HKRUN_DISCOVER_MAX_S. */
static double discover_limit(const hkrun_args *a) {
  return a->elastic_timeout_s < HKRUN_DISCOVER_MAX_S ? a->elastic_timeout_s
                                                     : HKRUN_DISCOVER_MAX_S;
}

/* Elastic, below --min-np: fails every rank naming what is missing, and
 * what discovery lists; waited: whether --elastic-timeout ran out (else
 * nothing could join: one host without --host-discovery-script). With
 * agents (--rdzv-endpoint), an agent started meanwhile could have. */
static void fail_below_min_np(job *j, int waited) {
  const hkrun_args *a = j->args;
  int left = hk_rdv_alive(j->rdv);
  char found[300];
  if (a->discovery_script)
    hkrun_discover(a->discovery_script, a->slots_per_host, discover_limit(a),
                   found, sizeof found);
  else if (a->rdzv_endpoint)
    snprintf(found, sizeof found,
             "no agent started with --rdzv-endpoint %s took the lost slots",
             a->rdzv_endpoint);
  else
    snprintf(found, sizeof found, "no --host-discovery-script");
  char when[128];
  if (waited)
    snprintf(when, sizeof when, "none joined within --elastic-timeout %g s",
             a->elastic_timeout_s);
  else
    snprintf(when, sizeof when, "none can join");
  char reason[2048];
  snprintf(reason, sizeof reason,
           "elastic job below --min-np %d: %d worker%s left, %d more "
           "needed (lost: %s); %s (%s%s)",
           a->min_np, left, left == 1 ? "" : "s", a->min_np - left, j->lost,
           when, found,
           a->rdzv_endpoint ? "" : "; hkrun starts no new workers yet");
  fail_elastic(j, j->below_code, reason);
}

/* Elastic, --elastic-timeout below --min-np: not enough workers came
 * (agents joining; hkrun itself starts none). */
static void elastic_timeout(uv_timer_t *t) {
  job *j = t->data;
  if (j->failing || j->closed || hk_rdv_alive(j->rdv) >= j->args->min_np)
    return;
  fail_below_min_np(j, 1);
}

/* Elastic, HK_START_TIMEOUT_S after a loss: enough workers are left but
 * some never registered again (a survivor that does not call
 * hk_elastic_reset, or cannot reach hkrun): fail naming them. */
static void form_timeout(uv_timer_t *t) {
  job *j = t->data;
  int slots[16];
  int n = hk_rdv_awaited(j->rdv, slots, 16);
  if (j->failing || j->closed || n == 0 ||
      hk_rdv_alive(j->rdv) < j->args->min_np)
    return; /* formed, or below --min-np: elastic_timeout's to judge */
  char who[400] = "";
  for (int i = 0; i < n && i < 16; i++) {
    size_t k = strlen(who);
    snprintf(who + k, sizeof who - k, "%s%d (pid %d)", i ? ", " : "", slots[i],
             slot_worker(j, slots[i])->pid);
  }
  char reason[600];
  snprintf(reason, sizeof reason,
           "the elastic job did not re-form within HK_START_TIMEOUT_S=%g s: "
           "%s %s%s did not call hk_elastic_reset (or could not reach "
           "hkrun)",
           j->start_timeout_s, n > 1 ? "ranks" : "rank", who,
           n > 16 ? ", ..." : "");
  fail_elastic(j, 1, reason);
}

/* Elastic: w's worker failed (what: how). The job goes on without it
 * while --min-np are left; else, with a --host-discovery-script, hkrun
 * waits --elastic-timeout, and without one it fails at once. */
static void elastic_loss(job *j, hk_worker *w, const char *what) {
  const hkrun_args *a = j->args;
  /* a survivor that exits, while the job waits for it to re-form, is
   * likely a program not written for elastic jobs: say so */
  int slots[64], awaited = 0;
  int na = hk_rdv_awaited(j->rdv, slots, 64);
  for (int i = 0; i < na && i < 64; i++)
    awaited |= slots[i] == w->rank;
  char how[384];
  snprintf(how, sizeof how, "%s%s", what,
           awaited && !w->term_signal
               ? " instead of calling hk_elastic_reset (a program not "
                 "written for elastic jobs: docs/elastic.md)"
               : "");
  what = how;
  char reason[448];
  snprintf(reason, sizeof reason, "rank %d (pid %d) %s", w->rank, w->pid, what);
  size_t n = strlen(j->lost);
  snprintf(j->lost + n, sizeof j->lost - n, "%srank %d (pid %d) %s",
           n ? ", " : "", w->rank, w->pid, what);
  int code = w->term_signal   ? 128 + w->term_signal
             : w->exit_status ? (int)(w->exit_status & 0xff)
                              : 1;
  int gen =
      hk_rdv_lose(j->rdv, w->rank, w->term_signal ? -1 : (int)w->exit_status,
                  w->term_signal, reason);
  /* the rest of a lost host's slots are gone too: count them out now */
  int left = hk_rdv_alive(j->rdv) - j->host_pending;
  if (a->reset_limit && gen > a->reset_limit) {
    char why[600];
    snprintf(why, sizeof why,
             "%s: the elastic job would re-form %d times, more than "
             "--reset-limit %d",
             reason, gen, a->reset_limit);
    fail_elastic(j, code, why);
  } else if (left >= a->min_np) {
    hk_out_say("%s; the elastic job goes on with %d worker%s (--min-np %d)",
               reason, left, left == 1 ? "" : "s", a->min_np);
    uv_timer_start(&j->form_timer, form_timeout,
                   (uint64_t)(j->start_timeout_s * 1000.0 + 0.5), 0);
  } else if (j->host_pending > 0) {
    return; /* judged with its host's last slot, naming every one lost */
  } else if (left == 0) {
    char why[700];
    snprintf(why, sizeof why, "elastic job: no worker left (lost: %s)",
             j->lost);
    fail_elastic(j, code, why);
  } else if (!a->discovery_script && !a->rdzv_endpoint) {
    /* nothing could come: fail now */
    j->below_code = code;
    fail_below_min_np(j, 0);
  } else {
    j->below_code = code;
    hk_out_say("%s; %d worker%s left, fewer than --min-np %d: waiting up to "
               "--elastic-timeout %g s for more",
               reason, left, left == 1 ? "" : "s", a->min_np,
               a->elastic_timeout_s);
    if (!uv_is_active((uv_handle_t *)&j->elastic_timer))
      uv_timer_start(&j->elastic_timer, elastic_timeout,
                     (uint64_t)(a->elastic_timeout_s * 1000.0 + 0.5), 0);
  }
}

/* Judges an exit (no_goodbye: a registered worker exited 0 without
 * hk_shutdown). The first failure starts the teardown (in an elastic
 * job: a loss, elastic_loss). */
static void judge(job *j, hk_worker *w, int no_goodbye) {
  int failed = w->term_signal != 0 || w->exit_status != 0 || no_goodbye;
  char what[224];
  if (j->remote_why && w->rank >= j->args->np && j->remote_why[w->rank][0])
    snprintf(what, sizeof what, "%s", j->remote_why[w->rank]);
  else if (w->term_signal)
    snprintf(what, sizeof what, "was killed by signal %d", w->term_signal);
  else
    snprintf(what, sizeof what, "exited with status %lld%s",
             (long long)w->exit_status,
             no_goodbye ? " without calling hk_shutdown" : "");

  const int elastic_left =
      j->args->elastic && hk_rdv_rank(j->rdv, w->rank) == HK_RDV_GOODBYE;
  if (j->args->elastic && (!failed || elastic_left)) {
    hk_rdv_left(j->rdv, w->rank); /* not awaited by a generation forming */
  }
  if (failed && !j->failing && elastic_left) {
    /* it left the job (hk_shutdown), then failed: nothing re-forms for
     * it, but its status is the job's, as in a static job */
    if (!j->exit_code)
      j->exit_code = w->term_signal   ? 128 + w->term_signal
                     : w->exit_status ? (int)(w->exit_status & 0xff)
                                      : 1;
    hk_out_say("rank %d (pid %d) %s after it left the job (hk_shutdown)",
               w->rank, w->pid, what);
  } else if (failed && !j->failing && j->args->elastic) {
    elastic_loss(j, w, what);
  } else if (failed && !j->failing) {
    j->failing = 1;
    j->exit_code = w->term_signal   ? 128 + w->term_signal
                   : w->exit_status ? (int)(w->exit_status & 0xff)
                                    : 1;
    if (w->term_signal)
      hk_out_say("rank %d (pid %d) %s (%s)", w->rank, w->pid, what,
                 strsignal(w->term_signal));
    else
      hk_out_say("rank %d (pid %d) %s", w->rank, w->pid, what);
    char reason[256];
    snprintf(reason, sizeof reason, "rank %d (pid %d) %s", w->rank, w->pid,
             what);
    hk_rdv_abort(j->rdv, w->rank, w->term_signal ? -1 : (int)w->exit_status,
                 w->term_signal, reason);
    if (j->workers.running > 0)
      uv_timer_start(&j->term_timer, term_timeout, grace_ms(j), 0);
    stop_waiting(j); /* the exit status is decided */
  } else if (j->args->verbose) {
    hk_out_say("rank %d (pid %d) %s", w->rank, w->pid, what);
  }
  maybe_close_job(j);
}

/* The job failed (or hkrun was signalled): verdicts still waiting for a
 * GOODBYE no longer matter; judge those exits as they are. */
static void stop_waiting(job *j) {
  for (int r = 0; r < j->size && j->waiting > 0; r++)
    if (j->goodbye_deadline[r]) {
      j->goodbye_deadline[r] = 0;
      j->waiting--;
      judge(j, slot_worker(j, r), 0);
    }
  if (!j->closed)
    uv_timer_stop(&j->goodbye_timer);
}

static void goodbye_timeout(uv_timer_t *t) {
  job *j = t->data;
  uint64_t now = uv_now(&j->loop), next = 0;
  for (int r = 0; r < j->size && j->waiting > 0 && !j->closed; r++) {
    uint64_t d = j->goodbye_deadline[r];
    if (!d)
      continue;
    if (d <= now && hk_rdv_rank_idle(j->rdv, r)) {
      hk_log(HK_LOG_INFO,
             "rank %d's rendezvous connection is still open %d ms after it "
             "exited, with nothing to read (another process holds it)",
             r, GOODBYE_WAIT_MS);
      j->goodbye_deadline[r] = 0;
      j->waiting--;
      judge(j, slot_worker(j, r), 1);
      continue;
    }
    if (d <= now) /* bytes are waiting: the loop reads them next */
      d = j->goodbye_deadline[r] = now + GOODBYE_WAIT_MS;
    if (!next || d < next)
      next = d;
  }
  if (next && !j->closed && j->waiting > 0)
    uv_timer_start(&j->goodbye_timer, goodbye_timeout, next - now, 0);
}

static void on_worker_exit(hk_worker *w, void *ctx) {
  job *j = ctx;
  int no_goodbye = 0;
  if (w->term_signal == 0 && w->exit_status == 0) {
    hk_rdv_rank_state st = hk_rdv_rank(j->rdv, w->rank);
    if (st == HK_RDV_OPEN && !j->failing) {
      /* its GOODBYE (or EOF) may still be on the way: judge it when its
       * connection settles (on_rank_settled) */
      hk_log(HK_LOG_INFO,
             "rank %d (pid %d) exited with status 0; waiting for its "
             "rendezvous connection to end",
             w->rank, w->pid);
      j->goodbye_deadline[w->rank] = uv_now(&j->loop) + GOODBYE_WAIT_MS;
      j->waiting++;
      if (!uv_is_active((uv_handle_t *)&j->goodbye_timer))
        uv_timer_start(&j->goodbye_timer, goodbye_timeout, GOODBYE_WAIT_MS, 0);
      return;
    }
    no_goodbye = st == HK_RDV_LEFT;
  }
  judge(j, w, no_goodbye);
}

/* The rendezvous saw rank's connection settle (rendezvous.h). */
static void on_rank_settled(int rank, hk_rdv_rank_state state, void *ctx) {
  job *j = ctx;
  if (j->closed || !j->goodbye_deadline[rank])
    return; /* its worker is running: its exit will look it up */
  j->goodbye_deadline[rank] = 0;
  j->waiting--;
  judge(j, slot_worker(j, rank), state == HK_RDV_LEFT);
}

static void on_signal(uv_signal_t *h, int signum) {
  job *j = h->data;
  if (++j->signals_received > 1) {
    hk_out_say("received %s again; killing the workers", strsignal(signum));
    hk_workers_signal(&j->workers, SIGKILL);
    return;
  }
  if (!j->failing) {
    j->failing = 1;
    j->exit_code = 128 + signum;
  }
  hk_out_say("received signal %d (%s); forwarding it to the workers", signum,
             strsignal(signum));
  /* the signal first: kill() leaves it pending in each worker before
   * the abort frame can reach it, so a worker that handles it (Python's
   * KeyboardInterrupt) sees its own signal, not hk's error about it */
  hk_workers_signal(&j->workers, signum);
  char reason[128];
  snprintf(reason, sizeof reason, "hkrun received signal %d (%s)", signum,
           strsignal(signum));
  hk_rdv_abort(j->rdv, -1, -1, signum, reason);
  /* then SIGTERM after the grace period (even if a failure had started a
   * slower teardown), SIGKILL shortly after */
  j->kill_after_term = SIGNAL_KILL_AFTER_TERM_MS;
  uv_timer_stop(&j->kill_timer);
  uv_timer_start(&j->term_timer, term_timeout, grace_ms(j), 0);
  stop_waiting(j); /* last: with every worker gone it closes the job */
}

/* SIGUSR1: every rank writes its flight record; nothing else changes. */
static void on_dump(uv_signal_t *h, int signum) {
  (void)signum;
  job *j = h->data;
  int n = hk_workers_ask_dump(&j->workers);
  hk_out_say("asked %d rank(s) to write their flight records (SIGUSR1: "
             "hkrun --dump, or rank 0's stall inspector)",
             n);
}

/* At exit: where this job's flight records are (the folder its ranks made
 * in the records' base folder: common/flight_record.h), and the command
 * that reads them; a folder left empty is removed. */
static void tell_flight_records(const hk_secret *secret) {
  hk_config cfg;
  if (hk_config_load_var(&cfg, "HK_FLIGHT_RECORDER") != HK_OK ||
      cfg.flight_recorder == 0 ||
      hk_config_load_var(&cfg, "HK_FLIGHT_DIR") != HK_OK)
    return;
  char base[4096], job[17], name[32], dir[4200];
  hk_flight_base_dir(cfg.flight_dir, base, sizeof base);
  hk_flight_job_id(secret, job);
  hk_flight_job_folder(job, name, sizeof name);
  snprintf(dir, sizeof dir, "%s/%s", base, name);
  DIR *d = opendir(dir);
  if (!d)
    return; /* no rank wrote one */
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += !strncmp(e->d_name, "hk-flight.", 10);
  closedir(d);
  if (n == 0) {
    rmdir(dir);
    return;
  }
  hk_out_say("%d flight record%s of this job in %s; read them with: hkrun "
             "--diagnose %s",
             n, n > 1 ? "s" : "", dir, dir);
}

/* HK_START_TIMEOUT_S after the start: if some ranks registered (an hk
 * job) but not all, name the missing ones and fail the job. */
static void start_timeout(uv_timer_t *t) {
  job *j = t->data;
  if (j->failing || j->closed)
    return;
  int np = j->size, joined = 0, nmiss = 0;
  char miss[512] = "", pids[512] = "";
  int first = -1;
  for (int r = 0; r < np; r++) {
    if (hk_rdv_rank(j->rdv, r) != HK_RDV_UNREGISTERED ||
        (j->args->elastic && slot_worker(j, r)->exited)) {
      joined++; /* (elastic: a lost worker is not waited for) */
      continue;
    }
    if (first < 0)
      first = r;
    const hk_worker *w = slot_worker(j, r);
    size_t m = strlen(miss), p = strlen(pids);
    if (nmiss < 16) {
      snprintf(miss + m, sizeof miss - m, "%s%d", nmiss ? ", " : "", r);
      if (w->pid > 0)
        snprintf(pids + p, sizeof pids - p, "%s%d (pid %d%s)",
                 nmiss ? ", " : "", r, w->pid, w->exited ? ", exited" : "");
      else /* an agent's slot: no agent took it, or its worker is away */
        snprintf(pids + p, sizeof pids - p, "%s%d (%s)", nmiss ? ", " : "", r,
                 r < hk_rdv_claimed(j->rdv) ? "another host's"
                                            : "no agent took it");
    } else if (nmiss == 16) {
      snprintf(miss + m, sizeof miss - m, ", ...");
      snprintf(pids + p, sizeof pids - p, ", ...");
    }
    nmiss++;
  }
  if (joined == 0 || nmiss == 0)
    return; /* plain programs, or everyone is in */
  char host[128] = "this host";
  gethostname(host, sizeof host - 1);
  j->failing = 1;
  j->exit_code = 1;
  hk_out_say(
      "not every rank joined within HK_START_TIMEOUT_S=%g s: %s %s on %s "
      "never called hk_init (or could not reach hkrun); %d of %d joined",
      j->start_timeout_s, nmiss > 1 ? "ranks" : "rank", pids, host, joined, np);
  char reason[256];
  snprintf(reason, sizeof reason,
           "%s %s (on %s) did not join within HK_START_TIMEOUT_S=%g s",
           nmiss > 1 ? "ranks" : "rank", miss, host, j->start_timeout_s);
  hk_rdv_abort(j->rdv, first, -1, 0, reason);
  if (j->workers.running > 0)
    uv_timer_start(&j->term_timer, term_timeout, grace_ms(j), 0);
  stop_waiting(j);
}

/* Agents: host ip (its agent's address) failed: it is kept out for
 * --blacklist-cooldown-range's cooldown. */
static void blacklist_host(job *j, const char *ip) {
  const double cool = hk_blacklist_fail(&j->blacklist, ip, hk_now());
  const int n = hk_blacklist_failures(&j->blacklist, ip);
  if (cool < 0)
    hk_out_say("host %s is blacklisted for the rest of the job (failure %d; "
               "no --blacklist-cooldown-range)",
               ip, n);
  else if (cool > 0)
    hk_out_say("host %s is blacklisted for %g s (failure %d; "
               "--blacklist-cooldown-range %g %g)",
               ip, cool, n, j->args->cooldown_lo_s, j->args->cooldown_hi_s);
}

/* hk_launch_failed_fn: an agent hkrun started did not join: its host is
 * blacklisted, and before the job formed its slots are no longer
 * awaited. */
static void on_launch_failed(const char *ip, int slots, void *ctx) {
  job *j = ctx;
  blacklist_host(j, ip);
  j->expected -= slots;
  hk_rdv_expect(j->rdv, j->expected);
  maybe_close_job(j);
}

/* hk_rdv_agent_check_fn: an agent from a blacklisted host is refused. */
static int check_agent_host(const char *ip, char *why, size_t cap, void *ctx) {
  job *j = ctx;
  const double left = hk_blacklist_left(&j->blacklist, ip, hk_now());
  if (left == 0)
    return 0;
  const int n = hk_blacklist_failures(&j->blacklist, ip);
  if (left < 0)
    snprintf(why, cap,
             "host %s is blacklisted for the rest of the job after %d "
             "failure%s (no --blacklist-cooldown-range)",
             ip, n, n == 1 ? "" : "s");
  else
    snprintf(why, cap,
             "host %s is blacklisted for %.0f s more after %d failure%s "
             "(--blacklist-cooldown-range %g %g)",
             ip, left + 0.5, n, n == 1 ? "" : "s", j->args->cooldown_lo_s,
             j->args->cooldown_hi_s);
  return 1;
}

/* Agents (--rdzv-endpoint): another host's agent joined, its worker
 * exited, or its connection ended (then each of its workers still
 * running is lost with its host). Exits go through the same verdicts as
 * this host's workers'. */
static void on_agent_event(const hk_rdv_agent_event *ev, void *ctx) {
  job *j = ctx;
  if (j->closed)
    return;
  if (ev->kind == HK_RDV_AGENT_JOINED) {
    hk_launch_joined(j->launch, ev->ip);
    int again = 0; /* slots of a host lost, taken again */
    for (int s = ev->base; s < ev->base + ev->nslots; s++) {
      again |= j->remote[s].exited;
      j->remote[s] = (hk_worker){.rank = s};
      j->remote_why[s][0] = 0;
    }
    j->remote_running += ev->nslots;
    if (again)
      hk_out_say("agent on host %s (%s) joined the running job: %d worker%s "
                 "as slots %d..%d, admitted at the members' next commit",
                 ev->host, ev->addr, ev->nslots, ev->nslots == 1 ? "" : "s",
                 ev->base, ev->base + ev->nslots - 1);
    else if (j->args->verbose)
      hk_out_say("agent on host %s (%s) joined: %d worker%s, slots %d..%d",
                 ev->host, ev->addr, ev->nslots, ev->nslots == 1 ? "" : "s",
                 ev->base, ev->base + ev->nslots - 1);
    return;
  }
  int pending = 0; /* a lost host's slots still running */
  for (int s = ev->base; s < ev->base + ev->nslots; s++)
    pending += ev->kind != HK_RDV_AGENT_EXIT && !j->remote[s].exited;
  /* a host whose worker failed, or that was lost, is kept out a while
   * (not one whose workers all finished and left) */
  if ((ev->kind == HK_RDV_AGENT_EXIT && (ev->signal || ev->status)) ||
      (ev->kind == HK_RDV_AGENT_GONE && pending > 0 && !j->failing))
    blacklist_host(j, ev->ip);
  for (int s = ev->base; s < ev->base + ev->nslots; s++) {
    hk_worker *w = &j->remote[s];
    if (w->exited || (ev->kind == HK_RDV_AGENT_EXIT && s != ev->slot))
      continue;
    j->host_pending = pending > 0 ? --pending : 0;
    w->exited = 1;
    j->remote_running--;
    if (ev->kind == HK_RDV_AGENT_EXIT) {
      w->pid = ev->pid;
      w->exit_status = ev->signal ? 0 : ev->status;
      w->term_signal = ev->signal;
    } else { /* its host is lost: as if killed */
      w->pid = hk_rdv_pid(j->rdv, s);
      w->term_signal = SIGKILL;
      snprintf(j->remote_why[s], sizeof j->remote_why[s],
               "was lost with its host %s (its agent's connection from %s "
               "ended: %s)",
               ev->host, ev->addr, ev->why);
    }
    on_worker_exit(w, j);
  }
  j->host_pending = 0;
}

/* --monitor: rank 0 sent its table (launcher/monitor.h). */
static void on_monitor_table(const char *text, void *ctx) {
  job *j = ctx;
  hk_live_show(&j->live, text);
}

/* Sets up the loop-owned parts of the job. Returns 0, or 1 after saying
 * why not (nothing was started then). With rdzv_ip (agents), the
 * rendezvous listens on rdzv_ip at --rdzv-endpoint's port, with *secret
 * as given; else on 127.0.0.1 with a fresh one. */
static int setup(job *j, hk_secret *secret, const char *rdzv_ip,
                 uint16_t *port) {
  int rc = uv_loop_init(&j->loop);
  if (rc != 0) {
    hk_out_say("uv_loop_init: %s", uv_strerror(rc));
    return 1;
  }
  j->size = rdzv_ip ? j->args->max_np : j->args->np;
  j->goodbye_deadline = calloc((size_t)j->size, sizeof *j->goodbye_deadline);
  if (rdzv_ip) {
    j->remote = calloc((size_t)j->size, sizeof *j->remote);
    j->remote_why = calloc((size_t)j->size, sizeof *j->remote_why);
  }
  if (!j->goodbye_deadline || (rdzv_ip && (!j->remote || !j->remote_why))) {
    hk_out_say("out of memory for %d ranks", j->size);
    return 1;
  }
  hk_status st = rdzv_ip ? hk_rdv_start_on(&j->loop, j->size, secret, rdzv_ip,
                                           (uint16_t)j->args->rdzv_port,
                                           on_rank_settled, j, &j->rdv, port)
                 : hk_secret_generate(secret) != HK_OK
                     ? HK_ERR_SYSTEM
                     : hk_rdv_start(&j->loop, j->size, secret, on_rank_settled,
                                    j, &j->rdv, port);
  if (st != HK_OK) {
    if (rdzv_ip)
      hk_out_say("--rdzv-endpoint %s: %s", j->args->rdzv_endpoint,
                 hk_last_error());
    else
      hk_out_say("%s", hk_last_error());
    return 1;
  }
  if (j->args->elastic &&
      hk_rdv_set_elastic(j->rdv, j->args->min_np) != HK_OK) {
    hk_out_say("%s", hk_last_error());
    return 1;
  }
  if (rdzv_ip) { /* this host's workers take the first slots */
    hk_config tc;
    hk_rdv_set_agents(
        j->rdv, on_agent_event, j,
        hk_config_load_var(&tc, "HK_TIMEOUT_S") == HK_OK ? tc.timeout_s : 60);
    hk_blacklist_init(&j->blacklist, j->args->cooldown_lo_s,
                      j->args->cooldown_hi_s);
    hk_rdv_set_agent_check(j->rdv, check_agent_host, j);
    hk_rdv_claim(j->rdv, j->args->np);
  }
  if (j->args->monitor) { /* rank 0's table, on stdout */
    hk_live_init(&j->live, 1);
    hk_rdv_set_monitor(j->rdv, on_monitor_table, j);
  }
  /* SIGHUP too: the workers lead their own sessions, so a closed terminal
   * would otherwise leave them running without hkrun. */
  static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&j->loop, &j->sig[i]);
    j->sig[i].data = j;
    uv_signal_start(&j->sig[i], on_signal, signums[i]);
  }
  uv_signal_init(&j->loop, &j->dump_sig);
  j->dump_sig.data = j;
  uv_signal_start(&j->dump_sig, on_dump, SIGUSR1);
  uv_timer_init(&j->loop, &j->term_timer);
  uv_timer_init(&j->loop, &j->kill_timer);
  uv_timer_init(&j->loop, &j->goodbye_timer);
  uv_timer_init(&j->loop, &j->start_timer);
  uv_timer_init(&j->loop, &j->elastic_timer);
  uv_timer_init(&j->loop, &j->form_timer);
  j->elastic_timer.data = j->form_timer.data = j;
  j->term_timer.data = j->kill_timer.data = j->goodbye_timer.data = j;
  j->start_timer.data = j;
  j->kill_after_term = KILL_AFTER_TERM_MS;
  /* the workers' own setting (hkrun's flags have set it already); a bad
   * value is theirs to report, the default stands here */
  hk_config cfg;
  j->start_timeout_s = hk_config_load(&cfg) == HK_OK ? cfg.start_timeout_s : 60;
  return 0;
}

/* Frees what setup allocated for the job (after its loop has closed). */
static void free_job(job *j) {
  free(j->goodbye_deadline);
  free(j->remote);
  free(j->remote_why);
  hk_blacklist_free(&j->blacklist);
}

static int run_job(const hkrun_args *args, const char *rdzv_ip,
                   const hk_secret *given) {
  if (args->elastic && args->discovery_script && !rdzv_ip) {
    /* a script that cannot run is a bad command line, found now rather
     * than when the job would need it (agents: hk_launch_start's run) */
    char found[300];
    int slots = hkrun_discover(args->discovery_script, args->slots_per_host,
                               discover_limit(args), found, sizeof found);
    if (slots < 0) {
      hk_out_say("%s", found);
      return 2;
    }
    if (args->verbose)
      hk_out_say("%s", found);
  }
  job j;
  memset(&j, 0, sizeof j);
  j.args = args;
  hk_secret secret;
  if (given)
    secret = *given;
  uint16_t port = 0;
  if (setup(&j, &secret, rdzv_ip, &port) != 0) {
    hk_rdv_close(j.rdv);
    uv_run(&j.loop, UV_RUN_DEFAULT); /* lets the server close */
    uv_loop_close(&j.loop);
    free_job(&j);
    return 1;
  }

  char rendezvous[300], secret_hex[2 * HK_SECRET_LEN + 1];
  snprintf(rendezvous, sizeof rendezvous, "%s:%u",
           rdzv_ip ? rdzv_ip : "127.0.0.1", (unsigned)port);
  hk_secret_format(&secret, secret_hex);
  if (args->verbose) /* the pid is what hkrun --dump PID takes */
    hk_out_say("hkrun pid %ld: rendezvous listening on %s", (long)getpid(),
               rendezvous);

  /* --output-filename's files take HK_FILE_MODE: a bad one ends here */
  hk_config fm;
  fm.file_mode = 0600;
  int bad_setup =
      args->output_filename && hk_config_load_var(&fm, "HK_FILE_MODE") != HK_OK;
  if (bad_setup)
    hk_out_say("%s", hk_last_error());
  cpu_set_t *masks = bad_setup ? NULL : hkrun_bind_masks(args, 0, &bad_setup);
  if (!bad_setup && rdzv_ip && args->discovery_script) {
    /* agents on the hosts it lists; the first generation awaits them */
    int launched = 0;
    if (hk_launch_start(&j.loop, args, rdzv_ip, j.rdv, &j.blacklist,
                        on_launch_failed, &j, &j.launch, &launched) != HK_OK) {
      hk_out_say("%s", hk_last_error());
      bad_setup = 1;
    } else {
      j.expected = args->np + launched;
      for (int s = j.expected; s < j.size; s++)
        j.remote[s].exited = 1; /* not awaited (as a lost one) */
      hk_rdv_expect(j.rdv, j.expected);
    }
  }
  if (bad_setup) {
    close_job(&j);
    uv_run(&j.loop, UV_RUN_DEFAULT);
    uv_loop_close(&j.loop);
    free_job(&j);
    free(masks);
    return 2;
  }
  hk_spawn_opts so = {
      .argv = args->prog_argv,
      .output_dir = args->output_filename,
      .file_mode = fm.file_mode,
      .cpu_masks = masks,
      .size = args->np,
      .job_size = j.size,
      .rendezvous = rendezvous,
      .secret_hex = secret_hex,
      .launcher_pid = (int)getpid(),
      .tag_output = args->tag_output,
      .out_fd = STDOUT_FILENO,
      .err_fd = STDERR_FILENO,
      .on_exit = on_worker_exit,
      .ctx = &j,
  };
  if (args->np == 0) { /* an agent holding only the rendezvous */
    uv_timer_start(&j.start_timer, start_timeout,
                   (uint64_t)(j.start_timeout_s * 1000.0 + 0.5), 0);
  } else if (hk_workers_init(&j.workers, &j.loop, &so) != HK_OK) {
    hk_out_say("%s", hk_last_error());
    close_job(&j);
    uv_run(&j.loop, UV_RUN_DEFAULT);
    uv_loop_close(&j.loop);
    free(j.goodbye_deadline);
    free(masks);
    return 1;
  } else if (hk_workers_start(&j.workers) != HK_OK) {
    hk_out_say("%s", hk_last_error());
    j.failing = 1;
    j.exit_code = 127;
    hk_workers_signal(&j.workers, SIGKILL);
    if (j.workers.running == 0)
      close_job(&j);
  } else {
    uv_timer_start(&j.start_timer, start_timeout,
                   (uint64_t)(j.start_timeout_s * 1000.0 + 0.5), 0);
    if (args->verbose)
      for (int r = 0; r < args->np; r++)
        hk_out_say("started rank %d as pid %d", r, j.workers.w[r].pid);
  }

  /* Runs until every worker has exited and every handle is closed. */
  uv_run(&j.loop, UV_RUN_DEFAULT);
  tell_flight_records(&secret);
  memset(secret.bytes, 0, sizeof secret.bytes);
  if (uv_loop_close(&j.loop) != 0)
    hk_log(HK_LOG_WARNING, "the event loop still had open handles");
  hk_workers_free(&j.workers);
  free_job(&j);
  free(masks);
  return j.exit_code;
}

/* 1 if ip (numeric IPv4) is an address of this machine. */
static int is_local_address(const char *ip) {
  if (strncmp(ip, "127.", 4) == 0)
    return 1;
  hk_iface_entry v[64];
  int n = hk_iface_list(v, 64);
  for (int i = 0; i < n && i < 64; i++)
    if (v[i].has_ipv4 && strcmp(v[i].addr, ip) == 0)
      return 1;
  return 0;
}

/* --rdzv-endpoint HOST:PORT (launcher/agent.h; docs/elastic.md): the
 * agent on HOST holds the rendezvous and runs its workers as hkrun runs
 * a local elastic job; any other joins it. Both need HK_SECRET. */
static int run_agent(const hkrun_args *args) {
  hk_config cfg;
  hk_secret secret;
  if (hk_config_load_var(&cfg, "HK_SECRET") != HK_OK ||
      hk_secret_parse(cfg.secret, &secret) != HK_OK) {
    hk_out_say("--rdzv-endpoint: %s: every agent of the job needs the same "
               "secret in HK_SECRET (64 hex digits, e.g. from `openssl rand "
               "-hex 32`)",
               hk_last_error());
    return 2;
  }
  memset(cfg.secret, 0, sizeof cfg.secret);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM},
                  *ai = NULL;
  int rc = getaddrinfo(args->rdzv_host, NULL, &hints, &ai);
  if (rc != 0 || !ai) {
    hk_out_say("--rdzv-endpoint %s: cannot resolve '%s': %s",
               args->rdzv_endpoint, args->rdzv_host, gai_strerror(rc));
    return 2;
  }
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip,
            sizeof ip);
  freeaddrinfo(ai);
  int code;
  if (is_local_address(ip)) {
    if (args->verbose)
      hk_out_say("--rdzv-endpoint: %s is this host's: holding the "
                 "rendezvous for %d workers",
                 ip, args->max_np);
    code = run_job(args, ip, &secret);
  } else if (args->discovery_script) {
    hk_out_say("--host-discovery-script: only the agent holding "
               "--rdzv-endpoint %s runs it (%s is not this host's address)",
               args->rdzv_endpoint, ip);
    code = 2;
  } else {
    hk_config tc;
    double start_s = hk_config_load_var(&tc, "HK_START_TIMEOUT_S") == HK_OK
                         ? tc.start_timeout_s
                         : 60;
    double timeout_s =
        hk_config_load_var(&tc, "HK_TIMEOUT_S") == HK_OK ? tc.timeout_s : 60;
    code =
        hkrun_agent_run(args, ip, args->rdzv_port, &secret, start_s, timeout_s);
  }
  memset(secret.bytes, 0, sizeof secret.bytes);
  return code;
}

/* The path of tool `name` beside hkrun into path (cap bytes). */
static void beside_hkrun(const char *argv0, const char *name, char *path,
                         size_t cap) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    snprintf(self, sizeof self, "%s", argv0);
    n = (ssize_t)strlen(self);
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  snprintf(path, cap, "%.*s/%s", slash ? (int)(slash - self) : 1,
           slash ? self : ".", name);
}

/* hkrun --plan ARGS...: hkplan, installed beside hkrun, with ARGS. */
static int run_hkplan(char **argv, int from) {
  char path[4200];
  beside_hkrun(argv[0], "hkplan", path, sizeof path);
  argv[from - 1] = path; /* "--plan" becomes hkplan's argv[0] */
  execv(path, argv + from - 1);
  hk_out_say("cannot start '%s': %s", path, strerror(errno));
  return 127;
}

/* hkrun --topology [FILE]: hktopo, which is installed beside hkrun. */
static int run_hktopo(const char *argv0, const char *file) {
  char path[4200];
  beside_hkrun(argv0, "hktopo", path, sizeof path);
  char *args[] = {path, (char *)file, NULL};
  execv(path, args);
  hk_out_say("cannot start '%s': %s", path, strerror(errno));
  return 127;
}

/* A misspelt HK_* variable is otherwise silently ignored: each one close
 * to a setting's name gets a warning naming that setting (the name in
 * quotes when it holds more than letters, digits and '_', so that a blank
 * in it shows). */
static void warn_misspelt_env(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    char name[128];
    const char *eq = strchr(*e, '=');
    if (!eq || (size_t)(eq - *e) >= sizeof name)
      continue;
    memcpy(name, *e, (size_t)(eq - *e));
    name[eq - *e] = '\0';
    const char *near = hk_config_near_miss(name);
    const char *plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789_";
    const char *q = name[strspn(name, plain)] ? "'" : "";
    if (near)
      hk_log(HK_LOG_WARNING,
             "%s%s%s is not an hk setting (did you mean %s?): it is ignored", q,
             name, q, near);
  }
}

int main(int argc, char **argv) {
  /* A closed stdout must give EPIPE, not kill hkrun. */
  signal(SIGPIPE, SIG_IGN);

  hkrun_args args;
  char err[HKRUN_ARGS_ERR_CAP];
  if (hkrun_args_parse(argc, argv, &args, err, sizeof err) != 0) {
    hk_out_say("%s", err);
    fputs(hkrun_usage_hint(), stderr);
    return 2;
  }
  if (args.action == HKRUN_HELP) {
    fputs(hkrun_usage(), stdout);
    return 0;
  }
  if (args.action == HKRUN_VERSION) {
    hkrun_print_version(stdout);
    return 0;
  }
  if (args.action == HKRUN_CHECK_BUILD) {
    hkrun_print_check_build(stdout);
    return 0;
  }
  if (args.action == HKRUN_TOPOLOGY)
    return run_hktopo(argv[0], args.topology);
  if (args.action == HKRUN_PLAN)
    return run_hkplan(argv, args.plan_argi);
  if (args.action == HKRUN_DUMP)
    return hkrun_dump(args.dump_pid, stdout, stderr);
  if (args.action == HKRUN_DIAGNOSE)
    return hkrun_diagnose(args.diagnose_dir, stdout, stderr);
  /* -x NAME=value: the workers' environment is hkrun's (and through
   * mpirun, -x NAME passes it on); -x NAME passes on what is set */
  for (int i = 0; i < args.n_env_x; i++) {
    const char *x = args.env_x[i], *eq = strchr(x, '=');
    if (eq) {
      char name[256];
      snprintf(name, sizeof name, "%.*s", (int)(eq - x), x);
      if (setenv(name, eq + 1, 1) != 0) {
        hk_out_say("-x %s: %s", x, strerror(errno));
        return 1;
      }
    } else if (!getenv(x)) {
      hk_out_say("-x %s: %s is not set here, so there is nothing to pass on", x,
                 x);
    }
  }
  /* --autotune-load's settings: what the environment and -x set already
   * wins, and the flags, set after, win too */
  hk_tuned_shown loaded = {{0}};
  if (args.autotune_load) {
    char why[1024];
    if (hkrun_load_tuned(args.autotune_load, &loaded, why, sizeof why) != 0) {
      hk_out_say("--autotune-load: %s", why);
      return 2;
    }
    if (args.verbose)
      hk_out_say("--autotune-load: '%s': %s", args.autotune_load, loaded.text);
  }
  /* the tunable flags become the workers' HK_* variables (also through
   * mpirun, which forwards HK_* with -x); after -x, so flags win */
  char envbuf[16384];
  const char *vars[32];
  int nvars;
  if (hkrun_tunable_env(&args, envbuf, sizeof envbuf, vars, 32, &nvars) != 0) {
    hk_out_say("tunable flags too long");
    return 2;
  }
  for (int i = 0; i < nvars; i++)
    putenv((char *)vars[i]);

  hk_config lc; /* a bad HK_LOG_LEVEL is the workers' to report */
  int level = hk_config_load_var(&lc, "HK_LOG_LEVEL") == HK_OK ? lc.log_level
                                                               : HK_LOG_WARNING;
  if (args.verbose && level < HK_LOG_INFO)
    level = HK_LOG_INFO;
  hk_log_setup("hkrun", (hk_log_level)level);
  warn_misspelt_env();
  int delegated = hkrun_delegate(&args); /* execs mpirun for several hosts */
  if (delegated != HKRUN_RUN_LOCALLY)
    return delegated;
  /* the autotuner's files, where rank 0 runs here (through mpirun it may
   * run elsewhere): rank 0 would only warn, trial after trial */
  const char *tune_files[][2] = {{args.autotune_log, "--autotune-log-file"},
                                 {args.autotune_save, "--autotune-save"}};
  for (int k = 0; k < 2; k++) {
    char why[1024];
    if (tune_files[k][0] &&
        hkrun_check_tune_file(tune_files[k][0], tune_files[k][1], why,
                              sizeof why) != 0) {
      hk_out_say("%s", why);
      return 2;
    }
  }
  if (args.rdzv_endpoint)
    return run_agent(&args);
  return run_job(&args, NULL, NULL);
}
