#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/strdist.h"

/* The one table of tunables. Defaults: HK_CYCLE_TIME_MS = 0: negotiation
 * is event-driven (worker/background.c), so unlike Horovod's
 * HOROVOD_CYCLE_TIME (1 ms) no tensor waits for a timer; the chunk size of
 * 1 MiB matches
 * the write size at which loopback TCP reaches its peak on the reference
 * machine (bench/peers/results/limits.txt, tcp_ring 1024 KiB). */
typedef struct tunable tunable;
struct tunable {
  const char *var;
  double def, min, max; /* numbers and integers: default and range */
  const char *unit;     /* numbers and integers: the unit; else "" */
  const char *meaning;  /* for users (docs/tuning.md is printed from it) */
  size_t offset;        /* the hk_config field it fills */
  hk_tunable_kind kind;
  size_t cap;               /* strings: the field's capacity (with NUL) */
  const char *const *words; /* words: the accepted ones; the first is the
                               default and the field gets the index */
  int nwords;
  /* settings parsed by a function of their own (v: the value, "" when
   * unset or empty), the launcher's (checked where they are used), and
   * extra checks of a number: */
  hk_status (*parse)(hk_config *cfg, const char *name, const char *v);
  const char *def_text;    /* how the default reads, where it is no number */
  const char *values_text; /* what values are accepted, where it says more
                              than the range or the words */
  const char *alias;       /* Horovod's variable for the same setting, read when
                              this one is unset (a Horovod job's scripts set
                              them), or NULL */
  int consumed; /* for hk_init alone: hk_config_consume removes it from the
                   environment once hk_init has read it */
};

#define OFF(f) offsetof(hk_config, f)
/* (each takes, last, optional fields such as .alias = "HOROVOD_...") */
#define STRING(v, f, d, what, m, ...)                                          \
  {                                                                            \
    v, .meaning = m, .offset = OFF(f), .kind = HK_TUNABLE_STRING,              \
       .cap = sizeof((hk_config *)0)->f, .def_text = d, .values_text = what,   \
       __VA_ARGS__                                                             \
  }
#define STRING_BY_HKRUN(v, f, m, ...)                                          \
  {                                                                            \
    v, .meaning = m, .offset = OFF(f), .kind = HK_TUNABLE_LAUNCHER,            \
       .cap = sizeof((hk_config *)0)->f, .def_text = "(set by hkrun)",         \
       __VA_ARGS__                                                             \
  }
#define WORD(v, f, w, m)                                                       \
  {                                                                            \
    v, .meaning = m, .offset = OFF(f), .kind = HK_TUNABLE_WORD, .words = w,    \
       .nwords = (int)(sizeof w / sizeof w[0])                                 \
  }
#define INT(v, d, lo, hi, f, dt, m, ...)                                       \
  {                                                                            \
    v, d, lo, hi, "", m, OFF(f), HK_TUNABLE_INTEGER, .def_text = dt,           \
                                                     __VA_ARGS__               \
  }
#define LAUNCHER(v, m)                                                         \
  { v, .meaning = m, .kind = HK_TUNABLE_LAUNCHER, .def_text = "(set by hkrun)" }

static hk_status check_slot_bytes(hk_config *cfg, const char *name,
                                  const char *v);
static hk_status parse_allreduce_algo(hk_config *cfg, const char *name,
                                      const char *v);
static hk_status parse_hierarchical(hk_config *cfg, const char *name,
                                    const char *v);
static hk_status parse_fault(hk_config *cfg, const char *name, const char *v);
static hk_status parse_log_level(hk_config *cfg, const char *name,
                                 const char *v);
static hk_status parse_launcher_pid(hk_config *cfg, const char *name,
                                    const char *v);
static hk_status parse_stall_disable(hk_config *cfg, const char *name,
                                     const char *v);
static hk_status parse_process_sets(hk_config *cfg, const char *name,
                                    const char *v);
static hk_status parse_file_mode(hk_config *cfg, const char *name,
                                 const char *v);
static hk_status parse_dump_fd(hk_config *cfg, const char *name, const char *v);

/* words ignore case, as every word-valued setting does */
static const char *const transports[] = {"tcp", "mpi"};
static const char *const devices[] = {"auto", "cuda", "emu", "none"};
static const char *const comps[] = {"none", "fp16", "bf16"};
static const char *const intra[] = {"auto", "shm", "tcp"};

