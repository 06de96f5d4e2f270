/*
 * alltoall.h - alltoall with per-rank splits by pairwise exchange: at step
 * k (1..N-1) rank r sends its block for rank r+k and receives the block of
 * rank r-k, both at once, over the direct connection to each (the classic
 * pairwise algorithm, e.g. Thakur, Rabenseifner & Gropp, "Optimization of
 * Collective Communication Operations in MPICH", IJHPCA 2005). Block sizes
 * are exchanged first, so the receiver allocates exactly what arrives.
 * Each exchange goes over the link to each peer (TCP, striped, or MPI:
 * collectives/transport/link.h) and drains it before the next.
 * Thread-safety: the background thread only.
 */
#ifndef HK_COLLECTIVES_ALLTOALL_H
#define HK_COLLECTIVES_ALLTOALL_H

#include <stddef.h>

#include "collectives/transport/link.h"
#include "hk/hk.h"

/**
 * sendbuf holds send_rows[0] + ... + send_rows[n-1] rows of row_bytes
 * bytes, in rank order. On HK_OK *out is a malloc'd buffer (NULL if empty;
 * the caller frees it) of the rows received from every rank in rank order,
 * recv_rows[j] (n entries) how many came from rank j. peers[j] is the
 * link to rank j (n entries; peers[rank] unused): the job's ranks, or a
 * process set's (ranks within the set). Errors: HK_ERR_PEER_LOST,
 * HK_ERR_TIMEOUT, HK_ERR_NOMEM, HK_ERR_PROTOCOL (an absurd block size).
 */
hk_status hk_alltoall_pairwise(int rank, int n, hk_link *const *peers,
                               const hk_io *io, const void *sendbuf,
                               const size_t *send_rows, size_t row_bytes,
                               void **out, size_t *recv_rows);

#endif
