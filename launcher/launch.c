/*
 * launch.c - agents hkrun starts on the hosts a discovery script lists
 * (see launch.h).
 */
#include "launcher/launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "launcher/argv.h"
#include "launcher/discover.h"
#include "launcher/output.h"

#define MAX_LISTED 256    /* hosts of one discovery run looked at */
#define END_AFTER_MS 2000 /* at the end: SIGTERM after, then SIGKILL after */

/* A host we started an agent on (kept for the job: its handle may live). */
typedef struct host {
  struct host *next;
  struct hk_launch *l;
  char name[256]; /* as listed */
  char ip[64];
  int slots;   /* the agent's -np */
  int running; /* its launcher has not exited */
  int joined;  /* its agent's connection came */
  int handle;  /* proc is initialised and not yet closed (it cannot be
                  spawned again before) */
  uv_process_t proc;
} host;

struct hk_launch {
  uv_loop_t *loop;
  const hkrun_args *args;
  hk_rdv *rdv;
  const hk_blacklist *blacklist;
  hk_launch_failed_fn on_failed;
  void *ctx;
  char self_ip[64];
  char self_exe[4096];
  hk_argv launcher; /* --agent-launcher's words */
  host *hosts;
  uv_timer_t tick, kill_timer;
  uv_work_t work;
  int working;     /* work queued or running */
  int stopping;    /* hk_launch_stop was called */
  int kill_closed; /* kill_timer is closed (or closing) */
  int open;        /* handles not yet closed */
  /* one discovery run's result (written by the work, read after it) */
  hkrun_listed listed[MAX_LISTED];
  char ips[MAX_LISTED][64];
  int nlisted;
  int rc;
  char summary[300];
};

static void maybe_free(hk_launch *l) {
  if (!l->stopping || l->open > 0 || l->working)
    return;
  for (host *h = l->hosts, *next; h; h = next) {
    next = h->next;
    free(h);
  }
  hk_argv_free(&l->launcher);
  free(l);
}

static void on_closed(uv_handle_t *hd) {
  hk_launch *l = hd->data;
  if (hd->type == UV_PROCESS) {
    host *h = hd->data;
    h->handle = 0;
    l = h->l;
  }
  l->open--;
  maybe_free(l);
}

/* The IPv4 address host resolves to, into ip[64] ("" when it does not). */
static void resolve(const char *name, char *ip) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  ip[0] = '\0';
  if (getaddrinfo(name, NULL, &hints, &res) != 0 || !res)
    return;
  const struct sockaddr_in *sa = (const struct sockaddr_in *)res->ai_addr;
  inet_ntop(AF_INET, &sa->sin_addr, ip, 64);
  freeaddrinfo(res);
}

/* Runs the script and resolves what it lists (any thread). */
static void discover(hk_launch *l) {
  const hkrun_args *a = l->args;
  const double limit = a->elastic_timeout_s < HKRUN_DISCOVER_MAX_S
                           ? a->elastic_timeout_s
                           : HKRUN_DISCOVER_MAX_S;
  l->rc = hkrun_discover_hosts(a->discovery_script, a->slots_per_host, limit,
                               l->listed, MAX_LISTED, &l->nlisted, l->summary,
                               sizeof l->summary);
  if (l->nlisted > MAX_LISTED)
    l->nlisted = MAX_LISTED;
  for (int i = 0; i < l->nlisted; i++)
    resolve(l->listed[i].host, l->ips[i]);
}

int hk_launch_pending(const hk_launch *l) {
  int n = 0;
  for (const host *h = l ? l->hosts : NULL; h; h = h->next)
    n += h->running && !h->joined ? h->slots : 0;
  return n;
}

static int running(const hk_launch *l) {
  int n = 0;
  for (const host *h = l->hosts; h; h = h->next)
    n += h->running;
  return n;
}

static void close_kill_timer(hk_launch *l) {
  if (l->kill_closed)
    return;
  l->kill_closed = 1;
  uv_close((uv_handle_t *)&l->kill_timer, on_closed);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int signal) {
  host *h = p->data;
  hk_launch *l = h->l;
  h->running = 0;
  uv_close((uv_handle_t *)p, on_closed);
  if (l->stopping && running(l) == 0)
    close_kill_timer(l); /* every launcher has gone */
  if (h->joined || l->stopping)
    return;
  char why[128];
  if (signal)
    snprintf(why, sizeof why,
             "its launcher was killed by signal %d before "
             "its agent joined",
             signal);
  else
    snprintf(why, sizeof why,
             "its launcher exited with status %lld before "
             "its agent joined",
             (long long)status);
  hk_out_say("host %s (%s): %s", h->name, h->ip, why);
  l->on_failed(h->ip, h->slots, l->ctx);
}

