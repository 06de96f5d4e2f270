/*
 * model.h - the trainer's models as a table of operations (`--model
 * mlp|cnn`): the trainer, the optimisers and the weight file see only this
 * interface.
 *
 * Layout: ALL of a model's floats live in ONE contiguous buffer
 * (m->params, m->n_params floats), tensor after tensor in tensor order:
 * first the trainable tensors (weights and biases), then the buffers
 * (tensors without a gradient, e.g. batch norm's running statistics,
 * which PyTorch keeps in its state_dict beside the parameters). A
 * gradient buffer has the same layout; its buffer part is unused. So an
 * optimiser, a weight file or a checkpoint walks any model alike.
 *
 * Shapes (float32, row-major, batch-first): input x is B x DATA_PIXELS
 * (one 28x28 channel per sample, for the CNN read as N x 1 x 28 x 28),
 * logits B x m->classes.
 *
 * A step: model_forward (train = 1), model_loss (writes dLoss/dlogits
 * into m->dlogits), optionally scale m->dlogits, model_backward, which
 * calls `ready` for each trainable tensor as soon as its gradient is
 * final, last layer first, so the trainer hands it to a collective while
 * the rest of the pass goes on.
 *
 * Ownership: a model owns its parameters and scratch (free with
 * model_free). Not thread-safe: one model per thread.
 */
#ifndef HK_TRAIN_MODEL_H
#define HK_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "compute.h"
#include "loss.h"
#include "lowp.h"
#include "rng.h"

/** Room for a tensor name ("bn2.running_mean") and its NUL. */
#define MODEL_NAME_CAP 32
/** Most tensors (trainable + buffers) a model may have. */
#define MODEL_MAX_TENSORS 32
/** Most uint32 words of shape in a weight file's header. */
#define MODEL_MAX_WORDS 16

/** Where one named tensor sits in the params (or gradient) buffer. */
typedef struct model_tensor {
  char name[MODEL_NAME_CAP]; /* "fc1.weight", "bn1.running_var", ... */
  size_t offset;             /* first float, from the buffer's start */
  size_t count;              /* floats */
  int trainable;             /* 1: has a gradient and an optimiser update */
  int decay; /* 1: weight decay applies (weight matrices and kernels;
                never biases or batch-norm scales/shifts) */
} model_tensor;

/**
 * Called by model_backward as soon as trainable tensor t's gradient
 * (count floats at grad, inside the gradient buffer) is final; the pass
 * reads no gradient again, so the callee may hand it to an in-place
 * collective at once. Return 0 to go on, non-zero to stop the pass
 * (model_backward then returns that value).
 */
typedef int (*model_grad_ready)(void *ctx, int t, float *grad, size_t count);

typedef struct model model;

/** One model kind's operations (a row of the table in model.c). */
typedef struct model_ops {
  const char *name; /* "mlp", "cnn": the --model value */
  int any_row;      /* 1: runs on any compute row (compute.h); 0: the
                       CPU row only */
  /* Allocates parameters (zeroed) and scratch for batches of up to
   * max_batch samples on the row m->cp; sets n_params, params, n_tensors,
   * classes, dlogits, dev_grads, impl. 0, or -1 (out of memory). */
  int (*create)(model *m, int max_batch);
  void (*destroy)(model *m);
  model_tensor (*tensor_at)(const model *m, int t);
  /* Initial values drawn from r (same r, same values on any host). */
  void (*init)(model *m, rng *r);
  /* Forward of B <= max_batch samples; x stays unchanged until backward.
   * train: 1 uses and updates batch statistics, 0 the running ones.
   * Reads the weights and statistics from row_params. Returns the logits
   * (B x classes, inside the model, row memory). */
  const float *(*forward)(model *m, const float *x, int B, int train);
  /* Backward of the last forward (train = 1) from m->row_dlogits. */
  int (*backward)(model *m, int B, float *grads, model_grad_ready ready,
                  void *ctx);
  /* The weight file's header: its 8 magic bytes and shape words. Returns
   * the number of words (<= MODEL_MAX_WORDS). */
  int (*header)(const model *m, char magic[8], uint32_t *words);
  /* One line (no newline) describing the shape, e.g. "mlp 784-256-128-10". */
  void (*describe)(const model *m, char *out, size_t cap);
} model_ops;

