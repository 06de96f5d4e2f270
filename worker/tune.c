/*
 * tune.c - `hkrun --autotune` in the engine (tune.h): rank 0's step
 * detection, the search's log, report and saved file, and every rank's
 * switch to an agreed setting.
 */
#include "worker/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/allreduce.h"
#include "collectives/transport/link.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/outfile.h"
#include "common/status.h"
#include "common/strmap.h"
#include "coordinator/autotune.h"
#include "coordinator/cache.h"
#include "worker/algo.h"
#include "worker/devplane.h"
#include "worker/sets.h"

#define CSV_HEADER                                                             \
  "trial,fusion_threshold_bytes,cycle_time_ms,hierarchical,sockets_per_peer,"  \
  "staging_chunk_bytes,compression,score_ms_per_step,uncertainty,samples,"     \
  "steps,kept\n"

/* Names kept while looking for the step's anchor: a job that has not
 * repeated a tensor after this many starts over. */
#define MAX_SEEN 100000

struct hk_tune {
  hk_autotune *search;
  hk_tune_setting start; /* the job's own setting (trial 0) */
  hk_strmap *seen;       /* names of world rounds until one repeats */
  char anchor[HK_MAX_NAME_LEN + 1]; /* "" until found */
  double last;                      /* when the last step began */
  uint32_t seq;                     /* changes sent so far */
  int logged;                       /* trials written to the CSV */
  int reported;                     /* the final line was logged */
  int other_set;  /* the first other process set that ran a round (0: none) */
  int other_more; /* and another one did too */
  uint64_t rng;   /* HK_TEST_TUNE_JITTER's sequence */
  hk_buf csv;
  /* the bytes of the step being summed, from the first step boundary on
   * (bytes_from > 0); unknown when it fused allgathers or reduce-scatters */
  uint64_t bytes;
  int bytes_from, bytes_unknown;
  int limited; /* the search was told a step's bytes */
};

/* HK_COMPRESSION's value as the log, the CSV and the saved file say it. */
static const char *comp_text(int c) {
  return c == 1 ? "fp16" : c == 2 ? "bf16" : "none";
}

/* HK_HIERARCHICAL_ALLREDUCE's value as the log and the CSV say it. */
static const char *hier_text(int h) { return h < 0 ? "auto" : h ? "1" : "0"; }

/* The sockets the job's TCP data links have open (the most of any; 0
 * when it has none): the sockets per peer the search may try. */
static int sockets_open(const hk_ctx *ctx) {
  int most = 0;
  for (int r = 0; ctx->mesh.links && r < ctx->size; r++) {
    int open = 0;
    hk_link_streams(&ctx->mesh.links[r], &open);
    most = open > most ? open : most;
  }
  return most;
}

/* "4 MiB", "512 KiB" or "1000 bytes" into out. */
static const char *threshold_text(uint64_t b, char *out, size_t cap) {
  if (b % (1u << 20) == 0)
    snprintf(out, cap, "%llu MiB", (unsigned long long)(b >> 20));
  else if (b % 1024 == 0)
    snprintf(out, cap, "%llu KiB", (unsigned long long)(b >> 10));
  else
    snprintf(out, cap, "%llu bytes", (unsigned long long)b);
  return out;
}

/* The most sockets per peer the search tries (> 1), or 0 when it does
 * not try them (HK_AUTOTUNE_SOCKETS=1, no TCP links): what every rank
 * can tell alike. */
static int sockets_searched(const hk_ctx *ctx) {
  int open = sockets_open(ctx);
  return ctx->cfg.autotune_sockets > 1 && open > 1 ? open : 0;
}

/* 1 when the search tries the staging chunk: device tensors cross hosts
 * through host memory (a device backend, several hosts). */
static int staging_searched(const hk_ctx *ctx) {
  return ctx->dev != NULL && ctx->cross_size > 1;
}

/* 1 when the search tries compression: the user allowed it
 * (HK_AUTOTUNE_COMPRESSION) and there is a device backend (compression
 * applies to device tensors only). */
static int compression_searched(const hk_ctx *ctx) {
  return ctx->cfg.autotune_compression && ctx->dev != NULL;
}

/* A setting as the log says it, into out: "fusion threshold 2 MiB, cycle
 * time 0 ms, hierarchical auto", then ", sockets per peer 4", ", staging
 * chunk 1 MiB" and ", compression fp16" where those are searched. */