/* Starts the agent of h with k workers. Returns 0, or -1 (said why). */
static int start_agent(hk_launch *l, host *h, int k) {
  const hkrun_args *a = l->args;
  char np[16], minnp[16], maxnp[16];
  snprintf(np, sizeof np, "%d", k);
  snprintf(minnp, sizeof minnp, "%d", a->min_np);
  snprintf(maxnp, sizeof maxnp, "%d", a->max_np);
  const char *head[] = {l->self_exe,
                        "--rdzv-endpoint",
                        a->rdzv_endpoint,
                        "-np",
                        np,
                        "--min-np",
                        minnp,
                        "--max-np",
                        maxnp,
                        NULL};
  hk_argv remote = {0}, cmd = {0};
  hk_status st = hk_argv_push_all(&remote, head);
  if (st == HK_OK && a->verbose)
    st = hk_argv_push(&remote, "-v");
  if (st == HK_OK)
    st = hk_argv_push(&remote, "--");
  if (st == HK_OK)
    st = hk_argv_push_all(&remote, (const char *const *)a->prog_argv);
  char *line = st == HK_OK ? hk_argv_format(&remote) : NULL;
  if (line)
    st = hk_argv_push_all(&cmd, (const char *const *)l->launcher.v);
  if (line && st == HK_OK)
    st = hk_argv_push(&cmd, h->name);
  if (line && st == HK_OK)
    st = hk_argv_push(&cmd, line);
  free(line);
  hk_argv_free(&remote);
  if (!line || st != HK_OK) {
    hk_argv_free(&cmd);
    hk_out_say("out of memory starting an agent on %s", h->name);
    return -1;
  }
  uv_stdio_container_t stdio[3] = {
      {.flags = UV_IGNORE},
      {.flags = UV_INHERIT_FD, .data.fd = 1},
      {.flags = UV_INHERIT_FD, .data.fd = 2},
  };
  uv_process_options_t o = {.exit_cb = on_exit_cb,
                            .file = cmd.v[0],
                            .args = cmd.v,
                            .flags = UV_PROCESS_DETACHED,
                            .stdio_count = 3,
                            .stdio = stdio};
  h->proc.data = h;
  int rc = uv_spawn(l->loop, &h->proc, &o);
  l->open++; /* (closed by on_exit_cb, or here when it failed) */
  h->handle = 1;
  if (rc != 0) {
    uv_close((uv_handle_t *)&h->proc, on_closed);
    hk_out_say("cannot start an agent on %s: %s: %s", h->name, cmd.v[0],
               uv_strerror(rc));
    hk_argv_free(&cmd);
    l->on_failed(h->ip, k, l->ctx);
    return -1;
  }
  h->running = 1;
  h->joined = 0;
  h->slots = k;
  char *shown = hk_argv_format(&cmd);
  hk_out_say("starting an agent on %s (%s) for %d worker%s: %s", h->name, h->ip,
             k, k == 1 ? "" : "s", shown ? shown : cmd.v[0]);
  free(shown);
  hk_argv_free(&cmd);
  return 0;
}

static host *find(hk_launch *l, const char *ip) {
  for (host *h = l->hosts; h; h = h->next)
    if (strcmp(h->ip, ip) == 0)
      return h;
  return NULL;
}

/* Starts agents for what the last run listed; returns the slots given. */
static int apply(hk_launch *l) {
  int given = 0;
  if (l->rc < 0) {
    hk_log(HK_LOG_WARNING, "%s", l->summary);
    return 0;
  }
  for (int i = 0; i < l->nlisted; i++) {
    const char *ip = l->ips[i];
    if (!*ip) {
      hk_log(HK_LOG_WARNING,
             "--host-discovery-script lists %s, which does "
             "not resolve to an IPv4 address",
             l->listed[i].host);
      continue;
    }
    if (strcmp(ip, l->self_ip) == 0 || strncmp(ip, "127.", 4) == 0)
      continue; /* the endpoint's host: its own -np workers */
    host *h = find(l, ip);
    if (h && h->running)
      continue;
    if (hk_blacklist_left(l->blacklist, ip, hk_now()) != 0)
      continue;
    const int free_now = hk_rdv_free_slots(l->rdv) - hk_launch_pending(l);
    const int k = l->listed[i].slots < free_now ? l->listed[i].slots : free_now;
    if (k <= 0)
      break;
    if (!h) {
      h = calloc(1, sizeof *h);
      if (!h)
        break;
      h->l = l;
      snprintf(h->ip, sizeof h->ip, "%s", ip);
      h->next = l->hosts;
      l->hosts = h;
    }
    if (h->handle)
      continue; /* (its exit is still being closed) */
    snprintf(h->name, sizeof h->name, "%s", l->listed[i].host);
    if (start_agent(l, h, k) == 0)
      given += k;
  }
  return given;
}

