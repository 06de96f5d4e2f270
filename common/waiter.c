/*
 * waiter.c - the wait policy (see waiter.h).
 */
#include "common/waiter.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

#define EWMA_W 0.125 /* weight of the newest wait in the averages */

static double cap_s = HK_WAITER_DEFAULT_CAP_S;
static hk_waiter_fit fit = HK_WAITER_FIT_THREADS;

typedef struct learned {
  int seen;        /* waits recorded */
  double hit_rate; /* average of (wait <= cap) */
  double mean_hit; /* average length of the hits, seconds */
} learned;

static _Thread_local learned learn[HK_WAIT_KINDS];
static _Thread_local hk_waiter_counts counts;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void hk_waiter_configure(double cap, int local_size, int cpus) {
  cap_s = cap > 0 ? cap : 0;
  if (local_size < 1)
    local_size = 1;
  if (cpus < 1)
    cpus = 1;
  fit = 2 * local_size <= cpus ? HK_WAITER_FIT_THREADS
        : local_size <= cpus   ? HK_WAITER_FIT_RANKS
                               : HK_WAITER_OVERSUBSCRIBED;
}

hk_waiter_fit hk_waiter_fits(void) { return fit; }

void hk_waiter_until(hk_waiter *w, double until) {
  if (until < w->until)
    w->until = until > w->start ? until : w->start;
}

void hk_waiter_extend(hk_waiter *w, double until) {
  const double most = w->start + cap_s;
  if (until > most)
    until = most;
  if (until > w->until)
    w->until = until;
}

double hk_waiter_budget(hk_wait_kind kind) {
  const learned *l = &learn[kind];
  if (cap_s <= 0)
    return 0;
  if (!l->seen)
    return cap_s; /* nothing learned yet: the whole cap */
  if (l->hit_rate < HK_WAITER_HIT_MIN)
    return cap_s < HK_WAITER_FLOOR_S ? cap_s : HK_WAITER_FLOOR_S;
  double b = 3 * l->mean_hit + HK_WAITER_MARGIN_S;
  if (b < HK_WAITER_FLOOR_S)
    b = HK_WAITER_FLOOR_S;
  return b < cap_s ? b : cap_s;
}

void hk_waiter_record(hk_wait_kind kind, double elapsed_s) {
  learned *l = &learn[kind];
  int hit = elapsed_s <= cap_s;
  if (!l->seen) {
    l->seen = 1;
    l->hit_rate = hit;
    l->mean_hit = hit ? elapsed_s : 0;
    return;
  }
  l->hit_rate += EWMA_W * ((double)hit - l->hit_rate);
  if (hit)
    l->mean_hit += EWMA_W * (elapsed_s - l->mean_hit);
}

void hk_waiter_begin(hk_waiter *w, hk_wait_kind kind, int in_flight) {
  w->kind = (int)kind;
  w->start = hk_now();
  w->until = w->start + (in_flight ? hk_waiter_budget(kind) : 0);
  w->yielding = 0;
  w->spent = 0;
  w->polls = 0;
  w->yields = 0;
  counts.waits++;
}

int hk_waiter_spin(hk_waiter *w) {
  if (w->spent)
    return 0;
  if (w->until <= w->start || ((w->polls & 15) == 15 && hk_now() >= w->until) ||
      (fit == HK_WAITER_OVERSUBSCRIBED && w->yields >= HK_WAITER_YIELDS)) {
    counts.sleeps++;
    w->spent = 1; /* later calls say so at once, uncounted */
    return 0;
  }
  w->polls++;
  /* where threads outnumber cores, pause-polls end after HK_WAITER_POLLS
   * of them or HK_WAITER_POLL_S, whichever comes first (a caller's poll
   * may be a system call: 64 of them held the core ~60 us from the thread
   * awaited); oversubscribed, the first step yields */
  if (fit != HK_WAITER_FIT_THREADS && !w->yielding &&
      (fit == HK_WAITER_OVERSUBSCRIBED || w->polls > HK_WAITER_POLLS ||
       hk_now() - w->start > HK_WAITER_POLL_S))
    w->yielding = 1;
  if (w->yielding) {
    w->yields++;
    counts.yields++;
    sched_yield();
  } else {
    counts.polls++;
    cpu_relax();
  }
  return 1;
}

void hk_waiter_end(hk_waiter *w) {
  hk_waiter_record((hk_wait_kind)w->kind, hk_now() - w->start);
}

void hk_waiter_nap(long *ns) {
  struct timespec ts = {0, *ns};
  nanosleep(&ts, NULL);
  *ns = *ns < HK_WAITER_NAP_MAX_NS / 2 ? *ns * 2 : HK_WAITER_NAP_MAX_NS;
}

void hk_waiter_counts_get(hk_waiter_counts *out) { *out = counts; }

void hk_waiter_reset_thread(void) {
  memset(learn, 0, sizeof learn);
  memset(&counts, 0, sizeof counts);
}
