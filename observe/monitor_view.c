/*
 * monitor_view.c - freeing a monitor view (monitor_view.h).
 */
#include "observe/monitor_view.h"

#include <stdlib.h>
#include <string.h>

void hk_monitor_view_free(hk_monitor_view *v) {
  free(v->ranks);
  memset(v, 0, sizeof *v);
}
