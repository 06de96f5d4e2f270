/*
 * launch.h - agents hkrun starts itself, on the hosts a discovery script
 * lists: `hkrun --rdzv-endpoint HOST:PORT --host-discovery-script S
 * [--agent-launcher CMD] -np L --min-np N --max-np M PROGRAM ARGS...` on
 * the endpoint's host (docs/elastic.md, "Hosts from a discovery script").
 * This is how Horovod's elastic driver starts workers over ssh, with one
 * hkrun agent per host in place of each worker.
 *
 * At the start and every HKRUN_LAUNCH_INTERVAL_S seconds, hkrun runs the
 * script (launcher/discover.h; in libuv's thread pool, with each listed
 * host resolved to its IPv4 address there, so that the loop is never held
 * by it). For each host it lists, in its order, that is not the
 * endpoint's own address, has no agent of ours running, is not
 * blacklisted (launcher/blacklist.h), and while the job has slots no
 * agent holds or is being started for, it runs
 *
 *     CMD HOST 'HKRUN --rdzv-endpoint EP -np K --min-np N --max-np M
 *               [-v] PROGRAM ARGS...'
 *
 * CMD split as sh would (default "ssh -o BatchMode=yes -o
 * SendEnv=HK_SECRET"), the last word one line for the remote shell
 * (each word quoted as sh reads it back); HKRUN is this hkrun's own path
 * (the same on every host, as Horovod assumes of its command); K the
 * host's slots, fewer when fewer are free. It runs in a process group of
 * its own with hkrun's environment (HK_SECRET among it: ssh passes it
 * with SendEnv when the host's sshd accepts it). Its output goes to
 * hkrun's. When it exits before its agent joined (the agent's connection
 * comes from the host's address: hk_launch_joined), the host failed: the
 * caller is told (hk_launch_failed_fn), and the slots it was started for
 * are free again. Exits after its agent joined are the agent's business
 * (its connection ending tells hkrun more).
 *
 * hk_launch_stop (the job is over: the agents are told and exit, and
 * their launchers with them) sends SIGTERM to every launcher's group
 * still running 2 s later, SIGKILL 2 s after that; the handles close once
 * they have exited.
 * Thread-safety: the loop's thread.
 */
#ifndef HK_LAUNCHER_LAUNCH_H
#define HK_LAUNCHER_LAUNCH_H

#include <uv.h>

#include "hk/hk.h"
#include "launcher/args.h"
#include "launcher/blacklist.h"
#include "launcher/rendezvous.h"

/** Seconds between two runs of the discovery script (Horovod's driver
 *  runs it every second). */
#define HKRUN_LAUNCH_INTERVAL_S 1.0

/** The default --agent-launcher. */
#define HKRUN_AGENT_LAUNCHER "ssh -o BatchMode=yes -o SendEnv=HK_SECRET"

typedef struct hk_launch hk_launch;

/** Host ip (its address) failed before its agent joined, which was
 *  started for `slots` workers (launch.c has said how). */
typedef void (*hk_launch_failed_fn)(const char *ip, int slots, void *ctx);

/**
 * Runs the script once (blocking: at the start), starts the agents it
 * calls for, and from then on every HKRUN_LAUNCH_INTERVAL_S. self_ip is
 * the rendezvous' own address (hosts resolving to it are skipped: the
 * endpoint's agent starts its own workers), rdv and blacklist are borrowed for
 * the job's life. *launched = the slots the agents started now were given.
 * Errors: HK_ERR_CONFIG
 * (--agent-launcher does not split; the script fails at the start,
 * saying why), HK_ERR_NOMEM, HK_ERR_SYSTEM (this hkrun's own path).
 */
hk_status hk_launch_start(uv_loop_t *loop, const hkrun_args *args,
                          const char *self_ip, hk_rdv *rdv,
                          const hk_blacklist *blacklist,
                          hk_launch_failed_fn on_failed, void *ctx,
                          hk_launch **out, int *launched);

/** An agent from address ip joined: the launcher started for ip (if
 *  any) has done its part. */
void hk_launch_joined(hk_launch *l, const char *ip);

/** The slots of agents started and not yet joined (their slots are not
 *  the rendezvous' yet). 0 for NULL. */
int hk_launch_pending(const hk_launch *l);

/** Stops discovery and ends the launchers still running 2 s later
 *  (SIGTERM, SIGKILL 2 s after); l is freed once its handles closed
 *  (during uv_run). NULL is ignored. */
void hk_launch_stop(hk_launch *l);

#endif
