/*
 * sets.c - the process sets of a job (see sets.h).
 */
#include "worker/sets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "worker/algo.h"
#include "worker/devplane.h"
#include "worker/queue.h"
#include "worker/rings.h"

/* ---- the table ---- */

static void free_parts(hk_set *s) {
  if (s->ring == &s->own_ring)
    hk_ring_destroy(&s->own_ring);
  if (s->ar == &s->own_ar)
    hk_allreduce_release(&s->own_ar);
  s->ring = NULL;
  s->ar = NULL;
  free(s->peers);
  s->peers = NULL;
  hk_cache_destroy(s->cache);
  s->cache = NULL;
  hk_negotiator_destroy(s->neg);
  s->neg = NULL;
  free(s->inval);
  s->inval = NULL;
  s->ninval = s->cap_inval = 0;
}

/* Appends set `s` to the table as id ctx->nsets (under mu: trainer
 * threads read the table). */
static hk_status append(hk_ctx *ctx, hk_set *s) {
  pthread_mutex_lock(&ctx->mu);
  hk_set **t = realloc(ctx->sets, ((size_t)ctx->nsets + 1) * sizeof *t);
  if (t) {
    ctx->sets = t;
    s->id = ctx->nsets;
    t[ctx->nsets++] = s;
  }
  pthread_mutex_unlock(&ctx->mu);
  return t ? HK_OK
           : hk_fail(HK_ERR_NOMEM, "cannot grow the table of process sets");
}

/* A new entry for the members ranks[0..n) (ascending), not yet in the
 * table. */
static hk_set *new_set(const hk_ctx *ctx, const int *ranks, int n) {
  hk_set *s = calloc(1, sizeof *s);
  int *copy = malloc((size_t)n * sizeof *copy);
  if (!s || !copy) {
    free(s);
    free(copy);
    return NULL;
  }
  memcpy(copy, ranks, (size_t)n * sizeof *copy);
  s->ranks = copy;
  s->size = n;
  s->rank = -1;
  for (int j = 0; j < n; j++)
    if (ranks[j] == ctx->rank)
      s->rank = j;
  return s;
}

/* peers[j]: the link to set rank j (NULL for this rank). */
static hk_status make_peers(hk_ctx *ctx, hk_set *s) {
  s->peers = calloc((size_t)s->size, sizeof *s->peers);
  if (!s->peers)
    return hk_fail(HK_ERR_NOMEM, "cannot list process set %d's links", s->id);
  for (int j = 0; j < s->size; j++)
    if (s->ranks[j] != ctx->rank && ctx->mesh.links)
      s->peers[j] = &ctx->mesh.links[s->ranks[j]];
  return HK_OK;
}

/* What set s needs on this rank: a member, what runs its collectives;
 * rank 0, its negotiation; both, its response cache. */
static hk_status set_up(hk_ctx *ctx, hk_set *s) {
  hk_status st = HK_OK;
  if (s->rank >= 0 && s->id != 0) {
    s->ring = &s->own_ring;
    s->ar = &s->own_ar;
    st = make_peers(ctx, s);
    if (st == HK_OK)
      st = hk_rings_set(ctx, s);
    if (st == HK_OK)
      st = hk_algo_setup_set(ctx, s);
    if (st == HK_OK)
      st = hk_devplane_set_open(ctx, s);
  }
  if (st == HK_OK && (s->rank >= 0 || ctx->rank == 0))
    st = hk_cache_create((uint32_t)ctx->cfg.cache_capacity, &s->cache);
  if (st == HK_OK && ctx->rank == 0) {
    st = hk_negotiator_create(s->size, &s->neg);
    if (st == HK_OK && s->id != 0)
      st = hk_negotiator_name(s->neg, s->id, s->ranks);
    /* rank 0 follows the cache of a set it is not in from the agreed
     * requests (hk_negotiator_keep_requests) */
    if (st == HK_OK && s->rank < 0)
      hk_negotiator_keep_requests(s->neg, 1);
  }
  return st;
}

static void free_set(hk_ctx *ctx, hk_set *s) {
  if (!s)
    return;
  hk_devplane_set_close(ctx, s);
  free_parts(s);
  free(s->ranks);
  free(s);
}

