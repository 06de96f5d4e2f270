/*
 * bind_masks.h - hkrun --bind-to for the workers one hkrun starts on its
 * host (its own job's, or an agent's with --rdzv-endpoint): their CPU
 * masks from bind.h's policy, saying what it chose (-v) and when ranks
 * must share cores.
 */
#ifndef HK_LAUNCHER_BIND_MASKS_H
#define HK_LAUNCHER_BIND_MASKS_H

#include <sched.h>

#include "launcher/args.h"

/**
 * The CPU mask of each of this host's args->np workers (index = local
 * rank: bind.h's rank), malloc'ed (the caller frees), or NULL for
 * --bind-to none. rank_base is added to the local rank where a rank is
 * named (-v: "--bind-to core: rank 2 on CPUs 0"). Says on stderr when
 * ranks share cores. NULL with *failed = 1 after saying why when the
 * CPUs cannot be read or memory runs out; *failed = 0 otherwise. Not
 * thread-safe (hkrun's one thread).
 */
cpu_set_t *hkrun_bind_masks(const hkrun_args *args, int rank_base, int *failed);

#endif
