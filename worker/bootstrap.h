/*
 * bootstrap.h - joining the job at hk_init: register with hkrun's
 * rendezvous (or exchange addresses over MPI under mpirun/srun), learn
 * every rank's address, and build the mesh: a data link between every
 * pair of ranks (the ring uses its neighbours', alltoall all of them) and
 * a control connection from every rank > 0 to rank 0.
 *
 * A data link (collectives/transport/link.h) is HK_SOCKETS_PER_PEER TCP
 * connections, opened by the lower rank, striped; or, with
 * HK_CROSS_TRANSPORT=mpi under mpirun/srun, MPI point-to-point to every
 * rank on another host (no TCP data connection to those). Every
 * connection runs the secret handshake (common/auth.h) and then a HELLO
 * naming the rank, the channel and (data) the stream index and count,
 * which the accepting side checks against what it expects.
 * All socket work goes through collectives/transport/tcp.h.
 */
#ifndef HK_WORKER_BOOTSTRAP_H
#define HK_WORKER_BOOTSTRAP_H

#include "worker/context.h"

/**
 * Builds ctx->mesh for ctx->rank/size from HK_RENDEZVOUS (host:port) and
 * ctx->secret, within ctx->cfg.start_timeout_s. Without HK_RENDEZVOUS (a
 * world of size 1 started by hand) it opens nothing.
 * Errors: HK_ERR_CONFIG (malformed HK_RENDEZVOUS; HK_SOCKETS_PER_PEER or
 * HK_CROSS_TRANSPORT differing between ranks; HK_CROSS_TRANSPORT=mpi
 * across hosts without mpirun/srun, or with MPI below
 * MPI_THREAD_SERIALIZED), HK_ERR_TIMEOUT,
 * HK_ERR_AUTH, HK_ERR_PROTOCOL, HK_ERR_SYSTEM, HK_ERR_PEER_LOST (hkrun
 * aborted the job while we waited; the message says why).
 * Elastic jobs (HK_ELASTIC): the first generation may form without a
 * worker lost before it did (ctx->rank and ctx->size are then this
 * worker's place in it, on one host), and a loss while the ranks connect
 * makes the survivors form the next one (hk_bootstrap_again), as often as
 * it happens.
 */
hk_status hk_bootstrap(hk_ctx *ctx);

/**
 * Elastic jobs (hk_elastic_reset): builds ctx->mesh for the next
 * generation, keeping ctx->mesh.launcher_fd (hkrun's connection, which
 * must be open): listens anew, registers again (worker/elastic.h), which
 * sets ctx->rank and ctx->size, and connects to the new peers as
 * hk_bootstrap does (one host: local rank = rank). Waits up to
 * HK_START_TIMEOUT_S + HK_ELASTIC_TIMEOUT_S for the generation to form,
 * then HK_START_TIMEOUT_S for the connections.
 * Thread-safety: the worker's one thread, no background thread running.
 * Errors: hk_elastic_register's, and hk_bootstrap's connection errors;
 * a connection lost to a peer that hkrun then names gives hkrun's word
 * (HK_ERR_RANKS_CHANGED: another loss; HK_ERR_PEER_LOST: the job ended).
 */
hk_status hk_bootstrap_again(hk_ctx *ctx);

/**
 * Elastic jobs, rank 0: opens its watch, a second authenticated
 * connection to the rendezvous (HK_RENDEZVOUS) on which hkrun tells how
 * many workers wait to join (HK_MSG_JOIN; the background thread reads
 * it): ctx->mesh.watch_fd. Nothing for other ranks, static jobs, or a
 * job without hkrun. A second connection, as the first (launcher_fd) is
 * every transfer's abort signal: a byte on it ends them.
 * Thread-safety: as hk_bootstrap. Errors: hk_tcp_connect's, within
 * HK_START_TIMEOUT_S; HK_ERR_CONFIG (HK_RENDEZVOUS malformed).
 */
hk_status hk_bootstrap_watch(hk_ctx *ctx);

/** Closes every fd and link of the mesh (safe on a partly built one). */
void hk_mesh_close(hk_mesh *mesh, int size);

/**
 * TCP connections each data link opens to its peer: HK_SOCKETS_PER_PEER,
 * or with HK_AUTOTUNE HK_AUTOTUNE_SOCKETS where that is more (the links
 * then carry their stream over HK_SOCKETS_PER_PEER of them, and the
 * autotuner tries more: worker/tune.h). Pure.
 */
int hk_bootstrap_sockets_open(const hk_config *cfg);

#endif
