/*
 * cnn.h - a small convolutional classifier, a row of the model table
 * (model.h, `--model cnn`):
 *
 *   x (N x 1 x H x W)
 *   -> conv3x3(1 -> c1, padding 1, no bias) -> batch norm -> ReLU
 *   -> maxpool 2x2 stride 2
 *   -> conv3x3(c1 -> c2, padding 1, no bias) -> batch norm -> ReLU
 *   -> maxpool 2x2 stride 2
 *   -> flatten (PyTorch's order: c, y, x) -> linear(c2*(H/4)*(W/4) -> classes)
 *
 * The trainer's shape is H = W = 28, c1 = 16, c2 = 32, classes 10
 * (CNN_DEFAULT_SHAPE: 20,538 trainable floats, 96 of running statistics).
 * Convolutions are im2col + cblas_sgemm (Chellapilla et al., "High Performance
 * Convolutional Neural Networks for Document Processing", 2006); inside the
 * model activations are stored channel-major (C x N x H x W) so that one GEMM
 * covers the whole batch and batch norm's per-channel sums run over contiguous
 * memory. The convolutions have no bias: the batch norm's shift that
 * follows subsumes it (as in ResNet).
 *
 * Batch norm (Ioffe & Szegedy, ICML 2015), PyTorch's BatchNorm2d
 * defaults: eps 1e-5, momentum 0.1, biased variance for normalising,
 * unbiased variance for the running estimate. In training the statistics
 * are this forward's batch (on a data-parallel rank: its LOCAL shard, as
 * Horovod does without SyncBatchNorm); in evaluation the running ones.
 *
 * Tensors, in buffer order: conv1.weight (c1 x 1 x 3 x 3), bn1.weight,
 * bn1.bias (c1), conv2.weight (c2 x c1 x 3 x 3), bn2.weight, bn2.bias
 * (c2), fc.weight (classes x features, out x in), fc.bias (classes); then
 * the buffers bn1.running_mean, bn1.running_var, bn2.running_mean,
 * bn2.running_var. Gradients are handed over fc.bias, fc.weight, bn2.bias,
 * bn2.weight, conv2.weight, bn1.bias, bn1.weight, conv1.weight.
 *
 * Weight file (model_save): magic "HKCNN1\0\0", words H, W, c1, c2,
 * classes, then the buffer.
 */
#ifndef HK_TRAIN_CNN_H
#define HK_TRAIN_CNN_H

#include "model.h"

typedef struct cnn_shape {
  int h, w;    /* input height and width, each a multiple of 4, 4..256 */
  int c1, c2;  /* channels of the two blocks, 1..1024 */
  int classes; /* 2..1024 */
} cnn_shape;

#define CNN_DEFAULT_SHAPE ((cnn_shape){28, 28, 16, 32, 10})

/** The table row: create builds CNN_DEFAULT_SHAPE. */
extern const model_ops model_cnn_ops;

/**
 * Creates a CNN of shape s for batches of up to max_batch samples (what
 * model_create does with the default shape; tests use small ones).
 * Parameters zeroed (use ops->init). Returns 0, or -1 (bad shape, named
 * above, or out of memory; *m is then zeroed).
 */
int cnn_create(model *m, const cnn_shape *s, int max_batch);

/**
 * cnn_create on compute row cp (compute.h; opened, not owned, outliving
 * the model). On a row whose memory is not the host's, every activation,
 * gradient and scratch buffer lives in the row's memory, and so do the
 * float32 master weights and running statistics (m->row_params: the
 * passes read and update them there; model_to_row / model_to_host move
 * them from and to m->params); with bf16/fp16 each forward rounds a copy
 * of the weights on the row. The logits stay on the row (model_loss
 * copies them back), backward reads m->row_dlogits, writes the gradients
 * into m->dev_grads and hands those row pointers to `ready`. -1 also
 * when cp fails an allocation (cp->err says why).
 */
int cnn_create_on(model *m, const cnn_shape *s, int max_batch, compute *cp);

#endif
