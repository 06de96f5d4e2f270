#include "common/config.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"

/* The one table of tunables. Defaults: HK_CYCLE_TIME_MS = 0: negotiation
 * is event-driven (worker/background.c), so unlike Horovod's
 * HOROVOD_CYCLE_TIME (1 ms) no tensor waits for a timer; the chunk size of
 * 1 MiB matches
 * the write size at which loopback TCP reaches its peak on the reference
 * machine (bench/peers/results/limits.txt, tcp_ring 1024 KiB). */
typedef struct tunable {
  const char *var;
  double def, min, max;
  const char *unit, *meaning;
  size_t offset;
  int is_size; /* stored as size_t, else double */
} tunable;

#define OFF(f) offsetof(hk_config, f)
static const tunable table[] = {
    {"HK_CYCLE_TIME_MS", 0, 0, 60000, "ms",
     "upper bound on how long a batch may wait to grow: rank 0 may hold the "
     "answer to a request none of whose tensors is ready yet this long; 0: "
     "answer at once (a tensor ready on every rank never waits)",
     OFF(cycle_time_ms), 0},
    {"HK_TIMEOUT_S", 60, 0.1, 86400, "s",
     "a transfer or negotiation making no progress for this long fails",
     OFF(timeout_s), 0},
    {"HK_START_TIMEOUT_S", 60, 0.1, 86400, "s",
     "hk_init fails if the job has not assembled by then", OFF(start_timeout_s),
     0},
    {"HK_RING_CHUNK_BYTES", 1 << 20, 4096, 1 << 30, "bytes",
     "pipeline chunk of the ring (receive staging buffer)",
     OFF(ring_chunk_bytes), 1},
    /* Horovod's HOROVOD_FUSION_THRESHOLD default (128 MiB since v0.21) */
    {"HK_FUSION_THRESHOLD", 128 << 20, 0, 1ull << 36, "bytes",
     "tensors reduced together in one fusion buffer, at most this many "
     "bytes; 0 disables fusion",
     OFF(fusion_threshold), 1},
    /* hk's own: copying a tensor into and out of the fusion buffer costs
     * 2b / B_mem; running it alone costs one more ring start-up,
     * ~2(n-1) alpha. With alpha ~16 us (loopback half round trip) and
     * B_mem ~10 GB/s (bench/peers/results) they break even near
     * (n-1) x 160 KB; 256 KiB per extra rank is the default. */
    {"HK_FUSION_DIRECT_BYTES", 0, 0, 1ull << 36, "bytes",
     "allreduces larger than this run alone on their own buffers instead "
     "of being copied into the fusion buffer; 0: (size-1) x 256 KiB",
     OFF(fusion_direct), 1},
    /* Horovod's HOROVOD_CACHE_CAPACITY default */
    {"HK_CACHE_CAPACITY", 1024, 0, 262144, "tensors",
     "response cache entries; 0 disables the cache", OFF(cache_capacity), 1},
    /* Horovod's HOROVOD_STALL_CHECK_TIME_SECONDS default */
    {"HK_STALL_CHECK_TIME_S", 60, 0, 86400, "s",
     "rank 0 warns about tensors some ranks did not submit for this long; 0 "
     "disables",
     OFF(stall_check_s), 0},
    {"HK_STALL_SHUTDOWN_TIME_S", 0, 0, 86400, "s",
     "the job stops on every rank when a tensor stalls this long; 0: never",
     OFF(stall_shutdown_s), 0},
    /* NCCL_NSOCKS_PERTHREAD's idea: several TCP streams to one peer when
     * one stream cannot fill the link (per-flow limits, one core per
     * stream's interrupts, a large bandwidth-delay product). Each link
     * cuts its byte stream into HK_LINK_BLOCK_BYTES blocks sent round
     * robin (collectives/transport/link.h). 1: one plain connection, the
     * fastest on loopback; every rank must use the same value. */
    {"HK_SOCKETS_PER_PEER", 1, 1, 8, "sockets",
     "TCP connections between each pair of ranks; a transfer is striped "
     "over them in fixed blocks",
     OFF(sockets_per_peer), 1},
    /* 100 steps x 200 tensors take ~16 MB: 1 GiB holds ~6000 such steps */
    {"HK_TIMELINE_MAX_MB", 1024, 0, 1 << 20, "MiB",
     "the timeline stops (still valid JSON, with a note of what was cut) "
     "before it grows past this; 0: no bound",
     OFF(timeline_max_mb), 0},
    /* collectives/shm_group.h: a round moves slot/N bytes of every
     * segment per rank through one half of the rank's slot; 2 halves per
     * rank. Large enough that a round's three phases cost little next
     * to its copies, small enough that a round's slots stay in the
     * caches (bench/README.md, "shm slot size"). */
    {"HK_SHM_SLOT_BYTES", 1 << 20, 4096, 1 << 30, "bytes",
     "each rank's shared-memory slot half: one round of the shm "
     "collectives moves this many bytes per rank",
     OFF(shm_slot_bytes), 1},
    /* worker/monitor.h: a window of 100 rounds is a few training steps of
     * a model with ~100 gradient batches (resnet50's 161 tensors fuse
     * into fewer), enough to average out one-off scheduling noise */
    {"HK_MONITOR_WINDOW", 100, 1, 1e9, "rounds",
     "the monitor averages lateness over windows of this many negotiation "
     "rounds",
     OFF(monitor_window), 1},
    {"HK_MONITOR_REPORT_S", 0, 0, 86400, "s",
     "rank 0 prints the straggler report this often (and at exit); 0: only "
     "at exit. Turns the monitor on",
     OFF(monitor_report_s), 0},
    /* once a second, as nvidia-smi dmon's default interval */
    {"HK_TELEMETRY_INTERVAL_S", 1, 0.01, 3600, "s",
     "with the monitor on, each rank samples its GPU (NVML) and host this "
     "often",
     OFF(telemetry_s), 0},
    /* node_exporter's textfile collector reads on every scrape (15 s by
     * default in Prometheus): 5 s keeps every scrape fresh */
    {"HK_METRICS_INTERVAL_S", 5, 0.01, 86400, "s",
     "rank 0 rewrites HK_METRICS_FILE this often (and at exit)",
     OFF(metrics_interval_s), 0},
    /* Waking a thread that sleeps on another core costs 20-40 us on a
     * virtual machine (the idle vCPU halts and the host must wake it:
     * futex round trip 17.7 us across cores against 3.5 us on one core,
     * pipe round trip between processes 84 us against 4.1 us, measured
     * on the 2-core reference VM), several times a small allreduce's own
     * cost. A thread about to sleep for an event that is due soon polls
     * for it this long first, yielding its core between polls, so every
     * hop of a step (submit, request, answer, completion) finds its
     * thread awake. An idle rank polls at most this long, then sleeps. */
    {"HK_SPIN_US", 200, 0, 1e6, "us",
     "a waiting thread (background thread, hk_wait) polls this long, "
     "yielding its core, before it sleeps; 0: sleep at once",
     OFF(spin_us), 0},
    /* PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE idea; 2000 entries of ~200
     * bytes (worker/flight.h): ~0.4 MB per rank, seconds of a training
     * step's collectives */
    {"HK_FLIGHT_RECORDER", 2000, 0, 1 << 24, "collectives",
     "each rank keeps its last this many collectives and writes them on a "
     "hang, a failure or SIGUSR1 (hkrun --dump); 0: off",
     OFF(flight_recorder), 1},
    /* the slowest link the seed customers name (10 GbE) */
    {"HK_NET_GBIT", 10, 0.001, 1e5, "Gbit/s",
     "each host's network rate, for the cost model's algorithm choice",
     OFF(net_gbit), 0},
};

