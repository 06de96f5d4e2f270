/*
 * rings.c - the flat, local and cross rings of a job (see rings.h).
 */
#include "worker/rings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "topology/topo.h"
#include "worker/intra.h"

/* order[0..L) = the local ranks of one host in the order of the ring
 * HK_TOPO_FILE's layout gives its first L GPUs (identity without it). */
static hk_status topo_order(const hk_ctx *ctx, int L, int *order) {
  for (int p = 0; p < L; p++)
    order[p] = p;
  const char *file = ctx->cfg.topo_file;
  if (!*file || L == 1)
    return HK_OK;
  hk_topo *t = NULL;
  hk_status st = hk_topo_load_setting(file, &t);
  if (st == HK_OK)
    st = hk_topo_ring_order(t, L, order);
  hk_topo_free(t);
  if (st != HK_OK) { /* the loader's message names the file and line */
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(HK_ERR_CONFIG, "%s", msg);
  }
  char line[512] = "";
  for (int p = 0; p < L && strlen(line) < sizeof line - 16; p++)
    snprintf(line + strlen(line), sizeof line - strlen(line), "%s%d",
             p ? " " : "", order[p]);
  if (ctx->rank == 0)
    hk_log(HK_LOG_INFO, "ring order from HK_TOPO_FILE: %s", line);
  return HK_OK;
}

/* The flat ring's order: host by host; inside a host the topology's. */
static hk_status flat_order(const hk_ctx *ctx, int *order) {
  const int n = ctx->size;
  const hk_rank_layout *lay = ctx->layout;
  const int uniform = hk_layout_uniform(lay, n);
  const int L = uniform ? lay[0].local_size : 1, H = lay[0].cross_size;
  if (ctx->cfg.topo_file[0] && !uniform && ctx->rank == 0)
    hk_log(HK_LOG_WARNING, "HK_TOPO_FILE needs the same number of ranks on "
                           "every host: keeping local rank order");
  int *local = malloc((size_t)L * 2 * sizeof *local), *tmp = local + L;
  if (!local)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the ring order");
  hk_status st = topo_order(ctx, L, local);
  int pos = 0;
  for (int h = 0; h < H && st == HK_OK; h++) {
    const int first = pos;
    for (int r = 0; r < n; r++)
      if (lay[r].cross_rank == h)
        order[pos++] = r;       /* by local rank: they follow rank order */
    for (int p = 0; p < L; p++) /* uniform: the topology's order */
      tmp[p] = order[first + local[p]];
    memcpy(order + first, tmp, (size_t)L * sizeof *tmp);
  }
  free(local);
  return st;
}

/* Sets up a ring over members[0..m) (ranks, in ring order) that contains
 * this rank; error messages name the neighbours' ranks. */
static hk_status member_ring(hk_ctx *ctx, hk_ring *ring, const int *members,
                             int m, int named_by_rank) {
  int me = 0;
  while (members[me] != ctx->rank)
    me++;
  hk_link *left = NULL, *right = NULL;
  if (m > 1) {
    left = &ctx->mesh.links[members[(me + m - 1) % m]];
    right = &ctx->mesh.links[members[(me + 1) % m]];
  }
  hk_status st;
  if (named_by_rank) /* the flat ring: positions hold job ranks */
    st = hk_ring_init(ring, ctx->rank, m, left, right, &ctx->io,
                      ctx->cfg.ring_chunk_bytes, members);
  else
    st = hk_ring_init(ring, me, m, left, right, &ctx->io,
                      ctx->cfg.ring_chunk_bytes, NULL);
  if (st == HK_OK && m > 1 && !named_by_rank) {
    snprintf(ring->left_name, sizeof ring->left_name, "rank %d",
             members[(me + m - 1) % m]);
    snprintf(ring->right_name, sizeof ring->right_name, "rank %d",
             members[(me + 1) % m]);
  }
  if (st == HK_OK) /* all on this host: through shared memory */
    st = hk_intra_attach_ring(ctx, ring, members);
  return st;
}

hk_status hk_rings_setup(hk_ctx *ctx) {
  const int n = ctx->size;
  int *order = malloc((size_t)n * 2 * sizeof *order);
  if (!order)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the ring order");
  int *members = order + n;
  hk_status st = flat_order(ctx, order);
  if (st == HK_OK)
    st = member_ring(ctx, &ctx->ring, order, n, 1);
  const int L = ctx->local_size, H = ctx->cross_size;
  if (st == HK_OK && L > 1 && H > 1 && hk_layout_uniform(ctx->layout, n)) {
    /* flat position of this rank = host * L + local position */
    int pos = 0;
    while (order[pos] != ctx->rank)
      pos++;
    const int host = pos / L, lpos = pos % L;
    for (int i = 0; i < L; i++)
      members[i] = order[host * L + i];
    st = member_ring(ctx, &ctx->local_ring, members, L, 0);
    for (int h = 0; h < H && st == HK_OK; h++)
      members[h] = order[h * L + lpos];
    if (st == HK_OK)
      st = member_ring(ctx, &ctx->cross_ring, members, H, 0);
    ctx->have_hier = st == HK_OK;
  }
  free(order);
  return st;
}

hk_status hk_rings_set(hk_ctx *ctx, hk_set *s) {
  const int m = s->size;
  int *order = malloc((size_t)m * sizeof *order);
  if (!order)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate process set %d's ring",
                   (int)s->id);
  int k = 0; /* set ranks in flat-ring order */
  for (int p = 0; p < ctx->size && k < m; p++) {
    const int r = ctx->ring.order[p];
    for (int j = 0; j < m; j++)
      if (s->ranks[j] == r)
        order[k++] = j;
  }
  int me = 0;
  while (order[me] != s->rank)
    me++;
  hk_link *left = NULL, *right = NULL;
  if (m > 1) {
    left = s->peers[order[(me + m - 1) % m]];
    right = s->peers[order[(me + 1) % m]];
  }
  hk_status st = hk_ring_init(&s->own_ring, s->rank, m, left, right, &ctx->io,
                              ctx->cfg.ring_chunk_bytes, order);
  if (st == HK_OK && m > 1) {
    snprintf(s->own_ring.left_name, sizeof s->own_ring.left_name, "rank %d",
             s->ranks[order[(me + m - 1) % m]]);
    snprintf(s->own_ring.right_name, sizeof s->own_ring.right_name, "rank %d",
             s->ranks[order[(me + 1) % m]]);
  }
  free(order);
  return st;
}

void hk_rings_destroy(hk_ctx *ctx) {
  hk_ring_destroy(&ctx->ring);
  hk_ring_destroy(&ctx->local_ring);
  hk_ring_destroy(&ctx->cross_ring);
  ctx->have_hier = 0;
}
