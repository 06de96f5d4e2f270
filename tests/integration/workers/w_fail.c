/*
 * w_fail MODE - failure scenarios driven by the tests:
 *   kill   : every rank allreduces 16 MiB in a loop and prints
 *            "ready pid=<pid>" after the first one; the test kills one rank
 *            with SIGKILL. Survivors print the error they got and exit 1.
 *   early  : rank 0 exits with status 3 right after hk_init and a
 *            barrier; the others allreduce and must get HK_ERR_PEER_LOST
 *            naming rank 0 (C6).
 *   shutdown: rank 1 calls hk_shutdown while rank 0 waits on a tensor rank 1
 *            never submits: rank 0's wait ends with HK_ERR_SHUTDOWN naming
 *            rank 1, later submits fail at once, both exit 0.
 *   leave  : rank 0 calls hk_shutdown with a tensor still pending and waits
 *            on its handle afterwards: HK_ERR_SHUTDOWN, no leak.
 *   stall  : case C1: rank 1 submits 'grad.B' where the others submit
 *            'grad.b'; each rank prints what its wait returned and exits 1
 *            if it was an error (the stall shutdown), 0 otherwise.
 *   vanish : after a first allreduce, rank 2 prints "vanishing pid=<pid>"
 *            and returns 0 from main without hk_shutdown while the others
 *            wait in a second one; each of them prints what its wait
 *            returned and exits 1.
 *   quick  : one allreduce, hk_shutdown, "quick ok", exit 0.
 *   rogue  : rank 1 connects to hkrun's rendezvous without the secret and
 *            checks it is refused (the connection is closed), then every
 *            rank allreduces and checks the result.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wcommon.h"

static int mode_kill(int rank) {
  size_t n = 4u << 20;
  float *g = malloc(n * sizeof *g);
  for (size_t i = 0; i < n; i++)
    g[i] = 1.0f;
  for (long it = 0;; it++) {
    hk_status st = hk_allreduce("big", g, g, n, HK_FLOAT32, HK_AVERAGE);
    if (st != HK_OK) {
      fprintf(stderr, "rank %d: allreduce failed: %s: %s\n", rank,
              hk_strerror(st), hk_last_error());
      return 1;
    }
    if (it == 0) {
      printf("ready pid=%d\n", (int)getpid());
      fflush(stdout);
    }
  }
}

static int mode_early(int rank) {
  /* The barrier first: rank 0's hk_init can return while another rank's is
   * still finishing, and an exit then fails that hk_init (hkrun's abort)
   * instead of the allreduce this mode is about. The barrier itself may
   * already meet the lost peer on the others. */
  hk_status st = hk_barrier();
  if (rank == 0)
    exit(3);
  int32_t v = rank;
  if (st == HK_OK)
    st = hk_allreduce("x", &v, &v, 1, HK_INT32, HK_SUM);
  fprintf(stderr, "rank %d: allreduce gave %s: %s\n", rank, hk_strerror(st),
          hk_last_error());
  HKT_CHECK(st == HK_ERR_PEER_LOST, "expected peer lost");
  HKT_CHECK(strstr(hk_last_error(), "rank 0"), "message does not name rank 0");
  return 1;
}

static int mode_shutdown(int rank) {
  if (rank == 1) {
    HKT_OK(hk_shutdown());
    printf("shutdown ok\n");
    return 0;
  }
  float x[4] = {0};
  hk_status st = hk_allreduce("only.on.rank0", x, x, 4, HK_FLOAT32, HK_SUM);
  HKT_CHECK(st == HK_ERR_SHUTDOWN, "expected shutdown, got %s: %s",
            hk_strerror(st), hk_last_error());
  HKT_CHECK(strstr(hk_last_error(), "rank 1 called hk_shutdown") &&
                strstr(hk_last_error(), "only.on.rank0"),
            "message: %s", hk_last_error());
  hk_handle h;
  st = hk_allreduce_async("later", x, x, 4, HK_FLOAT32, HK_SUM, &h);
  HKT_CHECK(st == HK_ERR_SHUTDOWN, "submit after shutdown gave %s",
            hk_strerror(st));
  HKT_OK(hk_shutdown());
  printf("shutdown ok\n");
  return 0;
}

