/* channel.c - control messages framed over a byte stream (channel.h). */
#include "coordinator/channel.h"

#include <stdio.h>

#include "collectives/transport/tcp.h"
#include "common/status.h"

hk_status hk_channel_send(int fd, const hk_msg *msg, hk_buf *scratch,
                          const hk_io *io, const char *who) {
  hk_buf_clear(scratch);
  hk_status st = hk_wire_encode(msg, scratch);
  if (st != HK_OK)
    return st;
  return hk_tcp_send_all(fd, scratch->data, scratch->len, io, who);
}

hk_status hk_channel_recv(int fd, hk_msg *out, hk_buf *scratch, const hk_io *io,
                          const char *who) {
  hk_buf_clear(scratch);
  hk_status st = hk_buf_reserve(scratch, HK_WIRE_HEADER_LEN);
  if (st != HK_OK)
    return st;
  st = hk_tcp_recv_all(fd, scratch->data, HK_WIRE_HEADER_LEN, io, who);
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
  st =
      hk_tcp_recv_all(fd, scratch->data + HK_WIRE_HEADER_LEN, payload, io, who);
  if (st != HK_OK)
    return st;
  scratch->len += payload;
  st = hk_wire_decode(scratch->data, scratch->len, out);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s", hk_last_error());
    return hk_fail(st, "from %s: %s", who, msg);
  }
  return HK_OK;
}
