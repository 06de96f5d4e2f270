/*
 * waiter.h - the one wait policy of hk: how every wait spends the time
 * before it sleeps (a trainer in hk_wait, the background thread between
 * control messages, the shared-memory engine, TCP and mixed links).
 *
 * Why: a thread that sleeps (futex, poll, condition variable) on an idle
 * core of a virtual machine is slow to wake: the halted vCPU must be woken
 * by the host, tens of microseconds each time, several times what a small
 * allreduce itself costs, and a step has several hops (submit, request,
 * answer, the collective's rounds, completion). Polling avoids that but
 * burns a core, and on a host with more busy threads than cores it steals
 * the core from the very thread whose write is awaited.
 *
 * The policy, per wait (hk_waiter_begin ... hk_waiter_spin ... end):
 *  1. Nothing in flight (the caller says so: no tensor of this rank is
 *     waiting, no round is open): no polling at all, sleep at once. An
 *     idle job uses no CPU.
 *  2. Otherwise poll for a budget that covers the expected completion of
 *     this kind of wait, learned from this thread's recent waits of the
 *     same kind (hk_waiter_budget), never more than the cap (HK_SPIN_US):
 *     - when the host's busy threads fit its cores (each local rank's
 *       trainer and background thread: 2 x local ranks <= usable CPUs),
 *       polls separated by the CPU's pause instruction;
 *     - when only the ranks fit (local ranks <= CPUs < 2 x local ranks:
 *       a rank's two threads rarely run at once, one waits for the
 *       other), such polls for at most HK_WAITER_POLLS of them or
 *       HK_WAITER_POLL_S, whichever ends first (a caller's poll may be a
 *       poll(2) system call), then sched_yield() between polls for the
 *       rest of the budget, which hands the core to a runnable thread
 *       (often the one awaited);
 *     - when the ranks outnumber the cores (oversubscribed), yields from
 *       the first step, at most HK_WAITER_YIELDS of them, then sleep:
 *       among hk's own threads a yield hands the core to the one awaited
 *       (4 ranks on 2 cores, 8 B allreduce: ~25-40 us, against ~70 us
 *       for the earlier design's 200 us of yields and ~250 us for 8
 *       yields), but where other work is runnable (a compiler, a data
 *       loader) a long run of yields lets that work take the core for
 *       milliseconds each time: with 32 the same allreduce took ~250 us
 *       beside two busy processes, with the whole budget of yields 4-7
 *       ms.
 *  3. Then the caller sleeps in its own blocking call, which wakes on the
 *     event (and checks liveness and timeouts as it always did).
 *
 * Learning: hk_waiter_end records the wait's length for its kind, per
 * thread. A wait that ends within the cap is a "hit"; the budget is
 * 3 x the recent hits' mean + HK_WAITER_MARGIN_S (at least
 * HK_WAITER_FLOOR_S, at most the cap), or only the floor when fewer than
 * one wait in HK_WAITER_HIT_MIN of late was a hit (polling would be
 * spent in vain: the event comes later than any budget; the wake-up is
 * paid either way). Hits are judged against the cap, not the budget, so a
 * short budget does not keep itself short.
 *
 * The constants: the cap's default (HK_SPIN_US in common/config.c) and
 * the figures that chose it are in config.c; a pause is ~40 cycles on
 * x86; a yield with no other runnable thread is a system call (~1 us).
 *
 * Thread-safety: hk_waiter_configure once, before threads wait (hk_init);
 * everything else may run on any thread: a hk_waiter is the caller's (one
 * wait, one thread), learning and counters are per thread.
 */
#ifndef HK_COMMON_WAITER_H
#define HK_COMMON_WAITER_H

#include <stdint.h>

#define HK_WAITER_POLLS 64       /* pause-polls before yielding */
#define HK_WAITER_POLL_S 2e-6    /* ... or this long, whichever is first */
#define HK_WAITER_YIELDS 32      /* yields before sleeping, oversubscribed */
#define HK_WAITER_FLOOR_S 20e-6  /* least budget of a wait in flight */
#define HK_WAITER_MARGIN_S 10e-6 /* added to 3 x the mean hit */
#define HK_WAITER_HIT_MIN 0.125  /* hit rate below which only the floor */
#define HK_WAITER_DEFAULT_CAP_S 1e-3 /* before hk_waiter_configure */

/** The kinds of wait, each learned apart (their lengths differ). */
typedef enum hk_wait_kind {
  HK_WAIT_HANDLE = 0, /* a trainer waiting for its handle (hk_wait) */
  HK_WAIT_EVENTS,     /* the background thread waiting for a message */
  HK_WAIT_PEER,       /* a collective waiting for a peer (shm, TCP) */
  HK_WAIT_KINDS
} hk_wait_kind;

