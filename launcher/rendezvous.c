/*
 * rendezvous.c - hkrun's rendezvous server (see rendezvous.h).
 *
 * Reading is driven by exact-size buffers: alloc_cb always offers exactly
 * the bytes still missing from the current unit (the 64-byte client auth
 * message, an 8-byte frame header, or a payload), so the server never
 * reads a byte beyond what the current phase allows.
 */
#include "launcher/rendezvous.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "collectives/transport/tcp.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/ratelog.h"
#include "common/status.h"
#include "coordinator/wire.h"

typedef enum conn_state {
  CONN_AUTH,    /* reading the client's auth message */
  CONN_HEADER,  /* reading a frame header */
  CONN_PAYLOAD, /* reading a frame payload */
  CONN_CLOSING,
} conn_state;

/* Why a connection was refused, or accepting failed: one rate-limited log
 * line each (common/ratelog.h), for anyone on the host can connect. */
enum cause { BAD_SECRET, CLOSED, TIMED_OUT, DROPPED, ACCEPT_FAILED, NCAUSES };

typedef struct conn {
  hk_rdv *r;
  struct conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t auth_timer;
  int open_handles; /* tcp + timer; freed at 0 */
  conn_state state;
  int rank;         /* registered rank, or -1 */
  int agent;        /* 1: an hkrun agent's connection (HK_MSG_AGENT) */
  int watch;        /* 1: told of workers waiting to join (HK_MSG_JOIN) */
  int base, nslots; /* an agent's slots */
  char host[HK_WIRE_MAX_HOST_LEN + 1]; /* an agent's host name */
  char addr[64];
  char ip[64];   /* addr's address, without the port */
  char why[128]; /* an agent's: how its connection ended, if known */
  uint8_t nonce_s[HK_NONCE_LEN];
  uint8_t auth_msg[HK_AUTH_CLIENT_MSG_LEN];
  hk_buf frame; /* header + payload being read */
  size_t need;  /* bytes the current unit needs in total */
  size_t got;   /* bytes of it read so far */
} conn;

struct hk_rdv {
  uv_loop_t *loop;
  uv_tcp_t server;
  int open_handles; /* server + live conns; freed at 0 once closing */
  int closing;
  int size;
  hk_secret secret;
  conn *conns;         /* every live connection */
  conn **by_rank;      /* size entries: the registered connection or NULL */
  hk_wire_peer *peers; /* size entries, filled by REGISTER */
  int *pids;           /* size entries: the pid each rank registered with */
  uint8_t *state;      /* size entries: hk_rdv_rank_state */
  hk_rdv_settled_fn on_settled;
  void *settled_ctx;
  hk_rdv_monitor_fn on_monitor; /* NULL: MONITOR messages are dropped */
  void *monitor_ctx;
  int registered;     /* ranks registered */
  int complete;       /* PEERS was sent */
  int aborted;        /* hk_rdv_abort was called */
  hk_buf abort_frame; /* the encoded ABORT, for late registrants */
  /* elastic jobs (hk_rdv_set_elastic): a rank's index is its slot, the
   * rank hkrun started the worker as */
  int elastic;
  int min_size;     /* a generation forms with at least this many slots */
  int gen;          /* the generation forming (complete 0) or formed */
  int nalive;       /* slots not lost */
  uint8_t *lost;    /* size entries: 1 once hk_rdv_lose named the slot */
  int *reg_gen;     /* size entries: the generation the slot registered for */
  uint8_t *joining; /* size entries: 1 while the slot's worker waits to
                       join the formed generation (it is in the next) */
  uint8_t *owned;   /* size entries: 1 while the slot is held (the
                       endpoint's own, or an agent's still connected) */
  int formed_once;  /* a generation has formed */
  int announced;    /* joiners last told to the watches */
  hk_wire_peer *formed; /* scratch for a generation's peer list */
  /* agents (hk_rdv_set_agents) */
  hk_rdv_agent_fn on_agent; /* NULL: AGENT messages are refused */
  void *agent_ctx;
  hk_rdv_agent_check_fn agent_check; /* NULL: every agent may come */
  void *agent_check_ctx;
  double agent_timeout_s; /* a silent agent connection ends after this */
  int claimed;            /* slots given to agents so far: [0, claimed) */
  int pending;            /* connections in CONN_AUTH */
  int max_pending;        /* at most (pending_cap) */
  hk_ratelog log[NCAUSES];
};

static void maybe_free(hk_rdv *r) {
  if (!r->closing || r->open_handles > 0)
    return;
  hk_buf_free(&r->abort_frame);
  free(r->by_rank);
  free(r->peers);
  free(r->pids);
  free(r->state);
  free(r->lost);
  free(r->reg_gen);
  free(r->joining);
  free(r->owned);
  free(r->formed);
  free(r);
}

/* ---- connections: writing and closing ---- */

typedef struct write_req {
  uv_write_t req;
  conn *c;
  uint8_t data[];
} write_req;

static void conn_close(conn *c);

static void on_written(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  if (status < 0 && status != UV_ECANCELED && w->c->state != CONN_CLOSING) {
    hk_log(HK_LOG_INFO, "writing to %s (rank %d): %s", w->c->addr, w->c->rank,
           uv_strerror(status));
    conn_close(w->c);
  }
  free(w);
}

