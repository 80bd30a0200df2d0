// cuda_blas.c: cuBLAS loaded at first use (cuda_blas.h). The library is looked for by its soname
// (FSDP_CUBLAS_SONAME, e.g. libcublas.so.13: the loader's search path, as a linked library would be
// found), then at the file the build linked against (FSDP_CUBLAS_PATH); it stays loaded until exit.
#ifdef FSDP_HAVE_CUDA
#include "device/cuda/cuda_blas.h"

#include <pthread.h>
#include <stdio.h>

#include "core/status.h"
#include "device/cuda/cuda_dlopen.h"

static fsdp_cublas_api api;
static _Atomic int loaded;   // 1: api is complete (set once, inside `once`)
static char why[512];        // the failure, when not loaded
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define BIND(lib, name, field) cuda_dl_bind(lib, name, &api.field, sizeof api.field, "cuBLAS", why, sizeof why)

static void load(void) {
    const char *const tried[] = {FSDP_CUBLAS_SONAME, FSDP_CUBLAS_PATH};
    char errors[384];
    void *lib = cuda_dl_open_first(tried, sizeof tried / sizeof tried[0], errors, sizeof errors);
    if (!lib) {
        snprintf(why, sizeof why, "cannot load cuBLAS (%s)", errors);
        return;
    }
    // the exported names behind cublas_v2.h's macros (cublasCreate is cublasCreate_v2, ...)
    loaded = BIND(lib, "cublasCreate_v2", create) && BIND(lib, "cublasDestroy_v2", destroy) &&
             BIND(lib, "cublasSetStream_v2", set_stream) && BIND(lib, "cublasSetMathMode", set_math_mode) &&
             BIND(lib, "cublasSetWorkspace_v2", set_workspace) && BIND(lib, "cublasGemmEx", gemm_ex) &&
             BIND(lib, "cublasGetStatusString", status_string);
}

const fsdp_cublas_api *fsdp_cublas(void) {
    pthread_once(&once, load);
    if (loaded) return &api;
    fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s", why);
    return NULL;
}

const fsdp_cublas_api *fsdp_cublas_loaded(void) { return loaded ? &api : NULL; }

#else
typedef int fsdp_no_cuda_blas;  // without CUDA this file is empty (ISO C wants a declaration)
#endif
