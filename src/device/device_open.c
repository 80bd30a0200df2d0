// device_open.c: the backends a device name can choose (cpu, guard, cuda), opening and closing a
// device, and the process's default device.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/tunables.h"
#include "device/backend_impl.h"
#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_backend.h"
#include "device/guard/guard_device.h"

// "cpu", "guard", "cuda" (the local rank's GPU: *ordinal -1) or "cuda:N"; NULL when it names none
static const fsdp_backend_i *parse_name(const char *name, int *ordinal) {
    const fsdp_backend_i *const backends[] = {&fsdp_backend_cpu, &fsdp_backend_guard, &fsdp_backend_cuda};
    *ordinal = -1;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcasecmp(name, backends[i]->name) == 0) return backends[i];
    if (strncasecmp(name, "cuda:", 5) == 0) {
        char *end;
        long n = strtol(name + 5, &end, 10);
        if (end == name + 5 || *end || n < 0 || n > 1024) return NULL;
        *ordinal = (int)n;
        return &fsdp_backend_cuda;
    }
    return NULL;
}

// FSDP_COMM_PROGRESS: "poll" (the default: an MPI_Test between kernels moves the collectives in flight)
// or "none" (they move only when waited for; for measuring what the polls buy). *on: the setting.
static fsdp_status progress_setting(int *on) {
    const char *v = fsdp_tunable(FSDP_ENV_COMM_PROGRESS);
    *on = 1;
    if (!v || !*v || strcasecmp(v, "poll") == 0) return FSDP_OK;
    if (strcasecmp(v, "none") == 0) {
        *on = 0;
        return FSDP_OK;
    }
    return fsdp_error(FSDP_ERR_INVALID_ARG, "FSDP_COMM_PROGRESS=%s: expected poll or none", v);
}

fsdp_status fsdp_dev_open(const char *name, fsdp_dev **out) {
    *out = NULL;
    int progress;
    FSDP_CHECK(progress_setting(&progress));
    if (!name || !*name) name = fsdp_tunable(FSDP_ENV_DEVICE);
    if (!name || !*name) name = "cpu";
    int ordinal;
    const fsdp_backend_i *iface = parse_name(name, &ordinal);
    if (!iface)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "unknown device '%s' (expected cpu, guard, cuda or cuda:N)", name);
    fsdp_dev *d = calloc(1, sizeof *d);
    if (!d) return fsdp_error(FSDP_ERR_NOMEM, "out of memory opening device %s", name);
    d->iface = iface;
    d->progress = progress;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        d->streams[i].dev = d;
        d->streams[i].id = (fsdp_stream_id)i;
    }
    fsdp_status st = iface->open(d, ordinal);
    if (st != FSDP_OK) {
        free(d);
        return st;
    }
    *out = d;
    return FSDP_OK;
}

void fsdp_dev_close(fsdp_dev *d) {
    if (!d) return;
    // (retiring the streams' collectives also makes the frees deferred behind them)
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) dev_stream_retire_all(&d->streams[i]);
    d->iface->close(d);
    free(d);
}

static fsdp_dev *default_dev;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void open_default(void) {
    const char *env = fsdp_tunable(FSDP_ENV_DEVICE);
    int ordinal;
    if (env && *env && !parse_name(env, &ordinal)) {
        fprintf(stderr, "fsdp: FSDP_DEVICE=%s: unknown device (expected cpu, guard, cuda or cuda:N)\n", env);
        abort();
    }
    if (fsdp_dev_open(env, &default_dev) != FSDP_OK) {
        fprintf(stderr, "fsdp: FSDP_DEVICE=%s: %s\n", env ? env : "", fsdp_last_error());
        abort();
    }
}

fsdp_dev *fsdp_dev_default(void) {
    pthread_once(&default_once, open_default);
    return default_dev;
}
