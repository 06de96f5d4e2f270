/*
 * test_emu_comm.c - the emu backend's communicator (device/emu/comm.c)
 * between forked processes, np 1 to 4: allreduce of every dtype x op (sum,
 * min, max, product) at counts {0, 1, np+1, two chunks + 3}, in place too,
 * against a serial computation in rank order (emu.h: v = x[0], then
 * v = hk_reduce(v, x[r])), bit for bit; reducescatter, allgather and
 * broadcast from every root; a mismatch named on every rank; every fault
 * kind (error, hang, delay); abort ending a blocked peer's operation; init
 * pending until every rank has come; nothing left in /dev/shm after init,
 * after an abort during init, and after a rank is SIGKILLed.
 *
 * Every rank is a child process; the parent (which starts no threads)
 * makes the unique id, forks, talks to the children through pipes and
 * waits for them. Children report failures on stderr and exit non-zero
 * (cmocka's asserts are for the parent only). Nothing synchronises by
 * sleeping: pipes, stream callbacks and hk_emu_comm_wait_arrived do.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/status.h"
#include "device/device.h"
#include "device/emu/emu.h"
#include "device/host/reduce.h"

#define MAX_NP 4

/* Under ThreadSanitizer (10x slower, and here to find races, not wrong
 * sums) the multi-chunk counts run for two dtypes only; the normal and
 * ASan builds run the whole matrix. */
#if defined(__SANITIZE_THREAD__)
#define LIGHT 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LIGHT 1
#endif
#endif
#ifndef LIGHT
#define LIGHT 0
#endif

/* ---- the job: pipes and children ---- */

typedef struct job {
  int np;
  uint8_t id[HK_DEV_UID_BYTES];
  char shm[64];        /* the segment's name */
  int down[MAX_NP][2]; /* parent -> rank r */
  int up[2];           /* ranks -> parent */
  pid_t pid[MAX_NP];
  hk_dev_fault fault;  /* given to every rank (it names its rank) */
  int np_seen[MAX_NP]; /* nranks each rank passes to comm_init */
} job;

typedef void (*rank_fn)(job *j, int rank);

static int g_rank = -1;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed (last error: %s)\n",   \
              g_rank, __FILE__, __LINE__, #cond, hk_last_error());             \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

#define CHECK_OK(expr) CHECK((expr) == HK_OK)

static void put_byte(int fd, char c) {
  while (write(fd, &c, 1) != 1)
    if (errno != EINTR)
      abort();
}

static char get_byte(int fd) {
  char c = 0;
  ssize_t n;
  while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
    ;
  return n == 1 ? c : 0;
}

static void job_init(job *j, int np) {
  memset(j, 0, sizeof *j);
  j->np = np;
  for (int r = 0; r < MAX_NP; r++)
    j->np_seen[r] = np;
  hk_device *dev;
  assert_int_equal(hk_device_open("emu", NULL, &dev), HK_OK);
  assert_int_equal(dev->ops->comm_unique_id(dev, j->id), HK_OK);
  hk_device_close(dev); /* starts no thread: the parent stays single */
  assert_int_equal(hk_emu_comm_shm_name(j->id, j->shm, sizeof j->shm), HK_OK);
  assert_int_equal(strncmp(j->shm, "/hk-emu-", 8), 0);
  assert_int_equal(pipe(j->up), 0);
  for (int r = 0; r < np; r++)
    assert_int_equal(pipe(j->down[r]), 0);
}

static int shm_present(const job *j) {
  char path[96];
  snprintf(path, sizeof path, "/dev/shm%s", j->shm);
  return access(path, F_OK) == 0;
}

static void job_start(job *j, rank_fn fn) {
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < j->np; r++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      g_rank = r;
      alarm(400); /* a hang fails the test instead of stalling it */
      fn(j, r);
      exit(0); /* not _exit: LeakSanitizer checks the child too */
    }
    j->pid[r] = pid;
  }
  /* only the ranks write up: a rank that dies before it speaks then ends
   * the parent's read (EOF, byte 0: the test fails) instead of hanging */
  close(j->up[1]);
  j->up[1] = -1;
}

/* Waits for every child still running; each must have exited 0. */
static void job_finish(job *j) {
  int bad = 0;
  for (int r = 0; r < j->np; r++) {
    if (!j->pid[r])
      continue;
    int status = 0;
    assert_int_equal(waitpid(j->pid[r], &status, 0), j->pid[r]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d: %s %d\n", r,
              WIFSIGNALED(status) ? "killed by signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      bad = 1;
    }
    j->pid[r] = 0;
  }
  close(j->up[0]);
  for (int r = 0; r < j->np; r++) {
    close(j->down[r][0]);
    close(j->down[r][1]);
  }
  assert_false(bad);
  assert_false(shm_present(j));
}

