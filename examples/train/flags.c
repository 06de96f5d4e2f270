/*
 * flags.c - the trainer's command-line parser (see flags.h).
 */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "prefetch.h"

static const char usage[] =
    "usage: train [options]   (data-parallel: hkrun -np N train ...)\n"
    "  --epochs N          passes over the training set (default 5)\n"
    "  --batch-size N      samples per step on EACH worker (Horovod's "
    "meaning;\n"
    "                      default 32)\n"
    "  --global-batch-size N  samples per step over all workers, split "
    "evenly;\n"
    "                      must be divisible by their number\n"
    "  --lr X              peak learning rate per worker, multiplied by the\n"
    "                      number of workers (default adamw 5e-4, cnn "
    "1.25e-3;\n"
    "                      sgd 0.0125; lamb 2.5e-3)\n"
    "  --no-lr-scaling     use --lr as given, whatever the number of "
    "workers\n"
    "  --optimizer NAME    adamw (default), sgd (momentum 0.9) or lamb\n"
    "                      (layer-wise trust ratio, You et al. 2020)\n"
    "  --weight-decay X    adamw, lamb: decoupled; sgd: L2 (default 0.01,\n"
    "                      0 sgd); never applied to biases\n"
    "  --warmup-steps N    linear warm-up steps, then the schedule\n"
    "                      (default 5% of all steps)\n"
    "  --schedule NAME     cosine (decay to 0, default) or plateau (the\n"
    "                      rate times --plateau-factor X (default 0.5) when\n"
    "                      the epoch's loss has not improved for more than\n"
    "                      --plateau-patience N epochs (default 1))\n"
    "  --nesterov          Nesterov momentum (sgd)\n"
    "  --seed N            initialisation and shuffling seed (default 42)\n"
    "  --data DIR          Fashion-MNIST directory (default " DATA_DEFAULT_DIR
    ")\n"
    "  --prefetch N        batches the input thread prepares ahead, 0 = "
    "none\n"
    "                      (default 2)\n"
    "  --augment           random 2-pixel shift crop and horizontal flip\n"
    "  --batches-per-commit N  elastic (hkrun --min-np): commit (a local\n"
    "                      copy) every N steps and at each epoch; a lost\n"
    "                      worker costs the steps since, not the run\n"
    "  --checkpoint-dir D  rank 0 writes D/last.hkckpt after every epoch\n"
    "  --resume            continue from D/last.hkckpt (same settings)\n"
    "  --metrics FILE      rank 0 writes one CSV row per epoch\n"
    "  --save FILE         rank 0 writes the final weights (HKMLP1 for the\n"
    "                      mlp, HKCNN1 for the cnn)\n"
    "  --save-all PREFIX   every rank writes its weights to PREFIX.<rank>\n"
    "  --limit-train N     use only the first N training samples\n"
    "  --limit-test N      use only the first N test samples\n"
    "  --progress          progress bar on stderr (on a terminal only)\n"
    "  --model NAME        mlp (784-256-128-10, default) or cnn (two conv +\n"
    "                      batch-norm + ReLU + maxpool blocks, then linear)\n"
    "  --precision P       fp32 (default), bf16 or fp16: compute in that\n"
    "                      type with float32 master weights; gradients\n"
    "                      travel in it on cpu, as float32 on cuda\n"
    "                      (HK_COMPRESSION casts them); fp16 with dynamic\n"
    "                      loss scaling\n"
    "  --device D          auto (default: cuda where libhk_train_cuda.so\n"
    "                      loads and sees a GPU, else cpu), cuda or cpu:\n"
    "                      where the model's passes run (cuda: cnn only)\n"
    "  --gpu N             the GPU of a cuda row, an index among those this\n"
    "                      process sees (default: the local rank); give\n"
    "                      the same as HK_GPU when you set that\n"
    "  -h, --help          this text\n";

const char *flags_usage(void) { return usage; }

static int parse_long(const char *opt, const char *s, long lo, long hi,
                      long *out, char *err, size_t cap) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    snprintf(err, cap, "%s: '%s' is not an integer in %ld..%ld", opt, s, lo,
             hi);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_float(const char *opt, const char *s, double lo, double hi,
                       float *out, char *err, size_t cap) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
    snprintf(err, cap, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    return -1;
  }
  *out = (float)v;
  return 0;
}