static void work_cb(uv_work_t *w) { discover(w->data); }

static void after_work_cb(uv_work_t *w, int status) {
  hk_launch *l = w->data;
  l->working = 0;
  if (status == 0 && !l->stopping)
    apply(l);
  maybe_free(l);
}

static void on_tick(uv_timer_t *t) {
  hk_launch *l = t->data;
  if (l->working || l->stopping)
    return;
  l->working = 1;
  l->work.data = l;
  if (uv_queue_work(l->loop, &l->work, work_cb, after_work_cb) != 0)
    l->working = 0;
}

hk_status hk_launch_start(uv_loop_t *loop, const hkrun_args *args,
                          const char *self_ip, hk_rdv *rdv,
                          const hk_blacklist *blacklist,
                          hk_launch_failed_fn on_failed, void *ctx,
                          hk_launch **out, int *launched) {
  *out = NULL;
  *launched = 0;
  hk_launch *l = calloc(1, sizeof *l);
  if (!l)
    return hk_fail(HK_ERR_NOMEM, "out of memory for the agent launcher");
  l->loop = loop;
  l->args = args;
  l->rdv = rdv;
  l->blacklist = blacklist;
  l->on_failed = on_failed;
  l->ctx = ctx;
  snprintf(l->self_ip, sizeof l->self_ip, "%s", self_ip);
  ssize_t n = readlink("/proc/self/exe", l->self_exe, sizeof l->self_exe - 1);
  hk_status st = HK_OK;
  if (n <= 0)
    st = hk_fail(HK_ERR_SYSTEM,
                 "cannot read this hkrun's own path "
                 "(/proc/self/exe), which agents are started with");
  else
    l->self_exe[n] = '\0';
  if (st == HK_OK)
    st = hk_argv_split(&l->launcher,
                       args->agent_launcher ? args->agent_launcher
                                            : HKRUN_AGENT_LAUNCHER,
                       "--agent-launcher");
  if (st == HK_OK && l->launcher.n == 0)
    st = hk_fail(HK_ERR_CONFIG, "--agent-launcher: no command given");
  if (st == HK_OK) {
    discover(l);
    if (l->rc < 0)
      st = hk_fail(HK_ERR_CONFIG, "%s", l->summary);
  }
  if (st != HK_OK) {
    hk_argv_free(&l->launcher);
    free(l);
    return st == HK_ERR_INVALID_ARG
               ? hk_fail(HK_ERR_CONFIG, "%s", hk_last_error())
               : st;
  }
  uv_timer_init(loop, &l->tick);
  uv_timer_init(loop, &l->kill_timer);
  l->tick.data = l->kill_timer.data = l;
  l->open = 2;
  *launched = apply(l);
  const uint64_t ms = (uint64_t)(HKRUN_LAUNCH_INTERVAL_S * 1000.0);
  uv_timer_start(&l->tick, on_tick, ms, ms);
  *out = l;
  return HK_OK;
}

void hk_launch_joined(hk_launch *l, const char *ip) {
  for (host *h = l ? l->hosts : NULL; h; h = h->next)
    if (h->running && !h->joined && strcmp(h->ip, ip) == 0) {
      h->joined = 1;
      return;
    }
}

static void signal_all(hk_launch *l, int sig) {
  for (host *h = l->hosts; h; h = h->next)
    if (h->running && h->proc.pid > 0)
      kill(-h->proc.pid, sig); /* its group (UV_PROCESS_DETACHED) */
}

static void kill_late(uv_timer_t *t) {
  signal_all(t->data, SIGKILL);
  close_kill_timer(t->data);
}

static void term_late(uv_timer_t *t) {
  signal_all(t->data, SIGTERM);
  uv_timer_start(t, kill_late, END_AFTER_MS, 0);
}

void hk_launch_stop(hk_launch *l) {
  if (!l || l->stopping)
    return;
  l->stopping = 1;
  uv_timer_stop(&l->tick);
  uv_close((uv_handle_t *)&l->tick, on_closed);
  /* their agents are told the job is over and exit, and so do they; one
   * that does not is ended */
  if (running(l) > 0)
    uv_timer_start(&l->kill_timer, term_late, END_AFTER_MS, 0);
  else
    close_kill_timer(l);
  maybe_free(l);
}
