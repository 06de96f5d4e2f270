/* Unit tests of the wire codec: every message type round-trips, and the
 * decoder rejects truncated, oversized and malformed frames. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "coordinator/wire.h"

static void encode(const hk_msg *m, hk_buf *b) {
  hk_buf_clear(b);
  assert_int_equal(hk_wire_encode(m, b), HK_OK);
}

static void test_requests_roundtrip(void **state) {
  (void)state;
  hk_wire_request reqs[3] = {0};
  for (int i = 0; i < 3; i++) {
    reqs[i].coll = HK_COLL_ALLREDUCE;
    reqs[i].dtype = (uint8_t)(HK_FLOAT16 + i);
    reqs[i].op = HK_MAX;
    reqs[i].mem = (uint8_t)i; /* host, device, mixed */
    reqs[i].count = ((uint64_t)1 << 33) + (uint64_t)i;
    snprintf(reqs[i].name, sizeof reqs[i].name, "layer%d/grad", i);
  }
  reqs[2].coll = HK_COLL_BROADCAST;
  reqs[2].root = 7;
  reqs[1].prescale = 0.5;
  reqs[1].postscale = -3.25;
  reqs[1].set = 3;
  reqs[1].ndims = 3;
  reqs[1].shape[0] = 17;
  reqs[1].shape[1] = (int64_t)1 << 40;
  reqs[1].shape[2] = 0;
  uint32_t bits[3] = {0, 7, 1000};
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.shutdown = 1;
  m.u.requests.n = 3;
  m.u.requests.reqs = reqs;
  m.u.requests.nbits = 3;
  m.u.requests.bits = bits;
  hk_buf b = {0};
  encode(&m, &b);
  hk_msg d;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.type, HK_MSG_REQUESTS);
  assert_int_equal(d.u.requests.shutdown, 1);
  assert_int_equal(d.u.requests.n, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(d.u.requests.reqs[i].coll, reqs[i].coll);
    assert_int_equal(d.u.requests.reqs[i].dtype, reqs[i].dtype);
    assert_int_equal(d.u.requests.reqs[i].op, reqs[i].op);
    assert_int_equal(d.u.requests.reqs[i].mem, reqs[i].mem);
    assert_int_equal(d.u.requests.reqs[i].root, reqs[i].root);
    assert_true(d.u.requests.reqs[i].count == reqs[i].count);
    assert_string_equal(d.u.requests.reqs[i].name, reqs[i].name);
    assert_true(d.u.requests.reqs[i].prescale == reqs[i].prescale);
    assert_true(d.u.requests.reqs[i].postscale == reqs[i].postscale);
    assert_int_equal(d.u.requests.reqs[i].set, reqs[i].set);
    assert_int_equal(d.u.requests.reqs[i].ndims, reqs[i].ndims);
    for (int k = 0; k < reqs[i].ndims; k++)
      assert_true(d.u.requests.reqs[i].shape[k] == reqs[i].shape[k]);
  }
  assert_int_equal(d.u.requests.nbits, 3);
  assert_int_equal(d.u.requests.bits[2], 1000);
  hk_msg_free(&d);
  hk_buf_free(&b);
}