/* A job test: fn on np ranks (0: on 1, then 2, ... MAX_NP ranks), each
 * given fault (zero: none). */
typedef struct job_case {
  int np;
  hk_dev_fault fault;
  rank_fn fn;
} job_case;

/* *state points to the case. */
static void test_job(void **state) {
  const job_case *c = *state;
  int from = c->np ? c->np : 1, to = c->np ? c->np : MAX_NP;
  for (int np = from; np <= to; np++) {
    job j;
    job_init(&j, np);
    j.fault = c->fault;
    job_start(&j, c->fn);
    job_finish(&j);
  }
}

/* Starts fn on j (made by job_init), waits for the byte `from` from a
 * rank, answers `reply` to rank `to`, and waits for the job to end. */
static void job_relay(job *j, rank_fn fn, char from, int to, char reply) {
  job_start(j, fn);
  assert_int_equal(get_byte(j->up[0]), from);
  put_byte(j->down[to][1], reply);
  job_finish(j);
}

/* ---- child side ---- */

/* One rank's device, communicator and stream; rank_close also frees what
 * rank_alloc and rank_event made (at most MADE_MAX of each). */
enum { MADE_MAX = 2 };
typedef struct rank_ctx {
  hk_device *dev;
  const hk_device_ops *ops;
  hk_dev_comm c;
  hk_dev_stream s;
  void *mem[MADE_MAX];
  hk_dev_event events[MADE_MAX];
  int n_mem, n_events;
} rank_ctx;

static rank_ctx rank_open(job *j, int rank) {
  rank_ctx x = {0};
  hk_device_options o;
  memset(&o, 0, sizeof o);
  o.job_rank = rank;
  o.fault = j->fault;
  CHECK_OK(hk_device_open("emu", &o, &x.dev));
  x.ops = x.dev->ops;
  CHECK_OK(x.ops->comm_init(x.dev, j->id, j->np_seen[rank], rank, &x.c));
  CHECK_OK(x.ops->stream_create(x.dev, &x.s));
  return x;
}

/* How rank_close ends the communicator. */
enum { COMM_DESTROY, COMM_ABORT, COMM_ABORTED /* already: nothing */ };

/* Destroys the events and frees the memory rank_event and rank_alloc
 * made, ends the communicator (how), destroys the stream, asserts that
 * the rank freed all its device memory and closes the device. */
static void rank_close(rank_ctx *x, int how) {
  for (int i = 0; i < x->n_events; i++)
    x->ops->event_destroy(x->dev, x->events[i]);
  for (int i = 0; i < x->n_mem; i++)
    x->ops->mem_free(x->dev, x->mem[i]);
  if (how == COMM_ABORT)
    x->ops->comm_abort(x->c);
  else if (how == COMM_DESTROY)
    x->ops->comm_destroy(x->c);
  x->ops->stream_destroy(x->dev, x->s);
  CHECK(hk_emu_live_allocations() == 0);
  hk_device_close(x->dev);
}

typedef struct flag {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int set;
} flag;

static void flag_set(void *arg) {
  flag *f = arg;
  pthread_mutex_lock(&f->mu);
  f->set = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Waits until s has run what is queued on it. */
static void sync_stream(rank_ctx *x, hk_dev_stream s) {
  flag f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  CHECK_OK(hk_emu_stream_host_fn(x->dev, s, flag_set, &f));
  pthread_mutex_lock(&f.mu);
  while (!f.set)
    pthread_cond_wait(&f.cv, &f.mu);
  pthread_mutex_unlock(&f.mu);
}

/* The async error's message, "" if none. */
static const char *async_msg(rank_ctx *x, int *pending) {
  hk_clear_error();
  if (x->ops->comm_async_error(x->c, pending) == HK_OK)
    return "";
  return hk_last_error();
}

/* Checks that there is no async error and that the communicator's init
 * is pending (want_pending 1) or complete (0); the flag starts at
 * !want_pending, so a call that leaves it alone fails. */
static void check_no_async_error(rank_ctx *x, int want_pending) {
  int pending = !want_pending;
  CHECK(strcmp(async_msg(x, &pending), "") == 0);
  CHECK(pending == want_pending);
}

/* Frees one round's device buffers (dsend, drecv) and host ones. */
static void free_round(rank_ctx *x, char *dsend, char *drecv, char *in,
                       char *ref, char *out) {
  x->ops->mem_free(x->dev, dsend);
  x->ops->mem_free(x->dev, drecv);
  free(in);
  free(ref);
  free(out);
}

/* Device memory and an event, freed by rank_close. */
static void *rank_alloc(rank_ctx *x, size_t bytes) {
  void *d = NULL;
  CHECK(x->n_mem < MADE_MAX);
  CHECK_OK(x->ops->mem_alloc(x->dev, bytes, &d));
  return x->mem[x->n_mem++] = d;
}

static hk_dev_event rank_event(rank_ctx *x) {
  hk_dev_event e = NULL;
  CHECK(x->n_events < MADE_MAX);
  CHECK_OK(x->ops->event_create_timed(x->dev, &e)); /* event_elapsed's */
  return x->events[x->n_events++] = e;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  CHECK(p);
  return p;
}

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Rank r's input: ordinary values with some specials (signed zeros,
 * infinities, NaNs) and, for 16-bit types, any bits. */
