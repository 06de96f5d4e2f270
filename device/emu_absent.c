/*
 * emu_absent.c - a stand-in for the emu backend's table while device/emu/
 * is not in this tree (CMake compiles it only when device/emu/emu.c is
 * missing): hk_device_open("emu") fails saying so, and libhk links. Delete
 * once device/emu/ has landed.
 */
#include "common/status.h"
#include "device/device.h"

static hk_status emu_absent_open(const hk_device_options *opts,
                                 hk_device **out) {
  (void)opts;
  *out = NULL;
  return hk_fail(HK_ERR_CONFIG, "emu: the emu device backend is not built "
                                "in this tree (device/emu/ is missing)");
}

const hk_device_ops hk_emu_device_ops = {.name = "emu",
                                         .open = emu_absent_open};
