/*
 * wire.h - every message hk sends between processes, and its codec.
 *
 * Frame = header (HK_WIRE_HEADER_LEN = 8 bytes) + payload:
 *   byte 0-1  magic 'H' 'K'
 *   byte 2    version (HK_WIRE_VERSION)
 *   byte 3    type (hk_msg_type)
 *   byte 4-7  payload length in bytes, little-endian u32, at most
 *             HK_WIRE_MAX_PAYLOAD
 * Payload fields are little-endian; integers are fixed width; a string is a
 * u16 byte length followed by that many bytes (no NUL, none allowed inside).
 * A frame is decoded by one function, hk_wire_decode(), which checks every
 * length against what remains before reading it, rejects trailing bytes,
 * unknown types/versions, and out-of-range values. It is the fuzz target
 * (tests/fuzz/fuzz_wire.c).
 */
#ifndef HK_COORDINATOR_WIRE_H
#define HK_COORDINATOR_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"
#include "hk/hk.h"

#define HK_WIRE_VERSION                                                        \
  13 /* 3: HK_MSG_GOODBYE; 4: RESPONSES.answer; 5: request memory kind;        \
        6: REQUESTS.sample (telemetry), HK_MSG_MONITOR; 7: request process     \
        set and shape; 8: process sets: RESPONSES.set, each cache bit's set    \
        in REQUESTS, HK_COLL_SET_ADD and HK_COLL_SET_REMOVE; 9: HK_MSG_RESET;  \
        10: RESPONSES.tune (the autotuner's agreed settings); 11: HK_MSG_AGENT \
        and HK_MSG_EXIT (multi-host elastic agents); 12: HK_MSG_JOIN and       \
        RESPONSES.joiners (workers joining an elastic job); 13: HELLO.stripes, \
        RESPONSES.tune's sockets per peer, staging chunk and compression */
#define HK_WIRE_HEADER_LEN 8
#define HK_WIRE_MAX_PAYLOAD (64u << 20) /* bytes */
#define HK_WIRE_MAX_HOST_LEN 255        /* bytes, excluding NUL */
#define HK_WIRE_MAX_REASON_LEN 1023     /* bytes, excluding NUL */
#define HK_WIRE_MAX_RANKS 65536
#define HK_WIRE_MAX_STREAMS 8 /* data connections per pair of ranks */
#define HK_WIRE_MAX_CACHE_BITS (1u << 20) /* response-cache bit indices */
#define HK_WIRE_NO_BIT 0xffffffffu
#define HK_WIRE_MAX_DIMS HK_MAX_DIMS /* a tensor's dimensions (hk.h) */
#define HK_WIRE_ANSWER_OFFSET HK_WIRE_HEADER_LEN /* RESPONSES.answer */
/* The most one request by cache bit adds to a REQUESTS (bytes): its bit,
 * and its run's set and count when it starts a run of its own. */
#define HK_WIRE_BIT_BYTES 12
#define HK_WIRE_MAX_MONITOR_LEN                                                \
  60000 /* MONITOR text, bytes (under the                                      \
           rendezvous frame limit, 64 KiB) */

typedef enum hk_msg_type {
  HK_MSG_REGISTER = 1,  /* worker -> hkrun: here I am, this is my address */
  HK_MSG_PEERS = 2,     /* hkrun -> worker: the address of every rank */
  HK_MSG_ABORT = 3,     /* hkrun or a worker -> worker: the job failed */
  HK_MSG_HELLO = 4,     /* worker -> worker after auth: who and which channel */
  HK_MSG_REQUESTS = 5,  /* worker -> rank 0: newly submitted tensors (one
                           outstanding per rank: worker/background.c) */
  HK_MSG_RESPONSES = 6, /* rank 0 -> workers: what to run, and/or the
                           answer to a rank's REQUESTS */
  HK_MSG_GOODBYE = 7,   /* worker -> hkrun: this rank left the job through
                           the API (hk_shutdown, or a failed hk_init) */
  HK_MSG_MONITOR = 8,   /* rank 0 -> hkrun: the live table of every rank
                           (hkrun --monitor; observe/monitor.h) */
  HK_MSG_RESET = 9,     /* hkrun -> worker, elastic jobs: a rank was lost,
                           the job re-forms (register again); u.abort's
                           fields, rank = the lost worker's slot */
  HK_MSG_AGENT = 10,    /* an hkrun agent -> the rendezvous: this host
                           starts nslots workers (base -1); the answer,
                           rendezvous -> agent: their first slot (base)
                           and the job's size (launcher/agent.h) */
  HK_MSG_EXIT = 11,     /* agent -> rendezvous: the worker of slot exited
                           (its pid, status, signal); rendezvous -> agent:
                           the job is over (slot -1, status = the job's
                           exit status) */
  HK_MSG_JOIN = 12,     /* elastic jobs, on rank 0's second connection to
                           the rendezvous (its watch): worker -> rendezvous
                           "tell me of workers waiting to join" (u.abort,
                           rank = its slot); rendezvous -> worker: rank =
                           how many wait, reason names their hosts */
} hk_msg_type;

