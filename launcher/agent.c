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

#include "collectives/transport/tcp.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "coordinator/channel.h"
#include "coordinator/wire.h"
#include "launcher/bind_masks.h"
#include "launcher/output.h"
#include "launcher/spawn.h"

#define KILL_AFTER_TERM_MS 2000
#define LOST_KILL_AFTER_MS 500

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

/* One frame each way with the rendezvous (coordinator/channel.h), waits
 * bounded by the agent's HK_TIMEOUT_S. 0, or -1 with why. */
static int send_msg(int fd, const hk_msg *m, double timeout_s, char *why,
                    size_t cap) {
  hk_buf scratch = {0};
  hk_io io = {-1, timeout_s};
  hk_status st = hk_channel_send(fd, m, &scratch, &io, "the rendezvous");
  hk_buf_free(&scratch);
  if (st != HK_OK)
    snprintf(why, cap, "%s", hk_last_error());
  return st == HK_OK ? 0 : -1;
}

/* The caller frees *m. */
static int recv_msg(int fd, hk_msg *m, double timeout_s, char *why,
                    size_t cap) {
  hk_buf scratch = {0};
  hk_io io = {-1, timeout_s};
  hk_status st = hk_channel_recv(fd, m, &scratch, &io, "the rendezvous");
  hk_buf_free(&scratch);
  if (st != HK_OK)
    snprintf(why, cap, "%s", hk_last_error());
  return st == HK_OK ? 0 : -1;
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
  if (recv_msg(a->fd, &m, a->timeout_s, why, sizeof why) != 0) {
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
    if (send_msg(a->fd, &m, a->timeout_s, why, sizeof why) != 0)
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
  /* refusals retried until HK_START_TIMEOUT_S: the agent holding the
   * endpoint may start later */
  int fd = -1;
  hk_io cio = {-1, timeout_s};
  if (hk_tcp_connect(ip, (uint16_t)port, secret, hk_now() + start_timeout_s,
                     &cio, "the rendezvous", &fd) != HK_OK) {
    hk_out_say("--rdzv-endpoint %s: %s (every agent needs the same "
               "HK_SECRET; the agent holding the endpoint has "
               "HK_START_TIMEOUT_S to start)",
               args->rdzv_endpoint, hk_last_error());
    return 1;
  }
  hk_msg req, ans;
  memset(&req, 0, sizeof req);
  req.type = HK_MSG_AGENT;
  req.u.agent.base = -1;
  req.u.agent.nslots = args->np;
  if (gethostname(req.u.agent.host, sizeof req.u.agent.host - 1) != 0)
    snprintf(req.u.agent.host, sizeof req.u.agent.host, "?");
  if (send_msg(fd, &req, timeout_s, why, sizeof why) != 0 ||
      recv_msg(fd, &ans, timeout_s, why, sizeof why) != 0) {
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
  if (hk_tcp_set_liveness(fd, timeout_s) != HK_OK)
    hk_out_say("--rdzv-endpoint %s: %s", args->rdzv_endpoint, hk_last_error());
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
        if (send_msg(a.fd, &m, timeout_s, why, sizeof why) != 0)
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
