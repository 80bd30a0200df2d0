// device_cuda.c: the CUDA device ("cuda", "cuda:N"): device memory from cudaMalloc, pinned host memory,
// two CUDA streams (compute, comm) with a cuBLAS handle each, CUDA events, asynchronous copies. Kernels
// are kernels/cuda/'s table; collectives are device_comm.c's, staged through pinned host memory.
// Built when CMake finds CUDA (FSDP_CUDA); without it the device cannot be opened and says why.
#include "device/device_cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FSDP_HAVE_CUDA

fsdp_status dev_cuda_open(fsdp_dev *d, int ordinal) {
    (void)d, (void)ordinal;
    return fsdp_error(FSDP_ERR_INVALID_ARG,
                      "device cuda: this build has no CUDA (configure with -DFSDP_CUDA=ON where nvcc and the CUDA "
                      "libraries are installed)");
}
void dev_cuda_close(fsdp_dev *d) { (void)d; }
void *dev_cuda_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    (void)d, (void)bytes, (void)cat;
    return NULL;
}
void dev_cuda_free(fsdp_dev *d, void *p) { (void)d, (void)p; }
void *dev_cuda_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    (void)d, (void)bytes, (void)cat;
    return NULL;
}
void dev_cuda_host_free(fsdp_dev *d, void *p) { (void)d, (void)p; }
fsdp_status dev_cuda_register(fsdp_dev *d, void *p, size_t bytes) {
    (void)d, (void)p, (void)bytes;
    return FSDP_ERR_INTERNAL;
}
void dev_cuda_unregister(fsdp_dev *d, void *p) { (void)d, (void)p; }
fsdp_status dev_cuda_stream_synchronize(fsdp_stream *s) {
    (void)s;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_event_create(fsdp_event *e) {
    (void)e;
    return FSDP_ERR_INTERNAL;
}
void dev_cuda_event_destroy(fsdp_event *e) { (void)e; }
fsdp_status dev_cuda_event_record(fsdp_event *e, fsdp_stream *s) {
    (void)e, (void)s;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    (void)s, (void)e;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_event_synchronize(fsdp_event *e) {
    (void)e;
    return FSDP_ERR_INTERNAL;
}
int dev_cuda_event_query(fsdp_event *e) {
    (void)e;
    return 1;
}
fsdp_status dev_cuda_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    (void)s, (void)dst, (void)src, (void)bytes;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    (void)s, (void)dst, (void)dpitch, (void)src, (void)spitch, (void)row_bytes, (void)rows;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    (void)s, (void)dst, (void)byte, (void)bytes;
    return FSDP_ERR_INTERNAL;
}
fsdp_status dev_cuda_stream_status(fsdp_stream *s) {
    (void)s;
    return FSDP_OK;
}
void *dev_cuda_stage(fsdp_stream *s, size_t bytes) {
    (void)s, (void)bytes;
    return NULL;
}
const struct fsdp_kernels *dev_cuda_kernels(int bf16) {
    (void)bf16;
    return NULL;
}

#else  // FSDP_HAVE_CUDA

#include <cuda_runtime.h>

#include "device/cuda_blas.h"
#include "core/tunables.h"

#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)  // cuBLAS's advice for Hopper

static fsdp_status cuda_fail(cudaError_t e, const char *what) {
    (void)cudaGetLastError();  // clear a sticky launch error where it is not fatal
    return fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU_TRY(call, what)                                 \
    do {                                                   \
        cudaError_t cu_e_ = (call);                        \
        if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, what); \
    } while (0)

static void note(fsdp_stream *s, fsdp_status st) {
    if (st == FSDP_OK || s->err != FSDP_OK) return;
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", fsdp_last_error());
}

fsdp_status dev_cuda_stream_status(fsdp_stream *s) {
    if (s->err == FSDP_OK) return FSDP_OK;
    fsdp_status st = s->err;
    s->err = FSDP_OK;
    return fsdp_error(st, "%s", s->err_msg);
}

// Local rank from the launcher's environment (Open MPI, MPICH/Hydra, Slurm), else 0.
static int local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

fsdp_status dev_cuda_open(fsdp_dev *d, int ordinal) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "device cuda: no GPU is visible (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
    if (ordinal < 0) ordinal = local_rank() % count;
    if (ordinal >= count)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "device cuda:%d: only %d GPU%s visible (cuda:0 .. cuda:%d)", ordinal,
                          count, count == 1 ? " is" : "s are", count - 1);
    CU_TRY(cudaSetDevice(ordinal), "cudaSetDevice");
    d->cuda_ordinal = ordinal;
    const char *tf32 = fsdp_tunable(FSDP_ENV_ALLOW_TF32);
    int allow_tf32 = tf32 && *tf32 && strcmp(tf32, "0") != 0;
    const fsdp_cublas_api *blas = fsdp_cublas();  // loaded here, by the first CUDA device (cuda_blas.h)
    if (!blas) return FSDP_ERR_INTERNAL;            // the reason is the last error
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        fsdp_stream *s = &d->streams[i];
        cudaStream_t cs;
        CU_TRY(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate");
        s->cu = cs;
        cublasHandle_t h;
        cublasStatus_t bs = blas->create(&h);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return fsdp_error(FSDP_ERR_INTERNAL, "device cuda: cublasCreate: %s", blas->status_string(bs));
        s->cublas = h;
        blas->set_stream(h, cs);
        blas->set_math_mode(h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        CU_TRY(cudaMalloc(&s->workspace, CUDA_WORKSPACE_BYTES), "cudaMalloc (cuBLAS workspace)");
        blas->set_workspace(h, s->workspace, CUDA_WORKSPACE_BYTES);
    }
    return FSDP_OK;
}

