#include "coordinator/cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/strmap.h"

typedef struct record {
  hk_wire_request req;
  int live;
} record;

struct hk_cache {
  uint32_t capacity, max_bits, nbits, nlive;
  record *recs; /* nbits used, grown by doubling */
  uint32_t cap_recs;
  hk_strmap *names; /* name -> live bit + 1 (as a pointer-sized integer) */
};

hk_status hk_cache_create(uint32_t capacity, hk_cache **out) {
  hk_cache *c = calloc(1, sizeof *c);
  if (!c)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the response cache");
  c->capacity = capacity;
  uint64_t max_bits = 4ull * capacity;
  c->max_bits = max_bits > HK_WIRE_MAX_CACHE_BITS ? HK_WIRE_MAX_CACHE_BITS
                                                  : (uint32_t)max_bits;
  hk_status st = hk_strmap_create(&c->names);
  if (st != HK_OK) {
    free(c);
    return st;
  }
  *out = c;
  return HK_OK;
}

void hk_cache_destroy(hk_cache *c) {
  if (!c)
    return;
  hk_strmap_destroy(c->names);
  free(c->recs);
  free(c);
}

static int same_params(const hk_wire_request *a, const hk_wire_request *b) {
  return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
         a->mem == b->mem && a->root == b->root && a->count == b->count &&
         memcmp(&a->prescale, &b->prescale, sizeof a->prescale) == 0 &&
         memcmp(&a->postscale, &b->postscale, sizeof a->postscale) == 0;
}

uint32_t hk_cache_bit_of(const hk_cache *c, const char *name) {
  uintptr_t v = (uintptr_t)hk_strmap_get(c->names, name);
  return v ? (uint32_t)(v - 1) : HK_WIRE_NO_BIT;
}

uint32_t hk_cache_lookup(const hk_cache *c, const hk_wire_request *req) {
  uint32_t bit = hk_cache_bit_of(c, req->name);
  if (bit == HK_WIRE_NO_BIT || !same_params(&c->recs[bit].req, req))
    return HK_WIRE_NO_BIT;
  return bit;
}

const hk_wire_request *hk_cache_get(const hk_cache *c, uint32_t bit) {
  return bit < c->nbits ? &c->recs[bit].req : NULL;
}

int hk_cache_is_live(const hk_cache *c, uint32_t bit) {
  return bit < c->nbits && c->recs[bit].live;
}

uint32_t hk_cache_insert(hk_cache *c, const hk_wire_request *req) {
  if (c->nlive >= c->capacity || c->nbits >= c->max_bits ||
      hk_cache_bit_of(c, req->name) != HK_WIRE_NO_BIT)
    return HK_WIRE_NO_BIT;
  if (c->nbits == c->cap_recs) {
    uint32_t cap = c->cap_recs ? 2 * c->cap_recs : 64;
    record *r = realloc(c->recs, (size_t)cap * sizeof *r);
    if (!r)
      return HK_WIRE_NO_BIT;
    c->recs = r;
    c->cap_recs = cap;
  }
  uint32_t bit = c->nbits;
  if (hk_strmap_put(c->names, req->name, (void *)(uintptr_t)(bit + 1)) != HK_OK)
    return HK_WIRE_NO_BIT;
  c->recs[bit].req = *req;
  c->recs[bit].live = 1;
  c->nbits++;
  c->nlive++;
  return bit;
}

void hk_cache_retire(hk_cache *c, uint32_t bit) {
  if (!hk_cache_is_live(c, bit))
    return;
  c->recs[bit].live = 0;
  c->nlive--;
  hk_strmap_remove(c->names, c->recs[bit].req.name);
}

uint32_t hk_cache_live(const hk_cache *c) { return c->nlive; }
