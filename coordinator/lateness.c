/* lateness.c - rank 0's straggler accounting (lateness.h). */
#include "coordinator/lateness.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

struct hk_lateness {
  int size;
  uint32_t window;
  double *round_late; /* this round's late_r(R) so far */
  int round_any;      /* an arrival since the last end_round */
  hk_lateness_sums open, closed, total;
};

static hk_status sums_init(hk_lateness_sums *s, int size) {
  memset(s, 0, sizeof *s);
  s->ranks = calloc((size_t)size, sizeof *s->ranks);
  return s->ranks ? HK_OK
                  : hk_fail(HK_ERR_NOMEM, "cannot allocate lateness sums");
}

static void sums_clear(hk_lateness_sums *s, int size) {
  s->rounds = 0;
  s->first_s = s->last_s = 0;
  memset(s->ranks, 0, (size_t)size * sizeof *s->ranks);
}

hk_status hk_lateness_create(int size, uint32_t window, hk_lateness **out) {
  *out = NULL;
  if (size < 1 || window < 1)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "lateness accounting needs size >= 1 and window >= 1 "
                   "(got size %d, window %u)",
                   size, window);
  hk_lateness *L = calloc(1, sizeof *L);
  if (!L)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate lateness accounting");
  L->size = size;
  L->window = window;
  L->round_late = calloc((size_t)size, sizeof *L->round_late);
  hk_status st = L->round_late ? sums_init(&L->open, size)
                               : hk_fail(HK_ERR_NOMEM, "cannot allocate");
  if (st == HK_OK)
    st = sums_init(&L->closed, size);
  if (st == HK_OK)
    st = sums_init(&L->total, size);
  if (st != HK_OK) {
    hk_lateness_destroy(L);
    return st;
  }
  *out = L;
  return HK_OK;
}

void hk_lateness_destroy(hk_lateness *L) {
  if (!L)
    return;
  free(L->round_late);
  free(L->open.ranks);
  free(L->closed.ranks);
  free(L->total.ranks);
  free(L);
}

void hk_lateness_arrival(hk_lateness *L, int rank, double late_s) {
  if (late_s > L->round_late[rank])
    L->round_late[rank] = late_s;
  L->round_any = 1;
}

/* Adds one round to s. */
static void add_round(hk_lateness_sums *s, const double *late, int size,
                      double spread, int last, double now_s) {
  if (s->rounds++ == 0)
    s->first_s = now_s;
  s->last_s = now_s;
  for (int r = 0; r < size; r++) {
    hk_lateness_rank *k = &s->ranks[r];
    k->late_s += late[r];
    k->wait_s += spread - late[r];
    if (late[r] > k->worst_s)
      k->worst_s = late[r];
  }
  if (last >= 0)
    s->ranks[last].last++;
}

int hk_lateness_end_round(hk_lateness *L, double now_s) {
  if (!L->round_any)
    return 0;
  double spread = 0;
  int last = -1;
  for (int r = 0; r < L->size; r++)
    if (L->round_late[r] > spread) {
      spread = L->round_late[r];
      last = r;
    }
  add_round(&L->open, L->round_late, L->size, spread, last, now_s);
  add_round(&L->total, L->round_late, L->size, spread, last, now_s);
  memset(L->round_late, 0, (size_t)L->size * sizeof *L->round_late);
  L->round_any = 0;
  if (L->open.rounds < L->window)
    return 0;
  hk_lateness_sums t = L->closed; /* swap: closed <- open, open cleared */
  L->closed = L->open;
  L->open = t;
  sums_clear(&L->open, L->size);
  return 1;
}

const hk_lateness_sums *hk_lateness_window(const hk_lateness *L) {
  return &L->closed;
}

const hk_lateness_sums *hk_lateness_total(const hk_lateness *L) {
  return &L->total;
}

uint32_t hk_lateness_window_rounds(const hk_lateness *L) { return L->window; }
