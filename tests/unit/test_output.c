/*
 * test_output.c - the line splitter behind hkrun's output prefixing, and
 * the write helper that puts its lines on hkrun's stdout.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/output.h"

/* ---- a recorder: every emit() call becomes one entry ---- */

typedef struct recorder {
  int n;
  char *lines[64];
  size_t lens[64];
} recorder;

static void record(void *ctx, const char *line, size_t len) {
  recorder *r = ctx;
  assert_true(r->n < 64);
  r->lines[r->n] = malloc(len + 1);
  memcpy(r->lines[r->n], line, len);
  r->lines[r->n][len] = '\0';
  r->lens[r->n] = len;
  r->n++;
}

static void recorder_free(recorder *r) {
  for (int i = 0; i < r->n; i++)
    free(r->lines[i]);
  r->n = 0;
}

/* Feeds the chunks (NULL-terminated) and, if eof, finishes; then checks
 * the emitted calls one by one. */
static void check(const char *prefix, const char *const *chunks, int eof,
                  const char *const *expect) {
  recorder r = {0};
  hk_out_splitter s;
  assert_int_equal(hk_out_init(&s, prefix, record, &r), HK_OK);
  for (int i = 0; chunks[i]; i++)
    assert_int_equal(hk_out_feed(&s, chunks[i], strlen(chunks[i])), HK_OK);
  if (eof)
    hk_out_finish(&s);
  int n = 0;
  while (expect[n])
    n++;
  if (r.n != n)
    fail_msg("expected %d lines, got %d (first: '%s')", n, r.n,
             r.n ? r.lines[0] : "");
  for (int i = 0; i < n; i++) {
    assert_string_equal(r.lines[i], expect[i]);
    assert_int_equal(r.lens[i], strlen(expect[i]));
  }
  recorder_free(&r);
  hk_out_free(&s);
}

