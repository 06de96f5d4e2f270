/*
 * diagnose.c - `hkrun --diagnose DIR` (diagnose.h).
 */
#include "launcher/diagnose.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/flight_record.h"
#include "common/status.h"
#include "common/strmap.h"

/* At most this many tensors are named per list in the report. */
#define MAX_NAMED 8

/* The records of one folder. */
typedef struct records {
  hk_flight_file *f;
  size_t n, cap;
} records;

static void records_free(records *rs) {
  for (size_t i = 0; i < rs->n; i++)
    hk_flight_file_free(&rs->f[i]);
  free(rs->f);
}

/* 1 if name is a record's (hk-flight.*.txt; temporaries start with '.'). */
static int is_record(const char *name) {
  size_t len = strlen(name);
  return !strncmp(name, "hk-flight.", 10) && len > 14 &&
         !strcmp(name + len - 4, ".txt");
}

/* Names as this report prints them: a control byte (a tab, a newline, a
 * terminal escape: the record keeps them escaped, the reader gives them
 * back) becomes '?', so that a tensor's name (or an error naming one)
 * cannot forge lines of the report or drive the terminal. */
static void printable_name(char *name) {
  for (unsigned char *c = (unsigned char *)name; *c; c++)
    if (*c < 0x20 || *c == 0x7f)
      *c = '?';
}

static void printable_names(hk_flight_file *f) {
  printable_name(f->h.host);
  printable_name(f->h.reason);
  for (size_t i = 0; i < f->nentries; i++)
    printable_name(f->entries[i].name);
  for (size_t i = 0; i < f->npending; i++)
    printable_name(f->pending[i].name);
}

/* Reads every record in dir. 0, or 1 after saying why on err. */
static int load(const char *dir, records *rs, FILE *err) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(err, "hkrun --diagnose: cannot open '%s': %s\n", dir,
            strerror(errno));
    return 1;
  }
  struct dirent *de;
  int bad = 0;
  while (!bad && (de = readdir(d))) {
    if (!is_record(de->d_name))
      continue;
    if (rs->n == rs->cap) {
      size_t c = rs->cap ? 2 * rs->cap : 16;
      hk_flight_file *p = realloc(rs->f, c * sizeof *p);
      if (!p) {
        fprintf(err, "hkrun --diagnose: out of memory\n");
        bad = 1;
        break;
      }
      rs->f = p;
      rs->cap = c;
    }
    char path[4608];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (hk_flight_read(path, &rs->f[rs->n]) != HK_OK) {
      fprintf(err, "hkrun --diagnose: %s\n", hk_last_error());
      bad = 1;
    } else {
      printable_names(&rs->f[rs->n]);
      rs->n++;
    }
  }
  closedir(d);
  if (!bad && rs->n == 0) {
    fprintf(err,
            "hkrun --diagnose: no flight records (hk-flight.JOB.RANK.txt) in "
            "'%s'\n",
            dir);
    bad = 1;
  }
  return bad;
}

/* "rank 3", "ranks 0-2, 5" or "no rank": the ranks r < size with
 * sel[r] == want, into out[cap]. */
static const char *fmt_ranks(const uint8_t *sel, int size, int want, char *out,
                             size_t cap) {
  int count = 0;
  for (int r = 0; r < size; r++)
    count += sel[r] == want;
  size_t o = (size_t)snprintf(out, cap, "%s",
                              count == 0   ? "no rank"
                              : count == 1 ? "rank "
                                           : "ranks ");
  for (int r = 0, first = 1; r < size && o < cap; r++) {
    if (sel[r] != want)
      continue;
    int e = r;
    while (e + 1 < size && sel[e + 1] == want)
      e++;
    o += (size_t)snprintf(out + o, cap - o,
                          e > r + 1    ? "%s%d-%d"
                          : e == r + 1 ? "%s%d, %d"
                                       : "%s%d",
                          first ? "" : ", ", r, e);
    first = 0;
    r = e;
  }
  return out;
}

/* One tensor name seen on some ranks: which, and when first submitted. */
typedef struct seen {
  const hk_flight_entry *e; /* a description of it */
  int64_t first_us;         /* earliest submit, CLOCK_REALTIME; 0 unknown */
  uint8_t *on;              /* on[r]: 1 where it is pending / in the round */
} seen;

typedef struct seen_set {
  hk_strmap *index; /* name -> 1 + position in v */
  seen *v;
  size_t n, cap;
  int size;
} seen_set;

static void seen_free(seen_set *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i].on);
  free(s->v);
  hk_strmap_destroy(s->index);
}

