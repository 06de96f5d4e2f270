/*
 * context.h - the one runtime context of a worker process (docs/design.md,
 * "Rules of the house": one struct holds a worker's state). hk_init creates it;
 * every worker module takes it as an argument.
 *
 * Locking: `mu` guards the fields marked [mu]; the background thread owns
 * the fields marked [bg] (no lock); the rest is set by hk_init before the
 * background thread starts and is read-only afterwards.
 */
#ifndef HK_WORKER_CONTEXT_H
#define HK_WORKER_CONTEXT_H

#include <pthread.h>
#include <stdint.h>

#include "collectives/allreduce.h"
#include "collectives/ring.h"
#include "collectives/transport/ctrl.h"
#include "common/auth.h"
#include "common/buf.h"
#include "common/config.h"
#include "common/strmap.h"
#include "coordinator/cache.h"
#include "coordinator/negotiate.h"
#include "coordinator/wire.h"
#include "device/device.h"
#include "hk/hk.h"
#include "observe/observe.h"
#include "worker/placement.h"

/* An operation in flight: what the trainer submitted, and its outcome.
 * A grouped allreduce is one parent handle (what the trainer waits on)
 * and one member handle per tensor (in flight under its name); members
 * are freed by the background thread when they complete. */
struct hk_handle_s {
  hk_wire_request req; /* name, collective, dtype, op, root, count, scales */
  double t_submit;     /* hk_now() at submit, when an observer asks for
                          it (observe/observe.h: wants_submit_time) */
  uint64_t obs_slot;   /* [bg] the observers' word for this tensor
                          (hk_obs_tensor.slot: the flight recorder's
                          entry), 0 until one writes it */
  const void *sendbuf;
  void *recvbuf;
  void **out_buf;     /* allgather/alltoall: where hk's buffer goes */
  size_t *out_counts; /* rows per rank (allgather, alltoall), or NULL */
  size_t *out_rows;   /* reducescatter: this rank's rows, or NULL */
  size_t *splits;     /* alltoall: rows for each rank (owned copy) */
  int out_int;        /* process set add: the new id */
  int *members;       /* process set add: the ranks given (a
                         malloc'd copy), nmembers of them */
  int nmembers;
  int members_problem;        /* process set add: what is wrong with the
                                 arguments on this rank (worker/sets.h,
                                 HK_SETS_*), 0: nothing */
  struct hk_handle_s *parent; /* a group member's group handle */
  int phantom;              /* made up for a rank that joined: not in flight */
  int pending;              /* [mu] a group handle: members not yet complete */
  int done;                 /* [mu] 1 once completed (stored with release order:
                               hk_queue_wait also polls it without mu, acquire) */
  hk_status status;         /* [mu] valid once done */
  char *reason;             /* [mu] malloc'd message when status != HK_OK */
  struct hk_handle_s *next; /* [mu] in the submit queue */
  hk_dev_event ready;       /* device tensors: recorded on the producer
                               stream at submit (worker/devplane.h) */
  hk_dev_event done_ev;     /* device allreduce: recorded on hk's stream
                               after the result's unpack */
  int enqueued;             /* [mu] done_ev is recorded: hk_wait_stream
                               may order a stream after it */
  int detached;             /* [mu] hk_wait_stream returned before the
                               handle completed: completion frees it */
};

/* The connections of one worker (see worker/bootstrap.c). */
typedef struct hk_mesh {
  int listen_fd;   /* closed once the mesh is built */
  int launcher_fd; /* to hkrun's rendezvous; -1 without hkrun */
  int *peer_fds;   /* data: peer_fds[r] = the first socket of links[r]
                      (owned by the link; -1 for an MPI link and for this
                      rank) */
  int ctrl_fd;     /* rank > 0: to rank 0 */
  int watch_fd;    /* elastic, rank 0: its watch on the rendezvous (told
                      of workers waiting to join: HK_MSG_JOIN); else -1 */
  int *ctrl_fds;   /* rank 0: ctrl_fds[r] from rank r (index 0 unused) */
  hk_ctrl *ctrl;   /* the control endpoints over those sockets
                      (collectives/transport/ctrl.h), size entries:
                      rank 0: ctrl[r] to rank r (index 0 unused); rank
                      r > 0: ctrl[0] to rank 0. tcp, or shm between rank
                      0 and the ranks of its host (worker/intra.c) */
  hk_link *links;  /* data: links[r] to rank r, size entries (links[rank]
                      unused, closed): TCP over
                      HK_SOCKETS_PER_PEER sockets, or MPI to ranks on
                      other hosts with HK_CROSS_TRANSPORT=mpi */
} hk_mesh;

