/*
 * runtime.c - the public API (include/hk/hk.h): hk_init/hk_shutdown, the
 * rank queries, argument checking, and the submit/wait wrappers over the
 * tensor queue. The one process-wide pointer to the runtime context lives
 * here.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/waiter.h"
#include "coordinator/channel.h"
#include "device/host/reduce.h"
#include "topology/topo.h"
#include "worker/agree.h"
#include "worker/algo.h"
#include "worker/background.h"
#include "worker/bootstrap.h"
#include "worker/context.h"
#include "worker/devplane.h"
#include "worker/elastic.h"
#include "worker/execute.h"
#include "worker/intra.h"
#include "worker/mpi_exchange.h"
#include "worker/observers.h"
#include "worker/placement.h"
#include "worker/queue.h"
#include "worker/rings.h"
#include "worker/runtime.h"
#include "worker/sets.h"
#include "worker/tune.h"

/* The runtime context; set by hk_init before any other thread may use it,
 * cleared by hk_shutdown after the background thread has stopped. */
static hk_ctx *g_ctx;
/* 1 once hk_shutdown has run (until the next hk_init succeeds), so that a
 * call without a context can say which side of the job it came from. */
static int g_shut_down;

/* Declared in worker/runtime.h (internal; not part of hk.h). */
hk_ctx *hk_runtime_context(void) { return g_ctx; }

/* Declared in worker/runtime.h. */
hk_status hk_runtime_no_job(const char *fn) {
  if (g_shut_down)
    return hk_fail(HK_ERR_NOT_INITIALIZED,
                   "%s called after hk_shutdown (this process's job has "
                   "ended)",
                   fn);
  return hk_fail(HK_ERR_NOT_INITIALIZED, "%s called before hk_init", fn);
}

/* Reads rank, size and local placement from what the launcher set:
 * hkrun's HK_* variables, else Open MPI's or Slurm's (worker/placement.h);
 * none: a world of one. */
static hk_status read_placement(hk_ctx *ctx) {
  hk_placement pl;
  hk_status st = hk_placement_from_env(&pl);
  if (st != HK_OK)
    return st;
  ctx->placement = (int)pl.source;
  ctx->rank = pl.rank;
  ctx->size = pl.size;
  ctx->local_rank = pl.local_rank;
  ctx->local_size = pl.local_size; /* -1 (Slurm): from host names later */
  if (pl.source == HK_PLACEMENT_NONE) {
    ctx->rank = ctx->local_rank = 0;
    ctx->size = ctx->local_size = 1;
    return HK_OK;
  }
  const char *secret = ctx->cfg.secret;
  if (pl.source == HK_PLACEMENT_HKRUN || *secret)
    st = hk_secret_parse(secret, &ctx->secret);
  else /* plain mpirun/srun: rank 0's secret is shared over MPI */
    ctx->secret_from_rank0 = 1;
  return st;
}

/* If hkrun started us, die with it: no worker outlives its launcher (and
 * the flight recorder may ask it to signal every rank). */