static const tunable table[] = {
    {"HK_CYCLE_TIME_MS", 0, 0, 60000, "ms",
     "upper bound on how long a batch may wait to grow: rank 0 may hold the "
     "answer to a request none of whose tensors is ready yet this long; 0: "
     "answer at once (a tensor ready on every rank never waits)",
     .offset = OFF(cycle_time_ms), .kind = HK_TUNABLE_NUMBER,
     .alias = "HOROVOD_CYCLE_TIME"},
    {"HK_TIMEOUT_S", 60, 0.1, 86400, "s",
     "a transfer or negotiation making no progress for this long fails",
     .offset = OFF(timeout_s), .kind = HK_TUNABLE_NUMBER},
    {"HK_START_TIMEOUT_S", 60, 0.1, 86400, "s",
     "hk_init fails if the job has not assembled by then",
     .offset = OFF(start_timeout_s), .kind = HK_TUNABLE_NUMBER},
    {"HK_RING_CHUNK_BYTES", 1 << 20, 4096, 1 << 30, "bytes",
     "pipeline chunk of the ring (receive staging buffer)",
     .offset = OFF(ring_chunk_bytes), .kind = HK_TUNABLE_SIZE},
    /* Horovod's HOROVOD_FUSION_THRESHOLD default (128 MiB since v0.21) */
    {"HK_FUSION_THRESHOLD", 128 << 20, 0, 1ull << 36, "bytes",
     "tensors reduced together in one fusion buffer, at most this many "
     "bytes; 0 disables fusion",
     .offset = OFF(fusion_threshold), .kind = HK_TUNABLE_SIZE,
     .alias = "HOROVOD_FUSION_THRESHOLD"},
    /* hk's own: copying a tensor into and out of the fusion buffer costs
     * 2b / B_mem; running it alone costs one more ring start-up,
     * ~2(n-1) alpha. With alpha ~16 us (loopback half round trip) and
     * B_mem ~10 GB/s (bench/peers/results) they break even near
     * (n-1) x 160 KB; 256 KiB per extra rank is the default. */
    {"HK_FUSION_DIRECT_BYTES", 0, 0, 1ull << 36, "bytes",
     "allreduces larger than this run alone on their own buffers instead "
     "of being copied into the fusion buffer; 0: (size-1) x 256 KiB",
     .offset = OFF(fusion_direct), .kind = HK_TUNABLE_SIZE},
    /* Horovod's HOROVOD_CACHE_CAPACITY default */
    {"HK_CACHE_CAPACITY", 1024, 0, 262144, "tensors",
     "response cache entries; 0 disables the cache",
     .offset = OFF(cache_capacity), .kind = HK_TUNABLE_SIZE,
     .alias = "HOROVOD_CACHE_CAPACITY"},
    /* Horovod's HOROVOD_STALL_CHECK_TIME_SECONDS default */
    {"HK_STALL_CHECK_TIME_S", 60, 0, 86400, "s",
     "rank 0 warns about tensors some ranks did not submit for this long; 0 "
     "disables",
     .offset = OFF(stall_check_s), .kind = HK_TUNABLE_NUMBER,
     .alias = "HOROVOD_STALL_CHECK_TIME_SECONDS"},
    {"HK_STALL_SHUTDOWN_TIME_S", 0, 0, 86400, "s",
     "the job stops on every rank when a tensor stalls this long; 0: never",
     .offset = OFF(stall_shutdown_s), .kind = HK_TUNABLE_NUMBER,
     .alias = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"},
    {"HK_STAGING_CHUNK_BYTES", 4 << 20, 64 << 10, 4 << 20, "bytes",
     "device tensors across hosts: a chunk of the staged schedule, which "
     "copies it to pinned host memory, allreduces it over the ring and "
     "copies it back, the three overlapping over 4 slots of 4 MiB; every "
     "rank must use the same",
     .offset = OFF(staging_chunk_bytes), .kind = HK_TUNABLE_SIZE},
    /* NCCL_NSOCKS_PERTHREAD's idea: several TCP streams to one peer when
     * one stream cannot fill the link (per-flow limits, one core per
     * stream's interrupts, a large bandwidth-delay product). Each link
     * cuts its byte stream into HK_LINK_BLOCK_BYTES blocks sent round
     * robin (collectives/transport/link.h). 1: one plain connection, the
     * fastest on loopback; every rank must use the same value. */
    {"HK_SOCKETS_PER_PEER", 1, 1, 8, "sockets",
     "TCP connections between each pair of ranks; a transfer is striped "
     "over them in fixed blocks",
     .offset = OFF(sockets_per_peer), .kind = HK_TUNABLE_SIZE},
    /* 100 steps x 200 tensors take ~16 MB: 1 GiB holds ~6000 such steps */
    {"HK_TIMELINE_MAX_MB", 1024, 0, 1 << 20, "MiB",
     "the timeline stops (still valid JSON, with a note of what was cut) "
     "before it grows past this; 0: no bound",
     .offset = OFF(timeline_max_mb), .kind = HK_TUNABLE_NUMBER},
    /* collectives/shm_group.h: a round moves slot/N bytes of every
     * segment per rank through one half of the rank's slot; 2 halves per
     * rank. Large enough that a round's three phases cost little next
     * to its copies, small enough that a round's slots stay in the
     * caches (bench/README.md, "shm slot size"). */
    {"HK_SHM_SLOT_BYTES", 1 << 20, 4096, 1 << 30, "bytes",
     "each rank's shared-memory slot half: one round of the shm "
     "collectives moves this many bytes per rank",
     .offset = OFF(shm_slot_bytes), .kind = HK_TUNABLE_SIZE,
     .parse = check_slot_bytes, .values_text = "a multiple of 64"},
    /* observe/monitor.h: a window of 100 rounds is a few training steps of
     * a model with ~100 gradient batches (resnet50's 161 tensors fuse
     * into fewer), enough to average out one-off scheduling noise */
    {"HK_MONITOR_WINDOW", 100, 1, 1e9, "rounds",
     "the monitor averages lateness over windows of this many negotiation "
     "rounds",
     .offset = OFF(monitor_window), .kind = HK_TUNABLE_SIZE},
    {"HK_MONITOR_REPORT_S", 0, 0, 86400, "s",
     "rank 0 prints the straggler report this often (and at exit); 0: only "
     "at exit. Turns the monitor on",
     .offset = OFF(monitor_report_s), .kind = HK_TUNABLE_NUMBER},
    /* once a second, as nvidia-smi dmon's default interval */
    {"HK_TELEMETRY_INTERVAL_S", 1, 0.01, 3600, "s",
     "with the monitor on, each rank samples its GPU (NVML) and host this "
     "often",
     .offset = OFF(telemetry_s), .kind = HK_TUNABLE_NUMBER},
    /* node_exporter's textfile collector reads on every scrape (15 s by
     * default in Prometheus): 5 s keeps every scrape fresh */
    {"HK_METRICS_INTERVAL_S", 5, 0.01, 86400, "s",
     "rank 0 rewrites HK_METRICS_FILE this often (and at exit)",
     .offset = OFF(metrics_interval_s), .kind = HK_TUNABLE_NUMBER},
    /* The cap of hk's wait policy (common/waiter.h): how long a wait
     * with work in flight may poll before it sleeps. Waking a thread that
     * sleeps on an idle core of a virtual machine costs tens of
     * microseconds (futex round trip 17.7 us across cores against 3.5 us
     * on one core; pipe round trip between processes 84 us against
     * 4.1 us), several times a small allreduce's own cost, and a step has
     * several hops (submit, request, answer, the collective's rounds,
     * completion). Waits learn their budget below this cap from their
     * recent lengths; bench/RESULTS.md ("Waiting") has the figures that
     * chose it. */
    {"HK_SPIN_US", 1000, 0, 1e6, "us",
     "longest a wait with work in flight polls (yielding its core when "
     "the host's ranks outnumber half its cores) before it sleeps; waits "
     "learn a shorter budget from their recent lengths; 0: sleep at once",
     .offset = OFF(spin_us), .kind = HK_TUNABLE_NUMBER},
    /* A trainer hands a step's gradients over one hk_*_async call at a
     * time (~0.3 us apart on the reference machine). Negotiating the
     * queue as soon as its first tensor arrives makes a round of one
     * tensor, a request in flight that the rest must wait behind, and a
     * collective of one tensor; holding the queue until the burst ends
     * (a trainer thread waits or polls, or no submit for the gap) puts
     * the step in one round: small1000 (1000 x 4 KiB) at np 2 on the
     * 2-vCPU machine went from 2 rounds (~2.0 ms a step) to 1 (~1.7 ms)
     * with a gap of 10-50 us alike (bench/RESULTS.md, "Waiting"). A
     * lone async tensor then waits the gap before it is negotiated; a
     * blocking call (submit, then wait) does not wait at all. */
    {"HK_BURST_GAP_US", 10, 0, 1e7, "us",
     "the background thread takes the submit queue once no tensor was "
     "submitted for this long, a trainer thread waits or polls, or the "
     "oldest queued tensor has waited HK_BURST_MAX_US; 0: at once",
     .offset = OFF(burst_gap_us), .kind = HK_TUNABLE_NUMBER},
    {"HK_BURST_MAX_US", 500, 0, 1e7, "us",
     "the longest a submitted tensor is held in the queue while its "
     "burst goes on (HK_BURST_GAP_US)",
     .offset = OFF(burst_max_us), .kind = HK_TUNABLE_NUMBER},
    /* PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE idea; 2000 entries of ~200
     * bytes (observe/flight.h): ~0.4 MB per rank, seconds of a training
     * step's collectives */
    {"HK_FLIGHT_RECORDER", 2000, 0, 1 << 24, "collectives",
     "each rank keeps its last this many collectives and writes them on a "
     "hang, a failure or SIGUSR1 (hkrun --dump); 0: off",
     .offset = OFF(flight_recorder), .kind = HK_TUNABLE_SIZE},
    /* the slowest link the seed customers name (10 GbE) */
    {"HK_NET_GBIT", 10, 0.001, 1e5, "Gbit/s",
     "each host's network rate, for the cost model's algorithm choice",
     .offset = OFF(net_gbit), .kind = HK_TUNABLE_NUMBER},
    STRING("HK_TIMELINE", timeline, "(none)", "a file",
           "rank 0 writes a Chrome trace of every tensor to this file",
           .alias = "HOROVOD_TIMELINE"),
    STRING("HK_METRICS_FILE", metrics_file, "(none)", "a file",
           "rank 0's Prometheus text file, rewritten every "
           "HK_METRICS_INTERVAL_S; turns the monitor on"),
    STRING("HK_NVML_LIBRARY", nvml_library, "libnvidia-ml.so.1", "a library",
           "the NVML library the GPU telemetry loads"),
    STRING("HK_FLIGHT_DIR", flight_dir, "$TMPDIR, else /tmp", "a folder",
           "each job's flight records go into a folder of its own in this "
           "one: hk-JOB/hk-flight.JOB.RANK.txt (hkrun says where at exit)"),
    STRING("HK_SOCKET_IFNAME", socket_ifname, "(none)",
           "an interface name or a CIDR subnet",
           "the interface (name or CIDR subnet) ranks listen on; one that "
           "does not exist fails hk_init, naming those that do "
           "(hkrun --network-interface)",
           .alias = "HOROVOD_GLOO_IFACE"),
    {"HK_PROCESS_SETS",
     .meaning = "process sets hk_init adds, as hk_process_set_add would, in "
                "order (ids 1, 2, ...); every rank must give the same",
     .offset = OFF(process_sets), .kind = HK_TUNABLE_STRING,
     .cap = sizeof((hk_config *)0)->process_sets, .parse = parse_process_sets,
     .def_text = "(none)",
     .values_text = "ranks by commas, sets by semicolons: 0,1;2,3"},
    STRING("HK_TOPO_FILE", topo_file, "(none)", "a file",
           "the server's layout (nvidia-smi topo -m text or NCCL XML): the "
           "ring order inside each host and the cost model's host"),
    {"HK_ALLREDUCE_ALGO",
     .meaning = "the host allreduce every rank runs "
                "where it applies; auto: chosen per "
                "size by the cost model",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_allreduce_algo,
     .def_text = "auto", .values_text = "auto, ring, hierarchical, rd"},
    WORD("HK_CROSS_TRANSPORT", cross_transport, transports,
         "how links to ranks on other hosts move bytes: hk's TCP, or MPI "
         "point-to-point (jobs started by mpirun)"),
    {"HK_HIERARCHICAL_ALLREDUCE",
     .meaning = "1 forces the hierarchical allreduce; 0 keeps auto from "
                "choosing it",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_hierarchical,
     .def_text = "(unset: the cost model decides)", .values_text = "0, 1",
     .alias = "HOROVOD_HIERARCHICAL_ALLREDUCE"},
    WORD("HK_DEVICE", device, devices,
         "the backend of device tensors: cuda where libhk_cuda.so loads "
         "and sees a GPU (auto), the emulated GPU, or host tensors only"),
    WORD("HK_INTRA_TRANSPORT", intra_transport, intra,
         "how ranks of one host reach each other: shared memory where it "
         "can be set up (auto), shared memory or fail, or loopback TCP"),
    WORD("HK_COMPRESSION", compression, comps,
         "float32 device gradients travel in this type"),
    INT("HK_GPU", -1, 0, 1023, gpu, "the local rank",
        "the GPU this process uses, an index among those it sees"),
    /* enough for a step's batches to follow each other on the GPU without
     * a gap (the next one enqueued while the last runs); each holds four
     * events and its handles until the background thread sees it done */
    INT("HK_DEVICE_INFLIGHT", 4, 1, 16, device_inflight, "4",
        "device allreduce batches queued on hk's stream at once; the next "
        "is enqueued while earlier ones run; 1: each waits for the one "
        "before"),
    INT("HK_AUTOTUNE", 0, 0, 1, autotune, "0",
        "1: rank 0 tunes the fusion threshold, the cycle time and, where "
        "they apply, hierarchical vs flat allreduce, the TCP sockets per "
        "peer, the device staging chunk and (HK_AUTOTUNE_COMPRESSION) "
        "compression from the job's own step times, and every rank "
        "switches at the same round (hkrun --autotune)",
        .alias = "HOROVOD_AUTOTUNE"),
    STRING("HK_AUTOTUNE_LOG", autotune_log, "(none)", "a file",
           "with HK_AUTOTUNE: rank 0 writes one CSV row per trial (the "
           "settings, the score in ms per step, its relative uncertainty, "
           "samples, steps, "
           "kept)",
           .alias = "HOROVOD_AUTOTUNE_LOG"),
    STRING("HK_AUTOTUNE_SAVE", autotune_save, "(none)", "a file",
           "with HK_AUTOTUNE: rank 0 writes the chosen settings there as "
           "HK_*=value lines, which hkrun --autotune-load reads"),
    INT("HK_AUTOTUNE_WARMUP_STEPS", 3, 0, 1000, autotune_warmup, "3",
        "with HK_AUTOTUNE: training steps dropped after each change of "
        "setting before its step times count"),
    INT("HK_AUTOTUNE_STEPS_PER_SAMPLE", 5, 1, 10000, autotune_steps, "5",
        "with HK_AUTOTUNE: training steps averaged into one sample",
        .alias = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"),
    INT("HK_AUTOTUNE_MAX_SAMPLES", 10, 3, 64, autotune_max_samples, "10",
        "with HK_AUTOTUNE: the most samples one trial takes while their "
        "score's uncertainty stays above HK_AUTOTUNE_SPREAD (at least 5 are "
        "taken, or all of them when fewer)"),
    INT("HK_AUTOTUNE_SOCKETS", 4, 1, 8, autotune_sockets, "4",
        "with HK_AUTOTUNE: where the job has TCP links, each opens this "
        "many connections (or HK_SOCKETS_PER_PEER, the larger), carries its "
        "stream over the number in use, and the search tries 1, 2, 4, 8 up "
        "to the connections open; 1: the sockets are not searched"),
    INT("HK_AUTOTUNE_COMPRESSION", 0, 0, 1, autotune_compression, "0",
        "with HK_AUTOTUNE: 1 lets the search try HK_COMPRESSION none, fp16 "
        "and bf16 where float32 tensors are on a device (it changes the "
        "results; hkrun --autotune-compression)"),
    INT("HK_AUTOTUNE_MAX_TRIALS", 30, 1, 64, autotune_max_trials, "30",
        "with HK_AUTOTUNE: the most trials the search runs (a full pass "
        "over the threshold and cycle-time ladders is 15, and each "
        "setting that beats the best adds two: the best measured again, "
        "then the setting again)"),
    {"HK_AUTOTUNE_SPREAD", 0.02, 0.001, 1, "fraction",
     "with HK_AUTOTUNE: a trial ends once its score's (the median "
     "sample's) relative uncertainty, its standard error estimated from "
     "the samples' median absolute deviation, is at most this; a setting "
     "is kept only if it is faster than the best by more than twice their "
     "combined uncertainty and by at least 1 %",
     .offset = OFF(autotune_spread), .kind = HK_TUNABLE_NUMBER},
    {"HK_TEST_TUNE_GROUP_COST_S", 0, 0, 10, "s",
     "tests only: every fused group rank 0 runs adds this to the step time "
     "the autotuner measures (no time passes), a known cost per batch",
     .offset = OFF(test_tune_cost_s), .kind = HK_TUNABLE_NUMBER},
    {"HK_TEST_TUNE_JITTER", 0, 0, 0.9, "fraction",
     "tests only: each step time the autotuner measures is multiplied by "
     "1 + this x a pseudo-random number in [-1, 1] (a fixed sequence)",
     .offset = OFF(test_tune_jitter), .kind = HK_TUNABLE_NUMBER},
    INT("HK_TEST_KILL_IN_START", 0, 0, 1, test_kill_in_start, "0",
        "tests only: 1 = this worker kills itself (SIGKILL) in hk_init once "
        "its links to the other ranks are made, before the rest of the "
        "start-up (a worker lost while the others start)"),
    INT("HK_TEST_GPU", 0, 0, 1, test_gpu, "0",
        "1: tests that need a real GPU fail instead of skipping"),
    INT("HK_TIMELINE_MARK_CYCLES", 0, 0, 1, timeline_mark_cycles, "0",
        "1: the timeline marks every negotiation round that ran something "
        "(CYCLE_START)",
        .alias = "HOROVOD_TIMELINE_MARK_CYCLES"),
    INT("HK_FLIGHT_SIGNAL", 0, 0, 1, flight_signal, "0",
        "1: SIGUSR1 also asks this rank for its flight record, for ranks "
        "hkrun did not start (mpirun, srun); hk then owns SIGUSR1, which "
        "interrupts the program's blocking calls (EINTR)"),
    {"HK_FILE_MODE",
     .meaning = "the mode of the files hk writes (timeline, metrics, flight "
                "records, hkrun --output-filename's), less the umask; the "
                "folders it makes get x where this grants r",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_file_mode, .def_text = "0600",
     .values_text = "an octal mode of read and write bits, at least 0600"},
    INT("HK_MONITOR", 0, 0, 1, monitor, "0",
        "1: rank 0 tracks which ranks are late and why"),
    INT("HK_MONITOR_LIVE", 0, 0, 1, monitor_live, "0",
        "1: rank 0 sends hkrun its live table (hkrun --monitor sets it)"),
    INT("HK_ELASTIC", 0, 0, 1, elastic, "0",
        "1: an elastic job (hkrun --min-np sets it): a lost rank makes "
        "every other rank's calls fail with HK_ERR_RANKS_CHANGED instead of "
        "HK_ERR_PEER_LOST, and hk_elastic_reset re-forms the job"),
    {"HK_ELASTIC_TIMEOUT_S", 600, 0.1, 86400, "s",
     "elastic jobs: how long hk_elastic_reset may wait for the job to "
     "re-form (hkrun --elastic-timeout sets it; hkrun fails the job when "
     "too few workers are left for that long)",
     .offset = OFF(elastic_timeout_s), .kind = HK_TUNABLE_NUMBER},
    INT("HK_EMU_DEVICES", 1, 1, 1024, emu_devices, "1",
        "the emulated device only: how many devices each process sees"),
    {"HK_EMU_FAULT",
     .meaning = "the emulated device only: a fault in rank R's OP-th device "
                "communicator operation (counted from 0)",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_fault, .def_text = "(none)",
     .values_text = "error:R:OP, hang:R:OP, enqueue:R:OP, delay:R:OP:MS"},
    {"HK_LOG_LEVEL",
     .meaning = "what hk logs on stderr (Horovod's trace "
                "is debug here, its fatal error)",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_log_level,
     .def_text = "warning", .values_text = "error, warning, info, debug",
     .alias = "HOROVOD_LOG_LEVEL"},
    {"HOROVOD_STALL_CHECK_DISABLE",
     .meaning = "Horovod's: 1 turns the stall check off (as "
                "HK_STALL_CHECK_TIME_S=0)",
     .kind = HK_TUNABLE_SPECIAL, .parse = parse_stall_disable, .def_text = "0",
     .values_text = "0, 1"},
    /* set by hkrun for each worker (under mpirun or srun hk reads their
     * variables instead, worker/placement.c) */
    LAUNCHER("HK_RANK", "this process's rank in the job"),
    LAUNCHER("HK_SIZE", "the number of ranks in the job"),
    LAUNCHER("HK_LOCAL_RANK", "this process's rank among its host's"),
    LAUNCHER("HK_LOCAL_SIZE", "the number of ranks on this host"),
    STRING_BY_HKRUN("HK_RENDEZVOUS", rendezvous,
                    "where hkrun's rendezvous listens (host:port)"),
    STRING_BY_HKRUN("HK_SECRET", secret,
                    "the job's secret (hex): every connection into the job "
                    "proves it knows it; hk_init removes it from the "
                    "environment. hkrun makes one; with --rdzv-endpoint "
                    "every agent reads it and it must be the same on each",
                    .consumed = 1),
    {"HK_DUMP_FD",
     .meaning = "the pipe through which hkrun asks this rank for its flight "
                "record (hkrun --dump); hk_init removes it from the "
                "environment",
     .kind = HK_TUNABLE_LAUNCHER, .parse = parse_dump_fd,
     .def_text = "(set by hkrun)", .consumed = 1},
    {"HK_LAUNCHER_PID",
     .meaning = "hkrun's process id: a worker whose parent it is dies with "
                "it",
     .kind = HK_TUNABLE_LAUNCHER, .parse = parse_launcher_pid,
     .def_text = "(set by hkrun)"},
};

#define NTABLE (sizeof table / sizeof table[0])

/* 1 if s is written as the table's numbers are: decimal, no blank before
 * it (strtod and strtol also take " 5" and "0x10", which a typo or a
 * script's stray space could give) */
static int plain_decimal(const char *s) {
  if (*s == '+' || *s == '-')
    s++;
  return !isspace((unsigned char)*s) && !(s[0] == '0' && (s[1] | 0x20) == 'x');
}

/* A number in [t->min, t->max] into its field; s not empty. A size must
 * be whole. */
static hk_status read_number(const tunable *t, const char *name, const char *s,
                             hk_config *cfg) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || isnan(v) || !plain_decimal(s))
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not a number (unit: %s)", name, s,
                   t->unit);
  /* a number, but beyond a double (1e400) or below its precision: say
   * which way it is out of range */
  if (errno == ERANGE || !isfinite(v))
    return hk_fail(HK_ERR_CONFIG,
                   "%s=%s is too %s: the range is [%.17g, %.17g] %s", name, s,
                   fabs(v) > 1.0 ? "large" : "small", t->min, t->max, t->unit);
  if (v < t->min || v > t->max)
    return hk_fail(HK_ERR_CONFIG, "%s=%s is out of range [%.17g, %.17g] %s",
                   name, s, t->min, t->max, t->unit);
  if (t->kind == HK_TUNABLE_SIZE && v != (double)(size_t)v) /* in range */
    return hk_fail(HK_ERR_CONFIG, "%s=%s is not a whole number of %s", name, s,
                   t->unit);
  char *field = (char *)cfg + t->offset;
  if (t->kind == HK_TUNABLE_SIZE)
    *(size_t *)field = (size_t)v;
  else
    *(double *)field = v;
  return HK_OK;
}

