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

#include "common/log.h"
#include "common/status.h"
#include "coordinator/channel.h"
#include "device/host/reduce.h"
#include "topology/topo.h"
#include "worker/agree.h"
#include "worker/algo.h"
#include "worker/background.h"
#include "worker/bootstrap.h"
#include "worker/context.h"
#include "worker/devplane.h"
#include "worker/execute.h"
#include "worker/intra.h"
#include "worker/mpi_exchange.h"
#include "worker/observers.h"
#include "worker/placement.h"
#include "worker/queue.h"
#include "worker/rings.h"
#include "worker/runtime.h"

/* The runtime context; set by hk_init before any other thread may use it,
 * cleared by hk_shutdown after the background thread has stopped. */
static hk_ctx *g_ctx;
/* 1 once hk_shutdown has run (until the next hk_init succeeds), so that a
 * call without a context can say which side of the job it came from. */
static int g_shut_down;

/* Declared in worker/runtime.h (internal; not part of hk.h). */
hk_ctx *hk_runtime_context(void) { return g_ctx; }

/* HK_ERR_NOT_INITIALIZED for fn, called with no job: before hk_init, or
 * after hk_shutdown ended the job. */
static hk_status no_job(const char *fn) {
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
  hk_devplane_close(ctx); /* before the mesh: a comm may use the network */
  hk_rings_destroy(ctx);  /* (the shm group before the segment goes) */
  hk_mesh_close(&ctx->mesh, ctx->size);
  hk_intra_destroy(ctx);
  hk_execute_release(ctx);
  hk_cache_destroy(ctx->cache);
  free(ctx->inval);
  free(ctx->layout);
  free(ctx->hosts);
  hk_allreduce_release(&ctx->ar);
  hk_negotiator_destroy(ctx->negotiator);
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
  m.u.goodbye.rank = ctx->rank;
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
  if (ctx->rank != 0 || ctx->size < 2 || !ctx->cache)
    return;
  hk_cache_stats s = hk_cache_get_stats(ctx->cache);
  uint64_t all = s.hits + s.misses;
  if (!all)
    return;
  hk_log(HK_LOG_INFO,
         "response cache: %.1f%% hits (%llu of %llu responses ran from a "
         "cache bit); %u of %u entries live, %llu evicted, %llu names "
         "without a bit (HK_CACHE_CAPACITY=%u)",
         100.0 * (double)s.hits / (double)all, (unsigned long long)s.hits,
         (unsigned long long)all, hk_cache_live(ctx->cache),
         hk_cache_capacity(ctx->cache), (unsigned long long)s.evictions,
         (unsigned long long)s.out_of_bits, hk_cache_capacity(ctx->cache));
}

hk_status hk_init(void) {
  if (g_ctx)
    return hk_fail(HK_ERR_ALREADY_INITIALIZED,
                   "hk_init called twice without hk_shutdown");
  hk_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the runtime context");
  ctx->mesh = (hk_mesh){-1, -1, NULL, -1, NULL, NULL};
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
  hk_status st = hk_config_load(&ctx->cfg);
  if (st == HK_OK)
    st = read_placement(ctx);
  if (st != HK_OK) {
    destroy(ctx);
    return st;
  }
  char prefix[32];
  snprintf(prefix, sizeof prefix, "hk[%d]", ctx->rank);
  hk_log_setup(prefix, (hk_log_level)ctx->cfg.log_level);
  die_with_launcher(ctx);
  ctx->io = (hk_io){-1, ctx->cfg.timeout_s};
  ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ctx->wake_fd < 0)
    st = hk_fail_errno(HK_ERR_SYSTEM, errno, "eventfd");
  if (st == HK_OK)
    st = hk_strmap_create(&ctx->inflight);
  if (st == HK_OK)
    st = hk_strmap_create(&ctx->overflow_warned);
  st = hk_strmap_create(&ctx->taken);
  if (st == HK_OK && ctx->rank == 0)
    st = hk_negotiator_create(ctx->size, &ctx->negotiator);
  if (st == HK_OK)
    st = hk_cache_create((uint32_t)ctx->cfg.cache_capacity, &ctx->cache);
  if (st == HK_OK)
    st = hk_observers_attach(ctx);
  if (st == HK_OK)
    st = hk_bootstrap(ctx);
  if (st == HK_OK) {
    ctx->io.abort_fd = ctx->mesh.launcher_fd;
    st = hk_intra_setup(ctx);
  }
  if (st == HK_OK)
    st = hk_rings_setup(ctx);
  if (st == HK_OK)
    st = hk_algo_setup(ctx);
  if (st == HK_OK)
    st = hk_devplane_open(ctx);
  if (st == HK_OK)
    st = hk_agree_settings(ctx);
  if (st == HK_OK)
    st = hk_observers_ready(ctx);
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
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    say_goodbye(ctx); /* the caller is told; what it does next is its own */
    destroy(ctx);
    return hk_fail(st, "%s", msg); /* callers name hk_init themselves */
  }
  g_ctx = ctx;
  g_shut_down = 0;
  hk_log(HK_LOG_INFO, "rank %d of %d joined (local %d of %d)", ctx->rank,
         ctx->size, ctx->local_rank, ctx->local_size);
  return HK_OK;
}

