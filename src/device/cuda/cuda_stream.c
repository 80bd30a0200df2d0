// cuda_stream.c: the cuda backend's work on one stream, for the device (cuda_device.c), its collectives
// (cuda_comm.c) and its kernels (cuda_device.h): failures noted on the stream, synchronizing, copies,
// the pinned stage a collective goes through, the native handles and the kernels' scratch.
#include "device/cuda/cuda_backend.h"

#ifdef FSDP_HAVE_CUDA

#include <stdio.h>
#include <string.h>

#include "core/tunables.h"
#include "device/cuda/cuda_blas.h"
#include "device/cuda/cuda_state.h"

fsdp_status dev_cuda_fail(cudaError_t e, const char *what) {
    (void)cudaGetLastError();  // clear a sticky launch error where it is not fatal
    return fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

fsdp_status dev_cuda_stream_status(fsdp_stream *s) { return dev_take_error(s); }

fsdp_status dev_cuda_stream_synchronize(fsdp_stream *s) {
    CU_TRY(cudaStreamSynchronize((cudaStream_t)CS(s)->cu), "cudaStreamSynchronize");
    return dev_cuda_stream_status(s);
}

// Host memory handed to a copy may be pageable: CUDA then stages it (a d2h into pageable memory
// returns once complete; an h2d's source may be reused on return), which keeps the CPU device's rule
// that ordinary host memory works. cudaMemcpyDefault: UVA tells the direction.
fsdp_status dev_cuda_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!bytes || dst == src) return FSDP_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)CS(s)->cu), "cudaMemcpyAsync");
    return FSDP_OK;
}

void *dev_cuda_stage(fsdp_stream *s, size_t bytes) {
    if (bytes <= CS(s)->stage_bytes) return CS(s)->stage;
    if (CS(s)->stage) {
        cudaStreamSynchronize((cudaStream_t)CS(s)->cu);
        fsdp_mem_track(FSDP_MEM_COMM, CS(s)->stage_bytes, -1);
        cudaFreeHost(CS(s)->stage);
        CS(s)->stage = NULL, CS(s)->stage_bytes = 0;
    }
    size_t n = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes + bytes / 4;
    if (cudaHostAlloc(&CS(s)->stage, n, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        CS(s)->stage = NULL;
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of pinned host memory for a %zu-byte collective", bytes);
        return NULL;
    }
    CS(s)->stage_bytes = n;
    fsdp_mem_track(FSDP_MEM_COMM, n, +1);
    return CS(s)->stage;
}

// ---------------------------------------------------------------------------------------------
// For the kernels (device_cuda.h)

void *fsdp_cuda_stream_handle(fsdp_stream *s) { return CS(s)->cu; }
void *fsdp_cuda_cublas_handle(fsdp_stream *s) { return CS(s)->cublas; }

void *fsdp_cuda_scratch(fsdp_stream *s, size_t bytes) {
    if (bytes <= CS(s)->scratch_bytes) return CS(s)->scratch;
    size_t n = bytes + bytes / 4 + 4096;
    cudaStreamSynchronize((cudaStream_t)CS(s)->cu);  // the old buffer may still be in use
    if (CS(s)->scratch) {
        cudaFree(CS(s)->scratch);
        fsdp_mem_track(FSDP_MEM_WORKSPACE, CS(s)->scratch_bytes, -1);
    }
    CS(s)->scratch = NULL, CS(s)->scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&CS(s)->scratch, n);
    if (e != cudaSuccess) {
        CS(s)->scratch = NULL;
        dev_note_error(s, dev_cuda_fail(e, "cudaMalloc (kernel scratch)"));
        return NULL;
    }
    CS(s)->scratch_bytes = n;
    fsdp_mem_track(FSDP_MEM_WORKSPACE, n, +1);
    return CS(s)->scratch;
}

// FSDP_CUDA_SYNC=1: every kernel is followed by a stream synchronize, so an asynchronous failure is
// reported under the kernel that caused it (debugging; slow).
static int sync_each_kernel(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = fsdp_tunable(FSDP_ENV_CUDA_SYNC);
        v = e && *e && strcmp(e, "0") != 0;
    }
    return v;
}

void fsdp_cuda_check(fsdp_stream *s, const char *what, int library_status) {
    if (library_status != 0) {
        const fsdp_cublas_api *blas = fsdp_cublas_loaded();  // a cuBLAS status: cuBLAS is loaded
        dev_note_error(s, fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s: library status %d (%s)", what, library_status,
                           blas ? blas->status_string((cublasStatus_t)library_status) : "cuBLAS not loaded"));
        return;
    }
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_each_kernel()) e = cudaStreamSynchronize((cudaStream_t)CS(s)->cu);
    if (e != cudaSuccess) dev_note_error(s, dev_cuda_fail(e, what));
}

#endif  // FSDP_HAVE_CUDA