/* A whole decimal number in [t->min, t->max] into its int field. */
static hk_status read_integer(const tunable *t, const char *name, const char *s,
                              hk_config *cfg) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || !plain_decimal(s) || v < t->min ||
      v > t->max)
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not an integer in [%d, %d]", name,
                   s, (int)t->min, (int)t->max);
  *(int *)((char *)cfg + t->offset) = (int)v;
  return HK_OK;
}

/* One of t's words (case-insensitive): its index into the int field. */
static hk_status read_word(const tunable *t, const char *name, const char *s,
                           hk_config *cfg) {
  for (int i = 0; i < t->nwords; i++)
    if (strcasecmp(s, t->words[i]) == 0) {
      *(int *)((char *)cfg + t->offset) = i;
      return HK_OK;
    }
  char list[128] = "";
  for (int i = 0; i < t->nwords; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i ? ", " : "", t->words[i]);
  return hk_fail(HK_ERR_CONFIG, "%s='%s' is not one of %s", name, s, list);
}

/* A string copied into its field (t->cap bytes with the NUL). Longer than
 * that is an error, not a cut. */
static hk_status read_text(const tunable *t, const char *name, const char *s,
                           hk_config *cfg) {
  if (strlen(s) >= t->cap)
    return hk_fail(HK_ERR_CONFIG, "%s is longer than %zu bytes", name,
                   t->cap - 1);
  snprintf((char *)cfg + t->offset, t->cap, "%s", s);
  return HK_OK;
}