static void test_responses_roundtrip(void **state) {
  (void)state;
  hk_wire_response rs[3] = {
      {.status = HK_OK, .cache_bit = HK_WIRE_NO_BIT},
      {.status = HK_ERR_MISMATCH, .cache_bit = HK_WIRE_NO_BIT},
      {.status = HK_OK, .flags = HK_RESP_CACHED, .cache_bit = 41}};
  strcpy(rs[0].name, "a");
  strcpy(rs[1].name, "grad.w");
  rs[1].reason = "tensor 'grad.w': count 16 on rank 0, 12 on rank 1";
  uint32_t inval[2] = {3, 9};
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.answer = 1;
  m.u.responses.shutdown_rank = -1;
  m.u.responses.abort_status = HK_ERR_STALLED;
  m.u.responses.abort_reason = "tensor 'w' stalled";
  m.u.responses.ninval = 2;
  m.u.responses.inval = inval;
  m.u.responses.n = 3;
  m.u.responses.resps = rs;
  hk_buf b = {0};
  encode(&m, &b);
  hk_msg d;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.answer, 1);
  assert_int_equal(d.u.responses.shutdown_rank, -1);
  assert_int_equal(d.u.responses.abort_status, HK_ERR_STALLED);
  assert_string_equal(d.u.responses.abort_reason, "tensor 'w' stalled");
  assert_int_equal(d.u.responses.ninval, 2);
  assert_int_equal(d.u.responses.inval[1], 9);
  assert_int_equal(d.u.responses.n, 3);
  assert_null(d.u.responses.resps[0].reason);
  assert_string_equal(d.u.responses.resps[1].name, "grad.w");
  assert_string_equal(d.u.responses.resps[1].reason, rs[1].reason);
  assert_int_equal(d.u.responses.resps[1].status, HK_ERR_MISMATCH);
  assert_int_equal(d.u.responses.resps[2].flags, HK_RESP_CACHED);
  assert_int_equal(d.u.responses.resps[2].cache_bit, 41);
  assert_string_equal(d.u.responses.resps[2].name, "");
  hk_msg_free(&d);
  /* the answer byte sits at HK_WIRE_ANSWER_OFFSET: rank 0 encodes a
   * broadcast once and sets it per recipient; only 0 and 1 decode */
  assert_int_equal(b.data[HK_WIRE_ANSWER_OFFSET], 1);
  b.data[HK_WIRE_ANSWER_OFFSET] = 0;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.answer, 0);
  hk_msg_free(&d);
  b.data[HK_WIRE_ANSWER_OFFSET] = 2;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "answer flag"));
  /* a cached response that also names a tensor is malformed */
  strcpy(rs[2].name, "x");
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "cached response names"));
  /* invalidated bits must ascend */
  inval[1] = 3;
  rs[2].name[0] = '\0';
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "not ascending"));
  hk_buf_free(&b);
}

/* Process sets on the wire: a RESPONSES says whose responses and cache
 * bits it carries; a REQUESTS says each cache bit's set, as runs (a set,
 * its count, its bits): bits without sets are the world's, and the
 * decoder wants the runs' sets ascending, each run's bits ascending and
 * the counts within the frame. The add and the remove are collectives. */
static void test_process_sets(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.set = 5;
  m.u.responses.shutdown_rank = -1;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.set, 5);
  hk_msg_free(&d);
  b.data[HK_WIRE_ANSWER_OFFSET + 4] = 0x80; /* a negative set */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "process set"));

  hk_wire_request req = {.coll = HK_COLL_SET_REMOVE, .count = 4};
  strcpy(req.name, "hk.process_set.0");
  uint32_t bits[5] = {2, 9, 0, 1, 7};
  int32_t sets[5] = {0, 0, 3, 3, 8};
  m = (hk_msg){.type = HK_MSG_REQUESTS};
  m.u.requests.n = 1;
  m.u.requests.reqs = &req;
  m.u.requests.nbits = 5;
  m.u.requests.bits = bits;
  m.u.requests.bit_sets = sets;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.requests.reqs[0].coll, HK_COLL_SET_REMOVE);
  assert_int_equal(d.u.requests.nbits, 5);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(d.u.requests.bits[i], bits[i]);
    assert_int_equal(d.u.requests.bit_sets[i], sets[i]);
  }
  hk_msg_free(&d);
  /* 3 runs of 4 + 4 bytes each, and 4 per bit: after the request, the
   * sample flag last */
  const size_t runs_at = b.len - 1 - (4 + 3 * 8 + 5 * 4);
  assert_int_equal(b.data[runs_at], 3);
  m.u.requests.bit_sets = NULL; /* every bit the world's: one run */
  bits[2] = 10;
  bits[3] = 11;
  bits[4] = 12;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.requests.nbits, 5);
  assert_int_equal(d.u.requests.bit_sets[4], 0);
  assert_int_equal(d.u.requests.bits[4], 12);
  hk_msg_free(&d);
  /* sets out of order, bits out of order within a set, a count past the
   * frame */
  m.u.requests.bit_sets = sets;
  sets[4] = 1;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "out of order"));
  sets[4] = 8;
  encode(&m, &b); /* a set in two runs: the third run's set made 3 */
  /* from the end: the sample flag, the third run's bit, count and set */
  const size_t third_at = b.len - 1 - 4 - 4 - 4;
  assert_int_equal(b.data[third_at], 8);
  b.data[third_at] = 3;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "out of order"));
  bits[3] = 1;
  bits[2] = 5;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "not ascending"));
  bits[2] = 0;
  encode(&m, &b);
  const size_t count_at = b.len - 1 - (4 + 3 * 8 + 5 * 4) + 4 + 4;
  assert_int_equal(b.data[count_at], 2); /* the first run's count */
  b.data[count_at] = 200;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "do not fit"));
  hk_buf_free(&b);
}