static void gen(void *p, size_t count, hk_dtype t, int r, int salt) {
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix(((uint64_t)r << 56) ^ ((uint64_t)t << 48) ^
                     ((uint64_t)salt << 40) ^ i);
    int special = h % 61 == 0;
    switch (t) {
    case HK_FLOAT32: {
      static const float sp[] = {0.0f, -0.0f, 1.0f / 0.0f, -1.0f / 0.0f};
      float v = (float)((int64_t)(h >> 32) % 4001 - 2000) / 256.0f;
      if (special) {
        uint32_t nan = 0x7fc00000u | (uint32_t)(h >> 40);
        if ((h >> 8) % 5 == 4)
          memcpy(&v, &nan, 4);
        else
          v = sp[(h >> 8) % 4];
      }
      ((float *)p)[i] = v;
      break;
    }
    case HK_FLOAT64: {
      double v = (double)((int64_t)(h >> 20) % 2000001 - 1000000) / 1024.0;
      if (special)
        v = (h >> 8) % 2 ? -0.0 : 0.0 / 0.0;
      ((double *)p)[i] = v;
      break;
    }
    case HK_FLOAT16:
    case HK_BFLOAT16:
      ((uint16_t *)p)[i] = (uint16_t)(h >> 17);
      break;
    default:
      memcpy((char *)p + i * hk_dtype_size(t), &h, hk_dtype_size(t));
    }
  }
}

/* ---- allreduce: every dtype x op x count, in place too ---- */

static const hk_op ops4[] = {HK_SUM, HK_MIN, HK_MAX, HK_PRODUCT};

static void rank_allreduce(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  int np = j->np;
  for (int t = HK_FLOAT16; t <= HK_INT16; t++) {
    hk_dtype dt = (hk_dtype)t;
    size_t es = hk_dtype_size(dt);
    size_t big = 2 * (HK_EMU_CHUNK_BYTES / es) + 3;
    if (LIGHT && dt != HK_FLOAT32 && dt != HK_INT8)
      big = 1003;
    size_t counts[4] = {0, 1, (size_t)np + 1, big};
    char *in = xmalloc((size_t)np * big * es), *ref = xmalloc(big * es);
    char *out = xmalloc(big * es + 64);
    for (int r = 0; r < np; r++)
      gen(in + (size_t)r * big * es, big, dt, r, 0);
    char *mine = in + (size_t)rank * big * es;
    char *dsend, *drecv;
    CHECK_OK(x.ops->mem_alloc(x.dev, big * es, (void **)&dsend));
    CHECK_OK(x.ops->mem_alloc(x.dev, big * es + 64, (void **)&drecv));
    CHECK_OK(x.ops->memcpy_async(x.dev, dsend, mine, big * es, x.s));
    for (int k = 0; k < 4; k++) {
      hk_op op = ops4[k];
      memcpy(ref, in, big * es); /* serial, rank order */
      for (int r = 1; r < np; r++)
        hk_reduce(ref, ref, in + (size_t)r * big * es, big, dt, op);
      for (int q = 0; q < 4; q++) {
        size_t n = counts[q];
        CHECK_OK(
            x.ops->fill(x.dev, drecv, big * es + 64, HK_UINT8, "\xab", x.s));
        CHECK_OK(x.ops->comm_allreduce(x.c, dsend, drecv, n, dt, op, x.s));
        CHECK_OK(x.ops->memcpy_async(x.dev, out, drecv, n * es + 64, x.s));
        sync_stream(&x, x.s);
        if (memcmp(out, ref, n * es) != 0) {
          fprintf(stderr, "rank %d: allreduce %s %s count %zu differs\n", rank,
                  hk_dtype_name(dt), hk_op_name(op), n);
          _exit(1);
        }
        for (int b = 0; b < 64; b++)
          CHECK((unsigned char)out[n * es + b] == 0xab); /* nothing more */
      }
      if (op != ops4[(t + np) % 4])
        continue;
      /* in place, over several chunks (one op per dtype) */
      CHECK_OK(x.ops->memcpy_async(x.dev, drecv, mine, big * es, x.s));
      CHECK_OK(x.ops->comm_allreduce(x.c, drecv, drecv, big, dt, op, x.s));
      CHECK_OK(x.ops->memcpy_async(x.dev, out, drecv, big * es, x.s));
      sync_stream(&x, x.s);
      CHECK(memcmp(out, ref, big * es) == 0);
    }
    free_round(&x, dsend, drecv, in, ref, out);
  }
  check_no_async_error(&x, 0);
  rank_close(&x, COMM_DESTROY);
}