/* Queues a copy of data for sending; closes the connection on failure. */
static void conn_send(conn *c, const void *data, size_t len) {
  if (c->state == CONN_CLOSING)
    return;
  write_req *w = malloc(sizeof *w + len);
  if (!w) {
    hk_log(HK_LOG_ERROR, "out of memory writing to %s", c->addr);
    conn_close(c);
    return;
  }
  w->c = c;
  memcpy(w->data, data, len);
  uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written);
  if (rc != 0) {
    free(w);
    hk_log(HK_LOG_INFO, "writing to %s: %s", c->addr, uv_strerror(rc));
    conn_close(c);
  }
}

static void on_conn_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open_handles > 0)
    return;
  hk_rdv *r = c->r;
  if (c->prev)
    c->prev->next = c->next;
  else
    r->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  hk_buf_free(&c->frame);
  free(c);
  r->open_handles--;
  maybe_free(r);
}

/* Records that rank's connection settled and tells the listener. */
static void settle(hk_rdv *r, int rank, hk_rdv_rank_state state) {
  r->state[rank] = (uint8_t)state;
  if (r->on_settled && !r->closing)
    r->on_settled(rank, state, r->settled_ctx);
}

/* Closes both handles; c is freed once libuv is done with them. */
static void conn_close(conn *c) {
  if (c->state == CONN_CLOSING)
    return;
  if (c->state == CONN_AUTH)
    c->r->pending--;
  c->state = CONN_CLOSING;
  hk_rdv *r = c->r;
  int rank = c->rank, settled = -1;
  if (rank >= 0 && r->by_rank[rank] == c) {
    r->by_rank[rank] = NULL;
    if (!r->complete) { /* forget it: the worker may register again */
      r->registered--;
      settled = r->state[rank] == HK_RDV_OPEN ? HK_RDV_UNREGISTERED : -1;
      r->state[rank] = HK_RDV_UNREGISTERED;
      if (!r->closing)
        hk_log(HK_LOG_INFO, "rank %d left the rendezvous before it completed",
               rank);
    } else if (r->state[rank] == HK_RDV_OPEN) {
      settled = HK_RDV_LEFT;
    }
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->auth_timer, on_conn_handle_closed);
  /* last: the listener may close the whole server */
  if (settled >= 0)
    settle(r, rank, (hk_rdv_rank_state)settled);
  if (c->agent && r->owned)
    for (int s = c->base; s < c->base + c->nslots; s++)
      r->owned[s] = 0; /* free to take once lost */
  if (c->agent && !r->closing && r->on_agent) {
    hk_rdv_agent_event ev = {.kind = HK_RDV_AGENT_GONE,
                             .base = c->base,
                             .nslots = c->nslots,
                             .host = c->host,
                             .addr = c->addr,
                             .ip = c->ip,
                             .why =
                                 c->why[0] ? c->why : "its connection ended"};
    r->on_agent(&ev, r->agent_ctx);
  }
}

/* Closes c, which did not authenticate, logging why (rate-limited). */
static void refuse_auth(conn *c, enum cause cause, const char *why) {
  hk_ratelog_say(&c->r->log[cause], HK_LOG_WARNING,
                 "refused a connection from %s: %s", c->addr, why);
  conn_close(c);
}

/* ---- the protocol ---- */

/* Sends the peer list peers[0..n) to every registered rank not lost and
 * marks the rendezvous complete: the static job's list, or an elastic
 * generation's (a worker finds its rank as the entry with its address). */
static void send_peer_list(hk_rdv *r, hk_wire_peer *peers, int n) {
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_PEERS;
  m.u.peers.n = (uint32_t)n;
  m.u.peers.peers = peers; /* borrowed: not freed with hk_msg_free */
  hk_buf b = {0};
  if (hk_wire_encode(&m, &b) != HK_OK) {
    hk_log(HK_LOG_ERROR, "cannot encode the peer list: %s", hk_last_error());
    hk_buf_free(&b);
    return;
  }
  r->complete = 1;
  for (int i = 0; i < r->size; i++)
    if (r->by_rank[i] && !(r->elastic && r->lost[i]))
      conn_send(r->by_rank[i], b.data, b.len);
  hk_buf_free(&b);
  hk_log(HK_LOG_INFO, "rendezvous complete: generation %d, %d ranks", r->gen,
         n);
}

/* Every rank is registered: tell each of them where everyone is. */
static void send_peers(hk_rdv *r) { send_peer_list(r, r->peers, r->size); }

static void notify_watches(hk_rdv *r);

/* Elastic: every slot not lost has registered for the generation (a
 * joining worker: registered at all), and there are enough: send each the
 * peer list, the last generation's members first, then the workers
 * joining, each part in slot order (Horovod keeps the current hosts
 * first too: rank 0, whose state the others take, is never a newcomer
 * while a member is left). */
static void maybe_form(hk_rdv *r) {
  if (!r->elastic || r->complete || r->aborted || r->nalive < r->min_size)
    return;
  int n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < r->size; i++) {
      if (r->lost[i] || r->joining[i] != pass)
        continue;
      if (!r->by_rank[i] || (!pass && r->reg_gen[i] != r->gen))
        return;
      r->formed[n++] = r->peers[i];
    }
  if (n == 0)
    return;
  send_peer_list(r, r->formed, n);
  r->formed_once = 1;
  memset(r->joining, 0, (size_t)r->size);
  notify_watches(r);
}

/* The workers waiting to join that have registered (ready to), and
 * their hosts into hosts[cap] (each once where its slots are together). */
