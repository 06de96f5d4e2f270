/*
 * attach.h - which observers a configuration asks for: hk_init attaches
 * them through here (the engine names none of them).
 */
#ifndef HK_OBSERVE_ATTACH_H
#define HK_OBSERVE_ATTACH_H

#include "observe/observe.h"

/**
 * Attaches, in this order: introspection (always: worker/internal.h reads
 * it), the timeline (rank 0 with HK_TIMELINE), the flight recorder
 * (unless HK_FLIGHT_RECORDER=0), the monitor (hk_config_monitoring). On an
 * error the observers attached so far stay attached (hk_observe_detach frees
 * them). Errors: those of each observer's attach (HK_ERR_NOMEM, HK_ERR_SYSTEM
 * naming what failed). hk_init's thread, before the background thread starts.
 */
hk_status hk_observe_attach_all(hk_observers *o, const hk_obs_setup *s);

#endif
