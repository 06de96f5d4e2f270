/*
 * config.h - every HK_* environment variable of hk, in one table
 * (common/config.c): its kind, default, unit, valid range or words, and
 * what it means (docs/tuning.md's table is printed from it), and, where
 * Horovod has the same setting, Horovod's variable, read when hk's is
 * unset (so a Horovod job's scripts keep working). No other
 * file reads an HK_* variable (scripts/check-layers.py fails the tests on
 * one that does). hkrun flags override them by setting the variable for
 * the workers; the variables hkrun sets for its workers (rank, size,
 * rendezvous, secret) are entries of the table too.
 */
#ifndef HK_COMMON_CONFIG_H
#define HK_COMMON_CONFIG_H

#include <stddef.h>

#include "hk/hk.h"

/** HK_CROSS_TRANSPORT: how the ring crosses hosts. */
typedef enum hk_cross_transport {
  HK_CROSS_TCP = 0, /* hk's own TCP links (HK_SOCKETS_PER_PEER sockets) */
  HK_CROSS_MPI = 1, /* MPI point-to-point on hk's communicator */
} hk_cross_transport;

/** HK_INTRA_TRANSPORT: how ranks of one host reach each other. */
typedef enum hk_intra_transport {
  HK_INTRA_AUTO = 0, /* shared memory where it can be set up, else TCP */
  HK_INTRA_SHM = 1,  /* shared memory, or fail at hk_init saying why */
  HK_INTRA_TCP = 2,  /* loopback TCP links, as across hosts */
} hk_intra_transport;

