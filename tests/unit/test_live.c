/*
 * test_live - hkrun --monitor's display (launcher/monitor.h): on a pipe
 * each refresh appends whole "monitor: " lines and no escape sequence; on
 * a terminal (a pseudo-terminal here) the second refresh moves the cursor
 * up over the first table and erases each line before rewriting it.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/monitor.h"

static size_t drain(int fd, char *buf, size_t cap) {
  size_t len = 0;
  ssize_t n;
  while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
    len += (size_t)n;
  buf[len] = '\0';
  return len;
}

static void test_pipe_lines(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  hk_live l;
  hk_live_init(&l, p[1]);
  assert_int_equal(l.tty, 0);
  hk_live_show(&l, "rank 0 a\nrank 1 b\n");
  hk_live_show(&l, "rank 0 c\nrank 1 d"); /* a last line without '\n' */
  close(p[1]);
  char buf[512];
  drain(p[0], buf, sizeof buf);
  close(p[0]);
  assert_string_equal(buf, "monitor: rank 0 a\nmonitor: rank 1 b\n"
                           "monitor: rank 0 c\nmonitor: rank 1 d\n");
}

static void test_terminal_in_place(void **state) {
  (void)state;
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m < 0)
    skip(); /* no pseudo-terminals here */
  assert_int_equal(grantpt(m), 0);
  assert_int_equal(unlockpt(m), 0);
  int s = open(ptsname(m), O_RDWR | O_NOCTTY);
  assert_true(s >= 0);
  hk_live l;
  hk_live_init(&l, s);
  assert_int_equal(l.tty, 1);
  hk_live_show(&l, "rank 0 a\nrank 1 b\nrank 2 c\n");
  hk_live_show(&l, "rank 0 x\nrank 1 y\nrank 2 z\n");
  close(s);
  char buf[1024];
  fcntl(m, F_SETFL, O_NONBLOCK);
  drain(m, buf, sizeof buf);
  close(m);
  /* first table: no cursor move; second: up 3 lines, each line erased */
  const char *up = strstr(buf, "\033[3A");
  assert_non_null(up);
  assert_null(strstr(up + 1, "\033[3A"));
  assert_true(strstr(buf, "\r\033[2Krank 0 a") < up);
  assert_non_null(strstr(up, "\r\033[2Krank 0 x"));
  assert_non_null(strstr(up, "\r\033[2Krank 2 z"));
  assert_null(strstr(buf, "monitor: "));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipe_lines),
      cmocka_unit_test(test_terminal_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
