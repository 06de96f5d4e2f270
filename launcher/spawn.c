/*
 * spawn.c - starting, watching and signalling hkrun's workers (spawn.h).
 */
#include "launcher/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/outfile.h"
#include "common/status.h"

extern char **environ;

/* The descriptor number of the dump request pipe in every worker. */
#define DUMP_FD 3

/* Variables hkrun sets for every worker; inherited copies are dropped. */
static const char *const own_vars[] = {
    "HK_RANK",       "HK_SIZE",   "HK_LOCAL_RANK",   "HK_LOCAL_SIZE",
    "HK_RENDEZVOUS", "HK_SECRET", "HK_LAUNCHER_PID", "HK_DUMP_FD",
};
#define N_OWN_VARS (sizeof own_vars / sizeof own_vars[0])

static int is_own_var(const char *entry) {
  for (size_t i = 0; i < N_OWN_VARS; i++) {
    size_t n = strlen(own_vars[i]);
    if (strncmp(entry, own_vars[i], n) == 0 && entry[n] == '=')
      return 1;
  }
  return 0;
}

static void free_env(char **env);

/* malloc'ed "name=value", or NULL. */
static char *make_var(const char *name, const char *value) {
  size_t n = strlen(name) + strlen(value) + 2;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, "%s=%s", name, value);
  return s;
}

/* Builds the environment of one worker: a NULL-terminated array whose
 * first N_OWN_VARS strings are owned (freed by free_env), the rest
 * borrowed from environ. NULL when out of memory. */
static char **build_env(const hk_spawn_opts *o, int rank) {
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + N_OWN_VARS + 1, sizeof *env);
  if (!env)
    return NULL;
  char rank_s[16], size_s[16], pid_s[16], dump_s[16];
  snprintf(rank_s, sizeof rank_s, "%d", o->rank_base + rank);
  snprintf(size_s, sizeof size_s, "%d",
           o->job_size > 0 ? o->job_size : o->size);
  snprintf(pid_s, sizeof pid_s, "%d", o->launcher_pid);
  snprintf(dump_s, sizeof dump_s, "%d", DUMP_FD);
  /* same order as own_vars */
  const char *values[N_OWN_VARS] = {rank_s, size_s,        rank_s,
                                    size_s, o->rendezvous, o->secret_hex,
                                    pid_s,  dump_s};
  for (size_t i = 0; i < N_OWN_VARS; i++) {
    env[i] = make_var(own_vars[i], values[i]);
    if (!env[i]) {
      free_env(env); /* frees the ones made so far (calloc'ed NULLs) */
      return NULL;
    }
  }
  size_t k = N_OWN_VARS;
  for (size_t i = 0; i < n; i++)
    if (!is_own_var(environ[i]))
      env[k++] = environ[i];
  env[k] = NULL;
  return env;
}

static void free_env(char **env) {
  if (!env)
    return;
  for (size_t i = 0; i < N_OWN_VARS; i++)
    free(env[i]);
  free(env);
}

/* ---- output: pipe -> splitter -> hkrun's stdout/stderr ---- */

static void emit_to(hk_workers *ws, int stream, const char *line, size_t len) {
  if (ws->sink_dead[stream])
    return;
  int fd = stream == 0 ? ws->opts.out_fd : ws->opts.err_fd;
  int rc = hk_out_write_all(fd, line, len);
  if (rc != 0) {
    /* The reader went away (EPIPE) or the fd broke: keep draining the
     * workers' pipes so they never block, but drop their output. */
    ws->sink_dead[stream] = 1;
    hk_log(HK_LOG_INFO,
           "cannot write worker output to fd %d (%s); "
           "discarding the rest of it",
           fd, strerror(-rc));
  }
}

/* The line, without its "[rank] " prefix, into the rank's output file. */
/* The line, without its "[rank] " prefix, into the rank's output file.
 * A write that fails (a full disk) cuts the file back to its last whole
 * line and closes it, saying so once (docs/monitoring.md, "Output
 * files"). */
static void emit_file(hk_worker *w, int stream, const char *line, size_t len) {
  hk_outfile *f = &w->file[stream];
  if (f->fd < 0)
    return;
  size_t skip = w->split[stream].prefix_len;
  if (skip > len)
    skip = len;
  off_t whole = lseek(f->fd, 0, SEEK_CUR);
  int rc = hk_out_write_all(f->fd, line + skip, len - skip);
  if (rc != 0) {
    int cut = whole >= 0 && ftruncate(f->fd, whole) == 0;
    hk_log(HK_LOG_WARNING,
           "--output-filename: cannot write '%s': %s; rank %d's %s stops "
           "there%s",
           f->path, strerror(-rc), w->rank, stream ? "stderr" : "stdout",
           cut ? ", after its last whole line" : "");
    hk_outfile_close(f);
  }
}

