/*
 * emu.c - the emu backend's table of operations, and opening and closing
 * its handles. The process-wide driver state behind them (emu.h,
 * "Process-wide state") is stream.c's (the count of open handles and the
 * default stream) and memory.c's (the allocation table).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/status.h"
#include "device/emu/emu.h"
#include "device/emu/internal.h"

static hk_status emu_open(const hk_device_options *opts, hk_device **out) {
  *out = NULL;
  hk_device_options none = {0};
  if (!opts)
    opts = &none;
  if (opts->device_index < 0)
    return hk_fail(HK_ERR_INVALID_ARG, "emu: open: device index %d",
                   opts->device_index);
  const int count = opts->emu_devices > 0 ? opts->emu_devices : 1;
  const int index = hk_device_pick(opts, count);
  if (index < 0)
    return hk_fail(HK_ERR_CONFIG,
                   "emu: device %d requested (%s), but %d visible "
                   "(HK_EMU_DEVICES=%d)",
                   opts->device_index,
                   opts->by_local_rank ? "the local rank" : "HK_GPU", count,
                   count);
  const hk_dev_fault *f = &opts->fault;
  if (f->kind < HK_DEV_FAULT_NONE || f->kind > HK_DEV_FAULT_ENQUEUE ||
      (f->kind && (f->rank < 0 || f->op_index < 0 || f->delay_ms < 0)))
    return hk_fail(HK_ERR_INVALID_ARG,
                   "emu: open: bad fault (kind %d, rank %d, op %d, %d ms)",
                   f->kind, f->rank, f->op_index, f->delay_ms);
  emu_device *d = calloc(1, sizeof *d);
  if (!d)
    return hk_fail(HK_ERR_NOMEM, "emu: open: out of host memory");
  d->base.ops = &hk_emu_device_ops;
  d->base.index = d->index = index;
  d->job_rank = opts->job_rank;
  d->fault = *f;
  atomic_init(&d->comm_ops, 0);
  snprintf(d->desc, sizeof d->desc, "emu %d", d->index);
  emu_driver_open();
  *out = &d->base;
  return HK_OK;
}

static void emu_close(hk_device *dev) {
  emu_device *d = emu_handle(dev, "close");
  if (!d)
    return;
  emu_driver_close();
  free(d);
}

static const char *emu_describe(hk_device *dev) {
  emu_device *d = emu_handle(dev, "describe");
  return d ? d->desc : "emu (not an emu handle)";
}

const hk_device_ops hk_emu_device_ops = {
    .name = "emu",
    .open = emu_open,
    .close = emu_close,
    .describe = emu_describe,
    .current = emu_current,
    .set_current = emu_set_current,
    .pointer_kind = emu_ptr_kind,
    .mem_alloc = emu_mem_alloc,
    .mem_free = emu_mem_free,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .event_create = emu_event_create,
    .event_create_timed = emu_event_create_timed,
    .event_destroy = emu_event_destroy,
    .event_record = emu_event_record,
    .stream_wait_event = emu_stream_wait_event,
    .event_query = emu_event_query,
    .event_elapsed = emu_event_elapsed,
    .memcpy_async = emu_memcpy_async,
    .batch_copy = emu_batch_copy,
    .fill = emu_fill,
    .comm_unique_id = emu_comm_unique_id,
    .comm_init = emu_comm_init,
    .comm_allreduce = emu_comm_allreduce,
    .comm_reducescatter = emu_comm_reducescatter,
    .comm_allgather = emu_comm_allgather,
    .comm_broadcast = emu_comm_broadcast,
    .comm_async_error = emu_comm_async_error,
    .comm_abort = emu_comm_abort,
    .comm_destroy = emu_comm_destroy,
};
