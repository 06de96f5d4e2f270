/*
 * flight_record.h - the flight recorder's data: the fixed ring of the last
 * collectives a rank took part in, and the record file every rank writes
 * when a job hangs or fails (observe/flight.h decides when; hkrun
 * --diagnose reads the files back, launcher/diagnose.h).
 *
 * The ring: HK_FLIGHT_RECORDER entries allocated once (hk_flight_ring_init
 * at hk_init); recording overwrites the oldest entry, so it keeps the
 * newest `cap`, and never allocates. Thread-safety: none; the worker's
 * background thread is its only user (observe/flight.h).
 *
 * The record file, hk-flight.<job>.<rank>.txt, is text, one item per
 * line, fields separated by one tab:
 *   hk-flight 2                     (magic, format version)
 *   job <16 hex digits>             (the same on every rank of one job)
 *   rank <r>  size <n>  host <name>  pid <pid>
 *   reason <text>                   (why it was written)
 *   written_us <CLOCK_REALTIME microseconds>
 *   rounds <negotiation rounds of the world this rank ran>
 *   capacity <ring entries>  recorded <entries ever recorded>
 *   entry <seq> <round> <state> <kind> <set> <dtype> <bytes> then the
 *         submit,
 *         negotiated, start and end times as CLOCK_REALTIME microseconds,
 *         then the same four on CLOCK_MONOTONIC (0: not reached), then
 *         the tensor name (escaped: bytes below 0x20, 0x7f and '\' as
 *         \xHH), oldest entry first
 *   pending <same fields as entry>  (the tensors in flight on the rank:
 *         submitted and not yet complete, whatever the ring still holds;
 *         as many as the ring's capacity at most)
 *   end <number of entry lines> <number of pending lines> <pending
 *         tensors left out> (the last field may be absent: 0)
 * The file is written without a name (O_TMPFILE) and linked under its
 * name once complete, so a writer that dies leaves no temporary file: a
 * reader sees the previous record, none (between the old one's unlink
 * and the new one's link), or the whole new one. Where the file system
 * has no O_TMPFILE, a random name in the same folder renamed over it
 * (common/outfile.h).
 * Where: every job's records go into a folder of their own,
 * <base>/hk-<job>/ (hk_flight_base_dir, hk_flight_job_folder), made
 * privately by the first rank that writes (observe/flight.c); hkrun
 * names it at exit.
 */
#ifndef HK_COMMON_FLIGHT_RECORD_H
#define HK_COMMON_FLIGHT_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "common/auth.h"
#include "hk/hk.h"

/** Bytes of a tensor name the ring keeps (longer names are truncated:
 *  two names that differ only after this many bytes read as one). */
#define HK_FLIGHT_NAME_LEN 95
/** Bytes of the reason line kept (longer reasons are truncated). */
#define HK_FLIGHT_REASON_LEN 1023

/** Where an entry's collective got to. */
typedef enum hk_flight_state {
  HK_FLIGHT_SUBMITTED = 0,  /* the trainer submitted it */
  HK_FLIGHT_NEGOTIATED = 1, /* a round told this rank to run it */
  HK_FLIGHT_RUNNING = 2,    /* its collective started */
  HK_FLIGHT_DONE = 3,       /* completed with HK_OK */
  HK_FLIGHT_FAILED = 4,     /* its negotiation or collective failed */
  HK_FLIGHT_NSTATES
} hk_flight_state;

/** The entry's times: indexes into real_us / mono_us. */
enum {
  HK_FLIGHT_T_SUBMIT,
  HK_FLIGHT_T_NEGOTIATED,
  HK_FLIGHT_T_START,
  HK_FLIGHT_T_END,
  HK_FLIGHT_NTIMES
};

/** One collective (or one pending tensor). */
typedef struct hk_flight_entry {
  uint64_t seq;   /* 1, 2, ...: order of recording on this rank; 0: empty */
  uint64_t round; /* the negotiation round of its process set that
                     carried it (counted from 1 per set, the same on every
                     member); 0: not negotiated */
  uint64_t bytes; /* this rank's input bytes */
  int64_t real_us[HK_FLIGHT_NTIMES]; /* CLOCK_REALTIME, us; 0: not yet */
  int64_t mono_us[HK_FLIGHT_NTIMES]; /* CLOCK_MONOTONIC, us; 0: not yet */
  uint8_t state;                     /* hk_flight_state */
  uint8_t kind;                      /* HK_COLL_* (coordinator/wire.h) */
  int32_t set;                       /* its process set; 0: the world */
  uint8_t dtype;                     /* hk_dtype */
  char name[HK_FLIGHT_NAME_LEN + 1]; /* truncated, NUL-terminated */
} hk_flight_entry;

/** The fixed ring: slots[cap], `next` entries recorded so far. */
typedef struct hk_flight_ring {
  hk_flight_entry *slots;
  size_t cap;
  uint64_t next;
} hk_flight_ring;

