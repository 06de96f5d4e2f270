/*
 * fault.c - HK_EMU_FAULT for the emu's communicator: which operation a
 * fault hits, and the message of an injected error. A device's
 * communicator operations are numbered from 0 in the order they are
 * accepted (enqueued without an argument error), over all communicators of
 * that handle; the fault hits operation fault.op_index when fault.rank is
 * the handle's job_rank (hk_device_options). What each kind does is
 * comm.c's (error: the op does nothing and sets the async error; hang: the
 * op waits for this rank's comm_abort; delay: it starts delay_ms late;
 * enqueue: the call itself fails, nothing is queued, and the communicator
 * keeps the error).
 */
#include <stdio.h>

#include "device/emu/internal.h"

int emu_fault_for(const emu_device *dev, unsigned index) {
  const hk_dev_fault *f = &dev->fault;
  if (f->kind == HK_DEV_FAULT_NONE || f->rank != dev->job_rank ||
      f->op_index < 0 || (unsigned)f->op_index != index)
    return HK_DEV_FAULT_NONE;
  return f->kind;
}

void emu_fault_message(char *buf, size_t cap, int kind, const char *op_name,
                       unsigned index, int job_rank) {
  snprintf(buf, cap, "injected %s (HK_EMU_FAULT) in %s #%u on rank %d",
           kind == HK_DEV_FAULT_ENQUEUE ? "enqueue failure" : "async error",
           op_name, index, job_rank);
}