static void test_small_messages_roundtrip(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg reg = {.type = HK_MSG_REGISTER};
  reg.u.reg.rank = 3;
  reg.u.reg.size = 4;
  reg.u.reg.pid = 4242;
  reg.u.reg.port = 51234;
  strcpy(reg.u.reg.host, "127.0.0.1");
  encode(&reg, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.reg.rank, 3);
  assert_int_equal(d.u.reg.port, 51234);
  assert_string_equal(d.u.reg.host, "127.0.0.1");
  hk_msg_free(&d);

  hk_wire_peer peers[2] = {{"127.0.0.1", 1000}, {"hk2", 65535}};
  hk_msg pm = {.type = HK_MSG_PEERS};
  pm.u.peers.n = 2;
  pm.u.peers.peers = peers;
  encode(&pm, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.peers.n, 2);
  assert_string_equal(d.u.peers.peers[1].host, "hk2");
  assert_int_equal(d.u.peers.peers[1].port, 65535);
  hk_msg_free(&d);

  hk_msg ab = {.type = HK_MSG_ABORT};
  ab.u.abort.rank = 2;
  ab.u.abort.exit_code = -1;
  ab.u.abort.signal = 9;
  strcpy(ab.u.abort.reason, "rank 2 was killed by signal 9");
  encode(&ab, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.abort.signal, 9);
  assert_string_equal(d.u.abort.reason, "rank 2 was killed by signal 9");
  hk_msg_free(&d);
  hk_buf_free(&b);
}

/* HELLO names the data connection's stream (HK_SOCKETS_PER_PEER) and the
 * stripes the sender's links use; the decoder bounds the index by the
 * count, the count by the limit and the stripes by the count. */