static const char *setting_text(const hk_ctx *ctx, const hk_tune_setting *s,
                                char *out, size_t cap) {
  char a[32];
  int n = snprintf(out, cap,
                   "fusion threshold %s, cycle time %g ms, hierarchical %s",
                   threshold_text(s->fusion_threshold, a, sizeof a),
                   s->cycle_time_ms, hier_text(s->hierarchical));
  if (sockets_searched(ctx) && n >= 0 && (size_t)n < cap)
    n += snprintf(out + n, cap - (size_t)n, ", sockets per peer %d",
                  s->sockets_per_peer);
  if (staging_searched(ctx) && n >= 0 && (size_t)n < cap)
    n += snprintf(out + n, cap - (size_t)n, ", staging chunk %s",
                  threshold_text(s->staging_chunk_bytes, a, sizeof a));
  if (compression_searched(ctx) && n >= 0 && (size_t)n < cap)
    snprintf(out + n, cap - (size_t)n, ", compression %s",
             comp_text(s->compression));
  return out;
}

/* The cost model's suggestion: the smallest threshold of the ladder at
 * which one host allreduce's predicted latency (its time at 0 bytes) is
 * at most 10 % of its predicted time; the job's own threshold where no
 * implementation has a model (one host through shared memory). */
static uint64_t model_threshold(hk_ctx *ctx) {
  const uint64_t *ladder;
  int n = hk_tune_thresholds(&ladder);
  const hk_allreduce_env *env = &ctx->ar;
  for (int i = 1; i < n; i++) {
    const hk_allreduce_impl *impl =
        hk_allreduce_for(env, HK_MEM_HOST, (size_t)ladder[i]);
    hk_cost c0, c;
    if (!impl->cost || impl->cost(env, 0, &c0) != HK_OK ||
        impl->cost(env, (size_t)ladder[i], &c) != HK_OK)
      return ctx->cfg.fusion_threshold;
    if (c0.time_us <= 0.1 * c.time_us)
      return ladder[i];
  }
  return ladder[n - 1];
}

/* Samples before a trial's uncertainty is judged: 5 (the MAD of fewer
 * is too unsure), or the whole budget where it is smaller. */
static int min_samples(const hk_config *c) {
  return c->autotune_max_samples < 5 ? c->autotune_max_samples : 5;
}

/* An elastic job's next generation: the CSV goes on from the rows the
 * file holds (the earlier generations'), under a comment line. */
static void csv_continue(hk_ctx *ctx, struct hk_tune *T) {
  FILE *f = fopen(ctx->cfg.autotune_log, "r");
  if (f) {
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
      hk_buf_append(&T->csv, chunk, got);
    fclose(f);
  }
  if (T->csv.len == 0)
    hk_buf_append(&T->csv, CSV_HEADER, strlen(CSV_HEADER));
  else if (T->csv.data[T->csv.len - 1] != '\n')
    hk_buf_append(&T->csv, "\n", 1);
  char line[160];
  int len = snprintf(line, sizeof line,
                     "# generation %d: the job re-formed with %d ranks; the "
                     "search starts again\n",
                     ctx->generation, ctx->size);
  hk_buf_append(&T->csv, line, (size_t)len);
}

