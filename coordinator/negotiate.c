#include "coordinator/negotiate.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/strmap.h"
#include "coordinator/lateness.h"

/* What one rank said about one tensor. */
typedef struct slot {
  uint8_t present, coll, dtype, op, mem;
  int32_t root;
  uint64_t count, row_elems;
  double prescale, postscale;
  uint32_t group_size;
  uint8_t ndims;                   /* the shape given, or 0 */
  int64_t shape[HK_WIRE_MAX_DIMS]; /* ndims extents */
  double seen; /* when this rank's request arrived (hk_negotiator_add) */
} slot;

typedef struct entry {
  int submitted;         /* ranks that have submitted it */
  uint32_t bit;          /* the cache bit every submission came by, or none */
  double first_seen;     /* when the first rank submitted it */
  double last_seen;      /* when the last one did (or joined past it) */
  int last_rank;         /* that rank */
  hk_wire_request first; /* the first submitter's request (its params;
                            first.name is the tensor's name) */
  struct entry *next;    /* in the ready list, once complete */
  slot slots[];          /* one per rank */
} entry;

/* A grouped allreduce: members are held until all are complete. */
typedef struct group {
  uint32_t size, held;
  entry *members[]; /* by group_index */
} group;

struct hk_negotiator {
  int size;
  hk_strmap *table;  /* name -> entry, while incomplete */
  hk_strmap *groups; /* group name -> group, while some member is held */
  entry *ready_head, *ready_tail;
  uint32_t nready;
  entry *spare;    /* entries handed over, kept for the next tensors (a step
                      of 1000 tensors allocated and freed 1.2 MB a round, and
                      the heap gave it back to the kernel and faulted it in
                      again) */
  uint8_t *joined; /* joined[r]: rank r called hk_join (this round) */
  int njoined, last_joined;
  hk_lateness *lateness; /* NULL unless the monitor is on (borrowed) */
  int32_t set;           /* the process set it negotiates (messages) */
  int keep_requests;     /* hk_negotiator_keep_requests */
  int *names;            /* names[r]: the job rank of table rank r, or NULL
                            (the same) */
};

/* The job rank of table rank r, for messages. */
static int job_rank(const hk_negotiator *n, int r) {
  return n->names ? n->names[r] : r;
}

/* " in process set 3", or "" for the world. */
static const char *set_words(const hk_negotiator *n, char *buf, size_t cap) {
  if (n->set == 0)
    return "";
  snprintf(buf, cap, " in process set %d", (int)n->set);
  return buf;
}

hk_status hk_negotiator_create(int size, hk_negotiator **out) {
  hk_negotiator *n = calloc(1, sizeof *n);
  if (!n)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the negotiator");
  n->size = size;
  n->joined = calloc((size_t)size, 1);
  hk_status st = n->joined ? hk_strmap_create(&n->table)
                           : hk_fail(HK_ERR_NOMEM, "cannot allocate");
  if (st == HK_OK)
    st = hk_strmap_create(&n->groups);
  if (st != HK_OK) {
    hk_strmap_destroy(n->table);
    free(n->joined);
    free(n);
    return st;
  }
  *out = n;
  return HK_OK;
}

static void free_entry(const char *key, void *value, void *arg) {
  (void)key;
  (void)arg;
  free(value);
}

static void free_group(const char *key, void *value, void *arg) {
  (void)key;
  (void)arg;
  group *g = value;
  for (uint32_t i = 0; i < g->size; i++)
    free(g->members[i]);
  free(g);
}

