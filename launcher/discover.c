/*
 * discover.c - running an elastic job's host discovery script (see
 * discover.h).
 */
#include "launcher/discover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

int hkrun_discover(const char *script, int slots_per_host, char *out,
                   size_t cap) {
  FILE *f = popen(script, "r");
  if (!f) {
    snprintf(out, cap, "--host-discovery-script %s cannot be run: %s", script,
             strerror(errno));
    return -1;
  }
  char line[512], hosts[160] = "", bad[200] = "";
  int nhosts = 0, slots = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line + strspn(line, " \t");
    if (!*p)
      continue;
    char *colon = strrchr(p, ':');
    long k = slots_per_host > 0 ? slots_per_host : 1;
    if (colon) {
      char *end;
      k = strtol(colon + 1, &end, 10);
      if (colon[1] == '\0' || *end || k < 1 || k > 65536) {
        if (!*bad)
          snprintf(bad, sizeof bad,
                   "; its line '%.100s' has no slot count "
                   "(host:slots, slots 1..65536)",
                   p);
        continue;
      }
    }
    size_t n = strlen(hosts);
    if (nhosts < 4)
      snprintf(hosts + n, sizeof hosts - n, "%s%.*s:%ld", nhosts ? ", " : "",
               colon ? (int)(colon - p) : 64, p, k);
    else if (nhosts == 4)
      snprintf(hosts + n, sizeof hosts - n, ", ...");
    nhosts++;
    slots += (int)k;
  }
  int status = pclose(f);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(out, cap, "--host-discovery-script %s %s %d", script,
             status != -1 && WIFSIGNALED(status) ? "was killed by signal"
                                                 : "exited with status",
             status == -1          ? -1
             : WIFSIGNALED(status) ? WTERMSIG(status)
                                   : WEXITSTATUS(status));
    return -1;
  }
  if (nhosts == 0) {
    snprintf(out, cap, "--host-discovery-script %s lists no host%s", script,
             bad);
    return 0;
  }
  snprintf(out, cap,
           "--host-discovery-script %s lists %d slot%s on %d host%s "
           "(%s)%s",
           script, slots, slots == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s",
           hosts, bad);
  return slots;
}
