/*
 * status.h - hk's one error convention: every fallible internal function
 * returns hk_status and, on failure, records a detailed message in the
 * calling thread's last-error buffer (read back with hk_last_error()).
 */
#ifndef HK_COMMON_STATUS_H
#define HK_COMMON_STATUS_H

#include <stdarg.h>

#include "hk/hk.h"

/** Capacity of the thread-local message buffer, in bytes incl. NUL. */
#define HK_ERROR_MSG_CAP 2048

/**
 * Formats a message (printf-style) into this thread's last-error buffer
 * and returns `status`, so call sites read `return hk_fail(HK_ERR_X, ...)`.
 * Messages longer than HK_ERROR_MSG_CAP-1 bytes are truncated.
 * Thread-safety: touches thread-local storage only.
 */
hk_status hk_fail(hk_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** hk_fail with a va_list (for code that forwards its own arguments). */
hk_status hk_vfail(hk_status status, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/** As hk_fail, with ": <strerror(errno_value)>" appended. */
hk_status hk_fail_errno(hk_status status, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Sets this thread's last-error message verbatim (copied). */
void hk_set_last_error(const char *msg);

/** Empties this thread's last-error message. */
void hk_clear_error(void);

#endif
