// cuda_nccl_api.h: the NCCL functions the cuda backend's NCCL transport (cuda_nccl.c) calls, loaded with
// dlopen by the first communicator (fsdp_nccl), not linked: libnccl.so.2 is ~210 MB, and a linked build
// would map it into every process, CPU runs included (as cuBLAS: cuda_blas.h). The prototypes are NCCL's
// own (nccl.h), so every call is type-checked as a direct call would be. Only for device/cuda/; needs
// nccl.h (FSDP_HAVE_NCCL builds only).
#pragma once
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ncclResult_t (*get_version)(int *version);                 // ncclGetVersion
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);          // ncclGetUniqueId
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*comm_abort)(ncclComm_t comm);
    ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t *async_error);
    const char *(*get_error_string)(ncclResult_t result);
    const char *(*get_last_error)(ncclComm_t comm);
    ncclResult_t (*all_gather)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                               cudaStream_t stream);
    ncclResult_t (*reduce_scatter)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                   ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*broadcast)(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                              ncclComm_t comm, cudaStream_t stream);
} fsdp_nccl_api;

// NCCL, loaded on the first call (thread-safe; later calls return the same table): FSDP_NCCL_LIBRARY when
// set (a file, e.g. a Python wheel's nvidia/nccl/lib/libnccl.so.2), else the soname libnccl.so.2 (the
// loader's search path), else the file the build found. NULL when none loads or one lacks a function,
// with the reason (the names tried, dlerror) as the last error (fsdp_last_error).
const fsdp_nccl_api *fsdp_nccl(void);
// The loaded library's version as NCCL encodes it (2.28.9: 22809), 0 before fsdp_nccl() loaded it.
int fsdp_nccl_version(void);

#ifdef __cplusplus
}
#endif
