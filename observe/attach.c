/*
 * attach.c - the observers a configuration asks for (attach.h).
 */
#include "observe/attach.h"

#include "observe/flight.h"
#include "observe/introspect.h"
#include "observe/monitor.h"
#include "observe/timeline.h"

/* Each attaches its observer when s->cfg asks for it (else does nothing). */
static hk_status (*const attachers[])(hk_observers *, const hk_obs_setup *) = {
    hk_introspect_attach,
    hk_timeline_attach,
    hk_flight_attach,
    hk_monitor_attach,
};

hk_status hk_observe_attach_all(hk_observers *o, const hk_obs_setup *s) {
  hk_status st = HK_OK;
  for (size_t i = 0; i < sizeof attachers / sizeof *attachers && st == HK_OK;
       i++)
    st = attachers[i](o, s);
  return st;
}
