/*
 * ctrl.c - what every kind of control endpoint shares (ctrl.h): the
 * dispatch through the kind's table and the one wait built on it.
 */
#include "collectives/transport/ctrl.h"

#include <poll.h>

#include "common/clock.h"

void hk_ctrl_close(hk_ctrl *c) {
  if (c->ops && c->ops->free_state)
    c->ops->free_state(c);
  c->state = NULL;
}

const char *hk_ctrl_kind(const hk_ctrl *c) {
  return c->ops ? c->ops->name : "none";
}

hk_status hk_ctrl_send(hk_ctrl *c, const void *p, size_t n, const hk_io *io,
                       const char *who) {
  return c->ops->send(c, p, n, io, who);
}

hk_status hk_ctrl_recv(hk_ctrl *c, void *p, size_t n, const hk_io *io,
                       const char *who) {
  return c->ops->recv(c, p, n, io, who);
}

int hk_ctrl_pending(hk_ctrl *c) { return c->ops->pending(c); }

void hk_ctrl_arm(hk_ctrl *c, int on) { c->ops->arm(c, on); }

hk_status hk_ctrl_polled(hk_ctrl *c, short revents, int *readable,
                         const char *who) {
  return c->ops->polled(c, revents, readable, who);
}

size_t hk_ctrl_room(hk_ctrl *c, size_t want) { return c->ops->room(c, want); }

int hk_ctrl_wait_readable(hk_ctrl *c, double timeout_s) {
  const double end = hk_now() + timeout_s;
  for (;;) {
    if (hk_ctrl_pending(c))
      return 1;
    hk_ctrl_arm(c, 1);
    int now = hk_ctrl_pending(c);
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    double left = end - hk_now();
    int rc = now ? 0 : left <= 0 ? -1 : poll(&p, 1, (int)(left * 1000) + 1);
    hk_ctrl_arm(c, 0);
    if (now)
      return 1;
    if (rc <= 0)
      return 0;
    int readable = 0;
    if (hk_ctrl_polled(c, p.revents, &readable, "the peer") != HK_OK)
      return 0;
    if (readable)
      return 1;
  }
}
