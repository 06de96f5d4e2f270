/*
 * placement.h - where this process sits in the job: its rank, the job's
 * size, and its place on its host, from the environment of whichever
 * launcher started it, and the per-host layout derived from every rank's
 * host name.
 *
 * Launchers, in priority order (the first whose rank variable is set
 * wins; its other variables must then be consistent):
 *   hkrun   HK_RANK, HK_SIZE, HK_LOCAL_RANK, HK_LOCAL_SIZE
 *   Open MPI (mpirun, also through `hkrun -H`)
 *           OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *   Slurm (srun)
 *           SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_LOCALID;
 *           local_size from SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID
 *           (e.g. "4(x2),3": nodes 0-1 run 4 tasks, node 2 runs 3), else
 *           SLURM_TASKS_PER_NODE the same way, else SLURM_NTASKS_PER_NODE
 *   none    a world of size 1: rank 0, local 0 of 1
 * For hkrun, a missing HK_LOCAL_* means the whole job is local (as hkrun
 * sets them today). For Slurm, local_size is -1 when no variable gives
 * it; hk_layout_from_hosts() derives it from host names instead.
 */
#ifndef HK_WORKER_PLACEMENT_H
#define HK_WORKER_PLACEMENT_H

#include "hk/hk.h"

typedef enum hk_placement_source {
  HK_PLACEMENT_NONE = 0,  /* no launcher: a world of size 1 */
  HK_PLACEMENT_HKRUN = 1, /* HK_RANK... */
  HK_PLACEMENT_OMPI = 2,  /* OMPI_COMM_WORLD_... */
  HK_PLACEMENT_SLURM = 3, /* SLURM_... */
} hk_placement_source;

typedef struct hk_placement {
  int rank, size;             /* 0 <= rank < size */
  int local_rank, local_size; /* 0 <= local_rank < local_size <= size;
                                 local_size -1: unknown (Slurm only) */
  hk_placement_source source;
} hk_placement;

/**
 * Reads the launcher's variables (getenv) into *out.
 * Errors: HK_ERR_CONFIG naming the variable and its value, e.g.
 * "OMPI_COMM_WORLD_RANK='7' is not an integer in [0, 3]" or
 * "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not".
 * Thread-safety: as getenv (no concurrent setenv).
 */
hk_status hk_placement_from_env(hk_placement *out);

/** "hkrun", "Open MPI", "Slurm" or "no launcher" (static strings). */
const char *hk_placement_source_name(hk_placement_source s);

/**
 * Number of tasks on node `node` (0-based) from a Slurm tasks-per-node
 * list such as "2(x3),1" ("2,2,2,1"). Returns -1 if the text is malformed
 * or node is beyond the list. Pure.
 */
int hk_slurm_tasks_on_node(const char *list, int node);

/** One rank's place among the hosts. */
typedef struct hk_rank_layout {
  int local_rank; /* index among the ranks of its host, in rank order */
  int local_size; /* ranks on its host */
  int cross_rank; /* index of its host among the hosts ordered by their
                     lowest rank */
  int cross_size; /* number of hosts */
} hk_rank_layout;

/**
 * Derives every rank's layout from hosts[r], the host name of rank r
 * (ranks with the same name, compared byte for byte, share a host).
 * out has `size` entries, index = rank. A host's ranks need not be
 * contiguous (ranks 0 and 2 on h1, 1 and 3 on h2 is fine: local ranks
 * follow rank order); but hk's ring keeps a host's ranks together only
 * when they are, which `hkrun -H` (mpirun --map-by slot) guarantees.
 * With hosts of unequal local_size, the ranks with local_rank l exist
 * only on the hosts with more than l ranks, so a hierarchical collective
 * must not assume one per host (hk_layout_uniform tells).
 * O(size log size) time, O(size) memory.
 * Errors: HK_ERR_INVALID_ARG (size < 1, a NULL or empty name, naming the
 * rank), HK_ERR_NOMEM. Pure; reentrant.
 */
hk_status hk_layout_from_hosts(const char *const *hosts, int size,
                               hk_rank_layout *out);

/** 1 if every host holds the same number of ranks, else 0. */
int hk_layout_uniform(const hk_rank_layout *layout, int size);

#endif