/* ---- reducescatter, allgather, broadcast ---- */

/* Reads an allgather's result, np blocks of `block` bytes, from drecv
 * into out and checks it against rank r's input in + r * stride, r in
 * rank order. */
static void check_gathered(rank_ctx *x, char *out, const char *drecv,
                           const char *in, int np, size_t block,
                           size_t stride) {
  CHECK_OK(x->ops->memcpy_async(x->dev, out, drecv, (size_t)np * block, x->s));
  sync_stream(x, x->s);
  for (int r = 0; r < np; r++)
    CHECK(memcmp(out + (size_t)r * block, in + (size_t)r * stride, block) == 0);
}

static void rank_others(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  int np = j->np;
  static const hk_dtype types[] = {HK_FLOAT32, HK_FLOAT16, HK_INT64, HK_INT8,
                                   HK_INT16};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    hk_dtype dt = types[ti];
    size_t es = hk_dtype_size(dt);
    /* per-rank counts: a reducescatter round is chunk/np per block */
    size_t big = 2 * (HK_EMU_CHUNK_BYTES / es / (size_t)np) + 3;
    if (LIGHT && dt != HK_FLOAT32)
      big = 1003;
    size_t counts[4] = {0, 1, (size_t)np + 1, big};
    size_t total = (size_t)np * big;
    char *in = xmalloc((size_t)np * total * es), *ref = xmalloc(total * es);
    char *out = xmalloc(total * es);
    for (int r = 0; r < np; r++)
      gen(in + (size_t)r * total * es, total, dt, r, 1);
    char *dsend, *drecv;
    CHECK_OK(x.ops->mem_alloc(x.dev, total * es, (void **)&dsend));
    CHECK_OK(x.ops->mem_alloc(x.dev, total * es, (void **)&drecv));
    for (int q = 0; q < 4; q++) {
      size_t n = counts[q];
      /* reducescatter of np blocks of n: rank r gets block r */
      for (int k = 0; k < 4; k++) {
        hk_op op = ops4[k];
        char *mine = xmalloc(total * es);
        for (int b = 0; b < np; b++) /* blocks of n, packed */
          memcpy(mine + (size_t)b * n * es,
                 in + ((size_t)rank * total + (size_t)b * big) * es, n * es);
        CHECK_OK(
            x.ops->memcpy_async(x.dev, dsend, mine, (size_t)np * n * es, x.s));
        CHECK_OK(x.ops->comm_reducescatter(x.c, dsend, drecv, n, dt, op, x.s));
        CHECK_OK(x.ops->memcpy_async(x.dev, out, drecv, n * es, x.s));
        sync_stream(&x, x.s);
        /* serial: block `rank` of every rank's input, rank order */
        memcpy(ref, in + (size_t)rank * big * es, n * es);
        for (int r = 1; r < np; r++)
          hk_reduce(ref, ref,
                    in + ((size_t)r * total + (size_t)rank * big) * es, n, dt,
                    op);
        CHECK(memcmp(out, ref, n * es) == 0);
        free(mine);
      }
      /* allgather: rank order */
      char *mine = in + (size_t)rank * total * es;
      CHECK_OK(x.ops->memcpy_async(x.dev, dsend, mine, n * es, x.s));
      CHECK_OK(x.ops->comm_allgather(x.c, dsend, drecv, n, dt, x.s));
      check_gathered(&x, out, drecv, in, np, n * es, total * es);
      /* allgather in place: send is this rank's block of recv */
      CHECK_OK(x.ops->memcpy_async(x.dev, drecv + (size_t)rank * n * es, mine,
                                   n * es, x.s));
      CHECK_OK(x.ops->comm_allgather(x.c, drecv + (size_t)rank * n * es, drecv,
                                     n, dt, x.s));
      check_gathered(&x, out, drecv, in, np, n * es, total * es);
      /* broadcast from every root */
      for (int root = 0; root < np; root++) {
        CHECK_OK(x.ops->memcpy_async(x.dev, drecv, mine, n * es, x.s));
        CHECK_OK(x.ops->comm_broadcast(x.c, drecv, n, dt, root, x.s));
        CHECK_OK(x.ops->memcpy_async(x.dev, out, drecv, n * es, x.s));
        sync_stream(&x, x.s);
        CHECK(memcmp(out, in + (size_t)root * total * es, n * es) == 0);
      }
    }
    free_round(&x, dsend, drecv, in, ref, out);
  }
  CHECK(strcmp(async_msg(&x, NULL), "") == 0);
  rank_close(&x, COMM_DESTROY);
}

