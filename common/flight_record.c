/*
 * flight_record.c - the flight recorder's ring and record file (see
 * flight_record.h for the format).
 */
#include "common/flight_record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/outfile.h"
#include "common/status.h"

hk_status hk_flight_ring_init(hk_flight_ring *r, size_t cap) {
  memset(r, 0, sizeof *r);
  r->slots = calloc(cap ? cap : 1, sizeof *r->slots);
  if (!r->slots)
    return hk_fail(HK_ERR_NOMEM,
                   "cannot allocate a flight recorder of %zu entries "
                   "(HK_FLIGHT_RECORDER)",
                   cap);
  r->cap = cap ? cap : 1;
  return HK_OK;
}

void hk_flight_ring_free(hk_flight_ring *r) {
  free(r->slots);
  memset(r, 0, sizeof *r);
}

hk_flight_entry *hk_flight_ring_push(hk_flight_ring *r) {
  hk_flight_entry *e = &r->slots[r->next % r->cap];
  memset(e, 0, sizeof *e);
  e->seq = ++r->next;
  return e;
}

size_t hk_flight_ring_count(const hk_flight_ring *r) {
  return r->next < r->cap ? (size_t)r->next : r->cap;
}

hk_flight_entry *hk_flight_ring_at(const hk_flight_ring *r, size_t i) {
  uint64_t first = r->next - hk_flight_ring_count(r); /* seq of oldest - 1 */
  return &r->slots[(first + i) % r->cap];
}

hk_flight_entry *hk_flight_ring_find(const hk_flight_ring *r, uint64_t seq) {
  if (seq == 0 || seq > r->next || r->next - seq >= r->cap)
    return NULL;
  hk_flight_entry *e = &r->slots[(seq - 1) % r->cap];
  return e->seq == seq ? e : NULL;
}

static const char *const state_names[HK_FLIGHT_NSTATES] = {
    "submitted", "negotiated", "running", "done", "failed"};

/* indexed by HK_COLL_* (coordinator/wire.h): 1 allreduce ... 7 join, 8
 * and 9 the process set calls */
static const char *const kind_names[] = {
    "?",         "allreduce",     "broadcast", "barrier",
    "allgather", "reducescatter", "alltoall",  "join",
    "set_add",   "set_remove"};

const char *hk_flight_state_name(unsigned state) {
  return state < HK_FLIGHT_NSTATES ? state_names[state] : "?";
}

const char *hk_flight_kind_name(unsigned kind) {
  return kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind]
                                                         : "?";
}

void hk_flight_file_name(const char *job, int rank, char *out, size_t cap) {
  snprintf(out, cap, "hk-flight.%s.%d.txt", job, rank);
}

void hk_flight_job_id(const hk_secret *s, char out[17]) {
  if (!s) {
    snprintf(out, 17, "%016lx", (unsigned long)getpid());
    return;
  }
  uint8_t mac[HK_PROOF_LEN];
  hk_secret_derive(s, "hk flight recorder job", NULL, 0, mac);
  for (int i = 0; i < 8; i++)
    snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

void hk_flight_job_folder(const char *job, char *out, size_t cap) {
  snprintf(out, cap, "hk-%s", job);
}

void hk_flight_base_dir(const char *flight_dir, char *out, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  snprintf(out, cap, "%s",
           flight_dir && *flight_dir ? flight_dir
           : tmp && *tmp == '/'      ? tmp
                                     : "/tmp");
}

/* Writes s with bytes < 0x20, 0x7f and '\' as \xHH. */
static void put_escaped(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f || *p == '\\')
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
}

