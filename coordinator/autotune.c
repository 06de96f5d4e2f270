/*
 * autotune.c - the search of `hkrun --autotune` (autotune.h): trials
 * measured from step times, a sweep of each of three ladders in turn.
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
static const uint64_t sock_ladder[] = {1, 2, 4, 8};
static const uint64_t stage_ladder[] = {MIB / 2, 1 * MIB, 2 * MIB, 4 * MIB};
/* HK_COMPRESSION none, fp16, bf16 (hk_compression's values) */
static const int comp_ladder[] = {0, 1, 2};
#define NTHR ((int)(sizeof thr_ladder / sizeof thr_ladder[0]))
#define NCYC ((int)(sizeof cyc_ladder / sizeof cyc_ladder[0]))
#define NHIER 3
#define NSOCK ((int)(sizeof sock_ladder / sizeof sock_ladder[0]))
#define NSTAGE ((int)(sizeof stage_ladder / sizeof stage_ladder[0]))
#define NCOMP 3
#define NKNOB 6
/* The knobs in the order a pass walks them (indices of pos[]): the two
 * that move the most bytes per second first (the fusion threshold, the
 * sockets per peer: a capped connection can cost a factor of several),
 * then the cycle time, hierarchical, the staging chunk, compression. */
static const int knob_order[NKNOB] = {0, 3, 1, 2, 4, 5};
#define MAX_PASSES 3
#define MAX_SAMPLES 64
/* The standard error of a median of n normal samples is about
 * sqrt(pi/2) = 1.253 times that of their mean; 1.4826 x MAD estimates
 * the standard deviation of normal samples (Rousseeuw and Croux, 1993). */
#define SE_MEDIAN_PER_MAD (1.253 * 1.4826)
/* A kept candidate beats the best by more than this many combined
 * standard errors (about 2.3 % of equal settings pass by chance, one-sided) */
#define KEEP_SIGMAS 2.0
/* ... and by at least this fraction of the best's score */
#define KEEP_MIN_GAIN 0.01

enum { PH_BASELINE, PH_MODEL, PH_DESCENT, PH_CONFIRM, PH_RECHECK, PH_DONE };

struct hk_autotune {
  hk_tune_params p;
  hk_tune_trial trials[HK_TUNE_MAX_TRIALS];
  int ntrials;
  int best;    /* index into trials, -1 before trial 0 ended */
  int pending; /* PH_CONFIRM, PH_RECHECK: the candidate that beat the best */
  int pending_pos[NKNOB];
  int resume; /* PH_CONFIRM, PH_RECHECK: the phase to go back to */
  hk_tune_setting model;
  hk_tune_setting cur; /* what runs now */
  int cur_pos[NKNOB];  /* its rungs (nearest, for a start off the ladder) */
  int best_pos[NKNOB];
  /* the trial running */
  int warm_left, in_sample, nsamples, trial_steps;
  double acc, samples[MAX_SAMPLES];
  /* the search */
  int phase, knob, pass, pass_kept;
  int rungs[NKNOB];      /* rungs searched along each knob (0: it keeps
                            the start's value) */
  hk_tune_setting start; /* the job's own setting */
  uint64_t step_bytes;   /* a step's bytes: thresholds from this one make
                            the same batches (hk_autotune_limit_threshold);
                            0: not known */
  uint8_t measured[NTHR][NCYC][NHIER][NSOCK][NSTAGE][NCOMP];
  long steps;
};

const char *const hk_tune_vars[HK_TUNE_NVARS] = {
    "HK_FUSION_THRESHOLD",       "HK_CYCLE_TIME_MS",
    "HK_HIERARCHICAL_ALLREDUCE", "HK_SOCKETS_PER_PEER",
    "HK_STAGING_CHUNK_BYTES",    "HK_COMPRESSION"};

int hk_tune_setting_equal(const hk_tune_setting *a, const hk_tune_setting *b) {
  return a->fusion_threshold == b->fusion_threshold &&
         a->cycle_time_ms == b->cycle_time_ms &&
         a->hierarchical == b->hierarchical &&
         a->sockets_per_peer == b->sockets_per_peer &&
         a->staging_chunk_bytes == b->staging_chunk_bytes &&
         a->compression == b->compression;
}

