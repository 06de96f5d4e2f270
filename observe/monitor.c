/* monitor.c - rank 0's straggler view and every rank's telemetry thread
 * (monitor.h). */
#include "observe/monitor.h"

#include <errno.h>
#include <linux/sockios.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/negotiate.h"
#include "observe/metrics.h"
#include "observe/report.h"
#include "observe/telemetry.h"

typedef struct hk_monitor {
  const hk_config *cfg; /* borrowed: the settings */
  int rank, size;
  int launcher_fd; /* hkrun's connection, or -1 (set at ready) */
  int table_fd;    /* eventfd: a live table is queued (rank 0 with
                      HK_MONITOR_LIVE and hkrun), or -1 */
  struct hk_negotiator *negotiator; /* rank 0's, fed lateness at ready */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* [mu] signalled at detach */
  int stop;          /* [mu] */
  pthread_t thread;
  int started;
  double t0;              /* hk_now() at ready */
  hk_telemetry *tel;      /* [thread] this rank's sampler */
  hk_wire_sample newest;  /* [mu] this rank's newest sample */
  int unsent;             /* [mu] newest not yet taken for a REQUESTS */
  hk_lateness *lat;       /* rank 0: the accounting (lateness.h) */
  hk_monitor_rank *ranks; /* [mu] rank 0: size entries */
  int metrics_failed;     /* [thread] a write failed: warned once */
  hk_buf table;           /* [mu] rank 0: the live table's frame, not yet
                             sent (on_readable) */
} hk_monitor;

/* This host's name (cut to HK_MONITOR_HOST_CAP). */
static void own_host(char *out) {
  if (gethostname(out, HK_MONITOR_HOST_CAP - 1) != 0)
    snprintf(out, HK_MONITOR_HOST_CAP, "localhost");
  out[HK_MONITOR_HOST_CAP - 1] = '\0';
}

/* Adds one sample's GPU figures to sums. */
static void sum_gpu(hk_tel_sums *t, const hk_wire_sample *s) {
  t->n++;
  t->temp_c += s->temp_c;
  t->sm_mhz += s->sm_mhz;
  t->sm_max_mhz += s->sm_max_mhz;
  t->power_w += s->power_mw / 1000.0;
  t->limit_w += s->power_limit_mw / 1000.0;
  t->util_pct += s->util_pct;
}

/* The reason bits of each hk_gpu_cause. */
static const uint64_t cause_bits[HK_CAUSE_COUNT] = {
    HK_THROTTLE_SW_THERMAL | HK_THROTTLE_HW_THERMAL,
    HK_THROTTLE_SW_POWER_CAP,
    HK_THROTTLE_HW_SLOWDOWN | HK_THROTTLE_HW_POWER_BRAKE,
};

/* Rank 0: files rank `rank`'s sample (rank in range, the caller's). */
static void add_sample(hk_monitor *m, int rank, const hk_wire_sample *s) {
  pthread_mutex_lock(&m->mu);
  hk_rank_telemetry *t = &m->ranks[rank].tel;
  if (t->samples++ == 0)
    t->first = *s;
  t->last = *s;
  if (s->ncpu)
    t->load_per_cpu += s->load1 / s->ncpu;
  if (s->gpu_ok) {
    t->gpu_samples++;
    for (int i = 0; i < hk_throttle_count && i < HK_THROTTLE_KINDS; i++)
      t->reason_samples[i] += (s->throttle & hk_throttle_names[i].bit) != 0;
    for (int c = 0; c < HK_CAUSE_COUNT; c++)
      if (s->throttle & cause_bits[c])
        sum_gpu(&t->cause[c], s);
    if (s->util_pct >= HK_REPORT_BUSY_PCT)
      sum_gpu(&t->busy, s);
  }
  pthread_mutex_unlock(&m->mu);
}

/* The sample hook (ranks > 0, building a REQUESTS): copies the newest
 * sample into *out and returns 1 if it was not sent yet, else 0. */
static int on_sample(void *self, hk_wire_sample *out) {
  hk_monitor *m = self;
  pthread_mutex_lock(&m->mu);
  int fresh = m->unsent;
  if (fresh)
    *out = m->newest;
  m->unsent = 0;
  pthread_mutex_unlock(&m->mu);
  return fresh;
}