static void put_entry(FILE *f, const char *tag, const hk_flight_entry *e) {
  fprintf(f, "%s\t%" PRIu64 "\t%" PRIu64 "\t%s\t%s\t%d\t%s\t%" PRIu64, tag,
          e->seq, e->round, hk_flight_state_name(e->state),
          hk_flight_kind_name(e->kind), (int)e->set,
          hk_dtype_name((hk_dtype)e->dtype), e->bytes);
  for (int i = 0; i < HK_FLIGHT_NTIMES; i++)
    fprintf(f, "\t%" PRId64, e->real_us[i]);
  for (int i = 0; i < HK_FLIGHT_NTIMES; i++)
    fprintf(f, "\t%" PRId64, e->mono_us[i]);
  fputc('\t', f);
  put_escaped(f, e->name);
  fputc('\n', f);
}

hk_status hk_flight_write(int dir_fd, const char *dir_path, unsigned mode,
                          const hk_flight_header *h, const hk_flight_ring *ring,
                          const hk_flight_entry *pending, size_t npending) {
  char name[96];
  hk_flight_file_name(h->job, h->rank, name, sizeof name);
  /* the text first (in memory), then the file at once: made without a
   * name and linked under its name once whole (common/outfile.h), so a
   * process that exits or is killed while its background thread writes
   * (a job failing on purpose, whose main thread calls exit) leaves the
   * previous record, none, or the new one, and no temporary file */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return hk_fail_errno(HK_ERR_NOMEM, errno,
                         "cannot write the flight record '%s/%s'", dir_path,
                         name);
  fprintf(f, "hk-flight\t2\njob\t%s\nrank\t%d\nsize\t%d\nhost\t", h->job,
          h->rank, h->size);
  put_escaped(f, h->host);
  fprintf(f, "\npid\t%ld\nreason\t", h->pid);
  put_escaped(f, h->reason);
  fprintf(f,
          "\nwritten_us\t%" PRId64 "\nrounds\t%" PRIu64 "\ncapacity\t%" PRIu64
          "\nrecorded\t%" PRIu64 "\n",
          h->written_us, h->rounds, h->capacity, h->recorded);
  size_t n = ring ? hk_flight_ring_count(ring) : 0;
  for (size_t i = 0; i < n; i++)
    put_entry(f, "entry", hk_flight_ring_at(ring, i));
  for (size_t i = 0; i < npending; i++)
    put_entry(f, "pending", &pending[i]);
  fprintf(f, "end\t%zu\t%zu\t%" PRIu64 "\n", n, npending, h->pending_left_out);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    free(text);
    return hk_fail(HK_ERR_NOMEM,
                   "cannot write the flight record '%s/%s': out of memory",
                   dir_path, name);
  }
  hk_outfile out;
  hk_status st =
      hk_outfile_openat(&out, dir_fd, dir_path, name, mode, "flight record");
  if (st == HK_OK)
    st = hk_outfile_write(&out, text, len);
  if (st == HK_OK)
    st = hk_outfile_publish(&out, HK_OUT_UNLINK_FIRST);
  hk_outfile_close(&out);
  free(text);
  return st;
}

/* ---- reading ---- */

/* Splits line (modified) at tabs into f[0..max); returns how many fields
 * there are (possibly more than max: those are not stored). */
static int split(char *line, char **f, int max) {
  int n = 0;
  for (char *p = line;;) {
    if (n < max)
      f[n] = p;
    n++;
    char *t = strchr(p, '\t');
    if (!t)
      break;
    *t = '\0';
    p = t + 1;
  }
  return n;
}

/* Decodes \xHH escapes of s into out[cap] (truncating). 0, or -1 when an
 * escape is malformed. */
static int unescape(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = s; *p; p++) {
    int c = (unsigned char)*p;
    if (c == '\\') {
      unsigned v;
      if (p[1] != 'x' || sscanf(p + 2, "%2x", &v) != 1 || !p[2] || !p[3])
        return -1;
      c = (int)v;
      p += 3;
    }
    if (o + 1 < cap)
      out[o++] = (char)c;
  }
  out[o] = '\0';
  return 0;
}

static int parse_u64(const char *s, uint64_t *v) {
  char *end;
  errno = 0;
  if (!*s || *s == '-')
    return -1;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end)
    return -1;
  *v = x;
  return 0;
}

