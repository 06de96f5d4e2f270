/*
 * bed.h - a netns test bed (tests/netbed/netbed.sh) from an integration
 * test: make one, read what its env file says, look into its namespaces,
 * remove it and check nothing of it is left.
 *
 *   static hkt_bed bed;
 *   setup:    hkt_bed_up(&bed, NETBED_SH, 4, "1gbit")  -> 0 (bed.up tells
 *             whether there is a bed; if not, bed.skip_reason says why)
 *   a test:   hkt_bed_need(&bed);  (cmocka skip, printing the reason)
 *   teardown: hkt_bed_down(&bed, NETBED_SH)
 *
 * Uses cmocka (skip) and the harness (processes with deadlines).
 * Thread-safety: none (one test thread).
 */
#ifndef HK_TESTS_BED_H
#define HK_TESTS_BED_H

#include <stddef.h>

#define HKT_BED_MAX_HOSTS 16

/** One bed, as its env file describes it. */
typedef struct hkt_bed {
  int up;                /* 1 once made and read */
  char skip_reason[512]; /* why there is no bed (up == 0) */
  char dir[128], id[16], subnet[32];
  int nhosts;
  char host[HKT_BED_MAX_HOSTS][32];    /* addresses, used as host names */
  char ns[HKT_BED_MAX_HOSTS][64];      /* each host's network namespace */
  char link[HKT_BED_MAX_HOSTS][32];    /* each host's veth end on the bridge */
  char mpi_args[512], agent_args[512]; /* NETBED_MPI_ARGS, _AGENT_ARGS */
  char *netns_before; /* `ip netns list` before the bed was made */
} hkt_bed;

/**
 * Makes a bed of k hosts (1..16) whose links run at rate ("1gbit", or
 * "none"), no delay, after removing the beds a killed run left (netbed.sh
 * gc). The bed's owner is this test process: if it dies without
 * hkt_bed_down (killed, timed out), the bed's guard removes it. Returns 0 with
 * b->up = 1, or 0 with b->up = 0 and b->skip_reason set where no bed can be
 * made here (`netbed.sh check` fails: not root, no CAP_NET_ADMIN, tools
 * missing; or no mpirun); -1 if a bed could be made but making this one failed.
 */
int hkt_bed_up(hkt_bed *b, const char *netbed_sh, int k, const char *rate);

/**
 * Removes the bed (netbed.sh down) and checks that none of its
 * namespaces, links or its directory is left, and that no namespace other
 * than another bed's appeared meanwhile. Returns 0, or -1 (printed why).
 * A bed never made is fine (0).
 */
int hkt_bed_down(hkt_bed *b, const char *netbed_sh);

/** cmocka-skips the calling test, printing the reason, if there is no bed. */
void hkt_bed_need(const hkt_bed *b);

/**
 * "A:n,B:n,..." for `hkrun -H`: the first `hosts` hosts of the bed with
 * `slots` slots each, into out (cap bytes).
 */
void hkt_bed_hostlist(const hkt_bed *b, int hosts, int slots, char *out,
                      size_t cap);

/**
 * The pids of the processes in host h's namespace (`ip netns pids`), as
 * malloc'ed text ("" when none); NULL if ip failed.
 */
char *hkt_bed_pids(const hkt_bed *b, int h);

/**
 * Sets host h's link down (down = 1: the host is cut off the network, as
 * if its cable were pulled) or up again. Up returns once the host and the
 * launcher reach each other over it again (a connection from the host to
 * the launcher's port 9 is refused within 1 s), so that the next job
 * finds the bed whole; -1 if it is not so within 10 s (printing every
 * host's link and neighbour state). Returns 0, or -1 (printed why).
 */
int hkt_bed_link(const hkt_bed *b, int h, int down);

/** Prints every host's link and neighbour table and whether it answers
 *  the launcher over its link, to stderr: what a failed start is read
 *  with. */
void hkt_bed_dump_net(const hkt_bed *b);

/** Room hkt_bed_job_argv needs. */
#define HKT_BED_ARGV 32

/**
 * The command line of an hk job across bed b, into argv[HKT_BED_ARGV]:
 * `hkrun -np NP -H HOSTS [--no-tag-output] --network-interface <b's
 * subnet> --mpi-args <b's agent args> -- ARGS...`, --no-tag-output where
 * tag_output is 0; args up to its first NULL (at most 19 are taken).
 * argv points into its arguments and b, which must outlive it.
 */
void hkt_bed_job_argv(const hkt_bed *b, char **argv, const char *hkrun,
                      const char *np, const char *hosts, int tag_output,
                      const char *const *args);

/** Runs argv; returns its stdout (malloc'ed) if it exited 0, else NULL
 *  (printing what it said). */
char *hkt_output_of(char **argv, double timeout_s);

#endif
