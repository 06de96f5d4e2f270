/*
 * rendezvous.h - hkrun's rendezvous server: where workers learn each
 * other's addresses and hear about failures.
 *
 * A libuv TCP server on 127.0.0.1, ephemeral port. Per connection:
 *   1. the handshake of common/auth.h: we send nonce_s, read exactly
 *      HK_AUTH_CLIENT_MSG_LEN bytes (nothing more before the check), and
 *      answer proof_s, or log "refused a connection from <addr>: bad
 *      secret" and close. A connection that has not authenticated within
 *      HK_RDV_AUTH_TIMEOUT_MS is closed too ("timed out authenticating"),
 *      and one that closes first is logged as "closed before
 *      authenticating". Handshakes run concurrently; at most 64 are
 *      pending (fewer under a low descriptor limit, so that they cannot
 *      exhaust it): a new one drops the oldest with a reset ("dropped
 *      unauthenticated"; a worker caught in it connects again), and so
 *      does an accept that fails for want of descriptors (logged naming
 *      the error). These lines are rate-limited (common/ratelog.h).
 *   2. frames of coordinator/wire.h. The worker sends one HK_MSG_REGISTER
 *      {rank, size, pid, port, host}; rank must be in [0, size), size must
 *      be the job's size and the rank not yet registered, else a warning
 *      names the problem and the connection is closed.
 *   3. when every rank has registered, each gets one HK_MSG_PEERS frame
 *      with {host, port} of every rank (index = rank).
 *   4. the connection stays open for the whole job; hkrun sends
 *      HK_MSG_ABORT on it when the job fails (hk_rdv_abort). A worker that
 *      registers after the abort gets the abort frame at once.
 *   5. a worker leaving through the API (hk_shutdown, or an hk_init that
 *      failed after registering) sends HK_MSG_GOODBYE {rank} and closes.
 *      GOODBYE on a connection that has not registered, or naming another
 *      rank, is refused with a warning (the connection is closed).
 * A worker that never connects is fine: the rendezvous simply never
 * completes. A registered worker that disconnects before completion is
 * forgotten, so it may register again.
 *
 * Per rank the server knows whether it registered and how its connection
 * ended (hk_rdv_rank). A worker writes GOODBYE before it exits, and the
 * kernel closes its socket before its parent learns of the exit, so once
 * hkrun has seen the connection end (GOODBYE read, or EOF) it knows
 * whether that rank said goodbye; before that it cannot tell, as a
 * process's exit may be reported before the last bytes it wrote were read.
 *
 * Elastic jobs (hk_rdv_set_elastic; docs/elastic.md): a rank's index is
 * its slot, the rank hkrun started the worker as. The job runs in
 * generations: the first forms as above (every slot not lost has
 * registered). hk_rdv_lose(slot) ends the formed generation: every other
 * registered worker gets HK_MSG_RESET {slot, exit_code, signal, reason}
 * and registers again on its connection (REGISTER with its slot and new
 * address; one said twice counts once); once every slot not lost has,
 * and at least min_size of them, each gets HK_MSG_PEERS listing those
 * slots' addresses in slot order: a worker's new rank is the index of
 * its own address. A loss while a generation forms only removes the slot
 * from those awaited. Generations are Horovod Elastic's resets
 * (horovod/runner/elastic/driver.py) and torchrun's rendezvous rounds,
 * kept in hkrun's memory.
 *
 * Joining (agents): a lost slot whose agent's connection has ended is
 * free; an agent that comes after the first generation formed takes n
 * consecutive free slots (when the job's never-claimed slots do not
 * suffice), and its workers register there as joining: a formed
 * generation goes on, and every watch (HK_MSG_JOIN on a connection that
 * registered nothing: rank 0's, worker/bootstrap.h) is told how many
 * joining workers have registered, at each change. A member that
 * registers again with a new address while its generation is formed
 * starts the next one (the members agreed at a commit to admit them, and
 * all come); a generation forming (after a loss, or below --min-np)
 * takes the joiners registered too. Its peer list holds the last
 * generation's members first, then the joiners, each part in slot order.
 * A joiner lost before it is in a generation ends none (no RESET), and a
 * RESET is never sent to a joiner still waiting.
 *
 * Agents (hk_rdv_set_agents; hkrun --rdzv-endpoint, launcher/agent.h,
 * docs/elastic.md): the server may also listen on HOST:PORT for one hkrun
 * agent per host. An agent's connection authenticates as a worker's, then
 * sends HK_MSG_AGENT {base -1, nslots, host}: it gets the next nslots
 * slots (an AGENT answer {base, nslots, size}), or, when they do not fit
 * in the job's size, an ABORT naming why, and the connection is closed.
 * Its workers then register as any worker does, with rank = their slot.
 * The agent reports each worker's exit (HK_MSG_EXIT {slot, pid, status,
 * signal}; a slot not its own closes the connection). The connection
 * has TCP keepalive bounded by the timeout given (hk_tcp_set_liveness,
 * collectives/transport/tcp.h): a host that stops answering ends it as a closed
 * one does. The listener hears JOINED, EXIT and GONE (the connection ended,
 * while the server is not closing). ABORT goes to every agent too, and
 * hk_rdv_agents_end sends each the job's status (EXIT {slot -1}).
 *
 * Thread-safety: every function runs on the loop's thread.
 */
