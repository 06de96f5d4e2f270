/* monitor.c - rank 0's straggler view and every rank's telemetry thread
 * (monitor.h). */
#include "worker/monitor.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collectives/transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "worker/metrics.h"
#include "worker/report.h"
#include "worker/telemetry.h"

struct hk_monitor {
  hk_ctx *ctx; /* borrowed: the read-only settings, mesh and layout */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* [mu] signalled by hk_monitor_stop */
  int stop;          /* [mu] */
  pthread_t thread;
  int started;
  double t0;              /* hk_now() at start */
  hk_telemetry *tel;      /* [thread] this rank's sampler */
  hk_wire_sample newest;  /* [mu] this rank's newest sample */
  int unsent;             /* [mu] newest not yet taken for a REQUESTS */
  hk_lateness *lat;       /* rank 0: the accounting (lateness.h) */
  hk_monitor_rank *ranks; /* [mu] rank 0: size entries */
  int metrics_failed;     /* [thread] a write failed: warned once */
  hk_buf table;           /* [mu] rank 0: the live table's frame, not yet
                             sent (hk_monitor_background) */
};

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

void hk_monitor_add_sample(hk_monitor *m, int rank, const hk_wire_sample *s) {
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

int hk_monitor_take_sample(hk_monitor *m, hk_wire_sample *out) {
  pthread_mutex_lock(&m->mu);
  int fresh = m->unsent;
  if (fresh)
    *out = m->newest;
  m->unsent = 0;
  pthread_mutex_unlock(&m->mu);
  return fresh;
}

void hk_monitor_round_end(hk_monitor *m) {
  pthread_mutex_lock(&m->mu);
  hk_lateness_end_round(m->lat, hk_now());
  pthread_mutex_unlock(&m->mu);
}

static double period(const hk_lateness_sums *s) {
  return s->rounds > 1 ? (s->last_s - s->first_s) / (double)(s->rounds - 1) : 0;
}

hk_status hk_monitor_view_take(hk_monitor *m, hk_monitor_view *v) {
  const int size = m->ctx->size;
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

void hk_monitor_view_free(hk_monitor_view *v) {
  free(v->ranks);
  memset(v, 0, sizeof *v);
}

/* Prints the report on stderr, whole lines at once. */
static void print_report(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf b = {0};
  if (hk_monitor_view_take(m, &v) == HK_OK && hk_report_format(&v, &b) == HK_OK)
    fwrite(b.data, 1, b.len, stderr);
  fflush(stderr);
  hk_monitor_view_free(&v);
  hk_buf_free(&b);
}

/* Rewrites HK_METRICS_FILE; warns once if it cannot. */
static void write_metrics(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf b = {0};
  hk_status st = hk_monitor_view_take(m, &v);
  if (st == HK_OK)
    st = hk_metrics_format(&v, &b);
  if (st == HK_OK)
    st =
        hk_metrics_write(m->ctx->cfg.metrics_file, (const char *)b.data, b.len);
  if (st != HK_OK && !m->metrics_failed) {
    hk_log(HK_LOG_WARNING, "%s", hk_last_error());
    m->metrics_failed = 1;
  }
  hk_monitor_view_free(&v);
  hk_buf_free(&b);
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
 * thread touches the network: hk_monitor_background). */
static void queue_table(hk_monitor *m) {
  hk_monitor_view v;
  hk_buf t = {0}, frame = {0};
  if (hk_monitor_view_take(m, &v) != HK_OK)
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
    ssize_t w = write(m->ctx->wake_fd, &one, sizeof one);
    (void)w; /* the counter cannot overflow at one write a second */
  }
  hk_monitor_view_free(&v);
  hk_buf_free(&t);
  hk_buf_free(&frame);
}

void hk_monitor_background(hk_monitor *m) {
  pthread_mutex_lock(&m->mu);
  hk_buf frame = m->table;
  m->table = (hk_buf){0};
  pthread_mutex_unlock(&m->mu);
  const int fd = m->ctx->mesh.launcher_fd;
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
  if (m->ctx->rank == 0) {
    hk_monitor_add_sample(m, 0, &s);
    return;
  }
  pthread_mutex_lock(&m->mu);
  m->newest = s;
  m->unsent = 1;
  pthread_mutex_unlock(&m->mu);
}

static void *monitor_main(void *arg) {
  hk_monitor *m = arg;
  const hk_config *cfg = &m->ctx->cfg;
  const int coord = m->ctx->rank == 0;
  const int live = coord && cfg->monitor_live && m->ctx->mesh.launcher_fd >= 0;
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
      write_metrics(m);
      next_metrics = now + cfg->metrics_interval_s;
    }
  }
  return NULL;
}

