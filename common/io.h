/*
 * io.h - how a blocking wait of hk behaves, shared by every layer that
 * waits on a peer (transports, the control channel, the collectives):
 * which file descriptor aborts it and how long it may go without
 * progress.
 *
 * abort_fd: the launcher's connection (hkrun), or -1. When it becomes
 *   readable (hkrun sent ABORT, or died) a wait returns
 *   HK_ERR_PEER_LOST, once nothing it reads from has bytes waiting.
 * timeout_s: seconds without progress before HK_ERR_TIMEOUT (counted
 *   from the last byte moved, not from the start of the wait).
 * A plain value: copied freely; no ownership of the descriptor.
 */
#ifndef HK_COMMON_IO_H
#define HK_COMMON_IO_H

/** How waits behave: which fd aborts them, how long without progress. */
typedef struct hk_io {
  int abort_fd;     /* launcher connection, or -1 */
  double timeout_s; /* seconds without progress before HK_ERR_TIMEOUT */
} hk_io;

#endif