static int parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  if (!*s)
    return -1;
  long long x = strtoll(s, &end, 10);
  if (errno || *end)
    return -1;
  *v = x;
  return 0;
}

/* The index of word in names[n], or -1. */
static int word_index(const char *word, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(word, names[i]))
      return i;
  return -1;
}

/* The hk_dtype called word, or -1. */
static int dtype_of(const char *word) {
  for (int d = 0; d < 32; d++) {
    const char *s = hk_dtype_name((hk_dtype)d);
    if (!strcmp(s, "unknown"))
      return -1;
    if (!strcmp(s, word))
      return d;
  }
  return -1;
}

#define ENTRY_FIELDS (8 + 2 * HK_FLIGHT_NTIMES + 1)

/* Parses an entry/pending line's fields; NULL, or what is wrong. */
static const char *parse_entry(char **f, int n, hk_flight_entry *e, char *why,
                               size_t cap) {
  memset(e, 0, sizeof *e);
  if (n != ENTRY_FIELDS) {
    snprintf(why, cap, "'%s' has %d fields, expected %d", f[0], n,
             ENTRY_FIELDS);
    return why;
  }
  int state = word_index(f[3], state_names, HK_FLIGHT_NSTATES);
  int kind = word_index(f[4], kind_names + 1,
                        (int)(sizeof kind_names / sizeof kind_names[0]) - 1);
  int dtype = dtype_of(f[6]);
  int64_t set = -1;
  if (parse_u64(f[1], &e->seq) || parse_u64(f[2], &e->round))
    return "a sequence or round number is not a number";
  if (parse_i64(f[5], &set) || set < 0 || set > INT32_MAX)
    return "the process set is not a number of one";
  if (state < 0)
    return "unknown state";
  if (kind < 0)
    return "unknown collective kind";
  if (dtype < 0)
    return "unknown dtype";
  if (parse_u64(f[7], &e->bytes))
    return "bytes is not a number";
  for (int i = 0; i < HK_FLIGHT_NTIMES; i++)
    if (parse_i64(f[8 + i], &e->real_us[i]) ||
        parse_i64(f[8 + HK_FLIGHT_NTIMES + i], &e->mono_us[i]))
      return "a time is not a number";
  if (unescape(f[ENTRY_FIELDS - 1], e->name, sizeof e->name))
    return "malformed escape in the tensor name";
  e->state = (uint8_t)state;
  e->kind = (uint8_t)(kind + 1);
  e->set = (int32_t)set;
  e->dtype = (uint8_t)dtype;
  return NULL;
}

/* Appends e to *arr (grown by doubling). -1 when out of memory. */
static int append(hk_flight_entry **arr, size_t *n, size_t *cap,
                  const hk_flight_entry *e) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    hk_flight_entry *p = realloc(*arr, c * sizeof *p);
    if (!p)
      return -1;
    *arr = p;
    *cap = c;
  }
  (*arr)[(*n)++] = *e;
  return 0;
}

/* The header keys in file order; each must appear once, in this order. */
static const char *const header_keys[] = {
    "hk-flight", "job",        "rank",   "size",     "host",    "pid",
    "reason",    "written_us", "rounds", "capacity", "recorded"};
#define NKEYS (int)(sizeof header_keys / sizeof header_keys[0])

/* Stores header field k from value; NULL, or what is wrong. */
static const char *header_field(int k, const char *v, hk_flight_header *h) {
  uint64_t u;
  int64_t s;
  switch (k) {
  case 0:
    return strcmp(v, "2") ? "unsupported format version" : NULL;
  case 1:
    if (strlen(v) != 16 || strspn(v, "0123456789abcdef") != 16)
      return "the job id is not 16 hex digits";
    memcpy(h->job, v, 17);
    return NULL;
  case 2:
  case 3:
    if (parse_u64(v, &u) || u > 65536 || (k == 3 && u == 0))
      return k == 2 ? "rank is not a number" : "size is not a positive number";
    *(k == 2 ? &h->rank : &h->size) = (int)u;
    return NULL;
  case 4:
    return unescape(v, h->host, sizeof h->host) ? "malformed host" : NULL;
  case 5:
    if (parse_u64(v, &u))
      return "pid is not a number";
    h->pid = (long)u;
    return NULL;
  case 6:
    return unescape(v, h->reason, sizeof h->reason) ? "malformed reason" : NULL;
  case 7:
    if (parse_i64(v, &s))
      return "written_us is not a number";
    h->written_us = s;
    return NULL;
  default: {
    uint64_t *dst = k == 8 ? &h->rounds : k == 9 ? &h->capacity : &h->recorded;
    return parse_u64(v, dst) ? "a count is not a number" : NULL;
  }
  }
}

