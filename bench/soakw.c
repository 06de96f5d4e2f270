/*
 * soakw.c - hksoakw, the program bench/soak.sh runs under hkrun (issue
 * 13's soak): STEPS steps of TENSORS allreduces each, every step's results
 * checked, the process's resident set and descriptors reported as it goes.
 *
 *   hkrun -np 8 hksoakw STEPS TENSORS EVERY
 *
 * Step s: tensor i ("soak.i", 1 + (i * 97) % 2048 float32 elements) holds
 * rank + 1 + (s + i) % 7 everywhere on every rank, summed: the result is
 * size * (size + 1) / 2 + size * ((s + i) % 7), exact in float32. Tensors
 * are submitted at once (hk fuses them) and waited on in order.
 *
 * Every EVERY steps (and after the last) each rank prints
 *   "soak rank R step S rss_kb X hwm_kb Y fds Z t T"
 * (VmRSS and VmHWM from /proc/self/status, entries of /proc/self/fd, T the
 * seconds since hk_init) and at the end "soak rank R done steps S wrong W"
 * (W: elements that differed). An error prints "soak rank R error at
 * step S: STATUS: message" and exits 1.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hk/hk.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0) {
      v = atol(line + n);
      break;
    }
  if (f)
    fclose(f);
  return v;
}

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n - 1; /* the one opendir holds */
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: hksoakw STEPS TENSORS EVERY\n");
    return 2;
  }
  long steps = atol(argv[1]), every = atol(argv[3]);
  int k = atoi(argv[2]);
  if (steps < 1 || k < 1 || every < 1)
    return 2;
  hk_status st = hk_init();
  if (st != HK_OK) {
    printf("soak rank ? error at step 0: %s: %s\n", hk_strerror(st),
           hk_last_error());
    return 1;
  }
  const int rank = hk_rank(), size = hk_size();
  const double t0 = now();
  size_t *len = malloc((size_t)k * sizeof *len), total = 0;
  char(*name)[24] = malloc((size_t)k * sizeof *name);
  for (int i = 0; i < k; i++) {
    len[i] = 1 + ((size_t)i * 97) % 2048;
    total += len[i];
    snprintf(name[i], sizeof name[i], "soak.%d", i);
  }
  float *buf = malloc(total * sizeof *buf);
  hk_handle *h = malloc((size_t)k * sizeof *h);
  long wrong = 0;
  for (long s = 0; s < steps; s++) {
    float *p = buf;
    int posted = 0;
    for (int i = 0; i < k && st == HK_OK; i++) {
      float v = (float)(rank + 1 + (s + i) % 7);
      for (size_t j = 0; j < len[i]; j++)
        p[j] = v;
      st = hk_allreduce_async(name[i], p, p, len[i], HK_FLOAT32, HK_SUM, &h[i]);
      posted += st == HK_OK;
      p += len[i];
    }
    for (int i = 0; i < posted; i++) {
      hk_status w = hk_wait(h[i]);
      if (st == HK_OK)
        st = w;
    }
    if (st != HK_OK) {
      printf("soak rank %d error at step %ld: %s: %s\n", rank, s,
             hk_strerror(st), hk_last_error());
      return 1;
    }
    p = buf;
    for (int i = 0; i < k; i++) {
      float want = (float)(size * (size + 1) / 2 + size * ((s + i) % 7));
      for (size_t j = 0; j < len[i]; j++)
        wrong += p[j] != want;
      p += len[i];
    }
    if ((s + 1) % every == 0 || s + 1 == steps) {
      printf("soak rank %d step %ld rss_kb %ld hwm_kb %ld fds %d t %.1f\n",
             rank, s + 1, status_kb("VmRSS:"), status_kb("VmHWM:"), count_fds(),
             now() - t0);
      fflush(stdout);
    }
  }
  st = hk_shutdown();
  printf("soak rank %d done steps %ld wrong %ld%s%s\n", rank, steps, wrong,
         st == HK_OK ? "" : " shutdown: ", st == HK_OK ? "" : hk_last_error());
  free(buf);
  free(h);
  free(len);
  free(name);
  return st == HK_OK && wrong == 0 ? 0 : 1;
}