/** The last hk_msg_type (the decoder's bound). */
#define HK_MSG_LAST HK_MSG_JOIN

/** Which collective a request asks for. */
typedef enum hk_coll {
  HK_COLL_ALLREDUCE = 1,
  HK_COLL_BROADCAST = 2,
  HK_COLL_BARRIER = 3,
  HK_COLL_ALLGATHER = 4,     /* count = this rank's rows */
  HK_COLL_REDUCESCATTER = 5, /* count = rows (all ranks) */
  HK_COLL_ALLTOALL = 6,      /* count = rows this rank sends */
  HK_COLL_JOIN = 7,          /* this rank ran out of data */
  HK_COLL_SET_ADD = 8,       /* hk_process_set_add (world only; the member
                                lists are compared when it runs) */
  HK_COLL_SET_REMOVE = 9,    /* hk_process_set_remove (world only): count =
                                the set's id */
} hk_coll;

/** The last hk_coll (the decoder's bound). */
#define HK_COLL_LAST HK_COLL_SET_REMOVE

/** Channels between workers, named in HELLO. */
typedef enum hk_channel {
  HK_CHANNEL_CONTROL = 1, /* rank r -> rank 0: negotiation */
  HK_CHANNEL_DATA = 2,    /* rank r -> rank r+1: the ring */
} hk_channel;

/** One tensor a rank has ready. count in elements. */
typedef struct hk_wire_request {
  uint8_t coll;  /* hk_coll */
  uint8_t dtype; /* hk_dtype */
  uint8_t op;    /* hk_op (allreduce only; 0 otherwise) */
  uint8_t mem;   /* hk_wire_mem: where this rank's buffers are */
  int32_t root;  /* broadcast root; 0 otherwise */
  uint64_t count;
  uint64_t row_elems;              /* elements per row (allgather etc.); 1 */
  double prescale, postscale;      /* allreduce factors (1.0: none) */
  uint32_t group_size;             /* grouped allreduce: members; 0: none */
  uint32_t group_index;            /* this member's index in its group */
  int32_t set;                     /* the process set (hk.h); 0: the world */
  uint8_t ndims;                   /* the shape's dimensions; 0: none given */
  int64_t shape[HK_WIRE_MAX_DIMS]; /* ndims extents, each >= 0 */
  char name[HK_MAX_NAME_LEN + 1];
  char group[HK_MAX_NAME_LEN + 1]; /* the group's name, "" when none */
} hk_wire_request;

/**
 * Copies *src into *dst: every field before name, then name and group up to
 * their NUL (the bytes after it are left as they were). A request is 1.1
 * KB, almost all of it the two name arrays, and the per-tensor path copied
 * or cleared whole ones five times (with the negotiator's entries reused,
 * hkbench --model small1000 at np 2 went from 2.76 to 2.42 ms a step).
 * Both must be valid requests (NUL-terminated strings); they must not
 * overlap. Thread-safe (touches only its arguments); no errors.
 */
static inline void hk_wire_request_copy(hk_wire_request *dst,
                                        const hk_wire_request *src) {
  memcpy(dst, src, offsetof(hk_wire_request, name));
  memcpy(dst->name, src->name, strlen(src->name) + 1);
  memcpy(dst->group, src->group, strlen(src->group) + 1);
}

/**
 * Sets *req to the empty request: every field before name zero, name and
 * group "" (the rest of their bytes are not written). Thread-safe; no
 * errors.
 */
static inline void hk_wire_request_clear(hk_wire_request *req) {
  memset(req, 0, offsetof(hk_wire_request, name));
  req->name[0] = req->group[0] = '\0';
}

/** Where a rank's buffers for one request live (device/device.h). The
 *  two mixed values and OTHER_DEVICE are never valid: the negotiation
 *  fails the tensor on every rank naming the rank that has them. */