static void die_with_launcher(hk_ctx *ctx) {
  const int pid = ctx->cfg.launcher_pid;
  ctx->launcher_parent = pid && pid == (int)getppid() ? pid : 0;
  if (ctx->launcher_parent)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static void destroy(hk_ctx *ctx) {
  hk_observe_detach(&ctx->obs, 0); /* (a no-op once hk_shutdown did) */
  hk_sets_close(ctx);              /* their rings and communicators first */
  hk_devplane_close(ctx); /* before the mesh: a comm may use the network */
  hk_rings_destroy(ctx);  /* (the shm group before the segment goes) */
  hk_mesh_close(&ctx->mesh, ctx->size);
  hk_intra_destroy(ctx);
  hk_execute_release(ctx);
  free(ctx->layout);
  free(ctx->hosts);
  hk_allreduce_release(&ctx->ar);
  hk_strmap_destroy(ctx->inflight);
  hk_strmap_destroy(ctx->overflow_warned);
  hk_strmap_destroy(ctx->taken);
  hk_buf_free(&ctx->scratch);
  if (ctx->wake_fd >= 0)
    close(ctx->wake_fd);
  pthread_mutex_destroy(&ctx->mu);
  pthread_cond_destroy(&ctx->done_cv);
  free(ctx);
}

/*
 * Tells hkrun that this rank leaves the job through the API (hk_shutdown,
 * or an hk_init that fails after registering): hkrun treats a registered
 * worker that exits without this as failed, even with status 0. Called on
 * the one thread left (the background thread has stopped or never ran);
 * the socket's buffer is empty (a worker sends hkrun nothing else after
 * REGISTER but rank 0's monitor tables, whose thread has stopped and
 * whose sends completed), so this does not block. Best effort: hkrun may be
 * gone.
 */
static void say_goodbye(hk_ctx *ctx) {
  if (ctx->mesh.launcher_fd < 0)
    return;
  hk_msg m = {.type = HK_MSG_GOODBYE};
  m.u.goodbye.rank = ctx->slot; /* hkrun knows it by the rank it started */
  hk_io io = {-1, 1.0}; /* an ABORT waiting to be read must not stop it */
  hk_buf b = {0};
  char saved[HK_ERROR_MSG_CAP];
  snprintf(saved, sizeof saved, "%s", hk_last_error());
  if (hk_channel_send(ctx->mesh.launcher_fd, &m, &b, &io, "hkrun") != HK_OK)
    hk_log(HK_LOG_INFO, "could not say goodbye to hkrun: %s", hk_last_error());
  hk_set_last_error(saved);
  hk_buf_free(&b);
}

/* Rank 0's response-cache figures at info level, at the end of the job
 * (the background thread, the cache's owner, has stopped). */
static void cache_report(const hk_ctx *ctx) {
  if (ctx->rank != 0 || ctx->size < 2 || !ctx->sets)
    return;
  const hk_cache *c = hk_sets_world(ctx)->cache;
  hk_cache_stats s = hk_cache_get_stats(c);
  uint64_t all = s.hits + s.misses;
  if (!all)
    return;
  hk_log(HK_LOG_INFO,
         "response cache: %.1f%% hits (%llu of %llu responses ran from a "
         "cache bit); %u of %u entries live, %llu evicted, %llu names "
         "without a bit (HK_CACHE_CAPACITY=%u)",
         100.0 * (double)s.hits / (double)all, (unsigned long long)s.hits,
         (unsigned long long)all, hk_cache_live(c), hk_cache_capacity(c),
         (unsigned long long)s.evictions, (unsigned long long)s.out_of_bits,
         hk_cache_capacity(c));
}

/* A context holding no job yet: its lock, maps and wake fd (mesh fds
 * -1). NULL when out of memory or out of descriptors (hk_fail says). */
static hk_ctx *ctx_new(void) {
  hk_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    hk_fail(HK_ERR_NOMEM, "cannot allocate the runtime context");
    return NULL;
  }
  ctx->mesh = (hk_mesh){
      .listen_fd = -1, .launcher_fd = -1, .ctrl_fd = -1, .watch_fd = -1};
  ctx->wake_fd = -1;
  /* adaptive: a thread that finds mu taken spins briefly before it
   * sleeps; the trainer's submits and the background thread's takes and
   * completions hold it for a few hundred ns, and a sleep costs each
   * side a futex call and a context switch */
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(&ctx->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_cond_init(&ctx->done_cv, NULL);
  hk_status st = HK_OK;
  ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ctx->wake_fd < 0)
    st = hk_fail_errno(HK_ERR_SYSTEM, errno, "eventfd");
  if (st == HK_OK)
    st = hk_strmap_create(&ctx->inflight);
  if (st == HK_OK)
    st = hk_strmap_create(&ctx->overflow_warned);
  if (st == HK_OK)
    st = hk_strmap_create(&ctx->taken);
  if (st != HK_OK) {
    destroy(ctx);
    return NULL;
  }
  return ctx;
}

/* The job on top of a built mesh (hk_init, hk_elastic_reset): shared
 * memory, rings, process sets, the allreduce choice, the device plane,
 * the settings check, the observers, and the background thread. */
static hk_status start_job(hk_ctx *ctx) {
  ctx->io.abort_fd = ctx->mesh.launcher_fd;
  hk_waiter_configure(ctx->cfg.spin_us * 1e-6, ctx->local_size,
                      hk_usable_cpus());
  hk_status st = hk_intra_setup(ctx);
  if (st == HK_OK)
    st = hk_rings_setup(ctx);
  if (st == HK_OK)
    st = hk_sets_open(ctx);
  if (st == HK_OK)
    st = hk_algo_setup(ctx);
  if (st == HK_OK)
    st = hk_devplane_open(ctx);
  if (st == HK_OK)
    st = hk_agree_settings(ctx);
  if (st == HK_OK)
    st = hk_sets_static(ctx);
  if (st == HK_OK)
    st = hk_observers_ready(ctx);
  if (st == HK_OK)
    st = hk_bootstrap_watch(ctx); /* elastic, rank 0: joiners */
  if (st == HK_OK) {
    /* SIGUSR1 (the flight recorder's) is for the trainer's threads: the
     * background thread and those it starts are woken through a pipe and
     * never see EINTR from it */
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, &old);
    if (pthread_create(&ctx->thread, NULL, hk_background_main, ctx) != 0)
      st = hk_fail(HK_ERR_SYSTEM, "cannot start the background thread");
    else
      ctx->thread_started = 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  return st;
}

