/*
 * w_large - one allreduce of more than 2^31 bytes (uint8, 2^31 + 1031
 * elements, in place, sum), checked element by element on every rank
 * against the serial sum modulo 256. Buffers are backed by transparent
 * huge pages where available, since first-touch page faults cost ~11 us
 * per 4 KiB page on the reference VM (bench/peers/results).
 *   w_large [BYTES [rss]]  with "rss", also prints this process's peak
 *                          resident set (getrusage: shared memory
 *                          included) after the allreduce: "rss peak <KiB>
 *                          KiB for <BYTES> bytes".
 */
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "wcommon.h"

static uint8_t value(int rank, size_t i) {
  return (uint8_t)(i * 7 + (i >> 13) + (size_t)rank * 101);
}

int main(int argc, char **argv) {
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (1ull << 31) + 1031;
  uint8_t *buf =
      mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  HKT_CHECK(buf != MAP_FAILED, "cannot map %zu bytes", n);
  madvise(buf, n, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; i++)
    buf[i] = value(rank, i);
  HKT_OK(hk_allreduce("large", buf, buf, n, HK_UINT8, HK_SUM));
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t expect = 0;
    for (int r = 0; r < np; r++)
      expect = (uint8_t)(expect + value(r, i));
    if (buf[i] != expect && !wrong++)
      first = i;
  }
  HKT_CHECK(wrong == 0, "%zu wrong elements, the first at %zu", wrong, first);
  if (argc > 2 && !strcmp(argv[2], "rss")) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("rss peak %ld KiB for %zu bytes\n", ru.ru_maxrss, n);
  }
  HKT_OK(hk_shutdown());
  printf("large ok: %zu bytes\n", n);
  munmap(buf, n);
  return 0;
}
