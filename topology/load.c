/* load.c - telling the layout formats apart, reading files, HK_TOPO_FILE
 * (parse.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "hk/hk.h"
#include "topology/parse.h"

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Skips from p to just past the string `end`, or to e. */
static const char *skip_past(const char *p, const char *e, const char *end) {
  size_t n = strlen(end);
  for (; p + n <= e; p++)
    if (memcmp(p, end, n) == 0)
      return p + n;
  return e;
}

hk_topo_format hk_topo_sniff(const char *text, size_t len) {
  const char *p = text, *e = text + len;
  if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
    p += 3;
  while (p < e && is_space(*p))
    p++;
  if (p >= e || *p != '<')
    return HK_TOPO_FMT_SMI;
  for (;;) {
    while (p < e && is_space(*p))
      p++;
    if (p + 1 >= e || *p != '<')
      return HK_TOPO_FMT_NCCLXML; /* expat will say what is wrong */
    if (p[1] == '?')
      p = skip_past(p, e, "?>");
    else if (e - p >= 4 && memcmp(p, "<!--", 4) == 0)
      p = skip_past(p + 4, e, "-->");
    else if (p[1] == '!')
      p = skip_past(p, e, ">");
    else
      break;
  }
  static const char graphs[] = "<graphs";
  size_t n = sizeof graphs - 1;
  if ((size_t)(e - p) > n && memcmp(p, graphs, n) == 0 &&
      (is_space(p[n]) || p[n] == '>' || p[n] == '/'))
    return HK_TOPO_FMT_NCCLGRAPH;
  return HK_TOPO_FMT_NCCLXML;
}

hk_status hk_topo_parse(const char *text, size_t len, hk_topo **out) {
  if (hk_topo_sniff(text, len) == HK_TOPO_FMT_SMI)
    return hk_topo_parse_smi(text, len, out);
  return hk_topo_parse_ncclxml(text, len, out); /* rejects <graphs> */
}

hk_status hk_topo_read_file(const char *path, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return hk_fail_errno(HK_ERR_SYSTEM, errno, "%s: cannot open", path);
  char *buf = malloc(HK_TOPO_MAX_FILE_BYTES + 1);
  if (!buf) {
    fclose(f);
    return hk_fail(HK_ERR_NOMEM, "%s: out of memory", path);
  }
  size_t n = fread(buf, 1, HK_TOPO_MAX_FILE_BYTES + 1, f);
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err) {
    free(buf);
    return hk_fail_errno(HK_ERR_SYSTEM, err, "%s: cannot read", path);
  }
  if (n > HK_TOPO_MAX_FILE_BYTES) {
    free(buf);
    return hk_fail(HK_ERR_CONFIG, "%s: larger than %u bytes", path,
                   HK_TOPO_MAX_FILE_BYTES);
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return HK_OK;
}

hk_status hk_topo_load_file(const char *path, hk_topo **out) {
  *out = NULL;
  char *text;
  size_t len;
  hk_status st = hk_topo_read_file(path, &text, &len);
  if (st != HK_OK)
    return st;
  st = hk_topo_parse(text, len, out);
  free(text);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg, "%s: %s", path, hk_last_error());
    hk_set_last_error(msg);
  }
  return st;
}

hk_status hk_topo_load_setting(const char *topo_file, hk_topo **out) {
  *out = NULL;
  const char *path = topo_file;
  if (path && *path) {
    hk_status st = hk_topo_load_file(path, out);
    if (st != HK_OK) {
      char msg[HK_ERROR_MSG_CAP];
      snprintf(msg, sizeof msg, "HK_TOPO_FILE=%s", hk_last_error());
      hk_set_last_error(msg);
    }
    return st;
  }
  hk_status st = hk_topo_load_nvml(NULL, out);
  if (st != HK_OK) {
    char msg[HK_ERROR_MSG_CAP];
    snprintf(msg, sizeof msg,
             "no layout: HK_TOPO_FILE is not set and NVML is unavailable: %s",
             hk_last_error());
    hk_set_last_error(msg);
  }
  return st;
}