/* Notes that rank r has e (pending, or in a round). -1 out of memory. */
static int seen_add(seen_set *s, int r, const hk_flight_entry *e,
                    uint8_t mark) {
  uintptr_t at = (uintptr_t)hk_strmap_get(s->index, e->name);
  if (!at) {
    if (s->n == s->cap) {
      size_t c = s->cap ? 2 * s->cap : 16;
      seen *p = realloc(s->v, c * sizeof *p);
      if (!p)
        return -1;
      s->v = p;
      s->cap = c;
    }
    seen *n = &s->v[s->n];
    n->e = e;
    n->first_us = 0;
    n->on = calloc((size_t)s->size, 1);
    if (!n->on || hk_strmap_put(s->index, e->name,
                                (void *)(uintptr_t)(s->n + 1)) != HK_OK) {
      free(n->on);
      return -1;
    }
    at = ++s->n;
  }
  seen *v = &s->v[at - 1];
  int64_t t = e->real_us[HK_FLIGHT_T_SUBMIT];
  if (t && (!v->first_us || t < v->first_us))
    v->first_us = t;
  if (mark > v->on[r])
    v->on[r] = mark;
  return 0;
}

static int by_first_submit(const void *a, const void *b) {
  const seen *x = a, *y = b;
  int64_t tx = x->first_us ? x->first_us : INT64_MAX;
  int64_t ty = y->first_us ? y->first_us : INT64_MAX;
  return tx < ty ? -1 : tx > ty ? 1 : strcmp(x->e->name, y->e->name);
}

/* The per-rank view the analysis needs. */
typedef struct job_view {
  const hk_flight_file **at; /* at[r]: rank r's record, NULL when missing */
  uint8_t *present;          /* present[r] = at[r] != NULL */
  int size;
} job_view;

/* The tensors rank r was waiting for, as "'a' (submitted), 'b' (process
 * set 2, negotiated)" into out. */
static void pending_names(const hk_flight_file *f, char *out, size_t cap) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < f->npending && i < MAX_NAMED && o < cap; i++) {
    char set[32] = "";
    if (f->pending[i].set)
      snprintf(set, sizeof set, "process set %d, ", (int)f->pending[i].set);
    o += (size_t)snprintf(out + o, cap - o, "%s'%s' (%s%s)", i ? ", " : "",
                          f->pending[i].name, set,
                          hk_flight_state_name(f->pending[i].state));
  }
  uint64_t more = f->h.pending_left_out +
                  (f->npending > MAX_NAMED ? f->npending - MAX_NAMED : 0);
  if (more && o < cap)
    snprintf(out + o, cap - o, " and %" PRIu64 " more", more);
}

/* Some ranks ran round R, others never reached it. */
static void report_round_gap(const job_view *j, uint64_t lo, FILE *out) {
  const uint64_t R = lo + 1;
  uint8_t *reached = calloc((size_t)j->size, 1);
  char a[512], b[512], names[1024] = "";
  if (!reached)
    return;
  size_t o = 0, named = 0;
  for (int r = 0; r < j->size; r++) {
    if (!j->at[r])
      continue;
    reached[r] = j->at[r]->h.rounds >= R ? 1 : 2;
    for (size_t i = 0; reached[r] == 1 && i < j->at[r]->nentries; i++) {
      const hk_flight_entry *e = &j->at[r]->entries[i];
      char quoted[HK_FLIGHT_NAME_LEN + 3];
      snprintf(quoted, sizeof quoted, "'%s'", e->name);
      if (e->set != 0 || e->round != R || named >= MAX_NAMED ||
          o >= sizeof names || strstr(names, quoted))
        continue;
      o += (size_t)snprintf(names + o, sizeof names - o, "%s%s",
                            named ? ", " : "", quoted);
      named++;
    }
  }
  fprintf(out,
          "first divergence: round %" PRIu64 " (%s): run by %s; never "
          "reached by %s (they stopped after round %" PRIu64 ")\n",
          R, named ? names : "its tensors are no longer in the records",
          fmt_ranks(reached, j->size, 1, a, sizeof a),
          fmt_ranks(reached, j->size, 2, b, sizeof b), lo);
  for (int r = 0; r < j->size; r++)
    if (reached[r] == 2 && j->at[r]->npending) {
      pending_names(j->at[r], names, sizeof names);
      fprintf(out, "  rank %d was waiting for %s\n", r, names);
    }
  free(reached);
}

/* The tensors of process sets pending on a rank: a set's members are not
 * in the records, so they are listed, not compared. Returns how many. */
static size_t report_set_pending(const job_view *j, FILE *out) {
  size_t n = 0;
  for (int r = 0; r < j->size; r++)
    for (size_t i = 0; j->at[r] && i < j->at[r]->npending; i++) {
      const hk_flight_entry *e = &j->at[r]->pending[i];
      if (e->set == 0)
        continue;
      if (n++ < MAX_NAMED)
        fprintf(out, "pending in process set %d on rank %d: '%s' (%s, %s)\n",
                (int)e->set, r, e->name, hk_flight_kind_name(e->kind),
                hk_flight_state_name(e->state));
    }
  if (n > MAX_NAMED)
    fprintf(out, "... and %zu more pending in process sets\n", n - MAX_NAMED);
  return n;
}

