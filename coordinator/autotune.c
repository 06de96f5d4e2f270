/*
 * autotune.c - the search of `hkrun --autotune` (autotune.h): trials
 * measured from step times, coordinate descent over three ladders.
 */
#include "coordinator/autotune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

#define MIB (1ull << 20)
static const uint64_t thr_ladder[] = {0,        1 * MIB,  2 * MIB,
                                      4 * MIB,  8 * MIB,  16 * MIB,
                                      32 * MIB, 64 * MIB, 128 * MIB};
static const double cyc_ladder[] = {0, 0.5, 1, 2, 5, 10};
/* flat, the cost model's choice, hierarchical: auto sits between */
static const int hier_ladder[] = {0, -1, 1};
#define NTHR ((int)(sizeof thr_ladder / sizeof thr_ladder[0]))
#define NCYC ((int)(sizeof cyc_ladder / sizeof cyc_ladder[0]))
#define NHIER 3
#define NKNOB 3
#define MAX_PASSES 3
#define MAX_SAMPLES 64

enum { PH_BASELINE, PH_MODEL, PH_DESCENT, PH_DONE };

struct hk_autotune {
  hk_tune_params p;
  hk_tune_trial trials[HK_TUNE_MAX_TRIALS];
  int ntrials;
  int best; /* index into trials, -1 before trial 0 ended */
  hk_tune_setting model;
  hk_tune_setting cur; /* what runs now */
  int cur_pos[NKNOB];  /* its rungs (nearest, for a start off the ladder) */
  int best_pos[NKNOB];
  /* the trial running */
  int warm_left, in_sample, nsamples, trial_steps;
  double acc, samples[MAX_SAMPLES];
  /* the descent */
  int phase, knob, dir, stepped, pass, pass_kept;
  uint8_t measured[NTHR][NCYC][NHIER];
  long steps;
};

int hk_tune_setting_equal(const hk_tune_setting *a, const hk_tune_setting *b) {
  return a->fusion_threshold == b->fusion_threshold &&
         a->cycle_time_ms == b->cycle_time_ms &&
         a->hierarchical == b->hierarchical;
}

static int nearest_thr(uint64_t v) {
  int best = 0;
  for (int i = 1; i < NTHR; i++) {
    uint64_t d = v > thr_ladder[i] ? v - thr_ladder[i] : thr_ladder[i] - v;
    uint64_t e =
        v > thr_ladder[best] ? v - thr_ladder[best] : thr_ladder[best] - v;
    if (d < e)
      best = i;
  }
  return best;
}

static int nearest_cyc(double v) {
  int best = 0;
  for (int i = 1; i < NCYC; i++)
    if (fabs(v - cyc_ladder[i]) < fabs(v - cyc_ladder[best]))
      best = i;
  return best;
}

static void place(const hk_tune_setting *s, int pos[NKNOB]) {
  pos[0] = nearest_thr(s->fusion_threshold);
  pos[1] = nearest_cyc(s->cycle_time_ms);
  pos[2] = s->hierarchical < 0 ? 1 : s->hierarchical ? 2 : 0;
}

static hk_tune_setting at(const int pos[NKNOB]) {
  return (hk_tune_setting){thr_ladder[pos[0]], cyc_ladder[pos[1]],
                           hier_ladder[pos[2]]};
}

/* Marks s measured when it is a rung of every ladder. */
static void mark(hk_autotune *t, const hk_tune_setting *s) {
  int pos[NKNOB];
  place(s, pos);
  hk_tune_setting r = at(pos);
  if (hk_tune_setting_equal(&r, s))
    t->measured[pos[0]][pos[1]][pos[2]] = 1;
}

static void begin_trial(hk_autotune *t, const hk_tune_setting *s,
                        const int pos[NKNOB]) {
  t->cur = *s;
  memcpy(t->cur_pos, pos, sizeof t->cur_pos);
  t->warm_left = t->p.warmup_steps;
  t->in_sample = t->nsamples = t->trial_steps = 0;
  t->acc = 0;
  mark(t, s);
}

hk_status hk_autotune_create(const hk_tune_params *p,
                             const hk_tune_setting *start,
                             const hk_tune_setting *model, hk_autotune **out) {
  *out = NULL;
  if (p->warmup_steps < 0)
    return hk_fail(HK_ERR_INVALID_ARG, "autotune: warm-up steps %d < 0",
                   p->warmup_steps);
  if (p->steps_per_sample < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "autotune: steps per sample %d < 1",
                   p->steps_per_sample);
  if (p->min_samples < 2 || p->max_samples < p->min_samples ||
      p->max_samples > MAX_SAMPLES)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "autotune: samples per trial %d..%d: need 2 <= min <= max "
                   "<= %d",
                   p->min_samples, p->max_samples, MAX_SAMPLES);
  if (p->max_trials < 1)
    return hk_fail(HK_ERR_INVALID_ARG, "autotune: max trials %d < 1",
                   p->max_trials);
  if (!(p->spread > 0))
    return hk_fail(HK_ERR_INVALID_ARG, "autotune: spread bound %g <= 0",
                   p->spread);
  hk_autotune *t = calloc(1, sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the autotuner");
  t->p = *p;
  if (t->p.max_trials > HK_TUNE_MAX_TRIALS)
    t->p.max_trials = HK_TUNE_MAX_TRIALS;
  t->best = -1;
  t->model = *model;
  t->phase = PH_BASELINE;
  t->dir = 1;
  int pos[NKNOB];
  place(start, pos);
  memcpy(t->best_pos, pos, sizeof pos);
  begin_trial(t, start, pos);
  *out = t;
  return HK_OK;
}