typedef enum hk_wire_mem {
  HK_WIRE_MEM_HOST = 0,   /* every buffer in host memory */
  HK_WIRE_MEM_DEVICE = 1, /* every buffer in the GPU's memory */
  HK_WIRE_MEM_SEND_DEVICE_RECV_HOST = 2,
  HK_WIRE_MEM_SEND_HOST_RECV_DEVICE = 3,
  HK_WIRE_MEM_OTHER_DEVICE = 4, /* a buffer on another GPU than hk's */
} hk_wire_mem;

/** Response flags. */
#define HK_RESP_CACHED 1u /* identified by cache_bit; name is empty */
#define HK_RESP_PARAMS 2u /* carries the request (for ranks that joined) */

/** One tensor to run (status HK_OK) or to fail on every rank. */
typedef struct hk_wire_response {
  uint16_t status;                /* hk_status */
  uint8_t flags;                  /* HK_RESP_* */
  uint32_t cache_bit;             /* with HK_RESP_CACHED; else HK_WIRE_NO_BIT */
  char name[HK_MAX_NAME_LEN + 1]; /* empty with HK_RESP_CACHED */
  char *reason;            /* NULL when status is HK_OK; owned by the message */
  int32_t divisor;         /* HK_AVERAGE divides by this (the ranks that took
                              part); JOIN: the rank that joined last; else 0 */
  hk_wire_request *params; /* with HK_RESP_PARAMS (else NULL); owned by
                              the message (rare: it carries a request for
                              ranks that joined, so it is not inline) */
  uint32_t ncounts;        /* allgather: every rank's rows (size entries) */
  uint64_t *counts;        /* owned by the message */
  double first_seen;       /* rank 0 only, never on the wire: when the first
                              rank submitted it (for the timeline) */
  double last_seen;        /* rank 0 only, never on the wire: when the last
                              rank did (or joined past it) */
  int32_t last_rank;       /* rank 0 only, never on the wire: that rank */
  uint8_t coll;            /* rank 0 only, never on the wire: the
                              collective (hk_coll) */
  uint64_t bytes;          /* rank 0 only, never on the wire: an allreduce's
                              input bytes (count x dtype size); else 0 */
  hk_wire_request *agreed; /* rank 0 only, never on the wire: the request
                              every rank agreed on, for a process set rank
                              0 is not a member of (its cache follows the
                              members', coordinator/cache.h); else NULL.
                              Owned by the negotiator's response array */
} hk_wire_response;

/**
 * Sets *r to the empty response: HK_OK, no flags, cache_bit
 * HK_WIRE_NO_BIT, name "" (its other 511 bytes are not written: a
 * response is 600 bytes, and a RESPONSES of 1000 tensors calloc'd 600 KB
 * on every rank per round), no reason, params or counts, zero times,
 * collective and bytes.
 * Thread-safe; no errors.
 */
static inline void hk_wire_response_clear(hk_wire_response *r) {
  r->status = 0;
  r->flags = 0;
  r->cache_bit = HK_WIRE_NO_BIT;
  r->name[0] = '\0';
  r->reason = NULL;
  r->divisor = 0;
  r->params = NULL;
  r->ncounts = 0;
  r->counts = NULL;
  r->first_seen = r->last_seen = 0;
  r->last_rank = 0;
  r->coll = 0;
  r->bytes = 0;
  r->agreed = NULL;
}

/**
 * One telemetry sample of a rank (observe/telemetry.h), carried to rank 0
 * in its REQUESTS when a new one exists (REQUESTS.has_sample). Fixed size
 * on the wire: 76 bytes. GPU fields are 0 unless gpu_ok.
 */
typedef struct hk_wire_sample {
  uint32_t seq;            /* 1, 2, ... per rank: which sample this is */
  uint8_t gpu_ok;          /* 1: the GPU fields are NVML's figures */
  uint8_t util_pct;        /* GPU utilisation, percent (0..100) */
  uint16_t gpu_index;      /* the GPU's NVML index on its host */
  uint16_t temp_c;         /* GPU temperature, degrees Celsius */
  uint32_t sm_mhz;         /* SM clock now, MHz */
  uint32_t sm_max_mhz;     /* SM clock maximum, MHz */
  uint32_t power_mw;       /* power draw, milliwatts */
  uint32_t power_limit_mw; /* enforced power limit, milliwatts */
  uint64_t mem_used;       /* GPU memory used, bytes */
  uint64_t throttle;       /* nvmlDeviceGetCurrentClocksThrottleReasons bits
                              (observe/telemetry.h names them) */
  uint16_t ncpu;           /* the host's online CPUs */
  double load1;            /* the host's 1-minute load average */
  double cpu_s;            /* the process's CPU time, user + system, s */
  double run_delay_s;      /* its threads' time runnable but waiting for a
                              CPU (/proc schedstat), s */
  double t_s;              /* when it was taken, the rank's hk_now(), s */
} hk_wire_sample;