void dev_cuda_close(fsdp_dev *d) {
    if (d->cuda_ordinal >= 0) cudaSetDevice(d->cuda_ordinal);
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        fsdp_stream *s = &d->streams[i];
        if (s->cu) cudaStreamSynchronize((cudaStream_t)s->cu);
        if (s->cublas) fsdp_cublas_loaded()->destroy((cublasHandle_t)s->cublas);  // made only once loaded
        if (s->workspace) cudaFree(s->workspace);
        if (s->scratch) cudaFree(s->scratch), fsdp_mem_track(FSDP_MEM_WORKSPACE, s->scratch_bytes, -1);
        if (s->stage) cudaFreeHost(s->stage), fsdp_mem_track(FSDP_MEM_COMM, s->stage_bytes, -1);
        if (s->cu) cudaStreamDestroy((cudaStream_t)s->cu);
        s->cu = s->cublas = s->workspace = s->scratch = s->stage = NULL;
        s->scratch_bytes = s->stage_bytes = 0;
    }
    for (int i = 0; i < d->cuda_n_allocs; i++) {
        fsdp_mem_track((fsdp_mem_category)d->cuda_allocs[i].cat, d->cuda_allocs[i].bytes, -1);
        cudaFree(d->cuda_allocs[i].p);
    }
    free(d->cuda_allocs);
    d->cuda_allocs = NULL, d->cuda_n_allocs = d->cuda_cap_allocs = 0;
}

// The accounting record of p, or -1.
static int find_alloc(const fsdp_dev *d, const void *p) {
    for (int i = d->cuda_n_allocs - 1; i >= 0; i--)
        if (d->cuda_allocs[i].p == p) return i;
    return -1;
}

static int remember(fsdp_dev *d, void *p, size_t bytes, fsdp_mem_category cat, int pinned) {
    if (d->cuda_n_allocs == d->cuda_cap_allocs) {
        int cap = d->cuda_cap_allocs ? 2 * d->cuda_cap_allocs : 256;
        dev_cuda_alloc_rec *n = realloc(d->cuda_allocs, (size_t)cap * sizeof *n);
        if (!n) return 0;
        d->cuda_allocs = n, d->cuda_cap_allocs = cap;
    }
    d->cuda_allocs[d->cuda_n_allocs++] = (dev_cuda_alloc_rec){.p = p, .bytes = bytes, .cat = (int)cat, .pinned = pinned};
    fsdp_mem_track(cat, bytes, +1);
    return 1;
}

