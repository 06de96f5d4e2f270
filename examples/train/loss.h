/*
 * loss.h - softmax cross-entropy and argmax over rows of logits, shared
 * by every model kind.
 *
 * Shapes: z and d are B x C floats, row-major; y holds B labels < C.
 * Pure functions of their arguments; thread-safe.
 */
#ifndef HK_TRAIN_LOSS_H
#define HK_TRAIN_LOSS_H

#include <stdint.h>

/**
 * The mean over the B rows of -log softmax(z)_y (nats); writes
 * dLoss/dz = (softmax - onehot) / B into d; adds to *correct (if not NULL)
 * the rows whose largest logit (first on ties) is the label. Stable:
 * each row is shifted by its max before exp.
 */
double softmax_xent(const float *z, const uint8_t *y, int B, int C, float *d,
                    long *correct);

/** Index of the largest of v[0..n), the first on ties. */
int loss_argmax(const float *v, int n);

#endif
