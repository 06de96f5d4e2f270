/*
 * wire.c - encoder and the one bounds-checking decoder for hk's messages.
 * Layout: see wire.h.
 */
#include "coordinator/wire.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* ---------- encoding ---------- */

typedef struct writer {
  hk_buf *out; /* NULL: only count the bytes (hk_wire_request_size) */
  hk_status st;
  size_t counted;
} writer;

static void put(writer *w, const void *p, size_t n) {
  if (!w->out)
    w->counted += n;
  else if (w->st == HK_OK)
    w->st = hk_buf_append(w->out, p, n);
}

static void put_u8(writer *w, uint8_t v) { put(w, &v, 1); }

static void put_u16(writer *w, uint16_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(w, b, 2);
}

static void put_u32(writer *w, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  put(w, b, 4);
}

static void put_u64(writer *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  put(w, b, 8);
}

static void put_i32(writer *w, int32_t v) { put_u32(w, (uint32_t)v); }

static void put_f64(writer *w, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  put_u64(w, u);
}

static void put_str(writer *w, const char *s, size_t max, const char *what) {
  size_t n = s ? strlen(s) : 0;
  if (n > max) {
    if (w->st == HK_OK)
      w->st = hk_fail(HK_ERR_PROTOCOL, "%s is %zu bytes, over the limit %zu",
                      what, n, max);
    return;
  }
  put_u16(w, (uint16_t)n);
  put(w, s, n);
}

static void put_sample(writer *w, const hk_wire_sample *s) {
  put_u32(w, s->seq);
  put_u8(w, s->gpu_ok);
  put_u8(w, s->util_pct);
  put_u16(w, s->gpu_index);
  put_u16(w, s->temp_c);
  put_u32(w, s->sm_mhz);
  put_u32(w, s->sm_max_mhz);
  put_u32(w, s->power_mw);
  put_u32(w, s->power_limit_mw);
  put_u64(w, s->mem_used);
  put_u64(w, s->throttle);
  put_u16(w, s->ncpu);
  put_f64(w, s->load1);
  put_f64(w, s->cpu_s);
  put_f64(w, s->run_delay_s);
  put_f64(w, s->t_s);
}

static void put_request(writer *w, const hk_wire_request *r) {
  put_u8(w, r->coll);
  put_u8(w, r->dtype);
  put_u8(w, r->op);
  put_u8(w, r->mem);
  put_i32(w, r->root);
  put_u64(w, r->count);
  put_u64(w, r->row_elems);
  put_f64(w, r->prescale);
  put_f64(w, r->postscale);
  put_u32(w, r->group_size);
  put_u32(w, r->group_index);
  put_i32(w, r->set);
  put_u8(w, r->ndims);
  for (unsigned d = 0; d < r->ndims && d < HK_WIRE_MAX_DIMS; d++)
    put_u64(w, (uint64_t)r->shape[d]);
  put_str(w, r->name, HK_MAX_NAME_LEN, "tensor name");
  put_str(w, r->group, HK_MAX_NAME_LEN, "group name");
}

/* The cache bits of a REQUESTS as runs: u32 runs, then per run the set
 * (i32), its bit count (u32) and its bits (u32 each); a run for each
 * change of set along bit_sets (NULL: every bit of the world). */
static void put_bits(writer *w, const uint32_t *bits, const int32_t *sets,
                     uint32_t n) {
  uint32_t runs = 0;
  for (uint32_t i = 0; i < n; i++)
    runs += i == 0 || (sets && sets[i] != sets[i - 1]);
  put_u32(w, runs);
  for (uint32_t i = 0; i < n;) {
    const int32_t set = sets ? sets[i] : 0;
    uint32_t k = i;
    while (k < n && (sets ? sets[k] : 0) == set)
      k++;
    put_i32(w, set);
    put_u32(w, k - i);
    for (; i < k; i++)
      put_u32(w, bits[i]);
  }
}

size_t hk_wire_request_size(const hk_wire_request *r) {
  writer w = {NULL, HK_OK, 0};
  put_request(&w, r);
  return w.counted;
}