hk_status hk_shutdown(void) {
  hk_ctx *ctx = g_ctx;
  if (!ctx)
    return no_job("hk_shutdown");
  pthread_mutex_lock(&ctx->mu);
  ctx->shutdown_requested = 1;
  pthread_mutex_unlock(&ctx->mu);
  uint64_t one = 1;
  ssize_t w = write(ctx->wake_fd, &one, sizeof one);
  (void)w;
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

/* Checks what every collective shares and fills the request's name. */
static hk_status check_common(const char *fn, const char *name, size_t count,
                              hk_dtype dtype, hk_wire_request *req) {
  if (!g_ctx)
    return no_job(fn);
  if (!name || !*name)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: the tensor name is %s", fn,
                   name ? "empty" : "NULL");
  size_t len = strlen(name);
  if (len > HK_MAX_NAME_LEN)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor name '%.40s...' is %zu bytes, over the limit "
                   "of %d",
                   fn, name, len, HK_MAX_NAME_LEN);
  if ((unsigned)dtype > HK_INT64)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': unknown dtype %d", fn,
                   name, (int)dtype);
  if (count > SIZE_MAX / 8)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': count %zu elements is too large", fn, name,
                   count);
  hk_wire_request_clear(req);
  memcpy(req->name, name, len + 1);
  req->prescale = req->postscale = 1.0;
  req->dtype = (uint8_t)dtype;
  req->count = count;
  req->row_elems = 1;
  return HK_OK;
}

/* The reduction op is one of hk_op's. */
static hk_status check_op(const char *fn, const char *name, hk_op op) {
  if ((unsigned)op > HK_PRODUCT)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': unknown op %d", fn,
                   name, (int)op);
  return HK_OK;
}

/* check_common for a tensor of rows x row_elems elements, which must
 * fit, in bytes, in a size_t. */
static hk_status check_rows(const char *fn, const char *name, size_t rows,
                            size_t row_elems, hk_dtype dtype,
                            hk_wire_request *req) {
  hk_status st = check_common(fn, name, rows, dtype, req);
  if (st != HK_OK)
    return st;
  if (row_elems == 0 || (rows && row_elems > SIZE_MAX / 8 / rows))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "%s: tensor '%s': %zu rows of %zu elements is not a "
                   "valid shape",
                   fn, name, rows, row_elems);
  req->row_elems = row_elems;
  return HK_OK;
}

hk_status hk_allreduce_async(const char *name, const void *sendbuf,
                             void *recvbuf, size_t count, hk_dtype dtype,
                             hk_op op, hk_handle *handle) {
  return hk_allreduce_scaled_async(name, sendbuf, recvbuf, count, dtype, op,
                                   1.0, 1.0, handle);
}