/* Sets t's field to its default (words: the first; strings: ""). */
static void set_default(const tunable *t, hk_config *cfg) {
  char *field = (char *)cfg + t->offset;
  switch (t->kind) {
  case HK_TUNABLE_NUMBER:
    *(double *)field = t->def;
    break;
  case HK_TUNABLE_SIZE:
    *(size_t *)field = (size_t)t->def;
    break;
  case HK_TUNABLE_INTEGER:
    *(int *)field = (int)t->def;
    break;
  case HK_TUNABLE_WORD:
    *(int *)field = 0;
    break;
  case HK_TUNABLE_STRING:
    field[0] = '\0';
    break;
  default: /* special and the launcher's: their parse sets them */
    if (t->cap)
      field[0] = '\0';
    break;
  }
}

/* Loads one entry: its default, then its variable if set and not empty,
 * then its parse (which also sees an unset one, as ""). */
static hk_status load(const tunable *t, hk_config *cfg) {
  const char *name = t->var, *s = getenv(name);
  if (!(s && *s) && t->alias) { /* Horovod's name for it */
    name = t->alias;
    s = getenv(name);
  }
  const int set = s && *s;
  hk_status st = HK_OK;
  set_default(t, cfg);
  if (set) {
    switch (t->kind) {
    case HK_TUNABLE_NUMBER:
    case HK_TUNABLE_SIZE:
      st = read_number(t, name, s, cfg);
      break;
    case HK_TUNABLE_INTEGER:
      st = read_integer(t, name, s, cfg);
      break;
    case HK_TUNABLE_WORD:
      st = read_word(t, name, s, cfg);
      break;
    default: /* strings, and the launcher's with a field */
      if (t->cap)
        st = read_text(t, name, s, cfg);
      break;
    }
  }
  if (st == HK_OK && t->parse)
    st = t->parse(cfg, name, set ? s : "");
  return st;
}

