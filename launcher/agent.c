/*
 * agent.c - an hkrun agent joining a rendezvous held elsewhere (see
 * agent.h). The connection is set up with blocking calls before the
 * loop runs; on the loop a uv_poll watches it, and each frame from the
 * rendezvous (small, sent whole) is read with a bounded blocking read.
 */
#include "launcher/agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "coordinator/wire.h"
#include "launcher/bind_masks.h"
#include "launcher/keepalive.h"
#include "launcher/output.h"
#include "launcher/spawn.h"

#define KILL_AFTER_TERM_MS 2000
#define LOST_KILL_AFTER_MS 500
#define RETRY_MS 100 /* between refused connection attempts */

typedef struct agent {
  uv_loop_t loop;
  const hkrun_args *args;
  hk_workers workers;
  int have_workers;
  int fd; /* the connection to the rendezvous, or -1 */
  uv_poll_t poll;
  uv_signal_t sig[3];
  uv_timer_t term_timer, kill_timer;
  uint64_t kill_after_ms;
  double timeout_s;
  char endpoint[300];
  int exit_code;
  int have_end;  /* the rendezvous sent the job's status */
  int lost;      /* the connection to the rendezvous ended */
  int signalled; /* signo, or 0 */
  int failing;   /* the teardown has started */
  int closed;
} agent;

/* Reads exactly n bytes before deadline (hk_now() s). 0, or -1 with why. */
static int read_full(int fd, void *buf, size_t n, double deadline, char *why,
                     size_t cap) {
  size_t got = 0;
  while (got < n) {
    double left = deadline - hk_now();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = left > 0 ? poll(&p, 1, (int)(left * 1000.0) + 1) : 0;
    if (rc == 0) {
      snprintf(why, cap, "no answer in time");
      return -1;
    }
    if (rc < 0 && errno == EINTR)
      continue;
    ssize_t k = rc < 0 ? -1 : recv(fd, (char *)buf + got, n - got, 0);
    if (k == 0) {
      snprintf(why, cap, "the connection was closed");
      return -1;
    }
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      snprintf(why, cap, "%s", strerror(errno));
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n, char *why,
                      size_t cap) {
  size_t put = 0;
  while (put < n) {
    ssize_t k = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      snprintf(why, cap, "%s", strerror(errno));
      return -1;
    }
    put += (size_t)k;
  }
  return 0;
}

/* Encodes and sends m. 0, or -1 with why. */
static int send_msg(int fd, const hk_msg *m, char *why, size_t cap) {
  hk_buf b = {0};
  int rc = -1;
  if (hk_wire_encode(m, &b) != HK_OK)
    snprintf(why, cap, "%s", hk_last_error());
  else
    rc = write_full(fd, b.data, b.len, why, cap);
  hk_buf_free(&b);
  return rc;
}

/* Reads and decodes one frame before deadline. 0 (the caller frees *m),
 * or -1 with why. */
static int recv_msg(int fd, hk_msg *m, double deadline, char *why, size_t cap) {
  uint8_t hdr[HK_WIRE_HEADER_LEN];
  uint8_t type;
  uint32_t len;
  if (read_full(fd, hdr, sizeof hdr, deadline, why, cap) != 0)
    return -1;
  if (hk_wire_header(hdr, &type, &len) != HK_OK) {
    snprintf(why, cap, "%s", hk_last_error());
    return -1;
  }
  hk_buf b = {0};
  int rc = -1;
  if (hk_buf_reserve(&b, HK_WIRE_HEADER_LEN + (size_t)len) != HK_OK) {
    snprintf(why, cap, "out of memory");
  } else {
    memcpy(b.data, hdr, sizeof hdr);
    if (read_full(fd, b.data + sizeof hdr, len, deadline, why, cap) == 0) {
      if (hk_wire_decode(b.data, sizeof hdr + len, m) == HK_OK)
        rc = 0;
      else
        snprintf(why, cap, "%s", hk_last_error());
    }
  }
  hk_buf_free(&b);
  return rc;
}

