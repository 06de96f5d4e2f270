/*
 * sets.h - the process sets of a job (include/hk/hk.h, "Process sets";
 * docs/design.md, "Process sets"): the table of sets every rank holds
 * (ctx->sets, hk_set in worker/context.h), how a set is added and removed
 * on every rank at the same point of the job, and what a member builds
 * for one: a ring over its members in the flat ring's order
 * (worker/rings.h), its allreduce table's environment (worker/algo.h), its
 * device communicator (worker/devplane.h) and its response cache; rank 0,
 * which coordinates every set, also keeps each set's negotiator.
 *
 * Adding and removing are collectives of the world, negotiated like a
 * barrier (HK_COLL_SET_ADD, HK_COLL_SET_REMOVE) and run by the background
 * thread of every rank when their response runs, so every rank gives the
 * same id to the same set and sees every set come and go at the same
 * point of the world's response stream. Adding compares every rank's
 * member list (an allgather over the world's ring of a fixed-size record:
 * the problem found with the arguments, the count, a hash and the first
 * members of the sorted list, and the device communicator's id); a
 * problem on any rank, or lists that differ, fail the add on every rank,
 * naming the ranks and what they gave, and no set is made.
 *
 * Thread-safety: hk_sets_open, hk_sets_static and hk_sets_close in hk_init
 * and hk_shutdown; hk_sets_find and the query functions on any thread
 * (they lock ctx->mu); the rest on the background thread.
 */
#ifndef HK_WORKER_SETS_H
#define HK_WORKER_SETS_H

#include "worker/context.h"

/** What can be wrong with one rank's arguments to hk_process_set_add
 *  (hk_handle_s.members_problem); each rank's is compared by every rank. */
enum {
  HK_SETS_FINE = 0,
  HK_SETS_NULL_RANKS = 1,   /* ranks is NULL */
  HK_SETS_BAD_COUNT = 2,    /* n outside [1, size] */
  HK_SETS_OUT_OF_RANGE = 3, /* a rank outside [0, size) */
  HK_SETS_DUPLICATE = 4,    /* a rank twice */
  HK_SETS_NULL_OUT = 5,     /* out is NULL */
};

/** Members of a set shown in messages before "...". */
#define HK_SETS_SHOWN 8

/**
 * hk_init, after the mesh and the rings: the world, set 0 (every rank;
 * its ring and allreduce environment are ctx->ring and ctx->ar), with its
 * response cache and, on rank 0, its negotiator. Errors: HK_ERR_NOMEM.
 */
hk_status hk_sets_open(hk_ctx *ctx);

/**
 * hk_init, after the device plane and the settings check: the sets
 * HK_PROCESS_SETS lists ("0,1;2,3": sets 1 and 2), added in that order as
 * hk_process_set_add would (a collective of the world). Errors:
 * HK_ERR_CONFIG naming HK_PROCESS_SETS and what is wrong on which ranks
 * (a rank outside the job, a rank twice, ranks that were given different
 * lists), on every rank; the ring's errors; HK_ERR_NOMEM.
 */
hk_status hk_sets_static(hk_ctx *ctx);

/** Frees every set (before the rings, the mesh and the device plane go;
 *  safe on a partly made table). */
void hk_sets_close(hk_ctx *ctx);

/** The world (set 0). Any thread after hk_sets_open. */
static inline hk_set *hk_sets_world(const hk_ctx *ctx) { return ctx->sets[0]; }

/** Background thread: set `id` if it exists and was not removed, else
 *  NULL. */
hk_set *hk_sets_live(const hk_ctx *ctx, int32_t id);

/**
 * Any thread (locks ctx->mu): the set a collective named `name` is
 * submitted to, through function fn, by this rank: *size gets its size
 * and *rank this rank's rank in it. Errors: HK_ERR_INVALID_ARG naming fn,
 * the tensor, the set and this rank: a set never added, one removed, or
 * one this rank is not a member of.
 */
hk_status hk_sets_find(hk_ctx *ctx, const char *fn, const char *name,
                       int32_t id, int *size, int *rank);

/**
 * Background thread, when the world's response to an add runs (h: this
 * rank's request, with its members): the allgather of every rank's
 * record, their comparison, and, when they agree, the new set (its id in
 * h->out_int; the members' rings, environment, device communicator and
 * cache; rank 0's negotiator). *outcome gets HK_OK, or the failure every
 * rank gets for h (HK_ERR_INVALID_ARG: some rank's arguments;
 * HK_ERR_MISMATCH: different lists), with why[cap] saying it. Errors
 * (the job fails): the ring's, HK_ERR_NOMEM, the device's.
 */
hk_status hk_sets_run_add(hk_ctx *ctx, hk_handle h, hk_status *outcome,
                          char *why, size_t cap);

/**
 * Background thread, when the world's response to a remove runs (h: this
 * rank's request, the set's id in h->req.count): marks the set removed,
 * completes this rank's operations of the set still queued or in flight
 * with HK_ERR_SHUTDOWN naming the set, and frees what ran it. *outcome:
 * HK_OK, or HK_ERR_INVALID_ARG (the world, a set never added or already
 * removed: the same on every rank) with why. No errors of its own.
 */
hk_status hk_sets_run_remove(hk_ctx *ctx, hk_handle h, hk_status *outcome,
                             char *why, size_t cap);

#endif
