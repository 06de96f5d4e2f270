/*
 * observers.c - attaching the observers and telling them the job is set
 * up (observers.h).
 */
#include "worker/observers.h"

#include <stdlib.h>

#include "common/status.h"
#include "observe/attach.h"
#include "worker/queue.h"

/* hk_obs_pending.each: the queue's handles as the hooks see them. */
typedef struct visit_arg {
  hk_obs_visit visit;
  void *arg;
} visit_arg;

static void visit_handle(void *arg, hk_handle h, int queued) {
  const visit_arg *va = arg;
  hk_obs_tensor t = hk_observed(h, NULL, 0);
  va->visit(va->arg, &t, queued);
}

static void each_pending(void *engine, hk_obs_visit visit, void *arg) {
  visit_arg va = {visit, arg};
  hk_queue_each(engine, visit_handle, &va);
}

hk_status hk_observers_attach(hk_ctx *ctx) {
  hk_obs_setup s = {
      .cfg = &ctx->cfg,
      .rank = ctx->rank,
      .size = ctx->size,
      .launcher_pid = ctx->launcher_parent,
      .secret = ctx->placement == HK_PLACEMENT_NONE ? NULL : &ctx->secret,
      .pending = {each_pending, ctx},
  };
  return hk_observe_attach_all(&ctx->obs, &s);
}

hk_status hk_observers_ready(hk_ctx *ctx) {
  int *local = malloc((size_t)ctx->size * sizeof *local);
  if (!local)
    return hk_fail(HK_ERR_NOMEM, "cannot list the ranks' local ranks");
  for (int r = 0; r < ctx->size; r++)
    local[r] = ctx->layout ? ctx->layout[r].local_rank : r;
  hk_obs_ready e = {
      .local_rank = ctx->local_rank,
      .launcher_fd = ctx->mesh.launcher_fd,
      .negotiator = ctx->sets[0]->neg, /* the world's */
      .hosts = ctx->hosts,
      .host_stride = HK_HOST_NAME_CAP,
      .local_ranks = local,
  };
  hk_status st = hk_observe_ready(&ctx->obs, &e);
  free(local);
  return st;
}