static int joiners_ready(const hk_rdv *r, char *hosts, size_t cap) {
  int n = 0;
  const char *last = "";
  hosts[0] = 0;
  for (int i = 0; i < r->size; i++)
    if (r->joining[i] && !r->lost[i] && r->by_rank[i]) {
      if (strcmp(r->peers[i].host, last) != 0) {
        size_t k = strlen(hosts);
        snprintf(hosts + k, cap - k, "%s%s", k ? ", " : "", r->peers[i].host);
        last = r->peers[i].host;
      }
      n++;
    }
  return n;
}

/* Elastic: slot, joining, is out (lost or left before it was admitted):
 * it ends no generation; the watches learn one fewer waits. Returns
 * whether it was joining. */
static int drop_joiner(hk_rdv *r, int slot) {
  if (!r->joining[slot])
    return 0;
  r->joining[slot] = 0;
  notify_watches(r);
  return 1;
}

/* Tells every watch (rank 0's second connection) how many workers wait
 * to join, when that changed. */
static void notify_watches(hk_rdv *r) {
  char hosts[HK_WIRE_MAX_REASON_LEN + 1];
  const int n = joiners_ready(r, hosts, sizeof hosts);
  if (n == r->announced)
    return;
  r->announced = n;
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_JOIN;
  m.u.abort.rank = n;
  snprintf(m.u.abort.reason, sizeof m.u.abort.reason, "%s", hosts);
  hk_buf b = {0};
  if (hk_wire_encode(&m, &b) == HK_OK)
    for (conn *c = r->conns; c; c = c->next)
      if (c->watch && c->state != CONN_CLOSING)
        conn_send(c, b.data, b.len);
  hk_buf_free(&b);
  if (n > 0)
    hk_log(HK_LOG_INFO, "%d worker%s on %s wait to join at the next commit", n,
           n == 1 ? "" : "s", hosts);
}

