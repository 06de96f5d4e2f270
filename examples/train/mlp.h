/*
 * mlp.h - a multi-layer perceptron classifier: fully connected layers with
 * ReLU between them, softmax cross-entropy on the last, forward and
 * backward passes with the matrix products in CBLAS (cblas_sgemm).
 *
 * Shapes (all float32, row-major, batch-first):
 *   input  x        B x dims[0]
 *   layer l weight  dims[l+1] x dims[l]   (PyTorch's nn.Linear layout)
 *   layer l bias    dims[l+1]
 *   hidden output   relu(x W^T + b)        B x dims[l+1]
 *   logits          x W^T + b of the last  B x dims[n_layers]
 *
 * Parameters live in ONE contiguous float buffer (m->params), tensor after
 * tensor in this order: fc1.weight, fc1.bias, fc2.weight, fc2.bias, ...
 * (tensor t = 2*layer + (is bias)). Gradients use a buffer of the same
 * layout, so optimisers and the save format walk both alike.
 *
 * Ownership: mlp and mlp_work own their buffers (free with mlp_free and
 * mlp_work_free). Nothing here is thread-safe; use one mlp_work per thread.
 */
#ifndef HK_TRAIN_MLP_H
#define HK_TRAIN_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "lowp.h"
#include "rng.h"

/** Most fully connected layers a model may have. */
#define MLP_MAX_LAYERS 6
/** Room for a tensor name ("fc6.weight") and its NUL, with margin. */
#define MLP_NAME_CAP 32

typedef struct mlp {
  int n_layers;                 /* 1..MLP_MAX_LAYERS */
  int dims[MLP_MAX_LAYERS + 1]; /* widths: inputs, hidden..., classes */
  size_t n_params;              /* floats in params */
  float *params;                /* owned */
  /* Mixed precision (lowp.h), both zero after mlp_init: the passes round
   * every layer's output and every delta to lowp (the GEMMs accumulate
   * in float32), and read the weights from compute (a copy of params
   * rounded to lowp, not owned) when it is not NULL. */
  lowp_kind lowp;
  const float *compute;
} mlp;

/** Where one named tensor sits in a params (or gradient) buffer. */
typedef struct mlp_tensor {
  char name[MLP_NAME_CAP]; /* "fc1.weight", "fc1.bias", ... (1-based) */
  int layer;               /* 0-based layer */
  int is_bias;             /* 1 for a bias, 0 for a weight matrix */
  size_t offset;           /* first float, from the buffer's start */
  size_t count;            /* floats */
} mlp_tensor;

/** Scratch for one forward/backward pass of at most max_batch samples. */
typedef struct mlp_work {
  int max_batch;
  const float *x;                 /* input of the last forward, not owned */
  float *act[MLP_MAX_LAYERS + 1]; /* act[l+1]: output of layer l, owned */
  float *delta[2];                /* dLoss/dZ ping-pong buffers, owned */
} mlp_work;

/**
 * Creates a model with n_layers layers of widths dims[0..n_layers], every
 * width in 1..65536; parameters zeroed. Returns 0, or -1 (bad shape or
 * out of memory; *m is then zeroed).
 */
int mlp_init(mlp *m, int n_layers, const int *dims);
void mlp_free(mlp *m);

/** Number of tensors: 2 * n_layers. */
int mlp_n_tensors(const mlp *m);

/** Describes tensor t, 0 <= t < mlp_n_tensors(m). */
mlp_tensor mlp_tensor_at(const mlp *m, int t);

/**
 * He/Kaiming initialisation (He et al., "Delving Deep into Rectifiers",
 * ICCV 2015): every weight ~ N(0, 2 / fan_in) drawn from r in tensor
 * order, biases zero.
 */
void mlp_init_he(mlp *m, rng *r);

/** Allocates scratch for batches of up to max_batch samples (>= 1). */
int mlp_work_init(mlp_work *w, const mlp *m, int max_batch);
void mlp_work_free(mlp_work *w);

/**
 * Forward pass of B samples (1 <= B <= w->max_batch): x is B x dims[0] and
 * must stay unchanged until mlp_backward. Returns the logits, B x classes,
 * inside w (valid until the next call).
 */
const float *mlp_forward(const mlp *m, mlp_work *w, const float *x, int B);

/**
 * After mlp_forward: softmax cross-entropy of the logits against labels
 * y[0..B) (each < classes). Returns the MEAN loss over the B samples (in
 * nats), stores dLoss/dlogits (softmax - onehot) / B for mlp_backward, and
 * adds to *correct (if not NULL) the samples whose largest logit (first
 * one on ties) is the label.
 */
double mlp_loss(const mlp *m, mlp_work *w, const uint8_t *y, int B,
                long *correct);

/**
 * Called by mlp_backward as soon as tensor t's gradient (count floats at
 * grad, inside the gradient buffer) is complete. The pass reads no
 * gradient again, so the callee may hand the buffer to a collective that
 * works in place while the pass goes on. Return 0 to go on, non-zero to
 * stop the pass (mlp_backward then returns that value).
 */
typedef int (*mlp_grad_ready)(void *ctx, int t, float *grad, size_t count);

/**
 * Backward pass after mlp_forward + mlp_loss: writes the gradient of the
 * mean loss into grads (m->n_params floats, same layout as params),
 * last layer first, calling ready (if not NULL) for its bias and then its
 * weight before going down a layer. Returns 0 or ready's non-zero value.
 */
int mlp_backward(const mlp *m, mlp_work *w, int B, float *grads,
                 mlp_grad_ready ready, void *ctx);

/** Forward pass; adds to *correct the samples whose argmax is y[i]. */
void mlp_count_correct(const mlp *m, mlp_work *w, const float *x,
                       const uint8_t *y, int B, long *correct);

#endif
