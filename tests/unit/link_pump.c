/*
 * link_pump.c - see link_pump.h.
 */
#include "link_pump.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

uint8_t link_pump_byte(int side, size_t o) {
  uint64_t x =
      o * 0x9E3779B97F4A7C15ull + (uint64_t)side * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return (uint8_t)(x >> 56);
}

uint32_t link_pump_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* A call's size: 1..max_call, at most what is left. */
static size_t call_size(link_side *s, size_t left) {
  size_t want = 1 + link_pump_rand(&s->seed) % s->max_call;
  return want > left ? left : want;
}

/* Sends its stream and receives the other's at once, in calls of random
 * sizes, waiting only when neither moved. */
static void *side_main(void *p) {
  link_side *s = p;
  uint8_t *out = malloc(s->send_len + 1), *in = malloc(s->recv_len + 1);
  for (size_t i = 0; i < s->send_len; i++)
    out[i] = link_pump_byte(s->id, i);
  size_t sent = 0, got = 0;
  hk_io io = {-1, 10};
  s->st = HK_OK;
  while (s->st == HK_OK && (sent < s->send_len || got < s->recv_len)) {
    size_t ds = 0, dr = 0;
    if (sent < s->send_len) {
      s->st = hk_link_send_some(s->tx, out + sent,
                                call_size(s, s->send_len - sent), &ds);
      sent += ds;
    }
    if (s->st == HK_OK && got < s->recv_len) {
      s->st = hk_link_recv_some(s->rx, in + got,
                                call_size(s, s->recv_len - got), &dr);
      got += dr;
    }
    if (s->st == HK_OK && ds == 0 && dr == 0)
      s->st = hk_link_wait(s->tx, sent < s->send_len, s->rx, got < s->recv_len,
                           &io, "in the test");
  }
  if (s->st == HK_OK)
    s->st = hk_link_drain(s->tx, &io, "in the test");
  snprintf(s->err, sizeof s->err, "%s", hk_last_error());
  s->bad_at = SIZE_MAX;
  for (size_t i = 0; i < got; i++)
    if (in[i] != link_pump_byte(1 - s->id, i)) {
      s->bad_at = i;
      break;
    }
  free(out);
  free(in);
  return NULL;
}

void link_pump_run(link_side *a, link_side *b, size_t len_a, size_t len_b,
                   size_t max_call, uint32_t seed, const char *what) {
  a->id = 0;
  b->id = 1;
  a->send_len = b->recv_len = len_a;
  b->send_len = a->recv_len = len_b;
  a->max_call = b->max_call = max_call;
  a->seed = seed;
  b->seed = seed * 7 + 1;
  pthread_t t;
  pthread_create(&t, NULL, side_main, b);
  side_main(a);
  pthread_join(t, NULL);
  link_side *s[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    if (s[i]->st != HK_OK)
      fail_msg("%s side %d: %s", what, i, s[i]->err);
    if (s[i]->bad_at != SIZE_MAX)
      fail_msg("%s side %d: byte %zu differs", what, i, s[i]->bad_at);
  }
}

hk_status link_pump_recv_until_error(hk_link *l, hk_io *io, size_t *got) {
  uint8_t buf[100];
  size_t done = 0;
  hk_status st = HK_OK;
  *got = 0;
  while (st == HK_OK) {
    st = hk_link_recv_some(l, buf, sizeof buf, &done);
    *got += done;
    if (st == HK_OK && done == 0)
      st = hk_link_wait(l, 0, l, 1, io, "in the test");
  }
  return st;
}