/* ---- argument errors (one rank) ---- */

static void rank_args(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  char *d = rank_alloc(&x, 64), host[64];
  CHECK(x.ops->comm_allreduce(x.c, d, d, 4, HK_FLOAT32, HK_AVERAGE, x.s) ==
        HK_ERR_INVALID_ARG);
  CHECK(strstr(hk_last_error(), "HK_AVERAGE"));
  CHECK(x.ops->comm_allreduce(x.c, host, d, 4, HK_FLOAT32, HK_SUM, x.s) ==
        HK_ERR_INVALID_ARG);
  CHECK(strstr(hk_last_error(), "not emu device memory"));
  CHECK(x.ops->comm_allreduce(x.c, d, d, 17, HK_FLOAT32, HK_SUM, x.s) ==
        HK_ERR_INVALID_ARG);
  CHECK(strstr(hk_last_error(), "run past the end"));
  CHECK(x.ops->comm_broadcast(x.c, d, 4, HK_FLOAT32, 1, x.s) ==
        HK_ERR_INVALID_ARG);
  CHECK(x.ops->comm_allgather(x.c, d, d, 17, HK_FLOAT32, x.s) ==
        HK_ERR_INVALID_ARG);
  CHECK(x.ops->comm_allreduce(x.c, d, d, 4, (hk_dtype)42, HK_SUM, x.s) ==
        HK_ERR_INVALID_ARG);
  hk_dev_comm bad = NULL;
  uint8_t zero[HK_DEV_UID_BYTES] = {0};
  CHECK(x.ops->comm_init(x.dev, zero, 1, 0, &bad) == HK_ERR_INVALID_ARG);
  CHECK(x.ops->comm_init(x.dev, j->id, 2, 2, &bad) == HK_ERR_INVALID_ARG);
  CHECK(bad == NULL);
  /* the communicator still works after refused calls */
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 16, HK_FLOAT32, HK_SUM, x.s));
  sync_stream(&x, x.s);
  CHECK(strcmp(async_msg(&x, NULL), "") == 0);
  rank_close(&x, COMM_DESTROY);
}

/* ---- a mismatch, named on every rank ---- */

static void rank_mismatch(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  float *d = rank_alloc(&x, 400);
  hk_dev_event e = rank_event(&x);
  /* op 0 agrees */
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 10, HK_FLOAT32, HK_SUM, x.s));
  /* op 1: rank 1 says 100, the others 99 */
  size_t n = rank == 1 ? 100 : 99;
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, n, HK_FLOAT32, HK_SUM, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e, x.s));
  /* and later ops do nothing, failing the same way */
  CHECK_OK(x.ops->comm_broadcast(x.c, d, 5, HK_FLOAT32, 0, x.s));
  sync_stream(&x, x.s);
  const char *want = "emu communicator: rank 1 issued allreduce of 100 "
                     "float32 sum, rank 0 allreduce of 99 float32 sum";
  int pending = 1;
  const char *got = async_msg(&x, &pending);
  if (!strstr(got, want)) {
    fprintf(stderr, "rank %d: async error '%s'\n", rank, got);
    _exit(1);
  }
  CHECK(pending == 0);
  int done = 0;
  CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM);
  CHECK(done == 1);
  CHECK(strstr(hk_last_error(), want));
  rank_close(&x, COMM_ABORT);
}