static void refuse(conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Elastic: a worker registers again on its connection for a new
 * generation (hk_elastic_reset), with its new address. */
static void on_reregister(conn *c, const hk_msg *m) {
  hk_rdv *r = c->r;
  int slot = c->rank;
  if (m->u.reg.rank != slot) {
    refuse(c, "rank %d registered again as %d", slot, (int)m->u.reg.rank);
    return;
  }
  const int moved = r->peers[slot].port != m->u.reg.port ||
                    strcmp(r->peers[slot].host, m->u.reg.host) != 0;
  if (r->reg_gen[slot] == r->gen && r->complete && moved) {
    /* a member of the formed generation registers anew without a loss:
     * the members agreed (at a commit) to admit the workers waiting to
     * join; the others are coming too */
    r->gen++;
    r->complete = 0;
    hk_log(HK_LOG_INFO, "generation %d forms to admit %d joining worker%s",
           r->gen, r->announced, r->announced == 1 ? "" : "s");
  }
  if (r->reg_gen[slot] == r->gen && r->complete)
    return; /* said twice (it had a RESET still to read): counted */
  snprintf(r->peers[slot].host, sizeof r->peers[slot].host, "%s",
           m->u.reg.host);
  r->peers[slot].port = m->u.reg.port;
  r->reg_gen[slot] = r->gen;
  hk_log(HK_LOG_INFO, "rank %d (pid %d) registered again %s:%u (generation %d)",
         slot, m->u.reg.pid, m->u.reg.host, (unsigned)m->u.reg.port, r->gen);
  if (r->aborted)
    conn_send(c, r->abort_frame.data, r->abort_frame.len);
  else
    maybe_form(r);
}

/* Logs why a REGISTER is refused and closes the connection. */
static void refuse(conn *c, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  hk_log(HK_LOG_WARNING, "refused a registration from %s: %s", c->addr, why);
  conn_close(c);
}

static void on_register(conn *c, const hk_msg *m) {
  hk_rdv *r = c->r;
  int rank = m->u.reg.rank, size = m->u.reg.size;
  if (c->rank >= 0 && r->elastic) {
    on_reregister(c, m);
    return;
  }
  if (c->rank >= 0) {
    refuse(c, "rank %d registered twice on one connection (as %d)", c->rank,
           rank);
    return;
  }
  if (size != r->size) {
    refuse(c, "size %d, but the job has %d ranks", size, r->size);
    return;
  }
  if (rank < 0 || rank >= r->size) {
    refuse(c, "rank %d is out of range [0, %d)", rank, r->size);
    return;
  }
  const int joins = r->elastic && r->joining[rank];
  if (r->by_rank[rank] ||
      (!joins && (r->complete || (r->elastic && r->gen > 0)))) {
    refuse(c, "rank %d is already registered", rank);
    return;
  }
  if (r->elastic && r->lost[rank]) {
    refuse(c, "rank %d was lost", rank);
    return;
  }
  c->rank = rank;
  r->by_rank[rank] = c;
  r->state[rank] = HK_RDV_OPEN;
  r->registered++;
  snprintf(r->peers[rank].host, sizeof r->peers[rank].host, "%s",
           m->u.reg.host);
  r->peers[rank].port = m->u.reg.port;
  r->pids[rank] = m->u.reg.pid;
  hk_log(HK_LOG_INFO, "rank %d (pid %d) registered %s:%u (%d of %d)", rank,
         m->u.reg.pid, m->u.reg.host, (unsigned)m->u.reg.port, r->registered,
         r->size);
  if (r->elastic)
    r->reg_gen[rank] = r->gen;
  if (r->aborted)
    conn_send(c, r->abort_frame.data, r->abort_frame.len);
  else if (r->elastic) {
    maybe_form(r);
    if (joins && r->complete)
      notify_watches(r); /* it waits for the members' next commit */
  } else if (r->registered == r->size)
    send_peers(r);
}

static void on_goodbye(conn *c, const hk_msg *m) {
  hk_rdv *r = c->r;
  if (c->rank < 0 || m->u.goodbye.rank != c->rank) {
    if (c->rank < 0)
      hk_log(HK_LOG_WARNING,
             "refused a goodbye from %s: the connection never registered",
             c->addr);
    else
      hk_log(HK_LOG_WARNING,
             "refused a goodbye from %s: it names rank %d, but the "
             "connection registered rank %d",
             c->addr, m->u.goodbye.rank, c->rank);
    conn_close(c);
    return;
  }
  if (r->state[c->rank] != HK_RDV_OPEN)
    return; /* said twice: the first one counts */
  hk_log(HK_LOG_INFO, "rank %d said goodbye", c->rank);
  settle(r, c->rank, HK_RDV_GOODBYE);
}

/* Sends c the ABORT frame {-1, -1, 0, reason}, then closes it: an agent
 * refused learns why. */
static void refuse_agent(conn *c, const char *reason) {
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_ABORT;
  m.u.abort.rank = -1;
  m.u.abort.exit_code = -1;
  snprintf(m.u.abort.reason, sizeof m.u.abort.reason, "%s", reason);
  hk_buf b = {0};
  if (hk_wire_encode(&m, &b) == HK_OK)
    conn_send(c, b.data, b.len);
  hk_buf_free(&b);
  hk_log(HK_LOG_WARNING, "refused an agent from %s: %s", c->addr, reason);
  conn_close(c);
}

/* Elastic: the slots lost whose holder is gone (free to take again). */
static int slot_free(const hk_rdv *r, int s) {
  return r->elastic && s < r->claimed && r->lost[s] && !r->owned[s];
}

static int free_slots(const hk_rdv *r) {
  int n = r->size - r->claimed;
  for (int s = 0; s < r->claimed; s++)
    n += slot_free(r, s);
  return n;
}

/* The first of n consecutive free slots below r->claimed, or -1. */
static int free_run(const hk_rdv *r, int n) {
  for (int s = 0, run = 0; s < r->claimed; s++) {
    run = slot_free(r, s) ? run + 1 : 0;
    if (run == n && n > 0)
      return s - n + 1;
  }
  return -1;
}

/* Slots [base, base + n) are held from now on. Slots taken again after
 * the job formed wait to join it (at the members' next commit, or in the
 * generation forming now); the worker lost there is forgotten. */
static void take_slots(hk_rdv *r, int base, int n) {
  for (int s = base; s < base + n && r->elastic; s++) {
    r->owned[s] = 1;
    r->joining[s] = (uint8_t)r->formed_once;
    if (!r->lost[s])
      continue;
    r->lost[s] = 0;
    r->nalive++;
    r->state[s] = HK_RDV_UNREGISTERED;
    r->pids[s] = 0;
    conn *old = r->by_rank[s];
    if (old) { /* the lost worker's connection (its host cut off) */
      r->by_rank[s] = NULL;
      old->rank = -1;
      conn_close(old);
    }
  }
}

/* An hkrun agent says how many workers its host starts: give it the next
 * nslots slots (or, elastic, slots whose host was lost) and answer with
 * them and the job's size. */
static void on_agent(conn *c, const hk_msg *m) {
  hk_rdv *r = c->r;
  char why[400];
  if (!r->on_agent) {
    refuse_agent(c, "this hkrun is not a rendezvous for agents (start it "
                    "with --rdzv-endpoint)");
    return;
  }
  if (c->rank >= 0 || c->agent) {
    refuse_agent(c, "an agent registered twice on one connection");
    return;
  }
  if (r->agent_check) {
    if (r->agent_check(c->ip, why, sizeof why, r->agent_check_ctx)) {
      refuse_agent(c, why);
      return;
    }
  }
  int n = m->u.agent.nslots;
  int base = n <= r->size - r->claimed ? r->claimed : free_run(r, n);
  if (base < 0) {
    snprintf(why, sizeof why,
             "the job has %d slots (--max-np of the agent holding the "
             "endpoint) and %d are taken: %d more from host %s do not fit",
             r->size, r->size - free_slots(r), n, m->u.agent.host);
    refuse_agent(c, why);
    return;
  }
  if (r->aborted) {
    conn_send(c, r->abort_frame.data, r->abort_frame.len);
    return;
  }
  c->agent = 1;
  c->base = base;
  c->nslots = n;
  if (base == r->claimed)
    r->claimed += n;
  take_slots(r, base, n);
  snprintf(c->host, sizeof c->host, "%s", m->u.agent.host);
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0)
    if (hk_tcp_set_liveness(fd, r->agent_timeout_s) != HK_OK)
      hk_log(HK_LOG_WARNING, "an agent's connection: %s", hk_last_error());
  hk_msg a;
  memset(&a, 0, sizeof a);
  a.type = HK_MSG_AGENT;
  a.u.agent.base = c->base;
  a.u.agent.nslots = n;
  a.u.agent.size = r->size;
  snprintf(a.u.agent.host, sizeof a.u.agent.host, "%s", c->host);
  hk_buf b = {0};
  if (hk_wire_encode(&a, &b) == HK_OK)
    conn_send(c, b.data, b.len);
  hk_buf_free(&b);
  hk_rdv_agent_event ev = {.kind = HK_RDV_AGENT_JOINED,
                           .base = c->base,
                           .nslots = n,
                           .host = c->host,
                           .addr = c->addr,
                           .ip = c->ip};
  r->on_agent(&ev, r->agent_ctx);
}