/* The message hook: rank 0 files the sample a REQUESTS carried. */
static void on_message(void *self, const hk_obs_message *msg) {
  if (msg->kind == HK_OBS_MSG_REQUESTS && msg->sample)
    add_sample(self, msg->rank, msg->sample);
}

/* Rank 0's round_started hook: a RESPONSES with work was decided, which
 * ends the lateness accounting's round. */
static void on_round_started(void *self, const hk_obs_round *r) {
  (void)r;
  hk_monitor *m = self;
  if (!m->lat)
    return;
  pthread_mutex_lock(&m->mu);
  hk_lateness_end_round(m->lat, hk_now());
  pthread_mutex_unlock(&m->mu);
}

static double period(const hk_lateness_sums *s) {
  return s->rounds > 1 ? (s->last_s - s->first_s) / (double)(s->rounds - 1) : 0;
}

/* Rank 0: copies the state into *v. Errors: HK_ERR_NOMEM. */
static hk_status view_take(hk_monitor *m, hk_monitor_view *v) {
  const int size = m->size;
  memset(v, 0, sizeof *v);
  v->ranks = malloc((size_t)size * sizeof *v->ranks);
  if (!v->ranks)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor view");
  v->size = size;
  pthread_mutex_lock(&m->mu);
  const hk_lateness_sums *tot = hk_lateness_total(m->lat);
  const hk_lateness_sums *win = hk_lateness_window(m->lat);
  if (!win->rounds) /* no window closed yet: everything so far */
    win = tot;
  v->rounds = tot->rounds;
  v->window_rounds = win->rounds;
  v->period_s = period(tot);
  v->window_period_s = period(win);
  for (int r = 0; r < size; r++) {
    v->ranks[r] = m->ranks[r];
    v->ranks[r].total = tot->ranks[r];
    v->ranks[r].window = win->ranks[r];
  }
  pthread_mutex_unlock(&m->mu);
  v->elapsed_s = hk_now() - m->t0;
  return HK_OK;
}

/* Prints the report on stderr, whole lines at once. */
static void print_report(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf b = {0};
  if (view_take(m, &v) == HK_OK && hk_report_format(&v, &b) == HK_OK)
    fwrite(b.data, 1, b.len, stderr);
  fflush(stderr);
  hk_monitor_view_free(&v);
  hk_buf_free(&b);
}

/* Rewrites HK_METRICS_FILE whole (the old one stays until the new one is
 * complete). Errors: HK_ERR_NOMEM, hk_metrics_write's. */
static hk_status write_metrics(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf b = {0};
  hk_status st = view_take(m, &v);
  if (st == HK_OK)
    st = hk_metrics_format(&v, &b);
  if (st == HK_OK)
    st = hk_metrics_write(m->cfg->metrics_file, m->cfg->file_mode,
                          (const char *)b.data, b.len);
  hk_monitor_view_free(&v);
  hk_buf_free(&b);
  return st;
}

/* The monitor thread's rewrite: a failure warns once (the file keeps its
 * last whole contents), as every output does (docs/monitoring.md). */
static void rewrite_metrics(hk_monitor *m) {
  if (write_metrics(m) != HK_OK && !m->metrics_failed) {
    hk_log(HK_LOG_WARNING,
           "%s; the file keeps its last whole contents (warned once)",
           hk_last_error());
    m->metrics_failed = 1;
  }
}

/* 1 if `bytes` more can be written to fd at once, whole: nothing of an
 * earlier write is still queued (SIOCOUTQ) and they fit in half the send
 * buffer. A table is never half sent: a cut frame would break the
 * launcher connection's framing, and hkrun would then take rank 0 for
 * gone. */
static int room_for(int fd, size_t bytes) {
  int queued = 0, sndbuf = 0;
  socklen_t len = sizeof sndbuf;
  return ioctl(fd, SIOCOUTQ, &queued) == 0 && queued == 0 &&
         getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0 &&
         (size_t)sndbuf / 2 >= bytes;
}

/* Rank 0's monitor thread: encodes the live table for hkrun --monitor
 * and wakes the background thread, which sends it (only the background
 * thread touches the network: on_readable). */