/* A different kind of op on one rank. */
static void rank_kind_mismatch(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  float *d = rank_alloc(&x, 400);
  if (rank == 1)
    CHECK_OK(x.ops->comm_broadcast(x.c, d, 7, HK_FLOAT16, 1, x.s));
  else
    CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 7, HK_FLOAT32, HK_MAX, x.s));
  sync_stream(&x, x.s);
  CHECK(strstr(async_msg(&x, NULL),
               "rank 1 issued broadcast of 7 float16 from root 1, rank 0 "
               "allreduce of 7 float32 max"));
  rank_close(&x, COMM_ABORT);
}

/* ---- faults ---- */

/* error:1:2 - rank 1's op 2 fails; its watchdog (here: the test) aborts;
 * rank 0, blocked in op 2, ends with the reason. */
static void rank_fault_error(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  int32_t *d, v[8], out[8];
  for (int i = 0; i < 8; i++)
    v[i] = rank + 1;
  d = rank_alloc(&x, sizeof v);
  hk_dev_stream s2;
  CHECK_OK(x.ops->stream_create(x.dev, &s2));
  hk_dev_event e = rank_event(&x), e2 = rank_event(&x);
  for (int k = 0; k < 2; k++) { /* ops 0 and 1 work */
    CHECK_OK(x.ops->memcpy_async(x.dev, d, v, sizeof v, x.s));
    CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 8, HK_INT32, HK_SUM, x.s));
    CHECK_OK(x.ops->memcpy_async(x.dev, out, d, sizeof out, x.s));
    sync_stream(&x, x.s);
    CHECK(out[7] == 3);
  }
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 8, HK_INT32, HK_SUM, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e, x.s));
  /* a stream that waits on the failed work fails too */
  CHECK_OK(x.ops->stream_wait_event(x.dev, s2, e));
  CHECK_OK(x.ops->event_record(x.dev, e2, s2));
  const char *injected =
      "injected async error (HK_EMU_FAULT) in allreduce #2 on rank 1";
  int done = 0;
  if (rank == 1) {
    sync_stream(&x, x.s); /* fails at once */
    CHECK(strcmp(async_msg(&x, NULL), injected) == 0);
    CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM && done);
    CHECK(strstr(hk_last_error(), injected));
    sync_stream(&x, s2);
    CHECK(x.ops->event_query(x.dev, e2, &done) == HK_ERR_SYSTEM && done);
    CHECK(strstr(hk_last_error(), injected));
    CHECK_OK(hk_emu_comm_wait_arrived(x.c, 1)); /* rank 0 is blocked */
    x.ops->comm_abort(x.c);
  } else {
    sync_stream(&x, x.s); /* ends when rank 1 aborts */
    char want[256];
    snprintf(want, sizeof want, "aborted by rank 1: %s", injected);
    const char *got = async_msg(&x, NULL);
    if (strcmp(got, want) != 0) {
      fprintf(stderr, "rank 0: async error '%s'\n", got);
      _exit(1);
    }
    CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM && done);
    CHECK(strstr(hk_last_error(), want));
    x.ops->comm_abort(x.c);
  }
  sync_stream(&x, s2);
  x.ops->stream_destroy(x.dev, s2);
  rank_close(&x, COMM_ABORTED);
}

/* hang:1:0 - rank 1's op 0 never completes until rank 1 aborts; that
 * also ends rank 0's op, blocked waiting for it. */
static void rank_fault_hang(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  float *d = rank_alloc(&x, 64);
  hk_dev_event e = rank_event(&x);
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 16, HK_FLOAT32, HK_SUM, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e, x.s));
  int done = 1;
  if (rank == 1) {
    CHECK_OK(hk_emu_comm_wait_arrived(x.c, 1)); /* rank 0 waits for us */
    CHECK_OK(x.ops->event_query(x.dev, e, &done));
    CHECK(done == 0); /* hung */
    check_no_async_error(&x, 0);
    x.ops->comm_abort(x.c); /* the stream moves on */
    sync_stream(&x, x.s);
    CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM && done);
    CHECK(strstr(hk_last_error(),
                 "allreduce #0 aborted on rank 1 (comm_abort) while hung by "
                 "HK_EMU_FAULT"));
  } else {
    sync_stream(&x, x.s);
    CHECK(strcmp(async_msg(&x, NULL),
                 "aborted by rank 1: comm_abort called (no async error on "
                 "that rank)") == 0);
    CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM && done);
    x.ops->comm_abort(x.c);
  }
  rank_close(&x, COMM_ABORTED);
}