void hk_negotiator_destroy(hk_negotiator *n) {
  if (!n)
    return;
  hk_strmap_each(n->table, free_entry, NULL);
  hk_strmap_destroy(n->table);
  hk_strmap_each(n->groups, free_group, NULL);
  hk_strmap_destroy(n->groups);
  free(n->joined);
  free(n->names);
  for (entry *e = n->ready_head, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  for (entry *e = n->spare, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  free(n);
}

hk_status hk_negotiator_name(hk_negotiator *n, int32_t set, const int *ranks) {
  int *names = malloc((size_t)n->size * sizeof *names);
  if (!names)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate the negotiator's ranks");
  memcpy(names, ranks, (size_t)n->size * sizeof *names);
  free(n->names);
  n->names = names;
  n->set = set;
  return HK_OK;
}

uint32_t hk_negotiator_pending(const hk_negotiator *n) {
  return (uint32_t)hk_strmap_size(n->table);
}

static void push_ready(hk_negotiator *n, entry *e) {
  e->next = NULL;
  if (n->ready_tail)
    n->ready_tail->next = e;
  else
    n->ready_head = e;
  n->ready_tail = e;
  n->nready++;
}

/* An entry every rank has submitted (or joined past) leaves the table; a
 * group member waits for its group. */
static hk_status complete(hk_negotiator *n, entry *e) {
  hk_strmap_remove(n->table, e->first.name);
  const hk_wire_request *q = &e->first;
  if (q->coll == HK_COLL_JOIN) { /* every rank joined: a new round */
    e->first.root = n->last_joined;
    memset(n->joined, 0, (size_t)n->size);
    n->njoined = 0;
  }
  if (q->group_size == 0) {
    push_ready(n, e);
    return HK_OK;
  }
  group *g = hk_strmap_get(n->groups, q->group);
  if (!g) {
    g = calloc(1, sizeof *g + q->group_size * sizeof(entry *));
    if (!g || hk_strmap_put(n->groups, q->group, g) != HK_OK) {
      free(g);
      free(e);
      return hk_fail(HK_ERR_NOMEM, "cannot allocate a group");
    }
    g->size = q->group_size;
  }
  uint32_t i = q->group_index < g->size ? q->group_index : 0;
  if (g->members[i]) { /* a duplicate index: fail it alone */
    push_ready(n, e);
    return HK_OK;
  }
  g->members[i] = e;
  if (++g->held == g->size) {
    hk_strmap_remove(n->groups, q->group);
    for (uint32_t k = 0; k < g->size; k++)
      push_ready(n, g->members[k]);
    free(g);
  }
  return HK_OK;
}

/* Ranks that submitted it, plus joined ranks that did not. */
static int accounted(const hk_negotiator *n, const entry *e) {
  int c = e->submitted;
  if (e->first.coll == HK_COLL_JOIN)
    return c; /* a join completes only when every rank joined */
  for (int r = 0; r < n->size; r++)
    c += n->joined[r] && !e->slots[r].present;
  return c;
}

typedef struct sweep_args {
  hk_negotiator *n;
  entry **done;
  uint32_t ndone;
} sweep_args;

static void find_done(const char *key, void *value, void *arg) {
  (void)key;
  sweep_args *a = arg;
  entry *e = value;
  if (accounted(a->n, e) == a->n->size)
    a->done[a->ndone++] = e;
}

hk_status hk_negotiator_add(hk_negotiator *n, int rank,
                            const hk_wire_request *reqs, uint32_t count,
                            uint32_t via_bit, double now) {
  if (rank < 0 || rank >= n->size)
    return hk_fail(HK_ERR_INVALID_ARG, "rank %d out of range [0, %d)", rank,
                   n->size);
  for (uint32_t i = 0; i < count; i++) {
    const hk_wire_request *q = &reqs[i];
    entry *e = hk_strmap_get(n->table, q->name);
    if (!e) {
      /* only the slots need zeroing: the rest is set here */
      e = n->spare;
      if (e)
        n->spare = e->next;
      else
        e = malloc(sizeof *e + (size_t)n->size * sizeof(slot));
      if (!e)
        return hk_fail(HK_ERR_NOMEM, "cannot allocate a table entry");
      memset(e->slots, 0, (size_t)n->size * sizeof(slot));
      e->submitted = 0;
      e->bit = via_bit;
      e->first_seen = now;
      hk_wire_request_copy(&e->first, q);
      e->next = NULL;
      hk_status st = hk_strmap_put(n->table, q->name, e);
      if (st != HK_OK) {
        free(e);
        return st;
      }
    }
    slot *s = &e->slots[rank];
    if (s->present)
      return hk_fail(HK_ERR_PROTOCOL,
                     "rank %d submitted tensor '%s' twice while in flight",
                     rank, q->name);
    *s = (slot){.present = 1,
                .coll = q->coll,
                .dtype = q->dtype,
                .op = q->op,
                .mem = q->mem,
                .root = q->root,
                .count = q->count,
                .row_elems = q->row_elems,
                .prescale = q->prescale,
                .postscale = q->postscale,
                .group_size = q->group_size,
                .ndims = q->ndims,
                .seen = now};
    memcpy(s->shape, q->shape, q->ndims * sizeof q->shape[0]);
    e->last_seen = now;
    e->last_rank = rank;
    if (e->bit != via_bit)
      e->bit = HK_WIRE_NO_BIT; /* not every rank used the same bit */
    e->submitted++;
    if (q->coll == HK_COLL_JOIN && !n->joined[rank]) {
      n->joined[rank] = 1;
      n->njoined++;
      n->last_joined = rank;
      /* entries that waited only for this rank are complete now */
      sweep_args a = {n, malloc(hk_strmap_size(n->table) * sizeof(entry *)), 0};
      if (!a.done)
        return hk_fail(HK_ERR_NOMEM, "cannot sweep the table");
      hk_strmap_each(n->table, find_done, &a);
      hk_status st = HK_OK;
      for (uint32_t k = 0; k < a.ndone && st == HK_OK; k++)
        if (a.done[k] != e) { /* it waited for this rank, which joined */
          a.done[k]->last_seen = now;
          a.done[k]->last_rank = rank;
          st = complete(n, a.done[k]);
        }
      free(a.done);
      if (st != HK_OK)
        return st;
    }
    if (accounted(n, e) == n->size) {
      hk_status st = complete(n, e);
      if (st != HK_OK)
        return st;
    }
  }
  return HK_OK;
}

static const char *coll_name(unsigned c) {
  switch (c) {
  case HK_COLL_ALLREDUCE:
    return "allreduce";
  case HK_COLL_BROADCAST:
    return "broadcast";
  case HK_COLL_BARRIER:
    return "barrier";
  case HK_COLL_ALLGATHER:
    return "allgather";
  case HK_COLL_REDUCESCATTER:
    return "reducescatter";
  case HK_COLL_ALLTOALL:
    return "alltoall";
  case HK_COLL_JOIN:
    return "join";
  case HK_COLL_SET_ADD:
    return "process set add";
  case HK_COLL_SET_REMOVE:
    return "process set remove";
  }
  return "unknown";
}

/* A field of a slot rendered as text, for grouping ranks by value. */
typedef void (*field_fmt)(const slot *s, char *out, size_t cap);

static void fmt_coll(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%s", coll_name(s->coll));
}
static void fmt_mem(const slot *s, char *o, size_t c) {
  static const char *const kinds[] = {"host memory", "device memory",
                                      "sendbuf on the device, recvbuf on "
                                      "the host",
                                      "sendbuf on the host, recvbuf on the "
                                      "device",
                                      "a buffer on another GPU than hk's"};
  snprintf(o, c, "%s",
           s->mem <= HK_WIRE_MEM_OTHER_DEVICE ? kinds[s->mem]
                                              : "unknown memory");
}
static void fmt_dtype(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%s", hk_dtype_name((hk_dtype)s->dtype));
}
static void fmt_op(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%s", hk_op_name((hk_op)s->op));
}
static void fmt_root(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%d", (int)s->root);
}
static void fmt_count(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%llu", (unsigned long long)s->count);
}
static void fmt_row_elems(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%llu", (unsigned long long)s->row_elems);
}
/* "17x1311", "(none)" when no shape was given; from extent `from` on
 * (the first extent of an allgather or an alltoall, its rows, may differ
 * between ranks). */
static void fmt_extents(const slot *s, unsigned from, char *o, size_t c) {
  if (!s->ndims) {
    snprintf(o, c, "(none)");
    return;
  }
  o[0] = '\0';
  size_t at = 0;
  for (unsigned d = 0; d < s->ndims && at + 1 < c; d++) {
    int w = d < from ? snprintf(o + at, c - at, "%s*", d ? "x" : "")
                     : snprintf(o + at, c - at, "%s%lld", d ? "x" : "",
                                (long long)s->shape[d]);
    at += w > 0 ? (size_t)w : 0;
  }
}
static void fmt_shape(const slot *s, char *o, size_t c) {
  fmt_extents(s, 0, o, c);
}
static void fmt_row_shape(const slot *s, char *o, size_t c) {
  fmt_extents(s, 1, o, c);
}
static void fmt_group(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%u", (unsigned)s->group_size);
}
static void fmt_prescale(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%.17g", s->prescale);
}
static void fmt_postscale(const slot *s, char *o, size_t c) {
  snprintf(o, c, "%.17g", s->postscale);
}

/* Appends to a bounded buffer; marks truncation with "...". */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - len)
    memcpy(buf + cap - 4, "...", 4);
}

