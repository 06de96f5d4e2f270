/*
 * link.c (libhk_mpi.so) - an hk_link over MPI point-to-point (see
 * collectives/transport/link.h for the protocol: sends of at most `chunk`
 * bytes straight from the caller's memory, HK_LINK_MPI_DEPTH receives of
 * `chunk` bytes kept posted into the link's own buffers, message lengths
 * from MPI_Get_count, and a 0-byte acknowledgement of every message).
 * libhk reaches these through the module's table (mpi_module.h).
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/transport/link.h"
#include "collectives/transport/mpi/impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#define ACK_SLOTS (2 * HK_LINK_MPI_DEPTH) /* acknowledgements in flight */

struct hk_link_mpi {
  MPI_Comm comm;
  int peer;
  size_t chunk;
  /* sending */
  MPI_Request sreq[HK_LINK_MPI_DEPTH]; /* MPI_REQUEST_NULL: a free slot */
  int spending;                        /* sends not yet complete */
  uint64_t posted;                     /* stream bytes posted so far */
  uint64_t sstart[HK_LINK_MPI_DEPTH];  /* stream offset of slot i's send */
  uint64_t sent, acked; /* messages sent; acknowledged by the peer */
  MPI_Request ackrecv;  /* the posted receive of the next acknowledgement */
  /* receiving */
  uint8_t *rbuf;                       /* DEPTH x chunk; NULL until used */
  MPI_Request rreq[HK_LINK_MPI_DEPTH]; /* receive i lands in rbuf + i*chunk */
  int rhead;   /* the oldest posted receive: the stream's next message */
  int rready;  /* rhead's message has arrived: rlen, roff valid */
  size_t rlen; /* its length */
  size_t roff; /* bytes of it already handed out */
  MPI_Request acksend[ACK_SLOTS]; /* acknowledgements of messages received */
  int ackpending;                 /* of those, not yet complete */
};

static char ack_byte; /* the (unread) buffer of 0-byte acknowledgements */

/* An MPI call with the peer failed: PEER_LOST with MPI's own words. */
static hk_status mpi_fail(const char *call, int rc, const char *dir,
                          const char *name) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "error %d", rc);
  return hk_fail(HK_ERR_PEER_LOST, "%s %s %s failed: %s", call, dir, name,
                 text);
}

hk_status hk_mpim_link_open(struct hk_link_mpi **out, int peer,
                            const void *comm, size_t chunk) {
  *out = NULL;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return hk_fail(HK_ERR_CONFIG,
                   "an MPI link to rank %d needs MPI to be "
                   "initialised (and not finalised)",
                   peer);
  if (!comm || peer < 0 || chunk == 0 || chunk > INT_MAX)
    return hk_fail(HK_ERR_INVALID_ARG,
                   "MPI link to rank %d: no communicator, or a chunk of %zu "
                   "bytes",
                   peer, chunk);
  struct hk_link_mpi *m = calloc(1, sizeof *m);
  if (!m)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate an MPI link");
  m->comm = *(const MPI_Comm *)comm;
  m->peer = peer;
  m->chunk = chunk;
  m->ackrecv = MPI_REQUEST_NULL;
  for (int i = 0; i < HK_LINK_MPI_DEPTH; i++)
    m->sreq[i] = m->rreq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i < ACK_SLOTS; i++)
    m->acksend[i] = MPI_REQUEST_NULL;
  *out = m;
  return HK_OK;
}

static hk_status post_recv(struct hk_link_mpi *m, int i, const char *name) {
  int rc = MPI_Irecv(m->rbuf + (size_t)i * m->chunk, (int)m->chunk, MPI_BYTE,
                     m->peer, HK_LINK_MPI_TAG, m->comm, &m->rreq[i]);
  return rc == MPI_SUCCESS ? HK_OK : mpi_fail("MPI_Irecv", rc, "from", name);
}

/* Allocates the receive buffers and posts every receive, in order. */
static hk_status ensure_recvs(struct hk_link_mpi *m, const char *name) {
  if (m->rbuf)
    return HK_OK;
  m->rbuf = malloc(HK_LINK_MPI_DEPTH * m->chunk);
  if (!m->rbuf)
    return hk_fail(HK_ERR_NOMEM,
                   "cannot allocate %d x %zu bytes to receive from %s",
                   HK_LINK_MPI_DEPTH, m->chunk, name);
  m->rhead = 0;
  for (int i = 0; i < HK_LINK_MPI_DEPTH; i++) {
    hk_status st = post_recv(m, i, name);
    if (st != HK_OK)
      return st;
  }
  return HK_OK;
}

