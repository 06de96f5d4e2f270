/*
 * monitor.h - who is slow, and why (issue 15, items 1-5): rank 0's
 * lateness accounting (coordinator/lateness.h) joined with every rank's
 * telemetry (observe/telemetry.h), the report (observe/report.h), the
 * Prometheus file (observe/metrics.h) and the live table hkrun --monitor
 * shows; rank 0's view of it all is observe/monitor_view.h.
 *
 * An observer (observe/observe.h), attached when any of HK_MONITOR=1,
 * HK_METRICS_FILE, HK_MONITOR_REPORT_S > 0 or HK_MONITOR_LIVE=1 (hkrun
 * --monitor) is set (hk_config_monitoring); off, nothing is attached and
 * the hot path pays one branch per tensor (negotiator) and one bit test
 * per round and per request.
 *
 * Threads: every rank runs one monitor thread (started at ready), which
 * samples telemetry every HK_TELEMETRY_INTERVAL_S; other ranks' samples
 * ride on their next REQUESTS (the sample hook, background thread) and
 * rank 0 files them (the message hook, background thread). Rank 0's
 * monitor thread also prints the report every HK_MONITOR_REPORT_S,
 * rewrites HK_METRICS_FILE every HK_METRICS_INTERVAL_S and, with
 * HK_MONITOR_LIVE, encodes the table (HK_MSG_MONITOR) every sampling
 * interval and makes an eventfd the background thread polls readable
 * (poll_fd); the background thread then sends it to hkrun on the
 * launcher connection (readable: only the background thread touches the
 * network), and only when it fits whole in that connection's empty send
 * buffer (else that refresh is dropped: a frame cut by a timeout would
 * break the connection's framing, and hkrun would take rank 0 for gone).
 * Rank 0's round_started hook ends a round of the lateness accounting,
 * which the negotiator feeds (hk_negotiator_set_lateness, at ready). A
 * mutex inside the monitor guards what both threads touch.
 *
 * At detach (the background thread has stopped) the thread stops; with
 * `final` (hk_shutdown) rank 0 prints the report and writes
 * HK_METRICS_FILE a last time first.
 */
#ifndef HK_OBSERVE_MONITOR_H
#define HK_OBSERVE_MONITOR_H

#include "observe/monitor_view.h"
#include "observe/observe.h"

/**
 * Attaches the monitor when s->cfg asks for monitoring (else does
 * nothing): rank 0's lateness accounting and tables. Its ready (once the
 * mesh and the negotiator exist) opens telemetry for this rank's GPU
 * (HK_GPU, else its local rank), hooks the accounting into rank 0's
 * negotiator and starts the monitor thread. Errors: HK_ERR_NOMEM,
 * hk_observe_attach's; at ready HK_ERR_NOMEM, HK_ERR_SYSTEM (no thread,
 * no eventfd).
 */
hk_status hk_monitor_attach(hk_observers *o, const hk_obs_setup *s);

#endif
