/*
 * current.c - each thread's current device (emu.h, "Devices"): the
 * variable every entry sets (internal.h's emu_dev), and the table's
 * current and set_current that read and set it; and the process's
 * contexts, one per device, made at a device's first entry.
 */
#include "device/emu/emu.h"
#include "device/emu/internal.h"

_Thread_local int emu_current_device = -1;

/* Devices 0-63 that have their context (bit i: device i), and how many
 * contexts were made (a device beyond 63 counts at every entry: the emu
 * never shows that many). */
static atomic_uint_fast64_t have_context;
static atomic_size_t contexts_made;

void emu_context_made(int index) {
  if (index >= 0 && index < 64) {
    const uint_fast64_t bit = (uint_fast64_t)1 << index;
    if (atomic_load(&have_context) & bit)
      return;
    if (atomic_fetch_or(&have_context, bit) & bit)
      return; /* another thread made it first */
  }
  atomic_fetch_add(&contexts_made, 1);
}

size_t hk_emu_contexts_created(void) { return atomic_load(&contexts_made); }

int emu_current(hk_device *dev) {
  (void)dev;
  return emu_current_device;
}

void emu_set_current(hk_device *dev, int index) {
  (void)dev;
  emu_current_device = index;
}