struct model {
  const model_ops *ops;
  size_t n_params; /* floats in params: trainable tensors, then buffers */
  float *params;   /* owned (through impl) */
  int n_tensors;   /* <= MODEL_MAX_TENSORS */
  int classes;
  int max_batch;
  float *dlogits;     /* max_batch x classes, written by model_loss */
  lowp_kind lowp;     /* compute precision; LOWP_FP32 after create */
  float *compute;     /* the weights the passes read: params rounded to lowp
                         by model_forward (owned; NULL for LOWP_FP32) */
  compute *cp;        /* the row the passes run on (compute.h; not owned) */
  float *dev_grads;   /* rows whose memory is not the host's: the gradient
                         buffer (n_params floats, row memory) backward
                         writes and hands to `ready` instead of the caller's
                         host buffer; NULL on the CPU row */
  const float *dev_x; /* rows whose memory is not the host's: when not
                         NULL, the next model_forward reads its input
                         from here (row memory, e.g. compute_ops.stage_take)
                         instead of copying x over; model_forward clears it */
  float *row_params;  /* the params in the row's memory: params itself on
                         the CPU row; on a device row the copy the passes
                         read and the optimiser updates (model_to_row /
                         model_to_host move them; row memory, owned) */
  float *row_dlogits; /* where backward reads dLoss/dlogits (max_batch x
                         classes, row memory): dlogits on the CPU row */
  float *host_logits; /* device rows: model_loss's host copy of the
                         logits (max_batch x classes); NULL on the CPU */
  void *impl;         /* the kind's own state */
};

/** The ops of kind `name`, or NULL for an unknown name. */
const model_ops *model_find(const char *name);

/** The names model_find accepts, e.g. "mlp|cnn" (static storage). */
const char *model_names(void);

/** Creates a model of the given kind (see model_ops.create) on the CPU
 *  row; on failure *m is zeroed. Returns 0 or -1 (out of memory or
 *  max_batch < 1). */
int model_create(model *m, const model_ops *ops, int max_batch);

/** model_create on compute row cp (opened, not owned, outliving the
 *  model). -1 also when ops->any_row is 0 and cp is not the CPU row, or
 *  when cp fails an allocation (cp->err then says why). */
int model_create_on(model *m, const model_ops *ops, int max_batch, compute *cp);
void model_free(model *m);

/**
 * Sets the compute precision (lowp.h): with BF16 or FP16 the passes read
 * a copy of the float32 master weights rounded to that type (refreshed by
 * every model_forward), round every layer's output and every backward
 * delta to it at layer boundaries, and accumulate their GEMMs in float32
 * (cblas_sgemm on the rounded values); batch norm's statistics, softmax
 * and the loss stay float32 (as PyTorch's autocast keeps them). The
 * caller rounds the input batch and the (scaled) dlogits. Tells the row
 * (compute_ops.set_lowp: the CUDA row's GEMMs then take 16-bit inputs). 0, or
 * -1 (out of memory; the precision is then unchanged).
 */
int model_set_precision(model *m, lowp_kind k);

/** Forward (model_ops.forward) after refreshing m->compute (CPU row; a
 *  device row rounds its own copy). The logits are row memory. */
const float *model_forward(model *m, const float *x, int B, int train);

/** Device rows: queues the host params (all n_params floats) into
 *  row_params, e.g. after the initial broadcast or a resume. Nothing on
 *  the CPU row. Failures land in m->cp (compute_failed). */
void model_to_row(model *m);

/** Device rows: copies row_params back into the host params (for a
 *  checkpoint, a weight file, the end). 0, or -1 (m->cp->err says why);
 *  0 at once on the CPU row. */
int model_to_host(model *m);

/** Describes tensor t, 0 <= t < m->n_tensors. */
model_tensor model_tensor_at(const model *m, int t);

/**
 * After model_forward: softmax cross-entropy of the logits (row memory)
 * against labels y[0..B) (each < classes, host). Returns the MEAN loss
 * over the B samples (in nats), writes dLoss/dlogits = (softmax -
 * onehot) / B into m->dlogits (and, on a device row, row_dlogits),
 * and adds to *correct (if not NULL) the samples whose largest logit
 * (first one on ties) is the label.
 */
double model_loss(model *m, const float *logits, const uint8_t *y, int B,
                  long *correct);

/** Forward in evaluation mode; adds to *correct the samples whose argmax
 *  is y[i]. */
void model_count_correct(model *m, const float *x, const uint8_t *y, int B,
                         long *correct);

/**
 * Writes m to path (created or truncated): the 8 magic bytes, the header
 * words (uint32 little-endian), then every float of m->params (binary32,
 * little-endian), buffers included. For the MLP this is the HKMLP1 format
 * of save.h byte for byte. 0, or -1 with one line in err naming the path.
 */
int model_save(const model *m, const char *path, char *err, size_t err_cap);

#endif
