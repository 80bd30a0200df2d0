// fault_inject.c: the FSDP_TEST_* test hooks (see fault_inject.h).
#include "core/fault_inject.h"
#include "core/tunables.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Parses "A:B" from the variable; returns 0 when it is unset or malformed.
static int env_pair(fsdp_tunable_id var, long long *a, long long *b) {
    const char *v = fsdp_tunable(var);
    return v && sscanf(v, "%lld:%lld", a, b) == 2;
}

int fsdp_fault_crash_in_save(int64_t step) {
    const char *v = fsdp_tunable(FSDP_ENV_TEST_CRASH_IN_SAVE);
    return v && atoll(v) == step;
}

int fsdp_fault_crash_in_rotate(int64_t step) {
    long long k, p;
    return env_pair(FSDP_ENV_TEST_CRASH_IN_ROTATE, &k, &p) && k == step && p >= 0 && p <= 2 ? (int)p : -1;
}

int fsdp_fault_crash_in_archive(void) {
    const char *v = fsdp_tunable(FSDP_ENV_TEST_CRASH_IN_ARCHIVE);
    return v && *v && strcmp(v, "0") != 0;
}

int fsdp_fault_marker_full(void) {
    const char *v = fsdp_tunable(FSDP_ENV_TEST_MARKER_FULL);
    return v && *v && strcmp(v, "0") != 0;
}

int fsdp_fault_slow_views_ms(int rank) {
    long long r, ms;
    return env_pair(FSDP_ENV_TEST_SLOW_VIEWS, &r, &ms) && r == rank && ms > 0 && ms < 600000 ? (int)ms : 0;
}

int fsdp_fault_torn_shard(int64_t step, int rank) {
    long long k, r;
    return env_pair(FSDP_ENV_TEST_TORN_SHARD, &k, &r) && k == step && r == rank;
}

int fsdp_fault_desync(int rank, int unit, int64_t step) {
    const char *v = fsdp_tunable(FSDP_ENV_TEST_DESYNC);
    long long r, u, k;
    int n = v ? sscanf(v, "%lld:%lld:%lld", &r, &u, &k) : 0;
    return n >= 2 && r == rank && u == unit && (n == 2 || k == step);
}

int fsdp_fault_at_step(fsdp_tunable_id var, int64_t step, int rank) {
    const char *v = fsdp_tunable(var);
    if (!v || !*v) return 0;
    char *end = NULL;
    long long k = strtoll(v, &end, 10);
    if (end == v || k != step) return 0;
    return *end != ':' || strtoll(end + 1, NULL, 10) == rank;
}

void fsdp_fault_die(void) {
    fflush(NULL);
    raise(SIGKILL);
}

void fsdp_fault_tear_and_die(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0) (void)truncate(path, sb.st_size / 2);
    fsdp_fault_die();
}
