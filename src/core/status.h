// status.h: status codes, the last-error message, and check macros.
// Library code never exits: runtime failures return an fsdp_status and leave a one-line
// message in a thread-local buffer (fsdp_last_error); programmer errors abort via FSDP_ASSERT.
#pragma once
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    FSDP_OK = 0,
    FSDP_ERR_INVALID_ARG,  // a flag, option or argument value is out of range
    FSDP_ERR_IO,           // open/read/write/rename failed
    FSDP_ERR_FORMAT,       // a file is malformed or truncated
    FSDP_ERR_MISSING,      // a named tensor/file/entry is absent
    FSDP_ERR_SHAPE,        // a tensor has the wrong shape
    FSDP_ERR_DTYPE,        // a tensor has the wrong dtype
    FSDP_ERR_NOMEM,        // allocation failed
    FSDP_ERR_COMM,         // a collective failed
    FSDP_ERR_INTERNAL,     // a broken invariant that is not the caller's fault
} fsdp_status;

const char *fsdp_status_name(fsdp_status s);

// Records a printf-style one-line message as the last error and returns s, so callers can write
// `return fsdp_error(FSDP_ERR_SHAPE, "%s: tensor '%s' has shape ..., expected ...", path, name);`
fsdp_status fsdp_error(fsdp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *fsdp_last_error(void);
void fsdp_clear_error(void);

#define FSDP_CHECK(call)                       \
    do {                                       \
        fsdp_status check_status_ = (call);    \
        if (check_status_ != FSDP_OK)          \
            return check_status_;              \
    } while (0)

#define FSDP_ASSERT(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fsdp: assertion failed: %s at %s:%d\n", #cond, __FILE__,  \
                    __LINE__);                                                         \
            abort();                                                                   \
        }                                                                              \
    } while (0)