/** Allocates cap zeroed slots (cap >= 1). Errors: HK_ERR_NOMEM. */
hk_status hk_flight_ring_init(hk_flight_ring *r, size_t cap);

/** Frees the slots; *r becomes empty. */
void hk_flight_ring_free(hk_flight_ring *r);

/** Takes the next slot (overwriting the oldest once full), clears it and
 *  gives it seq = number of entries recorded so far. O(1), no allocation. */
hk_flight_entry *hk_flight_ring_push(hk_flight_ring *r);

/** Entries the ring holds now: min(next, cap). */
size_t hk_flight_ring_count(const hk_flight_ring *r);

/** The i-th oldest entry held (0 <= i < hk_flight_ring_count). */
hk_flight_entry *hk_flight_ring_at(const hk_flight_ring *r, size_t i);

/** The entry recorded as seq, or NULL when it was overwritten (or seq is
 *  0 or not yet recorded). */
hk_flight_entry *hk_flight_ring_find(const hk_flight_ring *r, uint64_t seq);

/** A state's word in the file ("submitted", ...); "?" when out of range. */
const char *hk_flight_state_name(unsigned state);

/** A collective kind's word ("allreduce", "broadcast", "barrier",
 *  "allgather", "reducescatter", "alltoall", "join", "set_add",
 *  "set_remove"); "?" otherwise. */
const char *hk_flight_kind_name(unsigned kind);

/** What a record file says about its rank (header lines). */
typedef struct hk_flight_header {
  char job[17]; /* 16 hex digits */
  int rank, size;
  char host[256];
  long pid;
  char reason[HK_FLIGHT_REASON_LEN + 1];
  int64_t written_us;        /* CLOCK_REALTIME */
  uint64_t rounds;           /* negotiation rounds of the world run */
  uint64_t capacity;         /* ring entries */
  uint64_t recorded;         /* entries ever recorded (> capacity: wrapped) */
  uint64_t pending_left_out; /* tensors in flight not listed (past the
                                ring's capacity; the 'end' line) */
} hk_flight_header;

/**
 * Writes the record of one rank into the open folder dir_fd (dir_path
 * names it in messages): hk-flight.<job>.<rank>.txt, mode `mode`
 * (HK_FILE_MODE), made as common/outfile.h makes every output (never
 * through a link; without a name until whole, then linked in place of the
 * old record). Entries are taken from ring oldest first;
 * pending[0..npending) are the tensors in flight. Errors: HK_ERR_NOMEM,
 * HK_ERR_SYSTEM naming the file and the system's reason (the old record,
 * if any, may be gone then: see above). Thread-safety: reentrant (touches
 * only its arguments and the file).
 */
hk_status hk_flight_write(int dir_fd, const char *dir_path, unsigned mode,
                          const hk_flight_header *h, const hk_flight_ring *ring,
                          const hk_flight_entry *pending, size_t npending);

/** The job id of a job whose secret is s: 16 hex digits, the same on
 *  every rank and in hkrun, known to nobody outside the job (derived from
 *  the secret); NULL s (no launcher): the pid's. */
void hk_flight_job_id(const hk_secret *s, char out[17]);

/** The folder of a job's records inside the records' base folder:
 *  "hk-<job>" into out[cap] (cap >= 24 suffices). */
void hk_flight_job_folder(const char *job, char *out, size_t cap);

/** The base folder of flight records: flight_dir (HK_FLIGHT_DIR) when not
 *  empty, else $TMPDIR when it is an absolute path, else "/tmp"; into
 *  out[cap]. hkrun and every rank it starts find the same one. */
void hk_flight_base_dir(const char *flight_dir, char *out, size_t cap);

/** The file name for (job, rank): "hk-flight.<job>.<rank>.txt" into
 *  out[cap] (cap >= 64 always suffices). */
void hk_flight_file_name(const char *job, int rank, char *out, size_t cap);

/** One record file, read back. */
typedef struct hk_flight_file {
  hk_flight_header h;
  hk_flight_entry *entries; /* nentries, oldest first (malloc'd) */
  size_t nentries;
  hk_flight_entry *pending; /* npending (malloc'd) */
  size_t npending;
} hk_flight_file;

/**
 * Reads and checks one record file. Errors: HK_ERR_SYSTEM (cannot open or
 * read), HK_ERR_INVALID_ARG for anything that is not a well-formed
 * record, naming the file, the line number and what was wrong ("line 7:
 * 'entry' has 14 fields, expected 16"), including a file cut short (no
 * `end` line, or counts that do not match). *out is zeroed on error.
 */
hk_status hk_flight_read(const char *path, hk_flight_file *out);

/** Frees what hk_flight_read allocated. */
void hk_flight_file_free(hk_flight_file *f);

#endif
