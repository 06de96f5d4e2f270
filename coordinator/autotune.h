/*
 * autotune.h - the search of `hkrun --autotune`: which agreed settings
 * (fusion threshold, cycle time, hierarchical allreduce, sockets per
 * peer, device staging chunk, compression) a job runs next,
 * from the step times it measured so far. Pure logic: it is fed step times and
 * answers with the setting the next step should run; it does no I/O, reads no
 * clock and owns no thread (rank 0's background thread owns it: worker/tune.c
 * measures the steps and carries the decision to every rank).
 *
 * Measuring one setting (a trial): the first `warmup_steps` steps after a
 * change are dropped; then every `steps_per_sample` steps make one sample
 * (their mean step time). Its score is the median sample (seconds per
 * step; lower is better); its uncertainty the standard error of that
 * median, estimated robustly from the samples' median absolute deviation
 * (hk_tune_uncertainty), relative to the score. After `min_samples`
 * samples the trial ends as soon as that uncertainty is at most `spread`,
 * or when it has `max_samples` samples (its budget). Why the MAD and not
 * the range: on a loaded machine one step in many is an outlier (another
 * process ran); the range grows with every outlier and never comes back
 * under any bound, so a range-based noise let no setting be kept, while
 * the median and the MAD move by at most one rank per outlier.
 *
 * Keeping (statistics, not a tuning to any answer): a candidate is kept
 * (becomes the best) only if its score beats the best's by more than 2
 * combined standard errors, 2 x sqrt(u_best^2 + u_cand^2) in seconds,
 * and by at least 1 % of the best's score. Each u here is at least the
 * median of the relative uncertainties of all trials so far: the
 * machine's noise is shared by every setting, and a few samples can put
 * one trial's own MAD near 0 by chance (for the same reason worker/tune.c
 * judges no trial before 5 samples). For two settings that are in
 * fact equal the difference of their medians is about normal with that
 * combined error, so one comparison keeps the wrong one with a chance of
 * about 2.3 %; the 1 % floor stops a gain too small to matter (or an
 * uncertainty estimated as 0 from a few equal samples) from moving the
 * setting. A candidate that passes is then confirmed on both sides: the
 * best setting is measured again at once (a trial of its own, logged,
 * which becomes the best with that fresher score), then the candidate
 * once more (another trial), and the candidate is kept only if both of
 * its scores beat the best's fresh one; else the best stays. The
 * machine's load moves under a search (another job, a data loader), so
 * scores measured minutes apart differ by more than either trial's own
 * noise: judged against a best measured under a heavier load, any later
 * setting looked faster (a tuning run on a loaded machine reported an
 * 83 % gain for a setting that a grid measured in interleaved rounds
 * showed equal). Measured again only after the candidate, the best could
 * still lose to a candidate that ran while the load was away (a lucky
 * window) or before it came; measured between the candidate's two
 * trials, a load that came or went cannot favour the candidate both
 * times. When the trial budget leaves no room for the candidate's second
 * trial, its first decides. A
 * difference the measurement cannot tell from noise never changes the
 * setting; over a sweep of ~15 equal settings one chance
 * keep is possible (the unit test of a flat surface bounds it to one).
 *
 * The search (a sweep of each knob's ladder in turn; it is Horovod's
 * job, a search over these knobs, done without its Bayesian optimisation
 * and its noise model: the noise is measured instead):
 *  1. trial 0 is the setting the job started with (the baseline, against
 *     which the gain is reported);
 *  2. trial 1 is the cost model's suggestion (`model`), when it differs;
 *  3. then each knob in turn (the fusion threshold, the sockets per peer,
 *     the cycle time, hierarchical, the staging chunk, compression), the
 *     other knobs at the best setting so far:
 *     every rung of its ladder not measured yet, nearest to the best's
 *     rung first (upwards first at equal distance), whether or not the
 *     rungs before were kept, so a plateau between the start and the
 *     best rung cannot end the walk early: every rung of the line is
 *     visited. A pass over the knobs that kept anything is followed by
 *     another (at most 3), whose lines go through the new best.
 * A setting measured once is not measured again. Once the caller says
 * how many bytes a training step's tensors hold (hk_autotune_limit_
 * threshold), the threshold ladder ends at the first rung that holds
 * them all: a larger threshold makes the same batches, so it is the same
 * setting and is not measured again. The search ends when a pass keeps
 * nothing, or after `max_trials` trials; the job then runs the best
 * setting. One full pass over the threshold and cycle ladders from a
 * rung of both takes 1 + 1 + 8 + 5 = 15 trials (17 with the hierarchical
 * knob, 2 or 3 more with the sockets, 3 with the staging chunk, 2 with
 * compression), plus two for each candidate that beats the best, within
 * the default budget of 30; a step of more than 2
 * and at most 4 MiB leaves the threshold line 4 rungs (0 to 4 MiB)
 * instead of 9.
 *
 * Ladders: fusion threshold 0, 1, 2, 4, 8, 16, 32, 64, 128 MiB; cycle
 * time 0, 0.5, 1, 2, 5, 10 ms; hierarchical allreduce flat (0), the cost
 * model's choice (-1), always (1), searched only where the job allows
 * both (hk_tune_params.hierarchical); sockets per peer 1, 2, 4, 8, up to
 * hk_tune_params.max_sockets (the sockets the job's links have open),
 * searched only where that is more than 1, else the start's kept;
 * staging chunk 0.5, 1, 2, 4 MiB, searched only where
 * hk_tune_params.staging says device tensors are staged; compression
 * none, fp16, bf16, searched only where hk_tune_params.compression
 * allows it. A start off the ladder is measured as it is and searched
 * from the nearest rung.
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
  uint64_t fusion_threshold;    /* bytes (HK_FUSION_THRESHOLD) */
  double cycle_time_ms;         /* ms (HK_CYCLE_TIME_MS) */
  int hierarchical;             /* HK_HIERARCHICAL_ALLREDUCE: 1 always, 0
                                   never, -1 the cost model decides */
  int sockets_per_peer;         /* TCP sockets a link's stream is striped
                                   over (HK_SOCKETS_PER_PEER), >= 1 */
  uint64_t staging_chunk_bytes; /* device tensors' staging chunk, bytes
                                   (HK_STAGING_CHUNK_BYTES) */
  int compression;              /* HK_COMPRESSION: 0 none, 1 fp16, 2 bf16 */
} hk_tune_setting;