/* Every rank stopped after the same round of the world: the world's
 * tensors pending on some ranks only (those of process sets: listed by
 * report_set_pending). Returns 1 if there was a divergence. -1 out of
 * memory. */
static int report_pending(const job_view *j, uint64_t last, FILE *out) {
  seen_set s = {.size = j->size};
  if (hk_strmap_create(&s.index) != HK_OK)
    return -1;
  int rc = 0;
  for (int r = 0; r < j->size && rc == 0; r++)
    for (size_t i = 0; j->at[r] && i < j->at[r]->npending && rc == 0; i++)
      if (j->at[r]->pending[i].state == HK_FLIGHT_SUBMITTED &&
          j->at[r]->pending[i].set == 0)
        rc = seen_add(&s, r, &j->at[r]->pending[i], 1);
  if (rc) {
    seen_free(&s);
    return -1;
  }
  if (s.n > 1) /* s.v is NULL while nothing is pending */
    qsort(s.v, s.n, sizeof *s.v, by_first_submit);
  size_t diverged = 0, everywhere = 0;
  const char *first_all = NULL;
  char a[512], b[512];
  for (size_t i = 0; i < s.n; i++) {
    int all = 1; /* a rank whose record left some out may hold it unlisted */
    for (int r = 0; r < j->size; r++)
      all &= !j->present[r] || s.v[i].on[r] || j->at[r]->h.pending_left_out;
    if (all) {
      first_all = first_all ? first_all : s.v[i].e->name;
      everywhere++;
      continue;
    }
    for (int r = 0; r < j->size; r++)
      if (!j->present[r])
        s.v[i].on[r] = 2; /* unknown: neither list */
    const hk_flight_entry *e = s.v[i].e;
    if (diverged == 0)
      fprintf(out,
              "first divergence: tensor '%s' (%s, %s, %" PRIu64
              " bytes), after round %" PRIu64
              " (the last round every rank ran): submitted by %s; never "
              "submitted by %s\n",
              e->name, hk_flight_kind_name(e->kind),
              hk_dtype_name((hk_dtype)e->dtype), e->bytes, last,
              fmt_ranks(s.v[i].on, j->size, 1, a, sizeof a),
              fmt_ranks(s.v[i].on, j->size, 0, b, sizeof b));
    else if (diverged <= MAX_NAMED)
      fprintf(out,
              "also pending on some ranks only: '%s': submitted by %s; "
              "not by %s\n",
              e->name, fmt_ranks(s.v[i].on, j->size, 1, a, sizeof a),
              fmt_ranks(s.v[i].on, j->size, 0, b, sizeof b));
    diverged++;
  }
  if (diverged > MAX_NAMED + 1)
    fprintf(out, "... and %zu more tensors pending on some ranks only\n",
            diverged - MAX_NAMED - 1);
  if (everywhere)
    fprintf(out,
            "pending on every rank present (submitted, not yet negotiated): "
            "%zu tensor(s), the first '%s'\n",
            everywhere, first_all);
  seen_free(&s);
  return diverged > 0;
}

/* The collectives of round `last` that did not finish on every rank (a
 * hang or failure inside a collective). Returns how many. */
static int report_unfinished(const job_view *j, uint64_t last, FILE *out) {
  int found = 0;
  char a[512], b[512];
  uint8_t *st = malloc((size_t)j->size);
  if (!st || last == 0) {
    free(st);
    return 0;
  }
  for (int r0 = 0; r0 < j->size; r0++) {
    for (size_t i = 0; j->at[r0] && i < j->at[r0]->nentries; i++) {
      const hk_flight_entry *e = &j->at[r0]->entries[i];
      if (e->set != 0 || e->round != last || e->state == HK_FLIGHT_DONE)
        continue;
      /* first rank (r0) where it is unfinished: report it once */
      int earlier = 0;
      memset(st, HK_FLIGHT_NSTATES, (size_t)j->size);
      for (int r = 0; r < j->size; r++)
        for (size_t k = 0; j->at[r] && k < j->at[r]->nentries; k++) {
          const hk_flight_entry *x = &j->at[r]->entries[k];
          if (x->set == 0 && x->round == last && !strcmp(x->name, e->name)) {
            st[r] = x->state;
            earlier |= r < r0 && x->state != HK_FLIGHT_DONE;
          }
        }
      if (earlier)
        continue;
      fprintf(out, "round %" PRIu64 ": '%s' (%s) is %s on %s; done on %s\n",
              last, e->name, hk_flight_kind_name(e->kind),
              hk_flight_state_name(e->state),
              fmt_ranks(st, j->size, e->state, a, sizeof a),
              fmt_ranks(st, j->size, HK_FLIGHT_DONE, b, sizeof b));
      found++;
    }
  }
  free(st);
  return found;
}