hk_status hk_allreduce_scaled_async(const char *name, const void *sendbuf,
                                    void *recvbuf, size_t count, hk_dtype dtype,
                                    hk_op op, double prescale, double postscale,
                                    hk_handle *handle) {
  hk_wire_request req;
  hk_status st = check_common("hk_allreduce_async", name, count, dtype, &req);
  if (st == HK_OK)
    st = check_op("hk_allreduce_async", name, op);
  if (st != HK_OK)
    return st;
  if (!handle || (count > 0 && (!sendbuf || !recvbuf)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_allreduce_async: tensor '%s': NULL %s", name,
                   !handle ? "handle pointer" : "buffer");
  size_t bytes = count * hk_dtype_size(dtype);
  const char *s = sendbuf, *r = recvbuf;
  if (s != r && count > 0 && s < r + bytes && r < s + bytes)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_allreduce_async: tensor '%s': sendbuf and recvbuf "
                   "overlap without being equal",
                   name);
  int is_float = dtype <= HK_FLOAT64;
  if ((prescale != 1.0 || postscale != 1.0) &&
      (!is_float || !isfinite(prescale) || !isfinite(postscale)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_allreduce_async: tensor '%s': prescale %g / postscale "
                   "%g: factors other than 1 need a floating dtype and "
                   "finite values (dtype is %s)",
                   name, prescale, postscale, hk_dtype_name(dtype));
  req.coll = HK_COLL_ALLREDUCE;
  req.op = (uint8_t)op;
  req.prescale = prescale;
  req.postscale = postscale;
  return hk_queue_submit(g_ctx, &req, sendbuf, recvbuf, NULL, handle);
}

hk_status hk_broadcast_async(const char *name, void *buf, size_t count,
                             hk_dtype dtype, int root, hk_handle *handle) {
  hk_wire_request req;
  hk_status st = check_common("hk_broadcast_async", name, count, dtype, &req);
  if (st != HK_OK)
    return st;
  if (root < 0 || root >= g_ctx->size)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_broadcast_async: tensor '%s': root %d is not a rank "
                   "in [0, %d)",
                   name, root, g_ctx->size);
  if (!handle || (count > 0 && !buf))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "hk_broadcast_async: tensor '%s': NULL %s", name,
                   !handle ? "handle pointer" : "buffer");
  req.coll = HK_COLL_BROADCAST;
  req.root = root;
  return hk_queue_submit(g_ctx, &req, buf, buf, NULL, handle);
}

hk_status hk_allgather_async(const char *name, const void *sendbuf, size_t rows,
                             size_t row_elems, hk_dtype dtype, void **recvbuf,
                             size_t *rows_per_rank, hk_handle *handle) {
  const char *fn = "hk_allgather_async";
  hk_wire_request req;
  hk_status st = check_rows(fn, name, rows, row_elems, dtype, &req);
  if (st != HK_OK)
    return st;
  if (!handle || !recvbuf || (rows > 0 && !sendbuf))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn, name,
                   !handle    ? "handle pointer"
                   : !recvbuf ? "recvbuf pointer"
                              : "sendbuf");
  req.coll = HK_COLL_ALLGATHER;
  struct hk_handle_s out = {.out_buf = recvbuf, .out_counts = rows_per_rank};
  return hk_queue_submit(g_ctx, &req, sendbuf, NULL, &out, handle);
}

hk_status hk_reducescatter_async(const char *name, const void *sendbuf,
                                 size_t rows, size_t row_elems, hk_dtype dtype,
                                 hk_op op, void *recvbuf, size_t *rows_out,
                                 hk_handle *handle) {
  const char *fn = "hk_reducescatter_async";
  hk_wire_request req;
  hk_status st = check_rows(fn, name, rows, row_elems, dtype, &req);
  if (st == HK_OK)
    st = check_op(fn, name, op);
  if (st != HK_OK)
    return st;
  if (!handle || (rows > 0 && (!sendbuf || !recvbuf)))
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn, name,
                   !handle ? "handle pointer" : "buffer");
  req.coll = HK_COLL_REDUCESCATTER;
  req.op = (uint8_t)op;
  struct hk_handle_s out = {.out_rows = rows_out};
  return hk_queue_submit(g_ctx, &req, sendbuf, recvbuf, &out, handle);
}

