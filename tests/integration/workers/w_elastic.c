/*
 * w_elastic - an elastic job's trainer (hkrun --min-np; docs/elastic.md),
 * driven by tests/integration/test_elastic.c:
 *
 *   w_elastic STEPS COMMIT_EVERY KILL_SLOT KILL_STEP
 *
 * A model of D doubles, w[i] = i / 8 at first; each step every rank
 * allreduces (sum) its gradient, whole numbers that depend on the rank
 * it was started as (its slot, HK_RANK at start), the step and i, so that
 * every sum is exact in any order, and steps w[i] -= 0.125 * (sum / size).
 * At the start of every COMMIT_EVERY-th step it commits (a local copy of
 * w and the step: no collective). The worker started as rank KILL_SLOT
 * kills itself with SIGKILL at the start of step KILL_STEP (after saying
 * "dying at step S t=T", T the wall clock in s). On HK_ERR_RANKS_CHANGED
 * a rank restores its commit, calls hk_elastic_reset, and takes rank 0's
 * commit (a broadcast, as Horovod's State.sync); it says
 * "reset: rank R of N (slot S)" and, after the first step it completes,
 * "resumed step S t=T". At the end: "final slot=S rank=R size=N w=..."
 * (each w[i] in %a) and exit 0. A failed hk_elastic_reset says
 * "reset failed: STATUS: MESSAGE", shuts down and exits 3.
 *
 *   w_elastic STEPS COMMIT_EVERY KILL_SLOT KILL_STEP KILL2_SLOT before|after
 *
 * also kills the worker started as KILL2_SLOT while the job re-forms after
 * the first loss: before it calls hk_elastic_reset ("dying before the
 * reset"), or after its hk_elastic_reset returned and before the sync
 * ("dying after the reset"); the others re-form again. With "never" it
 * does not call hk_elastic_reset at all: it says "never calling
 * hk_elastic_reset" and waits for a signal; with "leave" it calls
 * hk_shutdown instead ("leaving instead of re-forming") and exits 0; with
 * "exit" it exits 4 at once ("exiting instead of re-forming"), as a
 * program not written for elastic jobs does.
 *
 * KILL_SLOT -2 stops every worker of this run instead, at the start of
 * step KILL_STEP: it says "stopped at step S" and waits for a signal
 * (tests/integration/test_elastic_agents.c then takes its whole host
 * away). With W_ELASTIC_STOP=HOST:STEP in the environment, the workers
 * whose host name (gethostname) is HOST stop so at the start of STEP (the
 * bed's agents give each host its address as its name).
 *
 * Workers joining (docs/elastic.md): every worker takes rank 0's model and
 * step right after hk_init (the same broadcast as after a reset); one
 * that finds the job past step 0 has joined a running job: it takes the
 * slot it was started as (HK_RANK, a lost host's) for its gradient and
 * says "joined at step S as rank R of N (slot S)", and after its first
 * step "first step S t=T". At each commit a worker asks
 * hk_elastic_hosts_updated; when workers wait to join it calls
 * hk_elastic_reset and takes rank 0's model, saying "admitted: rank R of
 * N (slot S) at step K". With W_ELASTIC_JOIN_STEP=J in the environment,
 * a worker that has not yet seen anyone join waits at the commit of step
 * J for workers to join (saying "waiting for workers to join at step J",
 * then running an 8-byte allreduce every 10 ms, the rounds that carry
 * rank 0's word, for at most 60 s; exit 5 when none came).
 *
 * w_elastic_dev (built from this file with W_ELASTIC_DEVICE, linking the
 * static runtime for the emulated device) is the same with the gradient
 * in a device buffer (HK_DEVICE=emu); after hk_shutdown it says "device
 * slot=S ids=I aborted=A": the communicator ids the emulated device made
 * in this process and the communicators it aborted.
 */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "wcommon.h"

#define D 8

#ifdef W_ELASTIC_DEVICE
/* w_elastic_dev: the gradient goes through a buffer of the emulated GPU
 * (HK_DEVICE=emu), so that each generation has a device communicator,
 * which hk_elastic_reset aborts and the next generation makes anew. */
#include <sched.h>

#include "device/device.h"
#include "device/emu/emu.h"

static hk_device *dev;
static double *dgrad; /* D doubles on the device */

static void dsync(void) {
  hk_dev_event e;
  HKT_OK(dev->ops->event_create(dev, &e));
  HKT_OK(dev->ops->event_record(dev, e, NULL));
  for (int done = 0; !done; sched_yield())
    HKT_OK(dev->ops->event_query(dev, e, &done));
  dev->ops->event_destroy(dev, e);
}

static void dev_open(void) {
  hk_device_options opts = {.device_index = 0, .emu_devices = 1};
  HKT_OK(hk_device_open("emu", &opts, &dev));
  HKT_OK(dev->ops->mem_alloc(dev, D * sizeof(double), (void **)&dgrad));
}