/* Appends the field's value on every rank that submitted the tensor,
 * ranks grouped by value in order of each value's first rank: " count 16
 * on ranks 0, 2, 3; count 12 on rank 1. " (Ranks that joined and did not
 * submit it have no say.) */
static void list_field(const hk_negotiator *n, const entry *e,
                       const char *label, field_fmt fmt, char *out,
                       size_t cap) {
  const int size = n->size;
  char v[192], w[192];
  int groups = 0;
  for (int r = 0; r < size; r++) {
    if (!e->slots[r].present)
      continue;
    fmt(&e->slots[r], v, sizeof v);
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) {
      if (!e->slots[q].present)
        continue;
      fmt(&e->slots[q], w, sizeof w);
      seen = strcmp(v, w) == 0;
    }
    if (seen)
      continue;
    int nranks = 0;
    for (int q = r; q < size; q++) {
      if (!e->slots[q].present)
        continue;
      fmt(&e->slots[q], w, sizeof w);
      nranks += strcmp(v, w) == 0;
    }
    append(out, cap, "%s %s %s on rank%s", groups++ ? ";" : "", label, v,
           nranks > 1 ? "s" : "");
    int k = 0;
    for (int q = r; q < size; q++) {
      if (!e->slots[q].present)
        continue;
      fmt(&e->slots[q], w, sizeof w);
      if (strcmp(v, w) == 0)
        append(out, cap, "%s %d", k++ ? "," : "", job_rank(n, q));
    }
  }
  append(out, cap, ". ");
}