static hk_status check_slot_bytes(hk_config *cfg, const char *name,
                                  const char *v) {
  (void)name;
  (void)v;
  if (cfg->shm_slot_bytes % 64)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_SHM_SLOT_BYTES=%zu is not a multiple of 64 bytes",
                   cfg->shm_slot_bytes);
  return HK_OK;
}

/* HK_ALLREDUCE_ALGO = auto | ring | hierarchical | rd (any case): the
 * host allreduce every rank runs (collectives/allreduce.h); "tree" is
 * only a prediction of NCCL's (hktopo), refused with that reason. */
static hk_status parse_allreduce_algo(hk_config *cfg, const char *name,
                                      const char *v) {
  (void)name;
  static const char *const algos[] = {"auto", "ring", "hierarchical", "rd"};
  cfg->allreduce_algo[0] = '\0';
  if (!*v)
    return HK_OK;
  if (strcasecmp(v, "tree") == 0)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_ALLREDUCE_ALGO=\"%.64s\": hk's collectives have no "
                   "tree (hktopo predicts NCCL's); expected ring, "
                   "hierarchical, rd or auto",
                   v);
  for (int i = 0; i < 4; i++)
    if (strcasecmp(v, algos[i]) == 0) {
      snprintf(cfg->allreduce_algo, sizeof cfg->allreduce_algo, "%s",
               i ? algos[i] : "");
      return HK_OK;
    }
  return hk_fail(HK_ERR_CONFIG,
                 "HK_ALLREDUCE_ALGO=\"%.64s\": expected ring, hierarchical, "
                 "rd or auto",
                 v);
}

