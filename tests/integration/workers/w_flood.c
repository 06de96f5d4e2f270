/*
 * w_flood FIFO - a job that starts while someone holds connections to its
 * listening ports (test_startup_flood): rank 0 calls hk_init at once, so
 * it listens and waits for the others; every other rank first reads one
 * byte from FIFO, which the driver writes once it holds its connections
 * to every port the job listens on, then calls hk_init. Every rank checks
 * an allreduce against the serial sum and prints "flood ok".
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "wcommon.h"

int main(int argc, char **argv) {
  HKT_CHECK(argc == 2, "usage: w_flood FIFO");
  const char *r = getenv("HK_RANK"); /* before hk_init: hkrun's word */
  if (r && atoi(r) != 0) {
    int fd = open(argv[1], O_RDONLY);
    char go;
    HKT_CHECK(fd >= 0 && read(fd, &go, 1) == 1, "cannot read %s", argv[1]);
    close(fd);
  }
  HKT_OK(hk_init());
  const int rank = hk_rank(), np = hk_size();
  double x[4] = {rank, 1, 2 * rank, -rank};
  HKT_OK(hk_allreduce("flood.x", x, x, 4, HK_FLOAT64, HK_SUM));
  const double s = np * (np - 1) / 2.0;
  HKT_CHECK(x[0] == s && x[1] == np && x[2] == 2 * s && x[3] == -s,
            "flood.x = %g %g %g %g", x[0], x[1], x[2], x[3]);
  HKT_OK(hk_shutdown());
  printf("flood ok\n");
  return 0;
}
