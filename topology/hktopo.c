/*
 * hktopo - prints a server's layout, the rings hk would use and the
 * predicted allreduce bandwidth (topology/print.h).
 *
 *   hktopo [FILE]
 *
 * FILE is `nvidia-smi topo -m` text or an NCCL topology XML (told apart by
 * content); an NCCL graph file (NCCL_GRAPH_FILE) is recognised and its
 * ring channels are printed. Without FILE: HK_TOPO_FILE, else NVML, else a
 * message saying why there is no layout. Exit status: 0, 1 on error, 2 on
 * bad usage. `hkrun --topology [FILE]` runs this.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/status.h"
#include "topology/parse.h"
#include "topology/print.h"

static int usage(FILE *f) {
  fprintf(f, "usage: hktopo [FILE]\n"
             "  FILE: `nvidia-smi topo -m` text, an NCCL topology XML "
             "(NCCL_TOPO_FILE) or an NCCL graph file (NCCL_GRAPH_FILE).\n"
             "  Without FILE: $HK_TOPO_FILE, else this machine's GPUs "
             "through NVML.\n");
  return f == stdout ? 0 : 2;
}

static int report(hk_topo *t, const char *what) {
  hk_status st = hk_topo_print_report(stdout, t, what);
  hk_topo_free(t);
  if (st != HK_OK) {
    fprintf(stderr, "hktopo: %s\n", hk_last_error());
    return 1;
  }
  return 0;
}

static int from_file(const char *path) {
  char *text;
  size_t len;
  if (hk_topo_read_file(path, &text, &len) != HK_OK) {
    fprintf(stderr, "hktopo: %s\n", hk_last_error());
    return 1;
  }
  hk_status st;
  if (hk_topo_sniff(text, len) == HK_TOPO_FMT_NCCLGRAPH) {
    hk_ncclgraph *g = malloc(sizeof *g);
    st = g ? hk_ncclgraph_parse(text, len, g) : HK_ERR_NOMEM;
    if (st == HK_OK)
      hk_ncclgraph_print(stdout, g, path);
    else
      fprintf(stderr, "hktopo: %s: %s\n", path,
              g ? hk_last_error() : "out of memory");
    free(g);
    free(text);
    return st == HK_OK ? 0 : 1;
  }
  hk_topo *t;
  st = hk_topo_parse(text, len, &t);
  free(text);
  if (st != HK_OK) {
    fprintf(stderr, "hktopo: %s: %s\n", path, hk_last_error());
    return 1;
  }
  return report(t, path);
}

int main(int argc, char **argv) {
  if (argc > 2)
    return usage(stderr);
  if (argc == 2) {
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
      return usage(stdout);
    if (argv[1][0] == '-' && argv[1][1] != '\0')
      return usage(stderr);
    return from_file(argv[1]);
  }
  hk_config cfg;
  if (hk_config_load_var(&cfg, "HK_TOPO_FILE") != HK_OK) {
    fprintf(stderr, "hktopo: %s\n", hk_last_error());
    return 1;
  }
  if (cfg.topo_file[0])
    return from_file(cfg.topo_file);
  hk_topo *t;
  if (hk_topo_load_setting(NULL, &t) != HK_OK) {
    fprintf(stderr,
            "hktopo: %s\nhktopo: pass a file: hktopo FILE "
            "(`nvidia-smi topo -m` text or NCCL topology XML)\n",
            hk_last_error());
    return 1;
  }
  return report(t, "of this machine (NVML)");
}
