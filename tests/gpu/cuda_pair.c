/*
 * cuda_pair.c - two processes on the same GPU in one NCCL communicator,
 * through the cuda backend's ops: does NCCL allow it, and when it refuses,
 * does the refusal reach hk as an error (not a hang)?
 *
 *   cuda_pair [--hostid] [--timeout S]
 *
 * The parent forks two ranks before any CUDA call (so neither inherits a
 * CUDA context); rank 0 makes the unique id and passes it through a pipe.
 * Each rank opens device 0, joins a 2-rank non-blocking communicator,
 * polls it, and allreduces 1 Mi float32 (rank r contributes r + 1: every
 * element must be 3). --hostid gives each rank its own NCCL_HOSTID, so
 * NCCL takes them for two hosts talking over sockets (set
 * NCCL_SOCKET_IFNAME=lo too); NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30+)
 * is NCCL's own switch, read by NCCL from the environment.
 *
 * Prints one line per rank and a verdict: "works" (both ranks' allreduce
 * correct) or "refused" (NCCL's reason, e.g. "Duplicate GPU detected").
 * Exit: 0 for either verdict within the timeout (default 30 s; a rank
 * that waits for a refused peer until its deadline aborts and counts as
 * refused); 1 for a wrong result, a crash, both ranks stuck, or a rank
 * the parent had to kill; 77 without a usable GPU (1 under
 * HK_TEST_GPU=1).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "device/device.h"

enum { WORKS = 0, FAILED = 1, REFUSED = 2, HUNG = 3, NO_GPU = 77 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec t = {0, 200 * 1000};
  nanosleep(&t, NULL);
}

/* Polls c until not pending: REFUSED (NCCL's error printed), HUNG past
 * the deadline, else WORKS. */
static int settle(const hk_device_ops *ops, hk_dev_comm c, int rank,
                  double deadline, const char *what) {
  for (;;) {
    int pending = 0;
    if (ops->comm_async_error(c, &pending) != HK_OK) {
      printf("rank %d: %s: %s\n", rank, what, hk_last_error());
      return REFUSED;
    }
    if (!pending)
      return WORKS;
    if (now_s() > deadline) {
      printf("rank %d: %s: still pending at the deadline\n", rank, what);
      return HUNG;
    }
    nap();
  }
}

static int rank_main(int rank, int fd, int hostid, double timeout_s) {
  double deadline = now_s() + timeout_s - 3;
  if (hostid) {
    char h[32];
    snprintf(h, sizeof h, "hk-pair-host-%d", rank);
    setenv("NCCL_HOSTID", h, 1);
  }
  hk_config cfg;
  if (hk_config_load(&cfg) != HK_OK) {
    printf("rank %d: %s\n", rank, hk_last_error());
    return FAILED;
  }
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.device_index = cfg.gpu >= 0 ? cfg.gpu : 0;
  o.job_rank = rank;
  hk_device *dev;
  if (hk_device_open("cuda", &o, &dev) != HK_OK) {
    printf("rank %d: no usable GPU: %s\n", rank, hk_last_error());
    return NO_GPU;
  }
  const hk_device_ops *ops = dev->ops;
  uint8_t id[HK_DEV_UID_BYTES];
  if (rank == 0) {
    if (ops->comm_unique_id(dev, id) != HK_OK) {
      printf("rank 0: %s\n", hk_last_error());
      return FAILED;
    }
    if (write(fd, id, sizeof id) != (ssize_t)sizeof id)
      return FAILED;
  } else {
    size_t got = 0;
    while (got < sizeof id) {
      ssize_t r = read(fd, id + got, sizeof id - got);
      if (r <= 0) {
        printf("rank 1: no unique id from rank 0\n");
        return FAILED;
      }
      got += (size_t)r;
    }
  }
  hk_dev_comm c;
  if (ops->comm_init(dev, id, 2, rank, &c) != HK_OK) {
    printf("rank %d: comm_init: %s\n", rank, hk_last_error());
    return REFUSED;
  }
  int v = settle(ops, c, rank, deadline, "comm_init");
  if (v != WORKS) {
    ops->comm_abort(c);
    return v;
  }
  const size_t n = 1u << 20;
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank + 1);
  void *d;
  hk_dev_stream s;
  hk_dev_event e;
  if (ops->mem_alloc(dev, n * 4, &d) != HK_OK ||
      ops->stream_create(dev, &s) != HK_OK ||
      ops->event_create(dev, &e) != HK_OK ||
      ops->memcpy_async(dev, d, h, n * 4, s) != HK_OK ||
      ops->comm_allreduce(c, d, d, n, HK_FLOAT32, HK_SUM, s) != HK_OK) {
    printf("rank %d: %s\n", rank, hk_last_error());
    ops->comm_abort(c);
    return FAILED;
  }
  if ((v = settle(ops, c, rank, deadline, "allreduce")) != WORKS) {
    ops->comm_abort(c);
    return v;
  }
  if (ops->memcpy_async(dev, h, d, n * 4, s) != HK_OK ||
      ops->event_record(dev, e, s) != HK_OK) {
    printf("rank %d: %s\n", rank, hk_last_error());
    ops->comm_abort(c);
    return FAILED;
  }
  int done = 0;
  while (!done) {
    if (ops->event_query(dev, e, &done) != HK_OK) {
      printf("rank %d: allreduce: %s\n", rank, hk_last_error());
      ops->comm_abort(c);
      return FAILED;
    }
    if (!done && now_s() > deadline) {
      printf("rank %d: allreduce not done at the deadline\n", rank);
      ops->comm_abort(c);
      return HUNG;
    }
    if (!done)
      nap();
  }
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++)
    wrong += h[i] != 3.0f;
  printf("rank %d: allreduce of %zu float32: %zu wrong\n", rank, n, wrong);
  ops->comm_destroy(c);
  ops->event_destroy(dev, e);
  ops->stream_destroy(dev, s);
  ops->mem_free(dev, d);
  hk_device_close(dev);
  free(h);
  return wrong ? FAILED : WORKS;
}