hk_status hk_tune_start(hk_ctx *ctx) {
  if (ctx->rank != 0 || !ctx->cfg.autotune)
    return HK_OK;
  struct hk_tune *T = calloc(1, sizeof *T);
  if (!T)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the autotuner");
  const hk_config *c = &ctx->cfg;
  hk_tune_params p = {.warmup_steps = c->autotune_warmup,
                      .steps_per_sample = c->autotune_steps,
                      .min_samples = min_samples(c),
                      .max_samples = c->autotune_max_samples,
                      .max_trials = c->autotune_max_trials,
                      .spread = c->autotune_spread,
                      /* hierarchical vs flat only where both can run and
                       * no algorithm is forced */
                      .hierarchical = ctx->have_hier && !c->allreduce_algo[0],
                      /* over the sockets the links opened for it */
                      .max_sockets = sockets_searched(ctx),
                      .staging = staging_searched(ctx),
                      .compression = compression_searched(ctx)};
  T->start = (hk_tune_setting){c->fusion_threshold,    c->cycle_time_ms,
                               c->hierarchical,        (int)c->sockets_per_peer,
                               c->staging_chunk_bytes, c->compression};
  hk_tune_setting model = T->start;
  model.fusion_threshold = model_threshold(ctx);
  T->rng = 0x9e3779b97f4a7c15ull;
  hk_status st = hk_autotune_create(&p, &T->start, &model, &T->search);
  if (st == HK_OK)
    st = hk_strmap_create(&T->seen);
  if (st != HK_OK) {
    hk_autotune_destroy(T->search);
    free(T);
    return st;
  }
  ctx->tune = T;
  if (ctx->generation > 0 && c->autotune_log[0])
    csv_continue(ctx, T);
  char a[32], b[32], k[128] = "";
  int kn = 0;
  if (p.max_sockets > 1)
    kn = snprintf(k, sizeof k, ", sockets per peer %d (searched up to %d)",
                  T->start.sockets_per_peer, p.max_sockets);
  if (p.staging)
    kn +=
        snprintf(k + kn, sizeof k - (size_t)kn, ", staging chunk %s (searched)",
                 threshold_text(T->start.staging_chunk_bytes, b, sizeof b));
  if (p.compression)
    snprintf(k + kn, sizeof k - (size_t)kn, ", compression %s (searched)",
             comp_text(T->start.compression));
  else if (c->autotune_compression)
    hk_log(HK_LOG_WARNING,
           "autotune: --autotune-compression: no device backend here, and "
           "compression applies to device tensors only: not searched");
  hk_log(HK_LOG_INFO,
         "autotune: starting from fusion threshold %s, cycle time %g ms, "
         "hierarchical %s (%s)%s; the cost model suggests fusion threshold %s",
         threshold_text(T->start.fusion_threshold, a, sizeof a),
         T->start.cycle_time_ms, hier_text(T->start.hierarchical),
         p.hierarchical ? "searched" : "not searched", k,
         threshold_text(model.fusion_threshold, b, sizeof b));
  return HK_OK;
}

/* Appends the trials settled since the last call (all: every trial
 * ended, at the job's end) to the CSV (and the info log), and rewrites
 * HK_AUTOTUNE_LOG. */
static void log_trials(hk_ctx *ctx, struct hk_tune *T, int all) {
  int n = all ? hk_autotune_ntrials(T->search) : hk_autotune_settled(T->search);
  if (n == T->logged)
    return;
  if (T->csv.len == 0)
    hk_buf_append(&T->csv, CSV_HEADER, strlen(CSV_HEADER));
  for (; T->logged < n; T->logged++) {
    const hk_tune_trial *t = hk_autotune_trial(T->search, T->logged);
    char row[256], a[160];
    int len = snprintf(
        row, sizeof row, "%d,%llu,%g,%s,%d,%llu,%s,%.6f,%.6f,%d,%d,%d\n",
        T->logged, (unsigned long long)t->s.fusion_threshold,
        t->s.cycle_time_ms, hier_text(t->s.hierarchical), t->s.sockets_per_peer,
        (unsigned long long)t->s.staging_chunk_bytes,
        comp_text(t->s.compression), t->score_s * 1e3, t->uncertainty,
        t->samples, t->steps, t->kept);
    hk_buf_append(&T->csv, row, (size_t)len);
    hk_log(HK_LOG_INFO,
           "autotune: trial %d: %s: %.3f ms per step (+/- %.1f %%, %d "
           "samples, %d steps)%s",
           T->logged, setting_text(ctx, &t->s, a, sizeof a), t->score_s * 1e3,
           t->uncertainty * 100, t->samples, t->steps, t->kept ? ", kept" : "");
  }
  if (ctx->cfg.autotune_log[0] &&
      hk_outfile_replace(ctx->cfg.autotune_log, ctx->cfg.file_mode, T->csv.data,
                         T->csv.len, HK_OUT_ATOMIC, "HK_AUTOTUNE_LOG") != HK_OK)
    hk_log(HK_LOG_WARNING, "autotune: %s", hk_last_error());
}