/* An agent's worker exited: tell the listener (slots of other agents
 * are refused). */
static void on_agent_exit(conn *c, const hk_msg *m) {
  hk_rdv *r = c->r;
  int slot = m->u.exit.slot;
  if (!c->agent || slot < c->base || slot >= c->base + c->nslots) {
    hk_log(HK_LOG_WARNING,
           "closing the connection from %s: an exit of slot %d, which is "
           "not this agent's",
           c->addr, slot);
    conn_close(c);
    return;
  }
  hk_rdv_agent_event ev = {.kind = HK_RDV_AGENT_EXIT,
                           .base = c->base,
                           .nslots = c->nslots,
                           .host = c->host,
                           .addr = c->addr,
                           .ip = c->ip,
                           .slot = slot,
                           .pid = m->u.exit.pid,
                           .status = m->u.exit.status,
                           .signal = m->u.exit.signal};
  r->on_agent(&ev, r->agent_ctx);
}

/* A whole frame is in c->frame: decode and act on it. */
static void on_frame(conn *c) {
  hk_msg m;
  if (hk_wire_decode(c->frame.data, c->got, &m) != HK_OK) {
    hk_log(HK_LOG_WARNING, "closing the connection from %s: %s", c->addr,
           hk_last_error());
    conn_close(c);
    return;
  }
  if (m.type == HK_MSG_REGISTER)
    on_register(c, &m);
  else if (m.type == HK_MSG_GOODBYE)
    on_goodbye(c, &m);
  else if (m.type == HK_MSG_AGENT)
    on_agent(c, &m);
  else if (m.type == HK_MSG_EXIT)
    on_agent_exit(c, &m);
  else if (m.type == HK_MSG_JOIN && c->r->elastic && !c->agent &&
           c->rank < 0) { /* rank 0's watch: told now, and at each change */
    c->watch = 1;
    c->r->announced = -1; /* every watch is told the count again */
    notify_watches(c->r);
  } else if (m.type == HK_MSG_MONITOR) {
    if (c->rank == 0 && c->r->on_monitor)
      c->r->on_monitor(m.u.monitor.text, c->r->monitor_ctx);
  } else
    hk_log(HK_LOG_WARNING,
           "ignoring an unexpected message (type %d) from %s (rank %d)", m.type,
           c->addr, c->rank);
  hk_msg_free(&m);
}

static void expect(conn *c, conn_state state, size_t need) {
  c->state = state;
  c->need = need;
  if (state == CONN_HEADER)
    c->got = 0;
}

/* The current unit is complete: move to the next phase. */
static void on_unit(conn *c) {
  hk_rdv *r = c->r;
  switch (c->state) {
  case CONN_AUTH: {
    uint8_t proof_s[HK_PROOF_LEN];
    if (!hk_auth_server_check(&r->secret, c->nonce_s, c->auth_msg, proof_s)) {
      refuse_auth(c, BAD_SECRET, "bad secret");
      return;
    }
    uv_timer_stop(&c->auth_timer);
    r->pending--;
    conn_send(c, proof_s, sizeof proof_s);
    expect(c, CONN_HEADER, HK_WIRE_HEADER_LEN);
    return;
  }
  case CONN_HEADER: {
    uint8_t type;
    uint32_t len;
    if (hk_wire_header(c->frame.data, &type, &len) != HK_OK) {
      hk_log(HK_LOG_WARNING, "closing the connection from %s: %s", c->addr,
             hk_last_error());
      conn_close(c);
      return;
    }
    if (len > HK_RDV_MAX_PAYLOAD) {
      hk_log(HK_LOG_WARNING,
             "closing the connection from %s: a %u-byte message is too "
             "large for the rendezvous (at most %u)",
             c->addr, len, HK_RDV_MAX_PAYLOAD);
      conn_close(c);
      return;
    }
    if (len == 0) {
      on_frame(c);
      if (c->state != CONN_CLOSING)
        expect(c, CONN_HEADER, HK_WIRE_HEADER_LEN);
      return;
    }
    expect(c, CONN_PAYLOAD, HK_WIRE_HEADER_LEN + (size_t)len);
    return;
  }
  case CONN_PAYLOAD:
    on_frame(c);
    if (c->state != CONN_CLOSING)
      expect(c, CONN_HEADER, HK_WIRE_HEADER_LEN);
    return;
  case CONN_CLOSING:
    return;
  }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn *c = h->data;
  *buf = uv_buf_init(NULL, 0);
  if (c->state == CONN_AUTH) {
    *buf =
        uv_buf_init((char *)c->auth_msg + c->got, (unsigned)(c->need - c->got));
  } else if (c->state == CONN_HEADER || c->state == CONN_PAYLOAD) {
    if (hk_buf_reserve(&c->frame, c->need) != HK_OK)
      return; /* libuv reports UV_ENOBUFS to read_cb */
    *buf = uv_buf_init((char *)c->frame.data + c->got,
                       (unsigned)(c->need - c->got));
  }
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  conn *c = s->data;
  if (nread < 0) {
    if (c->agent && nread == UV_EOF)
      snprintf(c->why, sizeof c->why, "its connection closed");
    else if (c->agent)
      snprintf(c->why, sizeof c->why, "its connection failed: %s",
               uv_strerror((int)nread));
    if (c->state == CONN_AUTH)
      refuse_auth(c, CLOSED, "closed before authenticating");
    else if (nread != UV_EOF)
      hk_log(HK_LOG_INFO, "connection from %s (rank %d): %s", c->addr, c->rank,
             uv_strerror((int)nread));
    else if (c->rank >= 0)
      hk_log(HK_LOG_INFO, "rank %d closed its rendezvous connection", c->rank);
    conn_close(c);
    return;
  }
  c->got += (size_t)nread;
  if (nread > 0 && c->got == c->need)
    on_unit(c);
}