typedef struct hk_wire_peer {
  char host[HK_WIRE_MAX_HOST_LEN + 1];
  uint16_t port;
} hk_wire_peer;

/** The largest fusion threshold RESPONSES.tune carries (bytes: the
 *  HK_FUSION_THRESHOLD table's bound) and cycle time (ms). */
#define HK_WIRE_MAX_TUNE_THRESHOLD (1ull << 36)
#define HK_WIRE_MAX_TUNE_CYCLE_MS 60000.0
#define HK_WIRE_MAX_TUNE_STAGING (1u << 30)
#define HK_WIRE_MAX_TUNE_COMPRESSION 2 /* HK_COMPRESSION: none, fp16, bf16 */

/**
 * A change of the agreed settings that rank 0's autotuner decided
 * (coordinator/autotune.h), carried by a world RESPONSES that runs
 * tensors: every rank applies it before it runs that RESPONSES, so every
 * rank switches at the same round and no round runs with mixed settings.
 * On the wire after the responses: u8 has_tune, then (when 1) u32 seq,
 * u64 fusion_threshold, f64 cycle_time_ms, u8 hierarchical + 1, u8
 * sockets_per_peer, u32 staging_chunk_bytes, u8 compression: 28 bytes.
 */
typedef struct hk_wire_tune {
  uint32_t seq;                 /* 1, 2, ...: the change's number (>= 1) */
  uint64_t fusion_threshold;    /* bytes, <= HK_WIRE_MAX_TUNE_THRESHOLD */
  double cycle_time_ms;         /* ms, 0..HK_WIRE_MAX_TUNE_CYCLE_MS */
  int8_t hierarchical;          /* HK_HIERARCHICAL_ALLREDUCE: 1, 0, or -1
                                   (the cost model decides) */
  uint8_t sockets_per_peer;     /* TCP sockets a link's stream is striped
                                   over, 1..HK_WIRE_MAX_STREAMS */
  uint32_t staging_chunk_bytes; /* device staging chunk, bytes,
                                   1..HK_WIRE_MAX_TUNE_STAGING */
  uint8_t compression; /* HK_COMPRESSION, 0..HK_WIRE_MAX_TUNE_COMPRESSION */
} hk_wire_tune;

