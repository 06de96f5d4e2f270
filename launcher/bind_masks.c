/*
 * bind_masks.c - --bind-to's masks for a host's workers (see
 * bind_masks.h).
 */
#include "launcher/bind_masks.h"

#include <stdlib.h>

#include "common/status.h"
#include "launcher/bind.h"
#include "launcher/output.h"

cpu_set_t *hkrun_bind_masks(const hkrun_args *args, int rank_base,
                            int *failed) {
  *failed = 0;
  if (args->bind == HKRUN_BIND_NONE)
    return NULL;
  hk_cpu *cpus;
  int n;
  cpu_set_t *masks = NULL;
  int *set = NULL;
  if (hk_bind_read_cpus(&cpus, &n) != HK_OK) {
    hk_out_say("--bind-to %s: %s", args->bind_to, hk_last_error());
    *failed = 1;
    return NULL;
  }
  masks = calloc((size_t)args->np, sizeof *masks);
  set = calloc((size_t)(n > 0 ? n : 1), sizeof *set);
  if (!masks || !set) {
    hk_out_say("--bind-to: out of memory");
    free(masks);
    free(set);
    free(cpus);
    *failed = 1;
    return NULL;
  }
  int any_shared = 0;
  for (int r = 0; r < args->np; r++) {
    int shared = 0;
    int k = hk_bind_cpus(cpus, n, args->bind, r, set, n, &shared);
    any_shared |= shared;
    CPU_ZERO(&masks[r]);
    for (int i = 0; i < k; i++)
      CPU_SET(set[i], &masks[r]);
    if (args->verbose) {
      char list[256];
      hk_bind_format(set, k, list, sizeof list);
      hk_out_say("--bind-to %s: rank %d on CPUs %s", args->bind_to,
                 rank_base + r, list);
    }
  }
  if (any_shared) {
    int objs = hk_bind_count(cpus, n, args->bind);
    hk_out_say(
        "--bind-to %s: %d workers but %d %s here: ranks share them (rank r "
        "gets number r mod %d)",
        args->bind_to, args->np, objs,
        args->bind == HKRUN_BIND_HWTHREAD ? "CPUs" : "cores", objs);
  }
  free(set);
  free(cpus);
  return masks;
}
