/*
 * bed.c - a netns test bed from an integration test (see bed.h).
 */
#include "bed.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define BED_S 60.0 /* making or removing a bed of 4 takes ~2 s */
/* how long a link set up again may take to carry traffic (a host
 * answered at once in each of 20 tries here at a load of 9 to 17) */
#define LINK_UP_S 10.0

static void dump(const char *what, const hkt_result *r) {
  fprintf(stderr,
          "--- %s: exit %d signal %d timed_out %d\n--- stdout:\n%.4000s\n"
          "--- stderr:\n%.4000s\n",
          what, r->exit_code, r->signal, r->timed_out, r->out, r->err);
}

char *hkt_output_of(char **argv, double timeout_s) {
  hkt_result r;
  hkt_run(argv, NULL, timeout_s, &r);
  char *out = NULL;
  if (r.exited && r.exit_code == 0)
    out = strdup(r.out);
  else
    dump(argv[0], &r);
  hkt_result_free(&r);
  return out;
}

/* Copies the value of KEY=VALUE or KEY='VALUE' from env-file text. */
static int env_value(const char *text, const char *key, char *out, size_t cap) {
  size_t klen = strlen(key);
  for (const char *l = text; l && *l;
       l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, key, klen) != 0 || l[klen] != '=')
      continue;
    const char *v = l + klen + 1;
    size_t n = strcspn(v, "\n");
    if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'') {
      v++;
      n -= 2;
    }
    if (n >= cap)
      return -1;
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
  }
  return -1;
}

/* Splits space-separated words into rows of a [HKT_BED_MAX_HOSTS][width]
 * array; returns how many. */
static int split_words(const char *s, char *rows, size_t width) {
  int n = 0;
  while (*s && n < HKT_BED_MAX_HOSTS) {
    s += strspn(s, " ");
    size_t len = strcspn(s, " ");
    if (!len)
      break;
    if (len >= width)
      return -1;
    memcpy(rows + (size_t)n * width, s, len);
    rows[(size_t)n * width + len] = '\0';
    n++;
    s += len;
  }
  return n;
}

static int read_env_file(hkt_bed *b) {
  char path[160];
  snprintf(path, sizeof path, "%s/env", b->dir);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  char hosts[1024], nss[2048], links[1024];
  if (env_value(text, "NETBED_ID", b->id, sizeof b->id) ||
      env_value(text, "NETBED_SUBNET", b->subnet, sizeof b->subnet) ||
      env_value(text, "NETBED_HOSTS", hosts, sizeof hosts) ||
      env_value(text, "NETBED_NAMESPACES", nss, sizeof nss) ||
      env_value(text, "NETBED_LINKS", links, sizeof links) ||
      env_value(text, "NETBED_MPI_ARGS", b->mpi_args, sizeof b->mpi_args) ||
      env_value(text, "NETBED_AGENT_ARGS", b->agent_args, sizeof b->agent_args))
    return -1;
  b->nhosts = split_words(hosts, &b->host[0][0], sizeof b->host[0]);
  if (b->nhosts < 1 ||
      split_words(nss, &b->ns[0][0], sizeof b->ns[0]) != b->nhosts ||
      split_words(links, &b->link[0][0], sizeof b->link[0]) != b->nhosts)
    return -1;
  return 0;
}

int hkt_bed_up(hkt_bed *b, const char *netbed_sh, int k, const char *rate) {
  memset(b, 0, sizeof *b);
  char *check[] = {(char *)netbed_sh, "check", NULL};
  hkt_result r;
  hkt_run(check, NULL, BED_S, &r);
  int can = r.exited && r.exit_code == 0;
  if (!can)
    snprintf(b->skip_reason, sizeof b->skip_reason, "no test bed here: %.400s",
             r.err);
  hkt_result_free(&r);
  if (!can)
    return 0;
  /* what a killed run left (beds whose owner is gone) */
  char *gc[] = {(char *)netbed_sh, "gc", NULL};
  hkt_run(gc, NULL, BED_S, &r);
  hkt_result_free(&r);
  char *which[] = {"sh", "-c", "command -v mpirun", NULL};
  char *m = hkt_output_of(which, BED_S);
  if (!m) {
    snprintf(b->skip_reason, sizeof b->skip_reason,
             "no test bed here: mpirun (openmpi-bin) is not installed");
    return 0;
  }
  free(m);
  char *list[] = {"ip", "netns", "list", NULL};
  b->netns_before = hkt_output_of(list, BED_S);
  char kk[16];
  snprintf(kk, sizeof kk, "%d", k);
  char *up[] = {(char *)netbed_sh, "up", kk, (char *)rate, "none", NULL};
  char *dir = hkt_output_of(up, BED_S);
  if (!b->netns_before || !dir) {
    free(dir);
    return -1; /* could check, but not create: a failure, not a skip */
  }
  snprintf(b->dir, sizeof b->dir, "%.*s", (int)strcspn(dir, "\n"), dir);
  free(dir);
  if (read_env_file(b) != 0 || b->nhosts != k) {
    fprintf(stderr, "cannot read %s/env (or not %d hosts in it)\n", b->dir, k);
    return -1;
  }
  b->up = 1;
  return 0;
}