/* Closing c will send a reset: a worker connects again on one
 * (hk_tcp_connect), where a plain close reads as a refusal. */
static void reset_on_close(conn *c) {
  uv_os_fd_t fd;
  struct linger reset = {1, 0};
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

static void auth_timeout(uv_timer_t *t) {
  conn *c = t->data;
  reset_on_close(c); /* (a worker slowed by load may try again) */
  char why[80];
  snprintf(why, sizeof why,
           "timed out authenticating (no authentication within %d s)",
           HK_RDV_AUTH_TIMEOUT_MS / 1000);
  refuse_auth(c, TIMED_OUT, why);
}

/* Makes room: closes the oldest connection still authenticating (the
 * list is newest first) with a reset, which tells a worker caught in a
 * burst to connect again (hk_tcp_connect). */
static void drop_oldest(hk_rdv *r) {
  conn *oldest = NULL;
  for (conn *c = r->conns; c; c = c->next)
    if (c->state == CONN_AUTH)
      oldest = c;
  if (!oldest)
    return;
  reset_on_close(oldest);
  char why[96];
  snprintf(why, sizeof why, "dropped unauthenticated (%d pending, the most)",
           r->pending);
  refuse_auth(oldest, DROPPED, why);
}

/* Connections that may authenticate at once beyond one per rank not yet
 * registered: 64, fewer when the
 * descriptor limit would not leave room for the job's own (a pipe pair
 * per output stream and a rendezvous connection per rank, the loop's),
 * so that connections which never authenticate cannot exhaust it. */
static int pending_cap(int size) {
  struct rlimit rl;
  long cap = 64;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    long room = ((long)rl.rlim_cur - 32 - 6L * size) / 2;
    cap = room < cap ? room : cap;
  }
  return cap < 1 ? 1 : (int)cap;
}

static void format_peer(uv_tcp_t *tcp, char *out, size_t cap, char *ip_out) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char ip[64] = "?";
  unsigned port = 0;
  if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      uv_ip4_name(a, ip, sizeof ip);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      uv_ip6_name(a, ip, sizeof ip);
      port = ntohs(a->sin6_port);
    }
  }
  if (snprintf(out, cap, "%s:%u", ip, port) >= (int)cap && cap > 1)
    out[cap - 2] = '~'; /* cut: a log line's peer name only */
  memcpy(ip_out, ip, sizeof ip);
}

static void on_connection(uv_stream_t *server, int status) {
  hk_rdv *r = server->data;
  if (status < 0) {
    hk_ratelog_say(&r->log[ACCEPT_FAILED], HK_LOG_WARNING,
                   "rendezvous: cannot accept a connection: %s (%s); %d "
                   "unauthenticated pending%s",
                   uv_strerror(status), uv_err_name(status), r->pending,
                   r->pending ? ", dropping the oldest" : "");
    drop_oldest(r);
    return;
  }
  conn *c = calloc(1, sizeof *c);
  if (!c) {
    hk_log(HK_LOG_ERROR, "out of memory accepting a connection");
    return; /* the pending connection stays in the backlog */
  }
  c->r = r;
  c->rank = -1;
  uv_tcp_init(r->loop, &c->tcp);
  uv_timer_init(r->loop, &c->auth_timer);
  c->tcp.data = c->auth_timer.data = c;
  c->open_handles = 2;
  c->next = r->conns;
  if (r->conns)
    r->conns->prev = c;
  r->conns = c;
  r->open_handles++;
  expect(c, CONN_AUTH, HK_AUTH_CLIENT_MSG_LEN);
  r->pending++;

  int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
  if (rc != 0) {
    hk_log(HK_LOG_WARNING, "rendezvous accept: %s", uv_strerror(rc));
    conn_close(c);
    return;
  }
  format_peer(&c->tcp, c->addr, sizeof c->addr, c->ip);
  /* every rank not yet registered may hold one more (its descriptor is
   * in pending_cap's budget already): a job's own burst is not dropped */
  if (r->pending > r->max_pending + (r->size - r->registered))
    drop_oldest(r);
  uv_tcp_nodelay(&c->tcp, 1);
  if (hk_random_bytes(c->nonce_s, sizeof c->nonce_s) != HK_OK) {
    hk_log(HK_LOG_ERROR, "refused a connection from %s: %s", c->addr,
           hk_last_error());
    conn_close(c);
    return;
  }
  uv_timer_start(&c->auth_timer, auth_timeout, HK_RDV_AUTH_TIMEOUT_MS, 0);
  conn_send(c, c->nonce_s, sizeof c->nonce_s);
  if (c->state != CONN_CLOSING) {
    rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rc != 0) {
      hk_log(HK_LOG_WARNING, "reading from %s: %s", c->addr, uv_strerror(rc));
      conn_close(c);
    }
  }
}