/* Connects to ip:port, retrying refusals until deadline, and proves the
 * secret. The fd, or -1 with why. */
static int connect_endpoint(const char *ip, int port, const hk_secret *secret,
                            double deadline, char *why, size_t cap) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, ip, &sa.sin_addr);
  int fd = -1;
  for (;;) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      snprintf(why, cap, "socket: %s", strerror(errno));
      return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
      break;
    int e = errno;
    close(fd);
    if ((e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH &&
         e != ETIMEDOUT) ||
        hk_now() + RETRY_MS / 1000.0 > deadline) {
      snprintf(why, cap,
               "cannot connect: %s (HK_START_TIMEOUT_S: the agent "
               "holding it had that long to start)",
               strerror(e));
      return -1;
    }
    usleep(RETRY_MS * 1000); /* the endpoint's agent may start later */
  }
  uint8_t nonce_s[HK_NONCE_LEN], nonce_c[HK_NONCE_LEN];
  uint8_t msg[HK_AUTH_CLIENT_MSG_LEN], proof_s[HK_PROOF_LEN];
  char io[160];
  if (read_full(fd, nonce_s, sizeof nonce_s, deadline, io, sizeof io) != 0 ||
      hk_random_bytes(nonce_c, sizeof nonce_c) != HK_OK) {
    snprintf(why, cap, "no handshake: %s", io);
    close(fd);
    return -1;
  }
  hk_auth_client_msg(secret, nonce_s, nonce_c, msg);
  if (write_full(fd, msg, sizeof msg, io, sizeof io) != 0 ||
      read_full(fd, proof_s, sizeof proof_s, deadline, io, sizeof io) != 0 ||
      !hk_auth_client_check(secret, nonce_s, nonce_c, proof_s)) {
    snprintf(why, cap,
             "it refused this agent's secret (HK_SECRET must be the same on "
             "every agent)");
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- the loop ---- */

static void maybe_close(agent *a) {
  if (a->closed || (a->have_workers && a->workers.running > 0) ||
      !(a->have_end || a->lost || a->signalled))
    return;
  a->closed = 1;
  if (a->fd >= 0) {
    uv_close((uv_handle_t *)&a->poll, NULL);
    close(a->fd);
    a->fd = -1;
  }
  for (int i = 0; i < 3; i++)
    uv_close((uv_handle_t *)&a->sig[i], NULL);
  uv_close((uv_handle_t *)&a->term_timer, NULL);
  uv_close((uv_handle_t *)&a->kill_timer, NULL);
}

static void kill_timeout(uv_timer_t *t) {
  agent *a = t->data;
  if (a->have_workers)
    hk_workers_signal(&a->workers, SIGKILL);
}

static void term_timeout(uv_timer_t *t) {
  agent *a = t->data;
  if (a->have_workers)
    hk_workers_signal(&a->workers, SIGTERM);
  if (!uv_is_active((uv_handle_t *)&a->kill_timer))
    uv_timer_start(&a->kill_timer, kill_timeout, a->kill_after_ms, 0);
}

/* The rendezvous is gone: end this host's workers, exit 1. */
static void rendezvous_lost(agent *a, const char *why) {
  if (a->lost || a->have_end)
    return;
  a->lost = 1;
  a->failing = 1;
  if (!a->signalled)
    a->exit_code = 1;
  hk_out_say("lost the rendezvous at %s (%s): the host holding it is gone "
             "or cut off; ending this host's workers",
             a->endpoint, why);
  uv_poll_stop(&a->poll);
  a->kill_after_ms = LOST_KILL_AFTER_MS;
  uv_timer_stop(&a->kill_timer);
  term_timeout(&a->term_timer);
  maybe_close(a);
}

static void on_readable(uv_poll_t *p, int status, int events) {
  agent *a = p->data;
  (void)events;
  if (status < 0) {
    rendezvous_lost(a, uv_strerror(status));
    return;
  }
  hk_msg m;
  char why[256];
  if (recv_msg(a->fd, &m, hk_now() + a->timeout_s, why, sizeof why) != 0) {
    rendezvous_lost(a, why);
    return;
  }
  if (m.type == HK_MSG_EXIT && m.u.exit.slot == -1) {
    a->have_end = 1;
    if (!a->signalled)
      a->exit_code = m.u.exit.status;
    uv_poll_stop(&a->poll);
    maybe_close(a);
  } else if (m.type == HK_MSG_ABORT && !a->failing) {
    a->failing = 1;
    hk_out_say("the job failed: %s", m.u.abort.reason);
    uint64_t grace = (uint64_t)(a->args->grace_period_s * 1000.0 + 0.5);
    uv_timer_start(&a->term_timer, term_timeout, grace, 0);
  }
  hk_msg_free(&m);
}

static void on_worker_exit(hk_worker *w, void *ctx) {
  agent *a = ctx;
  if (a->fd >= 0 && !a->lost && !a->have_end) {
    hk_msg m;
    memset(&m, 0, sizeof m);
    m.type = HK_MSG_EXIT;
    m.u.exit.slot = w->rank;
    m.u.exit.pid = w->pid;
    m.u.exit.status = w->term_signal ? 0 : (int32_t)(w->exit_status & 0xff);
    m.u.exit.signal = w->term_signal;
    char why[256];
    if (send_msg(a->fd, &m, why, sizeof why) != 0)
      rendezvous_lost(a, why);
  }
  if (a->args->verbose && w->term_signal)
    hk_out_say("rank %d (pid %d) was killed by signal %d", w->rank, w->pid,
               w->term_signal);
  else if (a->args->verbose)
    hk_out_say("rank %d (pid %d) exited with status %lld", w->rank, w->pid,
               (long long)w->exit_status);
  maybe_close(a);
}

static void on_signal(uv_signal_t *h, int signum) {
  agent *a = h->data;
  if (a->signalled) {
    if (a->have_workers)
      hk_workers_signal(&a->workers, SIGKILL);
    return;
  }
  a->signalled = signum;
  a->exit_code = 128 + signum;
  hk_out_say("received signal %d (%s); forwarding it to this host's workers",
             signum, strsignal(signum));
  if (a->have_workers)
    hk_workers_signal(&a->workers, signum);
  a->failing = 1;
  a->kill_after_ms = LOST_KILL_AFTER_MS;
  uv_timer_stop(&a->term_timer);
  uint64_t grace = (uint64_t)(a->args->grace_period_s * 1000.0 + 0.5);
  uv_timer_start(&a->term_timer, term_timeout, grace, 0);
  maybe_close(a);
}

int hkrun_agent_run(const hkrun_args *args, const char *ip, int port,
                    const hk_secret *secret, double start_timeout_s,
                    double timeout_s) {
  char why[300];
  char endpoint[300];
  hk_config fm; /* --output-filename's files take HK_FILE_MODE */
  fm.file_mode = 0600;
  if (args->output_filename &&
      hk_config_load_var(&fm, "HK_FILE_MODE") != HK_OK) {
    hk_out_say("%s", hk_last_error());
    return 2;
  }
  snprintf(endpoint, sizeof endpoint, "%s:%d", ip, port);
  int fd = connect_endpoint(ip, port, secret, hk_now() + start_timeout_s, why,
                            sizeof why);
  if (fd < 0) {
    hk_out_say("--rdzv-endpoint %s: %s", args->rdzv_endpoint, why);
    return 1;
  }
  hk_msg req, ans;
  memset(&req, 0, sizeof req);
  req.type = HK_MSG_AGENT;
  req.u.agent.base = -1;
  req.u.agent.nslots = args->np;
  if (gethostname(req.u.agent.host, sizeof req.u.agent.host - 1) != 0)
    snprintf(req.u.agent.host, sizeof req.u.agent.host, "?");
  if (send_msg(fd, &req, why, sizeof why) != 0 ||
      recv_msg(fd, &ans, hk_now() + timeout_s, why, sizeof why) != 0) {
    hk_out_say("--rdzv-endpoint %s: registering this agent: %s",
               args->rdzv_endpoint, why);
    close(fd);
    return 1;
  }
  if (ans.type != HK_MSG_AGENT) {
    hk_out_say("--rdzv-endpoint %s: the rendezvous refused this agent: %s",
               args->rdzv_endpoint,
               ans.type == HK_MSG_ABORT ? ans.u.abort.reason
                                        : "an unexpected answer");
    hk_msg_free(&ans);
    close(fd);
    return 1;
  }
  const int base = ans.u.agent.base, size = ans.u.agent.size;
  hk_msg_free(&ans);
  hk_keepalive_set(fd, timeout_s);
  if (args->verbose)
    hk_out_say("agent: slots %d..%d of %d at %s", base, base + args->np - 1,
               size, endpoint);

  agent a;
  memset(&a, 0, sizeof a);
  a.args = args;
  a.fd = fd;
  a.timeout_s = timeout_s;
  a.kill_after_ms = KILL_AFTER_TERM_MS;
  snprintf(a.endpoint, sizeof a.endpoint, "%s", endpoint);
  uv_loop_init(&a.loop);
  uv_poll_init_socket(&a.loop, &a.poll, fd);
  a.poll.data = &a;
  uv_poll_start(&a.poll, UV_READABLE | UV_DISCONNECT, on_readable);
  static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&a.loop, &a.sig[i]);
    a.sig[i].data = &a;
    uv_signal_start(&a.sig[i], on_signal, signums[i]);
  }
  uv_timer_init(&a.loop, &a.term_timer);
  uv_timer_init(&a.loop, &a.kill_timer);
  a.term_timer.data = a.kill_timer.data = &a;

  int bad_bind = 0;
  cpu_set_t *masks = hkrun_bind_masks(args, base, &bad_bind);
  char secret_hex[2 * HK_SECRET_LEN + 1];
  hk_secret_format(secret, secret_hex);
  hk_spawn_opts so = {
      .argv = args->prog_argv,
      .output_dir = args->output_filename,
      .file_mode = fm.file_mode,
      .cpu_masks = masks,
      .size = args->np,
      .rank_base = base,
      .job_size = size,
      .rendezvous = endpoint,
      .secret_hex = secret_hex,
      .launcher_pid = (int)getpid(),
      .tag_output = args->tag_output,
      .out_fd = STDOUT_FILENO,
      .err_fd = STDERR_FILENO,
      .on_exit = on_worker_exit,
      .ctx = &a,
  };
  if (bad_bind) { /* said why; the rendezvous sees this agent go */
    a.exit_code = 2;
    a.lost = 1;
  } else if (args->np > 0) {
    a.have_workers = 1;
    if (hk_workers_init(&a.workers, &a.loop, &so) != HK_OK) {
      hk_out_say("%s", hk_last_error());
      a.exit_code = 1;
      a.lost = 1; /* close at once: the rendezvous sees the agent go */
      a.have_workers = 0;
    } else if (hk_workers_start(&a.workers) != HK_OK) {
      hk_out_say("%s", hk_last_error());
      hk_workers_signal(&a.workers, SIGKILL);
      /* the workers never started are lost at once, as exiting 127 */
      for (int i = a.workers.started; i < args->np && a.fd >= 0; i++) {
        hk_msg m;
        memset(&m, 0, sizeof m);
        m.type = HK_MSG_EXIT;
        m.u.exit.slot = base + i;
        m.u.exit.status = 127;
        if (send_msg(a.fd, &m, why, sizeof why) != 0)
          break; /* the loop finds the connection gone */
      }
    }
  }
  maybe_close(&a);
  uv_run(&a.loop, UV_RUN_DEFAULT);
  memset(secret_hex, 0, sizeof secret_hex);
  if (uv_loop_close(&a.loop) != 0)
    hk_out_say("the agent's event loop still had open handles");
  if (a.have_workers)
    hk_workers_free(&a.workers);
  free(masks);
  return a.exit_code;
}
