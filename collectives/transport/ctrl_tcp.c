/*
 * ctrl_tcp.c - the tcp kind of control endpoint (ctrl.h): the control
 * socket carries the bytes itself; poll(2) on it says everything.
 */
#include "collectives/transport/ctrl.h"
#include "collectives/transport/tcp.h"
#include "common/log.h"
#include "common/status.h"

static hk_status tcp_send(hk_ctrl *c, const void *p, size_t n, const hk_io *io,
                          const char *who) {
  return hk_tcp_send_all(c->fd, p, n, io, who);
}

static hk_status tcp_recv(hk_ctrl *c, void *p, size_t n, const hk_io *io,
                          const char *who) {
  return hk_tcp_recv_all(c->fd, p, n, io, who);
}

static int tcp_pending(hk_ctrl *c) {
  (void)c;
  return 0;
}

static void tcp_arm(hk_ctrl *c, int on) {
  (void)c;
  (void)on;
}

static hk_status tcp_polled(hk_ctrl *c, short revents, int *readable,
                            const char *who) {
  (void)c;
  (void)who;
  *readable = revents != 0;
  return HK_OK;
}

static size_t tcp_room(hk_ctrl *c, size_t want) {
  size_t granted = 0;
  if (hk_tcp_set_send_buffer(c->fd, want, &granted) != HK_OK)
    hk_log(HK_LOG_DEBUG, "%s", hk_last_error());
  return granted;
}

static const hk_ctrl_ops tcp_ops = {"tcp",   tcp_send,   tcp_recv, tcp_pending,
                                    tcp_arm, tcp_polled, tcp_room, NULL};

void hk_ctrl_init_tcp(hk_ctrl *c, int fd) {
  c->ops = &tcp_ops;
  c->fd = fd;
  c->state = NULL;
}