/* A variable that takes one of n words (case-insensitive); unset: 0. */
static hk_status pick_word(const char *var, const char *const *words, int n,
                           int *out) {
  *out = 0;
  const char *s = getenv(var);
  if (!s || !*s)
    return HK_OK;
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, words[i]) == 0) {
      *out = i;
      return HK_OK;
    }
  char list[128] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i ? ", " : "", words[i]);
  return hk_fail(HK_ERR_CONFIG, "%s='%s' is not one of %s", var, s, list);
}

/* A string variable copied into dst (cap bytes, its NUL included); unset:
 * "". Longer than cap - 1 bytes is an error, not a cut. */
static hk_status read_string(const char *var, char *dst, size_t cap) {
  const char *v = getenv(var);
  if (v && strlen(v) >= cap)
    return hk_fail(HK_ERR_CONFIG, "%s is longer than %zu bytes", var, cap - 1);
  snprintf(dst, cap, "%s", v ? v : "");
  return HK_OK;
}

/* An integer variable in [min, max]; unset: def. */
static hk_status read_int(const char *var, int def, int min, int max,
                          int *out) {
  *out = def;
  const char *s = getenv(var);
  if (!s || !*s)
    return HK_OK;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max)
    return hk_fail(HK_ERR_CONFIG, "%s='%s' is not an integer in [%d, %d]", var,
                   s, min, max);
  *out = (int)v;
  return HK_OK;
}

