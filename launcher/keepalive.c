/*
 * keepalive.c - bounded TCP keepalive (see keepalive.h).
 */
#include "launcher/keepalive.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"

void hk_keepalive_set(int fd, double timeout_s) {
  int n = timeout_s < 1 ? 1 : (int)(timeout_s + 0.999);
  int on = 1, one = 1;
  unsigned ms = (unsigned)n * 1000u;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof one) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &n, sizeof n) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0)
    hk_log(HK_LOG_WARNING, "cannot bound the agent connection's keepalive: %s",
           strerror(errno));
}
