// status.c: status names and the thread-local last-error message.
#include "core/status.h"

#include <stdarg.h>

static _Thread_local char last_error[1024];

const char *fsdp_status_name(fsdp_status s) {
    switch (s) {
    case FSDP_OK: return "ok";
    case FSDP_ERR_INVALID_ARG: return "invalid argument";
    case FSDP_ERR_IO: return "i/o error";
    case FSDP_ERR_FORMAT: return "malformed file";
    case FSDP_ERR_MISSING: return "missing";
    case FSDP_ERR_SHAPE: return "wrong shape";
    case FSDP_ERR_DTYPE: return "wrong dtype";
    case FSDP_ERR_NOMEM: return "out of memory";
    case FSDP_ERR_COMM: return "communication error";
    case FSDP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

fsdp_status fsdp_error(fsdp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    // One line whatever a file, tensor or flag name holds: line breaks and other control
    // characters become '?'.
    for (char *c = last_error; *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t') *c = '?';
    return s;
}

const char *fsdp_last_error(void) { return last_error[0] ? last_error : "no error message"; }

void fsdp_clear_error(void) { last_error[0] = 0; }
