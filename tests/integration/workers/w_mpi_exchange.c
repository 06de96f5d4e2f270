/*
 * w_mpi_exchange.c - a worker started by mpirun (directly, or through
 * `hkrun --mpi` / `hkrun -H`) that bootstraps the way hk does under Open
 * MPI: its place from the environment (worker/placement.h), its address
 * (HK_SOCKET_IFNAME through collectives/transport/iface.h, else
 * 127.0.0.1), one record per rank exchanged over MPI
 * (worker/mpi_exchange.h), and the per-host layout from the host names.
 *
 *   w_mpi_exchange own       hk initialises MPI and finalises it
 *   w_mpi_exchange app       the program initialises MPI; hk must not
 *                            finalise it
 *   w_mpi_exchange mismatch  a wrong size is refused with HK_ERR_CONFIG
 *   w_mpi_exchange fail N    as own, then rank N exits with status 3
 *
 * On success each rank prints one line:
 *   "rank R of S local L/LS cross C/CS host H addr A owned O ok"
 * and exits 0; any check that fails prints "rank R: ..." on stderr and
 * exits 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/transport/iface.h"
#include "common/status.h"
#include "worker/mpi_exchange.h"
#include "worker/placement.h"

/* The record each rank contributes. */
typedef struct record {
  hk_wire_peer peer; /* address and a port unique to the rank */
  char host[HK_WIRE_MAX_HOST_LEN + 1];
} record;

static int rank_ = -1;

static void die(const char *what) {
  fprintf(stderr, "rank %d: %s: %s\n", rank_, what, hk_last_error());
  exit(1);
}

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "rank %d: check failed: %s\n", rank_, what);
    exit(1);
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "own";
  int fail_rank = argc > 2 ? atoi(argv[2]) : -1;
  hk_placement p;
  if (hk_placement_from_env(&p) != HK_OK)
    die("placement");
  rank_ = p.rank;
  check(p.source == HK_PLACEMENT_OMPI, "started by Open MPI");
  check(hk_mpi_built_in(), "libhk built with MPI");

  if (strcmp(mode, "app") == 0) {
    int provided;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) ==
              MPI_SUCCESS,
          "MPI_Init_thread by the program");
  }
  int mrank = -1, msize = -1;
  if (hk_mpi_world(&mrank, &msize) != HK_OK)
    die("hk_mpi_world");
  check(mrank == p.rank && msize == p.size, "MPI agrees with the placement");

  if (strcmp(mode, "mismatch") == 0) {
    record mine = {0}, all[2];
    check(hk_mpi_allgather(&mine, sizeof mine, all, p.size + 1) ==
              HK_ERR_CONFIG,
          "a wrong size is refused");
    char want[128];
    snprintf(want, sizeof want,
             "the launcher says %d ranks but MPI_COMM_WORLD has %d", p.size + 1,
             p.size);
    check(strcmp(hk_last_error(), want) == 0, "the message names both sizes");
  }

  record mine = {0};
  const char *ifname = getenv("HK_SOCKET_IFNAME");
  if (ifname && *ifname) {
    if (hk_iface_address(ifname, mine.peer.host, sizeof mine.peer.host) !=
        HK_OK)
      die("HK_SOCKET_IFNAME");
  } else {
    snprintf(mine.peer.host, sizeof mine.peer.host, "127.0.0.1");
  }
  mine.peer.port = (uint16_t)(20000 + p.rank);
  check(gethostname(mine.host, sizeof mine.host - 1) == 0, "gethostname");

  record *all = calloc((size_t)p.size, sizeof *all);
  hk_wire_peer *peers = calloc((size_t)p.size, sizeof *peers);
  const char **hosts = calloc((size_t)p.size, sizeof *hosts);
  hk_rank_layout *layout = calloc((size_t)p.size, sizeof *layout);
  check(all && peers && hosts && layout, "memory");
  if (hk_mpi_exchange(&mine.peer, p.size, peers) != HK_OK)
    die("hk_mpi_exchange");
  if (hk_mpi_allgather(&mine, sizeof mine, all, p.size) != HK_OK)
    die("hk_mpi_allgather");
  for (int r = 0; r < p.size; r++) {
    check(peers[r].port == 20000 + r, "every rank's port at its index");
    check(memcmp(&peers[r], &all[r].peer, sizeof peers[r]) == 0,
          "both exchanges agree");
    hosts[r] = all[r].host;
  }
  check(strcmp(peers[p.rank].host, mine.peer.host) == 0, "my own record");
  if (hk_layout_from_hosts(hosts, p.size, layout) != HK_OK)
    die("layout");
  const hk_rank_layout *me = &layout[p.rank];
  check(me->local_rank == p.local_rank && me->local_size == p.local_size,
        "host names give Open MPI's local rank and size");

  printf("rank %d of %d local %d/%d cross %d/%d host %s addr %s owned %d ok\n",
         p.rank, p.size, me->local_rank, me->local_size, me->cross_rank,
         me->cross_size, mine.host, mine.peer.host, hk_mpi_owned());
  fflush(stdout);
  int owned = hk_mpi_owned();
  check(owned == (strcmp(mode, "app") != 0), "hk owns MPI iff it began it");
  check(hk_mpi_thread_level() >= MPI_THREAD_SINGLE, "a thread level");

  hk_mpi_finalize_if_owned();
  int finalized = 0;
  MPI_Finalized(&finalized);
  check(finalized == owned, "finalised only if hk owned MPI");
  hk_mpi_finalize_if_owned(); /* twice is harmless */
  if (owned) {
    int r2, s2;
    check(hk_mpi_world(&r2, &s2) == HK_ERR_CONFIG, "no second MPI_Init");
    check(strstr(hk_last_error(), "already finalised") != NULL,
          "the message says why");
  } else {
    MPI_Finalize();
  }
  free(all);
  free(peers);
  free(hosts);
  free(layout);
  if (p.rank == fail_rank)
    return 3;
  return 0;
}