static void test_hello_streams(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg h = {.type = HK_MSG_HELLO};
  h.u.hello.rank = 5;
  h.u.hello.channel = HK_CHANNEL_DATA;
  h.u.hello.stream = 2;
  h.u.hello.streams = 3;
  h.u.hello.stripes = 2;
  encode(&h, &b);
  assert_int_equal(b.len, HK_WIRE_HEADER_LEN + 8);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.hello.rank, 5);
  assert_int_equal(d.u.hello.channel, HK_CHANNEL_DATA);
  assert_int_equal(d.u.hello.stream, 2);
  assert_int_equal(d.u.hello.streams, 3);
  assert_int_equal(d.u.hello.stripes, 2);
  hk_msg_free(&d);
  const struct {
    uint8_t channel, stream, streams, stripes;
    const char *needle;
  } bad[] = {
      {HK_CHANNEL_DATA, 3, 3, 1, "stream index 3 is not below"},
      {HK_CHANNEL_DATA, 0, 0, 1, "stream count 0 out of range"},
      {HK_CHANNEL_DATA, 0, HK_WIRE_MAX_STREAMS + 1, 1, "stream count 9"},
      {HK_CHANNEL_CONTROL, 0, 2, 1, "stream count 2 out of range"},
      {HK_CHANNEL_DATA, 0, 2, 0, "stripe count 0 is not 1 to the stream"},
      {HK_CHANNEL_DATA, 0, 2, 3, "stripe count 3 is not 1 to the stream"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    h.u.hello.channel = bad[i].channel;
    h.u.hello.stream = bad[i].stream;
    h.u.hello.streams = bad[i].streams;
    h.u.hello.stripes = bad[i].stripes;
    encode(&h, &b);
    assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
    if (!strstr(hk_last_error(), bad[i].needle))
      fail_msg("case %zu: '%s' lacks '%s'", i, hk_last_error(), bad[i].needle);
  }
  /* a HELLO of the old length (no stream fields) is truncated */
  h.u.hello.stream = 0;
  h.u.hello.streams = 1;
  h.u.hello.stripes = 1;
  encode(&h, &b);
  b.data[4] -= 3;
  assert_int_equal(hk_wire_decode(b.data, b.len - 3, &d), HK_ERR_PROTOCOL);
  hk_buf_free(&b);
}

/* GOODBYE {rank}: round-trips; a rank outside [0, HK_WIRE_MAX_RANKS), a
 * short or long payload, and the next (unknown) type are rejected. */
static void test_goodbye(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg gb = {.type = HK_MSG_GOODBYE};
  gb.u.goodbye.rank = 65535;
  encode(&gb, &b);
  assert_int_equal(b.len, HK_WIRE_HEADER_LEN + 4);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.type, HK_MSG_GOODBYE);
  assert_int_equal(d.u.goodbye.rank, 65535);
  hk_msg_free(&d);

  static const int32_t bad[] = {-1, 65536, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gb.u.goodbye.rank = bad[i];
    encode(&gb, &b);
    assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
    assert_non_null(strstr(hk_last_error(), "out of range"));
  }

  gb.u.goodbye.rank = 1;
  encode(&gb, &b);
  for (size_t cut = 0; cut < b.len; cut++)
    assert_int_equal(hk_wire_decode(b.data, cut, &d), HK_ERR_PROTOCOL);
  b.data[4] = 3; /* a 3-byte payload: the rank is cut short */
  assert_int_equal(hk_wire_decode(b.data, b.len - 1, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "truncated"));
  b.data[4] = 5; /* one byte more than the rank */
  assert_int_equal(hk_buf_append(&b, "x", 1), HK_OK);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "trailing"));
  b.data[4] = 4;
  b.data[3] = HK_MSG_LAST + 1;
  assert_int_equal(hk_wire_decode(b.data, b.len - 1, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "unknown message type"));
  hk_buf_free(&b);
}

/* AGENT {base, nslots, size, host} and EXIT {slot, pid, status, signal}
 * (hkrun's agents): round-trip; out-of-range fields are rejected naming
 * them. */
static void test_agent_and_exit(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg a = {.type = HK_MSG_AGENT};
  a.u.agent.base = -1;
  a.u.agent.nslots = 2;
  strcpy(a.u.agent.host, "10.0.0.2");
  encode(&a, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.type, HK_MSG_AGENT);
  assert_int_equal(d.u.agent.base, -1);
  assert_int_equal(d.u.agent.nslots, 2);
  assert_int_equal(d.u.agent.size, 0);
  assert_string_equal(d.u.agent.host, "10.0.0.2");
  hk_msg_free(&d);
  a.u.agent.nslots = -1;
  encode(&a, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "slot count -1 out of range"));

  hk_msg e = {.type = HK_MSG_EXIT};
  e.u.exit.slot = 3;
  e.u.exit.pid = 812;
  e.u.exit.signal = 9;
  encode(&e, &b);
  assert_int_equal(b.len, HK_WIRE_HEADER_LEN + 16);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.type, HK_MSG_EXIT);
  assert_int_equal(d.u.exit.slot, 3);
  assert_int_equal(d.u.exit.pid, 812);
  assert_int_equal(d.u.exit.status, 0);
  assert_int_equal(d.u.exit.signal, 9);
  hk_msg_free(&d);
  e.u.exit.status = 256;
  encode(&e, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "exit status 256 out of range"));
  hk_buf_free(&b);
}