typedef struct hk_config {
  double cycle_time_ms;       /* HK_CYCLE_TIME_MS: the longest a batch may
                                 wait to grow, ms; 0 = never waits */
  double timeout_s;           /* HK_TIMEOUT_S: a stuck transfer fails, s */
  double start_timeout_s;     /* HK_START_TIMEOUT_S: rendezvous + connect, s */
  size_t ring_chunk_bytes;    /* HK_RING_CHUNK_BYTES: ring pipeline chunk */
  size_t fusion_threshold;    /* HK_FUSION_THRESHOLD: bytes, 0 = no fusion */
  size_t fusion_direct;       /* HK_FUSION_DIRECT_BYTES: larger run alone;
                                 0 = auto, (size - 1) x 256 KiB */
  size_t cache_capacity;      /* HK_CACHE_CAPACITY: tensors, 0 = no cache */
  double stall_check_s;       /* HK_STALL_CHECK_TIME_S: warn after, 0 = off */
  double stall_shutdown_s;    /* HK_STALL_SHUTDOWN_TIME_S: abort after; 0 no */
  size_t staging_chunk_bytes; /* HK_STAGING_CHUNK_BYTES: device staging */
  size_t sockets_per_peer;    /* HK_SOCKETS_PER_PEER: TCP connections per
                                 pair of ranks, 1..8; a link stripes over them */
  int cross_transport;        /* HK_CROSS_TRANSPORT: hk_cross_transport */
  int intra_transport;        /* HK_INTRA_TRANSPORT: hk_intra_transport */
  size_t shm_slot_bytes;      /* HK_SHM_SLOT_BYTES: each rank's shared slot
                                 half (collectives/shm_group.h), bytes */
  double net_gbit;            /* HK_NET_GBIT: each host's network, Gbit/s */
  double spin_us;             /* HK_SPIN_US: poll before sleeping, us */
  double burst_gap_us;        /* HK_BURST_GAP_US: a submit burst ends after
                                 this long without a submit, us; 0: no hold */
  double burst_max_us;        /* HK_BURST_MAX_US: the longest a burst is held
                                 from its first submit, us */
  int hierarchical;           /* HK_HIERARCHICAL_ALLREDUCE: 1, 0, -1 unset */
  char allreduce_algo[16];    /* HK_ALLREDUCE_ALGO: "ring", "hierarchical",
                                 "rd", or "" (auto); lower case */
  char topo_file[4096];       /* HK_TOPO_FILE: a server layout file
                                 (topology/), or "" */
  /* set by hkrun for its workers */
  char rendezvous[320];     /* HK_RENDEZVOUS: hkrun's host:port, or "" */
  char secret[160];         /* HK_SECRET: the job's secret (hex), or "" */
  int launcher_pid;         /* HK_LAUNCHER_PID: hkrun's pid, 0 if unset or
                               not a pid */
  int log_level;            /* HK_LOG_LEVEL: hk_log_level */
  char timeline[4096];      /* HK_TIMELINE: rank 0's trace file, or "" */
  int timeline_mark_cycles; /* HK_TIMELINE_MARK_CYCLES: 1 = an instant
                               CYCLE_START event per round that ran work */
  size_t flight_recorder;   /* HK_FLIGHT_RECORDER: collectives each rank
                               keeps for its flight record; 0 = off */
  char flight_dir[4096];    /* HK_FLIGHT_DIR: the folder of the jobs'
                               flight record folders, or "" ($TMPDIR, else
                               /tmp) */
  int flight_signal;        /* HK_FLIGHT_SIGNAL: 1 = SIGUSR1 asks for a
                               flight record (observe/flight.h) */
  int dump_fd;              /* HK_DUMP_FD: hkrun's dump request pipe, or -1 */
  unsigned file_mode;       /* HK_FILE_MODE: mode of hk's output files
                               (common/outfile.h) */
  double timeline_max_mb;   /* HK_TIMELINE_MAX_MB: the file's bound, MiB;
                               0 = none */
  char socket_ifname[256];  /* HK_SOCKET_IFNAME: the interface (name or
                               CIDR subnet) ranks listen on, or "" */
  char process_sets[4096];  /* HK_PROCESS_SETS: the process sets hk_init
                               adds ("0,1;2,3"), or "" (read with
                               hk_config_next_set) */
  /* GPU tensors (device/device.h) */
  int device;             /* HK_DEVICE: hk_device_choice */
  int gpu;                /* HK_GPU: device index; -1 = the local rank */
  int compression;        /* HK_COMPRESSION: hk_compression */
  int test_kill_in_start; /* HK_TEST_KILL_IN_START: 1 = SIGKILL itself
                            in hk_init after the mesh (tests) */
  int test_gpu;           /* HK_TEST_GPU: 1 = tests needing a GPU fail
                             instead of skipping */
  /* Straggler and telemetry monitoring (observe/monitor.h) */
  int monitor;               /* HK_MONITOR: 1 = on; also on with any of the
                                three below or monitor_live */
  int elastic;               /* HK_ELASTIC: 1 = an elastic job (hkrun
                                --min-np; docs/elastic.md) */
  double elastic_timeout_s;  /* HK_ELASTIC_TIMEOUT_S: hk_elastic_reset's
                                wait for the job to re-form, s */
  int monitor_live;          /* HK_MONITOR_LIVE: 1 = rank 0 sends hkrun its
                                live table (set by hkrun --monitor) */
  size_t monitor_window;     /* HK_MONITOR_WINDOW: rounds per window */
  double monitor_report_s;   /* HK_MONITOR_REPORT_S: report period, s; 0 =
                                only at exit */
  double telemetry_s;        /* HK_TELEMETRY_INTERVAL_S: sampling period, s */
  double metrics_interval_s; /* HK_METRICS_INTERVAL_S: metrics file period */
  char metrics_file[4096];   /* HK_METRICS_FILE: Prometheus text file, or "" */
  char nvml_library[4096];   /* HK_NVML_LIBRARY: NVML to load for telemetry,
                                or "" (libnvidia-ml.so.1) */
  /* HK_EMU_FAULT=kind:rank:op[:ms] (emu backend only): kind 0 none,
     1 error, 2 hang, 3 delay, 4 enqueue (device.h hk_dev_fault_kind) */
  int emu_fault_kind, emu_fault_rank, emu_fault_op, emu_fault_ms;
  int emu_devices;     /* HK_EMU_DEVICES: devices the emulated driver shows */
  int device_inflight; /* HK_DEVICE_INFLIGHT: device allreduce batches in
                          flight on hk's stream at once (1..16) */
  /* The autotuner (hkrun --autotune; coordinator/autotune.h) */
  int autotune;             /* HK_AUTOTUNE: 1 = rank 0 tunes the fusion
                               threshold, cycle time and hierarchical
                               allreduce while the job runs */
  char autotune_log[4096];  /* HK_AUTOTUNE_LOG: CSV, one row per trial */
  char autotune_save[4096]; /* HK_AUTOTUNE_SAVE: the chosen settings, as
                               HK_*=value lines (hkrun --autotune-load) */
  int autotune_warmup;      /* HK_AUTOTUNE_WARMUP_STEPS: steps dropped
                               after each change of setting */
  int autotune_steps;       /* HK_AUTOTUNE_STEPS_PER_SAMPLE: steps per
                               sample */
  int autotune_max_samples; /* HK_AUTOTUNE_MAX_SAMPLES: a trial's budget */
  int autotune_max_trials;  /* HK_AUTOTUNE_MAX_TRIALS: the search's */
  int autotune_sockets;     /* HK_AUTOTUNE_SOCKETS: the most sockets per
                               peer tried (and opened) */
  int autotune_compression; /* HK_AUTOTUNE_COMPRESSION: 1 = compression
                               is searched too */
  double autotune_spread;   /* HK_AUTOTUNE_SPREAD: uncertainty bound */
  double test_tune_cost_s;  /* HK_TEST_TUNE_GROUP_COST_S: tests only: each
                               fused group adds this to rank 0's measured
                               step time (no wall time passes) */
  double test_tune_jitter;  /* HK_TEST_TUNE_JITTER: tests only: each
                               measured step time is multiplied by 1 + this
                               x a pseudo-random number in [-1, 1] */
} hk_config;

