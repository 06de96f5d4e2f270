/*
 * cache.h - the response cache (Horovod's ResponseCache, reimplemented):
 * after a tensor has been negotiated once, later steps that submit the same
 * name with the same collective, dtype, op, root, count and scale factors
 * are announced to rank 0 by a bit index instead of the full request, and
 * rank 0 answers with the bit, so names stop crossing the network.
 *
 * Consistency: every rank inserts, uses and retires entries at the same
 * points of the response stream that rank 0 sends (an insert when an
 * uncached OK allreduce/broadcast/reducescatter response runs, a use when
 * a cached one runs; a retire when rank 0 lists the bit as invalidated),
 * so bit b means the same tensor on every rank and the entries are in the
 * same order of use everywhere.
 * Capacity (HK_CACHE_CAPACITY, Horovod's default 1024; 0 disables) bounds
 * the live entries: inserting into a full cache evicts the least recently
 * used entry (as Horovod's ResponseCache does).
 * Bits: a name keeps the bit it was first given for the life of the cache;
 * an evicted or retired entry's bit is given again only to the same name,
 * when it is cached again. So a bit a rank sent before it learnt of an
 * eviction or retirement still names the tensor it meant (rank 0 then
 * negotiates it by name), and once that name has run again (which needs
 * every rank's pending submission of it, stale bit or not) nothing sent
 * before can still be on its way. At most 4 x capacity names ever get a
 * bit; names beyond that are negotiated by name every time
 * (stats.out_of_bits counts them).
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
 * Records req (a response that ran uncached) under its name's bit, or the
 * next new one, evicting the least recently used entry when the cache is
 * full. A name that is live already is only marked used. Returns the bit
 * made live, or HK_WIRE_NO_BIT (already live, disabled, no bits left).
 * Errors are swallowed (an allocation failure just leaves it uncached).
 */
uint32_t hk_cache_insert(hk_cache *c, const hk_wire_request *req);

/** A cached response for bit ran: it becomes the most recently used (and
 *  counts as a hit). No-op for a bit that is not live. */
void hk_cache_touch(hk_cache *c, uint32_t bit);

/** Retires a live bit (its name becomes uncached). No-op otherwise. */
void hk_cache_retire(hk_cache *c, uint32_t bit);

/**
 * Response r ran (on the members of its set; rank 0 follows the cache of
 * a set it is not in the same way), for request req (the one it ran, or
 * the one every rank agreed on): an OK cached response touches its bit;
 * an OK uncached allreduce, broadcast or reduce-scatter is inserted (per
 * rank counts, allgather's and alltoall's, cannot be shared by a bit).
 * The one rule every rank applies in response order.
 */
void hk_cache_apply(hk_cache *c, const hk_wire_response *r,
                    const hk_wire_request *req);

/** Number of live entries. */
uint32_t hk_cache_live(const hk_cache *c);

/** HK_CACHE_CAPACITY as given. */
uint32_t hk_cache_capacity(const hk_cache *c);

/** What the cache did: responses that ran from a bit (hits) and by name
 *  (misses, whatever was inserted), entries evicted, and names left
 *  uncached for want of bits. */
typedef struct hk_cache_stats {
  uint64_t hits, misses, evictions, out_of_bits;
} hk_cache_stats;

hk_cache_stats hk_cache_get_stats(const hk_cache *c);

#endif
