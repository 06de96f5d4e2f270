/*
 * channel.h - control messages (coordinator/wire.h) framed over a byte
 * stream: one message is one wire frame (header + payload, wire.h's
 * length prefix), written and read whole with a control endpoint's
 * blocking byte I/O (collectives/transport/ctrl.h: a TCP socket, or
 * shared-memory rings inside rank 0's host), which honours hk_io (the
 * abort fd and the no-progress timeout). The fd forms are the tcp
 * endpoint over that socket.
 *
 * What flows here: bootstrap hellos and the launcher's registration
 * (worker/bootstrap.c), the negotiation's requests and responses between
 * every rank and rank 0 (worker/round.c, worker/background.c), and the
 * goodbye to hkrun (worker/runtime.c).
 *
 * Thread-safety: a descriptor is used by one thread at a time (the
 * background thread, or hk_init before it starts); `scratch` belongs to
 * the caller and is reused between calls.
 */
#ifndef HK_COORDINATOR_CHANNEL_H
#define HK_COORDINATOR_CHANNEL_H

#include "collectives/transport/ctrl.h"
#include "common/buf.h"
#include "common/io.h"
#include "coordinator/wire.h"
#include "hk/hk.h"

/**
 * Encodes msg (hk_wire_encode) into scratch and sends the frame whole on
 * fd; `who` names the peer in messages ("rank 0", "hkrun").
 * Errors: hk_wire_encode's (HK_ERR_INVALID_ARG, HK_ERR_NOMEM),
 * HK_ERR_PEER_LOST, HK_ERR_TIMEOUT (after io->timeout_s without progress).
 */
hk_status hk_channel_send(int fd, const hk_msg *msg, hk_buf *scratch,
                          const hk_io *io, const char *who);

/**
 * Receives one frame into scratch (the header first, then exactly the
 * payload it announces) and decodes it into *out (hk_wire_decode, the one
 * bounds-checking decoder); the caller frees it with hk_msg_free.
 * Errors: HK_ERR_PEER_LOST, HK_ERR_TIMEOUT, HK_ERR_NOMEM,
 * HK_ERR_PROTOCOL ("from rank 3: ..." with the decoder's reason).
 */
hk_status hk_channel_recv(int fd, hk_msg *out, hk_buf *scratch, const hk_io *io,
                          const char *who);

/**
 * hk_channel_send on control endpoint c (any kind); counts the frame in
 * c->frames_sent. Errors: as hk_channel_send.
 */
hk_status hk_channel_send_on(hk_ctrl *c, const hk_msg *msg, hk_buf *scratch,
                             const hk_io *io, const char *who);

/**
 * Sends an already encoded frame (len bytes from frame, borrowed) whole on
 * c, counted as hk_channel_send_on does: rank 0 encodes one RESPONSES
 * once and sends it to every member. Errors: HK_ERR_PEER_LOST,
 * HK_ERR_TIMEOUT.
 */
hk_status hk_channel_send_frame(hk_ctrl *c, const void *frame, size_t len,
                                const hk_io *io, const char *who);

/**
 * hk_channel_recv on control endpoint c; counts the frame in
 * c->frames_received. Errors: as hk_channel_recv.
 */
hk_status hk_channel_recv_on(hk_ctrl *c, hk_msg *out, hk_buf *scratch,
                             const hk_io *io, const char *who);

#endif