#ifndef HK_LAUNCHER_RENDEZVOUS_H
#define HK_LAUNCHER_RENDEZVOUS_H

#include <stdint.h>
#include <uv.h>

#include "common/auth.h"
#include "hk/hk.h"

/** How long a connection may take to authenticate, in milliseconds. */
#define HK_RDV_AUTH_TIMEOUT_MS 10000
/** Largest frame payload the rendezvous accepts, in bytes. */
#define HK_RDV_MAX_PAYLOAD (64u * 1024u)

typedef struct hk_rdv hk_rdv;

/** Where a rank stands with the rendezvous. */
typedef enum hk_rdv_rank_state {
  HK_RDV_UNREGISTERED = 0, /* never registered, or its connection ended
                              before the rendezvous completed */
  HK_RDV_OPEN = 1,         /* registered; connection open, no GOODBYE yet */
  HK_RDV_GOODBYE = 2,      /* said GOODBYE (stays so once its connection
                              closes) */
  HK_RDV_LEFT = 3,         /* its connection ended after the rendezvous
                              completed, without GOODBYE */
} hk_rdv_rank_state;

/**
 * Called when a rank leaves HK_RDV_OPEN: `state` is HK_RDV_GOODBYE,
 * HK_RDV_LEFT, or HK_RDV_UNREGISTERED (its connection ended before the
 * rendezvous completed). Not called while the server closes. Runs on the
 * loop thread, after the server's own bookkeeping; it may call any hk_rdv
 * function, hk_rdv_close included.
 */
typedef void (*hk_rdv_settled_fn)(int rank, hk_rdv_rank_state state, void *ctx);

/**
 * Starts listening on 127.0.0.1 (ephemeral port) for a job of `size`
 * ranks. *secret is copied. on_settled (may be NULL) and ctx are kept. On
 * HK_OK *out is the server (closed and freed by hk_rdv_close) and *port
 * its port (host byte order).
 * Errors: HK_ERR_NOMEM, HK_ERR_SYSTEM (bind/listen failed; message names
 * the call and the libuv error).
 */
hk_status hk_rdv_start(uv_loop_t *loop, int size, const hk_secret *secret,
                       hk_rdv_settled_fn on_settled, void *ctx, hk_rdv **out,
                       uint16_t *port);

/**
 * hk_rdv_start listening on host (numeric IPv4) at port (0: ephemeral):
 * the rendezvous of a multi-host elastic job (hkrun --rdzv-endpoint).
 * Errors: as hk_rdv_start; an address that is not numeric IPv4 or not
 * this machine's, or a port in use, is HK_ERR_SYSTEM naming host:port.
 */
hk_status hk_rdv_start_on(uv_loop_t *loop, int size, const hk_secret *secret,
                          const char *host, uint16_t port,
                          hk_rdv_settled_fn on_settled, void *ctx, hk_rdv **out,
                          uint16_t *port_out);

/** What an agent's connection told (hk_rdv_set_agents). */
typedef enum hk_rdv_agent_kind {
  HK_RDV_AGENT_JOINED = 1, /* it registered: base, nslots, host */
  HK_RDV_AGENT_EXIT = 2,   /* its worker of slot exited: pid, status,
                              signal (status valid when signal is 0) */
  HK_RDV_AGENT_GONE = 3,   /* its connection ended: why */
} hk_rdv_agent_kind;

typedef struct hk_rdv_agent_event {
  hk_rdv_agent_kind kind;
  int base, nslots; /* the agent's slots: [base, base + nslots) */
  const char *host; /* the host name it gave (borrowed for the call) */
  const char *addr; /* its connection's peer, "ip:port" (borrowed) */
  const char *ip;   /* addr's address alone (borrowed) */
  int slot, pid, status, signal; /* EXIT */
  const char *why;               /* GONE: how the connection ended */
} hk_rdv_agent_event;

/** Called on the loop thread for each agent event; ev is borrowed. It may
 *  call any hk_rdv function except hk_rdv_close. */
typedef void (*hk_rdv_agent_fn)(const hk_rdv_agent_event *ev, void *ctx);

/**
 * Accepts agents from now on (fn NULL: refuses them, the default): their
 * connections get TCP keepalive ending them after about timeout_s seconds
 * without an answer (HK_TIMEOUT_S).
 */
void hk_rdv_set_agents(hk_rdv *r, hk_rdv_agent_fn fn, void *ctx,
                       double timeout_s);

/** Asked before an agent gets slots: ip is its connection's address
 *  (numeric); returns 0 to admit it, or non-zero with why[cap] set to
 *  refuse it (the agent is told why, and closed). */
typedef int (*hk_rdv_agent_check_fn)(const char *ip, char *why, size_t cap,
                                     void *ctx);

