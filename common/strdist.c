/*
 * strdist.c - edit distances between names (see strdist.h).
 */
#include "common/strdist.h"

#include <string.h>

int hk_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63)
    return 64;
  int d[64][64];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v)
        v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v)
        v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1; /* a swap of two neighbours */
      d[i][j] = v;
    }
  return d[n][m] < 64 ? d[n][m] : 64;
}

int hk_edit_close(int d, size_t len) {
  return (d <= 2 || (len >= 12 && d <= 3)) && d < (int)len - 1;
}
