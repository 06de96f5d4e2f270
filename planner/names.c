/*
 * names.c - the names a folder offers (names.h).
 */
#include "planner/names.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a and b (b's first blen bytes) equal, case and punctuation ignored. */
static int alike(const char *a, const char *b, size_t blen) {
  const char *bend = b + blen;
  for (;;) {
    while (*a && !isalnum((unsigned char)*a))
      a++;
    while (b < bend && !isalnum((unsigned char)*b))
      b++;
    if (!*a || b == bend)
      return !*a && b == bend;
    if (tolower((unsigned char)*a++) != tolower((unsigned char)*b++))
      return 0;
  }
}

void hk_names_in(const char *dir, const char *ext, const char *want, char *list,
                 size_t cap, char *near, size_t ncap) {
  list[0] = '\0';
  near[0] = '\0';
  struct dirent **e = NULL;
  int n = scandir(dir, &e, NULL, alphasort);
  size_t used = 0, elen = strlen(ext);
  for (int i = 0; i < n; i++) {
    const char *name = e[i]->d_name;
    size_t len = strlen(name);
    if (len > elen && !strcmp(name + len - elen, ext) && name[0] != '.') {
      int w = snprintf(list + used, cap - used, "%s%.*s", used ? ", " : "",
                       (int)(len - elen), name);
      if (w < 0 || (size_t)w >= cap - used) {
        if (cap > 4)
          snprintf(list + cap - 4, 4, "...");
        used = cap - 1;
      } else {
        used += (size_t)w;
      }
      if (!near[0] && alike(want, name, len - elen))
        snprintf(near, ncap, "%.*s", (int)(len - elen), name);
    }
    free(e[i]);
  }
  free(e);
}