/* If the field differs across the ranks that submitted the tensor,
 * describes it as "count differs: count 16 on ranks 0, 2, 3; count 12 on
 * rank 1. " and returns 1. */
static int describe_field(const hk_negotiator *n, const entry *e,
                          const char *label, field_fmt fmt, char *out,
                          size_t cap) {
  char first[192] = "", v[192];
  int have = 0, differs = 0;
  for (int r = 0; r < n->size && !differs; r++) {
    if (!e->slots[r].present)
      continue;
    fmt(&e->slots[r], v, sizeof v);
    if (!have) {
      memcpy(first, v, sizeof first);
      have = 1;
    }
    differs = strcmp(v, first) != 0;
  }
  if (!differs)
    return 0;
  append(out, cap, "%s differs:", label);
  list_field(n, e, label, fmt, out, cap);
  return 1;
}

/* Buffers of one rank in two kinds of memory: never valid, even when every
 * rank does it. */
static int describe_mixed(const hk_negotiator *n, const entry *e, char *out,
                          size_t cap) {
  int bad = 0;
  for (int r = 0; r < n->size; r++) {
    if (!e->slots[r].present ||
        e->slots[r].mem < HK_WIRE_MEM_SEND_DEVICE_RECV_HOST)
      continue;
    char v[64];
    fmt_mem(&e->slots[r], v, sizeof v);
    append(out, cap, "%srank %d has %s: %s. ", bad++ ? "" : "", job_rank(n, r),
           v,
           e->slots[r].mem == HK_WIRE_MEM_OTHER_DEVICE
               ? "hk's device tensors must be on the GPU hk uses (HK_GPU, "
                 "or the local rank modulo the visible count; that rank's "
                 "log names both)"
               : "a tensor's buffers must all be in host memory or all in "
                 "device memory");
    break; /* the first such rank is enough to name */
  }
  return bad;
}

/* 1 if two submissions agree on every field a collective compares (what
 * check_agreement would describe). Cheap: no text is made unless some
 * field differs. */
/* The collectives whose first extent (the rows a rank sends) may differ
 * between ranks. */
static int rows_may_differ(unsigned coll) {
  return coll == HK_COLL_ALLGATHER || coll == HK_COLL_ALLTOALL;
}

/* The most elements a collective's buffer may hold on any rank: what
 * hk_submit allows one rank (hk.h: a count over SIZE_MAX / 8 is refused),
 * so that every size in bytes, and every sum of them the execution makes,
 * fits in a size_t. */
