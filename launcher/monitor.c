/* monitor.c - hkrun --monitor's display (monitor.h). */
#include "launcher/monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/output.h"

void hk_live_init(hk_live *l, int fd) {
  l->fd = fd;
  l->tty = isatty(fd);
  l->shown = 0;
}

void hk_live_show(hk_live *l, const char *text) {
  size_t len = strlen(text), lines = 0;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  if (len && text[len - 1] != '\n')
    lines++;
  /* per line: a prefix of at most 16 bytes and a newline */
  char *out = malloc(len + 16 * lines + 32);
  if (!out)
    return;
  size_t k = 0;
  if (l->tty && l->shown > 0)
    k += (size_t)snprintf(out, 32, "\033[%dA", l->shown); /* cursor up */
  const char *prefix = l->tty ? "\r\033[2K" : "monitor: ";
  for (const char *p = text; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    memcpy(out + k, prefix, strlen(prefix));
    k += strlen(prefix);
    memcpy(out + k, p, n);
    k += n;
    out[k++] = '\n';
    p += n + (e != NULL);
  }
  hk_out_write_all(l->fd, out, k);
  l->shown = (int)lines;
  free(out);
}
