/*
 * agent.h - an hkrun agent that joins a rendezvous held elsewhere:
 * `hkrun --rdzv-endpoint HOST:PORT -np L --max-np M PROG...` on a host
 * where HOST is not a local address (docs/elastic.md, "Several hosts").
 *
 * The agent connects to HOST:PORT (retrying a refused connection until
 * HK_START_TIMEOUT_S: the agent holding the endpoint may start later),
 * proves the job's secret (common/auth.h; HK_SECRET, the same on every
 * agent), and sends HK_MSG_AGENT {nslots L, its host name}. The answer
 * gives its first slot B and the job's size; it starts its L workers as
 * ranks B..B+L-1 of that size (launcher/spawn.h), told the endpoint as
 * their HK_RENDEZVOUS: they register there themselves; --bind-to binds
 * them as on one host (bind_masks.h). The connection
 * has TCP keepalive bounded by HK_TIMEOUT_S (hk_tcp_set_liveness).
 *
 * Then, on the agent's loop:
 *   - each worker's exit is sent to the rendezvous (HK_MSG_EXIT {slot,
 *     pid, status, signal}), which judges it as hkrun judges a local
 *     worker's (a loss, the job's failure, or a worker done); a worker
 *     that cannot be started is sent as exiting 127;
 *   - an ABORT from the rendezvous (the job failed) is printed, and the
 *     workers still running get SIGTERM after --grace-period, SIGKILL 2 s
 *     later;
 *   - EXIT {slot -1, status} from the rendezvous: the job is over with
 *     that status, which the agent exits with once its workers are gone;
 *   - the connection ending otherwise (closed, or silent for
 *     HK_TIMEOUT_S): "lost the rendezvous at HOST:PORT", the workers get
 *     SIGTERM, SIGKILL 500 ms later, and the agent exits 1;
 *   - SIGINT/SIGTERM/SIGHUP: forwarded to the workers, which the
 *     rendezvous then sees exit; the agent exits 128+signo once they are
 *     gone.
 * Thread-safety: one thread (the caller's; it runs a libuv loop).
 */
#ifndef HK_LAUNCHER_AGENT_H
#define HK_LAUNCHER_AGENT_H

#include "common/auth.h"
#include "launcher/args.h"

/**
 * Runs this host's part of an agent job whose rendezvous is at ip:port
 * (ip numeric IPv4, not local). args->np workers (0 allowed), the job's
 * secret, HK_START_TIMEOUT_S and HK_TIMEOUT_S (seconds) as loaded.
 * Returns the exit status: the job's (from the rendezvous), 1 when the
 * rendezvous cannot be reached, refuses the agent or is lost, 127 when a
 * worker cannot be started, 128+signo when signalled. Says why on
 * stderr (hk_out_say).
 */
int hkrun_agent_run(const hkrun_args *args, const char *ip, int port,
                    const hk_secret *secret, double start_timeout_s,
                    double timeout_s);

#endif
