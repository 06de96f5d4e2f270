/*
 * w_burst - a burst of tensors submitted at once: every rank submits N
 * distinct 4-byte int32 sum allreduces ("burst.<k>" padded with '.' to
 * NAME_LEN bytes when NAME_LEN is given), all before waiting for any, then
 * waits for every one and checks it against the serial sum over the
 * ranks. The negotiation then carries messages far larger than a control
 * socket's buffer (worker/background.c: a round's REQUESTS is bounded).
 *
 *   w_burst N [NAME_LEN]
 *
 * Prints "burst ok <N>" on success; exits 1 naming the first tensor that
 * failed or was wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wcommon.h"

/* What rank r contributes to tensor k. */
static int32_t value(int r, int k) {
  return (int32_t)(hkt_mix((uint64_t)k * 131 + (uint64_t)r) % 1000003);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: w_burst N [NAME_LEN]\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  const int name_len = argc > 2 ? atoi(argv[2]) : 0;
  HKT_CHECK(n > 0 && name_len >= 0 && name_len <= HK_MAX_NAME_LEN,
            "bad arguments");
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  int32_t *buf = malloc((size_t)n * sizeof *buf);
  hk_handle *h = malloc((size_t)n * sizeof *h);
  HKT_CHECK(buf && h, "out of memory");
  char name[HK_MAX_NAME_LEN + 1];
  for (int k = 0; k < n; k++) {
    int len = snprintf(name, sizeof name, "burst.%d", k);
    if (len < name_len) { /* pad: the same long name on every rank */
      memset(name + len, '.', (size_t)(name_len - len));
      name[name_len] = '\0';
    }
    buf[k] = value(rank, k);
    HKT_OK(
        hk_allreduce_async(name, &buf[k], &buf[k], 1, HK_INT32, HK_SUM, &h[k]));
  }
  for (int k = 0; k < n; k++) {
    HKT_OK(hk_wait(h[k]));
    int64_t want = 0;
    for (int r = 0; r < np; r++)
      want += value(r, k);
    HKT_CHECK(buf[k] == (int32_t)want,
              "rank %d: tensor 'burst.%d' is %d, the sum over the ranks %lld",
              rank, k, (int)buf[k], (long long)want);
  }
  printf("burst ok %d\n", n);
  free(buf);
  free(h);
  HKT_OK(hk_shutdown());
  return 0;
}