static void emit_stdout(void *ctx, const char *line, size_t len) {
  hk_worker *w = ctx;
  emit_to(w->set, 0, line, len);
  emit_file(w, 0, line, len);
}

static void emit_stderr(void *ctx, const char *line, size_t len) {
  hk_worker *w = ctx;
  emit_to(w->set, 1, line, len);
  emit_file(w, 1, line, len);
}

/* Makes DIR/rank.<r>/stdout and stderr for rank r (horovodrun's names:
 * <r> zero-padded to the width of size-1), as hk makes every output
 * (common/outfile.h): DIR is the user's (made if missing), rank.<r> must
 * be hkrun's own, and the files are never opened through a link. */
static hk_status open_output_files(hk_worker *w, const hk_spawn_opts *o) {
  int width = 1;
  for (int v = o->size - 1; v >= 10; v /= 10)
    width++;
  char sub[32], dir[4200];
  snprintf(sub, sizeof sub, "rank.%0*d", width, w->rank);
  snprintf(dir, sizeof dir, "%s/%s", o->output_dir, sub);
  int top = -1, rdir = -1;
  hk_status st = hk_outdir_make(AT_FDCWD, "", o->output_dir, o->file_mode, 0,
                                "--output-filename", &top);
  if (st == HK_OK)
    st = hk_outdir_make(top, o->output_dir, sub, o->file_mode, 1,
                        "--output-filename", &rdir);
  static const char *const names[2] = {"stdout", "stderr"};
  for (int s = 0; s < 2 && st == HK_OK; s++) {
    hk_outfile *f = &w->file[s];
    st = hk_outfile_openat(f, rdir, dir, names[s], o->file_mode,
                           "--output-filename");
    if (st == HK_OK)
      st = hk_outfile_publish(f, HK_OUT_UNLINK_FIRST);
  }
  if (top >= 0)
    close(top);
  if (rdir >= 0)
    close(rdir);
  return st;
}

static void maybe_finish(hk_workers *ws);

static void on_pipe_closed(uv_handle_t *h) {
  hk_worker *w = h->data;
  hk_workers *ws = w->set;
  ws->open_pipes--;
  maybe_finish(ws);
}

/* Stops reading one pipe: flushes its partial line and closes it. */
static void close_pipe(hk_worker *w, int stream) {
  if (!w->pipe_open[stream])
    return;
  w->pipe_open[stream] = 0;
  hk_out_finish(&w->split[stream]);
  uv_close((uv_handle_t *)&w->pipe[stream], on_pipe_closed);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  hk_worker *w = h->data;
  /* One shared buffer: read_cb consumes it before the next alloc. */
  *buf = uv_buf_init(w->set->readbuf, sizeof w->set->readbuf);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  hk_worker *w = s->data;
  int stream = s == (uv_stream_t *)&w->pipe[0] ? 0 : 1;
  if (nread > 0) {
    if (hk_out_feed(&w->split[stream], buf->base, (size_t)nread) != HK_OK)
      hk_log(HK_LOG_ERROR, "out of memory splitting the output of rank %d",
             w->rank);
  } else if (nread < 0) {
    if (nread != UV_EOF)
      hk_log(HK_LOG_WARNING, "reading the %s of rank %d: %s",
             stream ? "stderr" : "stdout", w->rank, uv_strerror((int)nread));
    close_pipe(w, stream);
  }
}

/* ---- exits and the end of the set ---- */

static void on_drain_timer_closed(uv_handle_t *h) {
  hk_workers *ws = h->data;
  ws->drain_timer_open = 0;
}

/* Closes the drain timer once every worker exited and every pipe closed;
 * that is the set's last handle. */
static void maybe_finish(hk_workers *ws) {
  if (ws->finishing && ws->open_pipes == 0 && ws->drain_timer_open &&
      !uv_is_closing((uv_handle_t *)&ws->drain_timer))
    uv_close((uv_handle_t *)&ws->drain_timer, on_drain_timer_closed);
}

static void drain_timeout(uv_timer_t *t) {
  hk_workers *ws = t->data;
  hk_log(HK_LOG_WARNING,
         "a worker's output is still open %d ms after every worker "
         "exited (a process outside its group holds it); closing it",
         HK_WORKERS_DRAIN_MS);
  for (int r = 0; r < ws->started; r++)
    for (int s = 0; s < 2; s++)
      close_pipe(&ws->w[r], s);
}