static void log_prefix(const hk_ctx *ctx) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "hk[%d]", ctx->rank);
  hk_log_setup(prefix, (hk_log_level)ctx->cfg.log_level);
}

hk_status hk_init(void) {
  if (g_ctx)
    return hk_fail(HK_ERR_ALREADY_INITIALIZED,
                   "hk_init called twice without hk_shutdown");
  hk_ctx *ctx = ctx_new();
  if (!ctx)
    return HK_ERR_NOMEM;
  hk_status st = hk_config_load(&ctx->cfg);
  if (st == HK_OK)
    st = read_placement(ctx);
  if (st != HK_OK) {
    destroy(ctx);
    return st;
  }
  ctx->slot = ctx->rank;
  ctx->slots = ctx->size;
  log_prefix(ctx);
  die_with_launcher(ctx);
  ctx->io = (hk_io){-1, ctx->cfg.timeout_s};
  /* the wait policy (common/waiter.h): HK_SPIN_US, and whether this
   * host's ranks fit its cores (again once bootstrap knows the host) */
  hk_waiter_configure(ctx->cfg.spin_us * 1e-6,
                      ctx->local_size > 0 ? ctx->local_size : 1,
                      hk_usable_cpus());
  st = hk_observers_attach(ctx);
  if (st == HK_OK)
    st = hk_bootstrap(ctx);
  if (st == HK_OK && ctx->rank != ctx->slot)
    log_prefix(ctx); /* an elastic job formed without a lost worker */
  if (st == HK_OK && ctx->cfg.test_kill_in_start)
    raise(SIGKILL);
  if (st == HK_OK) {
    st = start_job(ctx);
    if (st != HK_OK)
      st = hk_elastic_explain(ctx, st); /* e.g. a peer lost meanwhile */
  }
  if (st == HK_ERR_RANKS_CHANGED) {
    /* elastic: a worker was lost while the job started; the others
     * re-form it without it, as hk_elastic_reset does after a step */
    pthread_mutex_lock(&ctx->mu);
    ctx->failure = st;
    snprintf(ctx->failure_reason, sizeof ctx->failure_reason, "%s",
             hk_last_error());
    pthread_mutex_unlock(&ctx->mu);
    g_ctx = ctx;
    do
      st = hk_elastic_reset();
    while (st == HK_ERR_RANKS_CHANGED);
    ctx = g_ctx;
    g_ctx = NULL;
  }
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    say_goodbye(ctx); /* the caller is told; what it does next is its own */
    destroy(ctx);
    return hk_fail(st, "%s", msg); /* callers name hk_init themselves */
  }
  g_ctx = ctx;
  g_shut_down = 0;
  /* HK_SECRET and HK_DUMP_FD were for this call alone: the programs this
   * process starts do not see them (common/config.h) */
  hk_config_consume();
  hk_log(HK_LOG_INFO, "rank %d of %d joined (local %d of %d)", ctx->rank,
         ctx->size, ctx->local_rank, ctx->local_size);
  return HK_OK;
}

/* A context that only says the job failed (st, msg) and keeps from's
 * launcher connection and settings: what hk_elastic_reset leaves when it
 * fails, so that every call fails saying why, hk_shutdown leaves, and
 * after HK_ERR_RANKS_CHANGED hk_elastic_reset can be called again. */