static void forget(fsdp_dev *d, int i) {
    fsdp_mem_track((fsdp_mem_category)d->cuda_allocs[i].cat, d->cuda_allocs[i].bytes, -1);
    d->cuda_allocs[i] = d->cuda_allocs[--d->cuda_n_allocs];
}

void *dev_cuda_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    void *p = NULL;
    size_t n = bytes ? (bytes + 255) & ~(size_t)255 : 256;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda:%d: out of memory allocating %zu bytes for %s (%zu of %zu MiB free)",
                   d->cuda_ordinal, bytes, fsdp_mem_category_name(cat), free_b >> 20, total_b >> 20);
        return NULL;
    }
    // zero-filled on return, ordered before any stream's later work (the streams do not wait for the
    // legacy stream: complete it here; allocations are made before the steps, not inside them)
    if (cudaMemset(p, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess || !remember(d, p, bytes, cat, 0)) {
        (void)cudaGetLastError();
        cudaFree(p);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda:%d: clearing %zu new bytes failed", d->cuda_ordinal, bytes);
        return NULL;
    }
    return p;
}

void dev_cuda_free(fsdp_dev *d, void *p) {
    int i = find_alloc(d, p);
    FSDP_ASSERT(i >= 0 && !d->cuda_allocs[i].pinned);  // not memory of this device
    forget(d, i);
    cudaFree(p);  // waits for the device's work (which may still use p)
}

void *dev_cuda_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    void *p = NULL;
    size_t n = bytes ? bytes : 64;
    if (cudaHostAlloc(&p, n, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        (void)cudaGetLastError();
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of pinned host memory allocating %zu bytes for %s", bytes,
                   fsdp_mem_category_name(cat));
        return NULL;
    }
    memset(p, 0, n);
    if (!remember(d, p, bytes, cat, 1)) {
        cudaFreeHost(p);
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of memory");
        return NULL;
    }
    return p;
}

void dev_cuda_host_free(fsdp_dev *d, void *p) {
    int i = find_alloc(d, p);
    FSDP_ASSERT(i >= 0 && d->cuda_allocs[i].pinned);
    forget(d, i);
    cudaDeviceSynchronize();  // copies in flight may still read or write p
    cudaFreeHost(p);
}

fsdp_status dev_cuda_register(fsdp_dev *d, void *p, size_t bytes) {
    (void)d;
    CU_TRY(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped), "cudaHostRegister");
    return FSDP_OK;
}

void dev_cuda_unregister(fsdp_dev *d, void *p) {
    (void)d;
    cudaDeviceSynchronize();
    cudaHostUnregister(p);
}

fsdp_status dev_cuda_stream_synchronize(fsdp_stream *s) {
    CU_TRY(cudaStreamSynchronize((cudaStream_t)s->cu), "cudaStreamSynchronize");
    return dev_cuda_stream_status(s);
}

fsdp_status dev_cuda_event_create(fsdp_event *e) {
    cudaEvent_t ev;
    CU_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    e->cu = ev;
    return FSDP_OK;
}

void dev_cuda_event_destroy(fsdp_event *e) {
    if (e->cu) cudaEventDestroy((cudaEvent_t)e->cu);
}

fsdp_status dev_cuda_event_record(fsdp_event *e, fsdp_stream *s) {
    CU_TRY(cudaEventRecord((cudaEvent_t)e->cu, (cudaStream_t)s->cu), "cudaEventRecord");
    e->stream = s;
    return dev_cuda_stream_status(s);
}

fsdp_status dev_cuda_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    if (!e->stream) return FSDP_OK;  // never recorded: complete
    CU_TRY(cudaStreamWaitEvent((cudaStream_t)s->cu, (cudaEvent_t)e->cu, 0), "cudaStreamWaitEvent");
    return FSDP_OK;
}