#define MAX_ELEMS (SIZE_MAX / 8)

/* Fills the reason when the buffers the tensor needs on some rank would
 * hold more than MAX_ELEMS elements (an allgather's rows summed over the
 * ranks, every rank's rows of an alltoall, which bound what any rank
 * receives; one rank's rows x row size for the others): unchecked, the
 * size in bytes would wrap and the rows of the other ranks be written
 * past a small buffer. Leaves it empty if the sizes fit. */
static void check_sizes(const hk_negotiator *n, const entry *e, char *out,
                        size_t cap) {
  const unsigned c = e->first.coll;
  const int sum = rows_may_differ(c);
  uint64_t total = 0;
  int over = 0;
  out[0] = '\0';
  for (int r = 0; r < n->size && !over; r++) {
    const slot *s = &e->slots[r];
    if (!s->present)
      continue;
    const uint64_t row = s->row_elems ? s->row_elems : 1;
    if (s->count > MAX_ELEMS / row) {
      over = 1;
      break;
    }
    const uint64_t elems = s->count * row;
    total = sum ? total + elems : elems;
    over = total > MAX_ELEMS;
  }
  if (!over)
    return;
  char in_set[40];
  snprintf(out, cap,
           "tensor '%s'%s: %s needs more than %llu elements of %s%s (its "
           "size in bytes would overflow):",
           e->first.name, set_words(n, in_set, sizeof in_set), coll_name(c),
           (unsigned long long)MAX_ELEMS,
           hk_dtype_name((hk_dtype)e->first.dtype),
           sum ? ", the rows of every rank together" : "");
  list_field(n, e, sum || c == HK_COLL_REDUCESCATTER ? "rows" : "count",
             fmt_count, out, cap);
  if (e->first.row_elems > 1)
    append(out, cap, "Each row holds %llu elements.",
           (unsigned long long)e->first.row_elems);
  size_t len = strlen(out);
  if (len >= 1 && out[len - 1] == ' ')
    out[len - 1] = '\0';
}

static int same_shape(const slot *a, const slot *b) {
  unsigned from = (unsigned)rows_may_differ(a->coll);
  if (a->ndims != b->ndims)
    return 0;
  for (unsigned d = from; d < a->ndims; d++)
    if (a->shape[d] != b->shape[d])
      return 0;
  return 1;
}

static int same_slot(const slot *a, const slot *b) {
  return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
         same_shape(a, b) && a->mem == b->mem &&
         a->mem < HK_WIRE_MEM_SEND_DEVICE_RECV_HOST && a->root == b->root &&
         a->count == b->count && a->row_elems == b->row_elems &&
         a->group_size == b->group_size &&
         memcmp(&a->prescale, &b->prescale, sizeof a->prescale) == 0 &&
         memcmp(&a->postscale, &b->postscale, sizeof a->postscale) == 0;
}

/* 1 if every rank that submitted e did so with the same fields. */
static int all_agree(const hk_negotiator *n, const entry *e) {
  const slot *first = NULL;
  for (int r = 0; r < n->size; r++) {
    if (!e->slots[r].present)
      continue;
    if (!first)
      first = &e->slots[r];
    else if (!same_slot(first, &e->slots[r]))
      return 0;
  }
  return 1;
}

/* Fills the reason for a mismatch, or leaves it empty if all agree. What
 * must agree depends on the collective (hk.h). */
