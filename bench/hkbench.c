/*
 * hkbench - allreduce sweep in the columns of nccl-tests' all_reduce_perf:
 *
 *   hkrun -np 4 ./hkbench -b 8 -e 256M -f 4 [-n 50] [-w 5] [-c 1]
 *                         [-d float32] [-o sum] [--csv FILE]
 *
 * Method (the same as ../shared/peers/, so the numbers sit side by side with
 * Open MPI's MPI_Allreduce): in place; before every iteration, untimed, the
 * buffer is re-initialised and all ranks meet in hk_barrier; the timed part
 * is one hk_allreduce through the public API (enqueue, negotiation, ring,
 * completion). One iteration's time is the max over ranks (an allreduce of
 * the times); the reported time is the median over iterations.
 * iterations = min(-n, -B / size) and at least 5; warm-up = min(-w,
 * iterations/5 + 1). algbw = size / time; busbw = algbw * 2(n-1)/n;
 * GB = 1e9 bytes. #wrong (with -c 1, the default) counts elements that
 * differ from the serial sum: inputs are small integers, so every
 * summation order is exact.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "hk/hk.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'k' || *end == 'K')
    v *= 1024.0;
  else if (*end == 'm' || *end == 'M')
    v *= 1024.0 * 1024.0;
  else if (*end == 'g' || *end == 'G')
    v *= 1024.0 * 1024.0 * 1024.0;
  return (size_t)v;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(hk_status st, const char *what) {
  fprintf(stderr, "hkbench: %s: %s: %s\n", what, hk_strerror(st),
          hk_last_error());
  exit(1);
}

static void fill(float *p, size_t count, int rank) {
  for (size_t i = 0; i < count; i++)
    p[i] = (float)((rank + 1) * (int)(i % 13 + 1));
}

static long check(const float *p, size_t count, int n) {
  long wrong = 0;
  int tri = n * (n + 1) / 2;
  for (size_t i = 0; i < count; i++)
    wrong += p[i] != (float)(tri * (int)(i % 13 + 1));
  return wrong;
}

static void usage(void) {
  fprintf(stderr, "usage: hkrun -np N hkbench [-b min] [-e max] [-f factor] "
                  "[-n iters] [-w warmup] [-B budget] [-c 0|1] [--csv FILE]\n"
                  "sizes in bytes, K/M/G suffixes accepted\n");
  exit(2);
}

int main(int argc, char **argv) {
  size_t minb = 8, maxb = 256u << 20, budget = 1u << 30;
  int factor = 4, niters = 50, nwarm = 5, do_check = 1;
  const char *csv_path = NULL;
  static const struct option longopts[] = {{"csv", required_argument, 0, 'C'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "b:e:f:n:w:B:c:h", longopts, NULL)) !=
         -1) {
    switch (opt) {
    case 'b':
      minb = parse_size(optarg);
      break;
    case 'e':
      maxb = parse_size(optarg);
      break;
    case 'f':
      factor = atoi(optarg);
      break;
    case 'n':
      niters = atoi(optarg);
      break;
    case 'w':
      nwarm = atoi(optarg);
      break;
    case 'B':
      budget = parse_size(optarg);
      break;
    case 'c':
      do_check = atoi(optarg);
      break;
    case 'C':
      csv_path = optarg;
      break;
    default:
      usage();
    }
  }
  if (minb < sizeof(float))
    minb = sizeof(float);
  if (factor < 2)
    factor = 2;
  if (niters < 1)
    niters = 1;
  hk_status st = hk_init();
  if (st != HK_OK)
    die(st, "hk_init");
  const int rank = hk_rank(), n = hk_size();
  size_t maxcount = maxb / sizeof(float);
  float *buf = mmap(NULL, maxcount * sizeof(float) + 4096,
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    fprintf(stderr, "hkbench: cannot map %zu bytes\n", maxb);
    return 1;
  }
  madvise(buf, maxcount * sizeof(float), MADV_HUGEPAGE);
  memset(buf, 0, maxcount * sizeof(float)); /* fault pages in before timing */
  double *t = malloc(sizeof(double) * (size_t)(niters + 5));
  FILE *csv = NULL;
  if (rank == 0) {
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
      perror(csv_path);
      return 1;
    }
    printf("# peer=hk nranks=%d op=allreduce type=float redop=sum inplace=1 "
           "api=public\n",
           n);
    printf("# %10s %12s %6s %6s %12s %12s %12s %8s %6s\n", "size(B)", "count",
           "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
           "iters");
    if (csv)
      fprintf(csv, "size_bytes,count,type,redop,time_us,algbw_gbs,busbw_gbs,"
                   "wrong,iters,nranks\n");
  }
  for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
    size_t count = bytes / sizeof(float);
    bytes = count * sizeof(float);
    int iters = (int)(budget / bytes < (size_t)niters ? budget / bytes
                                                      : (size_t)niters);
    if (iters < 5)
      iters = 5;
    int warm = iters / 5 + 1 < nwarm ? iters / 5 + 1 : nwarm;
    long wrong = 0;
    for (int it = -warm; it < iters; it++) {
      fill(buf, count, rank);
      if ((st = hk_barrier()) != HK_OK)
        die(st, "hk_barrier");
      double t0 = now();
      if ((st = hk_allreduce("hkbench", buf, buf, count, HK_FLOAT32, HK_SUM)) !=
          HK_OK)
        die(st, "hk_allreduce");
      double dt = now() - t0;
      if (do_check && it >= 0)
        wrong += check(buf, count, n);
      if ((st = hk_allreduce("hkbench.time", &dt, &dt, 1, HK_FLOAT64,
                             HK_MAX)) != HK_OK)
        die(st, "hk_allreduce(time)");
      if (it >= 0)
        t[it] = dt;
    }
    if ((st = hk_allreduce("hkbench.wrong", &wrong, &wrong, 1, HK_INT64,
                           HK_SUM)) != HK_OK)
      die(st, "hk_allreduce(wrong)");
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med =
        iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
    double algbw = (double)bytes / med / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    if (rank == 0) {
      printf("  %10zu %12zu %6s %6s %12.2f %12.3f %12.3f %8ld %6d\n", bytes,
             count, "float", "sum", med * 1e6, algbw, busbw, wrong, iters);
      fflush(stdout);
      if (csv)
        fprintf(csv, "%zu,%zu,float,sum,%.3f,%.4f,%.4f,%ld,%d,%d\n", bytes,
                count, med * 1e6, algbw, busbw, wrong, iters, n);
    }
    if (bytes > maxb / (size_t)factor)
      break;
  }
  if (csv)
    fclose(csv);
  st = hk_shutdown();
  if (st != HK_OK)
    die(st, "hk_shutdown");
  return 0;
}
