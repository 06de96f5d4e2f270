/*
 * runtime.h - the one runtime context of this process (worker/runtime.c
 * implements include/hk/hk.h's API over it), for hk's internal tools:
 * worker/internal.h's getters, bench/hkbench.
 */
#ifndef HK_WORKER_RUNTIME_H
#define HK_WORKER_RUNTIME_H

#include "worker/context.h"

/** The runtime context between hk_init and hk_shutdown, else NULL. Any
 *  thread; the context goes away at hk_shutdown, so a caller must not
 *  race it. */
hk_ctx *hk_runtime_context(void);

/** HK_ERR_NOT_INITIALIZED for API function fn called with no job: the
 *  message says whether before hk_init or after hk_shutdown ended it.
 *  Any thread. */
hk_status hk_runtime_no_job(const char *fn);

#endif
