// cuda_nccl_api.c: NCCL loaded at first use (cuda_nccl_api.h). Tried in order: FSDP_NCCL_LIBRARY, the
// soname FSDP_NCCL_SONAME (libnccl.so.2: the loader's search path, as a linked library would be found),
// the file the build found (FSDP_NCCL_PATH); it stays loaded until exit.
#ifdef FSDP_HAVE_NCCL
#include "device/cuda/cuda_nccl_api.h"

#include <pthread.h>
#include <stdio.h>

#include "core/status.h"
#include "core/tunables.h"
#include "device/cuda/cuda_dlopen.h"

static fsdp_nccl_api api;
static _Atomic int loaded;   // 1: api is complete (set once, inside `once`)
static int version;          // ncclGetVersion's, once loaded
static char why[640];        // the failure, when not loaded
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define BIND(lib, name, field) cuda_dl_bind(lib, name, &api.field, sizeof api.field, "NCCL", why, sizeof why)

static void load(void) {
    const char *const tried[] = {fsdp_tunable(FSDP_ENV_NCCL_LIBRARY), FSDP_NCCL_SONAME, FSDP_NCCL_PATH};
    char errors[512];
    void *lib = cuda_dl_open_first(tried, sizeof tried / sizeof tried[0], errors, sizeof errors);
    if (!lib) {
        snprintf(why, sizeof why, "cannot load NCCL (%s; FSDP_NCCL_LIBRARY names the file)", errors);
        return;
    }
    int ok = BIND(lib, "ncclGetVersion", get_version) && BIND(lib, "ncclGetUniqueId", get_unique_id) &&
             BIND(lib, "ncclCommInitRank", comm_init_rank) && BIND(lib, "ncclCommDestroy", comm_destroy) &&
             BIND(lib, "ncclCommAbort", comm_abort) && BIND(lib, "ncclCommGetAsyncError", comm_get_async_error) &&
             BIND(lib, "ncclGetErrorString", get_error_string) && BIND(lib, "ncclGetLastError", get_last_error) &&
             BIND(lib, "ncclAllGather", all_gather) && BIND(lib, "ncclReduceScatter", reduce_scatter) &&
             BIND(lib, "ncclAllReduce", all_reduce) && BIND(lib, "ncclBroadcast", broadcast);
    if (!ok) return;
    if (api.get_version(&version) != ncclSuccess || version < 21003) {  // bf16 and ncclAvg: 2.10.3
        snprintf(why, sizeof why, "NCCL %d is older than 2.10.3 (bf16 and ncclAvg)", version);
        return;
    }
    loaded = 1;
}

const fsdp_nccl_api *fsdp_nccl(void) {
    pthread_once(&once, load);
    if (loaded) return &api;
    fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s", why);
    return NULL;
}

int fsdp_nccl_version(void) { return loaded ? version : 0; }

#else
typedef int fsdp_no_nccl_api;  // without NCCL this file is empty (ISO C wants a declaration)
#endif