static int mode_leave(int rank) {
  float x[4] = {0}, y = 1;
  hk_handle h = NULL;
  /* rank 0's tensor is queued before "sync", so it is in flight (rank 1
   * never submits it) by the time "sync" completes and anyone shuts down */
  if (rank == 0)
    HKT_OK(hk_allreduce_async("left.pending", x, x, 4, HK_FLOAT32, HK_SUM, &h));
  HKT_OK(hk_allreduce("sync", &y, &y, 1, HK_FLOAT32, HK_SUM));
  HKT_OK(hk_shutdown());
  if (rank == 0) {
    hk_status st = hk_wait(h);
    HKT_CHECK(st == HK_ERR_SHUTDOWN && strstr(hk_last_error(), "left.pending"),
              "wait after shutdown gave %s: %s", hk_strerror(st),
              hk_last_error());
  }
  printf("leave ok\n");
  return 0;
}

static int mode_stall(int rank) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  printf("submitting pid=%d\n", (int)getpid());
  fflush(stdout);
  hk_status st = hk_allreduce(rank == 1 ? "grad.B" : "grad.b", x, x, 8,
                              HK_FLOAT32, HK_SUM);
  fprintf(stderr, "rank %d: wait gave %s: %s\n", rank, hk_strerror(st),
          hk_last_error());
  return st == HK_OK ? 0 : 1;
}

static int mode_vanish(int rank) {
  float x = 1;
  HKT_OK(hk_allreduce("before", &x, &x, 1, HK_FLOAT32, HK_SUM));
  if (rank == 2) {
    printf("vanishing pid=%d\n", (int)getpid());
    return 0; /* leaves without hk_shutdown */
  }
  hk_status st = hk_allreduce("after", &x, &x, 1, HK_FLOAT32, HK_SUM);
  fprintf(stderr, "rank %d: allreduce gave %s: %s\n", rank, hk_strerror(st),
          hk_last_error());
  return 1;
}

static int mode_quick(int rank, int np) {
  int32_t v = rank;
  HKT_OK(hk_allreduce("sum", &v, &v, 1, HK_INT32, HK_SUM));
  HKT_CHECK(v == np * (np - 1) / 2, "wrong sum %d", (int)v);
  HKT_OK(hk_shutdown());
  printf("quick ok\n");
  return 0;
}

static int mode_rogue(int rank, int np) {
  if (rank == 1) {
    const char *rdv = getenv("HK_RENDEZVOUS");
    const char *colon = rdv ? strrchr(rdv, ':') : NULL;
    HKT_CHECK(colon, "HK_RENDEZVOUS not set");
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    HKT_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0,
              "connect to the rendezvous");
    char nonce[32], junk[64];
    memset(junk, 0x5a, sizeof junk);
    HKT_CHECK(recv(fd, nonce, sizeof nonce, MSG_WAITALL) == 32, "no nonce");
    HKT_CHECK(send(fd, junk, sizeof junk, MSG_NOSIGNAL) == 64, "send");
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    HKT_CHECK(r <= 0, "the rendezvous answered a connection without the "
                      "secret");
    close(fd);
    printf("rogue connection refused\n");
  }
  int64_t v[3] = {rank, 1, -rank};
  HKT_OK(hk_allreduce("after.rogue", v, v, 3, HK_INT64, HK_SUM));
  HKT_CHECK(v[0] == (int64_t)np * (np - 1) / 2 && v[1] == np && v[2] == -v[0],
            "wrong sum after the rogue connection");
  HKT_OK(hk_shutdown());
  printf("rogue ok\n");
  return 0;
}

int main(int argc, char **argv) {
  HKT_CHECK(argc == 2,
            "usage: w_fail kill|early|shutdown|leave|stall|vanish|quick|rogue");
  HKT_OK(hk_init());
  int rank = hk_rank();
  if (!strcmp(argv[1], "kill"))
    return mode_kill(rank);
  if (!strcmp(argv[1], "early"))
    return mode_early(rank);
  if (!strcmp(argv[1], "shutdown"))
    return mode_shutdown(rank);
  if (!strcmp(argv[1], "leave"))
    return mode_leave(rank);
  if (!strcmp(argv[1], "stall"))
    return mode_stall(rank);
  if (!strcmp(argv[1], "quick"))
    return mode_quick(rank, hk_size());
  if (!strcmp(argv[1], "vanish"))
    return mode_vanish(rank);
  if (!strcmp(argv[1], "rogue"))
    return mode_rogue(rank, hk_size());
  HKT_CHECK(0, "unknown mode %s", argv[1]);
}