int hkt_bed_down(hkt_bed *b, const char *netbed_sh) {
  if (!b->dir[0]) {
    free(b->netns_before);
    b->netns_before = NULL;
    return 0;
  }
  int rc = 0;
  char *down[] = {(char *)netbed_sh, "down", b->dir, NULL};
  char *out = hkt_output_of(down, BED_S);
  if (!out)
    rc = -1;
  free(out);
  char *list[] = {"ip", "netns", "list", NULL};
  char *after = hkt_output_of(list, BED_S);
  char *links_cmd[] = {"ip", "-o", "link", "show", NULL};
  char *links = hkt_output_of(links_cmd, BED_S);
  if (!after || !links) {
    rc = -1;
  } else {
    char needle[32];
    snprintf(needle, sizeof needle, "hkbed-%s-", b->id);
    if (strstr(after, needle)) {
      fprintf(stderr, "namespaces of bed %s left behind:\n%s", b->id, after);
      rc = -1;
    }
    /* every namespace there now was there before, or belongs to someone
     * else's bed made meanwhile */
    for (const char *l = after; *l;) {
      size_t n = strcspn(l, " \n");
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)n, l);
      if (!strstr(b->netns_before, name) && strncmp(name, "hkbed-", 6) != 0) {
        fprintf(stderr, "namespace '%s' appeared during the test\n", name);
        rc = -1;
      }
      l += strcspn(l, "\n");
      if (*l)
        l++;
    }
    if (strstr(links, b->id)) {
      fprintf(stderr, "links of bed %s left behind:\n%s", b->id, links);
      rc = -1;
    }
  }
  if (access(b->dir, F_OK) == 0) {
    fprintf(stderr, "%s left behind\n", b->dir);
    rc = -1;
  }
  free(after);
  free(links);
  free(b->netns_before);
  b->netns_before = NULL;
  b->up = 0;
  b->dir[0] = '\0';
  return rc;
}

void hkt_bed_need(const hkt_bed *b) {
  if (!b->up) {
    fprintf(stderr, "skipped: %s\n", b->skip_reason);
    skip();
  }
}

void hkt_bed_job_argv(const hkt_bed *b, char **argv, const char *hkrun,
                      const char *np, const char *hosts, int tag_output,
                      const char *const *args) {
  int k = 0;
  argv[k++] = (char *)hkrun;
  argv[k++] = "-np";
  argv[k++] = (char *)np;
  argv[k++] = "-H";
  argv[k++] = (char *)hosts;
  if (!tag_output)
    argv[k++] = "--no-tag-output";
  argv[k++] = "--network-interface";
  argv[k++] = (char *)b->subnet;
  argv[k++] = "--mpi-args";
  argv[k++] = (char *)b->agent_args;
  argv[k++] = "--";
  for (int i = 0; k < HKT_BED_ARGV - 1 && args[i]; i++)
    argv[k++] = (char *)args[i];
  argv[k] = NULL;
}

void hkt_bed_hostlist(const hkt_bed *b, int hosts, int slots, char *out,
                      size_t cap) {
  size_t at = 0;
  out[0] = '\0';
  for (int h = 0; h < hosts && h < b->nhosts && at < cap; h++) {
    int n = snprintf(out + at, cap - at, "%s%s:%d", h ? "," : "", b->host[h],
                     slots);
    if (n < 0)
      break;
    at += (size_t)n;
  }
}

char *hkt_bed_pids(const hkt_bed *b, int h) {
  char *argv[] = {"ip", "netns", "pids", (char *)b->ns[h], NULL};
  return hkt_output_of(argv, BED_S);
}

/* The launcher's address on the bed: its subnet's .1 (netbed.sh). */
static void bridge_address(const hkt_bed *b, char *out, size_t cap) {
  snprintf(out, cap, "%.*s1", (int)strcspn(b->subnet, "/") - 1, b->subnet);
}

/* 1 if host h and the launcher reach each other over h's link: from
 * inside h's namespace a connection to the launcher's port 9, where
 * nothing listens, is refused (the SYN went out, the reset came back),
 * within 1 s. The agent's watchdog asks the same, the other way round. */
static int host_answers(const hkt_bed *b, int h) {
  char br[32], probe[160];
  bridge_address(b, br, sizeof br);
  snprintf(probe, sizeof probe,
           "out=$( (exec 3<>/dev/tcp/%s/9) 2>&1); "
           "case $out in *refused*) exit 0 ;; esac; exit 1",
           br);
  char *argv[] = {"ip",      "netns", "exec", (char *)b->ns[h],
                  "timeout", "1",     "bash", "-c",
                  probe,     NULL};
  hkt_result r;
  hkt_run(argv, NULL, 5, &r);
  int ok = r.exited && r.exit_code == 0;
  hkt_result_free(&r);
  return ok;
}

void hkt_bed_dump_net(const hkt_bed *b) {
  for (int h = 0; h < b->nhosts; h++) {
    char *link[] = {"ip", "-n", (char *)b->ns[h], "-o", "link", "show", NULL};
    char *neigh[] = {"ip", "-n", (char *)b->ns[h], "neigh", "show", NULL};
    char *l = hkt_output_of(link, BED_S), *n = hkt_output_of(neigh, BED_S);
    fprintf(stderr, "--- host %s (%s): answers %d\n%s%s", b->host[h], b->ns[h],
            host_answers(b, h), l ? l : "(ip link failed)\n",
            n ? n : "(ip neigh failed)\n");
    free(l);
    free(n);
  }
}

int hkt_bed_link(const hkt_bed *b, int h, int down) {
  char *argv[] = {"ip", "link", "set", (char *)b->link[h], down ? "down" : "up",
                  NULL};
  char *out = hkt_output_of(argv, BED_S);
  free(out);
  if (!out || down)
    return out ? 0 : -1;
  /* up: done once the host answers over it again (the next job's daemons
   * connect back to mpirun at once), or never */
  for (double until = hkt_now() + LINK_UP_S; hkt_now() < until;)
    if (host_answers(b, h))
      return 0;
  fprintf(stderr,
          "host %s does not answer over its link %s %.0f s after it "
          "was set up again\n",
          b->host[h], b->link[h], LINK_UP_S);
  hkt_bed_dump_net(b);
  return -1;
}