hk_status hk_sets_open(hk_ctx *ctx) {
  int *all = malloc((size_t)ctx->size * sizeof *all);
  if (!all)
    return hk_fail(HK_ERR_NOMEM, "cannot list the world's ranks");
  for (int r = 0; r < ctx->size; r++)
    all[r] = r;
  hk_set *w = new_set(ctx, all, ctx->size);
  free(all);
  if (!w)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the world's process set");
  w->ring = &ctx->ring;
  w->ar = &ctx->ar;
  hk_status st = make_peers(ctx, w);
  if (st == HK_OK)
    st = set_up(ctx, w);
  if (st == HK_OK)
    st = append(ctx, w);
  if (st != HK_OK) {
    w->ring = NULL; /* ctx's, not the set's */
    w->ar = NULL;
    free_set(ctx, w);
  }
  return st;
}

void hk_sets_close(hk_ctx *ctx) {
  for (int32_t i = ctx->nsets - 1; i >= 0; i--) {
    hk_set *s = ctx->sets[i];
    if (i == 0) { /* the world's ring and ar are ctx's */
      s->ring = NULL;
      s->ar = NULL;
    }
    free_set(ctx, s);
  }
  free(ctx->sets);
  ctx->sets = NULL;
  ctx->nsets = 0;
}

hk_set *hk_sets_live(const hk_ctx *ctx, int32_t id) {
  if (id < 0 || id >= ctx->nsets || ctx->sets[id]->removed)
    return NULL;
  return ctx->sets[id];
}

/* "[0, 2, 5]", "[0, 1, 2, 3, 4, 5, 6, 7, ... (12 ranks)]": the first
 * HK_SETS_SHOWN of the n ranks r (which holds at least that many, or n). */
static void show_ranks(const int *r, int n, char *out, size_t cap) {
  size_t at = 0;
  const int k = n < HK_SETS_SHOWN ? n : HK_SETS_SHOWN;
  at += (size_t)snprintf(out, cap, "[");
  for (int i = 0; i < k && at < cap; i++)
    at += (size_t)snprintf(out + at, cap - at, "%s%d", i ? ", " : "", r[i]);
  if (at < cap && n > k)
    at += (size_t)snprintf(out + at, cap - at, ", ... (%d ranks)", n);
  if (at < cap)
    snprintf(out + at, cap - at, "]");
}

hk_status hk_sets_find(hk_ctx *ctx, const char *fn, const char *name,
                       int32_t id, int *size, int *rank) {
  hk_status st = HK_OK;
  pthread_mutex_lock(&ctx->mu);
  const hk_set *s = id >= 0 && id < ctx->nsets ? ctx->sets[id] : NULL;
  if (!s)
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: tensor '%s': process set %d does not exist (sets "
                 "0 to %d were added)",
                 fn, name, (int)id, (int)ctx->nsets - 1);
  else if (s->removed)
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: tensor '%s': process set %d was removed "
                 "(hk_process_set_remove)",
                 fn, name, (int)id);
  else if (s->rank < 0) {
    char members[128];
    show_ranks(s->ranks, s->size, members, sizeof members);
    st = hk_fail(HK_ERR_INVALID_ARG,
                 "%s: tensor '%s': rank %d is not a member of process set "
                 "%d, whose ranks are %s",
                 fn, name, ctx->rank, (int)id, members);
  } else {
    *size = s->size;
    *rank = s->rank;
  }
  pthread_mutex_unlock(&ctx->mu);
  return st;
}

/* ---- adding: every rank's record, compared ---- */

/* One rank's word on an add, allgathered over the world's ring. */
typedef struct add_record {
  int32_t problem;              /* HK_SETS_* */
  int32_t detail;               /* the rank at fault, or the count given */
  int32_t n;                    /* members given */
  int32_t shown[HK_SETS_SHOWN]; /* the first members, sorted */
  uint64_t hash;                /* FNV-1a of the sorted members */
} add_record;

static uint64_t hash_ranks(const int *r, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++)
    for (int b = 0; b < 4; b++) {
      h ^= (uint8_t)((uint32_t)r[i] >> (8 * b));
      h *= 1099511628211ull;
    }
  return h;
}

/* "[0, 1, ..., 7, ... (12 ranks)]" of an add's record */
static void show_list(const add_record *a, char *out, size_t cap) {
  show_ranks(a->shown, a->n, out, cap);
}