static void check_agreement(const hk_negotiator *n, const entry *e, char *out,
                            size_t cap) {
  const int size = n->size;
  const int root0 = e->first.root;
  if (all_agree(n, e) && (e->first.coll != HK_COLL_BROADCAST || root0 >= size ||
                          e->slots[root0].present)) {
    out[0] = '\0'; /* the common case: nothing to describe */
    return;
  }
  char in_set[40];
  snprintf(out, cap, "tensor '%s'%s: ranks disagree: ", e->first.name,
           set_words(n, in_set, sizeof in_set));
  int bad = describe_field(n, e, "collective", fmt_coll, out, cap);
  if (!bad) {
    unsigned c = e->first.coll;
    /* a barrier, a join and the process set calls move no data */
    const int data = c != HK_COLL_BARRIER && c != HK_COLL_JOIN &&
                     c != HK_COLL_SET_ADD && c != HK_COLL_SET_REMOVE;
    bad |= describe_field(n, e, "dtype", fmt_dtype, out, cap);
    if (data) {
      bad |= describe_field(n, e, "memory kind", fmt_mem, out, cap);
      bad |= describe_mixed(n, e, out, cap);
    }
    if (c == HK_COLL_ALLREDUCE || c == HK_COLL_BROADCAST ||
        c == HK_COLL_REDUCESCATTER || c == HK_COLL_SET_REMOVE)
      bad |= describe_field(n, e,
                            c == HK_COLL_REDUCESCATTER ? "rows"
                            : c == HK_COLL_SET_REMOVE  ? "process set"
                                                       : "count",
                            fmt_count, out, cap);
    if (c == HK_COLL_ALLGATHER || c == HK_COLL_REDUCESCATTER ||
        c == HK_COLL_ALLTOALL)
      bad |= describe_field(n, e, "row size", fmt_row_elems, out, cap);
    if (data)
      bad |= describe_field(n, e, "shape",
                            rows_may_differ(c) ? fmt_row_shape : fmt_shape, out,
                            cap);
    if (c == HK_COLL_ALLREDUCE || c == HK_COLL_REDUCESCATTER)
      bad |= describe_field(n, e, "op", fmt_op, out, cap);
    if (c == HK_COLL_ALLREDUCE) {
      bad |= describe_field(n, e, "prescale", fmt_prescale, out, cap);
      bad |= describe_field(n, e, "postscale", fmt_postscale, out, cap);
      bad |= describe_field(n, e, "group size", fmt_group, out, cap);
    }
    if (c == HK_COLL_BROADCAST) {
      bad |= describe_field(n, e, "root", fmt_root, out, cap);
      int root = e->first.root;
      if (!bad && root < size && !e->slots[root].present) {
        snprintf(out, cap,
                 "tensor '%s'%s: the broadcast's root, rank %d, has joined "
                 "(hk_join) and has no data to send",
                 e->first.name, in_set, job_rank(n, root));
        return;
      }
    }
  }
  if (!bad) {
    out[0] = '\0';
    return;
  }
  size_t len = strlen(out);
  if (len >= 2 && out[len - 2] == '.' && out[len - 1] == ' ')
    out[len - 1] = '\0'; /* drop the trailing space */
}

void hk_negotiator_keep_requests(hk_negotiator *n, int on) {
  n->keep_requests = on;
}

void hk_negotiator_set_lateness(hk_negotiator *n, hk_lateness *L) {
  n->lateness = L;
}

/* Tells the lateness accounting when each rank submitted e. */
static void note_lateness(const hk_negotiator *n, const entry *e) {
  for (int r = 0; r < n->size; r++)
    if (e->slots[r].present)
      hk_lateness_arrival(n->lateness, r, e->slots[r].seen - e->first_seen);
}

