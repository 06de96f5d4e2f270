/*
 * gpus.h - the GPUs hkplan knows: peak arithmetic rates, memory and
 * memory bandwidth, from the vendors' published specifications (gpus.c
 * cites each). hkplan scales a compute time measured on one GPU type to
 * another by the ratio of their peak rates at the precision in use (a
 * compute-bound assumption; docs/plan.md says its limits).
 * Thread-safety: the table is constant; every function is pure.
 */
#ifndef HK_PLANNER_GPUS_H
#define HK_PLANNER_GPUS_H

typedef struct hk_gpu_spec {
  const char *name;   /* "A100-SXM4-40GB" (matched case-insensitively) */
  int sm;             /* compute capability x10 that names it in a
                         topology file when --gpu is not given; 0: never
                         inferred (another entry owns the capability) */
  double fp32_tflops; /* dense FP32 (no tensor cores), TFLOP/s */
  double tf32_tflops; /* dense TF32 tensor-core rate, TFLOP/s; 0: none
                         (before Ampere) */
  double fp16_tflops; /* dense FP16 tensor-core rate with FP32
                         accumulation (what mixed-precision training
                         uses), TFLOP/s */
  double mem_gib;     /* device memory, GiB */
  double mem_gbps;    /* device memory bandwidth, GB/s (1e9 B/s) */
} hk_gpu_spec;

/** The entry named `name` (case-insensitive), or NULL. */
const hk_gpu_spec *hk_gpu_find(const char *name);

/** The entry inferred from compute capability sm (x10), or NULL. */
const hk_gpu_spec *hk_gpu_by_sm(int sm);

/** The peak rate of g at the precision, TFLOP/s: amp 1, the FP16 tensor
 *  rate; amp 0 (FP32 training), the TF32 tensor rate where the GPU has one
 *  (PyTorch runs FP32 convolutions in TF32 by default there:
 *  torch.backends.cudnn.allow_tf32), else the FP32 rate. */
double hk_gpu_tflops(const hk_gpu_spec *g, int amp);

/** Writes the known names, ", "-separated, into buf (cap bytes, cut to
 *  fit): for error messages. */
void hk_gpu_names(char *buf, unsigned long cap);

#endif