static void test_table(void **state) {
  (void)state;
  static const struct {
    const char *prefix;
    const char *chunks[8];
    int eof;
    const char *expect[8];
  } cases[] = {
      /* several lines in one chunk */
      {"[0] ", {"a\nbb\nccc\n", NULL}, 0, {"[0] a\n", "[0] bb\n", "[0] ccc\n"}},
      /* a line split across chunks */
      {"[1] ",
       {"hel", "lo\nwor", "ld", "\n", NULL},
       0,
       {"[1] hello\n", "[1] world\n"}},
      /* empty lines stay lines */
      {"[2] ",
       {"\n\nx\n\n", NULL},
       0,
       {"[2] \n", "[2] \n", "[2] x\n", "[2] \n"}},
      /* a partial line waits for its newline... */
      {"[3] ", {"done\nhalf", NULL}, 0, {"[3] done\n"}},
      /* ...and is flushed with a newline at EOF */
      {"[3] ", {"done\nhalf", NULL}, 1, {"[3] done\n", "[3] half\n"}},
      /* EOF with nothing pending emits nothing */
      {"[4] ", {"x\n", NULL}, 1, {"[4] x\n"}},
      {"[4] ", {NULL}, 1, {NULL}},
      /* no prefix */
      {"", {"plain\nte", "xt", NULL}, 1, {"plain\n", "text\n"}},
      /* a NUL byte-free but odd line: carriage returns are kept */
      {"[5] ", {"a\r\nb", NULL}, 1, {"[5] a\r\n", "[5] b\n"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check(cases[i].prefix, cases[i].chunks, cases[i].eof, cases[i].expect);
}

/* ---- long lines ---- */

/* Feeds `total` bytes of 'a' (in chunks of `chunk`), then `tail` (may be
 * ""), then EOF; checks the piece sizes. */
static void check_long(size_t total, size_t chunk, const char *tail,
                       const size_t *pieces, int n_pieces) {
  char *data = malloc(total);
  memset(data, 'a', total);
  recorder r = {0};
  hk_out_splitter s;
  assert_int_equal(hk_out_init(&s, "[7] ", record, &r), HK_OK);
  for (size_t off = 0; off < total; off += chunk) {
    size_t n = total - off < chunk ? total - off : chunk;
    assert_int_equal(hk_out_feed(&s, data + off, n), HK_OK);
  }
  assert_int_equal(hk_out_feed(&s, tail, strlen(tail)), HK_OK);
  hk_out_finish(&s);
  assert_int_equal(r.n, n_pieces);
  for (int i = 0; i < n_pieces; i++) {
    assert_int_equal(r.lens[i], 4 + pieces[i] + 1);
    assert_memory_equal(r.lines[i], "[7] ", 4);
    assert_int_equal(strspn(r.lines[i] + 4, "a"), pieces[i]);
    assert_int_equal(r.lines[i][r.lens[i] - 1], '\n');
  }
  recorder_free(&r);
  hk_out_free(&s);
  free(data);
}

static void test_long_lines(void **state) {
  (void)state;
  const size_t M = HK_OUT_MAX_LINE;
  assert_int_equal(M, 65536);
  /* 2 full pieces and a rest, in one chunk and in odd chunks */
  size_t three[] = {M, M, 10};
  check_long(2 * M + 10, 2 * M + 10, "", three, 3);
  check_long(2 * M + 10, 4093, "", three, 3);
  check_long(2 * M + 10, 1, "", three, 3);
  /* exactly one piece followed by its newline: one line, no empty one */
  size_t one[] = {M};
  check_long(M, M, "\n", one, 1);
  check_long(M, 1000, "\n", one, 1);
  /* exactly one piece at EOF */
  check_long(M, M, "", one, 1);
  /* one byte more than a piece */
  size_t two[] = {M, 1};
  check_long(M + 1, 7, "\n", two, 2);
}

/* After a long line, short lines are unaffected. */
static void test_long_then_short(void **state) {
  (void)state;
  const size_t M = HK_OUT_MAX_LINE;
  char *data = malloc(M + 5);
  memset(data, 'b', M + 3);
  memcpy(data + M + 3, "\nx", 2);
  recorder r = {0};
  hk_out_splitter s;
  assert_int_equal(hk_out_init(&s, "", record, &r), HK_OK);
  assert_int_equal(hk_out_feed(&s, data, M + 5), HK_OK);
  assert_int_equal(hk_out_feed(&s, "y\n", 2), HK_OK);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.lens[0], M + 1);
  assert_string_equal(r.lines[1], "bbb\n");
  assert_string_equal(r.lines[2], "xy\n");
  recorder_free(&r);
  hk_out_free(&s);
  free(data);
}

/* ---- chunking does not matter ---- */

typedef struct concat {
  char *data;
  size_t len, cap;
  int calls;
} concat;

static void append(void *ctx, const char *line, size_t len) {
  concat *c = ctx;
  if (c->len + len > c->cap) {
    c->cap = (c->len + len) * 2;
    c->data = realloc(c->data, c->cap);
  }
  memcpy(c->data + c->len, line, len);
  c->len += len;
  c->calls++;
  /* every call is exactly one prefixed, newline-terminated line */
  assert_memory_equal(line, "[9] ", 4);
  assert_int_equal(line[len - 1], '\n');
  assert_null(memchr(line, '\n', len - 1));
}

/* The same random text cut at random points always gives the same lines
 * as feeding it whole. */
static void test_random_chunking(void **state) {
  (void)state;
  enum { LEN = 300000 };
  char *text = malloc(LEN);
  unsigned seed = 12345;
  for (size_t i = 0; i < LEN; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned v = (seed >> 16) % 1000;
    /* mostly short lines, sometimes empty ones, one very long stretch */
    text[i] = (i > 100000 && i < 240000) ? 'L' : v < 30 ? '\n' : 'a' + v % 26;
  }
  concat whole = {0};
  hk_out_splitter s;
  assert_int_equal(hk_out_init(&s, "[9] ", append, &whole), HK_OK);
  assert_int_equal(hk_out_feed(&s, text, LEN), HK_OK);
  hk_out_finish(&s);
  hk_out_free(&s);
  for (int round = 0; round < 20; round++) {
    concat cut = {0};
    assert_int_equal(hk_out_init(&s, "[9] ", append, &cut), HK_OK);
    size_t off = 0;
    while (off < LEN) {
      seed = seed * 1103515245u + 12345u;
      size_t n = 1 + (seed >> 8) % (round < 10 ? 64 : 70000);
      if (n > LEN - off)
        n = LEN - off;
      assert_int_equal(hk_out_feed(&s, text + off, n), HK_OK);
      off += n;
    }
    hk_out_finish(&s);
    hk_out_free(&s);
    assert_int_equal(cut.calls, whole.calls);
    assert_int_equal(cut.len, whole.len);
    assert_memory_equal(cut.data, whole.data, whole.len);
    free(cut.data);
  }
  free(whole.data);
  free(text);
}

static void test_init_errors(void **state) {
  (void)state;
  hk_out_splitter s;
  recorder r = {0};
  char prefix[HK_OUT_MAX_PREFIX + 2];
  memset(prefix, 'p', sizeof prefix - 1);
  prefix[sizeof prefix - 1] = '\0';
  assert_int_equal(hk_out_init(&s, prefix, record, &r), HK_ERR_INVALID_ARG);
  assert_int_equal(hk_out_init(&s, "[0] ", NULL, &r), HK_ERR_INVALID_ARG);
  prefix[HK_OUT_MAX_PREFIX] = '\0'; /* exactly the limit is fine */
  assert_int_equal(hk_out_init(&s, prefix, record, &r), HK_OK);
  hk_out_free(&s);
  assert_int_equal(hk_out_init(&s, NULL, record, &r), HK_OK); /* no prefix */
  assert_int_equal(hk_out_feed(&s, "z\n", 2), HK_OK);
  assert_string_equal(r.lines[0], "z\n");
  recorder_free(&r);
  hk_out_free(&s);
}

/* ---- hk_out_write_all ---- */

typedef struct drain {
  int fd;
  size_t total;
  int ok; /* the bytes read follow the expected pattern */
} drain;

static void *drain_thread(void *arg) {
  drain *d = arg;
  char buf[4096];
  d->ok = 1;
  for (;;) {
    ssize_t n = read(d->fd, buf, sizeof buf);
    if (n <= 0)
      break;
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != (char)('A' + (d->total + (size_t)i) % 23))
        d->ok = 0;
    d->total += (size_t)n;
  }
  return NULL;
}

/* 4 MiB through a NON-BLOCKING pipe (64 KiB capacity): every byte arrives,
 * in order, although write() reports EAGAIN and partial writes. */
static void test_write_all_nonblocking(void **state) {
  (void)state;
  enum { SIZE = 4 << 20 };
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  char *data = malloc(SIZE);
  for (size_t i = 0; i < SIZE; i++)
    data[i] = (char)('A' + i % 23);
  drain d = {.fd = p[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, drain_thread, &d), 0);
  assert_int_equal(hk_out_write_all(p[1], data, SIZE), 0);
  close(p[1]);
  pthread_join(t, NULL);
  close(p[0]);
  assert_int_equal(d.total, SIZE);
  assert_true(d.ok);
  free(data);
}

/* A pipe without a reader gives -EPIPE (SIGPIPE ignored), a bad fd
 * -EBADF. */
static void test_write_all_errors(void **state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  int p[2];
  assert_int_equal(pipe(p), 0);
  close(p[0]);
  assert_int_equal(hk_out_write_all(p[1], "x\n", 2), -EPIPE);
  close(p[1]);
  assert_int_equal(hk_out_write_all(p[1], "x\n", 2), -EBADF);
  assert_int_equal(hk_out_write_all(p[1], "", 0), 0); /* nothing to do */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_long_lines),
      cmocka_unit_test(test_long_then_short),
      cmocka_unit_test(test_random_chunking),
      cmocka_unit_test(test_init_errors),
      cmocka_unit_test(test_write_all_nonblocking),
      cmocka_unit_test(test_write_all_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