hk_status hk_wire_encode(const hk_msg *m, hk_buf *out) {
  size_t start = out->len;
  writer w = {out, HK_OK, 0};
  uint8_t hdr[HK_WIRE_HEADER_LEN] = {'H', 'K', HK_WIRE_VERSION, m->type};
  put(&w, hdr, sizeof hdr); /* length patched below */
  switch (m->type) {
  case HK_MSG_REGISTER:
    put_i32(&w, m->u.reg.rank);
    put_i32(&w, m->u.reg.size);
    put_i32(&w, m->u.reg.pid);
    put_u16(&w, m->u.reg.port);
    put_str(&w, m->u.reg.host, HK_WIRE_MAX_HOST_LEN, "host name");
    break;
  case HK_MSG_PEERS:
    put_u32(&w, m->u.peers.n);
    for (uint32_t i = 0; i < m->u.peers.n; i++) {
      put_str(&w, m->u.peers.peers[i].host, HK_WIRE_MAX_HOST_LEN, "host name");
      put_u16(&w, m->u.peers.peers[i].port);
    }
    break;
  case HK_MSG_ABORT:
  case HK_MSG_RESET:
  case HK_MSG_JOIN:
    put_i32(&w, m->u.abort.rank);
    put_i32(&w, m->u.abort.exit_code);
    put_i32(&w, m->u.abort.signal);
    put_str(&w, m->u.abort.reason, HK_WIRE_MAX_REASON_LEN, "abort reason");
    break;
  case HK_MSG_HELLO:
    put_i32(&w, m->u.hello.rank);
    put_u8(&w, m->u.hello.channel);
    put_u8(&w, m->u.hello.stream);
    put_u8(&w, m->u.hello.streams);
    put_u8(&w, m->u.hello.stripes);
    break;
  case HK_MSG_GOODBYE:
    put_i32(&w, m->u.goodbye.rank);
    break;
  case HK_MSG_AGENT:
    put_i32(&w, m->u.agent.base);
    put_i32(&w, m->u.agent.nslots);
    put_i32(&w, m->u.agent.size);
    put_str(&w, m->u.agent.host, HK_WIRE_MAX_HOST_LEN, "host name");
    break;
  case HK_MSG_EXIT:
    put_i32(&w, m->u.exit.slot);
    put_i32(&w, m->u.exit.pid);
    put_i32(&w, m->u.exit.status);
    put_i32(&w, m->u.exit.signal);
    break;
  case HK_MSG_REQUESTS:
    put_u8(&w, m->u.requests.shutdown);
    put_u32(&w, m->u.requests.n);
    for (uint32_t i = 0; i < m->u.requests.n; i++) {
      const hk_wire_request *r = &m->u.requests.reqs[i];
      put_request(&w, r);
    }
    put_bits(&w, m->u.requests.bits, m->u.requests.bit_sets,
             m->u.requests.nbits);
    put_u8(&w, m->u.requests.has_sample);
    if (m->u.requests.has_sample)
      put_sample(&w, &m->u.requests.sample);
    break;
  case HK_MSG_MONITOR:
    put_str(&w, m->u.monitor.text, HK_WIRE_MAX_MONITOR_LEN, "monitor text");
    break;
  case HK_MSG_RESPONSES:
    put_u8(&w, m->u.responses.answer); /* first: HK_WIRE_ANSWER_OFFSET */
    put_i32(&w, m->u.responses.set);
    put_i32(&w, m->u.responses.shutdown_rank);
    put_u16(&w, m->u.responses.abort_status);
    put_str(&w, m->u.responses.abort_reason, HK_WIRE_MAX_REASON_LEN,
            "abort reason");
    put_u32(&w, m->u.responses.ninval);
    for (uint32_t i = 0; i < m->u.responses.ninval; i++)
      put_u32(&w, m->u.responses.inval[i]);
    put_u32(&w, m->u.responses.n);
    for (uint32_t i = 0; i < m->u.responses.n; i++) {
      const hk_wire_response *r = &m->u.responses.resps[i];
      put_u16(&w, r->status);
      put_u8(&w, r->flags);
      put_u32(&w, r->cache_bit);
      put_str(&w, r->name, HK_MAX_NAME_LEN, "tensor name");
      put_str(&w, r->reason, HK_WIRE_MAX_REASON_LEN, "error reason");
      put_i32(&w, r->divisor);
      if (r->flags & HK_RESP_PARAMS) {
        if (!r->params) {
          if (w.st == HK_OK)
            w.st = hk_fail(HK_ERR_PROTOCOL, "response flagged with "
                                            "parameters carries none");
        } else {
          put_request(&w, r->params);
        }
      }
      put_u32(&w, r->ncounts);
      for (uint32_t k = 0; k < r->ncounts; k++)
        put_u64(&w, r->counts[k]);
    }
    put_u8(&w, m->u.responses.has_tune);
    if (m->u.responses.has_tune) {
      put_u32(&w, m->u.responses.tune.seq);
      put_u64(&w, m->u.responses.tune.fusion_threshold);
      put_f64(&w, m->u.responses.tune.cycle_time_ms);
      put_u8(&w, (uint8_t)(m->u.responses.tune.hierarchical + 1));
      put_u8(&w, m->u.responses.tune.sockets_per_peer);
      put_u32(&w, m->u.responses.tune.staging_chunk_bytes);
      put_u8(&w, m->u.responses.tune.compression);
    }
    put_u8(&w, m->u.responses.joiners);
    break;
  default:
    w.st = hk_fail(HK_ERR_PROTOCOL, "cannot encode message type %u",
                   (unsigned)m->type);
  }
  size_t payload = out->len - start - HK_WIRE_HEADER_LEN;
  if (w.st == HK_OK && payload > HK_WIRE_MAX_PAYLOAD)
    w.st = hk_fail(HK_ERR_PROTOCOL,
                   "message of %zu bytes exceeds the %u-byte "
                   "limit",
                   payload, HK_WIRE_MAX_PAYLOAD);
  if (w.st != HK_OK) {
    out->len = start;
    return w.st;
  }
  for (int i = 0; i < 4; i++)
    out->data[start + 4 + i] = (uint8_t)(payload >> (8 * i));
  return HK_OK;
}