void hk_autotune_destroy(hk_autotune *t) { free(t); }

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median and the spread of the trial's samples. */
static void judge(const hk_autotune *t, double *median, double *spread) {
  double s[MAX_SAMPLES];
  int n = t->nsamples;
  memcpy(s, t->samples, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, by_value);
  *median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  *spread = *median > 0 ? (s[n - 1] - s[0]) / *median : 0;
}

/* Whether candidate c beats best b by more than the noise. */
static int beats(const hk_autotune *t, const hk_tune_trial *c,
                 const hk_tune_trial *b) {
  double margin = t->p.spread * b->score_s;
  if (b->spread * b->score_s > margin)
    margin = b->spread * b->score_s;
  if (c->spread * c->score_s > margin)
    margin = c->spread * c->score_s;
  return c->score_s < b->score_s - margin;
}

/* The descent moves on after a candidate was judged. */
static void advance(hk_autotune *t, int kept) {
  if (kept) {
    t->stepped++;
    t->pass_kept = 1;
    return;
  }
  if (t->dir == 1 && t->stepped == 0) {
    t->dir = -1;
    return;
  }
  t->knob++;
  t->dir = 1;
  t->stepped = 0;
}

/* The next candidate of the descent into c, or 0: the search is over. */
static int propose(hk_autotune *t, int c[NKNOB]) {
  for (;;) {
    if (t->knob >= NKNOB) {
      if (!t->pass_kept || t->pass + 1 >= MAX_PASSES)
        return 0;
      t->pass++;
      t->pass_kept = 0;
      t->knob = 0;
      t->dir = 1;
      t->stepped = 0;
    }
    memcpy(c, t->best_pos, NKNOB * sizeof *c);
    c[t->knob] += t->dir;
    const int n = t->knob == 0        ? NTHR
                  : t->knob == 1      ? NCYC
                  : t->p.hierarchical ? NHIER
                                      : 0; /* not searched */
    if (c[t->knob] >= 0 && c[t->knob] < n && !t->measured[c[0]][c[1]][c[2]])
      return 1;
    advance(t, 0);
  }
}

/* The trial running ended: record it, judge it, pick what runs next.
 * Returns 1 when *next differs from what runs now. */
static int end_trial(hk_autotune *t, hk_tune_setting *next) {
  hk_tune_trial *tr = &t->trials[t->ntrials];
  tr->s = t->cur;
  judge(t, &tr->score_s, &tr->spread);
  tr->samples = t->nsamples;
  tr->steps = t->trial_steps;
  tr->kept = t->best < 0 || beats(t, tr, &t->trials[t->best]);
  if (tr->kept) {
    t->best = t->ntrials;
    memcpy(t->best_pos, t->cur_pos, sizeof t->best_pos);
  }
  t->ntrials++;
  if (t->phase == PH_DESCENT)
    advance(t, tr->kept);
  int c[NKNOB];
  int more = t->ntrials < t->p.max_trials;
  if (more && t->phase == PH_BASELINE &&
      !hk_tune_setting_equal(&t->model, &t->cur)) {
    t->phase = PH_MODEL;
    place(&t->model, c);
    begin_trial(t, &t->model, c);
    *next = t->cur;
    return 1;
  }
  t->phase = PH_DESCENT;
  if (more && propose(t, c)) {
    hk_tune_setting s = at(c);
    begin_trial(t, &s, c);
    *next = s;
    return 1;
  }
  t->phase = PH_DONE;
  const hk_tune_setting *b = &t->trials[t->best].s;
  if (hk_tune_setting_equal(b, &t->cur))
    return 0;
  t->cur = *b;
  *next = *b;
  return 1;
}

int hk_autotune_step(hk_autotune *t, double step_s, hk_tune_setting *next) {
  if (t->phase == PH_DONE)
    return 0;
  t->steps++;
  t->trial_steps++;
  if (t->warm_left > 0) {
    t->warm_left--;
    return 0;
  }
  t->acc += step_s;
  if (++t->in_sample < t->p.steps_per_sample)
    return 0;
  t->samples[t->nsamples++] = t->acc / t->p.steps_per_sample;
  t->acc = 0;
  t->in_sample = 0;
  if (t->nsamples < t->p.min_samples)
    return 0;
  double median, spread;
  judge(t, &median, &spread);
  if (spread > t->p.spread && t->nsamples < t->p.max_samples)
    return 0;
  return end_trial(t, next);
}

int hk_autotune_done(const hk_autotune *t) { return t->phase == PH_DONE; }

int hk_autotune_ntrials(const hk_autotune *t) { return t->ntrials; }

const hk_tune_trial *hk_autotune_trial(const hk_autotune *t, int i) {
  return i >= 0 && i < t->ntrials ? &t->trials[i] : NULL;
}

const hk_tune_trial *hk_autotune_best(const hk_autotune *t) {
  return t->best >= 0 ? &t->trials[t->best] : NULL;
}

long hk_autotune_steps(const hk_autotune *t) { return t->steps; }

int hk_tune_thresholds(const uint64_t **ladder) {
  *ladder = thr_ladder;
  return NTHR;
}