static hk_ctx *failed_job(hk_ctx *from, hk_status st, const char *msg) {
  hk_ctx *ctx = ctx_new();
  if (!ctx)
    return NULL;
  ctx->cfg = from->cfg;
  ctx->secret = from->secret;
  ctx->placement = from->placement;
  ctx->launcher_parent = from->launcher_parent;
  ctx->slot = from->slot;
  ctx->slots = from->slots;
  ctx->generation = from->generation;
  ctx->rank = from->rank;
  ctx->size = from->size;
  ctx->local_rank = from->local_rank;
  ctx->local_size = from->local_size;
  ctx->cross_size = 1;
  ctx->io = (hk_io){-1, from->cfg.timeout_s};
  ctx->mesh.launcher_fd = from->mesh.launcher_fd;
  from->mesh.launcher_fd = -1;
  ctx->failure = st;
  snprintf(ctx->failure_reason, sizeof ctx->failure_reason, "%s", msg);
  ctx->stopped = 1;
  return ctx;
}

/* The job's failure (HK_OK while none) and its reason into
 * reason[sizeof ctx->failure_reason], read under ctx->mu. */
static hk_status job_failure(hk_ctx *ctx, char *reason) {
  pthread_mutex_lock(&ctx->mu);
  const hk_status why = ctx->failure;
  snprintf(reason, sizeof ctx->failure_reason, "%s", ctx->failure_reason);
  pthread_mutex_unlock(&ctx->mu);
  return why;
}

/* Asks the background thread to stop the job with every rank (the
 * shutdown protocol: worker/background.c) and wakes it. */
static void request_stop(hk_ctx *ctx) {
  pthread_mutex_lock(&ctx->mu);
  ctx->shutdown_requested = 1;
  pthread_mutex_unlock(&ctx->mu);
  uint64_t one = 1;
  ssize_t w = write(ctx->wake_fd, &one, sizeof one);
  (void)w;
}