/** Sets (fn NULL: unsets) the check of agents (hkrun's blacklist,
 *  launcher/blacklist.h). */
void hk_rdv_set_agent_check(hk_rdv *r, hk_rdv_agent_check_fn fn, void *ctx);

/** Takes the next nslots slots for the caller's own workers (the agent
 *  holding the endpoint). Returns the first, or -1 when they do not fit
 *  in the job's size (or r is NULL). */
int hk_rdv_claim(hk_rdv *r, int nslots);

/** Elastic, before the first generation formed: it awaits the workers of
 *  slots [0, n) only; the slots from n on that no agent holds are free
 *  (lost, to be taken by agents later). Called again with another n, it
 *  moves the line. Nothing once a generation has formed. */
void hk_rdv_expect(hk_rdv *r, int n);

/** Elastic: the slots an agent could take now (never claimed, or lost
 *  with their agent gone); 0 for NULL. */
int hk_rdv_free_slots(const hk_rdv *r);

/** The slots given so far (to agents and hk_rdv_claim); 0 for NULL. */
int hk_rdv_claimed(const hk_rdv *r);

/** Sends every agent the job's exit status (HK_MSG_EXIT {slot -1,
 *  status & 0xff}); asynchronous, failures logged. NULL or closing r is
 *  ignored. */
void hk_rdv_agents_end(hk_rdv *r, int status);

/** Called with the text of each HK_MSG_MONITOR rank 0 sends (hkrun
 *  --monitor; observe/monitor.h), on the loop thread; text is borrowed for
 *  the call. */
typedef void (*hk_rdv_monitor_fn)(const char *text, void *ctx);

/** Sets (fn NULL: unsets) the MONITOR handler. Messages from other ranks
 *  than 0, or without a handler, are dropped. */
void hk_rdv_set_monitor(hk_rdv *r, hk_rdv_monitor_fn fn, void *ctx);

/** The pid rank registered with (its REGISTER's, as the worker says),
 *  or 0: never registered, r NULL or rank out of range. */
int hk_rdv_pid(const hk_rdv *r, int rank);

/** rank's state; HK_RDV_UNREGISTERED for r NULL or rank out of range. */
hk_rdv_rank_state hk_rdv_rank(const hk_rdv *r, int rank);

/**
 * For a rank in HK_RDV_OPEN: 1 if nothing is waiting to be read on its
 * connection right now (no bytes, no EOF, no partly read frame), asked of
 * the kernel directly; 0 otherwise, or when the rank is not OPEN. A
 * connection idle after its worker exited is held open by another
 * process (one the worker forked, say): no GOODBYE is coming.
 */
int hk_rdv_rank_idle(const hk_rdv *r, int rank);

/**
 * Tells every registered worker except `failed_rank` that the job failed:
 * sends HK_MSG_ABORT {failed_rank, exit_code, signal, reason} (reason is
 * copied, truncated to HK_WIRE_MAX_REASON_LEN bytes). failed_rank -1 means
 * no rank (e.g. hkrun was signalled). Only the first call has an effect;
 * r NULL or closing is ignored.
 * Sending is asynchronous; failures are logged, not returned.
 */
void hk_rdv_abort(hk_rdv *r, int failed_rank, int exit_code, int signal,
                  const char *reason);

/**
 * Makes r elastic (call once, right after hk_rdv_start): generations
 * form with at least min_size (>= 1) slots. Errors: HK_ERR_NOMEM.
 */
hk_status hk_rdv_set_elastic(hk_rdv *r, int min_size);

/**
 * Elastic: slot's worker is gone (exit_code -1 if killed by signal;
 * reason is copied, truncated to HK_WIRE_MAX_REASON_LEN bytes). A formed
 * generation ends (RESET to every other registered worker; sent
 * asynchronously, failures logged); a forming one stops waiting for the
 * slot. Returns the generation now forming or formed (0 first); a slot
 * already lost, a non-elastic or closing r changes nothing.
 */
int hk_rdv_lose(hk_rdv *r, int slot, int exit_code, int signal,
                const char *reason);

/**
 * Elastic: slot's worker left through the API (GOODBYE) and exited 0: it
 * is counted out as a lost one is, but nobody is told (no RESET: the
 * others left the same job with it, or are re-forming without it); a
 * generation forming stops waiting for it. Non-elastic, NULL or closing r,
 * or a slot already out: nothing.
 */
void hk_rdv_left(hk_rdv *r, int slot);

/** Elastic: the slots not lost; 0 for a non-elastic or NULL r. */
int hk_rdv_alive(const hk_rdv *r);

/** Elastic, while a generation forms: how many slots not lost have not
 *  registered for it; the first cap of them (ascending) into slots. 0 once
 *  it has formed, and for a non-elastic or NULL r. */
int hk_rdv_awaited(const hk_rdv *r, int *slots, int cap);

/**
 * Closes the server and every connection (pending writes are cancelled).
 * r is freed once libuv has closed its handles, during uv_run; do not use
 * it after this call. NULL is ignored.
 */
void hk_rdv_close(hk_rdv *r);

#endif
