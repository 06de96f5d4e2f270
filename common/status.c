#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[HK_ERROR_MSG_CAP];

static void vformat(const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
}

hk_status hk_fail(hk_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat(fmt, ap);
  va_end(ap);
  return status;
}

hk_status hk_vfail(hk_status status, const char *fmt, va_list ap) {
  vformat(fmt, ap);
  return status;
}

hk_status hk_fail_errno(hk_status status, int errno_value, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat(fmt, ap);
  va_end(ap);
  size_t used = strlen(last_error);
  snprintf(last_error + used, sizeof last_error - used, ": %s",
           strerror(errno_value));
  return status;
}

void hk_set_last_error(const char *msg) {
  snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

void hk_clear_error(void) { last_error[0] = '\0'; }

const char *hk_last_error(void) { return last_error; }

const char *hk_strerror(hk_status status) {
  switch (status) {
  case HK_OK:
    return "success";
  case HK_ERR_INVALID_ARG:
    return "invalid argument";
  case HK_ERR_NOT_INITIALIZED:
    return "hk is not initialized";
  case HK_ERR_ALREADY_INITIALIZED:
    return "hk is already initialized";
  case HK_ERR_MISMATCH:
    return "ranks disagree on a tensor";
  case HK_ERR_DUPLICATE_NAME:
    return "tensor name already in flight";
  case HK_ERR_PEER_LOST:
    return "peer lost";
  case HK_ERR_SHUTDOWN:
    return "hk was shut down";
  case HK_ERR_TIMEOUT:
    return "timed out";
  case HK_ERR_AUTH:
    return "authentication failed";
  case HK_ERR_PROTOCOL:
    return "protocol error";
  case HK_ERR_SYSTEM:
    return "system call failed";
  case HK_ERR_NOMEM:
    return "out of memory";
  case HK_ERR_CONFIG:
    return "bad configuration";
  case HK_ERR_STALLED:
    return "stalled: ranks did not submit the same tensors";
  case HK_ERR_DEVICE:
    return "GPU or device communicator failed";
  case HK_ERR_RANKS_CHANGED:
    return "a rank was lost: the elastic job re-forms (hk_elastic_reset)";
  }
  return "unknown status";
}
