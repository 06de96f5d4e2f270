/*
 * current.c - each thread's current device (emu.h, "Devices"): the
 * variable every entry sets (internal.h's emu_dev), and the table's
 * current and set_current that read and set it.
 */
#include "device/emu/internal.h"

_Thread_local int emu_current_device = -1;

int emu_current(hk_device *dev) {
  (void)dev;
  return emu_current_device;
}

void emu_set_current(hk_device *dev, int index) {
  (void)dev;
  emu_current_device = index;
}