/* Every strict prefix of a valid frame is rejected as truncated. */
static void test_truncated_rejected(void **state) {
  (void)state;
  hk_wire_request req = {.coll = HK_COLL_ALLREDUCE, .count = 5};
  strcpy(req.name, "w");
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.n = 1;
  m.u.requests.reqs = &req;
  hk_buf b = {0};
  encode(&m, &b);
  for (size_t cut = 0; cut < b.len; cut++) {
    hk_msg d;
    assert_int_equal(hk_wire_decode(b.data, cut, &d), HK_ERR_PROTOCOL);
  }
  /* A frame whose header claims fewer bytes than the payload holds. */
  uint8_t *copy = malloc(b.len);
  memcpy(copy, b.data, b.len);
  copy[4]--;
  hk_msg d;
  assert_int_equal(hk_wire_decode(copy, b.len - 1, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "truncated"));
  /* Trailing garbage after a complete message. */
  assert_int_equal(hk_buf_append(&b, "x", 1), HK_OK);
  b.data[4]++;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "trailing"));
  free(copy);
  hk_buf_free(&b);
}

/* hk_wire_request_size is what one request by name adds to a REQUESTS,
 * and one cache bit adds HK_WIRE_BIT_BYTES at most. */
static void test_request_size(void **state) {
  (void)state;
  hk_wire_request req[2] = {{.coll = HK_COLL_ALLREDUCE, .count = 5},
                            {.coll = HK_COLL_ALLGATHER, .ndims = 3}};
  memset(req[0].name, 'n', 480);
  strcpy(req[1].name, "short");
  strcpy(req[1].group, "a group");
  uint32_t bits[2] = {7, 9};
  int32_t sets[2] = {0, 3};
  hk_msg m = {.type = HK_MSG_REQUESTS};
  hk_buf b = {0};
  encode(&m, &b);
  size_t empty = b.len;
  m.u.requests.n = 2;
  m.u.requests.reqs = req;
  hk_buf_clear(&b);
  encode(&m, &b);
  assert_int_equal(b.len - empty, hk_wire_request_size(&req[0]) +
                                      hk_wire_request_size(&req[1]));
  m.u.requests.n = 0;
  m.u.requests.nbits = 2;
  m.u.requests.bits = bits;
  m.u.requests.bit_sets = sets; /* two runs: the most a bit costs */
  hk_buf_clear(&b);
  encode(&m, &b);
  assert_int_equal(b.len - empty, 2 * HK_WIRE_BIT_BYTES);
  hk_buf_free(&b);
}