/* Completes what acknowledgements it can; frees their slots. */
static hk_status test_ack_sends(struct hk_link_mpi *m, const char *name) {
  for (int i = 0; i < ACK_SLOTS && m->ackpending > 0; i++) {
    if (m->acksend[i] == MPI_REQUEST_NULL)
      continue;
    int flag = 0;
    int rc = MPI_Test(&m->acksend[i], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return mpi_fail("MPI_Test of an acknowledgement", rc, "to", name);
    if (flag)
      m->ackpending--;
  }
  return HK_OK;
}

/* Tells the peer that one more of its messages has arrived. */
static hk_status send_ack(struct hk_link_mpi *m, const char *name) {
  hk_status st = test_ack_sends(m, name);
  if (st != HK_OK)
    return st;
  int slot = 0;
  while (slot < ACK_SLOTS && m->acksend[slot] != MPI_REQUEST_NULL)
    slot++;
  if (slot == ACK_SLOTS) { /* all in flight (rare): let MPI finish one */
    MPI_Request_free(&m->acksend[0]);
    m->ackpending--;
    slot = 0;
  }
  int rc = MPI_Isend(&ack_byte, 0, MPI_BYTE, m->peer, HK_LINK_MPI_ACK_TAG,
                     m->comm, &m->acksend[slot]);
  if (rc != MPI_SUCCESS)
    return mpi_fail("MPI_Isend of an acknowledgement", rc, "to", name);
  m->ackpending++;
  return HK_OK;
}

/* Counts the acknowledgements that have arrived; keeps one receive of
 * the next posted while any message is unacknowledged. */
static hk_status test_acks(struct hk_link_mpi *m, const char *name) {
  while (m->acked < m->sent) {
    int rc = MPI_SUCCESS, flag = 0;
    if (m->ackrecv == MPI_REQUEST_NULL)
      rc = MPI_Irecv(&ack_byte, 0, MPI_BYTE, m->peer, HK_LINK_MPI_ACK_TAG,
                     m->comm, &m->ackrecv);
    if (rc == MPI_SUCCESS)
      rc = MPI_Test(&m->ackrecv, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return mpi_fail("waiting for the acknowledgement", rc, "from", name);
    if (!flag)
      break;
    m->acked++;
  }
  return HK_OK;
}

/* Has the stream's next message arrived? Sets rready, rlen, roff, and
 * acknowledges it. */
static hk_status test_head(struct hk_link_mpi *m, const char *name) {
  if (m->rready)
    return HK_OK;
  int flag = 0;
  MPI_Status status;
  int rc = MPI_Test(&m->rreq[m->rhead], &flag, &status);
  if (rc != MPI_SUCCESS) {
    int cls = rc;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      return hk_fail(HK_ERR_PROTOCOL,
                     "%s sent a message larger than this rank's %zu-byte "
                     "MPI link chunk",
                     name, m->chunk);
    return mpi_fail("MPI_Test of a receive", rc, "from", name);
  }
  if (!flag)
    return HK_OK;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  m->rlen = count > 0 ? (size_t)count : 0;
  m->roff = 0;
  m->rready = 1;
  return send_ack(m, name);
}

/* Frees the slots of completed sends. */
static hk_status test_sends(struct hk_link_mpi *m, const char *name) {
  for (int i = 0; i < HK_LINK_MPI_DEPTH && m->spending > 0; i++) {
    if (m->sreq[i] == MPI_REQUEST_NULL)
      continue;
    int flag = 0;
    int rc = MPI_Test(&m->sreq[i], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return mpi_fail("MPI_Test of a send", rc, "to", name);
    if (flag)
      m->spending--;
  }
  return HK_OK;
}

hk_status hk_mpim_link_send_some(struct hk_link_mpi *m, const void *p, size_t n,
                                 size_t *done, const char *name) {
  *done = 0;
  hk_status st = test_sends(m, name);
  if (st != HK_OK)
    return st;
  const uint8_t *src = p;
  for (int i = 0; i < HK_LINK_MPI_DEPTH && n > 0; i++) {
    if (m->sreq[i] != MPI_REQUEST_NULL)
      continue;
    size_t len = n < m->chunk ? n : m->chunk;
    int rc = MPI_Isend(src, (int)len, MPI_BYTE, m->peer, HK_LINK_MPI_TAG,
                       m->comm, &m->sreq[i]);
    if (rc != MPI_SUCCESS)
      return mpi_fail("MPI_Isend", rc, "to", name);
    m->sstart[i] = m->posted;
    m->posted += len;
    m->spending++;
    m->sent++;
    src += len;
    n -= len;
    *done += len;
  }
  return HK_OK;
}

hk_status hk_mpim_link_recv_some(struct hk_link_mpi *m, void *p, size_t n,
                                 size_t *done, const char *name) {
  *done = 0;
  hk_status st = ensure_recvs(m, name);
  uint8_t *dst = p;
  while (st == HK_OK && n > 0) {
    st = test_head(m, name);
    if (st != HK_OK || !m->rready)
      break;
    size_t len = m->rlen - m->roff < n ? m->rlen - m->roff : n;
    memcpy(dst, m->rbuf + (size_t)m->rhead * m->chunk + m->roff, len);
    m->roff += len;
    dst += len;
    n -= len;
    *done += len;
    if (m->roff == m->rlen) { /* used up: post it again, behind the rest */
      m->rready = 0;
      st = post_recv(m, m->rhead, name);
      m->rhead = (m->rhead + 1) % HK_LINK_MPI_DEPTH;
    }
  }
  return st;
}

hk_status hk_mpim_link_progress(struct hk_link_mpi *m, int want_recv,
                                int *can_send, int *can_recv, int *drained,
                                const char *name) {
  hk_status st = test_sends(m, name);
  if (st == HK_OK)
    st = test_acks(m, name);
  if (st == HK_OK)
    st = test_ack_sends(m, name);
  if (st == HK_OK && want_recv)
    st = ensure_recvs(m, name);
  if (st == HK_OK && m->rbuf)
    st = test_head(m, name);
  if (st == HK_OK && !m->rbuf && m->spending == 0 && m->acked == m->sent &&
      m->ackpending == 0) { /* nothing of ours to test: still let MPI move
                               the other links' bytes */
    int flag = 0;
    MPI_Iprobe(m->peer, HK_LINK_MPI_TAG, m->comm, &flag, MPI_STATUS_IGNORE);
  }
  *can_send = m->spending < HK_LINK_MPI_DEPTH;
  *can_recv = m->rready;
  *drained = m->spending == 0 && m->acked == m->sent && m->ackpending == 0;
  return st;
}

/* Cancels a posted receive and waits (a second at most) for it to end;
 * 0 if it did not (MPI may still write into its buffer). */
static int cancel_recv(MPI_Request *req, double end) {
  if (*req == MPI_REQUEST_NULL)
    return 1;
  MPI_Cancel(req);
  while (*req != MPI_REQUEST_NULL) {
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (*req == MPI_REQUEST_NULL)
      break; /* complete: cancelled, or arrived (even with an error) */
    if (rc != MPI_SUCCESS || hk_now() > end) {
      MPI_Request_free(req);
      return 0;
    }
  }
  return 1;
}

void hk_mpim_link_close(struct hk_link_mpi *m) {
  if (!m)
    return;
  int finalized = 0, keep = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    /* Sends still pending after a failure: MPI frees them when they
     * complete (sends cannot be cancelled in Open MPI). */
    for (int i = 0; i < HK_LINK_MPI_DEPTH; i++)
      if (m->sreq[i] != MPI_REQUEST_NULL)
        MPI_Request_free(&m->sreq[i]);
    for (int i = 0; i < ACK_SLOTS; i++)
      if (m->acksend[i] != MPI_REQUEST_NULL)
        MPI_Request_free(&m->acksend[i]);
    /* Posted receives: cancelled; one already matched to a message still
     * arriving completes first (give it a second, then let it go and keep
     * its buffer: MPI may still write there). */
    double end = hk_now() + 1.0;
    cancel_recv(&m->ackrecv, end);
    for (int i = 0; i < HK_LINK_MPI_DEPTH && m->rbuf; i++)
      keep |= !cancel_recv(&m->rreq[i], end);
    if (keep)
      hk_log(HK_LOG_WARNING,
             "a receive from rank %d did not finish cancelling; its %zu-byte "
             "buffers are left to MPI",
             m->peer, HK_LINK_MPI_DEPTH * m->chunk);
  }
  if (!keep)
    free(m->rbuf);
  free(m);
}

uint64_t hk_mpim_link_released(const struct hk_link_mpi *m) {
  uint64_t r = m->posted; /* the oldest send still pending holds the rest */
  for (int i = 0; i < HK_LINK_MPI_DEPTH; i++)
    if (m->sreq[i] != MPI_REQUEST_NULL && m->sstart[i] < r)
      r = m->sstart[i];
  return r;
}

void hk_mpim_link_describe(const struct hk_link_mpi *m, char *buf, size_t cap) {
  snprintf(buf, cap,
           "%d of %d sends pending, %llu of %llu messages acknowledged, %d "
           "acknowledgements leaving, %s",
           m->spending, HK_LINK_MPI_DEPTH, (unsigned long long)m->acked,
           (unsigned long long)m->sent, m->ackpending,
           !m->rbuf    ? "no receive posted"
           : m->rready ? "a received message waiting to be read"
                       : "receives posted, none arrived");
}