int flags_parse(int argc, char **argv, train_flags *out, char *err,
                size_t err_cap) {
  memset(out, 0, sizeof *out);
  out->epochs = 5;
  out->batch_size = 32;
  out->lr_scaling = 1;
  out->prefetch = TRAIN_DEFAULT_PREFETCH;
  int batch_given = 0;
  out->lr = -1.0f;
  out->optimizer = OPTIM_ADAMW;
  out->weight_decay = -1.0f;
  out->warmup_steps = -1;
  out->seed = 42;
  out->data_dir = DATA_DEFAULT_DIR;
  out->model = "mlp";
  out->device = "auto";
  out->gpu = -1;
  out->plateau_factor = 0.5f;
  out->plateau_patience = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help"))
      return 1;
    /* Switches without a value. */
    static const struct {
      const char *name;
      size_t field;
      int value;
    } switches[] = {
        {"--nesterov", offsetof(train_flags, nesterov), 1},
        {"--progress", offsetof(train_flags, progress), 1},
        {"--augment", offsetof(train_flags, augment), 1},
        {"--resume", offsetof(train_flags, resume), 1},
        {"--no-lr-scaling", offsetof(train_flags, lr_scaling), 0},
    };
    int is_switch = 0;
    for (size_t k = 0; k < sizeof switches / sizeof *switches; k++)
      if (!strcmp(a, switches[k].name)) {
        *(int *)((char *)out + switches[k].field) = switches[k].value;
        is_switch = 1;
      }
    if (is_switch)
      continue;
    /* Everything else takes a value: --opt VALUE or --opt=VALUE. */
    char opt[32];
    const char *val = NULL, *eq = strchr(a, '=');
    size_t optlen = eq ? (size_t)(eq - a) : strlen(a);
    if (strncmp(a, "--", 2) != 0 || optlen >= sizeof opt) {
      snprintf(err, err_cap, "unknown argument '%s'", a);
      return -1;
    }
    memcpy(opt, a, optlen);
    opt[optlen] = '\0';
    static const char *const valued[] = {"--epochs",
                                         "--batch-size",
                                         "--global-batch-size",
                                         "--lr",
                                         "--optimizer",
                                         "--weight-decay",
                                         "--warmup-steps",
                                         "--seed",
                                         "--data",
                                         "--save",
                                         "--save-all",
                                         "--limit-train",
                                         "--limit-test",
                                         "--prefetch",
                                         "--checkpoint-dir",
                                         "--metrics",
                                         "--model",
                                         "--precision",
                                         "--schedule",
                                         "--plateau-factor",
                                         "--plateau-patience",
                                         "--device",
                                         "--gpu",
                                         "--batches-per-commit"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
      known |= !strcmp(opt, valued[k]);
    if (!known) {
      snprintf(err, err_cap, "unknown option '%s'", opt);
      return -1;
    }
    if (eq)
      val = eq + 1;
    else if (i + 1 < argc)
      val = argv[++i];
    else {
      snprintf(err, err_cap, "%s: missing value", opt);
      return -1;
    }
    long v = 0;
    int rc = 0;
    if (!strcmp(opt, "--epochs")) {
      rc = parse_long(opt, val, 1, 100000, &v, err, err_cap);
      out->epochs = (int)v;
    } else if (!strcmp(opt, "--batch-size")) {
      rc = parse_long(opt, val, 1, 1 << 20, &v, err, err_cap);
      out->batch_size = (int)v;
      batch_given = 1;
    } else if (!strcmp(opt, "--global-batch-size")) {
      rc = parse_long(opt, val, 1, 1 << 20, &v, err, err_cap);
      out->global_batch_size = (int)v;
    } else if (!strcmp(opt, "--prefetch")) {
      rc = parse_long(opt, val, 0, PREFETCH_MAX_DEPTH, &v, err, err_cap);
      out->prefetch = (int)v;
    } else if (!strcmp(opt, "--lr")) {
      rc = parse_float(opt, val, 1e-12, 100.0, &out->lr, err, err_cap);
    } else if (!strcmp(opt, "--weight-decay")) {
      rc = parse_float(opt, val, 0.0, 10.0, &out->weight_decay, err, err_cap);
    } else if (!strcmp(opt, "--warmup-steps")) {
      rc = parse_long(opt, val, 0, 1000000000L, &out->warmup_steps, err,
                      err_cap);
    } else if (!strcmp(opt, "--seed")) {
      rc = parse_long(opt, val, 0, 0x7fffffffL, &v, err, err_cap);
      out->seed = (uint64_t)v;
    } else if (!strcmp(opt, "--limit-train") || !strcmp(opt, "--limit-test")) {
      rc = parse_long(opt, val, 1, 1000000000L, &v, err, err_cap);
      *(strcmp(opt, "--limit-train") ? &out->limit_test : &out->limit_train) =
          (size_t)v;
    } else if (!strcmp(opt, "--optimizer")) {
      if (!strcmp(val, "sgd"))
        out->optimizer = OPTIM_SGD;
      else if (!strcmp(val, "adamw"))
        out->optimizer = OPTIM_ADAMW;
      else if (!strcmp(val, "lamb"))
        out->optimizer = OPTIM_LAMB;
      else {
        snprintf(err, err_cap, "--optimizer: '%s' is not sgd or adamw or lamb",
                 val);
        rc = -1;
      }
    } else if (!strcmp(opt, "--schedule")) {
      out->plateau = !strcmp(val, "plateau");
      if (!out->plateau && strcmp(val, "cosine")) {
        snprintf(err, err_cap, "--schedule: '%s' is not cosine or plateau",
                 val);
        rc = -1;
      }
    } else if (!strcmp(opt, "--plateau-factor")) {
      rc =
          parse_float(opt, val, 0.01, 0.99, &out->plateau_factor, err, err_cap);
    } else if (!strcmp(opt, "--plateau-patience")) {
      rc = parse_long(opt, val, 0, 1000, &v, err, err_cap);
      out->plateau_patience = (int)v;
    } else if (!strcmp(opt, "--precision")) {
      if (lowp_parse(val, &out->precision) != 0) {
        snprintf(err, err_cap, "--precision: '%s' is not fp32, bf16 or fp16",
                 val);
        rc = -1;
      }
    } else if (!strcmp(opt, "--batches-per-commit")) {
      rc = parse_long(opt, val, 1, 1000000000L, &out->batches_per_commit, err,
                      err_cap);
    } else if (!strcmp(opt, "--gpu")) {
      rc = parse_long(opt, val, 0, 1023, &v, err, err_cap);
      out->gpu = (int)v;
    } else if (!strcmp(opt, "--device")) {
      out->device = val;
      if (strcmp(val, "cpu") && strcmp(val, "cuda") && strcmp(val, "auto")) {
        snprintf(err, err_cap, "--device: '%s' is not cpu, cuda or auto", val);
        rc = -1;
      }
    } else if (!strcmp(opt, "--model")) {
      out->model = val;
      if (!model_find(val)) {
        snprintf(err, err_cap, "--model: '%s' is not one of %s", val,
                 model_names());
        rc = -1;
      }
    } else if (!*val) {
      snprintf(err, err_cap, "%s: empty value", opt);
      rc = -1;
    } else if (!strcmp(opt, "--data")) {
      out->data_dir = val;
    } else if (!strcmp(opt, "--save")) {
      out->save = val;
    } else if (!strcmp(opt, "--checkpoint-dir")) {
      out->checkpoint_dir = val;
    } else if (!strcmp(opt, "--metrics")) {
      out->metrics = val;
    } else {
      out->save_all = val;
    }
    if (rc)
      return -1;
  }
  if (batch_given && out->global_batch_size) {
    snprintf(err, err_cap,
             "--batch-size and --global-batch-size: give one of them");
    return -1;
  }
  if (out->global_batch_size)
    out->batch_size = 0;
  if (out->resume && !out->checkpoint_dir) {
    snprintf(err, err_cap, "--resume: needs --checkpoint-dir");
    return -1;
  }
  if (out->nesterov && out->optimizer != OPTIM_SGD) {
    snprintf(err, err_cap, "--nesterov: only with --optimizer sgd");
    return -1;
  }
  /* Default peak rates per model and optimiser (flags.h). */
  static const struct {
    const char *model;
    float lr[3]; /* by optim_kind */
  } defaults[] = {
      {"mlp",
       {[OPTIM_SGD] = TRAIN_DEFAULT_LR_SGD,
        [OPTIM_ADAMW] = TRAIN_DEFAULT_LR_ADAMW,
        [OPTIM_LAMB] = TRAIN_DEFAULT_LR_LAMB}},
      {"cnn",
       {[OPTIM_SGD] = TRAIN_DEFAULT_LR_SGD,
        [OPTIM_ADAMW] = TRAIN_DEFAULT_LR_ADAMW_CNN,
        [OPTIM_LAMB] = TRAIN_DEFAULT_LR_LAMB}},
  };
  for (size_t k = 0; out->lr < 0 && k < sizeof defaults / sizeof *defaults; k++)
    if (!strcmp(out->model, defaults[k].model))
      out->lr = defaults[k].lr[out->optimizer];
  if (out->weight_decay < 0)
    out->weight_decay = optim_defaults(out->optimizer).weight_decay;
  return 0;
}