static void test_oversized_rejected(void **state) {
  (void)state;
  uint8_t hdr[HK_WIRE_HEADER_LEN] = {'H', 'K', HK_WIRE_VERSION,
                                     HK_MSG_REQUESTS};
  uint32_t len = HK_WIRE_MAX_PAYLOAD + 1;
  for (int i = 0; i < 4; i++)
    hdr[4 + i] = (uint8_t)(len >> (8 * i));
  uint8_t type;
  uint32_t payload;
  assert_int_equal(hk_wire_header(hdr, &type, &payload), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "exceeds"));
  /* A request count far larger than the bytes that follow: no huge
   * allocation, a clean error. */
  uint8_t frame[HK_WIRE_HEADER_LEN + 5] = {
      'H',  'K', HK_WIRE_VERSION, HK_MSG_REQUESTS, 5, 0, 0, 0, 0, 0xff, 0xff,
      0xff, 0xff};
  hk_msg d;
  assert_int_equal(hk_wire_decode(frame, sizeof frame, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "cannot fit"));
  /* A tensor name longer than HK_MAX_NAME_LEN cannot be encoded. */
  hk_wire_request req = {.coll = HK_COLL_ALLREDUCE};
  memset(req.name, 'a', sizeof req.name);
  req.name[sizeof req.name - 1] = '\0';
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.n = 1;
  m.u.requests.reqs = &req;
  hk_buf b = {0};
  assert_int_equal(hk_wire_encode(&m, &b), HK_OK); /* exactly the limit */
  /* Patch the name length on the wire to one over the limit. */
  /* (header, n, sample flag, coll/dtype/op/mem, root, count, row size,
   * scales, group size and index, process set, no dimensions) */
  size_t name_len_at =
      HK_WIRE_HEADER_LEN + 1 + 4 + 4 + 4 + 8 + 8 + 16 + 8 + 4 + 1;
  uint16_t over = HK_MAX_NAME_LEN + 1;
  b.data[name_len_at] = (uint8_t)over;
  b.data[name_len_at + 1] = (uint8_t)(over >> 8);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "tensor name"));
  hk_buf_free(&b);
}

static void test_bad_fields_rejected(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_wire_request req = {.coll = HK_COLL_ALLREDUCE, .dtype = HK_FLOAT32};
  strcpy(req.name, "t");
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.n = 1;
  m.u.requests.reqs = &req;
  encode(&m, &b);
  /* magic, version, type */
  const struct {
    size_t at;
    uint8_t value;
    const char *needle;
  } cases[] = {
      {0, 'X', "magic"},
      {2, HK_WIRE_VERSION + 1, "version"},
      {3, 99, "type"},
      {HK_WIRE_HEADER_LEN + 5, HK_COLL_LAST + 1, "collective"},
      {HK_WIRE_HEADER_LEN + 6, 200, "dtype"},
      {HK_WIRE_HEADER_LEN + 6, HK_BOOL + 1, "dtype"},
      {HK_WIRE_HEADER_LEN + 7, 77, "op"},
      {HK_WIRE_HEADER_LEN + 8, HK_WIRE_MEM_OTHER_DEVICE + 1, "memory kind"},
      {HK_WIRE_HEADER_LEN + 0, 2, "shutdown"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t saved = b.data[cases[i].at];
    b.data[cases[i].at] = cases[i].value;
    assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
    assert_non_null(strstr(hk_last_error(), cases[i].needle));
    b.data[cases[i].at] = saved;
  }
  /* the last dtypes of the enum are known */
  for (int dt = HK_INT16; dt <= HK_BOOL; dt++) {
    b.data[HK_WIRE_HEADER_LEN + 6] = (uint8_t)dt;
    assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
    assert_int_equal(d.u.requests.reqs[0].dtype, dt);
    hk_msg_free(&d);
  }
  b.data[HK_WIRE_HEADER_LEN + 6] = HK_FLOAT32;
  /* the process set and the number of dimensions (after root, count, row
   * size, the scales and the group: 4 + 8 + 8 + 16 + 8 bytes) */
  const size_t set_at = HK_WIRE_HEADER_LEN + 9 + 4 + 8 + 8 + 16 + 8;
  b.data[set_at + 3] = 0x80; /* a negative set */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "process set"));
  b.data[set_at + 3] = 0;
  b.data[set_at + 4] = HK_WIRE_MAX_DIMS + 1;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "dimensions"));
  b.data[set_at + 4] = 0;
  /* a NUL inside a string (the name "t" is the byte before the empty group
   * name, the 4-byte bit count and the sample flag at the end) */
  b.data[b.len - 8] = 0;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "NUL"));
  hk_buf_free(&b);
}