/* Frees what m holds (the thread has stopped or never ran). */
static void destroy(hk_monitor *m) {
  hk_buf_free(&m->table);
  hk_telemetry_close(m->tel);
  hk_lateness_destroy(m->lat);
  free(m->ranks);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m);
}

/* Rank 0: every rank's host and local rank. ctx->hosts holds the names
 * where the launcher told them (MPI); hkrun starts every rank on its own
 * host, so elsewhere this host's name is every rank's. */
static void name_ranks(hk_monitor *m) {
  hk_ctx *ctx = m->ctx;
  char mine[HK_MONITOR_HOST_CAP];
  own_host(mine);
  for (int r = 0; r < ctx->size; r++) {
    const char *h =
        ctx->hosts ? ctx->hosts + (size_t)r * HK_HOST_NAME_CAP : mine;
    snprintf(m->ranks[r].host, HK_MONITOR_HOST_CAP, "%s", h);
    m->ranks[r].local_rank = ctx->layout ? ctx->layout[r].local_rank : r;
  }
}

hk_status hk_monitor_start(hk_ctx *ctx) {
  ctx->monitor = NULL;
  if (!hk_config_monitoring(&ctx->cfg))
    return HK_OK;
  hk_monitor *m = calloc(1, sizeof *m);
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor");
  m->ctx = ctx;
  m->t0 = hk_now();
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  hk_status st = HK_OK;
  if (ctx->rank == 0) {
    m->ranks = calloc((size_t)ctx->size, sizeof *m->ranks);
    st = m->ranks ? hk_lateness_create(
                        ctx->size, (uint32_t)ctx->cfg.monitor_window, &m->lat)
                  : hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor");
    if (st == HK_OK)
      name_ranks(m);
  }
  char why[512];
  int gpu = ctx->cfg.gpu >= 0 ? ctx->cfg.gpu : ctx->local_rank;
  if (st == HK_OK)
    st =
        hk_telemetry_open(ctx->cfg.nvml_library, gpu, &m->tel, why, sizeof why);
  if (st == HK_OK && why[0])
    hk_log(HK_LOG_INFO, "no GPU telemetry: %s", why);
  if (st == HK_OK && pthread_create(&m->thread, NULL, monitor_main, m) != 0)
    st = hk_fail(HK_ERR_SYSTEM, "cannot start the monitor thread");
  if (st != HK_OK) {
    destroy(m);
    return st;
  }
  m->started = 1;
  if (ctx->rank == 0)
    hk_negotiator_set_lateness(ctx->negotiator, m->lat);
  ctx->monitor = m;
  return HK_OK;
}

void hk_monitor_stop(hk_ctx *ctx, int final) {
  hk_monitor *m = ctx->monitor;
  if (!m)
    return;
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (m->started)
    pthread_join(m->thread, NULL);
  if (ctx->rank == 0) {
    if (final) {
      print_report(m);
      if (ctx->cfg.metrics_file[0])
        write_metrics(m);
    }
    hk_negotiator_set_lateness(ctx->negotiator, NULL);
  }
  ctx->monitor = NULL;
  destroy(m);
}