/* What rank r got wrong, in words. */
static void show_problem(const hk_ctx *ctx, const add_record *a, int r,
                         char *out, size_t cap) {
  switch (a->problem) {
  case HK_SETS_NULL_RANKS:
    snprintf(out, cap, "rank %d passed a NULL rank list", r);
    break;
  case HK_SETS_BAD_COUNT:
    snprintf(out, cap,
             "rank %d passed n = %d (a process set has 1 to %d ranks)", r,
             a->detail, ctx->size);
    break;
  case HK_SETS_OUT_OF_RANGE:
    snprintf(out, cap,
             "rank %d passed rank %d, which is not a rank of this job "
             "(0 to %d)",
             r, a->detail, ctx->size - 1);
    break;
  case HK_SETS_DUPLICATE:
    snprintf(out, cap, "rank %d passed rank %d twice", r, a->detail);
    break;
  default:
    snprintf(out, cap, "rank %d passed a NULL pointer for the new id", r);
    break;
  }
}

static int same_list(const add_record *a, const add_record *b) {
  return a->n == b->n && a->hash == b->hash &&
         memcmp(a->shown, b->shown, sizeof a->shown) == 0;
}

/* Appends to out[cap] (cut to fit). */
static void add_text(char *out, size_t cap, const char *text) {
  size_t at = strlen(out);
  if (at + 1 < cap)
    snprintf(out + at, cap - at, "%s", text);
}

/* "ranks 0, 1 give [0, 1]; rank 2 gives [0, 2]" */
static void show_lists(const add_record *all, int size, char *out, size_t cap) {
  char *done = calloc((size_t)size, 1), tmp[256];
  for (int r = 0; r < size; r++) {
    if (done && done[r])
      continue;
    int count = 0;
    for (int q = r; q < size; q++)
      count += same_list(&all[r], &all[q]);
    snprintf(tmp, sizeof tmp, "%s%s", r ? "; " : "",
             count > 1 ? "ranks" : "rank");
    add_text(out, cap, tmp);
    int k = 0;
    for (int q = r; q < size; q++)
      if (same_list(&all[r], &all[q])) {
        if (done)
          done[q] = 1;
        snprintf(tmp, sizeof tmp, "%s %d", k++ ? "," : "", q);
        add_text(out, cap, tmp);
      }
    char list[192];
    show_list(&all[r], list, sizeof list);
    snprintf(tmp, sizeof tmp, " give%s %s", count > 1 ? "" : "s", list);
    add_text(out, cap, tmp);
    if (!done)
      break; /* no memory to group them: the first is enough */
  }
  free(done);
}

/* This rank's record for members[0..n) (sorted, when problem is fine). */
static void make_record(const int *members, int n, int problem, int detail,
                        add_record *rec) {
  memset(rec, 0, sizeof *rec);
  rec->problem = problem;
  rec->detail = detail;
  if (problem != HK_SETS_FINE)
    return;
  rec->n = n;
  rec->hash = hash_ranks(members, n);
  for (int i = 0; i < n && i < HK_SETS_SHOWN; i++)
    rec->shown[i] = members[i];
}

/*
 * The add itself, on every rank at the same point (hk_init's thread for
 * HK_PROCESS_SETS, else the background thread): exchanges the records
 * and, when every rank gave the same fine list, makes the set (*id).
 * *outcome and why as hk_sets_run_add's; the return is the job's error.
 */
static hk_status add_set(hk_ctx *ctx, const int *members, int n, int problem,
                         int detail, int32_t *id, hk_status *outcome, char *why,
                         size_t cap) {
  const int size = ctx->size;
  *outcome = HK_OK;
  why[0] = '\0';
  add_record *all = calloc((size_t)size + 1, sizeof *all);
  if (!all)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %d set records", size);
  add_record *mine = all + size;
  make_record(members, n, problem, detail, mine);
  hk_status st = HK_OK;
  if (size > 1)
    st = hk_ring_allgather_records(&ctx->ring, mine, sizeof *mine, all);
  else if (st == HK_OK)
    all[0] = *mine;
  for (int r = 0; r < size && st == HK_OK && *outcome == HK_OK; r++)
    if (all[r].problem != HK_SETS_FINE) {
      show_problem(ctx, &all[r], r, why, cap);
      *outcome = HK_ERR_INVALID_ARG;
    }
  for (int r = 1; r < size && st == HK_OK && *outcome == HK_OK; r++)
    if (!same_list(&all[0], &all[r])) {
      snprintf(why, cap, "ranks disagree on the members: ");
      show_lists(all, size, why, cap);
      *outcome = HK_ERR_MISMATCH;
    }
  if (st == HK_OK && *outcome == HK_OK) {
    hk_set *s = new_set(ctx, members, n);
    if (!s)
      st = hk_fail(HK_ERR_NOMEM, "cannot allocate a process set");
    if (st == HK_OK && (st = append(ctx, s)) != HK_OK)
      free_set(ctx, s);
    if (st == HK_OK) /* (in the table: hk_sets_close frees it if this fails) */
      st = set_up(ctx, s);
    if (st == HK_OK)
      *id = s->id;
  }
  free(all);
  return st;
}

