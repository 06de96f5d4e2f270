/*
 * spawn.h - hkrun's worker processes: starting them with libuv, pumping
 * their stdout/stderr through the line splitter to hkrun's own stdout and
 * stderr, signalling their process groups and reporting their exits.
 *
 * Every worker is started with UV_PROCESS_DETACHED, so it leads its own
 * session and process group (pgid == pid) and kill(-pid, sig) reaches the
 * children it started too. Rank 0 inherits hkrun's stdin, the others read
 * /dev/null. Each worker's environment is hkrun's plus HK_RANK, HK_SIZE,
 * HK_LOCAL_RANK (= rank), HK_LOCAL_SIZE (= size), HK_RENDEZVOUS, HK_SECRET
 * and HK_LAUNCHER_PID (values from the caller, not hkrun's own), and
 * HK_DUMP_FD=3: its descriptor 3 is the read end of a pipe whose write end
 * hkrun keeps, through which hk_workers_ask_dump asks the rank for its
 * flight record (observe/flight.h) without a signal.
 *
 * Binding (--bind-to): with cpu_masks, rank r starts with affinity
 * cpu_masks[r] (hkrun sets its own thread's mask around the spawn, which
 * the child inherits, and puts it back).
 * Output files (--output-filename DIR): each rank's lines also go,
 * without the "[rank] " prefix, to DIR/rank.<r>/stdout and .../stderr,
 * <r> zero-padded to the width of size-1 (horovodrun's layout), made as
 * every output of hk (common/outfile.h: never through a link, mode
 * file_mode, folders file_mode plus x; rank.<r> must be hkrun's own) when
 * the rank starts, replacing an earlier run's. A write that fails cuts
 * the file back to its last whole line and stops it, with one warning.
 *
 * Life cycle: hk_workers_init -> hk_workers_start -> uv_run(loop) ->
 * hk_workers_free. Once every started worker has exited, the set SIGKILLs
 * what is left in their process groups, reads the pipes to EOF (at most
 * HK_WORKERS_DRAIN_MS more), and closes all its libuv handles, so uv_run
 * can return. Thread-safety: loop thread only.
 */
#ifndef HK_LAUNCHER_SPAWN_H
#define HK_LAUNCHER_SPAWN_H

#include <sched.h>
#include <stdint.h>
#include <uv.h>

#include "common/outfile.h"
#include "hk/hk.h"
#include "launcher/output.h"

/** After the last worker exits, how long its pipes may stay open, ms. */
#define HK_WORKERS_DRAIN_MS 2000

struct hk_workers;

/** One worker process. Read-only for callers. */
typedef struct hk_worker {
  struct hk_workers *set;
  int rank;            /* its rank: rank_base + its index in the set */
  int pid;             /* > 0 once started */
  int exited;          /* 1 once its exit was seen (and it was reaped) */
  int64_t exit_status; /* its exit status when term_signal == 0 */
  int term_signal;     /* the signal that killed it, or 0 */
  uv_process_t proc;
  uv_pipe_t pipe[2]; /* [0]: its stdout, [1]: its stderr */
  int pipe_open[2];  /* 1 until EOF (or the drain deadline) */
  hk_out_splitter split[2];
  hk_outfile file[2]; /* --output-filename's files (fd -1: none) */
  int dump_fd;        /* write end of its dump request pipe, or -1 */
} hk_worker;

/** Called after a worker exited (w->exited is already 1 and set->running
 *  counts it out). May call any hk_workers function. */
typedef void (*hk_worker_exit_fn)(hk_worker *w, void *ctx);

typedef struct hk_spawn_opts {
  char **argv;                /* program and args, NULL-terminated; borrowed */
  int size;                   /* number of workers, >= 1 */
  int rank_base;              /* an agent's first slot (launcher/agent.h):
                                 worker i is rank rank_base + i (its
                                 HK_RANK, HK_LOCAL_RANK, w->rank and
                                 output prefix); 0 otherwise */
  int job_size;               /* HK_SIZE and HK_LOCAL_SIZE when > 0 (an
                                 agent's job); else size */
  const char *rendezvous;     /* HK_RENDEZVOUS value, "127.0.0.1:port" */
  const char *secret_hex;     /* HK_SECRET value, 64 hex digits */
  int launcher_pid;           /* HK_LAUNCHER_PID value */
  int tag_output;             /* 1: prefix lines with "[rank] " */
  int out_fd, err_fd;         /* where worker stdout / stderr lines go */
  const char *output_dir;     /* NULL, or --output-filename's folder */
  unsigned file_mode;         /* HK_FILE_MODE: the output files' mode */
  const cpu_set_t *cpu_masks; /* NULL, or size masks (--bind-to) */
  hk_worker_exit_fn on_exit;
  void *ctx; /* passed to on_exit */
} hk_spawn_opts;

typedef struct hk_workers {
  uv_loop_t *loop;
  hk_spawn_opts opts; /* copied; strings still borrowed */
  hk_worker *w;       /* opts.size entries, index = rank */
  int started;        /* workers 0..started-1 were started */
  int running;        /* started and not yet exited */
  int open_pipes;     /* pipes still being read */
  int finishing;      /* every started worker has exited */
  int sink_dead[2];   /* writing to out_fd / err_fd failed (EPIPE...) */
  uv_timer_t drain_timer;
  int drain_timer_open;
  char readbuf[64 * 1024];
} hk_workers;

/**
 * Prepares the set (allocates the worker table and the drain timer). Must
 * be followed by hk_workers_start (even if the caller changes its mind) so
 * the handles get closed. Errors: HK_ERR_NOMEM, HK_ERR_SYSTEM.
 */
hk_status hk_workers_init(hk_workers *ws, uv_loop_t *loop,
                          const hk_spawn_opts *opts);

/**
 * Starts ranks 0..size-1 in order. If one cannot be started it stops
 * there and returns HK_ERR_SYSTEM with hk_last_error() set to
 * "cannot start '<prog>': <reason>" (or names the output file or the
 * binding that failed); the workers already started keep
 * running (the caller signals them) and their exits still arrive through
 * the loop. Either way uv_run(loop) then finishes once every started
 * worker has exited.
 */
hk_status hk_workers_start(hk_workers *ws);

/**
 * Sends sig to the process group of every started worker that has not
 * exited yet (to the worker alone if its group is gone). Returns how many
 * workers were signalled.
 */
int hk_workers_signal(hk_workers *ws, int sig);

/** Asks every started worker that has not exited for its flight record:
 *  one byte into its dump pipe (a full pipe already holds a request).
 *  Returns how many were asked. */
int hk_workers_ask_dump(hk_workers *ws);

/** Frees what init allocated; call after uv_run has returned. */
void hk_workers_free(hk_workers *ws);

#endif
