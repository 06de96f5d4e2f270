/*
 * timeline.h - HK_TIMELINE=file.json: a Chrome trace-event file (the JSON
 * array format that chrome://tracing and Perfetto open) of what rank 0's
 * background thread did: per tensor, one row ("thread") with its phases
 * (the timeline observer, observe/timeline_hooks.c, writes them from the
 * tensor_done hook, observe/observe.h):
 *   NEGOTIATE      rank 0 had the first rank's request -> it sent the
 *                  response (times are rank 0's: when requests arrived;
 *                  args: response, the tensor's place among its round's
 *                  responses, from 0, the order rank 0 answered in)
 *   WAIT_FOR_DATA  inside it: the first rank's request -> the last
 *                  rank's (args: last_rank, the straggler; memory)
 *   QUEUE          the response -> its group started
 *   MEMCPY_IN_FUSION_BUFFER, MEMCPY_OUT  (fused tensors only)
 *   the collective, by its own name: ALLREDUCE, BROADCAST, ALLGATHER,
 *                  REDUCESCATTER, ALLTOALL, BARRIER, JOIN (args: the
 *                  algorithm that ran: ring, hierarchical, rd, chain,
 *                  pairwise, or negotiation for BARRIER/JOIN, which move
 *                  no data; transport; fused tensors; bytes)
 * and, with HK_TIMELINE_MARK_CYCLES=1 (hkrun --timeline-mark-cycles), an
 * instant CYCLE_START marker on row 0 per negotiation round that ran
 * something (the round_started hook), at the time the round was ready.
 *
 * The file is valid JSON after every event: each event is written with
 * the closing bracket behind it, in one pwrite(2) that overwrites the
 * previous closing bracket, so a job killed by an error or a signal (even
 * SIGKILL) leaves a file that parses. A write that fails or falls short
 * (a full disk) puts the bracket back behind the last whole event and
 * cuts the rest: the file stays valid JSON, nothing more is written, and
 * a warning names the file and the reason, once (docs/monitoring.md,
 * "Output files"). When HK_TIMELINE is unset no
 * timeline observer is attached and the engine's hooks cost one branch.
 * A bound (HK_TIMELINE_MAX_MB, hk_timeline_set_limit) keeps a long job
 * from filling the disk: the event that would take the file past it is
 * not written; a TIMELINE_TRUNCATED instant takes its place, saying the
 * limit and (updated at close) how many events were left out, and nothing
 * more is written. The file is never larger than the bound.
 * Times: seconds on hk_now()'s clock in, microseconds since open out.
 * Thread-safety: the background thread only.
 */
#ifndef HK_OBSERVE_TIMELINE_H
#define HK_OBSERVE_TIMELINE_H

#include "hk/hk.h"
#include "observe/observe.h"

typedef struct hk_timeline hk_timeline;

/**
 * Rank 0 with HK_TIMELINE set (s->cfg->timeline): opens the file (bounded
 * by HK_TIMELINE_MAX_MB) and attaches the timeline observer, which closes
 * it at detach; elsewhere does nothing. Errors: hk_timeline_open's, or
 * hk_observe_attach's.
 */
hk_status hk_timeline_attach(hk_observers *o, const hk_obs_setup *s);

/** Creates path as common/outfile.h makes every output (never through a
 *  link, mode `mode` (HK_FILE_MODE), named once it holds the empty array
 *  "[]", replacing the file of an earlier run). Errors: HK_ERR_NOMEM,
 *  HK_ERR_SYSTEM naming HK_TIMELINE, the file and the reason. */
hk_status hk_timeline_open(const char *path, unsigned mode, hk_timeline **out);

/** Bounds the file at max_bytes (0: no bound; smaller than 1 KiB counts
 *  as 1 KiB, room for the note). */
void hk_timeline_set_limit(hk_timeline *tl, size_t max_bytes);

/** Closes the file (already valid JSON) and frees. NULL is fine. */
void hk_timeline_close(hk_timeline *tl);

/** One phase of one tensor, [start_s, end_s]. args_json is NULL or the
 *  inside of a JSON object ("\"algorithm\":\"ring\""). */
void hk_timeline_span(hk_timeline *tl, const char *tensor, const char *phase,
                      double start_s, double end_s, const char *args_json);

/** An instant marker on the cycle row. */
void hk_timeline_mark(hk_timeline *tl, const char *name, double t_s);

#endif