hk_status hk_alltoall_async(const char *name, const void *sendbuf,
                            const size_t *splits, size_t row_elems,
                            hk_dtype dtype, void **recvbuf, size_t *recv_splits,
                            hk_handle *handle) {
  const char *fn = "hk_alltoall_async";
  if (!g_ctx)
    return no_job(fn);
  if (!splits || !handle || !recvbuf)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL %s", fn,
                   name ? name : "(null)",
                   !splits   ? "splits"
                   : !handle ? "handle pointer"
                             : "recvbuf pointer");
  size_t rows = 0;
  for (int r = 0; r < g_ctx->size; r++) {
    if (splits[r] > SIZE_MAX / 16 - rows)
      return hk_fail(HK_ERR_INVALID_ARG, "%s: splits overflow", fn);
    rows += splits[r];
  }
  hk_wire_request req;
  hk_status st = check_rows(fn, name, rows, row_elems, dtype, &req);
  if (st != HK_OK)
    return st;
  if (rows > 0 && !sendbuf)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL sendbuf", fn,
                   name);
  struct hk_handle_s out = {.out_buf = recvbuf, .out_counts = recv_splits};
  out.splits = malloc((size_t)g_ctx->size * sizeof(size_t));
  if (!out.splits)
    return hk_fail(HK_ERR_NOMEM, "cannot copy the splits");
  memcpy(out.splits, splits, (size_t)g_ctx->size * sizeof(size_t));
  req.coll = HK_COLL_ALLTOALL;
  return hk_queue_submit(g_ctx, &req, sendbuf, NULL, &out, handle);
}

hk_status hk_grouped_allreduce_async(const char *const *names,
                                     const void *const *sendbufs,
                                     void *const *recvbufs,
                                     const size_t *counts, size_t n,
                                     hk_dtype dtype, hk_op op,
                                     hk_handle *handle) {
  const char *fn = "hk_grouped_allreduce_async";
  if (!g_ctx)
    return no_job(fn);
  if (n == 0 || n > UINT32_MAX || !names || !sendbufs || !recvbufs || !counts ||
      !handle)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: %s", fn,
                   n == 0 ? "the group is empty"
                          : "a NULL array or handle pointer");
  if ((unsigned)op > HK_PRODUCT)
    return hk_fail(HK_ERR_INVALID_ARG, "%s: unknown op %d", fn, (int)op);
  hk_handle *m = calloc(n, sizeof *m);
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %zu handles", n);
  hk_status st = HK_OK;
  for (size_t i = 0; i < n && st == HK_OK; i++) {
    hk_wire_request req;
    st = check_common(fn, names[i], counts[i], dtype, &req);
    for (size_t j = 0; j < i && st == HK_OK; j++)
      if (!strcmp(names[i], names[j]))
        st =
            hk_fail(HK_ERR_DUPLICATE_NAME,
                    "%s: tensor '%s' appears twice in the group", fn, names[i]);
    if (st == HK_OK && counts[i] > 0 && (!sendbufs[i] || !recvbufs[i]))
      st = hk_fail(HK_ERR_INVALID_ARG, "%s: tensor '%s': NULL buffer", fn,
                   names[i]);
    if (st != HK_OK)
      break;
    req.coll = HK_COLL_ALLREDUCE;
    req.op = (uint8_t)op;
    req.group_size = (uint32_t)n;
    req.group_index = (uint32_t)i;
    snprintf(req.group, sizeof req.group, "%s", names[0]);
    m[i] = calloc(1, sizeof **m);
    if (!m[i]) {
      st = hk_fail(HK_ERR_NOMEM, "cannot allocate a handle");
      break;
    }
    m[i]->req = req;
    m[i]->sendbuf = sendbufs[i];
    m[i]->recvbuf = recvbufs[i];
  }
  if (st == HK_OK)
    st = hk_queue_submit_group(g_ctx, m, n, handle);
  if (st != HK_OK)
    for (size_t i = 0; i < n; i++)
      free(m[i]);
  free(m);
  return st;
}