/* A telemetry sample rides on REQUESTS (issue 15): every field comes back,
 * and a sample is only there when the flag says so. */
static void test_requests_sample(void **state) {
  (void)state;
  hk_msg m = {.type = HK_MSG_REQUESTS};
  m.u.requests.has_sample = 1;
  hk_wire_sample *s = &m.u.requests.sample;
  *s = (hk_wire_sample){.seq = 9,
                        .gpu_ok = 1,
                        .util_pct = 97,
                        .gpu_index = 5,
                        .temp_c = 87,
                        .sm_mhz = 1410,
                        .sm_max_mhz = 1980,
                        .power_mw = 300500,
                        .power_limit_mw = 400000,
                        .mem_used = 81ull << 30,
                        .throttle = 0x60,
                        .ncpu = 96,
                        .load1 = 3.5,
                        .cpu_s = 12.25,
                        .run_delay_s = 0.5,
                        .t_s = 1234.5};
  hk_buf b = {0};
  encode(&m, &b);
  size_t with = b.len;
  hk_msg d;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.requests.has_sample, 1);
  assert_memory_equal(&d.u.requests.sample, s, sizeof *s);
  hk_msg_free(&d);
  /* bad values are named */
  const struct {
    size_t at; /* from the sample's first byte */
    uint8_t value;
    const char *needle;
  } cases[] = {{4, 2, "sample GPU flag"}, {5, 101, "GPU utilisation"}};
  size_t first = with - 76;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t saved = b.data[first + cases[i].at];
    b.data[first + cases[i].at] = cases[i].value;
    assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
    assert_non_null(strstr(hk_last_error(), cases[i].needle));
    b.data[first + cases[i].at] = saved;
  }
  b.data[with - 1] = 0xff; /* t_s's sign and exponent: a NaN */
  b.data[with - 2] = 0xff;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "sample time"));
  b.data[first - 1] = 2;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "sample flag 2"));
  /* without a sample: 76 bytes fewer, flag 0 */
  m.u.requests.has_sample = 0;
  encode(&m, &b);
  assert_int_equal(b.len, with - 76);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.requests.has_sample, 0);
  hk_msg_free(&d);
  hk_buf_free(&b);
}

/* MONITOR carries the live table to hkrun (issue 15). */
/* The autotuner's change of settings rides near the end of a RESPONSES
 * (28 bytes when present, one flag byte when not), before the joiners
 * flag (the last byte); the decoder checks its number, threshold, cycle
 * time, hierarchical, sockets per peer, staging chunk and compression,
 * and that the joiners flag is 0 or 1. */