/* ---------- decoding ---------- */

typedef struct reader {
  const uint8_t *p;
  size_t left;
  hk_status st;
} reader;

/* Every read goes through take(): it checks the remaining length first. */
static const uint8_t *take(reader *r, size_t n, const char *what) {
  if (r->st != HK_OK)
    return NULL;
  if (n > r->left) {
    r->st = hk_fail(HK_ERR_PROTOCOL,
                    "truncated message: %s needs %zu bytes, %zu left", what, n,
                    r->left);
    return NULL;
  }
  const uint8_t *p = r->p;
  r->p += n;
  r->left -= n;
  return p;
}

static void *alloc_array(reader *r, uint32_t n, size_t elem, size_t min_wire,
                         const char *what);
static void *alloc_array_raw(reader *r, uint32_t n, size_t elem,
                             size_t min_wire, const char *what);

static uint8_t get_u8(reader *r, const char *what) {
  const uint8_t *p = take(r, 1, what);
  return p ? p[0] : 0;
}

static uint16_t get_u16(reader *r, const char *what) {
  const uint8_t *p = take(r, 2, what);
  return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}

static uint32_t get_u32(reader *r, const char *what) {
  const uint8_t *p = take(r, 4, what);
  if (!p)
    return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}

static uint64_t get_u64(reader *r, const char *what) {
  const uint8_t *p = take(r, 8, what);
  if (!p)
    return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static int32_t get_i32(reader *r, const char *what) {
  return (int32_t)get_u32(r, what);
}

static double get_f64(reader *r, const char *what) {
  uint64_t u = get_u64(r, what);
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* Reads a u32 count and that many u32 values below `limit`, ascending. */
static uint32_t *get_u32_list(reader *r, uint32_t *n_out, uint32_t limit,
                              const char *what) {
  uint32_t n = get_u32(r, what);
  uint32_t *v = alloc_array(r, n, sizeof(uint32_t), 4, what);
  for (uint32_t i = 0; i < n && r->st == HK_OK; i++) {
    v[i] = get_u32(r, what);
    if (r->st == HK_OK && (v[i] >= limit || (i > 0 && v[i] <= v[i - 1])))
      r->st = hk_fail(HK_ERR_PROTOCOL,
                      "%s: value %u out of range or not ascending", what, v[i]);
  }
  *n_out = n;
  return v;
}

/* Reads a string into dst (capacity max+1), NUL-terminated. */
static void get_str(reader *r, char *dst, size_t max, const char *what) {
  dst[0] = '\0';
  uint16_t n = get_u16(r, what);
  if (r->st != HK_OK)
    return;
  if (n > max) {
    r->st = hk_fail(HK_ERR_PROTOCOL, "%s of %u bytes exceeds the limit %zu",
                    what, (unsigned)n, max);
    return;
  }
  const uint8_t *p = take(r, n, what);
  if (!p)
    return;
  if (memchr(p, '\0', n)) {
    r->st = hk_fail(HK_ERR_PROTOCOL, "%s contains a NUL byte", what);
    return;
  }
  memcpy(dst, p, n);
  dst[n] = '\0';
}

static void check(reader *r, int ok, const char *fmt, long long v) {
  if (r->st == HK_OK && !ok)
    r->st = hk_fail(HK_ERR_PROTOCOL, fmt, v);
}

/* A finite, non-negative double (a time or a load). */
static double get_amount(reader *r, const char *what) {
  double v = get_f64(r, what);
  if (r->st == HK_OK && !(v >= 0 && v <= 1e300))
    r->st = hk_fail(HK_ERR_PROTOCOL, "%s is negative or not finite", what);
  return v;
}

/* Reads put_bits' runs into bits and their sets (*n entries each): the
 * sets of the runs ascend, and the bits of a run ascend below
 * HK_WIRE_MAX_CACHE_BITS; at most HK_WIRE_MAX_CACHE_BITS bits in all. */
static void get_bits(reader *r, uint32_t **bits, int32_t **sets, uint32_t *n) {
  *bits = NULL;
  *sets = NULL;
  *n = 0;
  uint32_t runs = get_u32(r, "cache bit runs"), total = 0;
  /* smallest run on the wire: its set and count, 8 bytes */
  check(r, runs <= r->left / 8, "%lld cache bit runs do not fit", runs);
  /* every bit takes 4 bytes: what is left bounds them */
  const uint32_t cap = (uint32_t)(r->left / 4);
  if (r->st == HK_OK && runs && cap) {
    *bits = malloc((size_t)cap * sizeof **bits);
    *sets = malloc((size_t)cap * sizeof **sets);
    if (!*bits || !*sets)
      r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate %u cache bits", cap);
  }
  int32_t prev_set = -1;
  for (uint32_t k = 0; k < runs && r->st == HK_OK; k++) {
    const int32_t set = get_i32(r, "cache bit set");
    const uint32_t count = get_u32(r, "cache bit count");
    check(r, set > prev_set, "cache bit set %lld out of order", set);
    check(r, count > 0 && count <= cap - total && count <= r->left / 4,
          "%lld cache bits do not fit", count);
    for (uint32_t i = 0; i < count && r->st == HK_OK; i++) {
      uint32_t b = get_u32(r, "cache bit");
      check(r, b < HK_WIRE_MAX_CACHE_BITS && (i == 0 || b > (*bits)[total - 1]),
            "cache bit %lld out of range or not ascending", b);
      (*bits)[total] = b;
      (*sets)[total++] = set;
    }
    prev_set = set;
  }
  check(r, total <= HK_WIRE_MAX_CACHE_BITS, "%lld cache bits", total);
  *n = total;
}

static void get_sample(reader *r, hk_wire_sample *s) {
  s->seq = get_u32(r, "sample number");
  s->gpu_ok = get_u8(r, "sample GPU flag");
  check(r, s->gpu_ok <= 1, "sample GPU flag %lld is not 0 or 1", s->gpu_ok);
  s->util_pct = get_u8(r, "GPU utilisation");
  check(r, s->util_pct <= 100, "GPU utilisation %lld%% is over 100",
        s->util_pct);
  s->gpu_index = get_u16(r, "GPU index");
  s->temp_c = get_u16(r, "GPU temperature");
  s->sm_mhz = get_u32(r, "SM clock");
  s->sm_max_mhz = get_u32(r, "SM clock maximum");
  s->power_mw = get_u32(r, "power");
  s->power_limit_mw = get_u32(r, "power limit");
  s->mem_used = get_u64(r, "GPU memory used");
  s->throttle = get_u64(r, "throttle reasons");
  s->ncpu = get_u16(r, "CPU count");
  s->load1 = get_amount(r, "load average");
  s->cpu_s = get_amount(r, "CPU time");
  s->run_delay_s = get_amount(r, "run delay");
  s->t_s = get_amount(r, "sample time");
}

static void get_request(reader *r, hk_wire_request *q) {
  q->coll = get_u8(r, "collective");
  q->dtype = get_u8(r, "dtype");
  q->op = get_u8(r, "op");
  q->mem = get_u8(r, "memory kind");
  q->root = get_i32(r, "root");
  q->count = get_u64(r, "count");
  q->row_elems = get_u64(r, "row size");
  q->prescale = get_f64(r, "prescale");
  q->postscale = get_f64(r, "postscale");
  q->group_size = get_u32(r, "group size");
  q->group_index = get_u32(r, "group index");
  q->set = get_i32(r, "process set");
  q->ndims = get_u8(r, "dimensions");
  check(r, q->ndims <= HK_WIRE_MAX_DIMS, "%lld dimensions", q->ndims);
  for (unsigned d = 0; d < q->ndims && d < HK_WIRE_MAX_DIMS && r->st == HK_OK;
       d++) {
    uint64_t x = get_u64(r, "extent");
    check(r, x <= INT64_MAX, "extent %lld out of range", (long long)x);
    q->shape[d] = (int64_t)x;
  }
  get_str(r, q->name, HK_MAX_NAME_LEN, "tensor name");
  get_str(r, q->group, HK_MAX_NAME_LEN, "group name");
  check(r, q->coll >= HK_COLL_ALLREDUCE && q->coll <= HK_COLL_LAST,
        "unknown collective %lld", q->coll);
  check(r, hk_dtype_size((hk_dtype)q->dtype) != 0, "unknown dtype %lld",
        q->dtype);
  check(r, q->op <= HK_PRODUCT, "unknown op %lld", q->op);
  check(r, q->mem <= HK_WIRE_MEM_OTHER_DEVICE, "unknown memory kind %lld",
        q->mem);
  check(r, q->root >= 0 && q->root < HK_WIRE_MAX_RANKS,
        "root %lld out of range", q->root);
  check(r, q->name[0] != '\0', "empty tensor name%.0lld", 0);
  check(r, q->set >= 0, "process set %lld", q->set);
  check(r, q->group_size == 0 || q->group_index < q->group_size,
        "group index %lld out of range", q->group_index);
  check(r, (q->group_size == 0) == (q->group[0] == '\0'),
        "group name and size disagree%.0lld", 0);
}

/* Refuses an array count that cannot fit in what is left, so a forged
 * count never makes us allocate more than the frame could describe. */
static void *alloc_checked(reader *r, uint32_t n, size_t elem, size_t min_wire,
                           const char *what, int zero) {
  if (r->st != HK_OK)
    return NULL;
  if ((size_t)n > r->left / min_wire) {
    r->st = hk_fail(HK_ERR_PROTOCOL,
                    "truncated message: %u %s cannot fit in %zu bytes", n, what,
                    r->left);
    return NULL;
  }
  if (n == 0)
    return NULL;
  /* n * elem cannot overflow: n <= left / min_wire and left fits in memory */
  void *p = zero ? calloc(n, elem) : malloc((size_t)n * elem);
  if (!p)
    r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate %u %s", n, what);
  return p;
}

static void *alloc_array(reader *r, uint32_t n, size_t elem, size_t min_wire,
                         const char *what) {
  return alloc_checked(r, n, elem, min_wire, what, 1);
}

/* Not zeroed: the caller initialises every element. */
static void *alloc_array_raw(reader *r, uint32_t n, size_t elem,
                             size_t min_wire, const char *what) {
  return alloc_checked(r, n, elem, min_wire, what, 0);
}

hk_status hk_wire_header(const uint8_t hdr[HK_WIRE_HEADER_LEN], uint8_t *type,
                         uint32_t *payload_len) {
  if (hdr[0] != 'H' || hdr[1] != 'K')
    return hk_fail(HK_ERR_PROTOCOL, "bad magic 0x%02x%02x (not an hk peer?)",
                   hdr[0], hdr[1]);
  if (hdr[2] != HK_WIRE_VERSION)
    return hk_fail(HK_ERR_PROTOCOL,
                   "wire version %u, this build speaks version %u", hdr[2],
                   HK_WIRE_VERSION);
  if (hdr[3] < HK_MSG_REGISTER || hdr[3] > HK_MSG_LAST)
    return hk_fail(HK_ERR_PROTOCOL, "unknown message type %u", hdr[3]);
  uint32_t len = 0;
  for (int i = 0; i < 4; i++)
    len |= (uint32_t)hdr[4 + i] << (8 * i);
  if (len > HK_WIRE_MAX_PAYLOAD)
    return hk_fail(HK_ERR_PROTOCOL,
                   "message of %u bytes exceeds the %u-byte limit", len,
                   HK_WIRE_MAX_PAYLOAD);
  *type = hdr[3];
  *payload_len = len;
  return HK_OK;
}

static void decode_payload(reader *r, hk_msg *m) {
  switch (m->type) {
  case HK_MSG_REGISTER:
    m->u.reg.rank = get_i32(r, "rank");
    m->u.reg.size = get_i32(r, "size");
    m->u.reg.pid = get_i32(r, "pid");
    m->u.reg.port = get_u16(r, "port");
    get_str(r, m->u.reg.host, HK_WIRE_MAX_HOST_LEN, "host name");
    check(r, m->u.reg.size >= 1 && m->u.reg.size <= HK_WIRE_MAX_RANKS,
          "size %lld out of range", m->u.reg.size);
    check(r, m->u.reg.rank >= 0 && m->u.reg.rank < m->u.reg.size,
          "rank %lld out of range", m->u.reg.rank);
    break;
  case HK_MSG_PEERS: {
    uint32_t n = get_u32(r, "peer count");
    check(r, n >= 1 && n <= HK_WIRE_MAX_RANKS, "peer count %lld out of range",
          n);
    m->u.peers.peers = alloc_array(r, n, sizeof(hk_wire_peer), 4, "peers");
    for (uint32_t i = 0; i < n && r->st == HK_OK; i++) {
      get_str(r, m->u.peers.peers[i].host, HK_WIRE_MAX_HOST_LEN, "host name");
      m->u.peers.peers[i].port = get_u16(r, "port");
    }
    m->u.peers.n = n;
    break;
  }
  case HK_MSG_ABORT:
  case HK_MSG_RESET:
  case HK_MSG_JOIN:
    m->u.abort.rank = get_i32(r, "rank");
    m->u.abort.exit_code = get_i32(r, "exit code");
    m->u.abort.signal = get_i32(r, "signal");
    get_str(r, m->u.abort.reason, HK_WIRE_MAX_REASON_LEN, "abort reason");
    break;
  case HK_MSG_HELLO:
    m->u.hello.rank = get_i32(r, "rank");
    m->u.hello.channel = get_u8(r, "channel");
    check(r, m->u.hello.rank >= 0 && m->u.hello.rank < HK_WIRE_MAX_RANKS,
          "rank %lld out of range", m->u.hello.rank);
    check(r,
          m->u.hello.channel == HK_CHANNEL_CONTROL ||
              m->u.hello.channel == HK_CHANNEL_DATA,
          "unknown channel %lld", m->u.hello.channel);
    m->u.hello.stream = get_u8(r, "stream index");
    m->u.hello.streams = get_u8(r, "stream count");
    check(
        r,
        m->u.hello.streams >= 1 && m->u.hello.streams <= HK_WIRE_MAX_STREAMS &&
            (m->u.hello.channel == HK_CHANNEL_DATA || m->u.hello.streams == 1),
        "stream count %lld out of range", m->u.hello.streams);
    check(r, m->u.hello.stream < m->u.hello.streams,
          "stream index %lld is not below the stream count", m->u.hello.stream);
    m->u.hello.stripes = get_u8(r, "stripe count");
    check(r,
          m->u.hello.stripes >= 1 && m->u.hello.stripes <= m->u.hello.streams,
          "stripe count %lld is not 1 to the stream count", m->u.hello.stripes);
    break;
  case HK_MSG_GOODBYE:
    m->u.goodbye.rank = get_i32(r, "rank");
    check(r, m->u.goodbye.rank >= 0 && m->u.goodbye.rank < HK_WIRE_MAX_RANKS,
          "rank %lld out of range", m->u.goodbye.rank);
    break;
  case HK_MSG_AGENT:
    m->u.agent.base = get_i32(r, "base slot");
    m->u.agent.nslots = get_i32(r, "slot count");
    m->u.agent.size = get_i32(r, "size");
    get_str(r, m->u.agent.host, HK_WIRE_MAX_HOST_LEN, "host name");
    check(r, m->u.agent.nslots >= 0 && m->u.agent.nslots <= HK_WIRE_MAX_RANKS,
          "slot count %lld out of range", m->u.agent.nslots);
    check(r, m->u.agent.size >= 0 && m->u.agent.size <= HK_WIRE_MAX_RANKS,
          "size %lld out of range", m->u.agent.size);
    check(r, m->u.agent.base >= -1 && m->u.agent.base < HK_WIRE_MAX_RANKS,
          "base slot %lld out of range", m->u.agent.base);
    break;
  case HK_MSG_EXIT:
    m->u.exit.slot = get_i32(r, "slot");
    m->u.exit.pid = get_i32(r, "pid");
    m->u.exit.status = get_i32(r, "exit status");
    m->u.exit.signal = get_i32(r, "signal");
    check(r, m->u.exit.slot >= -1 && m->u.exit.slot < HK_WIRE_MAX_RANKS,
          "slot %lld out of range", m->u.exit.slot);
    check(r, m->u.exit.status >= 0 && m->u.exit.status <= 255,
          "exit status %lld out of range", m->u.exit.status);
    check(r, m->u.exit.signal >= 0 && m->u.exit.signal < 128,
          "signal %lld out of range", m->u.exit.signal);
    break;
  case HK_MSG_REQUESTS: {
    m->u.requests.shutdown = get_u8(r, "shutdown flag");
    check(r, m->u.requests.shutdown <= 1, "shutdown flag %lld is not 0 or 1",
          m->u.requests.shutdown);
    uint32_t n = get_u32(r, "request count");
    /* smallest request on the wire: 3 + 4 + 16 + 16 + 8 + 2 + 2 bytes */
    m->u.requests.reqs =
        alloc_array(r, n, sizeof(hk_wire_request), 51, "requests");

    for (uint32_t i = 0; i < n && r->st == HK_OK; i++) {
      get_request(r, &m->u.requests.reqs[i]);
    }
    m->u.requests.n = n;
    get_bits(r, &m->u.requests.bits, &m->u.requests.bit_sets,
             &m->u.requests.nbits);
    m->u.requests.has_sample = get_u8(r, "sample flag");
    check(r, m->u.requests.has_sample <= 1, "sample flag %lld is not 0 or 1",
          m->u.requests.has_sample);
    if (m->u.requests.has_sample && r->st == HK_OK)
      get_sample(r, &m->u.requests.sample);
    break;
  }
  case HK_MSG_MONITOR: {
    char *t = malloc(HK_WIRE_MAX_MONITOR_LEN + 1);
    if (!t) {
      r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate the monitor text");
      break;
    }
    get_str(r, t, HK_WIRE_MAX_MONITOR_LEN, "monitor text");
    m->u.monitor.text = t;
    break;
  }
  case HK_MSG_RESPONSES: {
    m->u.responses.answer = get_u8(r, "answer flag");
    check(r, m->u.responses.answer <= 1, "answer flag %lld is not 0 or 1",
          m->u.responses.answer);
    m->u.responses.set = get_i32(r, "process set");
    check(r, m->u.responses.set >= 0, "process set %lld", m->u.responses.set);
    m->u.responses.shutdown_rank = get_i32(r, "shutdown rank");
    check(r,
          m->u.responses.shutdown_rank >= -1 &&
              m->u.responses.shutdown_rank < HK_WIRE_MAX_RANKS,
          "shutdown rank %lld out of range", m->u.responses.shutdown_rank);
    m->u.responses.abort_status = get_u16(r, "abort status");
    check(r, m->u.responses.abort_status <= HK_ERR_RANKS_CHANGED,
          "unknown abort status %lld", m->u.responses.abort_status);
    {
      char reason[HK_WIRE_MAX_REASON_LEN + 1];
      get_str(r, reason, HK_WIRE_MAX_REASON_LEN, "abort reason");
      if (r->st == HK_OK && reason[0] &&
          !(m->u.responses.abort_reason = strdup(reason)))
        r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate an abort reason");
    }
    m->u.responses.inval =
        get_u32_list(r, &m->u.responses.ninval, HK_WIRE_MAX_CACHE_BITS,
                     "invalidated cache bits");
    uint32_t n = get_u32(r, "response count");
    /* smallest response on the wire: 2 + 1 + 4 + 2 + 2 bytes */
    m->u.responses.resps =
        alloc_array_raw(r, n, sizeof(hk_wire_response), 11, "responses");
    /* every entry cleared first: a decode failing half-way frees them all */
    for (uint32_t i = 0; i < n && m->u.responses.resps; i++)
      hk_wire_response_clear(&m->u.responses.resps[i]);
    m->u.responses.n = m->u.responses.resps ? n : 0;
    for (uint32_t i = 0; i < n && r->st == HK_OK; i++) {
      hk_wire_response *s = &m->u.responses.resps[i];
      s->status = get_u16(r, "status");
      s->flags = get_u8(r, "response flags");
      s->cache_bit = get_u32(r, "cache bit");
      get_str(r, s->name, HK_MAX_NAME_LEN, "tensor name");
      check(r, s->status <= HK_ERR_RANKS_CHANGED, "unknown status %lld",
            s->status);
      check(r, (s->flags & ~(HK_RESP_CACHED | HK_RESP_PARAMS)) == 0,
            "unknown flags %lld", s->flags);
      if (s->flags & HK_RESP_CACHED) {
        check(r, s->cache_bit < HK_WIRE_MAX_CACHE_BITS,
              "cache bit %lld out of range", s->cache_bit);
        check(r, s->name[0] == '\0', "a cached response names a tensor%.0lld",
              0);
      } else {
        check(r, s->cache_bit == HK_WIRE_NO_BIT,
              "an uncached response has cache bit %lld", s->cache_bit);
        check(r, s->name[0] != '\0', "empty tensor name%.0lld", 0);
      }
      char reason[HK_WIRE_MAX_REASON_LEN + 1];
      get_str(r, reason, HK_WIRE_MAX_REASON_LEN, "error reason");
      if (r->st == HK_OK && reason[0]) {
        s->reason = strdup(reason);
        if (!s->reason)
          r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate an error reason");
      }
      s->divisor = get_i32(r, "divisor");
      check(r, s->divisor >= 0 && s->divisor <= HK_WIRE_MAX_RANKS,
            "divisor %lld out of range", s->divisor);
      if ((s->flags & HK_RESP_PARAMS) && r->st == HK_OK) {
        s->params = calloc(1, sizeof *s->params);
        if (!s->params)
          r->st = hk_fail(HK_ERR_NOMEM, "cannot allocate a response");
        else
          get_request(r, s->params);
      }
      uint32_t nc = get_u32(r, "row counts");
      s->counts = alloc_array(r, nc, sizeof(uint64_t), 8, "row counts");
      s->ncounts = s->counts ? nc : 0;
      for (uint32_t k = 0; k < s->ncounts && r->st == HK_OK; k++)
        s->counts[k] = get_u64(r, "row count");
    }
    m->u.responses.has_tune = get_u8(r, "tune flag");
    check(r, m->u.responses.has_tune <= 1, "tune flag %lld is not 0 or 1",
          m->u.responses.has_tune);
    if (m->u.responses.has_tune && r->st == HK_OK) {
      hk_wire_tune *t = &m->u.responses.tune;
      t->seq = get_u32(r, "tune number");
      check(r, t->seq >= 1, "tune number %lld is not >= 1", t->seq);
      t->fusion_threshold = get_u64(r, "tuned fusion threshold");
      check(r, t->fusion_threshold <= HK_WIRE_MAX_TUNE_THRESHOLD,
            "tuned fusion threshold %lld out of range",
            (long long)t->fusion_threshold);
      t->cycle_time_ms = get_f64(r, "tuned cycle time");
      check(r,
            t->cycle_time_ms >= 0 &&
                t->cycle_time_ms <= HK_WIRE_MAX_TUNE_CYCLE_MS,
            "tuned cycle time out of range%.0lld", 0);
      uint8_t h = get_u8(r, "tuned hierarchical allreduce");
      check(r, h <= 2, "tuned hierarchical allreduce %lld is not 0, 1 or 2", h);
      t->hierarchical = (int8_t)(h - 1);
      t->sockets_per_peer = get_u8(r, "tuned sockets per peer");
      check(r,
            t->sockets_per_peer >= 1 &&
                t->sockets_per_peer <= HK_WIRE_MAX_STREAMS,
            "tuned sockets per peer %lld is not 1 to 8", t->sockets_per_peer);
      t->staging_chunk_bytes = get_u32(r, "tuned staging chunk");
      check(r,
            t->staging_chunk_bytes >= 1 &&
                t->staging_chunk_bytes <= HK_WIRE_MAX_TUNE_STAGING,
            "tuned staging chunk of %lld bytes out of range",
            t->staging_chunk_bytes);
      t->compression = get_u8(r, "tuned compression");
      check(r, t->compression <= HK_WIRE_MAX_TUNE_COMPRESSION,
            "tuned compression %lld is not 0, 1 or 2", t->compression);
    }
    m->u.responses.joiners = get_u8(r, "joiners flag");
    check(r, m->u.responses.joiners <= 1, "joiners flag %lld is not 0 or 1",
          m->u.responses.joiners);
    break;
  }
  }
}

hk_status hk_wire_decode(const uint8_t *frame, size_t len, hk_msg *out) {
  memset(out, 0, sizeof *out);
  if (len < HK_WIRE_HEADER_LEN)
    return hk_fail(HK_ERR_PROTOCOL,
                   "truncated message: %zu bytes, header needs %d", len,
                   HK_WIRE_HEADER_LEN);
  uint8_t type = 0;
  uint32_t payload = 0;
  hk_status st = hk_wire_header(frame, &type, &payload);
  if (st != HK_OK)
    return st;
  if ((size_t)payload != len - HK_WIRE_HEADER_LEN)
    return hk_fail(HK_ERR_PROTOCOL,
                   "header announces %u payload bytes, frame has %zu", payload,
                   len - HK_WIRE_HEADER_LEN);
  reader r = {frame + HK_WIRE_HEADER_LEN, payload, HK_OK};
  out->type = type;
  decode_payload(&r, out);
  if (r.st == HK_OK && r.left != 0)
    r.st = hk_fail(HK_ERR_PROTOCOL, "%zu trailing bytes after message type %u",
                   r.left, type);
  if (r.st != HK_OK) {
    hk_msg_free(out);
    return r.st;
  }
  return HK_OK;
}

void hk_msg_free(hk_msg *m) {
  switch (m->type) {
  case HK_MSG_PEERS:
    free(m->u.peers.peers);
    break;
  case HK_MSG_REQUESTS:
    free(m->u.requests.reqs);
    free(m->u.requests.bits);
    free(m->u.requests.bit_sets);
    break;
  case HK_MSG_MONITOR:
    free(m->u.monitor.text);
    break;
  case HK_MSG_RESPONSES:
    free(m->u.responses.abort_reason);
    free(m->u.responses.inval);
    for (uint32_t i = 0; i < m->u.responses.n && m->u.responses.resps; i++) {
      free(m->u.responses.resps[i].reason);
      free(m->u.responses.resps[i].counts);
      free(m->u.responses.resps[i].params);
    }
    free(m->u.responses.resps);
    break;
  default:
    break;
  }
  memset(m, 0, sizeof *m);
}