/* The final line and the saved settings: the best setting so far. */
static void report(hk_ctx *ctx, struct hk_tune *T) {
  const hk_tune_trial *best = hk_autotune_best(T->search);
  const hk_tune_trial *base = hk_autotune_trial(T->search, 0);
  if (T->reported || !best || !base)
    return;
  T->reported = 1;
  char a[160], b[160], tail[320];
  const int done = hk_autotune_done(T->search);
  /* the start kept: its two scores differ by the machine's drift only */
  const int kept = hk_tune_setting_equal(&best->s, &base->s);
  if (kept && !done) /* a candidate may be waiting for its confirmation */
    snprintf(tail, sizeof tail, "%.3f ms per step", best->score_s * 1e3);
  else if (kept)
    snprintf(tail, sizeof tail,
             "no other was faster by more than the noise (it measured %.3f "
             "ms per step last, %.3f ms first)",
             best->score_s * 1e3, base->score_s * 1e3);
  else
    snprintf(tail, sizeof tail,
             "%.3f ms per step against %.3f ms with the starting setting "
             "(%s): %.1f %% less time per step",
             best->score_s * 1e3, base->score_s * 1e3,
             setting_text(ctx, &base->s, b, sizeof b),
             base->score_s > 0
                 ? 100.0 * (base->score_s - best->score_s) / base->score_s
                 : 0.0);
  hk_log(HK_LOG_WARNING, "autotune: %s %s%s%s after %d trials (%ld steps): %s",
         done ? kept ? "kept" : "chose"
              : "the search stopped before its end (the job ended or "
                "re-formed); best so far:",
         kept ? "the starting setting (" : "",
         setting_text(ctx, &best->s, a, sizeof a), kept ? ")" : "",
         hk_autotune_ntrials(T->search), hk_autotune_steps(T->search), tail);
  if (!ctx->cfg.autotune_save[0])
    return;
  char text[320];
  int len = snprintf(text, sizeof text,
                     "# hk --autotune's choice (hkrun --autotune-load reads "
                     "it)\nHK_FUSION_THRESHOLD=%llu\nHK_CYCLE_TIME_MS=%g\n",
                     (unsigned long long)best->s.fusion_threshold,
                     best->s.cycle_time_ms);
  if (best->s.hierarchical >= 0) /* unset: the cost model decides */
    len += snprintf(text + len, sizeof text - (size_t)len,
                    "HK_HIERARCHICAL_ALLREDUCE=%d\n", best->s.hierarchical);
  if (sockets_searched(ctx))
    len += snprintf(text + len, sizeof text - (size_t)len,
                    "HK_SOCKETS_PER_PEER=%d\n", best->s.sockets_per_peer);
  if (staging_searched(ctx))
    len += snprintf(text + len, sizeof text - (size_t)len,
                    "HK_STAGING_CHUNK_BYTES=%llu\n",
                    (unsigned long long)best->s.staging_chunk_bytes);
  if (compression_searched(ctx))
    len += snprintf(text + len, sizeof text - (size_t)len,
                    "HK_COMPRESSION=%s\n", comp_text(best->s.compression));
  if (hk_outfile_replace(ctx->cfg.autotune_save, ctx->cfg.file_mode, text,
                         (size_t)len, HK_OUT_ATOMIC,
                         "HK_AUTOTUNE_SAVE") != HK_OK)
    hk_log(HK_LOG_WARNING, "autotune: %s", hk_last_error());
}

/* The name of response r of the world's round ("" if it has none). */
static const char *name_of(hk_ctx *ctx, const hk_wire_response *r) {
  if (!(r->flags & HK_RESP_CACHED))
    return r->name;
  const hk_wire_request *q =
      hk_cache_get(hk_sets_world(ctx)->cache, r->cache_bit);
  return q ? q->name : "";
}

/* Adds response r to the step's bytes: an allreduce's input. The
 * threshold fuses allgathers and reduce-scatters too, by their rows:
 * those make this step's bytes unknown; the other kinds (a barrier, a
 * broadcast, ...) are never fused, and do not count. */
static void count_bytes(struct hk_tune *T, const hk_wire_response *r) {
  if (T->limited) /* told once: nothing reads it again */
    return;
  if (r->coll == HK_COLL_ALLREDUCE)
    T->bytes += r->bytes;
  else if (r->coll == HK_COLL_ALLGATHER || r->coll == HK_COLL_REDUCESCATTER)
    T->bytes_unknown = 1;
}

/* A step boundary: the step summed since the last one, if whole and
 * known, tells the search its bytes (once; not when another process set
 * ran rounds, which the same threshold fuses: hk_tune_other_round); the
 * next step starts. */