hk_status hk_negotiator_take_ready(hk_negotiator *n, hk_wire_response **out,
                                   uint32_t *count) {
  *out = NULL;
  *count = 0;
  if (n->nready == 0)
    return HK_OK;
  /* not calloc: hk_wire_response_clear says why */
  hk_wire_response *r = malloc(n->nready * sizeof *r);
  if (!r)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate %u responses", n->nready);
  uint32_t i = 0;
  char reason[HK_WIRE_MAX_REASON_LEN + 1];
  for (entry *e = n->ready_head, *next; e; e = next, i++) {
    next = e->next;
    if (n->lateness)
      note_lateness(n, e);
    hk_wire_response_clear(&r[i]);
    memcpy(r[i].name, e->first.name, strlen(e->first.name) + 1);
    r[i].first_seen = e->first_seen;
    r[i].last_seen = e->last_seen;
    r[i].last_rank = job_rank(n, e->last_rank);
    r[i].coll = e->first.coll;
    if (e->first.coll == HK_COLL_ALLREDUCE)
      r[i].bytes = e->first.count * hk_dtype_size((hk_dtype)e->first.dtype);
    r[i].divisor = e->first.coll == HK_COLL_JOIN ? e->first.root : e->submitted;
    if (e->submitted < n->size) { /* joined ranks run it from the response */
      r[i].params = malloc(sizeof *r[i].params);
      if (!r[i].params) {
        hk_negotiator_free_responses(r, i + 1);
        return hk_fail(HK_ERR_NOMEM, "cannot allocate a response");
      }
      r[i].flags |= HK_RESP_PARAMS;
      hk_wire_request_copy(r[i].params, &e->first);
    }
    check_agreement(n, e, reason, sizeof reason);
    hk_status why = HK_ERR_MISMATCH;
    if (!reason[0]) { /* they agree: on a size no rank can hold? */
      check_sizes(n, e, reason, sizeof reason);
      why = HK_ERR_INVALID_ARG;
    }
    if (!reason[0] && e->first.coll == HK_COLL_ALLGATHER) {
      r[i].counts = malloc((size_t)n->size * sizeof(uint64_t));
      if (!r[i].counts) {
        hk_negotiator_free_responses(r, i + 1);
        return hk_fail(HK_ERR_NOMEM, "cannot allocate row counts");
      }
      r[i].ncounts = (uint32_t)n->size;
      for (int k = 0; k < n->size; k++)
        r[i].counts[k] = e->slots[k].present ? e->slots[k].count : 0;
    }
    if (!reason[0] && e->bit != HK_WIRE_NO_BIT &&
        !(r[i].flags & HK_RESP_PARAMS)) {
      r[i].flags = HK_RESP_CACHED;
      r[i].cache_bit = e->bit;
      r[i].name[0] = '\0';
    }
    if (!reason[0] && n->keep_requests) {
      r[i].agreed = malloc(sizeof *r[i].agreed);
      if (!r[i].agreed) {
        hk_negotiator_free_responses(r, i + 1);
        return hk_fail(HK_ERR_NOMEM, "cannot keep a request");
      }
      hk_wire_request_copy(r[i].agreed, &e->first);
    }
    if (reason[0]) {
      r[i].status = why;
      r[i].reason = strdup(reason);
      if (!r[i].reason) {
        hk_negotiator_free_responses(r, i);
        return hk_fail(HK_ERR_NOMEM, "cannot allocate a mismatch reason");
      }
    }
    e->next = n->spare;
    n->spare = e;
  }
  *out = r;
  *count = n->nready;
  n->ready_head = n->ready_tail = NULL;
  n->nready = 0;
  return HK_OK;
}

void hk_negotiator_free_responses(hk_wire_response *r, uint32_t count) {
  for (uint32_t i = 0; i < count && r; i++) {
    free(r[i].reason);
    free(r[i].counts);
    free(r[i].params);
    free(r[i].agreed);
  }
  free(r);
}

typedef struct stall_args {
  const hk_negotiator *n;
  double now, min_age, oldest;
  char *out;
  size_t cap;
  uint32_t count;
} stall_args;

/* Appends "rank 2" / "ranks 0, 1, 3" for the ranks whose presence is
 * `present`. */
static void append_ranks(char *out, size_t cap, const hk_negotiator *n,
                         const entry *e, int present) {
  const int size = n->size;
  int k = 0, total = 0;
  for (int r = 0; r < size; r++)
    total += e->slots[r].present == present;
  append(out, cap, "rank%s", total > 1 ? "s" : "");
  for (int r = 0; r < size; r++)
    if (e->slots[r].present == present)
      append(out, cap, "%s %d", k++ ? "," : "", job_rank(n, r));
}

static void stall_one(const char *key, void *value, void *arg) {
  (void)key;
  stall_args *a = arg;
  const entry *e = value;
  double age = a->now - e->first_seen;
  if (age > a->oldest)
    a->oldest = age;
  if (age < a->min_age)
    return;
  char in_set[40];
  append(a->out, a->cap, "%stensor '%s'%s (waiting %.0f s): missing on ",
         a->count++ ? "; " : "", e->first.name,
         set_words(a->n, in_set, sizeof in_set), age);
  append_ranks(a->out, a->cap, a->n, e, 0);
  append(a->out, a->cap, ", submitted by ");
  append_ranks(a->out, a->cap, a->n, e, 1);
}

uint32_t hk_negotiator_stalled(const hk_negotiator *n, double now,
                               double min_age_s, char *out, size_t cap,
                               double *oldest_s) {
  stall_args a = {n, now, min_age_s, 0, out, cap, 0};
  if (cap)
    out[0] = '\0';
  hk_strmap_each(n->table, stall_one, &a);
  *oldest_s = a.oldest;
  return a.count;
}
