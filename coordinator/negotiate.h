/*
 * negotiate.h - rank 0's readiness table: which named tensors every rank
 * has submitted, whether they agree, and in which order all ranks run them.
 *
 * Rank 0 feeds in every rank's newly submitted requests as they arrive
 * (its own too; worker/background.c), then takes the responses: every
 * tensor that all `size` ranks have now submitted, in the order it became
 * complete. A
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

/**
 * Makes the table's messages (mismatches, stalls) speak of process set
 * `set` and name table rank r as job rank ranks[r] (size entries, copied;
 * a process set's table counts its members 0..size-1, hk.h): "tensor 'w'
 * in process set 2: ranks disagree: ... on ranks 4, 6". Without it (the
 * world's table) the two are the same and no set is named.
 * Errors: HK_ERR_NOMEM (the table is unchanged).
 */
hk_status hk_negotiator_name(hk_negotiator *n, int32_t set, const int *ranks);

/** Frees the table and everything pending in it. NULL is fine. */
void hk_negotiator_destroy(hk_negotiator *n);

/**
 * Records that `rank` submitted reqs[0..count) at time `now` (seconds, any
 * monotonic clock; used by the stall inspector). `via_bit` is the
 * response-cache bit the rank announced them by (one request then), or
 * HK_WIRE_NO_BIT for requests sent by name: a tensor every rank announced
 * by the same bit is answered by that bit (HK_RESP_CACHED). A name that
 * rank already has pending is HK_ERR_PROTOCOL (ranks reject duplicates
 * locally, so this means a broken peer). Errors: HK_ERR_PROTOCOL,
 * HK_ERR_NOMEM, HK_ERR_INVALID_ARG (rank out of range).
 */
hk_status hk_negotiator_add(hk_negotiator *n, int rank,
                            const hk_wire_request *reqs, uint32_t count,
                            uint32_t via_bit, double now);

/**
 * The stall inspector's view: describes, into out[cap], every tensor that
 * some ranks submitted and others did not for at least min_age_s
 * ("tensor 'w' (waiting 61 s): missing on rank 2, submitted by ranks 0, 1,
 * 3; ..."), and returns how many there are; *oldest_s gets the age of the
 * oldest pending tensor (0 if none). `now` as in hk_negotiator_add.
 */
uint32_t hk_negotiator_stalled(const hk_negotiator *n, double now,
                               double min_age_s, char *out, size_t cap,
                               double *oldest_s);

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

/**
 * With on = 1, every agreed response hk_negotiator_take_ready hands over
 * carries a copy of the request the ranks agreed on (hk_wire_response.
 * agreed): rank 0 follows the response cache of a process set it is not
 * a member of with them. Off by default (a copy per tensor).
 */
void hk_negotiator_keep_requests(hk_negotiator *n, int on);

struct hk_lateness;

/**
 * Makes hk_negotiator_take_ready tell L (coordinator/lateness.h) when each
 * rank submitted every tensor it hands over (hk_lateness_arrival); NULL
 * (the default) tells nothing: the only cost left is one branch per
 * tensor. L is borrowed and must outlive the negotiator or be unset.
 */
void hk_negotiator_set_lateness(hk_negotiator *n, struct hk_lateness *L);

/** Number of tensors some but not all ranks have submitted. */
uint32_t hk_negotiator_pending(const hk_negotiator *n);

#endif
