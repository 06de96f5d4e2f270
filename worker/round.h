/*
 * round.h - the negotiation round's state and rank 0's side of it (the
 * protocol: worker/background.c's header). Background thread only.
 */
#ifndef HK_WORKER_ROUND_H
#define HK_WORKER_ROUND_H

#include <poll.h>
#include <stdint.h>

#include "worker/context.h"

/* Send buffer of a control connection: a RESPONSES of ~20k cached
 * tensors at the default net.core.wmem_max (212992, doubled); the size of
 * each shared-memory control ring too (worker/intra.c), so that what
 * never blocked on TCP does not block there. */
#define HK_CTRL_SEND_BUFFER (1u << 20)

/* What the loop has decided so far, and its scratch (owned by the
 * background thread; hk_round_init / hk_round_free). */
typedef struct hk_round {
  int sent;               /* rank > 0: a REQUESTS is outstanding */
  int shutdown_sent;      /* rank > 0: our shutdown request went out */
  size_t request_cap;     /* rank > 0: the most bytes of one REQUESTS */
  int shutdown_rank;      /* >= 0: everyone stops after this round */
  hk_status abort_status; /* rank 0: the job must stop (stall) */
  char abort_reason[HK_WIRE_MAX_REASON_LEN + 1];
  uint8_t *waiting;      /* rank 0: waiting[r], see the file comment */
  double *waiting_since; /* rank 0: when waiting[r] became 1 (hk_now()) */
  double *heard;         /* rank 0: when rank r last spoke, or rank 0
                            last came back from running a round */
  double quiet_since;    /* rank > 0: when this rank last sent, heard
                            from rank 0 or came back from running */
  hk_buf answer;         /* rank 0: the encoded empty answer */
  hk_wire_request *reqs; /* this round's requests by name */
  uint32_t cap_reqs;
  uint32_t *bits;     /* this round's cache bits */
  int32_t *bit_sets;  /* the process set of each (REQUESTS.bit_sets) */
  uint64_t *bit_keys; /* rank > 0: (set, bit) keys that sort the bits of
                         several sets */
  uint32_t cap_bits;
  uint64_t *seen; /* rank > 0: bitmap that sorts the bits of one set */
  size_t seen_words;
} hk_round;

/** Sets up *R for this rank (rank 0: the per-rank answer state and the
 *  encoded empty answer). Errors: HK_ERR_NOMEM. */
hk_status hk_round_init(hk_ctx *ctx, hk_round *R);

/** Frees what *R holds. */
void hk_round_free(hk_round *R);

/** 1 once hk_shutdown was called on this rank. Locks ctx->mu. */
int hk_round_shutdown_requested(hk_ctx *ctx);

/**
 * Splits a list of handles taken from the queue into requests by name
 * (R->reqs, *nreqs) and the response-cache bits of those their process
 * set's cache knows (R->bits and R->bit_sets, *nbits); with `sorted` the
 * (set, bit) pairs ascend, as the wire wants (one set: a bitmap pass,
 * linear in the bits and their range; several: a sort). A handle whose
 * set was removed after it was submitted completes here with
 * HK_ERR_SHUTDOWN, naming the set. Errors: HK_ERR_NOMEM.
 */
hk_status hk_round_split(hk_ctx *ctx, hk_round *R, hk_handle list, int sorted,
                         uint32_t *nreqs, uint32_t *nbits);

/**
 * Rank 0, after every wake-up of the loop: feeds its own queue, reads the
 * REQUESTS of every rank r whose control connection is readable
 * (pfds[first_ctrl + r - 1].revents) into the negotiators of their
 * process sets, then, for every set with tensors ready (the other sets
 * first, the world last, which also carries a stop: a rank shut down, or
 * the job must stop, R->shutdown_rank / R->abort_status), sends the
 * set's members one RESPONSES and runs it where rank 0 is a member (else
 * follows the set's response cache), and answers the requests still
 * waiting with the empty answer. Errors: what the connections, the
 * negotiators and the collectives return; the job then fails.
 */
hk_status hk_round_coordinate(hk_ctx *ctx, hk_round *R,
                              const struct pollfd *pfds, int first_ctrl);

/** How long the loop may sleep, ms (-1: until something happens). Rank
 *  0: until the next stall check while tensors are pending, a held
 *  answer is due, or a rank that tensors wait for has been silent for
 *  HK_TIMEOUT_S. Other ranks: until their request has waited
 *  HK_TIMEOUT_S for its answer, or, with none in flight, until they have
 *  been quiet for a quarter of it (hk_round_ping_due). */
int hk_round_timeout_ms(hk_ctx *ctx, const hk_round *R);

/**
 * Liveness (every wait of the negotiation honours HK_TIMEOUT_S, and a
 * stopped process is told from a slow trainer by its background thread,
 * which always answers): a rank r > 0 with no request in flight that has
 * been quiet for HK_TIMEOUT_S / 4 sends an empty REQUESTS (a ping), and
 * rank 0 answers it at once, as any request.
 *
 * Rank > 0: 1 when a ping is due (no request in flight, quiet for a
 * quarter of HK_TIMEOUT_S). Rank 0: 0.
 */
int hk_round_ping_due(hk_ctx *ctx, const hk_round *R);

/**
 * The negotiation's timeouts, after the loop handled what was readable:
 * rank > 0: its request unanswered for HK_TIMEOUT_S (HK_ERR_TIMEOUT
 * naming rank 0: stopped, or stuck); rank 0: a rank that tensors of one of
 * its process sets wait for has sent nothing (not even a ping) for
 * HK_TIMEOUT_S (HK_ERR_TIMEOUT naming it and the oldest such tensor).
 * Returns HK_OK otherwise. Background thread.
 */
hk_status hk_round_check_silence(hk_ctx *ctx, hk_round *R);

/** The rank came back from running a round's collectives: the silence of
 *  the others (rank 0) or of rank 0 (rank > 0) counts from now, since
 *  nobody could speak to it meanwhile. */
void hk_round_ran(hk_ctx *ctx, hk_round *R);

#endif