/* The index of ladder[0..n) nearest to v (the lower at equal distance):
 * every ladder but the cycle time's holds whole numbers. */
static int nearest(const uint64_t *ladder, int n, uint64_t v) {
  int best = 0;
  for (int i = 1; i < n; i++) {
    uint64_t d = v > ladder[i] ? v - ladder[i] : ladder[i] - v;
    uint64_t e = v > ladder[best] ? v - ladder[best] : ladder[best] - v;
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

/* s's rungs: the nearest of each ladder, among the rungs searched (7
 * sockets with 7 open is rung 4, not 8); a threshold that holds a whole
 * step is the threshold ladder's last rung searched (5 MiB with a 4.5 MiB
 * step is the 8 MiB rung, not 4). */
static void place(const hk_autotune *t, const hk_tune_setting *s,
                  int pos[NKNOB]) {
  pos[0] = t->step_bytes && s->fusion_threshold >= t->step_bytes
               ? t->rungs[0] - 1
               : nearest(thr_ladder, NTHR, s->fusion_threshold);
  pos[1] = nearest_cyc(s->cycle_time_ms);
  pos[2] = s->hierarchical < 0 ? 1 : s->hierarchical ? 2 : 0;
  pos[3] = nearest(sock_ladder, NSOCK,
                   s->sockets_per_peer > 0 ? (uint64_t)s->sockets_per_peer : 0);
  pos[4] = nearest(stage_ladder, NSTAGE, s->staging_chunk_bytes);
  pos[5] = s->compression >= 0 && s->compression < NCOMP ? s->compression : 0;
  for (int k = 0; k < NKNOB; k++)
    if (t->rungs[k] > 0 && pos[k] >= t->rungs[k])
      pos[k] = t->rungs[k] - 1;
}

/* The setting at rungs pos; a knob not searched keeps the start's value
 * (which need not be a rung). */
static hk_tune_setting at(const hk_autotune *t, const int pos[NKNOB]) {
  hk_tune_setting s = t->start;
  s.fusion_threshold = thr_ladder[pos[0]];
  s.cycle_time_ms = cyc_ladder[pos[1]];
  if (t->rungs[2])
    s.hierarchical = hier_ladder[pos[2]];
  if (t->rungs[3])
    s.sockets_per_peer = (int)sock_ladder[pos[3]];
  if (t->rungs[4])
    s.staging_chunk_bytes = stage_ladder[pos[4]];
  if (t->rungs[5])
    s.compression = comp_ladder[pos[5]];
  return s;
}

/* Whether a and b run alike: equal but for thresholds that both hold a
 * whole step (the same batches). */
static int same(const hk_autotune *t, hk_tune_setting a, hk_tune_setting b) {
  if (t->step_bytes && a.fusion_threshold >= t->step_bytes &&
      b.fusion_threshold >= t->step_bytes)
    a.fusion_threshold = b.fusion_threshold;
  return hk_tune_setting_equal(&a, &b);
}

/* Marks s measured when it runs as a rung of every ladder does. */
static void mark(hk_autotune *t, const hk_tune_setting *s) {
  int pos[NKNOB];
  place(t, s, pos);
  if (same(t, at(t, pos), *s))
    t->measured[pos[0]][pos[1]][pos[2]][pos[3]][pos[4]][pos[5]] = 1;
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
  if (p->max_sockets < 0 || p->max_sockets > (int)sock_ladder[NSOCK - 1] ||
      start->sockets_per_peer < 1 ||
      (p->max_sockets > 1 && start->sockets_per_peer > p->max_sockets))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "autotune: %d sockets per peer to start from, at most %d "
                   "searched: need 1 <= start, and start <= the most when "
                   "searched (at most %d)",
                   start->sockets_per_peer, p->max_sockets,
                   (int)sock_ladder[NSOCK - 1]);
  if (p->staging && start->staging_chunk_bytes == 0)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "autotune: a staging chunk of 0 bytes to start from");
  hk_autotune *t = calloc(1, sizeof *t);
  if (!t)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the autotuner");
  t->p = *p;
  if (t->p.max_trials > HK_TUNE_MAX_TRIALS)
    t->p.max_trials = HK_TUNE_MAX_TRIALS;
  t->best = -1;
  t->model = *model;
  t->start = *start;
  t->rungs[0] = NTHR;
  t->rungs[1] = NCYC;
  t->rungs[2] = p->hierarchical ? NHIER : 0;
  for (int i = 0; p->max_sockets > 1 && i < NSOCK; i++)
    t->rungs[3] += (int)sock_ladder[i] <= p->max_sockets;
  t->rungs[4] = p->staging ? NSTAGE : 0;
  t->rungs[5] = p->compression ? NCOMP : 0;
  t->phase = PH_BASELINE;
  int pos[NKNOB];
  place(t, start, pos);
  memcpy(t->best_pos, pos, sizeof pos);
  begin_trial(t, start, pos);
  *out = t;
  return HK_OK;
}

