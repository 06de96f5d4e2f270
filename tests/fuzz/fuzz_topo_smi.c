/*
 * fuzz_topo_smi - libFuzzer target for hk_topo_parse_smi, the reader of
 * `nvidia-smi topo -m` text (HK_TOPO_FILE, hktopo). Any input must either
 * parse into a consistent layout, or be rejected with HK_ERR_CONFIG and a
 * message naming its line; never crash, leak or read out of bounds (built
 * with ASan+UBSan). A layout that parses must give a ring over its GPUs
 * (up to 8: the search is exact and quick there) and a cost prediction.
 *
 *   cmake -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang ... && ./fuzz_topo_smi dir/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "topology/cost.h"
#include "topology/parse.h"
#include "topology/ring.h"

static void check(const hk_topo *t) {
  if (t->n_gpus < 1 || t->n_gpus > HK_TOPO_MAX_GPUS ||
      t->n_nics > HK_TOPO_MAX_NICS)
    abort();
  for (int a = 0; a < t->n_gpus; a++)
    for (int b = 0; b < t->n_gpus; b++) {
      const hk_topo_pathinfo *p = &t->gpu_path[a][b], *q = &t->gpu_path[b][a];
      if (p->cls != q->cls || (a == b) != (p->cls == HK_PATH_LOC))
        abort(); /* the parser checked symmetry and the diagonal */
      if (a != b && !(p->gbps > 0))
        abort(); /* every pair of one host has a route */
    }
  if (t->n_gpus > 8)
    return;
  int gpus[8];
  for (int i = 0; i < t->n_gpus; i++)
    gpus[i] = i;
  hk_topo_rings rs;
  if (hk_topo_find_rings(t, gpus, t->n_gpus, &rs) != HK_OK || !rs.exact ||
      rs.ring[0].n != t->n_gpus)
    abort();
  int seen[8] = {0};
  for (int i = 0; i < t->n_gpus; i++)
    if (seen[rs.ring[0].gpu[i]]++)
      abort();
  hk_host_model h;
  hk_cost c;
  if (hk_host_model_from_topo(t, t->n_gpus, &h) != HK_OK ||
      hk_cost_nccl(&h, 1 << 20, 4, 25.0, &c) != HK_OK || !(c.time_us > 0))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hk_topo *t = NULL;
  hk_status st = hk_topo_parse_smi((const char *)data, size, &t);
  if (st == HK_OK) {
    check(t);
    hk_topo_free(t);
  } else if (t != NULL) {
    abort();
  } else if (st == HK_ERR_CONFIG) {
    if (strncmp(hk_last_error(), "line ", 5) != 0)
      abort(); /* every complaint names its line */
  } else if (st != HK_ERR_NOMEM) {
    abort();
  }
  return 0;
}
