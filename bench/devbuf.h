/*
 * devbuf.h - hkbench's device buffers (--device gpu): allocated through
 * the device backend hk_init opened (HK_DEVICE: cuda on a GPU machine,
 * emu on a CPU one), filled and checked through host copies outside the
 * timed region, and the pack/unpack kernel bandwidth table (--kernels).
 * Uses hk's internal device interface (device/device.h), as --raw uses
 * worker/internal.h. Every function exits with a message on failure.
 * Thread-safety: the main thread only.
 */
#ifndef HKB_DEVBUF_H
#define HKB_DEVBUF_H

#include <stddef.h>

#include "options.h"

/** Device memory of `bytes` bytes from hk's backend (after hk_init);
 *  exits naming why when hk has no device backend. */
void *hkb_dev_alloc(size_t bytes);
void hkb_dev_free(void *p);

/** Blocking copies between host and device memory. */
void hkb_dev_upload(void *dev, const void *host, size_t bytes);
void hkb_dev_download(void *host, const void *dev, size_t bytes);

/**
 * The kernel table: for every size from -b to -e (factor -f), the time
 * of a device-to-device copy of the size, of a pack of 64 tensors of
 * size/64 bytes each into a contiguous buffer (one batched launch, the
 * fusion buffer's fill), and of the matching unpack with a postscale,
 * each timed by device events, median of -n runs after -w warm-ups;
 * bandwidth = bytes read / time, the same convention for all three, and
 * the kernels' ratio to the copy. Rank 0 prints; every rank measures its
 * own GPU.
 */
void hkb_kernels(const hkb_opts *o);

#endif