int hk_config_next_set(const char **pos, int *ranks, int cap, int *n,
                       hk_status *st) {
  const char *p = *pos;
  *n = 0;
  *st = HK_OK;
  while (*p == ' ' || *p == '\t')
    p++;
  if (!*p)
    return 0;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    char *end;
    errno = 0;
    long r = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
    if (r < 0 || errno || r >= HK_CONFIG_SET_RANKS || *n == cap) {
      *st = hk_fail(HK_ERR_CONFIG,
                    "HK_PROCESS_SETS: '%.40s' %s (ranks by commas, sets by "
                    "semicolons: 0,1;2,3)",
                    p,
                    *n == cap && r >= 0 ? "lists more ranks than the job has"
                    : r >= HK_CONFIG_SET_RANKS ? "is too large a rank"
                                               : "is not a rank");
      return 0;
    }
    ranks[(*n)++] = (int)r;
    p = end;
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == ';' || !*p) {
      *pos = *p ? p + 1 : p;
      return 1;
    }
    *st = hk_fail(HK_ERR_CONFIG,
                  "HK_PROCESS_SETS: '%.40s' is not a rank (ranks by commas, "
                  "sets by semicolons: 0,1;2,3)",
                  p);
    return 0;
  }
}

/* HK_PROCESS_SETS: the syntax only (the job's ranks are known later). */
static hk_status parse_process_sets(hk_config *cfg, const char *name,
                                    const char *v) {
  int *ranks = malloc(HK_CONFIG_SET_RANKS * sizeof *ranks);
  if (!ranks)
    return hk_fail(HK_ERR_NOMEM, "cannot read HK_PROCESS_SETS");
  const char *pos = v;
  int n;
  hk_status st = HK_OK;
  while (hk_config_next_set(&pos, ranks, HK_CONFIG_SET_RANKS, &n, &st))
    ;
  free(ranks);
  (void)cfg;
  (void)name;
  return st;
}

