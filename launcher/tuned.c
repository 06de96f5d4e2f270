/*
 * tuned.c - hkrun --autotune-load (tuned.h).
 */
#include "launcher/tuned.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/config.h"
#include "common/outfile.h"
#include "common/status.h"
#include "coordinator/autotune.h"

/* Checks and sets NAME=value (line `no` of path). */
static int set_one(const char *path, int no, char *line, hk_tuned_shown *shown,
                   char *err, size_t cap) {
  char *eq = strchr(line, '=');
  if (!eq) {
    snprintf(err, cap, "'%s' line %d: '%.80s' is not NAME=value", path, no,
             line);
    return -1;
  }
  *eq = '\0';
  if (eq[1] == '\0') {
    snprintf(err, cap, "'%s' line %d: %.80s= has no value", path, no, line);
    return -1;
  }
  int known = 0;
  for (int i = 0; i < HK_TUNE_NVARS; i++)
    known |= strcmp(line, hk_tune_vars[i]) == 0;
  if (!known) {
    snprintf(err, cap,
             "'%s' line %d: '%.80s' is not a setting --autotune saves "
             "(HK_FUSION_THRESHOLD, HK_CYCLE_TIME_MS, "
             "HK_HIERARCHICAL_ALLREDUCE, HK_SOCKETS_PER_PEER, "
             "HK_STAGING_CHUNK_BYTES, HK_COMPRESSION)",
             path, no, line);
    return -1;
  }
  /* checked either way; a value already set (the user's environment, -x)
   * is put back: it wins over the file */
  const char *was = getenv(line);
  char *own = was ? strdup(was) : NULL;
  if (was && !own) {
    snprintf(err, cap, "'%s' line %d: out of memory", path, no);
    return -1;
  }
  hk_config c;
  int rc = 0;
  if (setenv(line, eq + 1, 1) != 0 || hk_config_load_var(&c, line) != HK_OK) {
    snprintf(err, cap, "'%s' line %d: %s", path, no, hk_last_error());
    rc = -1;
  }
  if (own && setenv(line, own, 1) != 0) {
    snprintf(err, cap, "'%s' line %d: cannot put %s back: %s", path, no, line,
             strerror(errno));
    rc = -1;
  }
  if (rc == 0) {
    size_t used = strlen(shown->text);
    snprintf(shown->text + used, sizeof shown->text - used, "%s%s=%s%s",
             used ? ", " : "", line, eq + 1,
             own ? " (set already: that wins)" : "");
  }
  free(own);
  return rc;
}

int hkrun_load_tuned(const char *path, hk_tuned_shown *shown, char *err,
                     size_t cap) {
  shown->text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, cap, "cannot read '%s': %s", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t line_cap = 0;
  ssize_t len;
  int no = 0, set = 0, rc = 0;
  errno = 0;
  while (rc == 0 && (len = getline(&line, &line_cap, f)) >= 0) {
    no++;
    if (strlen(line) != (size_t)len) {
      snprintf(err, cap, "'%s' line %d: a NUL byte (not a text file?)", path,
               no);
      rc = -1;
      break;
    }
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '\0' || line[0] == '#')
      continue;
    rc = set_one(path, no, line, shown, err, cap);
    set += rc == 0;
  }
  if (rc == 0 && ferror(f)) { /* a directory: EISDIR */
    snprintf(err, cap, "cannot read '%s': %s", path,
             strerror(errno ? errno : EIO));
    rc = -1;
  }
  free(line);
  fclose(f);
  if (rc == 0 && set == 0) {
    snprintf(err, cap, "'%s': no setting in it", path);
    rc = -1;
  }
  return rc;
}

int hkrun_check_tune_file(const char *path, const char *flag, char *err,
                          size_t cap) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(err, cap, "%s: '%s' is a directory", flag, path);
    return -1;
  }
  hk_outfile f;
  if (hk_outfile_open(&f, path, 0600, flag) != HK_OK) {
    snprintf(err, cap, "%s", hk_last_error());
    return -1;
  }
  hk_outfile_close(&f); /* never published: nothing is left */
  return 0;
}