hk_status hk_elastic_reset(void) {
  hk_ctx *old = g_ctx;
  if (!old)
    return hk_runtime_no_job("hk_elastic_reset");
  if (!old->cfg.elastic || old->mesh.launcher_fd < 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_elastic_reset: this is not an elastic job (start it "
                   "with hkrun --min-np N)");
  char reason[sizeof old->failure_reason];
  const hk_status why = job_failure(old, reason);
  /* workers wait to join: every rank was told so at the same round and
   * calls this at the same commit */
  const int admit = (why == HK_OK || why == HK_ERR_SHUTDOWN) &&
                    __atomic_load_n(&old->hosts_updated, __ATOMIC_ACQUIRE);
  if (why != HK_ERR_RANKS_CHANGED && !admit)
    return hk_fail(HK_ERR_INVALID_ARG,
                   why == HK_OK
                       ? "hk_elastic_reset: the job has not changed (it "
                         "re-forms after a call failed with "
                         "HK_ERR_RANKS_CHANGED, or when "
                         "hk_elastic_hosts_updated said workers wait to "
                         "join)%s"
                       : "hk_elastic_reset: the job failed otherwise: %s "
                         "(only a job whose ranks changed re-forms)",
                   reason);
  if (admit) {
    /* the generation stops as at hk_shutdown (every rank stops with it),
     * without leaving the job */
    snprintf(reason, sizeof reason, "workers joined the job");
    request_stop(old);
  }
  const double t0 = hk_now();
  if (old->thread_started) { /* it ended with the failure, or the stop */
    pthread_join(old->thread, NULL);
    old->thread_started = 0;
  }
  hk_observe_detach(&old->obs, 0);
  /* the old job goes first (its device communicator aborted, as its
   * failure is set): nothing of it may outlive the reset */
  hk_ctx *ctx = failed_job(old, HK_ERR_RANKS_CHANGED, reason);
  if (!ctx)
    return HK_ERR_NOMEM; /* the old job stays, failed */
  destroy(old);
  g_ctx = NULL;
  ctx->failure = HK_OK;
  ctx->stopped = 0;
  ctx->generation++;
  hk_tune_reset_settings(&ctx->cfg); /* the same on every survivor */
  hk_status st = hk_bootstrap_again(ctx);
  if (st == HK_OK) {
    log_prefix(ctx);
    st = hk_observers_attach(ctx);
  }
  if (st == HK_OK) {
    st = start_job(ctx);
    if (st != HK_OK)
      st = hk_elastic_explain(ctx, st); /* e.g. a peer lost meanwhile */
  }
  if (st == HK_OK) {
    g_ctx = ctx;
    hk_log(HK_LOG_INFO,
           "re-formed (generation %d) in %.3f s: rank %d of %d (started as "
           "rank %d of %d)",
           ctx->generation, hk_now() - t0, ctx->rank, ctx->size, ctx->slot,
           ctx->slots);
    hk_clear_error();
    return HK_OK;
  }
  char msg[HK_WIRE_MAX_REASON_LEN + 1];
  snprintf(msg, sizeof msg, "%s", hk_last_error());
  if (ctx->thread_started) { /* (start_job fails before it starts it) */
    pthread_join(ctx->thread, NULL);
    ctx->thread_started = 0;
  }
  hk_observe_detach(&ctx->obs, 0);
  ctx->failure = st; /* its device communicator is aborted, not destroyed */
  hk_ctx *left = failed_job(ctx, st, msg);
  destroy(ctx);
  g_ctx = left;
  return hk_fail(st, "hk_elastic_reset: %s", msg);
}

hk_status hk_elastic_hosts_updated(int *updated) {
  if (!updated)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_elastic_hosts_updated: updated is NULL");
  *updated = 0;
  hk_ctx *ctx = g_ctx;
  if (!ctx)
    return hk_runtime_no_job("hk_elastic_hosts_updated");
  /* first: the generation may already have stopped for the admission (a
   * rank that called hk_elastic_reset first stops every rank) */
  *updated = __atomic_load_n(&ctx->hosts_updated, __ATOMIC_ACQUIRE);
  if (*updated)
    return HK_OK;
  char reason[sizeof ctx->failure_reason];
  const hk_status why = job_failure(ctx, reason);
  return why == HK_OK ? HK_OK : hk_fail(why, "%s", reason);
}

hk_status hk_shutdown(void) {
  hk_ctx *ctx = g_ctx;
  if (!ctx)
    return hk_runtime_no_job("hk_shutdown");
  request_stop(ctx);
  if (ctx->thread_started)
    pthread_join(ctx->thread, NULL);
  /* the observers go (rank 0's monitor: the report, the last metrics
   * file) */
  hk_observe_detach(&ctx->obs, 1);
  say_goodbye(ctx);
  cache_report(ctx);
  hk_status st = ctx->failure;
  char reason[sizeof ctx->failure_reason];
  snprintf(reason, sizeof reason, "%s", ctx->failure_reason);
  g_ctx = NULL;
  g_shut_down = 1;
  destroy(ctx);
  hk_mpi_finalize_if_owned(); /* if hk_init started MPI (mpirun, srun) */
  if (st == HK_OK || st == HK_ERR_SHUTDOWN)
    return HK_OK;
  return hk_fail(st, "%s", reason);
}

int hk_rank(void) { return g_ctx ? g_ctx->rank : -1; }
int hk_size(void) { return g_ctx ? g_ctx->size : -1; }
int hk_local_rank(void) { return g_ctx ? g_ctx->local_rank : -1; }
int hk_local_size(void) { return g_ctx ? g_ctx->local_size : -1; }
int hk_cross_rank(void) { return g_ctx ? g_ctx->cross_rank : -1; }
int hk_cross_size(void) { return g_ctx ? g_ctx->cross_size : -1; }

hk_status hk_wait(hk_handle handle) {
  if (!handle)
    return hk_fail(HK_ERR_INVALID_ARG, "hk_wait: NULL handle");
  /* After hk_shutdown every handle has completed (with HK_ERR_SHUTDOWN if
   * it was still pending); waiting then collects it without the context. */
  if (!g_ctx && !handle->done)
    return hk_runtime_no_job("hk_wait");
  return hk_queue_wait(g_ctx, handle);
}

hk_status hk_poll(hk_handle handle, int *done) {
  if (!handle || !done)
    return hk_fail(HK_ERR_INVALID_ARG, "hk_poll: NULL %s",
                   !handle ? "handle" : "done pointer");
  if (!g_ctx) { /* after hk_shutdown every handle has completed */
    *done = handle->done;
    return HK_OK;
  }
  hk_queue_poll(g_ctx, handle, done);
  return HK_OK;
}

void hk_set_stream(void *stream) { hk_devplane_set_stream(stream); }

void *hk_get_stream(void) { return hk_devplane_stream(); }

hk_status hk_wait_stream(hk_handle handle, void *stream) {
  if (!handle)
    return hk_fail(HK_ERR_INVALID_ARG, "hk_wait_stream: NULL handle");
  if (!g_ctx) /* after hk_shutdown every handle has completed */
    return hk_wait(handle);
  return hk_queue_wait_stream(g_ctx, handle, stream);
}

void *hk_device_stream(void) { return hk_devplane_work_stream(g_ctx); }

void hk_free(void *p) { hk_devplane_free(g_ctx, p); }