/** HK_DEVICE: which device backend GPU tensors use. */
typedef enum hk_device_choice {
  HK_DEVICE_AUTO = 0, /* cuda where libhk_cuda.so loads and sees a GPU */
  HK_DEVICE_CUDA = 1, /* cuda, or fail at hk_init saying what is missing */
  HK_DEVICE_EMU = 2,  /* the emulated GPU (device/emu) */
  HK_DEVICE_NONE = 3, /* host tensors only */
} hk_device_choice;

/** HK_COMPRESSION: the type float32 device gradients travel in. */
typedef enum hk_compression {
  HK_COMPRESS_NONE = 0,
  HK_COMPRESS_FP16 = 1,
  HK_COMPRESS_BF16 = 2,
} hk_compression;

/** Most ranks one process set of HK_PROCESS_SETS may list. */
#define HK_CONFIG_SET_RANKS 65536

/**
 * Reads the next process set of HK_PROCESS_SETS's text ("0,1;2,3": sets
 * separated by ';', their ranks by ',', blanks allowed around both) from
 * *pos: ranks[0..*n) gets its ranks as written (at most cap; more is an
 * error), *pos moves past it and its ';'. Returns 1 when it read one, 0 at
 * the end of the text. The ranks are not checked against the job (the
 * set's add does that). Errors (returned through *st, with 0): HK_ERR_CONFIG
 * naming HK_PROCESS_SETS and the bad text (not a rank, an empty set, a
 * rank at or over HK_CONFIG_SET_RANKS, more than cap ranks).
 */
int hk_config_next_set(const char **pos, int *ranks, int cap, int *n,
                       hk_status *st);

/**
 * Fills *cfg from the environment, defaults where a variable is unset or
 * empty, in table order (the first bad variable is the one reported).
 * Errors: HK_ERR_CONFIG naming the variable, its value and the valid
 * range or words.
 */
hk_status hk_config_load(hk_config *cfg);

/**
 * Loads only the entry of variable `var` into *cfg (its field, and what
 * its parse sets), as hk_config_load would: for a program that needs one
 * setting and must not fail on another's bad value (hkrun's HK_LOG_LEVEL,
 * hktopo's HK_TOPO_FILE). Errors: as hk_config_load for that variable;
 * HK_ERR_INVALID_ARG when var is no entry of the table.
 */
hk_status hk_config_load_var(hk_config *cfg, const char *var);

/**
 * A likely misspelling: when var starts with "HK_", is no entry of the
 * table, and what follows "HK_" is close to an entry's (common/strdist.h:
 * HK_FUSION_TRESHOLD, HK_CYCLE_TIMES), that entry's name (static); else
 * NULL. hkrun warns
 * with it, as a misspelt variable is otherwise silently ignored. Pure;
 * any thread. Errors: none.
 */