/** A decoded message. Arrays and reasons are owned by it: hk_msg_free. */
typedef struct hk_msg {
  uint8_t type; /* hk_msg_type */
  union {
    struct {
      int32_t rank, size, pid;
      uint16_t port;
      char host[HK_WIRE_MAX_HOST_LEN + 1];
    } reg;
    struct {
      uint32_t n;
      hk_wire_peer *peers; /* n entries, index = rank */
    } peers;
    struct {
      int32_t rank;      /* the rank that failed first, or -1 */
      int32_t exit_code; /* its exit status, or -1 */
      int32_t signal;    /* the signal that killed it, or 0 */
      char reason[HK_WIRE_MAX_REASON_LEN + 1];
    } abort;
    struct {
      int32_t rank;
      uint8_t channel; /* hk_channel */
      uint8_t stream;  /* DATA: which of the pair's connections this is,
                          0 <= stream < streams; CONTROL: 0 */
      uint8_t streams; /* DATA: connections the sender opens to each peer
                          (its HK_SOCKETS_PER_PEER, or more for
                          --autotune), 1..HK_WIRE_MAX_STREAMS; CONTROL: 1 */
      uint8_t stripes; /* DATA: how many of them its links carry their
                          stream over (HK_SOCKETS_PER_PEER), 1..streams;
                          CONTROL: 1 */
    } hello;
    struct {
      int32_t rank; /* the rank saying goodbye, in [0, HK_WIRE_MAX_RANKS) */
    } goodbye;
    struct {
      uint8_t shutdown; /* 1: this rank called hk_shutdown */
      uint32_t n;
      hk_wire_request *reqs;
      uint32_t nbits;        /* response-cache bits this rank has ready */
      uint32_t *bits;        /* nbits indices, ascending within a set */
      int32_t *bit_sets;     /* nbits entries: the process set whose
                                response cache bits[i] is of; the pairs
                                (bit_sets[i], bits[i]) ascend. On the wire
                                a run (set, count) precedes each set's
                                bits */
      uint8_t has_sample;    /* 1: sample holds a new telemetry sample */
      hk_wire_sample sample; /* inline: no allocation */
    } requests;
    struct {
      uint8_t answer;        /* 1: answers the recipient's outstanding
                                REQUESTS; 0: does not. Always the first
                                payload byte (offset HK_WIRE_HEADER_LEN),
                                so one encoding can be sent to every rank
                                with only this byte set per recipient */
      int32_t set;           /* the process set these responses and
                                invalidations are of (its members get
                                them; its response cache); 0: the world,
                                the only set that carries a stop */
      int32_t shutdown_rank; /* >= 0: that rank shut down; everyone stops */
      uint16_t abort_status; /* != 0: the job fails with this hk_status */
      char *abort_reason;    /* with abort_status; owned by the message */
      uint32_t ninval;       /* cache bits to retire before running these */
      uint32_t *inval;
      uint32_t n;
      hk_wire_response *resps;
      uint8_t has_tune;  /* 1: tune holds a change of settings (world
                            only, with n > 0) */
      hk_wire_tune tune; /* inline: no allocation */
      uint8_t joiners;   /* elastic: 1: workers wait to join the job at the
                            next commit (world only, with n > 0; sticky
                            until the job re-forms) */
    } responses;
    struct {
      int32_t base;   /* the agent's first slot; -1 in the request */
      int32_t nslots; /* the workers it starts, 0..HK_WIRE_MAX_RANKS */
      int32_t size;   /* the job's slots (answer); 0 in the request */
      char host[HK_WIRE_MAX_HOST_LEN + 1]; /* the agent's host name */
    } agent;
    struct {
      int32_t slot;   /* the worker's slot, or -1: the job is over */
      int32_t pid;    /* the worker's pid (0 with slot -1) */
      int32_t status; /* its exit status (0..255) when signal is 0; with
                         slot -1 the job's exit status */
      int32_t signal; /* the signal that killed it, or 0 */
    } exit;
    struct {
      char *text; /* lines of the live table, at most
                     HK_WIRE_MAX_MONITOR_LEN bytes, no NUL; owned by the
                     message (malloc'd when decoded) */
    } monitor;
  } u;
} hk_msg;

/**
 * Checks an 8-byte header (magic, version, known type, payload length at
 * most HK_WIRE_MAX_PAYLOAD) and returns the payload length in bytes.
 * Errors: HK_ERR_PROTOCOL naming the bad field.
 */
hk_status hk_wire_header(const uint8_t hdr[HK_WIRE_HEADER_LEN], uint8_t *type,
                         uint32_t *payload_len);

/**
 * Decodes exactly one frame of `len` bytes (header + payload) into *out.
 * On HK_OK the caller owns *out and must call hk_msg_free. On error *out
 * holds nothing to free (it is zeroed).
 * Errors: HK_ERR_PROTOCOL (truncated, oversized, trailing bytes, bad magic,
 * version or type, a string too long or holding NUL, a value out of range),
 * HK_ERR_NOMEM. Thread-safety: reentrant.
 */
hk_status hk_wire_decode(const uint8_t *frame, size_t len, hk_msg *out);

/**
 * Appends the frame for *msg to out.
 * Errors: HK_ERR_PROTOCOL (a string over its limit, payload over
 * HK_WIRE_MAX_PAYLOAD), HK_ERR_NOMEM. On error out->len is unchanged.
 */
hk_status hk_wire_encode(const hk_msg *msg, hk_buf *out);

/**
 * The bytes one request by name adds to an encoded REQUESTS (its fields,
 * the name and the group name), counted by the encoder itself; a request
 * by cache bit adds HK_WIRE_BIT_BYTES at most. Lets a sender bound a
 * message before encoding it (worker/background.c). Pure; thread-safe.
 */
size_t hk_wire_request_size(const hk_wire_request *r);

/** Frees what a decoded (or caller-built, malloc-backed) message owns. */
void hk_msg_free(hk_msg *msg);

#endif
