/*
 * elastic_replay.h - the serial replay of w_elastic's training, which the
 * elastic tests (one host, and agents on the netns bed) check a job's
 * final weights against.
 */
#ifndef HK_TESTS_ELASTIC_REPLAY_H
#define HK_TESTS_ELASTIC_REPLAY_H

#include <stddef.h>

/** w_elastic's model: this many float64 weights. */
#define HKT_ELASTIC_D 8

/**
 * w_elastic's weights after `steps` steps computed serially: steps
 * [0, cut) averaged over the slots a[0..na), steps [cut, steps) over
 * b[0..nb), with w_elastic's gradient and rate, written into out[cap] as
 * w_elastic prints them ("%a" per weight, comma-separated). The gradient
 * and the update must stay the same expressions as w_elastic.c's.
 */
void hkt_elastic_replay(const int *a, int na, const int *b, int nb, int cut,
                        int steps, char *out, size_t cap);

/**
 * hkt_elastic_replay with a third part: steps [cut2, steps) averaged over
 * the slots c[0..nc) (workers joined at cut2); cut <= cut2 <= steps.
 */
void hkt_elastic_replay3(const int *a, int na, const int *b, int nb, int cut,
                         const int *c, int nc, int cut2, int steps, char *out,
                         size_t cap);

#endif