static void queue_table(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf t = {0}, frame = {0};
  if (view_take(m, &v) != HK_OK)
    return;
  hk_status st = hk_report_table(&v, &t);
  if (st == HK_OK && t.len > HK_WIRE_MAX_MONITOR_LEN) {
    t.len = HK_WIRE_MAX_MONITOR_LEN; /* a huge job: its first ranks' */
    while (t.len > 0 && t.data[t.len - 1] != '\n') /* whole lines */
      t.len--;
  }
  uint8_t nul = 0;
  if (st == HK_OK)
    st = hk_buf_append(&t, &nul, 1);
  hk_msg msg = {.type = HK_MSG_MONITOR};
  msg.u.monitor.text = (char *)t.data;
  if (st == HK_OK)
    st = hk_wire_encode(&msg, &frame);
  if (st == HK_OK) {
    pthread_mutex_lock(&m->mu);
    hk_buf old = m->table; /* an unsent older table is replaced */
    m->table = frame;
    frame = old;
    pthread_mutex_unlock(&m->mu);
    uint64_t one = 1;
    ssize_t w = write(m->table_fd, &one, sizeof one);
    (void)w; /* the counter cannot overflow at one write a second */
  }
  hk_monitor_view_free(&v);
  hk_buf_free(&t);
  hk_buf_free(&frame);
}

static int on_poll_fd(void *self) { return ((hk_monitor *)self)->table_fd; }

/* Rank 0's background thread, the eventfd readable: sends hkrun the live
 * table the monitor thread queued, if any, and only when it fits whole in
 * the launcher connection's empty send buffer (else that refresh is
 * dropped: a frame cut by a timeout would break the connection's
 * framing, and hkrun would take rank 0 for gone). */
static void on_readable(void *self) {
  hk_monitor *m = self;
  uint64_t n;
  ssize_t rd = read(m->table_fd, &n, sizeof n);
  (void)rd; /* nonblocking: 0 or more tables since the last read */
  pthread_mutex_lock(&m->mu);
  hk_buf frame = m->table;
  m->table = (hk_buf){0};
  pthread_mutex_unlock(&m->mu);
  const int fd = m->launcher_fd;
  if (frame.len && room_for(fd, frame.len)) {
    hk_io io = {-1, 1.0}; /* fits in the buffer: does not wait */
    if (hk_tcp_send_all(fd, frame.data, frame.len, &io, "hkrun") != HK_OK)
      hk_log(HK_LOG_DEBUG, "monitor table not sent: %s", hk_last_error());
  }
  hk_buf_free(&frame);
}

/* Waits until `until` (hk_now() seconds) or a stop; returns 1 on stop. */
static int wait_until(hk_monitor *m, double until) {
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    double left = until - hk_now();
    if (left <= 0)
      break;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double secs = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + left;
    ts.tv_sec = (time_t)secs;
    ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
    int rc = pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    (void)rc; /* ETIMEDOUT or a wake-up: the loop looks again */
  }
  int stop = m->stop;
  pthread_mutex_unlock(&m->mu);
  return stop;
}

/* One sample of this rank: kept for the next REQUESTS, or (rank 0)
 * filed at once. */
static void sample_once(hk_monitor *m) {
  hk_wire_sample s;
  hk_telemetry_sample(m->tel, &s);
  if (m->rank == 0) {
    add_sample(m, 0, &s);
    return;
  }
  pthread_mutex_lock(&m->mu);
  m->newest = s;
  m->unsent = 1;
  pthread_mutex_unlock(&m->mu);
}

static void *monitor_main(void *arg) {
  hk_monitor *m = arg;
  const hk_config *cfg = m->cfg;
  const int coord = m->rank == 0;
  const int live = m->table_fd >= 0;
  double now = hk_now();
  double next_sample = now, next_report = now + cfg->monitor_report_s;
  double next_metrics = now + cfg->metrics_interval_s;
  for (;;) {
    double until = next_sample;
    if (coord && cfg->monitor_report_s > 0 && next_report < until)
      until = next_report;
    if (coord && cfg->metrics_file[0] && next_metrics < until)
      until = next_metrics;
    if (wait_until(m, until))
      break;
    now = hk_now();
    if (now >= next_sample) {
      sample_once(m);
      if (live)
        queue_table(m);
      next_sample = now + cfg->telemetry_s;
    }
    if (coord && cfg->monitor_report_s > 0 && now >= next_report) {
      print_report(m);
      next_report = now + cfg->monitor_report_s;
    }
    if (coord && cfg->metrics_file[0] && now >= next_metrics) {
      rewrite_metrics(m);
      next_metrics = now + cfg->metrics_interval_s;
    }
  }
  return NULL;
}