const char *hk_config_near_miss(const char *var);

/**
 * The raw value of a variable the launcher sets (an entry of kind
 * HK_TUNABLE_LAUNCHER: HK_RANK, HK_SIZE, HK_LOCAL_RANK, HK_LOCAL_SIZE,
 * ...), or NULL when unset or when var is not such an entry: what
 * worker/placement.c parses, with the other launchers' variables, into
 * the job's placement. The string is the environment's (valid until it
 * changes). Thread-safety: as getenv.
 */
const char *hk_config_env(const char *var);

/**
 * Removes from the environment the variables meant for hk_init alone:
 * HK_SECRET (the job's secret) and HK_DUMP_FD (hkrun's pipe), so that the
 * programs this process starts do not see them. hk_init calls it once it
 * has succeeded. A program that starts workers of its own that join hk
 * must give them their settings itself (it read them before hk_init, or
 * they come from the launcher). Thread-safety: as unsetenv (no other
 * thread may read or change the environment meanwhile).
 */
void hk_config_consume(void);

/** The kinds of entry of the table. */
typedef enum hk_tunable_kind {
  HK_TUNABLE_NUMBER = 0,   /* a double in [min, max] */
  HK_TUNABLE_SIZE = 1,     /* a whole count in [min, max], stored as size_t */
  HK_TUNABLE_INTEGER = 2,  /* an int in [min, max] (a flag: [0, 1]) */
  HK_TUNABLE_WORD = 3,     /* one of words[0..nwords), any case */
  HK_TUNABLE_STRING = 4,   /* a file, folder, interface... */
  HK_TUNABLE_SPECIAL = 5,  /* parsed by a function of its own */
  HK_TUNABLE_LAUNCHER = 6, /* set by hkrun for its workers */
} hk_tunable_kind;

/** One entry of the table hk_config_load reads (config.c). */
typedef struct hk_tunable_info {
  const char *var; /* the HK_* environment variable */
  hk_tunable_kind kind;
  double def;          /* numbers and integers: the value when unset */
  double min, max;     /* numbers and integers: the range, ends included */
  const char *unit;    /* numbers: "bytes", "s", "ms", "MiB", ...; else "" */
  const char *meaning; /* what it does, one or two sentences for users */
  const char *const *words; /* words: the accepted ones, the first the
                               default; else NULL */
  int nwords;
  const char *def_text;    /* the default in words where it is no number
                              ("(none)", "the local rank"), or NULL */
  const char *values_text; /* the accepted values in words where the range
                              or the words do not say it all, or NULL */
  const char *alias;       /* Horovod's variable for the same setting, read
                              when this one is unset or empty, or NULL */
} hk_tunable_info;

/**
 * Describes the i-th entry of config.c's table, in table order, for the
 * generator of docs/tuning.md's table (tests/docs/tunables_md.c), so that
 * the documentation is printed from the very table hk_config_load uses.
 * Returns 1 and fills *out when i is less than the table's length; 0
 * (leaving *out untouched) otherwise, so `for (i = 0;
 * hk_config_tunable(i, &t); i++)` visits every entry.
 * Ownership: the strings in *out are static; never free them.
 * Thread-safety: any thread (reads a constant table). Errors: none.
 */
int hk_config_tunable(size_t i, hk_tunable_info *out);

/** 1 if any monitoring setting above is on (HK_MONITOR, HK_MONITOR_LIVE,
 *  HK_METRICS_FILE, HK_MONITOR_REPORT_S > 0). */
int hk_config_monitoring(const hk_config *cfg);

/**
 * The CPUs this process may run on: its affinity mask (taskset, cgroup
 * cpusets, hkrun --bind-to), at most the online CPUs; at least 1. What
 * decides whether a host's ranks each have a core, so that the shm
 * engine's waits may poll longer rather than hand the core to a peer at
 * once (collectives/transport/shm_seg.c). Thread-safe; a system call per
 * call.
 */
int hk_usable_cpus(void);

#endif
