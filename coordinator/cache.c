/* cache.c - the response cache (cache.h): records by bit, a name -> bit
 * map, and the live entries on a list in order of use. */
#include "coordinator/cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/strmap.h"

#define NONE UINT32_MAX

typedef struct record {
  hk_wire_request req;
  int live;
  uint32_t prev, next; /* the use list (live records only), NONE at ends */
} record;

struct hk_cache {
  uint32_t capacity, max_bits, nbits, nlive;
  record *recs; /* nbits used, grown by doubling */
  uint32_t cap_recs;
  hk_strmap *names;  /* name -> its bit + 1, live or not (a name keeps its
                        bit for the cache's life) */
  uint32_t lru, mru; /* ends of the use list, NONE when empty */
  hk_cache_stats stats;
};

hk_status hk_cache_create(uint32_t capacity, hk_cache **out) {
  hk_cache *c = calloc(1, sizeof *c);
  if (!c)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the response cache");
  c->capacity = capacity;
  uint64_t max_bits = 4ull * capacity;
  c->max_bits = max_bits > HK_WIRE_MAX_CACHE_BITS ? HK_WIRE_MAX_CACHE_BITS
                                                  : (uint32_t)max_bits;
  c->lru = c->mru = NONE;
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
         a->set == b->set && a->ndims == b->ndims &&
         memcmp(a->shape, b->shape, a->ndims * sizeof a->shape[0]) == 0 &&
         memcmp(&a->prescale, &b->prescale, sizeof a->prescale) == 0 &&
         memcmp(&a->postscale, &b->postscale, sizeof a->postscale) == 0;
}

/* The bit `name` was ever given, or NONE. */
static uint32_t bit_ever(const hk_cache *c, const char *name) {
  uintptr_t v = (uintptr_t)hk_strmap_get(c->names, name);
  return v ? (uint32_t)(v - 1) : NONE;
}

uint32_t hk_cache_bit_of(const hk_cache *c, const char *name) {
  uint32_t bit = bit_ever(c, name);
  return bit != NONE && c->recs[bit].live ? bit : HK_WIRE_NO_BIT;
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

/* ---- the use list ---- */

static void unlink_rec(hk_cache *c, uint32_t bit) {
  record *r = &c->recs[bit];
  if (r->prev != NONE)
    c->recs[r->prev].next = r->next;
  else
    c->lru = r->next;
  if (r->next != NONE)
    c->recs[r->next].prev = r->prev;
  else
    c->mru = r->prev;
  r->prev = r->next = NONE;
}

static void push_mru(hk_cache *c, uint32_t bit) {
  record *r = &c->recs[bit];
  r->prev = c->mru;
  r->next = NONE;
  if (c->mru != NONE)
    c->recs[c->mru].next = bit;
  else
    c->lru = bit;
  c->mru = bit;
}

static void make_live(hk_cache *c, uint32_t bit, const hk_wire_request *req) {
  hk_wire_request_copy(&c->recs[bit].req, req);
  c->recs[bit].live = 1;
  c->nlive++;
  push_mru(c, bit);
}

static void make_dead(hk_cache *c, uint32_t bit) {
  unlink_rec(c, bit);
  c->recs[bit].live = 0;
  c->nlive--;
}

void hk_cache_touch(hk_cache *c, uint32_t bit) {
  if (!hk_cache_is_live(c, bit))
    return;
  c->stats.hits++;
  unlink_rec(c, bit);
  push_mru(c, bit);
}

uint32_t hk_cache_insert(hk_cache *c, const hk_wire_request *req) {
  if (c->capacity == 0)
    return HK_WIRE_NO_BIT;
  c->stats.misses++;
  uint32_t bit = bit_ever(c, req->name);
  if (bit != NONE && c->recs[bit].live) { /* ran by name: still used */
    unlink_rec(c, bit);
    push_mru(c, bit);
    return HK_WIRE_NO_BIT;
  }
  if (bit == NONE && c->nbits >= c->max_bits) {
    c->stats.out_of_bits++;
    return HK_WIRE_NO_BIT;
  }
  if (bit == NONE && c->nbits == c->cap_recs) {
    uint32_t cap = c->cap_recs ? 2 * c->cap_recs : 64;
    if (cap > c->max_bits)
      cap = c->max_bits;
    record *r = realloc(c->recs, (size_t)cap * sizeof *r);
    if (!r)
      return HK_WIRE_NO_BIT;
    c->recs = r;
    c->cap_recs = cap;
  }
  if (bit == NONE) {
    if (hk_strmap_put(c->names, req->name, (void *)(uintptr_t)(c->nbits + 1)) !=
        HK_OK)
      return HK_WIRE_NO_BIT;
    bit = c->nbits++;
    c->recs[bit].live = 0;
  }
  if (c->nlive >= c->capacity) { /* full: the least recently used goes */
    make_dead(c, c->lru);
    c->stats.evictions++;
  }
  make_live(c, bit, req);
  return bit;
}

void hk_cache_retire(hk_cache *c, uint32_t bit) {
  if (hk_cache_is_live(c, bit))
    make_dead(c, bit);
}

uint32_t hk_cache_live(const hk_cache *c) { return c->nlive; }

uint32_t hk_cache_capacity(const hk_cache *c) { return c->capacity; }

hk_cache_stats hk_cache_get_stats(const hk_cache *c) { return c->stats; }

void hk_cache_apply(hk_cache *c, const hk_wire_response *r,
                    const hk_wire_request *req) {
  if (r->status != HK_OK)
    return;
  const unsigned k = req->coll;
  if (r->flags & HK_RESP_CACHED)
    hk_cache_touch(c, r->cache_bit);
  else if (k == HK_COLL_ALLREDUCE || k == HK_COLL_BROADCAST ||
           k == HK_COLL_REDUCESCATTER)
    hk_cache_insert(c, req);
}