static void step_bytes(struct hk_tune *T) {
  if (!T->limited && T->bytes_from && !T->bytes_unknown && T->bytes > 0 &&
      !T->other_set) {
    T->limited = 1;
    uint64_t cap = hk_autotune_limit_threshold(T->search, T->bytes);
    char a[32];
    if (cap)
      hk_log(HK_LOG_INFO,
             "autotune: a step's allreduces hold %llu bytes: fusion "
             "thresholds from %s make the same batches, so the search "
             "tries none above it",
             (unsigned long long)T->bytes, threshold_text(cap, a, sizeof a));
  }
  T->bytes = 0;
  T->bytes_unknown = 0;
  T->bytes_from = 1;
}

/* The anchor: 1 when name starts a step (finding it first: the first
 * name of world rounds seen twice); 0 when not; -1 when a name could not
 * be kept (no memory: the round's other names are not looked at; with no
 * name table left no step is found, and the job goes on). */
static int is_anchor(struct hk_tune *T, const char *name) {
  if (T->anchor[0])
    return strcmp(name, T->anchor) == 0;
  if (!T->seen)
    return 0;
  if (hk_strmap_get(T->seen, name)) {
    snprintf(T->anchor, sizeof T->anchor, "%s", name);
    hk_strmap_destroy(T->seen);
    T->seen = NULL;
    hk_log(HK_LOG_INFO, "autotune: a training step starts with '%s'",
           T->anchor);
    return 1;
  }
  if (hk_strmap_size(T->seen) >= MAX_SEEN) {
    hk_strmap_destroy(T->seen);
    T->seen = NULL;
    if (hk_strmap_create(&T->seen) != HK_OK)
      return -1;
  }
  return hk_strmap_put(T->seen, name, (void *)1) == HK_OK ? 0 : -1;
}

/* 1 when this round ends a step (finding the anchor first); sums the
 * bytes of each step's allreduces on the way. */
static int step_boundary(hk_ctx *ctx, struct hk_tune *T,
                         const hk_wire_response *rs, uint32_t n) {
  int boundary = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (rs[i].status != HK_OK)
      continue;
    const char *name = name_of(ctx, &rs[i]);
    if (!name[0]) { /* not in the cache: no anchor; its bytes still count */
      count_bytes(T, &rs[i]);
      continue;
    }
    if (!boundary) {
      const int a = is_anchor(T, name);
      if (a < 0)
        return 0;
      if (a) {
        boundary = 1;
        step_bytes(T);
      }
    }
    count_bytes(T, &rs[i]);
  }
  return boundary;
}

void hk_tune_round(hk_ctx *ctx, const hk_wire_response *rs, uint32_t n,
                   double t, hk_msg *m) {
  struct hk_tune *T = ctx->tune;
  if (!T || hk_autotune_done(T->search) || (!T->seen && !T->anchor[0]))
    return;
  const int first = !T->anchor[0];
  if (!step_boundary(ctx, T, rs, n))
    return;
  double step = t - T->last + ctx->tune_virtual_s;
  T->last = t;
  ctx->tune_virtual_s = 0;
  if (first)
    return;                            /* the first step starts here */
  if (ctx->cfg.test_tune_jitter > 0) { /* xorshift64 */
    T->rng ^= T->rng << 13;
    T->rng ^= T->rng >> 7;
    T->rng ^= T->rng << 17;
    double u = (double)(T->rng >> 11) * 0x1p-53 * 2 - 1;
    step *= 1 + ctx->cfg.test_tune_jitter * u;
  }
  hk_tune_setting next;
  int change = hk_autotune_step(T->search, step, &next);
  log_trials(ctx, T, 0);
  if (hk_autotune_done(T->search))
    report(ctx, T);
  if (!change)
    return;
  m->u.responses.has_tune = 1;
  m->u.responses.tune =
      (hk_wire_tune){.seq = ++T->seq,
                     .fusion_threshold = next.fusion_threshold,
                     .cycle_time_ms = next.cycle_time_ms,
                     .hierarchical = (int8_t)next.hierarchical,
                     .sockets_per_peer = (uint8_t)next.sockets_per_peer,
                     .staging_chunk_bytes = (uint32_t)next.staging_chunk_bytes,
                     .compression = (uint8_t)next.compression};
}

