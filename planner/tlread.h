/*
 * tlread.h - reading what hkplan needs from an hk timeline
 * (observe/timeline.h's Chrome trace file, one event per line): each
 * span's phase, tensor, start and length, and the collective's batch size
 * and bytes. Only hk's own format is read (a line per event, the fields in
 * the order hk writes them); other lines are skipped.
 * Thread-safety: reentrant.
 */
#ifndef HK_PLANNER_TLREAD_H
#define HK_PLANNER_TLREAD_H

#include <stddef.h>

#include "hk/hk.h"

typedef struct hk_tl_span {
  char phase[32]; /* "NEGOTIATE", "WAIT_FOR_DATA", ... */
  char tensor[HK_MAX_NAME_LEN + 1];
  double ts_us, dur_us; /* from the file's start, µs */
  long fused;           /* the collective's fused_tensors, 0 */
  long long bytes;      /* the collective's bytes, -1 if absent */
  long response; /* NEGOTIATE: its place among its round's responses, -1 if
                    absent */
} hk_tl_span;

typedef struct hk_tl {
  hk_tl_span *span; /* in file order; owned */
  size_t n;
} hk_tl;

/* The largest |ts| and dur accepted, µs (about 31 years). */
#define HK_TL_MAX_US 1e15

/**
 * Reads path into *out (free with hk_tl_free). Errors: HK_ERR_SYSTEM (the
 * file cannot be read, naming it and why), HK_ERR_CONFIG (no span in it:
 * "FILE: no timeline spans (is it an hk timeline, HK_TIMELINE?)"; a span
 * whose ts is not finite or beyond +-HK_TL_MAX_US, or whose dur is negative,
 * not finite or beyond HK_TL_MAX_US: "FILE: line L: span PHASE of TENSOR:
 * ts .., dur .. µs (want finite times ...)"),
 * HK_ERR_NOMEM.
 */
hk_status hk_tl_read(const char *path, hk_tl *out);

/** Frees what hk_tl_read allocated; a zeroed one is fine. */
void hk_tl_free(hk_tl *t);

#endif