hk_status hk_join(int *last_rank) {
  if (!g_ctx)
    return no_job("hk_join");
  hk_wire_request req = {
      .coll = HK_COLL_JOIN, .row_elems = 1, .prescale = 1.0, .postscale = 1.0};
  pthread_mutex_lock(&g_ctx->mu);
  uint64_t seq = g_ctx->join_seq++;
  pthread_mutex_unlock(&g_ctx->mu);
  snprintf(req.name, sizeof req.name, "hk.join.%llu", (unsigned long long)seq);
  hk_handle h;
  hk_status st = hk_queue_submit(g_ctx, &req, NULL, NULL, NULL, &h);
  if (st != HK_OK)
    return st;
  int last = -1;
  pthread_mutex_lock(&g_ctx->mu);
  while (!h->done)
    pthread_cond_wait(&g_ctx->done_cv, &g_ctx->mu);
  last = h->out_int;
  pthread_mutex_unlock(&g_ctx->mu);
  st = hk_queue_wait(g_ctx, h);
  if (st == HK_OK && last_rank)
    *last_rank = last;
  return st;
}

hk_status hk_allgather(const char *name, const void *sendbuf, size_t rows,
                       size_t row_elems, hk_dtype dtype, void **recvbuf,
                       size_t *rows_per_rank) {
  hk_handle h;
  hk_status st = hk_allgather_async(name, sendbuf, rows, row_elems, dtype,
                                    recvbuf, rows_per_rank, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_reducescatter(const char *name, const void *sendbuf, size_t rows,
                           size_t row_elems, hk_dtype dtype, hk_op op,
                           void *recvbuf, size_t *rows_out) {
  hk_handle h;
  hk_status st = hk_reducescatter_async(name, sendbuf, rows, row_elems, dtype,
                                        op, recvbuf, rows_out, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_alltoall(const char *name, const void *sendbuf,
                      const size_t *splits, size_t row_elems, hk_dtype dtype,
                      void **recvbuf, size_t *recv_splits) {
  hk_handle h;
  hk_status st = hk_alltoall_async(name, sendbuf, splits, row_elems, dtype,
                                   recvbuf, recv_splits, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_grouped_allreduce(const char *const *names,
                               const void *const *sendbufs,
                               void *const *recvbufs, const size_t *counts,
                               size_t n, hk_dtype dtype, hk_op op) {
  hk_handle h;
  hk_status st = hk_grouped_allreduce_async(names, sendbufs, recvbufs, counts,
                                            n, dtype, op, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_wait(hk_handle handle) {
  if (!handle)
    return hk_fail(HK_ERR_INVALID_ARG, "hk_wait: NULL handle");
  /* After hk_shutdown every handle has completed (with HK_ERR_SHUTDOWN if
   * it was still pending); waiting then collects it without the context. */
  if (!g_ctx && !handle->done)
    return no_job("hk_wait");
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

hk_status hk_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                       size_t count, hk_dtype dtype, hk_op op) {
  hk_handle h;
  hk_status st =
      hk_allreduce_async(name, sendbuf, recvbuf, count, dtype, op, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_broadcast(const char *name, void *buf, size_t count,
                       hk_dtype dtype, int root) {
  hk_handle h;
  hk_status st = hk_broadcast_async(name, buf, count, dtype, root, &h);
  return st != HK_OK ? st : hk_wait(h);
}

hk_status hk_barrier(void) {
  if (!g_ctx)
    return no_job("hk_barrier");
  hk_wire_request req = {.coll = HK_COLL_BARRIER,
                         .row_elems = 1,
                         .prescale = 1.0,
                         .postscale = 1.0};
  pthread_mutex_lock(&g_ctx->mu);
  uint64_t seq = g_ctx->barrier_seq++;
  pthread_mutex_unlock(&g_ctx->mu);
  snprintf(req.name, sizeof req.name, "hk.barrier.%llu",
           (unsigned long long)seq);
  hk_handle h;
  hk_status st = hk_queue_submit(g_ctx, &req, NULL, NULL, NULL, &h);
  return st != HK_OK ? st : hk_wait(h);
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

void hk_free(void *p) { hk_devplane_free(g_ctx, p); }
