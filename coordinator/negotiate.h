/*
 * negotiate.h - rank 0's readiness table: which named tensors every rank
 * has submitted, whether they agree, and in which order all ranks run them.
 *
 * Each cycle rank 0 feeds in every rank's newly submitted requests (its own
 * too), in rank order, then takes the responses: every tensor that all
 * `size` ranks have now submitted, in the order it became complete. A
 * tensor whose collective, dtype, op, root or count differ between ranks is
 * answered with HK_ERR_MISMATCH and a reason naming the tensor, the field,
 * and which ranks hold which value. Pure logic: no I/O, no threads.
 * Thread-safety: none; the background thread of rank 0 owns it.
 */
#ifndef HK_COORDINATOR_NEGOTIATE_H
#define HK_COORDINATOR_NEGOTIATE_H

#include <stdint.h>

#include "coordinator/wire.h"
#include "hk/hk.h"

typedef struct hk_negotiator hk_negotiator;

/** Creates a table for `size` ranks. Errors: HK_ERR_NOMEM. */
hk_status hk_negotiator_create(int size, hk_negotiator **out);

/** Frees the table and everything pending in it. NULL is fine. */
void hk_negotiator_destroy(hk_negotiator *n);

/**
 * Records that `rank` submitted reqs[0..count). A name that rank already
 * has pending is HK_ERR_PROTOCOL (ranks reject duplicates locally, so this
 * means a broken peer). Errors: HK_ERR_PROTOCOL, HK_ERR_NOMEM,
 * HK_ERR_INVALID_ARG (rank out of range).
 */
hk_status hk_negotiator_add(hk_negotiator *n, int rank,
                            const hk_wire_request *reqs, uint32_t count);

/**
 * Hands over every tensor now submitted by all ranks, oldest completion
 * first, as responses (*out is malloc'd, *count entries; reasons are
 * malloc'd too; free with hk_negotiator_free_responses). Removes them from
 * the table. Errors: HK_ERR_NOMEM.
 */
hk_status hk_negotiator_take_ready(hk_negotiator *n, hk_wire_response **out,
                                   uint32_t *count);

/** Frees what hk_negotiator_take_ready returned. */
void hk_negotiator_free_responses(hk_wire_response *r, uint32_t count);

/** Number of tensors some but not all ranks have submitted. */
uint32_t hk_negotiator_pending(const hk_negotiator *n);

#endif