/* The records of the chosen job; 0, or 1 after an error on err. */
static int analyse(const records *rs, const char *job, const char *dir,
                   FILE *out, FILE *err) {
  int size = 0;
  const hk_flight_file *first = NULL;
  for (size_t i = 0; i < rs->n; i++) {
    const hk_flight_file *f = &rs->f[i];
    if (strcmp(f->h.job, job))
      continue;
    if (!first) {
      first = f;
      size = f->h.size;
    } else if (f->h.size != size) {
      fprintf(err,
              "hkrun --diagnose: the records of job %s disagree on the world "
              "size: rank %d says %d, rank %d says %d\n",
              job, first->h.rank, size, f->h.rank, f->h.size);
      return 1;
    }
    if (f->h.rank >= f->h.size) {
      fprintf(err,
              "hkrun --diagnose: the record of rank %d of job %s gives a "
              "world size of %d\n",
              f->h.rank, job, f->h.size);
      return 1;
    }
  }
  job_view j = {calloc((size_t)size, sizeof *j.at), calloc((size_t)size, 1),
                size};
  if (!j.at || !j.present) {
    free(j.at);
    free(j.present);
    fprintf(err, "hkrun --diagnose: out of memory\n");
    return 1;
  }
  int present = 0;
  for (size_t i = 0; i < rs->n; i++)
    if (!strcmp(rs->f[i].h.job, job)) {
      j.at[rs->f[i].h.rank] = &rs->f[i];
      j.present[rs->f[i].h.rank] = 1;
      present++;
    }
  char list[512];
  fprintf(out,
          "flight records of job %s in %s: world size %d, %d of %d ranks "
          "present\n",
          job, dir, size, present, size);
  if (present < size)
    fprintf(out, "missing: %s (no hk-flight.%s.RANK.txt)\n",
            fmt_ranks(j.present, size, 0, list, sizeof list), job);
  else
    fprintf(out, "missing: none\n");
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int r = 0; r < size; r++) {
    const hk_flight_file *f = j.at[r];
    if (!f)
      continue;
    lo = f->h.rounds < lo ? f->h.rounds : lo;
    hi = f->h.rounds > hi ? f->h.rounds : hi;
    char listed[48] = ""; /* a record lists as many as its ring holds */
    if (f->h.pending_left_out)
      snprintf(listed, sizeof listed, " (%zu listed)", f->npending);
    fprintf(out,
            "rank %d: %s pid %ld, %" PRIu64 " rounds, %" PRIu64
            " collectives recorded (%zu kept), %" PRIu64
            " in flight%s; written on: %s\n",
            r, f->h.host, f->h.pid, f->h.rounds, f->h.recorded, f->nentries,
            (uint64_t)f->npending + f->h.pending_left_out, listed, f->h.reason);
  }
  int found = 0;
  if (lo != hi) {
    report_round_gap(&j, lo, out);
    found = 1;
  } else {
    int p = report_pending(&j, lo, out);
    if (p < 0) {
      fprintf(err, "hkrun --diagnose: out of memory\n");
      free(j.at);
      free(j.present);
      return 1;
    }
    found = p;
    found |= report_unfinished(&j, lo, out) > 0;
  }
  found |= report_set_pending(&j, out) > 0;
  if (!found)
    fprintf(out,
            "no divergence: every rank present ran rounds up to %" PRIu64
            " and no tensor is pending on some ranks only\n",
            lo);
  free(j.at);
  free(j.present);
  return 0;
}

int hkrun_diagnose(const char *dir, FILE *out, FILE *err) {
  records rs = {0};
  if (load(dir, &rs, err)) {
    records_free(&rs);
    return 1;
  }
  size_t newest = 0;
  for (size_t i = 1; i < rs.n; i++)
    if (rs.f[i].h.written_us > rs.f[newest].h.written_us)
      newest = i;
  char job[17];
  memcpy(job, rs.f[newest].h.job, sizeof job);
  size_t others = 0;
  for (size_t i = 0; i < rs.n; i++) {
    int dup = 0;
    for (size_t k = 0; k < i; k++)
      dup |= !strcmp(rs.f[k].h.job, rs.f[i].h.job);
    if (!dup && strcmp(rs.f[i].h.job, job)) {
      fprintf(out, "%s job %s (older records, ignored)",
              others ? "," : "note:", rs.f[i].h.job);
      others++;
    }
  }
  if (others)
    fprintf(out, "\n");
  int rc = analyse(&rs, job, dir, out, err);
  records_free(&rs);
  return rc;
}
