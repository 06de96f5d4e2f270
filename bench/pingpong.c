/*
 * pingpong.c - hkpingpong: TCP ping-pong between two hosts, the alpha
 * (latency) and beta (seconds per byte) of the path hk's transport uses,
 * measured without any collective on top (bench/netbed_bench.sh runs it
 * between two hosts of a netns bed, and inside one host).
 *
 *   hkpingpong serve ADDR          listen on ADDR at an ephemeral port, print
 *                                  "listening PORT", answer one client, exit
 *   hkpingpong ping ADDR PORT [-b min] [-e max] [-f factor] [-n iters]
 *                                  [-t seconds per size]
 *
 * For each size (bytes, from -b 1 to -e 16M, times -f 4) the client sends
 * that many bytes and the server sends them back, -n times (default 50,
 * fewer when -t 2 s of round trips have passed; at least 3 after one
 * untimed warm-up). One-way time = round trip / 2. Output, one line per
 * size (times in microseconds):
 *
 *   #  size(B)  iters  min_oneway(us)  median_oneway(us)
 *
 * TCP_NODELAY on both ends, as hk's connections. Exits 0, or 1 with a
 * message on stderr.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "hkpingpong: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      die("send");
    c += k;
    n -= (size_t)k;
  }
}

/* Returns 0, or -1 at EOF before the first byte. */
static int recv_all(int fd, void *p, size_t n) {
  char *c = p;
  size_t got = 0;
  while (got < n) {
    ssize_t k = recv(fd, c + got, n - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k == 0 && got == 0)
      return -1;
    if (k <= 0) {
      errno = k == 0 ? ECONNRESET : errno;
      die("recv");
    }
    got += (size_t)k;
  }
  return 0;
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'k' || *end == 'K')
    v *= 1024;
  else if (*end == 'm' || *end == 'M')
    v *= 1024 * 1024;
  if (v < 1 || v > 1e10) {
    fprintf(stderr, "hkpingpong: bad size '%s'\n", s);
    exit(1);
  }
  return (size_t)v;
}

static int serve(const char *addr) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  if (l < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
    die("socket/address");
  if (bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 1) != 0)
    die("bind/listen");
  socklen_t len = sizeof sa;
  getsockname(l, (struct sockaddr *)&sa, &len);
  printf("listening %u\n", ntohs(sa.sin_port));
  fflush(stdout);
  int fd = accept(l, NULL, NULL);
  if (fd < 0)
    die("accept");
  close(l);
  nodelay(fd);
  char *buf = NULL;
  size_t cap = 0;
  for (;;) {
    uint64_t hdr[2]; /* size, round trips */
    if (recv_all(fd, hdr, sizeof hdr) != 0 || hdr[0] == 0)
      break;
    if (hdr[0] > cap) {
      free(buf);
      cap = hdr[0];
      buf = malloc(cap);
      if (!buf)
        die("malloc");
    }
    for (uint64_t i = 0; i < hdr[1]; i++) {
      if (recv_all(fd, buf, hdr[0]) != 0)
        die("recv");
      send_all(fd, buf, hdr[0]);
    }
  }
  free(buf);
  close(fd);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int ping(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: hkpingpong ping ADDR PORT [-b min] [-e max] "
                    "[-f factor] [-n iters] [-t seconds]\n");
    return 1;
  }
  size_t minb = 1, maxb = 16u << 20;
  int factor = 4, iters = 50;
  double budget = 2.0;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b"))
      minb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e"))
      maxb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f"))
      factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      budget = atof(argv[i + 1]);
  }
  if (factor < 2 || iters < 3) {
    fprintf(stderr, "hkpingpong: -f must be >= 2 and -n >= 3\n");
    return 1;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)atoi(argv[3]))};
  if (fd < 0 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
    die("socket/address");
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    die("connect");
  nodelay(fd);
  char *buf = calloc(1, maxb);
  double *t = malloc((size_t)iters * sizeof *t);
  if (!buf || !t)
    die("malloc");
  printf("# hkpingpong %s:%s one-way = round trip / 2\n", argv[2], argv[3]);
  printf("# %12s %6s %16s %18s\n", "size(B)", "iters", "min_oneway(us)",
         "median_oneway(us)");
  for (size_t s = minb; s <= maxb; s *= (size_t)factor) {
    /* one untimed round trip, then up to iters timed ones within budget */
    uint64_t hdr[2] = {s, 1};
    send_all(fd, hdr, sizeof hdr);
    send_all(fd, buf, s);
    recv_all(fd, buf, s);
    int n = 0;
    double start = now();
    while (n < iters && (n < 3 || now() - start < budget)) {
      hdr[1] = 1;
      send_all(fd, hdr, sizeof hdr);
      double t0 = now();
      send_all(fd, buf, s);
      if (recv_all(fd, buf, s) != 0)
        die("recv");
      t[n++] = (now() - t0) / 2;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    printf("  %12zu %6d %16.2f %18.2f\n", s, n, t[0] * 1e6, t[n / 2] * 1e6);
    fflush(stdout);
    if (s > maxb / (size_t)factor)
      break;
  }
  uint64_t end[2] = {0, 0};
  send_all(fd, end, sizeof end);
  close(fd);
  free(buf);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "serve"))
    return serve(argv[2]);
  if (argc >= 2 && !strcmp(argv[1], "ping"))
    return ping(argc, argv);
  fprintf(stderr, "usage: hkpingpong serve ADDR | hkpingpong ping ADDR PORT "
                  "[-b min] [-e max] [-f factor] [-n iters] [-t seconds]\n");
  return 1;
}