/* Frees what m holds (the thread has stopped or never ran). */
static void destroy(hk_monitor *m) {
  if (m->table_fd >= 0)
    close(m->table_fd);
  hk_buf_free(&m->table);
  hk_telemetry_close(m->tel);
  hk_lateness_destroy(m->lat);
  free(m->ranks);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m);
}

/* Rank 0: every rank's host and local rank. The engine gives the names
 * where the launcher told them (MPI); hkrun starts every rank on its own
 * host, so elsewhere this host's name is every rank's. */
static void name_ranks(hk_monitor *m, const hk_obs_ready *e) {
  char mine[HK_MONITOR_HOST_CAP];
  own_host(mine);
  for (int r = 0; r < m->size; r++) {
    const char *h = e->hosts ? e->hosts + (size_t)r * e->host_stride : mine;
    snprintf(m->ranks[r].host, HK_MONITOR_HOST_CAP, "%s", h);
    m->ranks[r].local_rank = e->local_ranks[r];
  }
}

/* Rank 0 with HK_MONITOR_LIVE and hkrun: the eventfd through which the
 * monitor thread tells the background thread a table is queued. */
static hk_status open_table_fd(hk_monitor *m) {
  if (m->rank != 0 || !m->cfg->monitor_live || m->launcher_fd < 0)
    return HK_OK;
  m->table_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return m->table_fd >= 0 ? HK_OK
                          : hk_fail_errno(HK_ERR_SYSTEM, errno,
                                          "eventfd for the monitor's table");
}

static hk_status on_ready(void *self, const hk_obs_ready *e) {
  hk_monitor *m = self;
  m->t0 = hk_now();
  m->launcher_fd = e->launcher_fd;
  m->negotiator = e->negotiator;
  if (m->rank == 0)
    name_ranks(m, e);
  char why[512];
  int gpu = m->cfg->gpu >= 0 ? m->cfg->gpu : e->local_rank;
  hk_status st =
      hk_telemetry_open(m->cfg->nvml_library, gpu, &m->tel, why, sizeof why);
  if (st == HK_OK && why[0])
    hk_log(HK_LOG_INFO, "no GPU telemetry: %s", why);
  if (st == HK_OK)
    st = open_table_fd(m);
  /* rank 0 makes HK_METRICS_FILE now (no round yet): an output that
   * cannot be made fails hk_init, naming it */
  if (st == HK_OK && m->rank == 0 && m->cfg->metrics_file[0])
    st = write_metrics(m);
  if (st == HK_OK && pthread_create(&m->thread, NULL, monitor_main, m) != 0)
    st = hk_fail(HK_ERR_SYSTEM, "cannot start the monitor thread");
  if (st != HK_OK)
    return st;
  m->started = 1;
  if (m->negotiator)
    hk_negotiator_set_lateness(m->negotiator, m->lat);
  return HK_OK;
}

static void on_detach(void *self, int final) {
  hk_monitor *m = self;
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (m->started)
    pthread_join(m->thread, NULL);
  if (m->started && m->rank == 0) {
    if (final) {
      print_report(m);
      if (m->cfg->metrics_file[0])
        rewrite_metrics(m);
    }
    if (m->negotiator)
      hk_negotiator_set_lateness(m->negotiator, NULL);
  }
  destroy(m);
}

static const hk_observer_ops monitor_ops = {
    .name = "monitor",
    .ready = on_ready,
    .detach = on_detach,
    .sample = on_sample,
    .message = on_message,
    .round_started = on_round_started,
    .poll_fd = on_poll_fd,
    .readable = on_readable,
};

hk_status hk_monitor_attach(hk_observers *o, const hk_obs_setup *s) {
  if (!hk_config_monitoring(s->cfg))
    return HK_OK;
  hk_monitor *m = calloc(1, sizeof *m);
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor");
  m->cfg = s->cfg;
  m->rank = s->rank;
  m->size = s->size;
  m->launcher_fd = m->table_fd = -1;
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  hk_status st = HK_OK;
  if (m->rank == 0) {
    m->ranks = calloc((size_t)m->size, sizeof *m->ranks);
    st = m->ranks ? hk_lateness_create(
                        m->size, (uint32_t)m->cfg->monitor_window, &m->lat)
                  : hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor");
  }
  if (st == HK_OK)
    st = hk_observe_attach(o, &monitor_ops, m);
  if (st != HK_OK)
    destroy(m);
  return st;
}