static void test_responses_tune(void **state) {
  (void)state;
  hk_buf b = {0};
  hk_msg d;
  hk_msg m = {.type = HK_MSG_RESPONSES};
  m.u.responses.shutdown_rank = -1;
  encode(&m, &b);
  const size_t plain = b.len;
  assert_int_equal(b.data[plain - 2], 0); /* no tune */
  assert_int_equal(b.data[plain - 1], 0); /* no joiners */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.has_tune, 0);
  assert_int_equal(d.u.responses.joiners, 0);
  hk_msg_free(&d);
  m.u.responses.joiners = 1;
  encode(&m, &b);
  assert_int_equal(b.len, plain);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.joiners, 1);
  hk_msg_free(&d);
  b.data[b.len - 1] = 2;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "joiners flag 2 is not 0 or 1"));
  m.u.responses.joiners = 0;
  m.u.responses.has_tune = 1;
  m.u.responses.tune = (hk_wire_tune){.seq = 3,
                                      .fusion_threshold = 4 << 20,
                                      .cycle_time_ms = 2.5,
                                      .hierarchical = -1,
                                      .sockets_per_peer = 4,
                                      .staging_chunk_bytes = 1 << 20,
                                      .compression = 2};
  encode(&m, &b);
  assert_int_equal(b.len, plain + 27);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.u.responses.has_tune, 1);
  assert_int_equal(d.u.responses.tune.seq, 3);
  assert_int_equal(d.u.responses.tune.fusion_threshold, 4 << 20);
  assert_true(d.u.responses.tune.cycle_time_ms == 2.5);
  assert_int_equal(d.u.responses.tune.hierarchical, -1);
  assert_int_equal(d.u.responses.tune.sockets_per_peer, 4);
  assert_int_equal(d.u.responses.tune.staging_chunk_bytes, 1 << 20);
  assert_int_equal(d.u.responses.tune.compression, 2);
  hk_msg_free(&d);
  b.data[b.len - 2] = 3; /* no such compression */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(
      strstr(hk_last_error(), "tuned compression 3 is not 0, 1 or 2"));
  b.data[b.len - 2] = 2;
  b.data[b.len - 7] = 0; /* no sockets */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(
      strstr(hk_last_error(), "tuned sockets per peer 0 is not 1 to 8"));
  b.data[b.len - 7] = 9;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  b.data[b.len - 7] = 4;
  m.u.responses.tune.staging_chunk_bytes = 0;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(
      strstr(hk_last_error(), "tuned staging chunk of 0 bytes out of range"));
  m.u.responses.tune.staging_chunk_bytes = HK_WIRE_MAX_TUNE_STAGING + 1;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  m.u.responses.tune.staging_chunk_bytes = 1 << 20;
  encode(&m, &b);
  b.data[b.len - 8] = 3; /* hierarchical 2: no such setting */
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "tuned hierarchical allreduce"));
  for (size_t cut = plain; cut < b.len; cut++)
    assert_int_equal(hk_wire_decode(b.data, cut, &d), HK_ERR_PROTOCOL);
  m.u.responses.tune.seq = 0;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "tune number"));
  m.u.responses.tune.seq = 1;
  m.u.responses.tune.fusion_threshold = HK_WIRE_MAX_TUNE_THRESHOLD + 1;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "tuned fusion threshold"));
  m.u.responses.tune.fusion_threshold = 0;
  m.u.responses.tune.cycle_time_ms = -1;
  encode(&m, &b);
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "tuned cycle time"));
  hk_buf_free(&b);
}

static void test_monitor_roundtrip(void **state) {
  (void)state;
  hk_msg m = {.type = HK_MSG_MONITOR};
  m.u.monitor.text = "rank 0 host a\nrank 1 host b\n";
  hk_buf b = {0};
  encode(&m, &b);
  hk_msg d;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_OK);
  assert_int_equal(d.type, HK_MSG_MONITOR);
  assert_string_equal(d.u.monitor.text, m.u.monitor.text);
  hk_msg_free(&d);
  for (size_t cut = 0; cut < b.len; cut++)
    assert_int_equal(hk_wire_decode(b.data, cut, &d), HK_ERR_PROTOCOL);
  b.data[b.len - 1] = 0;
  assert_int_equal(hk_wire_decode(b.data, b.len, &d), HK_ERR_PROTOCOL);
  assert_non_null(strstr(hk_last_error(), "NUL"));
  hk_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_requests_sample),
      cmocka_unit_test(test_monitor_roundtrip),
      cmocka_unit_test(test_requests_roundtrip),
      cmocka_unit_test(test_request_size),
      cmocka_unit_test(test_process_sets),
      cmocka_unit_test(test_responses_roundtrip),
      cmocka_unit_test(test_responses_tune),
      cmocka_unit_test(test_small_messages_roundtrip),
      cmocka_unit_test(test_hello_streams),
      cmocka_unit_test(test_goodbye),
      cmocka_unit_test(test_agent_and_exit),
      cmocka_unit_test(test_truncated_rejected),
      cmocka_unit_test(test_oversized_rejected),
      cmocka_unit_test(test_bad_fields_rejected),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
