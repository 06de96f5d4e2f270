/* channel.c - control messages framed over a byte stream (channel.h). */
#include "coordinator/channel.h"

#include <stdio.h>

#include "common/status.h"

hk_status hk_channel_send_frame(hk_ctrl *c, const void *frame, size_t len,
                                const hk_io *io, const char *who) {
  hk_status st = hk_ctrl_send(c, frame, len, io, who);
  if (st == HK_OK)
    atomic_fetch_add_explicit(&c->frames_sent, 1, memory_order_relaxed);
  return st;
}

hk_status hk_channel_send_on(hk_ctrl *c, const hk_msg *msg, hk_buf *scratch,
                             const hk_io *io, const char *who) {
  hk_buf_clear(scratch);
  hk_status st = hk_wire_encode(msg, scratch);
  if (st != HK_OK)
    return st;
  return hk_channel_send_frame(c, scratch->data, scratch->len, io, who);
}

hk_status hk_channel_recv_on(hk_ctrl *c, hk_msg *out, hk_buf *scratch,
                             const hk_io *io, const char *who) {
  hk_buf_clear(scratch);
  hk_status st = hk_buf_reserve(scratch, HK_WIRE_HEADER_LEN);
  if (st != HK_OK)
    return st;
  st = hk_ctrl_recv(c, scratch->data, HK_WIRE_HEADER_LEN, io, who);
  if (st != HK_OK)
    return st;
  uint8_t type;
  uint32_t payload;
  st = hk_wire_header(scratch->data, &type, &payload);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(st, "from %s: %s", who, msg);
  }
  scratch->len = HK_WIRE_HEADER_LEN;
  st = hk_buf_reserve(scratch, payload);
  if (st != HK_OK)
    return st;
  st = hk_ctrl_recv(c, scratch->data + HK_WIRE_HEADER_LEN, payload, io, who);
  if (st != HK_OK)
    return st;
  scratch->len += payload;
  atomic_fetch_add_explicit(&c->frames_received, 1, memory_order_relaxed);
  st = hk_wire_decode(scratch->data, scratch->len, out);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(st, "from %s: %s", who, msg);
  }
  return HK_OK;
}

hk_status hk_channel_send(int fd, const hk_msg *msg, hk_buf *scratch,
                          const hk_io *io, const char *who) {
  hk_ctrl c = {0};
  hk_ctrl_init_tcp(&c, fd);
  return hk_channel_send_on(&c, msg, scratch, io, who);
}

hk_status hk_channel_recv(int fd, hk_msg *out, hk_buf *scratch, const hk_io *io,
                          const char *who) {
  hk_ctrl c = {0};
  hk_ctrl_init_tcp(&c, fd);
  return hk_channel_recv_on(&c, out, scratch, io, who);
}
