/*
 * observers.h - the engine's side of observation (observe/observe.h):
 * attaching the observers the configuration asks for at hk_init, telling
 * them when the job is set up. Detaching is hk_observe_detach(&ctx->obs,
 * final); the tensor hooks' view of a handle is context.h's hk_observed.
 */
#ifndef HK_WORKER_OBSERVERS_H
#define HK_WORKER_OBSERVERS_H

#include "worker/context.h"

/**
 * hk_init, once the configuration and placement are read (before the
 * bootstrap: the flight recorder's SIGUSR1 handler must be in place while
 * hkrun may already forward a dump request): attaches the observers
 * ctx->cfg asks for to ctx->obs (observe/attach.h). Errors: theirs.
 */
hk_status hk_observers_attach(hk_ctx *ctx);

/**
 * hk_init, once the mesh, rings, negotiator and agreed settings exist,
 * before the background thread starts: the observers' ready (the monitor
 * starts its thread). Errors: theirs, or HK_ERR_NOMEM.
 */
hk_status hk_observers_ready(hk_ctx *ctx);

#endif