hk_status hk_flight_read(const char *path, hk_flight_file *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "cannot read '%s'", path);
  char *line = NULL;
  size_t linecap = 0, cap_e = 0, cap_p = 0;
  ssize_t len;
  long lineno = 0;
  int key = 0, ended = 0;
  const char *why = NULL;
  char buf[160];
  hk_status st = HK_OK;
  while (!why && (len = getline(&line, &linecap, f)) >= 0) {
    lineno++;
    if (len == 0 || line[len - 1] != '\n') {
      why = "the line is cut short (no newline)";
      break;
    }
    line[len - 1] = '\0';
    if (ended) {
      why = "text after the 'end' line";
      break;
    }
    if (memchr(line, '\0', (size_t)len - 1)) {
      why = "a NUL byte in the line";
      break;
    }
    char *fl[ENTRY_FIELDS + 1];
    int n = split(line, fl, ENTRY_FIELDS + 1);
    if (key < NKEYS) {
      if (n != 2 || strcmp(fl[0], header_keys[key])) {
        snprintf(buf, sizeof buf, "expected '%s<TAB>value'%s", header_keys[key],
                 key == 0 ? " (this is not an hk flight record)" : "");
        why = buf;
      } else {
        why = header_field(key, fl[1], &out->h);
      }
      key++;
      continue;
    }
    if (!strcmp(fl[0], "entry") || !strcmp(fl[0], "pending")) {
      hk_flight_entry e;
      why = parse_entry(fl, n, &e, buf, sizeof buf);
      int pend = fl[0][0] == 'p';
      if (!why && (pend ? append(&out->pending, &out->npending, &cap_p, &e)
                        : append(&out->entries, &out->nentries, &cap_e, &e))) {
        st = hk_fail(HK_ERR_NOMEM, "%s: out of memory", path);
        break;
      }
    } else if (!strcmp(fl[0], "end")) {
      uint64_t a, b, c = 0;
      if ((n != 3 && n != 4) || parse_u64(fl[1], &a) || parse_u64(fl[2], &b) ||
          (n == 4 && parse_u64(fl[3], &c)))
        why = "malformed 'end' line";
      else if (a != out->nentries || b != out->npending) {
        snprintf(buf, sizeof buf,
                 "'end' counts %" PRIu64 " entries and %" PRIu64
                 " pending, the file has %zu and %zu",
                 a, b, out->nentries, out->npending);
        why = buf;
      }
      out->h.pending_left_out = c;
      ended = 1;
    } else {
      snprintf(buf, sizeof buf, "unknown line '%.40s'", fl[0]);
      why = buf;
    }
  }
  if (!why && st == HK_OK && ferror(f))
    st = hk_fail_errno(HK_ERR_SYSTEM, errno, "cannot read '%s'", path);
  else if (!why && st == HK_OK && !ended) {
    why = lineno == 0 ? "the file is empty"
                      : "the record is cut short (no 'end' line)";
    lineno++;
  }
  if (why)
    st = hk_fail(HK_ERR_INVALID_ARG, "%s: line %ld: %s", path, lineno, why);
  free(line);
  fclose(f);
  if (st != HK_OK)
    hk_flight_file_free(out);
  return st;
}

void hk_flight_file_free(hk_flight_file *f) {
  free(f->entries);
  free(f->pending);
  memset(f, 0, sizeof *f);
}