/* hk_allreduce of g (D doubles) through the device buffer. */
static hk_status allreduce(const char *name, double *g) {
  HKT_OK(dev->ops->memcpy_async(dev, dgrad, g, D * sizeof *g, NULL));
  dsync();
  hk_status st = hk_allreduce(name, dgrad, dgrad, D, HK_FLOAT64, HK_SUM);
  if (st == HK_OK) {
    HKT_OK(dev->ops->memcpy_async(dev, g, dgrad, D * sizeof *g, NULL));
    dsync();
  }
  return st;
}

/* What the emulated device saw: communicator ids made here (on the
 * host's first rank, one per generation that ran a device allreduce) and
 * communicators aborted (one per generation left through a loss). */
static void dev_report(int slot) {
  printf("device slot=%d ids=%zu aborted=%zu\n", slot,
         hk_emu_unique_ids_created(), hk_emu_comms_aborted());
}
#else
static void dev_open(void) {}

static void dev_report(int slot) { (void)slot; }

static hk_status allreduce(const char *name, double *g) {
  return hk_allreduce(name, g, g, D, HK_FLOAT64, HK_SUM);
}
#endif

static double wall(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* The same as test_elastic.c's replay. */
static double grad(int slot, int step, int i) {
  return (double)(((slot + 1) * (i + 1) + step) % 7 - 3);
}

/* Takes rank 0's model and step (State.sync). */
static hk_status sync_from_rank0(double *w, int *step) {
  double sync[D + 1];
  memcpy(sync, w, D * sizeof *w);
  sync[D] = *step;
  hk_status st = hk_broadcast("elastic.sync", sync, D + 1, HK_FLOAT64, 0);
  if (st == HK_OK) {
    memcpy(w, sync, D * sizeof *w);
    *step = (int)sync[D];
  }
  return st;
}

/* After HK_ERR_RANKS_CHANGED: restore the commit, re-form, take rank 0's
 * commit (State.sync); again while ranks are lost meanwhile. Exits 3
 * when the job cannot re-form. */
static void reform(int slot, double *w, const double *saved_w, int *step,
                   int saved_step, int kill2_slot, int kill2_after) {
  hk_status st;
  do {
    memcpy(w, saved_w, D * sizeof *w); /* restore */
    *step = saved_step;
    if (slot == kill2_slot && kill2_after == 2) {
      printf("leaving instead of re-forming\n");
      hk_status st = hk_shutdown(); /* the job's failure, as documented */
      HKT_CHECK(st == HK_ERR_RANKS_CHANGED, "hk_shutdown gave %s",
                hk_strerror(st));
      exit(0);
    }
    if (slot == kill2_slot && kill2_after == 3) {
      printf("exiting instead of re-forming\n");
      exit(4);
    }
    if (slot == kill2_slot && kill2_after < 0) {
      printf("never calling hk_elastic_reset\n");
      for (;;)
        pause(); /* until hkrun's SIGTERM */
    }
    if (slot == kill2_slot && !kill2_after) {
      printf("dying before the reset\n");
      kill(getpid(), SIGKILL);
    }
    st = hk_elastic_reset();
    if (st == HK_ERR_RANKS_CHANGED)
      continue;
    if (st != HK_OK) {
      printf("reset failed: %s: %s\n", hk_strerror(st), hk_last_error());
      hk_shutdown();
      exit(3);
    }
    if (slot == kill2_slot && kill2_after) {
      printf("dying after the reset\n");
      kill(getpid(), SIGKILL);
    }
    st = sync_from_rank0(w, step);
  } while (st == HK_ERR_RANKS_CHANGED &&
           fprintf(stderr, "slot %d: ranks changed while re-forming: %s\n",
                   slot, hk_last_error()) > 0);
  HKT_OK(st);
  printf("reset: rank %d of %d (slot %d) from step %d\n", hk_rank(), hk_size(),
         slot, *step);
}

/* W_ELASTIC_JOIN_STEP's wait: 8-byte allreduces (each a round that may
 * carry rank 0's word) until hk_elastic_hosts_updated says workers wait
 * to join; 1 then, 0 after 60 s. Every rank leaves after the same
 * round. */
static int wait_for_joiners(int step) {
  printf("waiting for workers to join at step %d\n", step);
  for (int i = 0; i < 6000; i++) {
    int updated = 0;
    HKT_OK(hk_elastic_hosts_updated(&updated));
    if (updated)
      return 1;
    double x = 1;
    HKT_OK(hk_allreduce("elastic.wait", &x, &x, 1, HK_FLOAT64, HK_SUM));
    struct timespec pace = {0, 10 * 1000 * 1000};
    nanosleep(&pace, NULL); /* a trainer's compute: paces the rounds */
  }
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 5 && argc != 7) {
    fprintf(stderr, "usage: w_elastic STEPS COMMIT_EVERY KILL_SLOT "
                    "KILL_STEP [KILL2_SLOT before|after|never|leave|exit]\n");
    return 2;
  }
  const int steps = atoi(argv[1]), every = atoi(argv[2]);
  const int kill_slot = atoi(argv[3]), kill_step = atoi(argv[4]);
  const int kill2_slot = argc == 7 ? atoi(argv[5]) : -1;
  const int kill2_after = argc != 7                       ? 0
                          : strcmp(argv[6], "after") == 0 ? 1
                          : strcmp(argv[6], "never") == 0 ? -1
                          : strcmp(argv[6], "leave") == 0 ? 2
                          : strcmp(argv[6], "exit") == 0  ? 3
                                                          : 0;
  const char *join_env = getenv("W_ELASTIC_JOIN_STEP");
  const int join_step = join_env ? atoi(join_env) : -1;
  const char *stop_env = getenv("W_ELASTIC_STOP");
  int stop_step = -1;
  if (stop_env && strchr(stop_env, ':')) {
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    const size_t n = (size_t)(strchr(stop_env, ':') - stop_env);
    if (strlen(me) == n && strncmp(me, stop_env, n) == 0)
      stop_step = atoi(strchr(stop_env, ':') + 1);
  }
  HKT_OK(hk_init());
  dev_open();
  int slot = hk_rank();
  double w[D], saved_w[D]; /* the model and its commit */
  for (int i = 0; i < D; i++)
    w[i] = i / 8.0;
  int step = 0, saved_step = 0, resumed = 1, joined = 0, first = 0;
  memcpy(saved_w, w, sizeof w);
  hk_status st0 = sync_from_rank0(w, &step);
  if (st0 == HK_ERR_RANKS_CHANGED)
    reform(slot, w, saved_w, &step, 0, kill2_slot, kill2_after);
  else
    HKT_OK(st0);
  if (step > 0) { /* joined a running job, in a lost host's slot */
    slot = atoi(getenv("HK_RANK"));
    printf("joined at step %d as rank %d of %d (slot %d)\n", step, hk_rank(),
           hk_size(), slot);
    joined = first = 1;
  }
  memcpy(saved_w, w, sizeof w);
  saved_step = step;
  while (step < steps) {
    if (step % every == 0) { /* commit: a local copy */
      memcpy(saved_w, w, sizeof w);
      saved_step = step;
      int updated = 0;
      hk_status st = hk_elastic_hosts_updated(&updated);
      if (st == HK_OK && !updated && !joined && step == join_step) {
        if (!wait_for_joiners(step)) {
          printf("nobody joined at step %d\n", step);
          hk_shutdown();
          return 5;
        }
        updated = 1;
      }
      if (st == HK_OK && updated) {
        st = hk_elastic_reset();
        if (st == HK_OK)
          st = sync_from_rank0(w, &step);
        if (st == HK_OK)
          printf("admitted: rank %d of %d (slot %d) at step %d\n", hk_rank(),
                 hk_size(), slot, step);
        joined = 1;
      }
      if (st == HK_ERR_RANKS_CHANGED) {
        reform(slot, w, saved_w, &step, saved_step, kill2_slot, kill2_after);
        resumed = 0;
        continue;
      }
      HKT_OK(st);
    }
    if ((kill_slot == -2 && step == kill_step) || step == stop_step) {
      printf("stopped at step %d\n", step);
      fflush(stdout);
      for (;;)
        pause();
    }
    if (slot == kill_slot && step == kill_step) {
      printf("dying at step %d t=%.6f\n", step, wall());
      kill(getpid(), SIGKILL);
    }
    double g[D];
    for (int i = 0; i < D; i++)
      g[i] = grad(slot, step, i);
    char name[32];
    snprintf(name, sizeof name, "grad.%d", step);
    hk_status st = allreduce(name, g);
    if (st == HK_ERR_RANKS_CHANGED) {
      fprintf(stderr, "slot %d step %d: ranks changed: %s\n", slot, step,
              hk_last_error());
      reform(slot, w, saved_w, &step, saved_step, kill2_slot, kill2_after);
      resumed = 0;
      continue;
    }
    HKT_OK(st);
    for (int i = 0; i < D; i++)
      w[i] -= 0.125 * (g[i] / (double)hk_size());
    if (!resumed) {
      printf("resumed step %d t=%.6f\n", step, wall());
      resumed = 1;
    }
    if (first) {
      printf("first step %d t=%.6f\n", step, wall());
      first = 0;
    }
    step++;
  }
  printf("final slot=%d rank=%d size=%d w=", slot, hk_rank(), hk_size());
  for (int i = 0; i < D; i++)
    printf("%s%a", i ? "," : "", w[i]);
  printf("\n");
  HKT_OK(hk_shutdown());
  dev_report(slot);
  return 0;
}
