/*
 * app.c - a user's C program: includes only <hk/hk.h>, links hk (shared
 * or static, found by find_package, pkg-config or add_subdirectory).
 * Each rank allreduces [1, 2, 3, 4] * (rank + 1) and checks the sums;
 * then it checks that nothing loaded MPI (a job on one host must not).
 * Prints "app_c: rank R of N ok, hk V.M, mpi not loaded" on success.
 */
#include <hk/hk.h>
#include <stdio.h>
#include <string.h>

/* 1 if a library whose name contains `what` is mapped into this
 * process. */
static int mapped(const char *what) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f))
    found = strstr(line, what) != NULL;
  if (f)
    fclose(f);
  return found;
}

int main(void) {
  if (hk_init() != HK_OK) {
    fprintf(stderr, "app_c: hk_init: %s\n", hk_last_error());
    return 1;
  }
  int rank = hk_rank(), size = hk_size();
  float x[4];
  for (int i = 0; i < 4; i++)
    x[i] = (float)((i + 1) * (rank + 1));
  if (hk_allreduce("x", x, x, 4, HK_FLOAT32, HK_SUM) != HK_OK) {
    fprintf(stderr, "app_c: hk_allreduce: %s\n", hk_last_error());
    return 1;
  }
  float ranks = (float)(size * (size + 1) / 2);
  for (int i = 0; i < 4; i++)
    if (x[i] != (float)(i + 1) * ranks) {
      fprintf(stderr, "app_c: x[%d] = %g, expected %g\n", i, x[i],
              (double)((float)(i + 1) * ranks));
      return 1;
    }
  int mpi = mapped("libmpi") || mapped("libhk_mpi");
  printf("app_c: rank %d of %d ok, hk %d.%d, mpi %s\n", rank, size,
         HK_VERSION_MAJOR, HK_VERSION_MINOR, mpi ? "loaded" : "not loaded");
  fflush(stdout);
  return hk_shutdown() == HK_OK && !mpi ? 0 : 1;
}