/* Every started worker has exited: clean up what they left behind. */
static void start_finishing(hk_workers *ws) {
  if (ws->finishing)
    return;
  ws->finishing = 1;
  /* Processes the workers left in their groups would hold the pipes open
   * and outlive the job: no process is left behind. (A group id stays
   * reserved while the group has members; once it is empty the kernel
   * could in principle recycle the number for a new group leader, but only
   * after the pid space wrapped in the moments since the last exit.) */
  for (int r = 0; r < ws->started; r++)
    if (kill(-ws->w[r].pid, SIGKILL) == 0)
      hk_log(HK_LOG_INFO, "killed what rank %d left in its process group", r);
  if (ws->open_pipes > 0)
    uv_timer_start(&ws->drain_timer, drain_timeout, HK_WORKERS_DRAIN_MS, 0);
  maybe_finish(ws);
}

static void on_proc_closed(uv_handle_t *h) { (void)h; }

static void exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
  hk_worker *w = p->data;
  hk_workers *ws = w->set;
  w->exited = 1;
  w->exit_status = exit_status;
  w->term_signal = term_signal;
  ws->running--;
  uv_close((uv_handle_t *)p, on_proc_closed);
  if (ws->opts.on_exit)
    ws->opts.on_exit(w, ws->opts.ctx);
  if (ws->running == 0)
    start_finishing(ws);
}

/* ---- public ---- */

hk_status hk_workers_init(hk_workers *ws, uv_loop_t *loop,
                          const hk_spawn_opts *opts) {
  memset(ws, 0, sizeof *ws);
  ws->loop = loop;
  ws->opts = *opts;
  ws->w = calloc((size_t)opts->size, sizeof *ws->w);
  if (!ws->w)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %d workers", opts->size);
  for (int r = 0; r < opts->size; r++) {
    ws->w[r].file[0].fd = ws->w[r].file[1].fd = -1;
    ws->w[r].file[0].dir_fd = ws->w[r].file[1].dir_fd = -1;
    ws->w[r].dump_fd = -1;
  }
  int rc = uv_timer_init(loop, &ws->drain_timer);
  if (rc != 0) {
    free(ws->w);
    ws->w = NULL;
    return hk_fail(HK_ERR_SYSTEM, "uv_timer_init: %s", uv_strerror(rc));
  }
  ws->drain_timer.data = ws;
  ws->drain_timer_open = 1;
  return HK_OK;
}

