/*
 * scaler.h - dynamic loss scaling for float16 training, as PyTorch's
 * torch.cuda.amp.GradScaler does it (Micikevicius et al., "Mixed
 * Precision Training", ICLR 2018, section 3.2; GradScaler's defaults):
 * the loss (in practice dLoss/dlogits) is multiplied by `scale` before
 * backward so that small gradients survive float16; after the gradients
 * are allreduced, a step whose gradients hold an inf or NaN is skipped
 * and the scale halved; after SCALER_GROWTH_INTERVAL consecutive good
 * steps the scale doubles. Scales stay powers of two, so unscaling
 * (multiplying by 1/scale) is exact.
 *
 * Deciding from the ALLREDUCED gradients makes the decision identical on
 * every rank: hk's results are bitwise equal everywhere, and an inf or
 * NaN on any one rank reaches every rank's sum (inf + finite = inf,
 * inf - inf = NaN).
 *
 * Pure state machine, no globals; not thread-safe (one per trainer).
 */
#ifndef HK_TRAIN_SCALER_H
#define HK_TRAIN_SCALER_H

#include <stddef.h>

#define SCALER_INIT 65536.0f /* 2^16 */
#define SCALER_GROWTH_INTERVAL 2000

typedef struct loss_scaler {
  int enabled;  /* 0: scale stays 1 and every step is applied */
  float scale;  /* current scale, a power of two */
  long good;    /* consecutive applied steps since the last change */
  long skipped; /* steps skipped so far */
} loss_scaler;

/** Starts at SCALER_INIT when enabled, else 1. */
void scaler_init(loss_scaler *s, int enabled);

/** 1 when g[0..n) holds only finite values. */
int scaler_all_finite(const float *g, size_t n);

/**
 * Records a step whose allreduced gradients were finite (or not): returns
 * 1 to apply the step, 0 to skip it (scale halved, never below 2^-24).
 * On applying, the scale doubles after SCALER_GROWTH_INTERVAL good steps
 * in a row (never above 2^24).
 */
int scaler_update(loss_scaler *s, int finite);

#endif