/* HK_ALLREDUCE_ALGO = auto | ring | hierarchical | rd (any case): the
 * host allreduce every rank runs (collectives/allreduce.h); "tree" is
 * only a prediction of NCCL's (hktopo), refused with that reason. */
static hk_status read_allreduce_algo(hk_config *cfg) {
  static const char *const algos[] = {"auto", "ring", "hierarchical", "rd"};
  int i;
  cfg->allreduce_algo[0] = '\0';
  const char *v = getenv("HK_ALLREDUCE_ALGO");
  if (v && *v && strcasecmp(v, "tree") == 0)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_ALLREDUCE_ALGO=\"%.64s\": hk's collectives have no "
                   "tree (hktopo predicts NCCL's); expected ring, "
                   "hierarchical, rd or auto",
                   v);
  if (pick_word("HK_ALLREDUCE_ALGO", algos, 4, &i) != HK_OK)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_ALLREDUCE_ALGO=\"%.64s\": expected ring, "
                   "hierarchical, rd or auto",
                   v);
  if (i > 0)
    snprintf(cfg->allreduce_algo, sizeof cfg->allreduce_algo, "%s", algos[i]);
  return HK_OK;
}

/* HK_EMU_FAULT=error|hang|delay:RANK:OP[:MS] */
static hk_status read_fault(hk_config *cfg) {
  cfg->emu_fault_kind = 0;
  cfg->emu_fault_rank = cfg->emu_fault_op = cfg->emu_fault_ms = 0;
  const char *s = getenv("HK_EMU_FAULT");
  if (!s || !*s)
    return HK_OK;
  char kind[16];
  int rank, op, ms = 0, used = 0;
  int n =
      sscanf(s, "%15[a-z]:%d:%d%n:%d%n", kind, &rank, &op, &used, &ms, &used);
  int k = !strcmp(kind, "error")   ? 1
          : !strcmp(kind, "hang")  ? 2
          : !strcmp(kind, "delay") ? 3
                                   : 0;
  if (n < 3 || (size_t)used != strlen(s) || !k || rank < 0 || op < 0 ||
      ms < 0 || (k == 3) != (n == 4))
    return hk_fail(HK_ERR_CONFIG,
                   "HK_EMU_FAULT='%s' is not error:RANK:OP, hang:RANK:OP or "
                   "delay:RANK:OP:MS (OP counts the rank's device "
                   "communicator operations from 0)",
                   s);
  cfg->emu_fault_kind = k;
  cfg->emu_fault_rank = rank;
  cfg->emu_fault_op = op;
  cfg->emu_fault_ms = ms;
  return HK_OK;
}