void hk_tune_other_round(hk_ctx *ctx, int set) {
  struct hk_tune *T = ctx->tune;
  if (!T || set == 0)
    return;
  if (!T->other_set)
    T->other_set = set;
  else if (T->other_set != set)
    T->other_more = 1;
}

hk_status hk_tune_apply(hk_ctx *ctx, const hk_wire_tune *t) {
  ctx->world_rounds++;
  if (!t)
    return HK_OK;
  ctx->cfg.fusion_threshold = (size_t)t->fusion_threshold;
  ctx->cfg.cycle_time_ms = t->cycle_time_ms;
  hk_status st = HK_OK;
  if (ctx->cfg.hierarchical != t->hierarchical) {
    ctx->cfg.hierarchical = t->hierarchical;
    st = hk_algo_retune(ctx);
  }
  /* every rank is between the same two rounds, each link's stream
   * quiet both ways (link.h: hk_link_set_streams) */
  if (t->sockets_per_peer != ctx->cfg.sockets_per_peer)
    for (int r = 0; st == HK_OK && r < ctx->size; r++)
      st = hk_link_set_streams(&ctx->mesh.links[r], t->sockets_per_peer);
  ctx->cfg.sockets_per_peer = t->sockets_per_peer;
  if (t->staging_chunk_bytes != ctx->cfg.staging_chunk_bytes)
    for (int32_t id = 0; id < ctx->nsets; id++) {
      hk_set *set = hk_sets_live(ctx, id);
      if (set)
        hk_devplane_set_staging(set, t->staging_chunk_bytes);
    }
  ctx->cfg.staging_chunk_bytes = t->staging_chunk_bytes;
  ctx->cfg.compression = t->compression; /* read by each device batch */
  const hk_tune_setting s = {t->fusion_threshold,    t->cycle_time_ms,
                             t->hierarchical,        t->sockets_per_peer,
                             t->staging_chunk_bytes, t->compression};
  char a[160], what[200];
  setting_text(ctx, &s, a, sizeof a);
  hk_log(HK_LOG_DEBUG,
         "autotune: rank %d applies setting %u (%s) at world round %llu",
         ctx->rank, t->seq, a, (unsigned long long)ctx->world_rounds);
  snprintf(what, sizeof what, "AUTOTUNE setting %u: %s", t->seq, a);
  hk_observe_tuned(&ctx->obs, what, hk_now());
  return st;
}

void hk_tune_reset_settings(hk_config *cfg) {
  if (!cfg->autotune)
    return;
  /* each variable's own value; one that no longer loads (changed in the
   * environment since hk_init) keeps the current one */
  for (int i = 0; i < HK_TUNE_NVARS; i++) {
    hk_config own = *cfg;
    if (hk_config_load_var(&own, hk_tune_vars[i]) == HK_OK)
      *cfg = own;
  }
}

void hk_tune_finish(hk_ctx *ctx) {
  struct hk_tune *T = ctx->tune;
  if (!T)
    return;
  log_trials(ctx, T, 1);
  report(ctx, T);
  if (!hk_autotune_best(T->search) && !T->anchor[0] && T->other_set)
    hk_log(HK_LOG_WARNING,
           "autotune: no training step found: autotune tunes the global "
           "process set's rounds; this job's collectives ran on process set "
           "%d%s: nothing was tuned",
           T->other_set, T->other_more ? " and others" : "");
  else if (!hk_autotune_best(T->search) && !T->anchor[0])
    hk_log(HK_LOG_WARNING,
           "autotune: no training step found (no tensor of a round came "
           "back in a later one): nothing was tuned");
  else if (!hk_autotune_best(T->search))
    hk_log(HK_LOG_WARNING,
           "autotune: the job ended after %ld measured steps, before the "
           "first trial did (it takes at least %d: "
           "HK_AUTOTUNE_WARMUP_STEPS + %d x HK_AUTOTUNE_STEPS_PER_SAMPLE): "
           "nothing was tuned",
           hk_autotune_steps(T->search),
           ctx->cfg.autotune_warmup +
               min_samples(&ctx->cfg) * ctx->cfg.autotune_steps,
           min_samples(&ctx->cfg));
  hk_autotune_destroy(T->search);
  hk_strmap_destroy(T->seen);
  hk_buf_free(&T->csv);
  free(T);
  ctx->tune = NULL;
}