static hk_status parse_hierarchical(hk_config *cfg, const char *name,
                                    const char *v) {
  cfg->hierarchical = -1;
  if (!*v)
    return HK_OK;
  if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not 0 or 1", name, v);
  cfg->hierarchical = v[0] == '1';
  return HK_OK;
}

/* HK_EMU_FAULT=error|hang|delay:RANK:OP[:MS] */
static hk_status parse_fault(hk_config *cfg, const char *name, const char *s) {
  (void)name;
  cfg->emu_fault_kind = 0;
  cfg->emu_fault_rank = cfg->emu_fault_op = cfg->emu_fault_ms = 0;
  if (!*s)
    return HK_OK;
  char kind[16];
  int rank, op, ms = 0, used = 0;
  int n =
      sscanf(s, "%15[a-z]:%d:%d%n:%d%n", kind, &rank, &op, &used, &ms, &used);
  int k = !strcmp(kind, "error")     ? 1
          : !strcmp(kind, "hang")    ? 2
          : !strcmp(kind, "delay")   ? 3
          : !strcmp(kind, "enqueue") ? 4
                                     : 0;
  if (n < 3 || (size_t)used != strlen(s) || !k || rank < 0 || op < 0 ||
      ms < 0 || (k == 3) != (n == 4))
    return hk_fail(
        HK_ERR_CONFIG,
        "HK_EMU_FAULT='%s' is not error:RANK:OP, hang:RANK:OP, "
        "enqueue:RANK:OP or delay:RANK:OP:MS (OP counts the rank's device "
        "communicator operations from 0)",
        s);
  cfg->emu_fault_kind = k;
  cfg->emu_fault_rank = rank;
  cfg->emu_fault_op = op;
  cfg->emu_fault_ms = ms;
  return HK_OK;
}