fsdp_status dev_cuda_event_synchronize(fsdp_event *e) {
    if (!e->stream) return FSDP_OK;
    CU_TRY(cudaEventSynchronize((cudaEvent_t)e->cu), "cudaEventSynchronize");
    return dev_cuda_stream_status(e->stream);
}

int dev_cuda_event_query(fsdp_event *e) {
    if (!e->stream) return 1;
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->cu);
    if (r == cudaErrorNotReady) return 0;
    if (r != cudaSuccess) note(e->stream, cuda_fail(r, "cudaEventQuery"));
    return 1;
}

// Host memory handed to a copy may be pageable: CUDA then stages it (a d2h into pageable memory
// returns once complete; an h2d's source may be reused on return), which keeps the CPU device's rule
// that ordinary host memory works. cudaMemcpyDefault: UVA tells the direction.
fsdp_status dev_cuda_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!bytes || dst == src) return FSDP_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s->cu), "cudaMemcpyAsync");
    return FSDP_OK;
}

fsdp_status dev_cuda_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!rows || !row_bytes) return FSDP_OK;
    CU_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, row_bytes, rows, cudaMemcpyDefault, (cudaStream_t)s->cu),
           "cudaMemcpy2DAsync");
    return FSDP_OK;
}

fsdp_status dev_cuda_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    FSDP_CHECK(dev_cuda_stream_status(s));
    if (!bytes) return FSDP_OK;
    CU_TRY(cudaMemsetAsync(dst, byte, bytes, (cudaStream_t)s->cu), "cudaMemsetAsync");
    return FSDP_OK;
}

void *dev_cuda_stage(fsdp_stream *s, size_t bytes) {
    if (bytes <= s->stage_bytes) return s->stage;
    if (s->stage) {
        cudaStreamSynchronize((cudaStream_t)s->cu);
        fsdp_mem_track(FSDP_MEM_COMM, s->stage_bytes, -1);
        cudaFreeHost(s->stage);
        s->stage = NULL, s->stage_bytes = 0;
    }
    size_t n = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes + bytes / 4;
    if (cudaHostAlloc(&s->stage, n, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        s->stage = NULL;
        fsdp_error(FSDP_ERR_NOMEM, "device cuda: out of pinned host memory for a %zu-byte collective", bytes);
        return NULL;
    }
    s->stage_bytes = n;
    fsdp_mem_track(FSDP_MEM_COMM, n, +1);
    return s->stage;
}

const struct fsdp_kernels *dev_cuda_kernels(int bf16) { return fsdp_kernels_cuda(bf16); }

// ---------------------------------------------------------------------------------------------
// For the kernels (device_cuda.h)

void *fsdp_cuda_stream_handle(fsdp_stream *s) { return s->cu; }
void *fsdp_cuda_cublas_handle(fsdp_stream *s) { return s->cublas; }

void *fsdp_cuda_scratch(fsdp_stream *s, size_t bytes) {
    if (bytes <= s->scratch_bytes) return s->scratch;
    size_t n = bytes + bytes / 4 + 4096;
    cudaStreamSynchronize((cudaStream_t)s->cu);  // the old buffer may still be in use
    if (s->scratch) {
        cudaFree(s->scratch);
        fsdp_mem_track(FSDP_MEM_WORKSPACE, s->scratch_bytes, -1);
    }
    s->scratch = NULL, s->scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&s->scratch, n);
    if (e != cudaSuccess) {
        s->scratch = NULL;
        note(s, cuda_fail(e, "cudaMalloc (kernel scratch)"));
        return NULL;
    }
    s->scratch_bytes = n;
    fsdp_mem_track(FSDP_MEM_WORKSPACE, n, +1);
    return s->scratch;
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
        note(s, fsdp_error(FSDP_ERR_INTERNAL, "device cuda: %s: library status %d (%s)", what, library_status,
                           blas ? blas->status_string((cublasStatus_t)library_status) : "cuBLAS not loaded"));
        return;
    }
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_each_kernel()) e = cudaStreamSynchronize((cudaStream_t)s->cu);
    if (e != cudaSuccess) note(s, cuda_fail(e, what));
}

#endif  // FSDP_HAVE_CUDA
