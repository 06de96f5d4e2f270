/*
 * elastic.c - a worker's side of an elastic job (see elastic.h).
 */
#include "worker/elastic.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "coordinator/channel.h"

int hk_elastic_hkrun_word(hk_ctx *ctx, double wait_s, hk_status *st,
                          char *reason, size_t cap) {
  const int fd = ctx->mesh.launcher_fd;
  if (fd < 0)
    return 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, (int)(wait_s * 1000.0) + 1) <= 0)
    return 0;
  hk_msg m;
  hk_io io = {-1, wait_s > 1.0 ? wait_s : 1.0};
  hk_buf scratch = {0};
  hk_status rst = hk_channel_recv(fd, &m, &scratch, &io, "hkrun");
  hk_buf_free(&scratch);
  if (rst != HK_OK)
    return 0;
  int said = 1;
  if (m.type == HK_MSG_RESET) {
    *st = HK_ERR_RANKS_CHANGED;
    snprintf(reason, cap,
             "%s: the elastic job re-forms without it (restore the last "
             "commit and call hk_elastic_reset)",
             m.u.abort.reason);
  } else if (m.type == HK_MSG_ABORT) {
    *st = HK_ERR_PEER_LOST;
    snprintf(reason, cap, "%s", m.u.abort.reason);
  } else {
    said = 0;
  }
  hk_msg_free(&m);
  return said;
}

hk_status hk_elastic_explain(hk_ctx *ctx, hk_status st) {
  char word[HK_WIRE_MAX_REASON_LEN + 128]; /* hkrun's reason, and ours */
  if (ctx->cfg.elastic &&
      (st == HK_ERR_PEER_LOST || st == HK_ERR_TIMEOUT || st == HK_ERR_AUTH) &&
      hk_elastic_hkrun_word(ctx, ctx->cfg.timeout_s, &st, word, sizeof word))
    st = hk_fail(st, "%s", word);
  return st;
}

hk_status hk_elastic_place(hk_ctx *ctx, const hk_msg *peers,
                           const char *my_host, uint16_t my_port) {
  for (uint32_t i = 0; i < peers->u.peers.n; i++)
    if (peers->u.peers.peers[i].port == my_port &&
        strcmp(peers->u.peers.peers[i].host, my_host) == 0) {
      ctx->rank = (int)i;
      ctx->size = (int)peers->u.peers.n;
      return HK_OK;
    }
  return hk_fail(HK_ERR_PROTOCOL,
                 "hkrun's peer list of %u does not hold this worker's "
                 "address %s:%u",
                 peers->u.peers.n, my_host, (unsigned)my_port);
}

static hk_status send_register(hk_ctx *ctx, const char *my_host,
                               uint16_t my_port, const hk_io *io) {
  hk_msg reg = {.type = HK_MSG_REGISTER};
  reg.u.reg.rank = ctx->slot;
  reg.u.reg.size = ctx->slots;
  reg.u.reg.pid = (int32_t)getpid();
  reg.u.reg.port = my_port;
  snprintf(reg.u.reg.host, sizeof reg.u.reg.host, "%s", my_host);
  hk_buf scratch = {0};
  hk_status st =
      hk_channel_send(ctx->mesh.launcher_fd, &reg, &scratch, io, "hkrun");
  hk_buf_free(&scratch);
  return st;
}

hk_status hk_elastic_register(hk_ctx *ctx, const char *my_host,
                              uint16_t my_port, double deadline,
                              hk_msg *peers) {
  hk_io io = {-1, deadline - hk_now()};
  hk_status st = send_register(ctx, my_host, my_port, &io);
  hk_buf scratch = {0};
  while (st == HK_OK) {
    io.timeout_s = deadline - hk_now();
    if (io.timeout_s <= 0) {
      st = hk_fail(HK_ERR_TIMEOUT,
                   "the elastic job did not re-form within "
                   "HK_START_TIMEOUT_S + HK_ELASTIC_TIMEOUT_S = %g s",
                   ctx->cfg.start_timeout_s + ctx->cfg.elastic_timeout_s);
      break;
    }
    st = hk_channel_recv(ctx->mesh.launcher_fd, peers, &scratch, &io, "hkrun");
    if (st != HK_OK)
      break;
    if (peers->type == HK_MSG_RESET) {
      /* the generation this worker left (hkrun sends a RESET only after
       * a generation's peer list, which comes first): read late, as rank
       * 0 relayed it sooner; this registration stands. Registering again
       * here would count its address for a later generation, after the
       * worker had given it up. */
      hk_log(HK_LOG_INFO, "an earlier reset read late: %s",
             peers->u.abort.reason);
      hk_msg_free(peers);
      continue;
    }
    if (peers->type == HK_MSG_ABORT) {
      st = hk_fail(HK_ERR_PEER_LOST, "%s", peers->u.abort.reason);
      hk_msg_free(peers);
      break;
    }
    if (peers->type != HK_MSG_PEERS) {
      st = hk_fail(HK_ERR_PROTOCOL,
                   "hkrun answered with message type %u, expected a peer "
                   "list",
                   peers->type);
      hk_msg_free(peers);
      break;
    }
    st = hk_elastic_place(ctx, peers, my_host, my_port);
    if (st != HK_OK)
      hk_msg_free(peers);
    break;
  }
  hk_buf_free(&scratch);
  return st;
}