#define HK_HOST_NAME_CAP (HK_WIRE_MAX_HOST_LEN + 1) /* ctx->hosts stride */

struct hk_devset;

/*
 * A process set (include/hk/hk.h): a group of the job's ranks with its
 * own negotiation, response cache, rings and device communicator. The
 * world is set 0. Its members are counted 0..size-1 in the order of
 * their job ranks (ranks ascend); every rank of the job holds every set's
 * entry (worker/sets.h made it, in the same order everywhere), the
 * members and rank 0 what runs it.
 */
typedef struct hk_set {
  int32_t id;
  int size;    /* members */
  int *ranks;  /* ranks[j]: the job rank of set rank j, ascending */
  int rank;    /* this rank's rank in the set, -1: not a member */
  int removed; /* [mu] hk_process_set_remove ran (the parts below are
                  gone; the entry stays, to say so) */
  uint64_t barrier_seq, join_seq; /* [mu] name this rank's barriers and
                                     joins on the set */
  /* [bg] what the members run the set's collectives over */
  hk_ring *ring;         /* over the members (the world: &ctx->ring) */
  hk_allreduce_env *ar;  /* its allreduce table's environment (the
                            world: &ctx->ar) */
  hk_link **peers;       /* peers[j]: the link to set rank j (NULL for
                            this rank) */
  struct hk_devset *dev; /* its device communicator (worker/devplane.h),
                            or NULL */
  int dev_uid_done;      /* the members exchanged its communicator's id
                            (at its first device batch that needs it) */
  /* [bg] the members and rank 0 */
  hk_cache *cache; /* the set's response cache (the same on its members
                      and rank 0) */
  /* [bg] rank 0: the set's negotiation */
  hk_negotiator *neg;
  uint32_t *inval; /* bits retired, not yet told */
  uint32_t ninval, cap_inval;
  /* a set other than the world: the storage of ring and ar */
  hk_ring own_ring;
  hk_allreduce_env own_ar;
} hk_set;