/* Sorts members[0..n) and says what is wrong with them, if anything
 * (*detail: the rank at fault). */
static int check_members(const hk_ctx *ctx, int *members, int n, int *detail) {
  for (int i = 1; i < n; i++) { /* insertion sort: lists are short */
    int v = members[i], j = i;
    for (; j > 0 && members[j - 1] > v; j--)
      members[j] = members[j - 1];
    members[j] = v;
  }
  for (int i = 0; i < n; i++) {
    *detail = members[i];
    if (members[i] < 0 || members[i] >= ctx->size)
      return HK_SETS_OUT_OF_RANGE;
    if (i > 0 && members[i] == members[i - 1])
      return HK_SETS_DUPLICATE;
  }
  return HK_SETS_FINE;
}

hk_status hk_sets_static(hk_ctx *ctx) {
  const char *pos = ctx->cfg.process_sets;
  int *members = malloc(HK_CONFIG_SET_RANKS * sizeof *members);
  if (!members)
    return hk_fail(HK_ERR_NOMEM, "cannot read HK_PROCESS_SETS");
  hk_status st = HK_OK, outcome = HK_OK;
  int n;
  int32_t id;
  char why[HK_WIRE_MAX_REASON_LEN + 1];
  while (st == HK_OK && outcome == HK_OK &&
         hk_config_next_set(&pos, members, HK_CONFIG_SET_RANKS, &n, &st)) {
    int detail = n;
    int problem = n > ctx->size ? HK_SETS_BAD_COUNT
                                : check_members(ctx, members, n, &detail);
    st = add_set(ctx, members, n, problem, detail, &id, &outcome, why,
                 sizeof why);
  }
  free(members);
  if (st == HK_OK && outcome != HK_OK)
    st = hk_fail(HK_ERR_CONFIG, "HK_PROCESS_SETS: set %d: %s", (int)ctx->nsets,
                 why);
  return st;
}

hk_status hk_sets_run_add(hk_ctx *ctx, hk_handle h, hk_status *outcome,
                          char *why, size_t cap) {
  int detail = h->nmembers;
  int problem = h->members_problem;
  if (problem == HK_SETS_FINE)
    problem = check_members(ctx, h->members, h->nmembers, &detail);
  else if (problem == HK_SETS_BAD_COUNT)
    detail = h->nmembers;
  int32_t id = -1;
  char what[HK_WIRE_MAX_REASON_LEN + 1];
  hk_status st = add_set(ctx, h->members, h->nmembers, problem, detail, &id,
                         outcome, what, sizeof what);
  if (st == HK_OK && *outcome != HK_OK)
    snprintf(why, cap, "hk_process_set_add: %s; no process set was added",
             what);
  h->out_int = id;
  return st;
}

/* ---- removing ---- */

hk_status hk_sets_run_remove(hk_ctx *ctx, hk_handle h, hk_status *outcome,
                             char *why, size_t cap) {
  const int64_t id = (int64_t)h->req.count;
  *outcome = HK_ERR_INVALID_ARG;
  if (id == 0) {
    snprintf(why, cap,
             "hk_process_set_remove: the world (process set 0) cannot be "
             "removed");
    return HK_OK;
  }
  if (id < 0 || id >= ctx->nsets) {
    snprintf(why, cap,
             "hk_process_set_remove: process set %lld does not exist (sets "
             "0 to %d were added)",
             (long long)id, (int)ctx->nsets - 1);
    return HK_OK;
  }
  hk_set *s = ctx->sets[id];
  if (s->removed) {
    snprintf(why, cap,
             "hk_process_set_remove: process set %lld was removed already",
             (long long)id);
    return HK_OK;
  }
  char reason[160];
  snprintf(reason, sizeof reason,
           "process set %lld was removed (hk_process_set_remove) while the "
           "operation was in flight on rank %d",
           (long long)id, ctx->rank);
  /* marked first: a submit to it from now on is refused (hk_sets_find),
   * or failed when the background thread takes it (round.c); then what
   * was submitted before fails */
  pthread_mutex_lock(&ctx->mu);
  s->removed = 1;
  pthread_mutex_unlock(&ctx->mu);
  hk_queue_fail_set(ctx, s->id, HK_ERR_SHUTDOWN, reason);
  hk_devplane_set_close(ctx, s);
  free_parts(s);
  *outcome = HK_OK;
  return HK_OK;
}
