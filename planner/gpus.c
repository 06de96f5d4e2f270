/*
 * gpus.c - the GPU table (gpus.h). Every figure is the vendor's published
 * peak, dense (no sparsity), for the board named:
 *  - P100: NVIDIA Tesla P100 datasheet (PCIe 16 GB: 9.3 TFLOPS FP32, 18.7
 *    FP16, 732 GB/s; SXM2: 10.6, 21.2, 732 GB/s). Pascal has no tensor
 *    cores: its FP16 rate is the packed half2 rate.
 *  - V100 SXM2 32 GB: NVIDIA Tesla V100 datasheet (15.7 TFLOPS FP32, 125
 *    tensor, 900 GB/s).
 *  - T4: NVIDIA T4 datasheet (8.1 TFLOPS FP32, 65 FP16 mixed precision,
 *    16 GB, 320 GB/s).
 *  - A100 SXM4 40/80 GB: NVIDIA A100 Tensor Core GPU datasheet (19.5
 *    TFLOPS FP32, 156 TF32 tensor, 312 FP16 tensor; 1555 and 2039 GB/s).
 *  - RTX 3090: NVIDIA Ampere GA102 GPU architecture whitepaper, table of
 *    GeForce RTX 3090 (35.6 TFLOPS FP32, 35.6 TF32 tensor, 71 FP16 tensor
 *    with FP32 accumulate, 24 GB, 936 GB/s).
 *  - RTX 4090: NVIDIA Ada Lovelace GPU architecture whitepaper, table of
 *    GeForce RTX 4090 (82.6 TFLOPS FP32, 82.6 TF32 tensor, 165.2 FP16
 *    tensor with FP32 accumulate, 24 GB, 1008 GB/s).
 *  - H100 SXM5 80 GB: NVIDIA H100 Tensor Core GPU datasheet (67 TFLOPS
 *    FP32, 494.7 TF32 and 989.4 FP16 tensor dense, 3350 GB/s).
 * Compute capabilities: CUDA C Programming Guide, "Compute Capabilities".
 * Where one capability names several boards (8.0: A100 40 and 80 GB) the
 * smaller is inferred; --gpu NAME chooses another.
 */
#include "planner/gpus.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const hk_gpu_spec table[] = {
    {"P100-PCIE-16GB", 0, 9.3, 0, 18.7, 16, 732},
    {"P100-SXM2-16GB", 60, 10.6, 0, 21.2, 16, 732},
    {"V100-SXM2-32GB", 70, 15.7, 0, 125, 32, 900},
    {"T4", 75, 8.1, 0, 65, 16, 320},
    {"A100-SXM4-40GB", 80, 19.5, 156, 312, 40, 1555},
    {"A100-SXM4-80GB", 0, 19.5, 156, 312, 80, 2039},
    {"RTX3090", 86, 35.6, 35.6, 71, 24, 936},
    {"RTX4090", 89, 82.6, 82.6, 165.2, 24, 1008},
    {"H100-SXM5-80GB", 90, 67, 494.7, 989.4, 80, 3350},
};
#define NGPUS (sizeof table / sizeof table[0])

const hk_gpu_spec *hk_gpu_find(const char *name) {
  for (size_t i = 0; name && i < NGPUS; i++)
    if (!strcasecmp(table[i].name, name))
      return &table[i];
  return NULL;
}

const hk_gpu_spec *hk_gpu_by_sm(int sm) {
  for (size_t i = 0; sm > 0 && i < NGPUS; i++)
    if (table[i].sm == sm)
      return &table[i];
  return NULL;
}

double hk_gpu_tflops(const hk_gpu_spec *g, int amp) {
  if (amp)
    return g->fp16_tflops;
  return g->tf32_tflops > 0 ? g->tf32_tflops : g->fp32_tflops;
}

void hk_gpu_names(char *buf, unsigned long cap) {
  size_t at = 0;
  if (cap)
    buf[0] = '\0';
  for (size_t i = 0; i < NGPUS && at + 1 < cap; i++) {
    int w = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", table[i].name);
    if (w < 0)
      break;
    at += (size_t)w;
  }
}