typedef struct hk_ctx {
  int rank, size, local_rank, local_size;
  int cross_rank, cross_size; /* this rank's host among the hosts */
  int placement;              /* hk_placement_source: who started us */
  int secret_from_rank0;      /* no HK_SECRET: take rank 0's over MPI */
  int slot, slots;            /* the rank and size hkrun started this
                                 worker with (HK_RANK, HK_SIZE): an
                                 elastic job's rendezvous knows it by slot */
  int generation;             /* elastic: how often the job re-formed */
  int joiners;                /* [bg] rank 0: workers waiting to join, as
                                 its watch last said */
  int hosts_updated;          /* elastic: a world round said workers wait
                                 to join (HK_MSG_JOIN); written by the
                                 background thread, read by any (__atomic) */
  int launcher_parent;        /* the pid of hkrun (HK_LAUNCHER_PID) when it
                                 is our parent process; 0 otherwise */
  hk_config cfg;
  hk_secret secret;
  hk_mesh mesh;
  struct hk_intra *intra; /* shared memory with this host's ranks
                             (worker/intra.h), or NULL */
  hk_io io;               /* abort_fd = launcher_fd, timeout = HK_TIMEOUT_S */
  hk_rank_layout *layout; /* every rank's host and place on it (size) */
  char *hosts;            /* every rank's host name, HK_HOST_NAME_CAP bytes
                             each, where the launcher told them (MPI
                             bootstrap); else NULL (one host) */
  hk_ring ring;           /* [bg] the flat ring over every rank */
  hk_ring local_ring;     /* [bg] hierarchical: this host's ranks */
  hk_ring cross_ring;     /* [bg] hierarchical: one rank per host */
  int have_hier;          /* local_ring and cross_ring are set up */
  hk_allreduce_env ar;    /* the allreduce implementations' environment and
                             the worked-out choice (worker/algo.h); its
                             scratch is [bg] */
  hk_strmap *overflow_warned; /* [bg] names whose 16-bit sum held an inf
                                 (warned once each) */
  int cache_warned;           /* [bg] rank 0 said the cache is full */

  pthread_t thread;
  int thread_started;
  int wake_fd; /* eventfd: a trainer thread submitted or shut down */

  pthread_mutex_t mu;
  pthread_cond_t done_cv; /* [mu] broadcast when any handle completes */
  hk_strmap *inflight;    /* [mu] name -> handle, until completed */
  hk_strmap *taken;       /* [bg] name -> handle, for the handles the
                             background thread took from the queue, until
                             completed: found without taking mu */
  hk_handle queue_head;   /* [mu] submitted, not yet sent to rank 0 */
  hk_handle queue_tail;   /* [mu] */
  int wake_muted;         /* [mu] 1: a submit into the empty queue need not
                             write wake_fd (the background thread looks at
                             the queue by itself: hk_queue_take_bounded) */
  double last_submit;     /* [mu] hk_now() of the latest submit */
  double queue_since;     /* [mu] hk_now() when the queue became non-empty */
  double held_until;      /* [bg] the queue is held (a burst) until then */
  uint64_t submits;       /* atomic, written under mu: submits so far */
  uint64_t settled;       /* atomic: `submits` when a trainer thread last waited
                             or polled: the burst up to there is over */
  int held; /* atomic: 1 while the background thread holds the queue, 2
               while it sleeps holding it (a waiter writes wake_fd) */
  int shutdown_requested; /* [mu] hk_shutdown was called here */
  int stopped;            /* [mu] background loop has ended */
  hk_status failure;      /* [mu] HK_OK, or why the job failed/stopped */
  char failure_reason[HK_WIRE_MAX_REASON_LEN + 1]; /* [mu] */
  hk_set **sets;    /* [mu] the process sets by id (sets[0]: the world);
                       the background thread, the only one that adds and
                       removes them, also reads them without mu */
  int32_t nsets;    /* [mu] ids given so far (a removed id is not given
                       again) */
  uint64_t set_seq; /* [mu] names this rank's process set adds and
                       removes hk.process_set.<n> */

  hk_buf scratch;            /* [bg] message encoding/decoding */
  uint8_t *fusion;           /* [bg] the fusion buffer, fusion_bytes bytes
                                (cfg.fusion_threshold when mapped), mapped
                                on first use and reused; mapped again when
                                the autotuner raised the threshold */
  size_t fusion_bytes;       /* [bg] its size */
  struct hk_tune *tune;      /* [bg] rank 0 with HK_AUTOTUNE: the search and
                                its step detection (worker/tune.h) */
  uint64_t world_rounds;     /* [bg] world RESPONSES that ran tensors, in
                                the same order on every rank */
  double tune_virtual_s;     /* [bg] rank 0: HK_TEST_TUNE_GROUP_COST_S
                                added since the last step */
  struct hk_exec_plan *plan; /* [bg] worker/execute.c's working arrays,
                                kept between rounds */
  double next_stall_check;   /* [bg] rank 0: hk_now() of the next check */
  double next_stall_warning; /* [bg] rank 0: no warning before this */

  /* The GPU data plane (worker/devplane.h). */
  hk_device *dev;                  /* the backend HK_DEVICE opened, or NULL */
  char dev_missing[512];           /* with dev NULL: why there is none */
  struct hk_devplane *gpu;         /* [bg] streams, communicator, buffers */
  struct hk_devflights *devflight; /* [bg] device batches in flight
                                      (worker/devflight.h), or NULL */

  /* The observers (observe/observe.h): attached by hk_init (worker/
   * observers.h), detached by hk_shutdown; the list does not change while
   * the background thread runs, which is the one that calls the hooks. */
  hk_observers obs;
} hk_ctx;

/** The tensor hooks' view of h (observe/observe.h): borrowed from h; resp
 *  NULL and t_ready 0 before h's round. */
static inline hk_obs_tensor
hk_observed(hk_handle h, const hk_wire_response *resp, double t_ready) {
  return (hk_obs_tensor){.req = &h->req,
                         .resp = resp,
                         .t_ready = t_ready,
                         .t_submit = h->t_submit,
                         .slot = &h->obs_slot,
                         .phantom = h->phantom};
}

#endif
