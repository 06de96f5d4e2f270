/* bench/peers/mpi_allreduce_bench.c - hk's copy of the peer benchmark
 * ../shared/peers/mpi_allreduce_bench.c (the machine's shared peer
 * harness, see ../shared/peers/README.md), kept here so that
 * bench/shm_bench.sh builds and runs everything it measures from this
 * repository. Copied unchanged but for this paragraph and clang-format's
 * layout (the method, the output columns and the checks are the
 * original's).
 */
/* mpi_allreduce_bench.c - MPI_Allreduce sweep in the style of nccl-tests
 * all_reduce_perf.
 *
 * float32 sum, sizes -b..-e bytes stepping x -f.  Per size: warm-up, then
 * `iters` timed iterations, each preceded by an (untimed) MPI_Barrier; the time
 * of one iteration is the max over ranks; the reported time is the median over
 * iterations. algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests
 * convention). In-place (default, like Horovod's fusion buffer): the buffer is
 * re-initialised before every iteration (untimed) so each result can be checked
 * exactly.
 *
 * Build: mpicc -O2 -o mpi_allreduce_bench mpi_allreduce_bench.c
 * Run:   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_allreduce_bench
 * [opts] Opts:  -b min  -e max  -f factor  -n iters  -w warmup  -B byte budget
 * per size -i 0|1 (in-place, default 1)   sizes accept K/M/G suffixes.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'k':
  case 'K':
    v *= 1024.0;
    break;
  case 'm':
  case 'M':
    v *= 1024.0 * 1024.0;
    break;
  case 'g':
  case 'G':
    v *= 1024.0 * 1024.0 * 1024.0;
    break;
  }
  return (size_t)v;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Values are small integers so any summation order is exact in float32. */
static void fill(float *p, size_t count, int rank) {
  for (size_t i = 0; i < count; i++)
    p[i] = (float)((rank + 1) * (int)(i % 13 + 1));
}

static long check(const float *p, size_t count, int nranks) {
  long wrong = 0;
  int tri = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < count; i++)
    if (p[i] != (float)(tri * (int)(i % 13 + 1)))
      wrong++;
  return wrong;
}

int main(int argc, char **argv) {
  size_t minb = 8, maxb = 256u << 20, budget = 1u << 30;
  int factor = 4, niters = 50, nwarm = 5, inplace = 1, opt;
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  while ((opt = getopt(argc, argv, "b:e:f:n:w:B:i:")) != -1) {
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
    case 'i':
      inplace = atoi(optarg);
      break;
    default:
      if (rank == 0)
        fprintf(stderr,
                "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w "
                "warmup] [-B budget] [-i 0|1]\n",
                argv[0]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (minb < sizeof(float))
    minb = sizeof(float);
  if (factor < 2)
    factor = 2;

  size_t maxcount = maxb / sizeof(float);
  float *buf =
      aligned_alloc(4096, (maxcount * sizeof(float) + 4095) / 4096 * 4096);
  float *sendbuf = inplace
                       ? NULL
                       : aligned_alloc(4096, (maxcount * sizeof(float) + 4095) /
                                                 4096 * 4096);
  double *t = malloc(sizeof(double) * (niters > 0 ? niters : 1));
  if (!buf || (!inplace && !sendbuf) || !t) {
    fprintf(stderr, "alloc failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(buf, 0, maxcount * sizeof(float)); /* fault pages in before timing */
  if (sendbuf)
    fill(sendbuf, maxcount, rank);

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl)
      *nl = 0;
    nl = strchr(lib, ',');
    if (nl)
      *nl = 0;
    printf("# peer=mpi lib=\"%s\" nranks=%d op=allreduce type=float redop=sum "
           "inplace=%d iters<=%d warmup<=%d budget=%zu\n",
           lib, nranks, inplace, niters, nwarm, budget);
    printf("#%11s %12s %6s %6s %12s %12s %12s %8s %6s\n", "size(B)", "count",
           "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
           "iters");
    fflush(stdout);
  }

  for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    int iters = niters;
    if ((size_t)iters * bytes > budget)
      iters = (int)(budget / bytes);
    if (iters < 5)
      iters = niters < 5 ? niters : 5;
    int warm = nwarm < iters / 5 + 1 ? nwarm : iters / 5 + 1;
    void *src = inplace ? MPI_IN_PLACE : (void *)sendbuf;

    for (int it = -warm; it < iters; it++) {
      if (inplace)
        fill(buf, count, rank);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(src, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t1 = MPI_Wtime();
      if (it >= 0)
        t[it] = t1 - t0;
    }
    long wrong = check(buf, count, nranks), allwrong = 0;
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &allwrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(t, iters, sizeof(double), cmp_double);
      double med =
          iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
      double algbw = (double)bytes / med / 1e9;
      double busbw = algbw * 2.0 * (nranks - 1) / nranks;
      printf(" %11zu %12zu %6s %6s %12.2f %12.3f %12.3f %8ld %6d\n", bytes,
             count, "float", "sum", med * 1e6, algbw, busbw, allwrong, iters);
      fflush(stdout);
    }
  }
  free(buf);
  free(sendbuf);
  free(t);
  MPI_Finalize();
  return 0;
}