/* delay:0:1:80 - rank 0's op 1 starts 80 ms late and succeeds. */
static void rank_fault_delay(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  double *d, v[4] = {1.5, 2.5, 3.5, 4.5}, out[4];
  d = rank_alloc(&x, sizeof v);
  hk_dev_event e0 = rank_event(&x), e1 = rank_event(&x);
  CHECK_OK(x.ops->comm_broadcast(x.c, d, 0, HK_FLOAT64, 0, x.s)); /* op 0 */
  CHECK_OK(x.ops->memcpy_async(x.dev, d, v, sizeof v, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e0, x.s));
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 4, HK_FLOAT64, HK_SUM, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e1, x.s));
  CHECK_OK(x.ops->memcpy_async(x.dev, out, d, sizeof out, x.s));
  sync_stream(&x, x.s);
  for (int i = 0; i < 4; i++)
    CHECK(out[i] == 2 * v[i]);
  float ms = 0;
  CHECK_OK(x.ops->event_elapsed(x.dev, e0, e1, &ms));
  if (rank == 0)
    CHECK(ms >= 79.9f);
  CHECK(strcmp(async_msg(&x, NULL), "") == 0);
  rank_close(&x, COMM_DESTROY);
}

/* ---- abort ---- */

typedef struct abort_arg {
  rank_ctx *x;
  int wait_for;
} abort_arg;

static void *abort_main(void *arg) {
  abort_arg *a = arg;
  if (a->wait_for)
    CHECK_OK(hk_emu_comm_wait_arrived(a->x->c, a->wait_for));
  a->x->ops->comm_abort(a->x->c);
  return NULL;
}

/* Aborts x's communicator from another thread, once wait_for ranks have
 * arrived at its current op (0: at once), and joins that thread. */
static void abort_from_thread(rank_ctx *x, int wait_for) {
  pthread_t t;
  abort_arg a = {x, wait_for};
  CHECK(pthread_create(&t, NULL, abort_main, &a) == 0);
  pthread_join(t, NULL);
}

/* np 3: ranks 0 and 2 enter an allreduce rank 1 never issues; rank 1
 * aborts from another thread once both are blocked. */
static void rank_abort_peer(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  float *d = rank_alloc(&x, 64);
  if (rank == 1) {
    abort_from_thread(&x, 2);
  } else {
    CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 16, HK_FLOAT32, HK_SUM, x.s));
    sync_stream(&x, x.s);
    CHECK(strstr(async_msg(&x, NULL), "aborted by rank 1: "));
    x.ops->comm_abort(x.c);
  }
  rank_close(&x, COMM_ABORTED);
}

/* ---- init: pending until all come; ops queued before wait ---- */

static void rank_init_pending(job *j, int rank) {
  if (rank == 1)
    get_byte(j->down[1][0]); /* rank 1 joins only when told */
  rank_ctx x = rank_open(j, rank);
  int32_t *d, v[3] = {rank + 10, 5, -7}, out[3];
  d = rank_alloc(&x, sizeof v);
  hk_dev_event e = rank_event(&x);
  CHECK_OK(x.ops->memcpy_async(x.dev, d, v, sizeof v, x.s));
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 3, HK_INT32, HK_PRODUCT, x.s));
  CHECK_OK(x.ops->event_record(x.dev, e, x.s));
  if (rank == 0) {
    check_no_async_error(&x, 1);
    int done = 1;
    CHECK_OK(x.ops->event_query(x.dev, e, &done));
    CHECK(done == 0);
    put_byte(j->up[1], 'i'); /* the parent lets rank 1 in */
  }
  CHECK_OK(x.ops->memcpy_async(x.dev, out, d, sizeof out, x.s));
  sync_stream(&x, x.s);
  CHECK(out[0] == 10 * 11 && out[1] == 25 && out[2] == 49);
  check_no_async_error(&x, 0);
  char path[96];
  snprintf(path, sizeof path, "/dev/shm%s", j->shm);
  CHECK(access(path, F_OK) != 0); /* gone once init is complete */
  rank_close(&x, COMM_DESTROY);
}

static void test_init_pending(void **state) {
  (void)state;
  job j;
  job_init(&j, 2);
  job_relay(&j, rank_init_pending, 'i', 1, 'g');
}

/* A rank that joins with another nranks fails its init; rank 0, whose
 * peers never all come, is aborted during init; nothing is left. */
static void rank_init_mismatch(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  if (rank == 1) {
    float *d = rank_alloc(&x, 64);
    CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 4, HK_FLOAT32, HK_SUM, x.s));
    sync_stream(&x, x.s); /* the op fails with the init */
    CHECK(strstr(async_msg(&x, NULL),
                 "rank 1 joined with nranks 3, but rank 0 created it for 2"));
    rank_close(&x, COMM_ABORT);
    put_byte(j->up[1], 'm');
    return;
  }
  get_byte(j->down[0][0]); /* after rank 1 has failed */
  check_no_async_error(&x, 1);
  abort_from_thread(&x, 0);
  rank_close(&x, COMM_ABORTED);
}