int main(int argc, char **argv) {
  int hostid = 0;
  double timeout_s = 30;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--hostid"))
      hostid = 1;
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
      timeout_s = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: cuda_pair [--hostid] [--timeout S]\n");
      return 2;
    }
  }
  hk_config cfg;
  if (hk_config_load(&cfg) != HK_OK) {
    fprintf(stderr, "cuda_pair: %s\n", hk_last_error());
    return 1;
  }
  const char *multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  printf("cuda_pair: 2 processes on GPU %d, NCCL_HOSTID per rank: %s, "
         "NCCL_MULTI_RANK_GPU_ENABLE=%s\n",
         cfg.gpu >= 0 ? cfg.gpu : 0, hostid ? "yes" : "no",
         multi ? multi : "unset");
  fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    return 1;
  }
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      perror("fork");
      return 1;
    }
    if (pid[r] == 0) {
      close(fds[r == 0 ? 0 : 1]);
      int v = rank_main(r, fds[r == 0 ? 1 : 0], hostid, timeout_s);
      fflush(stdout);
      _exit(v);
    }
  }
  close(fds[0]);
  close(fds[1]);
  int code[2] = {-1, -1}, left = 2;
  double end = now_s() + timeout_s;
  while (left > 0) {
    for (int r = 0; r < 2; r++) {
      int status;
      if (code[r] != -1)
        continue;
      pid_t p = waitpid(pid[r], &status, WNOHANG);
      if (p == pid[r]) {
        code[r] =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        left--;
      } else if (p < 0 && errno != EINTR) {
        code[r] = FAILED;
        left--;
      }
    }
    if (left > 0 && now_s() > end) {
      for (int r = 0; r < 2; r++)
        if (code[r] == -1) {
          kill(pid[r], SIGKILL);
          waitpid(pid[r], NULL, 0);
          code[r] = 128 + SIGKILL;
        }
      break;
    }
    if (left > 0)
      nap();
  }
  if (code[0] == NO_GPU || code[1] == NO_GPU) {
    printf("cuda_pair: skipped: no usable GPU\n");
    return cfg.test_gpu ? 1 : 77;
  }
  if (code[0] == WORKS && code[1] == WORKS) {
    printf("cuda_pair: works: NCCL ran one communicator of 2 processes on "
           "one GPU, allreduce correct\n");
    return 0;
  }
  /* a refusal: NCCL's error on at least one rank; the other refused too,
   * or gave up at its deadline and aborted (HUNG) */
  int refused = code[0] == REFUSED || code[1] == REFUSED, bad = 0;
  for (int r = 0; r < 2; r++)
    bad |= code[r] != WORKS && code[r] != REFUSED && code[r] != HUNG;
  if (refused && !bad) {
    printf("cuda_pair: refused: NCCL does not run 2 processes of one "
           "communicator on one GPU here (the reason is above), and hk saw "
           "the error\n");
    return 0;
  }
  printf("cuda_pair: FAILED: rank exit codes %d and %d (1 error, 3 stuck "
         "until its deadline, 137 killed at the timeout, >128 signal)\n",
         code[0], code[1]);
  return 1;
}
