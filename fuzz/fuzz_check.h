// fuzz_check.h: what every harness asserts besides "no crash, leak or undefined behaviour": a failure's
// message is one line that starts with the name of the input (file, tensor or flag owner).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/common_interface_defs.h>

#include "core/status.h"

// Reports `what` (also under -close_fd_mask, through the sanitizer's report channel) and stops the
// run: libFuzzer records the input as a crash.
static inline void fuzz_fail(const char *what) {
    __sanitizer_report_error_summary(what);
    abort();
}

#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)
// Stops the run when cond is false.
#define FUZZ_REQUIRE(cond)                                                                           \
    do {                                                                                             \
        if (!(cond)) fuzz_fail("fuzz invariant failed at " __FILE__ ":" FUZZ_STR(__LINE__) ": " #cond); \
    } while (0)

// After a failed call: the last error names `name` first and is a single line.
static inline void fuzz_check_error(const char *name) {
    const char *msg = fsdp_last_error();
    if (strncmp(msg, name, strlen(name)) != 0 || strchr(msg, '\n') || strchr(msg, '\r')) {
        char line[1200];
        snprintf(line, sizeof line, "bad error message: %s", msg);
        fuzz_fail(line);
    }
}