static void test_init_nranks_mismatch(void **state) {
  (void)state;
  job j;
  job_init(&j, 2);
  j.np_seen[1] = 3;
  job_relay(&j, rank_init_mismatch, 'm', 0, 'a');
}

/* After init nothing is in /dev/shm; rank 1 is SIGKILLed while rank 0 is
 * blocked in an op; rank 0's own abort (from another thread) ends it. */
static void rank_sigkill(job *j, int rank) {
  rank_ctx x = rank_open(j, rank);
  float *d = rank_alloc(&x, 64);
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 16, HK_FLOAT32, HK_SUM, x.s));
  sync_stream(&x, x.s);
  check_no_async_error(&x, 0);
  if (rank == 1) {
    put_byte(j->up[1], 'r');
    for (;;)
      pause(); /* until SIGKILL */
  }
  CHECK_OK(x.ops->comm_allreduce(x.c, d, d, 16, HK_FLOAT32, HK_SUM, x.s));
  CHECK_OK(hk_emu_comm_wait_arrived(x.c, 1)); /* our op is blocked */
  put_byte(j->up[1], 'b');
  get_byte(j->down[0][0]); /* rank 1 is dead now */
  abort_from_thread(&x, 1);
  hk_dev_event e = rank_event(&x);
  CHECK_OK(x.ops->event_record(x.dev, e, x.s));
  sync_stream(&x, x.s);
  int done = 0;
  CHECK(x.ops->event_query(x.dev, e, &done) == HK_ERR_SYSTEM && done);
  CHECK(strstr(hk_last_error(), "allreduce #1 aborted on rank 0 (comm_abort)"));
  rank_close(&x, COMM_ABORTED);
}

static void test_no_shm_left_after_sigkill(void **state) {
  (void)state;
  job j;
  job_init(&j, 2);
  job_start(&j, rank_sigkill);
  char got[2] = {get_byte(j.up[0]), get_byte(j.up[0])};
  assert_true((got[0] == 'r' && got[1] == 'b') ||
              (got[0] == 'b' && got[1] == 'r'));
  assert_false(shm_present(&j)); /* unlinked once everyone attached */
  assert_int_equal(kill(j.pid[1], SIGKILL), 0);
  int status = 0;
  assert_int_equal(waitpid(j.pid[1], &status, 0), j.pid[1]);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  j.pid[1] = 0;
  assert_false(shm_present(&j));
  put_byte(j.down[0][1], 'k');
  job_finish(&j);
}

/* A test named TEST that runs test_job with the case {NP, no fault, FN},
 * or, FAULT_TEST, {2, {KIND, RANK, OP, MS}, FN} (compound literals, alive
 * while main runs the tests). */
#define JOB_TEST(test, np, fn)                                                 \
  {                                                                            \
    .name = #test, .test_func = test_job, .initial_state = &(job_case) {       \
      np, {0}, fn                                                              \
    }                                                                          \
  }
#define FAULT_TEST(test, kind, rank, op, ms, fn)                               \
  {                                                                            \
    .name = #test, .test_func = test_job, .initial_state = &(job_case) {       \
      2, {kind, rank, op, ms}, fn                                              \
    }                                                                          \
  }

int main(void) {
  const struct CMUnitTest tests[] = {
      JOB_TEST(test_allreduce_every_dtype_op, 0, rank_allreduce),
      JOB_TEST(test_reducescatter_allgather_broadcast, 0, rank_others),
      JOB_TEST(test_argument_errors, 1, rank_args),
      JOB_TEST(test_mismatch_named_everywhere, 3, rank_mismatch),
      JOB_TEST(test_kind_mismatch, 2, rank_kind_mismatch),
      FAULT_TEST(test_fault_error, HK_DEV_FAULT_ERROR, 1, 2, 0,
                 rank_fault_error),
      FAULT_TEST(test_fault_hang, HK_DEV_FAULT_HANG, 1, 0, 0, rank_fault_hang),
      FAULT_TEST(test_fault_delay, HK_DEV_FAULT_DELAY, 0, 1, 80,
                 rank_fault_delay),
      JOB_TEST(test_abort_unblocks_peers, 3, rank_abort_peer),
      cmocka_unit_test(test_init_pending),
      cmocka_unit_test(test_init_nranks_mismatch),
      cmocka_unit_test(test_no_shm_left_after_sigkill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