uint64_t hk_autotune_limit_threshold(hk_autotune *t, uint64_t step_bytes) {
  int r = 0;
  while (r < NTHR && thr_ladder[r] < step_bytes)
    r++;
  if (t->step_bytes || t->ntrials > 0 || step_bytes == 0 || r >= NTHR - 1)
    return 0;
  t->step_bytes = step_bytes;
  t->rungs[0] = r + 1;
  place(t, &t->start, t->best_pos);
  place(t, &t->cur, t->cur_pos);
  mark(t, &t->cur);
  return thr_ladder[r];
}

void hk_autotune_destroy(hk_autotune *t) { free(t); }

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *s, int n) {
  qsort(s, (size_t)n, sizeof *s, by_value);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The MAD of few samples underestimates the spread: Croux and
 * Rousseeuw's (1992) finite-sample factors make it unbiased for normal
 * samples (n > 9: n / (n - 0.8)). */
static double mad_small_n(int n) {
  static const double b[] = {1,     1,     1.196, 1.495, 1.363,
                             1.206, 1.200, 1.140, 1.129, 1.107};
  return n <= 9 ? b[n] : n / (n - 0.8);
}

double hk_tune_uncertainty(const double *samples, int n, double *median) {
  double s[MAX_SAMPLES];
  if (n > MAX_SAMPLES)
    n = MAX_SAMPLES;
  if (n < 1) {
    *median = 0;
    return 0;
  }
  memcpy(s, samples, (size_t)n * sizeof *s);
  double m = median_of(s, n);
  for (int i = 0; i < n; i++)
    s[i] = fabs(s[i] - m);
  double mad = median_of(s, n) * mad_small_n(n);
  *median = m;
  return m > 0 ? SE_MEDIAN_PER_MAD * mad / sqrt((double)n) / m : 0;
}

/* The median of the relative uncertainties of every trial so far, the
 * one ending included: the machine's noise is shared by all settings,
 * and one trial's few samples can put its own estimate near 0 by
 * chance, so no trial counts as surer than the typical one. */
static double pooled(const hk_autotune *t) {
  double u[HK_TUNE_MAX_TRIALS];
  int n = t->ntrials + 1;
  for (int i = 0; i < n; i++)
    u[i] = t->trials[i].uncertainty;
  return median_of(u, n);
}

/* Whether candidate c beats best b by more than the noise: by more than
 * KEEP_SIGMAS combined standard errors (each relative one at least
 * u_floor, pooled()'s) and by KEEP_MIN_GAIN at least. */
static int beats(const hk_tune_trial *c, const hk_tune_trial *b,
                 double u_floor) {
  double ub = fmax(b->uncertainty, u_floor) * b->score_s;
  double uc = fmax(c->uncertainty, u_floor) * c->score_s;
  double margin = KEEP_SIGMAS * sqrt(ub * ub + uc * uc);
  if (margin < KEEP_MIN_GAIN * b->score_s)
    margin = KEEP_MIN_GAIN * b->score_s;
  return c->score_s < b->score_s - margin;
}

/* The next candidate into c, or 0: the search is over. Along knob
 * t->knob, from the best setting, the rung nearest to the best's that is
 * not measured yet (upwards first at equal distance); when that knob's
 * line has none left, the next knob; after the last, another pass if the
 * pass kept anything (at most MAX_PASSES). */
static int propose(hk_autotune *t, int c[NKNOB]) {
  for (;;) {
    if (t->knob >= NKNOB) {
      if (!t->pass_kept || t->pass + 1 >= MAX_PASSES)
        return 0;
      t->pass++;
      t->pass_kept = 0;
      t->knob = 0;
    }
    const int k = knob_order[t->knob], n = t->rungs[k];
    for (int d = 1; d < n; d++)
      for (int dir = 1; dir >= -1; dir -= 2) {
        memcpy(c, t->best_pos, NKNOB * sizeof *c);
        c[k] += dir * d;
        if (c[k] >= 0 && c[k] < n &&
            !t->measured[c[0]][c[1]][c[2]][c[3]][c[4]][c[5]])
          return 1;
      }
    t->knob++;
  }
}

/* Makes trial i the best (its rungs pos). */
static void keep(hk_autotune *t, int i, const int pos[NKNOB]) {
  t->trials[i].kept = 1;
  if (t->phase == PH_DESCENT)
    t->pass_kept = 1;
  t->best = i;
  memcpy(t->best_pos, pos, sizeof t->best_pos);
}

/* The trial running ended: record it, judge it, pick what runs next.
 * Returns 1 when *next differs from what runs now. */
static int end_trial(hk_autotune *t, hk_tune_setting *next) {
  hk_tune_trial *tr = &t->trials[t->ntrials];
  const int i = t->ntrials;
  tr->s = t->cur;
  tr->uncertainty = hk_tune_uncertainty(t->samples, t->nsamples, &tr->score_s);
  tr->samples = t->nsamples;
  tr->steps = t->trial_steps;
  tr->kept = 0;
  const double u = pooled(t);
  t->ntrials++;
  int more = t->ntrials < t->p.max_trials;
  if (t->best < 0) {
    keep(t, i, t->cur_pos);
  } else if (t->phase == PH_CONFIRM) {
    /* i measured the best again, right after the candidate: the two
     * are judged on what the machine gave them both just now */
    t->phase = t->resume;
    const int wins = beats(&t->trials[t->pending], tr, u);
    if (wins && more) {
      /* the best stays, with its fresher score, until the candidate,
       * measured once more, beats that score too: measured on both
       * sides of it, a load that came or went during the three trials
       * cannot favour the candidate both times */
      tr->kept = 1;
      t->best = i;
      t->phase = PH_RECHECK;
      hk_tune_setting c = t->trials[t->pending].s;
      begin_trial(t, &c, t->pending_pos);
      *next = c;
      return 1;
    }
    if (wins) {
      keep(t, t->pending, t->pending_pos); /* no budget left to recheck */
    } else { /* the best stays, its fresher score with it */
      tr->kept = 1;
      t->best = i;
    }
  } else if (t->phase == PH_RECHECK) {
    t->phase = t->resume;
    if (beats(tr, &t->trials[t->best], u)) /* i: the candidate again */
      keep(t, i, t->pending_pos);
  } else if (beats(tr, &t->trials[t->best], u)) {
    if (more) { /* confirm: measure the best again before keeping */
      t->pending = i;
      memcpy(t->pending_pos, t->cur_pos, sizeof t->pending_pos);
      t->resume = t->phase;
      t->phase = PH_CONFIRM;
      hk_tune_setting b = t->trials[t->best].s;
      begin_trial(t, &b, t->best_pos);
      *next = b;
      return 1;
    }
    keep(t, i, t->cur_pos); /* no budget left to confirm */
  }
  int c[NKNOB];
  if (more && t->phase == PH_BASELINE && !same(t, t->model, t->cur)) {
    t->phase = PH_MODEL;
    place(t, &t->model, c);
    begin_trial(t, &t->model, c);
    *next = t->cur;
    return 1;
  }
  t->phase = PH_DESCENT;
  if (more && propose(t, c)) {
    hk_tune_setting s = at(t, c);
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
  double median;
  double u = hk_tune_uncertainty(t->samples, t->nsamples, &median);
  if (u > t->p.spread && t->nsamples < t->p.max_samples)
    return 0;
  return end_trial(t, next);
}

int hk_autotune_done(const hk_autotune *t) { return t->phase == PH_DONE; }

int hk_autotune_ntrials(const hk_autotune *t) { return t->ntrials; }

int hk_autotune_settled(const hk_autotune *t) {
  return t->phase == PH_CONFIRM ? t->ntrials - 1 : t->ntrials;
}

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