/* Starts one worker; on failure every handle it opened is being closed. */
static hk_status start_one(hk_workers *ws, int rank, int stdin_ok) {
  hk_worker *w = &ws->w[rank];
  const hk_spawn_opts *o = &ws->opts;
  w->set = ws;
  w->rank = o->rank_base + rank;
  if (o->output_dir) {
    hk_status st = open_output_files(w, o);
    if (st != HK_OK)
      return st;
  }

  char prefix[32] = "";
  if (o->tag_output)
    snprintf(prefix, sizeof prefix, "[%d] ", w->rank);
  if (hk_out_init(&w->split[0], prefix, emit_stdout, w) != HK_OK ||
      hk_out_init(&w->split[1], prefix, emit_stderr, w) != HK_OK)
    return hk_fail(HK_ERR_NOMEM, "out of memory starting rank %d", rank);

  for (int s = 0; s < 2; s++) {
    uv_pipe_init(ws->loop, &w->pipe[s], 0);
    w->pipe[s].data = w;
    w->pipe_open[s] = 1;
    ws->open_pipes++;
  }

  /* the dump request pipe: its read end is the worker's DUMP_FD, its
   * write end hkrun's (hk_workers_ask_dump); both close-on-exec here, so
   * no other worker inherits them (libuv's dup2 clears it on the child's
   * copy) */
  int dump[2] = {-1, -1};
  if (pipe2(dump, O_CLOEXEC | O_NONBLOCK) != 0)
    dump[0] = dump[1] = -1; /* hkrun --dump cannot reach this rank */
  char **env = build_env(o, rank);
  uv_stdio_container_t stdio[DUMP_FD + 1];
  stdio[0].flags = rank == 0 && stdin_ok ? UV_INHERIT_FD : UV_IGNORE;
  stdio[0].data.fd = 0;
  for (int s = 0; s < 2; s++) {
    stdio[1 + s].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1 + s].data.stream = (uv_stream_t *)&w->pipe[s];
  }
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.file = o->argv[0];
  po.args = o->argv;
  po.env = env;
  stdio[DUMP_FD].flags = dump[0] >= 0 ? UV_INHERIT_FD : UV_IGNORE;
  stdio[DUMP_FD].data.fd = dump[0];
  po.flags = UV_PROCESS_DETACHED;
  po.stdio_count = DUMP_FD + 1;
  po.stdio = stdio;
  po.exit_cb = exit_cb;
  w->proc.data = w;

  /* the child inherits this thread's affinity at fork */
  cpu_set_t saved;
  int bound = 0;
  if (o->cpu_masks && env) {
    CPU_ZERO(&saved);
    if (sched_getaffinity(0, sizeof saved, &saved) != 0 ||
        sched_setaffinity(0, sizeof o->cpu_masks[rank], &o->cpu_masks[rank]) !=
            0) {
      int e = errno;
      free_env(env);
      for (int i = 0; i < 2; i++)
        if (dump[i] >= 0)
          close(dump[i]);
      for (int s = 0; s < 2; s++) {
        w->pipe_open[s] = 0;
        uv_close((uv_handle_t *)&w->pipe[s], on_pipe_closed);
      }
      return hk_fail_errno(HK_ERR_SYSTEM, e,
                           "--bind-to: cannot set rank %d's CPUs", rank);
    }
    bound = 1;
  }
  int rc = env ? uv_spawn(ws->loop, &w->proc, &po) : UV_ENOMEM;
  if (bound)
    sched_setaffinity(0, sizeof saved, &saved);
  free_env(env);
  if (dump[0] >= 0)
    close(dump[0]); /* the worker's now */
  if (rc != 0 && dump[1] >= 0)
    close(dump[1]);
  else
    w->dump_fd = dump[1];
  if (rc != 0) {
    if (env) /* uv_spawn initialised the handle; it must be closed */
      uv_close((uv_handle_t *)&w->proc, on_proc_closed);
    for (int s = 0; s < 2; s++) {
      w->pipe_open[s] = 0; /* nothing to flush: it never ran */
      uv_close((uv_handle_t *)&w->pipe[s], on_pipe_closed);
    }
    return hk_fail(HK_ERR_SYSTEM, "cannot start '%s': %s", o->argv[0],
                   strerror(-rc));
  }
  w->pid = w->proc.pid;
  ws->started++;
  ws->running++;
  for (int s = 0; s < 2; s++) {
    rc = uv_read_start((uv_stream_t *)&w->pipe[s], alloc_cb, read_cb);
    if (rc != 0) {
      hk_log(HK_LOG_WARNING, "cannot read the %s of rank %d: %s",
             s ? "stderr" : "stdout", rank, uv_strerror(rc));
      close_pipe(w, s);
    }
  }
  return HK_OK;
}

hk_status hk_workers_start(hk_workers *ws) {
  /* Rank 0 inherits our stdin only if we have one. */
  int stdin_ok = fcntl(0, F_GETFD) != -1;
  hk_status st = HK_OK;
  for (int r = 0; r < ws->opts.size && st == HK_OK; r++)
    st = start_one(ws, r, stdin_ok);
  if (ws->running == 0)
    start_finishing(ws); /* nothing will exit: finish from here */
  return st;
}

int hk_workers_signal(hk_workers *ws, int sig) {
  int n = 0;
  for (int r = 0; r < ws->started; r++) {
    hk_worker *w = &ws->w[r];
    if (w->exited)
      continue;
    /* A worker that left its group still gets the signal itself. */
    if (kill(-w->pid, sig) != 0 && kill(w->pid, sig) != 0)
      continue;
    n++;
  }
  return n;
}

int hk_workers_ask_dump(hk_workers *ws) {
  int n = 0;
  for (int r = 0; r < ws->started; r++) {
    hk_worker *w = &ws->w[r];
    if (w->exited || w->dump_fd < 0)
      continue;
    /* a full pipe already holds a request the rank has not read */
    if (write(w->dump_fd, "d", 1) == 1 || errno == EAGAIN)
      n++;
  }
  return n;
}

void hk_workers_free(hk_workers *ws) {
  if (ws->w)
    for (int r = 0; r < ws->opts.size; r++) {
      for (int s = 0; s < 2; s++) {
        hk_out_free(&ws->w[r].split[s]);
        hk_outfile_close(&ws->w[r].file[s]);
      }
      if (ws->w[r].dump_fd >= 0)
        close(ws->w[r].dump_fd);
    }
  free(ws->w);
  ws->w = NULL;
}