/** How a trial is measured and how long the search may run. */
typedef struct hk_tune_params {
  int warmup_steps;     /* dropped after each change, >= 0 */
  int steps_per_sample; /* steps averaged into one sample, >= 1 */
  int min_samples;      /* samples before the uncertainty is judged, >= 2 */
  int max_samples;      /* a trial's budget, >= min_samples */
  int max_trials;       /* the search's budget (trials), >= 1 */
  double spread;        /* the bound on a trial's relative uncertainty
                           (hk_tune_uncertainty), > 0 */
  int hierarchical;     /* 1: search the hierarchical knob too (the job
                           has hierarchical rings and no forced
                           algorithm); 0: it keeps its start */
  int max_sockets;      /* > 1: search the sockets per peer up to this
                           many (the sockets the TCP links have open,
                           <= 8; the start must not exceed it); 0 or 1:
                           they keep the start's */
  int staging;          /* 1: search the staging chunk too (device tensors
                           cross hosts through host memory); 0: it keeps
                           the start's */
  int compression;      /* 1: search HK_COMPRESSION too (the user allowed
                           it: it changes the results); 0: it keeps the
                           start's */
} hk_tune_params;

/** One measured trial (for the log file and the final report). */
typedef struct hk_tune_trial {
  hk_tune_setting s;
  double score_s;     /* median sample, seconds per step */
  double uncertainty; /* its score's relative standard error
                         (hk_tune_uncertainty) */
  int samples;        /* samples taken */
  int steps;          /* steps it ran, warm-up included */
  int kept;           /* 1: it became the best when it ended (trial 0: 1) */
} hk_tune_trial;

typedef struct hk_autotune hk_autotune;

/**
 * Tells the search that every training step's tensors total `step_bytes`
 * bytes (the allreduces of one step, rounds holding one step's tensors at
 * most): no fused batch is larger, so every fusion threshold of at least
 * step_bytes makes the same batches. The threshold ladder then ends at
 * the first rung at or above step_bytes, and settings whose thresholds
 * are both at least step_bytes count as one (the start of 128 MiB, for a
 * step of 3 MiB, is the 4 MiB rung: 4 MiB is not measured after it).
 * Acts once: on the first call made before trial 0 ends with step_bytes
 * from 1 to 64 MiB (the rung before the last: a larger step leaves the
 * ladder whole); any other call changes nothing. The caller's step must
 * be typical: a later step with more bytes (a metric reduced every N
 * steps) could be batched differently by the thresholds cut. Returns the rung
 * the ladder now ends at, bytes, or 0 when nothing changed. Thread-safety: the
 * search's owner only. No errors.
 */
uint64_t hk_autotune_limit_threshold(hk_autotune *t, uint64_t step_bytes);

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

/** Trials whose verdict (kept) is final: hk_autotune_ntrials, less the
 *  last one while the best is measured again after it (it would be kept
 *  if it beat that score and no budget were left for its second trial). */
int hk_autotune_settled(const hk_autotune *t);

/** Trial i (0 <= i < hk_autotune_ntrials), or NULL. */
const hk_tune_trial *hk_autotune_trial(const hk_autotune *t, int i);

/** The best trial so far (trial 0 before any ended: NULL). */
const hk_tune_trial *hk_autotune_best(const hk_autotune *t);

/** Steps seen so far, warm-up included. */
long hk_autotune_steps(const hk_autotune *t);

/** The fusion-threshold ladder (bytes, ascending; static storage): its
 *  number of rungs, *ladder set to them. Pure. */
int hk_tune_thresholds(const uint64_t **ladder);

/**
 * The relative uncertainty of the median of samples[0..n) (n <= 64; more
 * are ignored): the standard error of the median, estimated as 1.253 x
 * 1.4826 x MAD / sqrt(n) (MAD: the median of |sample - median|; 1.4826
 * turns it into a standard deviation for normal samples, 1.253 =
 * sqrt(pi/2) is the median's efficiency against the mean; Rousseeuw and
 * Croux 1993), the MAD first multiplied by Croux and Rousseeuw's (1992)
 * finite-sample factor (1.495 for 3 samples, 1.206 for 5, n / (n - 0.8)
 * above 9), divided by the median. One outlier moves it little, unlike
 * the range. *median gets the median (seconds, as given). n < 1 or a
 * median <= 0: 0 (and *median 0 when n < 1). Pure; no errors.
 */
double hk_tune_uncertainty(const double *samples, int n, double *median);

/** The variables a setting is made of, in hk_tune_setting's order: what
 *  `--autotune-save` may write and `--autotune-load` accepts, and what an
 *  elastic job's survivors reset to their own values. Static storage. */
#define HK_TUNE_NVARS 6
extern const char *const hk_tune_vars[HK_TUNE_NVARS];

/** 1 if a and b are the same setting. Pure. */
int hk_tune_setting_equal(const hk_tune_setting *a, const hk_tune_setting *b);

#endif