/* ---- public ---- */

static void on_server_closed(uv_handle_t *h) {
  hk_rdv *r = h->data;
  r->open_handles--;
  maybe_free(r);
}

hk_status hk_rdv_start(uv_loop_t *loop, int size, const hk_secret *secret,
                       hk_rdv_settled_fn on_settled, void *ctx, hk_rdv **out,
                       uint16_t *port) {
  return hk_rdv_start_on(loop, size, secret, "127.0.0.1", 0, on_settled, ctx,
                         out, port);
}

hk_status hk_rdv_start_on(uv_loop_t *loop, int size, const hk_secret *secret,
                          const char *host, uint16_t want_port,
                          hk_rdv_settled_fn on_settled, void *ctx, hk_rdv **out,
                          uint16_t *port) {
  *out = NULL;
  hk_rdv *r = calloc(1, sizeof *r);
  if (!r)
    return hk_fail(HK_ERR_NOMEM, "out of memory for the rendezvous");
  r->by_rank = calloc((size_t)size, sizeof *r->by_rank);
  r->peers = calloc((size_t)size, sizeof *r->peers);
  r->pids = calloc((size_t)size, sizeof *r->pids);
  r->state = calloc((size_t)size, sizeof *r->state);
  if (!r->by_rank || !r->peers || !r->state || !r->pids) {
    free(r->by_rank);
    free(r->peers);
    free(r->pids);
    free(r->state);
    free(r);
    return hk_fail(HK_ERR_NOMEM, "out of memory for %d ranks", size);
  }
  r->loop = loop;
  r->size = size;
  r->on_settled = on_settled;
  r->settled_ctx = ctx;
  r->secret = *secret;
  r->max_pending = pending_cap(size);
  uv_tcp_init(loop, &r->server);
  r->server.data = r;
  r->open_handles = 1;

  struct sockaddr_in addr;
  const char *call = "address";
  int rc = uv_ip4_addr(host, want_port, &addr);
  if (rc == 0) {
    call = "bind";
    rc = uv_tcp_bind(&r->server, (const struct sockaddr *)&addr, 0);
  }
  if (rc == 0) {
    call = "listen";
    rc = uv_listen((uv_stream_t *)&r->server, 1024, on_connection);
  }
  struct sockaddr_in bound;
  int len = sizeof bound;
  if (rc == 0) {
    call = "getsockname";
    rc = uv_tcp_getsockname(&r->server, (struct sockaddr *)&bound, &len);
  }
  if (rc != 0) {
    hk_rdv_close(r);
    return hk_fail(HK_ERR_SYSTEM, "rendezvous %s on %s:%u: %s", call, host,
                   (unsigned)want_port, uv_strerror(rc));
  }
  *port = ntohs(bound.sin_port);
  *out = r;
  return HK_OK;
}

void hk_rdv_abort(hk_rdv *r, int failed_rank, int exit_code, int signal,
                  const char *reason) {
  if (!r || r->aborted || r->closing)
    return;
  r->aborted = 1;
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_ABORT;
  m.u.abort.rank = failed_rank;
  m.u.abort.exit_code = exit_code;
  m.u.abort.signal = signal;
  snprintf(m.u.abort.reason, sizeof m.u.abort.reason, "%s", reason);
  if (hk_wire_encode(&m, &r->abort_frame) != HK_OK) {
    hk_log(HK_LOG_ERROR, "cannot encode the abort message: %s",
           hk_last_error());
    return;
  }
  for (int i = 0; i < r->size; i++)
    if (i != failed_rank && r->by_rank[i])
      conn_send(r->by_rank[i], r->abort_frame.data, r->abort_frame.len);
  for (conn *c = r->conns; c; c = c->next)
    if (c->agent)
      conn_send(c, r->abort_frame.data, r->abort_frame.len);
}

void hk_rdv_set_agents(hk_rdv *r, hk_rdv_agent_fn fn, void *ctx,
                       double timeout_s) {
  r->on_agent = fn;
  r->agent_ctx = ctx;
  r->agent_timeout_s = timeout_s;
}

void hk_rdv_set_agent_check(hk_rdv *r, hk_rdv_agent_check_fn fn, void *ctx) {
  r->agent_check = fn;
  r->agent_check_ctx = ctx;
}

int hk_rdv_claim(hk_rdv *r, int nslots) {
  if (!r || nslots < 0 || nslots > r->size - r->claimed)
    return -1;
  int base = r->claimed;
  r->claimed += nslots;
  take_slots(r, base, nslots);
  return base;
}

int hk_rdv_claimed(const hk_rdv *r) { return r ? r->claimed : 0; }

void hk_rdv_expect(hk_rdv *r, int n) {
  if (!r || !r->elastic || r->formed_once || r->closing)
    return;
  for (int s = r->claimed; s < r->size; s++) {
    const uint8_t lost = s >= n;
    if (r->owned[s] || r->lost[s] == lost)
      continue;
    r->lost[s] = lost;
    r->nalive += lost ? -1 : 1;
  }
  maybe_form(r);
}

int hk_rdv_free_slots(const hk_rdv *r) {
  return r && r->elastic ? free_slots(r) : 0;
}

