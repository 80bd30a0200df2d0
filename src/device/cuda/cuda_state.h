// cuda_state.h: the cuda backend's state behind fsdp_dev.ctx and fsdp_stream.ctx, shared by
// cuda_device.c (the device) and cuda_stream.c (what the kernels and collectives do on a stream).
// CUDA builds only (FSDP_HAVE_CUDA): it includes the CUDA runtime's header.
#pragma once
#include <cuda_runtime.h>

#include "device/cuda/cuda_backend.h"

// One allocation, for accounting and freeing.
typedef struct {
    void *p;       // (bytes,) device memory (cudaMalloc) or pinned host memory (cudaHostAlloc)
    size_t bytes;  // as requested (accounted)
    int cat;       // fsdp_mem_category
    int pinned;    // 1: host memory
} cuda_alloc_rec;

// fsdp_stream.ctx: the native handles, and kernel scratch
typedef struct {
    void *cu, *cublas;     // cudaStream_t, cublasHandle_t
    void *workspace;       // the cuBLAS workspace (device memory)
    void *scratch;         // (scratch_bytes,) device memory, fsdp_cuda_scratch
    size_t scratch_bytes;
    void *stage;           // (stage_bytes,) pinned host memory the stream's collectives stage through
    size_t stage_bytes;
} cuda_stream;

// fsdp_dev.ctx
typedef struct {
    int ordinal;                          // the GPU; -1 before it is chosen
    cuda_alloc_rec *allocs;               // (n_allocs,) live allocations
    int n_allocs, cap_allocs;
    cuda_stream streams[FSDP_STREAM_COUNT];
    void *nccl;                           // the NCCL transport's records of process groups (cuda_nccl.c), or NULL
} cuda_dev;

static inline cuda_stream *CS(const fsdp_stream *s) { return s->ctx; }
static inline cuda_dev *CD(const fsdp_dev *d) { return d->ctx; }

// A failed CUDA call as a status naming `what` (clears a sticky launch error where it is not fatal).
fsdp_status dev_cuda_fail(cudaError_t e, const char *what);

#define CU_TRY(call, what)                                           \
    do {                                                             \
        cudaError_t cu_e_ = (call);                                  \
        if (cu_e_ != cudaSuccess) return dev_cuda_fail(cu_e_, what); \
    } while (0)
