/*
 * metrics.h - HK_METRICS_FILE (issue 15, item 5): every monitor figure of
 * every rank in the Prometheus text exposition format (version 0.0.4:
 * "# HELP name text", "# TYPE name gauge|counter", then
 * `name{label="value",...} number` lines), for node_exporter's textfile
 * collector. Names follow Prometheus's naming conventions: the hk_
 * prefix, base units (seconds, bytes, hertz, watts, celsius, ratio 0..1)
 * named in the suffix, counters ending in _total. Labels on every
 * per-rank sample: rank, host, local_rank, gpu (the NVML index, "" without
 * GPU telemetry); hk_gpu_throttle_reason and
 * hk_gpu_throttle_samples_total add reason (telemetry.h's names). The
 * full list is README.md's "Metrics" table.
 */
#ifndef HK_OBSERVE_METRICS_H
#define HK_OBSERVE_METRICS_H

#include "common/buf.h"
#include "observe/monitor_view.h"

/** Appends the exposition text of *v to *out. Errors: HK_ERR_NOMEM. */
hk_status hk_metrics_format(const hk_monitor_view *v, hk_buf *out);

/**
 * Replaces the file at path with text[0..len), as common/outfile.h makes
 * every output (never through a link, mode `mode`: HK_FILE_MODE), whole:
 * a reader (node_exporter) sees the old file or the new one, never a
 * part, and a failed write leaves the old one. Errors: HK_ERR_SYSTEM
 * naming HK_METRICS_FILE, the path and the reason.
 */
hk_status hk_metrics_write(const char *path, unsigned mode, const char *text,
                           size_t len);

#endif