hk_status hk_config_load(hk_config *cfg) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const tunable *t = &table[i];
    double v = t->def;
    const char *s = getenv(t->var);
    if (s && *s) {
      char *end;
      errno = 0;
      v = strtod(s, &end);
      if (end == s || *end || isnan(v))
        return hk_fail(HK_ERR_CONFIG, "%s='%s' is not a number (unit: %s)",
                       t->var, s, t->unit);
      /* a number, but beyond a double (1e400) or below its precision:
       * say which way it is out of range */
      if (errno == ERANGE || !isfinite(v))
        return hk_fail(HK_ERR_CONFIG,
                       "%s=%s is too %s: the range is [%.17g, %.17g] %s",
                       t->var, s, fabs(v) > 1.0 ? "large" : "small", t->min,
                       t->max, t->unit);
      if (v < t->min || v > t->max)
        return hk_fail(HK_ERR_CONFIG, "%s=%s is out of range [%.17g, %.17g] %s",
                       t->var, s, t->min, t->max, t->unit);
    }
    char *field = (char *)cfg + t->offset;
    if (t->is_size)
      *(size_t *)field = (size_t)v;
    else
      *(double *)field = v;
  }
  hk_status st =
      read_string("HK_TIMELINE", cfg->timeline, sizeof cfg->timeline);
  if (st == HK_OK)
    st = read_string("HK_METRICS_FILE", cfg->metrics_file,
                     sizeof cfg->metrics_file);
  if (st == HK_OK)
    st = read_string("HK_NVML_LIBRARY", cfg->nvml_library,
                     sizeof cfg->nvml_library);
  if (st == HK_OK)
    st = read_string("HK_FLIGHT_DIR", cfg->flight_dir, sizeof cfg->flight_dir);
  if (st == HK_OK)
    st = read_string("HK_SOCKET_IFNAME", cfg->socket_ifname,
                     sizeof cfg->socket_ifname);
  if (st == HK_OK)
    st = read_string("HK_TOPO_FILE", cfg->topo_file, sizeof cfg->topo_file);
  if (st == HK_OK)
    st = read_allreduce_algo(cfg);
  if (st != HK_OK)
    return st;
  /* words ignore case, as every word-valued setting does */
  static const char *const transports[] = {"tcp", "mpi"};
  st = pick_word("HK_CROSS_TRANSPORT", transports, 2, &cfg->cross_transport);
  if (st != HK_OK)
    return st;
  cfg->hierarchical = -1;
  const char *hier = getenv("HK_HIERARCHICAL_ALLREDUCE");
  if (hier && *hier) {
    if (strcmp(hier, "0") != 0 && strcmp(hier, "1") != 0)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_HIERARCHICAL_ALLREDUCE='%s' is not 0 or 1", hier);
    cfg->hierarchical = hier[0] == '1';
  }
  static const char *const devices[] = {"auto", "cuda", "emu", "none"};
  static const char *const comps[] = {"none", "fp16", "bf16"};
  static const char *const intra[] = {"auto", "shm", "tcp"};
  st = pick_word("HK_DEVICE", devices, 4, &cfg->device);
  if (st == HK_OK)
    st = pick_word("HK_INTRA_TRANSPORT", intra, 3, &cfg->intra_transport);
  if (st == HK_OK && cfg->shm_slot_bytes % 64)
    st = hk_fail(HK_ERR_CONFIG,
                 "HK_SHM_SLOT_BYTES=%zu is not a multiple of 64 bytes",
                 cfg->shm_slot_bytes);
  if (st == HK_OK)
    st = pick_word("HK_COMPRESSION", comps, 3, &cfg->compression);
  if (st == HK_OK)
    st = read_int("HK_GPU", -1, 0, 1023, &cfg->gpu);
  if (st == HK_OK)
    st = read_int("HK_TEST_GPU", 0, 0, 1, &cfg->test_gpu);
  if (st == HK_OK)
    st = read_int("HK_TIMELINE_MARK_CYCLES", 0, 0, 1,
                  &cfg->timeline_mark_cycles);
  if (st == HK_OK)
    st = read_int("HK_MONITOR", 0, 0, 1, &cfg->monitor);
  if (st == HK_OK)
    st = read_int("HK_MONITOR_LIVE", 0, 0, 1, &cfg->monitor_live);
  if (st == HK_OK)
    st = read_fault(cfg);
  if (st != HK_OK)
    return st;
  cfg->log_level = HK_LOG_WARNING;
  const char *lvl = getenv("HK_LOG_LEVEL");
  if (lvl && *lvl) {
    int l = hk_log_level_parse(lvl);
    if (l < 0)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_LOG_LEVEL='%s' is not one of error, warning, info, "
                     "debug",
                     lvl);
    cfg->log_level = l;
  }
  return HK_OK;
}

int hk_config_tunable(size_t i, hk_tunable_info *out) {
  if (i >= sizeof table / sizeof table[0])
    return 0;
  const tunable *t = &table[i];
  *out = (hk_tunable_info){.var = t->var,
                           .def = t->def,
                           .min = t->min,
                           .max = t->max,
                           .unit = t->unit,
                           .meaning = t->meaning,
                           .is_integer = t->is_size};
  return 1;
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
