/*
 * cache.h - the response cache (Horovod's ResponseCache, reimplemented):
 * after a tensor has been negotiated once, later steps that submit the same
 * name with the same collective, dtype, op, root, count and scale factors
 * are announced to rank 0 by a bit index instead of the full request, and
 * rank 0 answers with the bit, so names stop crossing the network.
 *
 * Consistency: every rank inserts and retires entries at the same point of
 * the response stream that rank 0 sends (an insert when an uncached OK
 * allreduce/broadcast response runs; a retire when rank 0 lists the bit as
 * invalidated), so bit b means the same tensor on every rank. Retired bits
 * are never reused: a bit a rank sent before it learnt of the retirement
 * still maps to the tensor it meant (rank 0 then negotiates it by name).
 * Capacity (HK_CACHE_CAPACITY, Horovod's default 1024; 0 disables) bounds
 * the live entries; once 4 x capacity bits have been handed out, no new
 * entries are made.
 * Thread-safety: none; the background thread owns it.
 */
#ifndef HK_COORDINATOR_CACHE_H
#define HK_COORDINATOR_CACHE_H

#include <stdint.h>

#include "coordinator/wire.h"
#include "hk/hk.h"

typedef struct hk_cache hk_cache;

/** Creates an empty cache of `capacity` live entries (0: disabled).
 *  Errors: HK_ERR_NOMEM. */
hk_status hk_cache_create(uint32_t capacity, hk_cache **out);

/** Frees the cache. NULL is fine. */
void hk_cache_destroy(hk_cache *c);

/** The live bit of req->name if its cached parameters equal req's, else
 *  HK_WIRE_NO_BIT. */
uint32_t hk_cache_lookup(const hk_cache *c, const hk_wire_request *req);

/** The live bit of `name` whatever its parameters, or HK_WIRE_NO_BIT. */
uint32_t hk_cache_bit_of(const hk_cache *c, const char *name);

/** The request recorded for bit (live or retired), or NULL if the bit was
 *  never handed out. */
const hk_wire_request *hk_cache_get(const hk_cache *c, uint32_t bit);

/** 1 if bit is live. */
int hk_cache_is_live(const hk_cache *c, uint32_t bit);

/**
 * Records req under the next bit, unless its name is live already, the
 * cache is disabled or full. Returns the new bit or HK_WIRE_NO_BIT.
 * Errors are swallowed (an allocation failure just leaves it uncached).
 */
uint32_t hk_cache_insert(hk_cache *c, const hk_wire_request *req);

/** Retires a live bit (its name becomes uncached). No-op otherwise. */
void hk_cache_retire(hk_cache *c, uint32_t bit);

/** Number of live entries. */
uint32_t hk_cache_live(const hk_cache *c);

#endif
