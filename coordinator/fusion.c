#include "coordinator/fusion.h"

#include <string.h>

#include "coordinator/wire.h"

size_t hk_fusion_direct_bytes(size_t configured, int size) {
  if (configured)
    return configured;
  return size > 1 ? (size_t)(size - 1) * (256u << 10) : 0;
}

int hk_fusion_fusable(uint8_t coll, int ok, int device, size_t bytes,
                      size_t direct) {
  const int rows = coll == HK_COLL_ALLGATHER || coll == HK_COLL_REDUCESCATTER;
  if (!ok)
    return 0;
  if (coll == HK_COLL_ALLREDUCE)
    return device || bytes <= direct;
  return rows && !device && bytes <= direct;
}

uint32_t hk_fusion_plan(const hk_fusion_item *items, uint32_t n,
                        size_t threshold_bytes, uint8_t *taken, uint32_t *order,
                        uint32_t *starts) {
  uint32_t placed = 0, groups = 0;
  memset(taken, 0, n);
  for (uint32_t i = 0; i < n; i++) {
    if (taken[i])
      continue;
    starts[groups++] = placed;
    order[placed++] = i;
    taken[i] = 1;
    const hk_fusion_item *a = &items[i];
    if (!a->fusable || threshold_bytes == 0 || a->bytes > threshold_bytes)
      continue;
    size_t bytes = a->bytes;
    for (uint32_t j = i + 1; j < n; j++) {
      const hk_fusion_item *b = &items[j];
      if (taken[j] || !b->fusable || b->coll != a->coll || b->set != a->set ||
          b->dtype != a->dtype || b->op != a->op || b->mem != a->mem ||
          b->divisor != a->divisor || b->impl != a->impl ||
          bytes + b->bytes > threshold_bytes)
        continue;
      order[placed++] = j;
      taken[j] = 1;
      bytes += b->bytes;
    }
  }
  starts[groups] = placed;
  return groups;
}
void hk_fusion_layout(const size_t *counts, uint32_t ntensors, int nranks,
                      size_t *seg, size_t *where) {
  size_t at = 0;
  for (int j = 0; j < nranks; j++) {
    seg[j] = at;
    for (uint32_t t = 0; t < ntensors; t++) {
      size_t base = counts[t] / (size_t)nranks,
             rem = counts[t] % (size_t)nranks;
      size_t len = base + ((size_t)j < rem ? 1 : 0);
      where[(size_t)t * (size_t)nranks + (size_t)j] = at;
      at += len;
    }
  }
  seg[nranks] = at;
}