static hk_status parse_log_level(hk_config *cfg, const char *name,
                                 const char *v) {
  cfg->log_level = HK_LOG_WARNING;
  if (!*v)
    return HK_OK;
  /* Horovod's trace and fatal are the nearest of hk's levels */
  int l = strcasecmp(v, "trace") == 0   ? HK_LOG_DEBUG
          : strcasecmp(v, "fatal") == 0 ? HK_LOG_ERROR
                                        : hk_log_level_parse(v);
  if (l < 0)
    return hk_fail(HK_ERR_CONFIG,
                   "%s='%s' is not one of error, warning, info, debug", name,
                   v);
  cfg->log_level = l;
  return HK_OK;
}

/* hkrun's pid, as hkrun wrote it; anything else is no launcher of ours
 * (0), as before any of this was checked: it only decides whether this
 * worker dies with its parent. */
static hk_status parse_launcher_pid(hk_config *cfg, const char *name,
                                    const char *v) {
  (void)name;
  char *end;
  errno = 0;
  long pid = *v ? strtol(v, &end, 10) : 0;
  cfg->launcher_pid =
      *v && !errno && !*end && pid > 0 && pid <= INT_MAX ? (int)pid : 0;
  return HK_OK;
}

/* HOROVOD_STALL_CHECK_DISABLE=1: no stall check (after
 * HK_STALL_CHECK_TIME_S in the table, so it wins, as in Horovod). */
static hk_status parse_stall_disable(hk_config *cfg, const char *name,
                                     const char *v) {
  if (!*v || strcmp(v, "0") == 0)
    return HK_OK;
  if (strcmp(v, "1") != 0)
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not 0 or 1", name, v);
  cfg->stall_check_s = 0;
  return HK_OK;
}

/* HK_FILE_MODE: octal, read and write bits only, the owner's included. */
static hk_status parse_file_mode(hk_config *cfg, const char *name,
                                 const char *v) {
  cfg->file_mode = 0600;
  if (!*v)
    return HK_OK;
  char *end;
  errno = 0;
  long m = strtol(v, &end, 8);
  if (errno || *end || m < 0 || (m & ~0666L) || (m & 0600) != 0600)
    return hk_fail(HK_ERR_CONFIG,
                   "%s='%s' is not an octal mode of read and write bits "
                   "that lets the owner read and write (such as 0600, 0640 "
                   "or 0644)",
                   name, v);
  cfg->file_mode = (unsigned)m;
  return HK_OK;
}

/* HK_DUMP_FD: hkrun's descriptor number (> 2), or -1; anything else is
 * no pipe of hkrun's (observe/flight.c checks what the number holds). */
static hk_status parse_dump_fd(hk_config *cfg, const char *name,
                               const char *v) {
  (void)name;
  char *end;
  errno = 0;
  long fd = *v ? strtol(v, &end, 10) : -1;
  cfg->dump_fd = *v && !errno && !*end && fd > 2 && fd < INT_MAX ? (int)fd : -1;
  return HK_OK;
}

hk_status hk_config_load(hk_config *cfg) {
  for (size_t i = 0; i < NTABLE; i++) {
    hk_status st = load(&table[i], cfg);
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}

static const tunable *find(const char *var) {
  for (size_t i = 0; var && i < NTABLE; i++)
    if (strcmp(table[i].var, var) == 0)
      return &table[i];
  return NULL;
}

hk_status hk_config_load_var(hk_config *cfg, const char *var) {
  const tunable *t = find(var);
  if (!t)
    return hk_fail(HK_ERR_INVALID_ARG, "%s is no setting of hk's",
                   var ? var : "(null)");
  return load(t, cfg);
}

const char *hk_config_near_miss(const char *var) {
  if (!var || strncmp(var, "HK_", 3) != 0 || find(var))
    return NULL;
  const char *best = NULL;
  int best_d = 64;
  for (size_t i = 0; i < NTABLE; i++) {
    int d = hk_edit_distance(var + 3, table[i].var + 3);
    if (d < best_d) {
      best_d = d;
      best = table[i].var;
    }
  }
  return best && hk_edit_close(best_d, strlen(var + 3)) ? best : NULL;
}

const char *hk_config_env(const char *var) {
  const tunable *t = find(var);
  return t && t->kind == HK_TUNABLE_LAUNCHER ? getenv(var) : NULL;
}

int hk_config_tunable(size_t i, hk_tunable_info *out) {
  if (i >= NTABLE)
    return 0;
  const tunable *t = &table[i];
  *out = (hk_tunable_info){.var = t->var,
                           .kind = t->kind,
                           .def = t->def,
                           .min = t->min,
                           .max = t->max,
                           .unit = t->unit ? t->unit : "",
                           .meaning = t->meaning,
                           .words = t->words,
                           .nwords = t->nwords,
                           .def_text = t->def_text,
                           .values_text = t->values_text,
                           .alias = t->alias};
  return 1;
}

void hk_config_consume(void) {
  for (size_t i = 0; i < NTABLE; i++)
    if (table[i].consumed)
      unsetenv(table[i].var);
}

int hk_config_monitoring(const hk_config *cfg) {
  return cfg->monitor || cfg->monitor_live || cfg->metrics_file[0] ||
         cfg->monitor_report_s > 0;
}

int hk_usable_cpus(void) {
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0 && online < cpus)
    cpus = (int)online;
  return cpus > 0 ? cpus : 1;
}