void hk_rdv_agents_end(hk_rdv *r, int status) {
  if (!r || r->closing)
    return;
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_EXIT;
  m.u.exit.slot = -1;
  m.u.exit.status = status & 0xff;
  hk_buf b = {0};
  if (hk_wire_encode(&m, &b) == HK_OK)
    for (conn *c = r->conns; c; c = c->next)
      if (c->agent)
        conn_send(c, b.data, b.len);
  hk_buf_free(&b);
}

hk_status hk_rdv_set_elastic(hk_rdv *r, int min_size) {
  r->lost = calloc((size_t)r->size, sizeof *r->lost);
  r->reg_gen = calloc((size_t)r->size, sizeof *r->reg_gen);
  r->formed = calloc((size_t)r->size, sizeof *r->formed);
  r->joining = calloc((size_t)r->size, 1);
  r->owned = calloc((size_t)r->size, 1);
  if (!r->lost || !r->reg_gen || !r->formed || !r->joining || !r->owned)
    return hk_fail(HK_ERR_NOMEM, "out of memory for an elastic job of %d",
                   r->size);
  r->elastic = 1;
  r->min_size = min_size;
  r->nalive = r->size;
  return HK_OK;
}

int hk_rdv_lose(hk_rdv *r, int slot, int exit_code, int signal,
                const char *reason) {
  if (!r || !r->elastic || r->closing || slot < 0 || slot >= r->size ||
      r->lost[slot])
    return r ? r->gen : 0;
  r->lost[slot] = 1;
  r->nalive--;
  if (drop_joiner(r, slot)) { /* not in the formed generation */
    maybe_form(r);
    return r->gen;
  }
  if (!r->complete || r->aborted) { /* forming: one fewer to wait for */
    maybe_form(r);
    return r->gen;
  }
  r->gen++;
  r->complete = 0;
  hk_msg m;
  memset(&m, 0, sizeof m);
  m.type = HK_MSG_RESET;
  m.u.abort.rank = slot;
  m.u.abort.exit_code = exit_code;
  m.u.abort.signal = signal;
  snprintf(m.u.abort.reason, sizeof m.u.abort.reason, "%s", reason);
  hk_buf b = {0};
  if (hk_wire_encode(&m, &b) != HK_OK) {
    hk_log(HK_LOG_ERROR, "cannot encode the reset message: %s",
           hk_last_error());
  } else {
    for (int i = 0; i < r->size; i++) /* (a joining worker waits as it was) */
      if (!r->lost[i] && !r->joining[i] && r->by_rank[i])
        conn_send(r->by_rank[i], b.data, b.len);
  }
  hk_buf_free(&b);
  hk_log(HK_LOG_INFO, "rank %d lost: generation %d forms with %d", slot, r->gen,
         r->nalive);
  return r->gen;
}

void hk_rdv_left(hk_rdv *r, int slot) {
  if (!r || !r->elastic || r->closing || slot < 0 || slot >= r->size ||
      r->lost[slot])
    return;
  r->lost[slot] = 1;
  r->nalive--;
  drop_joiner(r, slot);
  maybe_form(r);
}

int hk_rdv_alive(const hk_rdv *r) { return r && r->elastic ? r->nalive : 0; }

int hk_rdv_awaited(const hk_rdv *r, int *slots, int cap) {
  if (!r || !r->elastic || r->complete)
    return 0;
  int n = 0;
  for (int i = 0; i < r->size; i++)
    if (!r->lost[i] && (!r->by_rank[i] || r->reg_gen[i] != r->gen)) {
      if (n < cap)
        slots[n] = i;
      n++;
    }
  return n;
}

void hk_rdv_close(hk_rdv *r) {
  if (!r || r->closing)
    return;
  r->closing = 1;
  for (conn *c = r->conns; c; c = c->next)
    conn_close(c); /* unlinks itself later, in the close callback */
  static const char *const what[NCAUSES] = {
      "rendezvous: refused connections (bad secret)",
      "rendezvous: refused connections (closed before authenticating)",
      "rendezvous: refused connections (timed out authenticating)",
      "rendezvous: refused connections (dropped unauthenticated)",
      "rendezvous: failed accepts"};
  for (int k = 0; k < NCAUSES; k++)
    hk_ratelog_flush(&r->log[k], HK_LOG_WARNING, what[k]);
  uv_close((uv_handle_t *)&r->server, on_server_closed);
}

int hk_rdv_pid(const hk_rdv *r, int rank) {
  return r && rank >= 0 && rank < r->size ? r->pids[rank] : 0;
}

hk_rdv_rank_state hk_rdv_rank(const hk_rdv *r, int rank) {
  if (!r || rank < 0 || rank >= r->size)
    return HK_RDV_UNREGISTERED;
  return (hk_rdv_rank_state)r->state[rank];
}

int hk_rdv_rank_idle(const hk_rdv *r, int rank) {
  if (hk_rdv_rank(r, rank) != HK_RDV_OPEN || !r->by_rank[rank])
    return 0;
  const conn *c = r->by_rank[rank];
  if (c->got > 0) /* a frame is partly read: the rest is on its way */
    return 0;
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0)
    return 0;
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void hk_rdv_set_monitor(hk_rdv *r, hk_rdv_monitor_fn fn, void *ctx) {
  r->on_monitor = fn;
  r->monitor_ctx = ctx;
}