/** One wait in progress (the caller's, on its stack). */
typedef struct hk_waiter {
  double start;    /* hk_now() at begin */
  double until;    /* end of the polling budget */
  int kind;        /* hk_wait_kind */
  int yielding;    /* 1 once polls give way to yields */
  unsigned yields; /* yields made in this wait */
  int spent;       /* 1 once the budget ran out */
  unsigned polls;  /* polls made in this wait */
} hk_waiter;

/** What this thread's waits did since it started (for tests, the flight
 *  record): every poll, yield and sleep the policy decided. */
typedef struct hk_waiter_counts {
  uint64_t waits;  /* hk_waiter_begin calls */
  uint64_t polls;  /* pause-polls */
  uint64_t yields; /* sched_yield calls */
  uint64_t sleeps; /* waits whose budget ran out (the caller slept) */
} hk_waiter_counts;

/**
 * Sets the policy for the process: cap_s (seconds, >= 0: HK_SPIN_US; 0:
 * never poll), local_size (this host's ranks) and cpus (the usable CPUs,
 * hk_usable_cpus()): polling without yielding when 2 x local_size <=
 * cpus, yielding for the budget when local_size <= cpus, a few yields
 * then sleep when local_size > cpus. Call before any thread waits (not
 * thread-safe against waits).
 */
void hk_waiter_configure(double cap_s, int local_size, int cpus);

/** How the host's threads fit its cores (see configure). */
typedef enum hk_waiter_fit {
  HK_WAITER_FIT_THREADS = 0, /* 2 x local ranks <= CPUs: pause-polls */
  HK_WAITER_FIT_RANKS,       /* local ranks <= CPUs: polls, then yields */
  HK_WAITER_OVERSUBSCRIBED   /* local ranks > CPUs: a few yields, sleep */
} hk_waiter_fit;

/** The fit hk_waiter_configure found. */
hk_waiter_fit hk_waiter_fits(void);

/** Ends w's polling at `until` (hk_now() seconds) if that is sooner than
 *  its budget: for a caller that knows when polling stops paying (the
 *  background thread: HK_SPIN_US after its last event). */
void hk_waiter_until(hk_waiter *w, double until);

/** Lets w poll until `until` (hk_now() seconds) if that is later than its
 *  budget, never past start + the cap (HK_SPIN_US): for a caller that
 *  knows more is due soon than this wait's kind has learned (the
 *  background thread: an event less than HK_SPIN_US ago). */
void hk_waiter_extend(hk_waiter *w, double until);

/**
 * Starts a wait of `kind`. in_flight = 0 means nothing is expected soon:
 * the budget is 0 (hk_waiter_spin returns 0 at once).
 */
void hk_waiter_begin(hk_waiter *w, hk_wait_kind kind, int in_flight);

/**
 * Spends one step of the budget: a pause (or, oversubscribed, after
 * HK_WAITER_POLLS of them, a sched_yield) and returns 1: the caller tests
 * its condition again. Returns 0 once the budget is spent: the caller
 * sleeps in its blocking call (counted as a sleep). Cheap: the clock is
 * read every 16 polls.
 */
int hk_waiter_spin(hk_waiter *w);

/** Ends the wait: records its length (hk_now() - start) for its kind. */
void hk_waiter_end(hk_waiter *w);

/** Records one wait of `kind` that took elapsed_s (hk_waiter_end's
 *  learning, exposed for tests). */
void hk_waiter_record(hk_wait_kind kind, double elapsed_s);

/** The polling budget the next wait of `kind` on this thread gets, in
 *  seconds (in flight). */
double hk_waiter_budget(hk_wait_kind kind);

/** Start and end of hk_waiter_nap's back-off, nanoseconds. */
#define HK_WAITER_NAP_MIN_NS 2000L
#define HK_WAITER_NAP_MAX_NS 1000000L

/**
 * For a wait with nothing to sleep on (a device event has no file
 * descriptor): sleeps *ns nanoseconds (start it at HK_WAITER_NAP_MIN_NS,
 * set it back there when something happened), then doubles *ns up to
 * HK_WAITER_NAP_MAX_NS, so an event is seen within about its own length
 * after it happens (1 ms at most) and a long wait costs a look per
 * millisecond. Any thread.
 */
void hk_waiter_nap(long *ns);

/** This thread's counts. */
void hk_waiter_counts_get(hk_waiter_counts *out);

/** Forgets this thread's learning and counts (tests). */
void hk_waiter_reset_thread(void);

#endif
