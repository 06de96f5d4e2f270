/*
 * autotune.h - the search of `hkrun --autotune`: which agreed settings
 * (fusion threshold, cycle time, hierarchical allreduce) a job runs next,
 * from the step times it measured so far. Pure logic: it is fed step times and
 * answers with the setting the next step should run; it does no I/O, reads no
 * clock and owns no thread (rank 0's background thread owns it: worker/tune.c
 * measures the steps and carries the decision to every rank).
 *
 * Measuring one setting (a trial): the first `warmup_steps` steps after a
 * change are dropped; then every `steps_per_sample` steps make one sample
 * (their mean step time). After `min_samples` samples the trial ends as
 * soon as the samples' spread, (max - min) / median, is at most `spread`,
 * or when it has `max_samples` samples (its budget). Its score is the
 * median sample (seconds per step; lower is better), its noise the spread
 * times the score.
 *
 * The search (coordinate descent over discrete ladders; it is Horovod's
 * job, a search over these knobs, done without its Bayesian optimisation
 * and its noise model: the noise is measured instead):
 *  1. trial 0 is the setting the job started with (the baseline, against
 *     which the gain is reported);
 *  2. trial 1 is the cost model's suggestion (`model`), when it differs;
 *  3. then each knob in turn, from the best setting so far: the next rung
 *     of its ladder upwards, and on while each step up is kept; if the
 *     first step up was not kept, downwards the same way. A pass over
 *     the knobs that kept anything is followed by another (at most 3).
 * A candidate is kept (becomes the best) only if its score beats the
 * best's by more than the larger of the two noises and of `spread` times
 * the best's score: a difference the measurement cannot tell from noise
 * never changes the setting. A setting measured once is not measured
 * again. The search ends when no knob moves, or after `max_trials`
 * trials; the job then runs the best setting.
 *
 * Ladders: fusion threshold 0, 1, 2, 4, 8, 16, 32, 64, 128 MiB; cycle
 * time 0, 0.5, 1, 2, 5, 10 ms; hierarchical allreduce flat (0), the cost
 * model's choice (-1), always (1), searched only where the job allows
 * both (hk_tune_params.hierarchical). A start off the ladder is measured
 * as it is and searched from the nearest rung.
 *
 * Thread-safety: none; one owner.
 */
#ifndef HK_COORDINATOR_AUTOTUNE_H
#define HK_COORDINATOR_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

/** The settings the tuner chooses between. */
typedef struct hk_tune_setting {
  uint64_t fusion_threshold; /* bytes (HK_FUSION_THRESHOLD) */
  double cycle_time_ms;      /* ms (HK_CYCLE_TIME_MS) */
  int hierarchical;          /* HK_HIERARCHICAL_ALLREDUCE: 1 always, 0
                                never, -1 the cost model decides */
} hk_tune_setting;

/** How a trial is measured and how long the search may run. */
typedef struct hk_tune_params {
  int warmup_steps;     /* dropped after each change, >= 0 */
  int steps_per_sample; /* steps averaged into one sample, >= 1 */
  int min_samples;      /* samples before the spread is judged, >= 2 */
  int max_samples;      /* a trial's budget, >= min_samples */
  int max_trials;       /* the search's budget (trials), >= 1 */
  double spread;        /* the bound on (max - min) / median, > 0 */
  int hierarchical;     /* 1: search the hierarchical knob too (the job
                           has hierarchical rings and no forced
                           algorithm); 0: it keeps its start */
} hk_tune_params;

/** One measured trial (for the log file and the final report). */
typedef struct hk_tune_trial {
  hk_tune_setting s;
  double score_s; /* median sample, seconds per step */
  double spread;  /* (max - min) / median of its samples */
  int samples;    /* samples taken */
  int steps;      /* steps it ran, warm-up included */
  int kept;       /* 1: it became the best when it ended (trial 0: 1) */
} hk_tune_trial;

typedef struct hk_autotune hk_autotune;

/** Most trials one search records (max_trials is capped at it). */
#define HK_TUNE_MAX_TRIALS 64

/**
 * Starts a search from the job's setting `start` (measured first), with
 * the cost model's suggestion `model` (measured second unless it equals
 * start). Errors: HK_ERR_INVALID_ARG naming a parameter out of the
 * ranges above; HK_ERR_NOMEM.
 */
hk_status hk_autotune_create(const hk_tune_params *p,
                             const hk_tune_setting *start,
                             const hk_tune_setting *model, hk_autotune **out);

/** Frees it. NULL is fine. */
void hk_autotune_destroy(hk_autotune *t);

/**
 * One step ended, taking step_s seconds (>= 0), under the setting the
 * tuner last asked for. Returns 1 when the next step must run a
 * different setting (written to *next; a new trial begins, or the search
 * ended and *next is the best), else 0. After the search ended it
 * returns 0 for good.
 */
int hk_autotune_step(hk_autotune *t, double step_s, hk_tune_setting *next);

/** 1 once the search has ended. */
int hk_autotune_done(const hk_autotune *t);

/** Trials measured so far (the one running not counted). */
int hk_autotune_ntrials(const hk_autotune *t);

/** Trial i (0 <= i < hk_autotune_ntrials), or NULL. */
const hk_tune_trial *hk_autotune_trial(const hk_autotune *t, int i);

/** The best trial so far (trial 0 before any ended: NULL). */
const hk_tune_trial *hk_autotune_best(const hk_autotune *t);

/** Steps seen so far, warm-up included. */
long hk_autotune_steps(const hk_autotune *t);

/** The fusion-threshold ladder (bytes, ascending; static storage): its
 *  number of rungs, *ladder set to them. Pure. */
int hk_tune_thresholds(const uint64_t **ladder);

/** 1 if a and b are the same setting. Pure. */
int hk_tune_setting_equal(const hk_tune_setting *a, const hk_tune_setting *b);

#endif
